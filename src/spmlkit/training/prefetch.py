"""Batches moved to the GPU one step ahead, on a stream of their own.

Why (docs/architecture.md, "Feeding the GPU"). Copying a batch to the GPU on the stream that
runs the model queues the copy behind the previous step: the copy engine and the compute units
take turns. Issuing the copy of batch k+1 on a side stream *before* batch k is handed to the
training step lets the two overlap, so the GPU computes while the next batch arrives. Whatever
else a batch needs before the step (nvJPEG decoding and resizing, :mod:`spmlkit.data.gpu_decode`)
runs on that side stream too.

Two rules make this safe with PyTorch's caching allocator, which hands a freed block to the
next allocation *on the stream that owns it*:

* the step's stream waits for the batch's own event (recorded after its upload), not for the
  whole side stream, which may already hold the next upload;
* every tensor handed over is marked as used by the step's stream (``record_stream``), so its
  memory -- allocated on the side stream -- is not reused there before the step has read it.

Pinned host memory (the loader's ``pin_memory``) makes the copies asynchronous; PyTorch's host
allocator keeps a pinned buffer alive until the copy that reads it has run. Off CUDA the upload
is applied in place, in order, with nothing ahead.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Iterator, TypeVar

import torch

__all__ = ["to_device_ahead"]

T = TypeVar("T")


def to_device_ahead(batches: Iterable[T], device: torch.device, upload: Callable[[T], Any]) -> Iterator[Any]:
    """``upload(batch)`` for each of ``batches``, the next one's upload under way on a side stream
    (CUDA) while the current one is used. ``upload`` returns a tensor or a tuple/list of them
    (None entries allowed)."""
    if device.type != "cuda":
        for batch in batches:
            yield upload(batch)
        return
    side = _side_stream(device.index if device.index is not None else torch.cuda.current_device())
    pending: tuple[Any, torch.cuda.Event] | None = None
    for batch in batches:
        with torch.cuda.stream(side):
            moved = upload(batch)
            ready = torch.cuda.Event()
            ready.record(side)
        if pending is not None:
            yield _hand_over(*pending, device)
        pending = (moved, ready)
    if pending is not None:
        yield _hand_over(*pending, device)


@functools.lru_cache(maxsize=None)
def _side_stream(index: int) -> torch.cuda.Stream:
    """The one side stream of GPU ``index``, kept for the process.

    ``torch.cuda.Stream()`` takes the next stream of a pool of 32, and the caching allocator
    reuses a freed block only on the stream it was allocated on: a new stream for every pass
    (each epoch, each prediction) would leave the blocks of earlier passes cached on streams
    nothing uses any more, and reserved memory would grow until an allocation fails. One stream
    shared by every pass is as safe: each batch is handed over by its own event."""
    return torch.cuda.Stream(torch.device("cuda", index))


def _hand_over(moved: Any, ready: torch.cuda.Event, device: torch.device) -> Any:
    stream = torch.cuda.current_stream(device)
    stream.wait_event(ready)
    for tensor in moved if isinstance(moved, (tuple, list)) else (moved,):
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda":
            tensor.record_stream(stream)
    return moved
