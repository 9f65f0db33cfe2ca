"""Training JPEGs decoded on the GPU (``spmlkit train --decode gpu``; CUDA only).

Why: PIL decodes a full-size COCO JPEG in several milliseconds, so a GPU that trains 2,000
images per second needs a dozen CPU cores for decoding alone. Here the loader workers only
read each file's bytes; the main process hands a whole batch to nvJPEG
(:func:`torchvision.io.decode_jpeg` with ``device="cuda"``) and resizes, flips and normalises
on the GPU. Files that are not JPEGs (PNG, ...) are decoded by PIL in the worker and only
resized on the GPU; an image nvJPEG refuses (a CMYK JPEG, say) is decoded by PIL instead.

The arithmetic is not the CPU path's: nvJPEG's inverse DCT and chroma upsampling differ from
libjpeg's by a grey level here and there, and the resize is torch's antialiased bilinear
interpolation in float32 (rounded to whole grey levels, as PIL's) rather than PIL's
fixed-point one. A ``--decode gpu`` run is therefore close to, not bit-identical with, a
``--decode cpu`` run. Only the training batches are decoded here; validation, training-set
predictions and test images keep the CPU path (and the pre-resized cache, when there is
one), so model selection and test metrics see the same inputs as every other run.

torchvision 0.29 marks its image decoders deprecated in favour of TorchCodec (a
``DeprecationWarning``, hidden outside tests); they still work, and moving to TorchCodec's GPU
decoder would change only :meth:`GpuDecoder._decode`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from .images import IMAGENET_MEAN, IMAGENET_STD, UnreadableImageError

__all__ = ["EncodedImages", "GpuDecoder", "collate_encoded"]

_JPEG_MAGIC = b"\xff\xd8"
#: one loaded image: (uint8 bytes of a JPEG file, or uint8 [3, H, W] pixels), is-JPEG, local index, flip
Item = tuple[torch.Tensor, bool, int, bool]


def _unreadable(path: Path, exc: BaseException) -> UnreadableImageError:
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())
    return UnreadableImageError(
        f"cannot read image {path} ({reason}); find every unreadable image with `spmlkit prepare DATASET --root DIR "
        "--check`, replace each with a readable copy and prepare again"
    )


def _pil_pixels(data: bytes, path: Path) -> torch.Tensor:
    """uint8 ``[3, H, W]`` RGB pixels of an encoded image, decoded by PIL (as the CPU path does)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.asarray(img.convert("RGB"))
    except Exception as exc:  # PIL raises many types for broken files
        raise _unreadable(path, exc) from exc
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


class EncodedImages(Dataset):
    """Rows ``rows`` of a file list; item ``(i, flip)`` -> the file's bytes (see :data:`Item`).

    Reading bytes is all a worker does for a JPEG, so a couple of workers keep up with a GPU.
    """

    def __init__(self, paths: Sequence[str | Path], rows: np.ndarray) -> None:
        self.paths, self.rows = [Path(p) for p in paths], np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def path(self, i: int) -> Path:
        """The file of local row ``i``."""
        return self.paths[int(self.rows[i])]

    def __getitem__(self, item: tuple[int, bool]) -> Item:
        i, flip = item
        path = self.path(i)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise _unreadable(path, exc) from exc
        if data[:2] == _JPEG_MAGIC:
            return torch.frombuffer(bytearray(data), dtype=torch.uint8), True, i, flip
        return _pil_pixels(data, path), False, i, flip


def collate_encoded(items: list[Item]) -> list[Item]:
    """Batches stay lists: encoded files and images of different sizes cannot be stacked."""
    return items


class GpuDecoder:
    """A loaded batch -> float32 ``[B, 3, size, size]`` on ``device``, flipped and normalised.

    ``path_of(i)`` names the file of local row ``i`` in the error an unreadable image raises.
    """

    def __init__(self, size: int, device: torch.device, path_of: Callable[[int], Path]) -> None:
        self.size, self.device, self.path_of = size, device, path_of
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)

    def _decode(self, items: list[Item]) -> list[torch.Tensor]:
        """uint8 ``[3, H, W]`` images on the device, in batch order."""
        from torchvision.io import ImageReadMode, decode_jpeg

        jpegs = [k for k, (_, is_jpeg, _, _) in enumerate(items) if is_jpeg]
        out: list[torch.Tensor | None] = [None if is_jpeg else data.to(self.device, non_blocking=True)
                                          for data, is_jpeg, _, _ in items]
        if jpegs:
            try:  # one nvJPEG batch
                decoded = decode_jpeg([items[k][0] for k in jpegs], mode=ImageReadMode.RGB, device=self.device)
            except (RuntimeError, TypeError):  # one image nvJPEG refuses, or a torchvision without batches
                decoded = [self._decode_one(items[k]) for k in jpegs]
            for k, image in zip(jpegs, decoded):
                out[k] = image
        return out  # type: ignore[return-value]

    def _decode_one(self, item: Item) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg

        data, _, i, _ = item
        try:
            return decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:  # PIL reads what nvJPEG does not (CMYK), or names the broken file
            return _pil_pixels(data.numpy().tobytes(), self.path_of(i)).to(self.device, non_blocking=True)

    def __call__(self, items: list[Item]) -> torch.Tensor:
        import torch.nn.functional as F

        batch = torch.empty((len(items), 3, self.size, self.size), dtype=torch.float32, device=self.device)
        for k, (image, (_, _, _, flip)) in enumerate(zip(self._decode(items), items)):
            resized = F.interpolate(image[None].float(), size=(self.size, self.size), mode="bilinear",
                                    align_corners=False, antialias=True)[0]
            resized = resized.round_().clamp_(0, 255)  # whole grey levels, as PIL's uint8 output
            batch[k] = resized.flip(-1) if flip else resized
        return (batch / 255 - self.mean) / self.std
