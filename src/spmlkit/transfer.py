"""Host-to-GPU copies that do not make the host wait.

A copy from ordinary (pageable) host memory to a GPU is synchronous: it waits until every
kernel already queued on the stream has run, so a training step that sends its labels that way,
or an image decoder that sends its row indices, cannot be prepared while the previous work still
computes. From pinned memory the copy is queued like a kernel (docs/architecture.md, "Feeding
the GPU"); PyTorch's pinned-memory cache keeps the staging buffer until the copy has read it.
Both the data layer (the GPU decoder) and training send small tensors this way, so the one
helper lives below both.
"""

from __future__ import annotations

import torch

__all__ = ["to_device"]


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``tensor`` on ``device``: through pinned memory, without waiting, from the CPU to a GPU;
    an ordinary ``.to`` otherwise (nothing to wait for)."""
    device = torch.device(device)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
