"""Images as the model sees them: pixels prepared on the host, arithmetic done on the device.

Every image dataset of spmlkit hands out **uint8 pixels** of the run's size, ``[S, S, c]``
(height, width, channels; c = 3 for RGB photographs, 1 for the grey digits mosaic), and an
:class:`ImageTransform` says how those pixels became what they are and what turns them into
the model's input. The transform has two halves:

* the **host half** (:meth:`ImageTransform.read`): open the file, convert its colours, resize
  to ``S x S`` -- work that needs the CPU (PIL) and runs in the loader workers;
* the **device half** (:meth:`ImageTransform.normalize`): ``uint8 -> float``, divide by 255,
  subtract the mean and divide by the standard deviation per channel -- a few element-wise
  kernels that run wherever the model runs, on a whole batch at once.

Why split it there (docs/architecture.md, "Feeding the GPU"). A batch of 64 RGB images at
448 x 448 is 38 MB of uint8 pixels but 154 MB of float32: handing the loader's output over as
uint8 moves a quarter of the bytes through shared memory, pinned memory and the PCIe bus, and
the arithmetic that would cost a CPU core milliseconds per image is free on a GPU. Random
horizontal flips are applied to the uint8 batch on the device too (:func:`flip_rows`).

The values are exactly those of the classic per-image transform (PIL resize, ``ToTensor``,
``Normalize``): the same float32 operations in the same order, applied to a batch instead of
one image (docs/protocol.md, "Training protocols": resize to ``S x S`` without a crop, flip with
probability 0.5 for training, ImageNet normalisation).

A dataset can read a whole batch in one call (:meth:`ImageFileDataset.pixels`): from a
pre-resized cache (``spmlkit prepare --cache-size S``, :mod:`spmlkit.data.formats.image_cache`)
that is one gather from a memory-mapped array, no Python call per image.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from ..cpus import usable_cpus
from ..errors import InputError
from .image_decode import decode_image

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MAX_AUTO_WORKERS",
    "ImageFileDataset",
    "ImageTransform",
    "PixelDataset",
    "PixelStore",
    "UnreadableImageError",
    "collate_skip_bad",
    "flip_rows",
    "loader_workers",
    "new_pixel_batch",
    "resize_step",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: at most this many loader workers per process when the count is automatic. Workers hand over
#: uint8 batches (a few tens of MB each in shared memory), so memory no longer limits them; the
#: cap keeps a process from starting dozens of workers on a large shared machine. 16 PIL
#: workers decode and resize roughly 2,000-3,000 COCO-sized JPEGs per second.
MAX_AUTO_WORKERS = 16


def loader_workers(requested: int | None) -> int:
    """DataLoader worker processes for ``requested`` (a run's ``num_workers``).

    An explicit number, 0 included (load in the main process), is used as given. None means
    automatic: the CPUs this process may run on (its affinity mask, which a batch scheduler or
    ``taskset`` narrows, rather than every core of the machine), shared evenly among the
    processes ``torchrun`` started on this node (``LOCAL_WORLD_SIZE``), minus one for each
    process's own main thread, at most :data:`MAX_AUTO_WORKERS`. Decoding a full-size JPEG
    with PIL takes milliseconds, so a GPU that trains a thousand images per second needs
    several workers; with one CPU the answer is 0.
    """
    if requested is not None:
        return requested
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(MAX_AUTO_WORKERS, usable_cpus() // processes - 1))


def resize_step(size: int) -> Callable:
    """The one resize of RGB images (PIL bilinear with antialiasing, to ``size x size``).

    The pre-resized cache is written with this very step, so that a cache of exactly the run's
    size holds the pixels a run computes from the original (docs/protocol.md, "Pre-resized
    image cache").
    """
    from torchvision import transforms as T

    return T.Resize((size, size))


class UnreadableImageError(InputError):
    """An image of the training or test list cannot be read: the user's data, not a bug.

    Raised while reading pixels, which may happen in a DataLoader worker. The worker sends
    only the exception's type and formatted traceback to the main process, where torch
    rebuilds it as ``UnreadableImageError("Caught ... Original Traceback ...")``; this class
    recovers the original one-line message from that text, so that ``spmlkit`` still prints
    one line naming the file instead of a worker's traceback.
    """

    def __init__(self, message: str) -> None:
        super().__init__(self._original_message(message))

    @classmethod
    def _original_message(cls, message: str) -> str:
        """The message raised in the worker when ``message`` is torch's re-raise text, else ``message``."""
        if not (message.startswith("Caught ") and "\nOriginal Traceback" in message):
            return message
        prefix = f"{cls.__module__}.{cls.__qualname__}: "
        lines = [line[len(prefix):] for line in message.splitlines() if line.startswith(prefix)]
        return lines[-1] if lines else message

    @classmethod
    def of(cls, path: Path, exc: BaseException) -> UnreadableImageError:
        """The error for ``path``, which raised ``exc``."""
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        return cls(f"cannot read image {path} ({reason}); find every unreadable image with `spmlkit prepare "
                   "DATASET --root DIR --check` (it lists them in the prepared folder's bad_images.txt), then "
                   "re-download them (replace each with a readable copy) and prepare again")


@dataclass(frozen=True)
class ImageTransform:
    """How an image file becomes the model's input: host half :meth:`read`, device half :meth:`normalize`.

    ``size``: the side every image is resized to (no crop). ``mean`` / ``std``: per input
    channel, in units of ``pixel / 255``. ``grey``: read one grey channel and resize with
    nearest neighbours (the digits mosaic, whose pixels are an exact upsampling), repeated to
    ``channels`` input channels by :meth:`normalize`; otherwise RGB, resized by
    :func:`resize_step`.
    """

    size: int
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    grey: bool = False
    channels: int = 3

    @property
    def pixel_channels(self) -> int:
        """Channels of the uint8 pixels (1 grey, 3 RGB), before :meth:`normalize` repeats grey."""
        return 1 if self.grey else 3

    # ---------------------------------------------------------------- the recorded form
    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> ImageTransform:
        """The transform recorded in a checkpoint (``spmlkit predict`` and ``export`` read it).

        ``{"kind": "imagenet", "size": S}``: RGB, bilinear resize, ImageNet normalisation (the
        papers); ``{"kind": "grey", "size": S, "mean": m, "std": s, "channels": 3}``: the digits
        mosaic's normalisation, grey repeated over channels.
        """
        kind = spec.get("kind")
        if kind == "imagenet":
            return cls(int(spec["size"]))
        if kind == "grey":
            mean, std = float(spec["mean"]), float(spec["std"])
            return cls(int(spec["size"]), (mean,), (std,), grey=True, channels=int(spec.get("channels", 3)))
        raise ValueError(f"unknown image transform spec {spec!r}")

    def spec(self) -> dict[str, Any]:
        """The JSON form :meth:`from_spec` reads (recorded in ``best.pt`` and export sidecars)."""
        if self.grey:
            return {"kind": "grey", "size": self.size, "mean": self.mean[0], "std": self.std[0],
                    "channels": self.channels}
        if (self.mean, self.std, self.channels) != (IMAGENET_MEAN, IMAGENET_STD, 3):
            raise ValueError("only the ImageNet normalisation has a recorded RGB form")
        return {"kind": "imagenet", "size": self.size}

    # ---------------------------------------------------------------- host half
    def read(self, path: str | Path) -> np.ndarray:
        """uint8 ``[S, S, c]`` pixels of the image file ``path`` (decoded by PIL, colour, resize).

        Every colour mode is read by its real range and memory stays bounded
        (:func:`~spmlkit.data.image_decode.decode_image`). Raises :class:`UnreadableImageError`
        naming the file when PIL cannot read it or it is too large.
        """
        try:
            image = decode_image(path, "L" if self.grey else "RGB")
        except Exception as exc:  # PIL raises many types for broken files
            raise UnreadableImageError.of(Path(path), exc) from exc
        return self.resize(image)

    def resize(self, image: Any) -> np.ndarray:
        """uint8 ``[S, S, c]`` pixels of a PIL image already in this transform's colour mode."""
        if self.grey:
            from PIL import Image

            pixels = np.array(image.resize((self.size, self.size), Image.NEAREST), dtype=np.uint8)
        else:
            pixels = np.array(resize_step(self.size)(image), dtype=np.uint8)  # writable, for torch
        return pixels.reshape(self.size, self.size, self.pixel_channels)

    # ---------------------------------------------------------------- device half
    def normalize(self, pixels: torch.Tensor, *, channels_last: bool = False) -> torch.Tensor:
        """float32 ``[B, channels, S, S]`` model inputs from uint8 ``[B, S, S, c]`` pixels, on their device.

        ``(pixel / 255 - mean) / std``, the operations of torchvision's ``ToTensor`` and
        ``Normalize`` in their order, so the values are theirs to the bit on the CPU. The
        permuted uint8 batch already has the channels-last layout; ``channels_last=False``
        returns the usual contiguous NCHW tensor (the layout CPU runs have always used).
        """
        x = pixels.permute(0, 3, 1, 2).float().div_(255)
        x = x.sub_(_channel_values(self.mean, x.device)).div_(_channel_values(self.std, x.device))
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1)
        return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


@functools.lru_cache(maxsize=32)
def _channel_values(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """float32 ``[1, c, 1, 1]`` of per-channel ``values`` on ``device``, made once per device: a
    tensor built from Python numbers for a GPU is copied from pageable memory, and such a copy
    waits for every kernel already queued, which would stop the host running ahead each batch."""
    return torch.tensor(values, dtype=torch.float32).view(1, -1, 1, 1).to(device)


def flip_rows(pixels: torch.Tensor, flips: torch.Tensor | None) -> torch.Tensor:
    """uint8 ``[B, H, W, c]`` pixels with the rows where ``flips`` (bool ``[B]``, on the pixels'
    device) is True mirrored left-right: the training augmentation, applied to the batch where it
    is (no per-image work, no host synchronisation). ``flips=None``: no augmentation."""
    if flips is None:
        return pixels
    return torch.where(flips.view(-1, 1, 1, 1), pixels.flip(2), pixels)


def new_pixel_batch(rows: int, size: int, channels: int) -> torch.Tensor:
    """An uninitialised uint8 ``[rows, size, size, channels]`` batch, in shared memory when called
    in a DataLoader worker: the worker then hands it to the main process without a copy (a tensor
    in private memory is copied into shared memory on its way)."""
    shape = (rows, size, size, channels)
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(rows * size * size * channels)
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)


class PixelStore(Protocol):
    """Pre-resized pixels of a file list (:class:`spmlkit.data.formats.image_cache.CachedSplit`)."""

    size: int

    def __len__(self) -> int: ...

    def take(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Write rows ``rows`` (uint8 ``[len(rows), size, size, 3]``) into ``out``."""

    def __getitem__(self, index: int) -> np.ndarray: ...


class PixelDataset(Protocol):
    """What the image pipeline reads: the pixels of rows, a batch at a time, and their transform."""

    transform: ImageTransform

    def __len__(self) -> int: ...

    def pixels(self, rows: Sequence[int]) -> torch.Tensor:
        """uint8 ``[len(rows), S, S, c]`` pixels of ``rows``, in that order."""


class ImageFileDataset(Dataset):
    """Images from a list of file paths: :meth:`pixels` for the training pipeline, items for users.

    Item ``i`` is ``(model input [channels, S, S], i)``, normalised on the CPU (``spmlkit
    predict`` and code that wants a plain torch dataset). With ``skip_bad=True`` an unreadable
    image yields ``(None, i)`` and the error is recorded in :attr:`errors` (in the process that
    read it); :func:`collate_skip_bad` drops such items so one broken file never stops a batch.
    Training uses ``skip_bad=False``: the training set was validated by ``spmlkit prepare`` and
    silently dropping examples would change results; there an unreadable image raises
    :class:`UnreadableImageError` naming the file and the ``spmlkit prepare --check`` scan that
    finds all of them at once.

    ``cache``: the pre-resized pixels of these very paths, row ``i`` for image ``i``. A cache of
    exactly the run's size is read by whole batches (one gather from the memory map); a larger
    one is resized per image; the files are never opened.
    """

    def __init__(self, paths: Sequence[str | Path], transform: ImageTransform, *, skip_bad: bool = False,
                 cache: PixelStore | None = None):
        self.paths = [Path(p) for p in paths]
        self.transform = transform
        self.skip_bad = skip_bad
        self.errors: dict[int, str] = {}
        if cache is not None and len(cache) != len(self.paths):
            raise ValueError(f"the image cache {getattr(cache, 'path', '')} has {len(cache)} rows but the list has "
                             f"{len(self.paths)} images; prepare the folder again with --cache-size")
        self.cache = cache

    def __len__(self) -> int:
        return len(self.paths)

    def _read(self, index: int) -> np.ndarray:
        """uint8 ``[S, S, c]`` pixels of image ``index`` (from the cache when there is one)."""
        if self.cache is None:
            return self.transform.read(self.paths[index])
        if self.cache.size == self.transform.size:
            return np.array(self.cache[index])  # a copy: the memory map is read-only
        from PIL import Image

        return self.transform.resize(Image.fromarray(np.asarray(self.cache[index])))

    def pixels(self, rows: Sequence[int]) -> torch.Tensor:
        """uint8 ``[len(rows), S, S, c]`` pixels of ``rows``, in that order."""
        t = self.transform
        out = new_pixel_batch(len(rows), t.size, t.pixel_channels)
        if self.cache is not None and self.cache.size == t.size:
            self.cache.take(np.asarray(rows, dtype=np.int64), out.numpy())
            return out
        target = out.numpy()
        for k, i in enumerate(rows):
            target[k] = self._read(int(i))
        return out

    def __getitem__(self, index: int) -> tuple[torch.Tensor | None, int]:
        try:
            pixels = self._read(index)
        except UnreadableImageError as exc:
            if not self.skip_bad:
                raise
            cause = exc.__cause__ or exc
            self.errors[index] = f"{type(cause).__name__}: {cause}"
            return None, index
        return self.transform.normalize(torch.from_numpy(pixels)[None])[0], index


def collate_skip_bad(items: list) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Stack the readable images; return ``(images, indices, bad_indices)``."""
    good = [(x, i) for x, i in items if x is not None]
    bad = torch.tensor([i for x, i in items if x is None], dtype=torch.long)
    if not good:
        return None, torch.empty(0, dtype=torch.long), bad
    xs, idx = zip(*good)
    return torch.stack(xs), torch.tensor(idx, dtype=torch.long), bad
