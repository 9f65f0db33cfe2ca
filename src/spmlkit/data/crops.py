"""Multi-scale random crops of training images (the PU-MLC code's augmentation).

The base protocol resizes every training image to the run's size and flips it
(docs/protocol.md, "Training protocols"). The official PU-MLC code also crops: it resizes the
image to ``scale`` x ``scale`` (512) with bicubic interpolation, cuts a square of a side drawn
uniformly from ``sizes`` (512, 448, 384, 320 or 256) at a uniformly drawn position, resizes that
to the run's size (448) with bicubic interpolation, then flips. So the *scale policy* is: each
crop keeps between (256/512)^2 = 25 % and 100 % of the image's area, in five equally likely
steps, at an aspect ratio of the resized image (docs/protocol.md, "Recipes").

spmlkit splits this the way its image pipeline already splits flips:

* the loader workers read each image at ``scale`` (:class:`ScaledPixels`: PIL's bicubic resize,
  what the official transform does first);
* the main process draws every row's crop (side and position) from the run's own generator at
  the start of the epoch (:meth:`CropPolicy.draw`), like the flips, so the crops depend on
  neither the number of workers nor of processes, and a resumed run draws the same ones;
* the crop and the resize to the run's size run on the device, batch by batch
  (:meth:`CropPolicy.apply`), one interpolation per crop side. The resize is torch's
  antialiased bicubic, rounded back to uint8 pixels; it differs from PIL's bicubic (the official
  transform) by at most one grey level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .images import ImageFileDataset, ImageTransform

__all__ = ["CropBoxes", "CropPolicy", "ScaledPixels", "bicubic_transform"]


@dataclass(frozen=True)
class CropBoxes:
    """One epoch's crops, per training row: the side and the top-left corner (int64 ``[N]`` each)."""

    side: torch.Tensor
    top: torch.Tensor
    left: torch.Tensor

    def rows(self, rows: Sequence[int]) -> CropBoxes:
        index = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        return CropBoxes(self.side[index], self.top[index], self.left[index])


@dataclass(frozen=True)
class CropPolicy:
    """Resize to ``scale``, crop a square of a side drawn from ``sizes``, resize to ``size``."""

    scale: int
    sizes: tuple[int, ...]
    size: int

    def __post_init__(self) -> None:
        if not self.sizes or any(s < 1 or s > self.scale for s in self.sizes):
            raise ValueError(f"crop sizes {self.sizes} must lie in 1..{self.scale} (the resized image's side)")

    def draw(self, n: int, generator: torch.Generator) -> CropBoxes:
        """The crops of ``n`` rows from ``generator``: a side index (uniform over ``sizes``), then
        the vertical and horizontal positions (uniform over the positions where the crop fits)."""
        choice = torch.randint(len(self.sizes), (n,), generator=generator)
        side = torch.tensor(self.sizes, dtype=torch.int64)[choice]
        room = self.scale - side + 1
        where = torch.rand(2, n, generator=generator, dtype=torch.float64)
        top = (where[0] * room).long().clamp_max(room - 1)
        left = (where[1] * room).long().clamp_max(room - 1)
        return CropBoxes(side, top, left)

    def apply(self, pixels: torch.Tensor, boxes: CropBoxes) -> torch.Tensor:
        """uint8 ``[B, size, size, c]`` crops of uint8 ``[B, scale, scale, c]`` pixels (on their
        device), each row cut by its box and resized with antialiased bicubic interpolation."""
        b, height, width, _ = pixels.shape
        if (height, width) != (self.scale, self.scale):
            raise ValueError(f"crop input must be {self.scale}x{self.scale} pixels, got {height}x{width}")
        # the boxes live on the host: slicing with them, and putting the rows back in order with one
        # stack, sends no index to the device (a copy from host memory would wait for queued work)
        sides, tops, lefts = boxes.side.tolist(), boxes.top.tolist(), boxes.left.tolist()
        out: list[torch.Tensor | None] = [None] * b
        for side in sorted(set(sides)):
            rows = [i for i, s in enumerate(sides) if s == side]
            crops = torch.stack([pixels[i, tops[i] : tops[i] + side, lefts[i] : lefts[i] + side] for i in rows])
            x = crops.permute(0, 3, 1, 2).float()
            if side != self.size:
                x = F.interpolate(x, size=(self.size, self.size), mode="bicubic", align_corners=False, antialias=True)
            resized = x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
            for j, i in enumerate(rows):
                out[i] = resized[j]
        return torch.stack(out)


@dataclass(frozen=True)
class _BicubicTransform(ImageTransform):
    """An RGB image transform that resizes with PIL's bicubic filter (the PU-MLC code's resize);
    grey images keep nearest neighbours."""

    def resize(self, image: Any) -> np.ndarray:
        if self.grey:
            return super().resize(image)
        from PIL import Image

        pixels = np.array(image.resize((self.size, self.size), Image.BICUBIC), dtype=np.uint8)
        return pixels.reshape(self.size, self.size, self.pixel_channels)


def bicubic_transform(size: int, like: ImageTransform) -> ImageTransform:
    """``like`` (its normalisation and colour mode) reading images at ``size`` with bicubic resizing."""
    return _BicubicTransform(size, like.mean, like.std, grey=like.grey, channels=like.channels)


class ScaledPixels:
    """The training images of ``base`` read at the crop policy's ``scale`` (the crop's input).

    A dataset of image files (:class:`~spmlkit.data.images.ImageFileDataset`) is re-read at
    ``scale`` with PIL's bicubic resize, from its pre-resized cache when it has one (which must be
    at least ``scale`` to keep the detail a crop zooms into). A dataset generated in memory (the
    digits mosaic) has one size; ``scale`` must equal it.
    """

    def __init__(self, base: Any, scale: int):
        transform = base.transform
        paths = getattr(base, "paths", None)
        if paths is None:
            if transform.size != scale:
                raise ValueError(f"crop_scale {scale} differs from this dataset's image size {transform.size}; it "
                                 f"has no files to read at another size: set crop_scale to {transform.size}")
            self.source: Any = base
        else:
            cache = getattr(base, "cache", None)
            if cache is not None and cache.size < scale:
                cache = None  # a smaller cache would blur what the crop zooms into: read the files
            self.source = ImageFileDataset([Path(p) for p in paths], bicubic_transform(scale, transform), cache=cache)
        self.transform = self.source.transform

    def __len__(self) -> int:
        return len(self.source)

    def pixels(self, rows: Sequence[int]) -> torch.Tensor:
        """uint8 ``[len(rows), scale, scale, c]`` pixels of ``rows``, in that order."""
        return self.source.pixels(rows)
