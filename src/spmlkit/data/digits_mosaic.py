"""Digits mosaic: a small multi-label *image* dataset built from real handwritten digits.

A demo and test bed for the image pipeline that needs no download and trains on a CPU in
seconds. The source images are scikit-learn's copy of the UCI "Optical Recognition of
Handwritten Digits" test set (``sklearn.datasets.load_digits``: 1,797 grey 8x8 images with
values 0..16, classes 0-9, shipped inside scikit-learn).

**Generator** (:func:`make_digits_mosaic`; bit-exact for a given seed, numpy's legacy
``RandomState`` -- MT19937, whose streams numpy keeps frozen across versions):

1. ``perm = rng.permutation(1797)``; the first ``round(train_fraction * 1797)`` source
   digits (1,198 at 2/3) form the *train pool*, the rest the *test pool*, so no handwritten
   digit appears in both splits.
2. For the train split and then the test split, image by image: the number of digits
   ``k = rng.randint(1, max_digits + 1)`` (uniform on 1..max_digits), the cells
   ``rng.choice(grid**2, k, replace=False)`` (row-major cell numbers) and the source digits
   ``rng.choice(pool, k, replace=False)``. A source image is used at most once per mosaic,
   but two different images of the same class may be (then that class is simply present).
3. Pixels: each source digit is mapped 0..16 -> 0..255 as ``(255·v + 8) // 16``, i.e.
   ``round(255·v / 16)`` (halves up) in integer arithmetic, and placed in its 8x8 cell of a
   ``(8·grid)``-pixel square canvas (empty cells stay 0 = blank); the canvas is upsampled by
   nearest-neighbour pixel repetition to ``image_size`` (a multiple of ``8·grid``; default
   grid 2 -> 16x16 canvas -> 32x32 image, factor 2).
4. Label = multi-hot set of the classes present (uint8 ``[N, 10]``; every image has 1..k
   positives).

Images are stored as uint8 ``[N, 1, H, W]``; :class:`DigitsMosaicDataset` turns them into
normalised 3-channel float tensors for ImageNet-shaped backbones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = [
    "CELL_PIXELS",
    "MOSAIC_MEAN",
    "MOSAIC_STD",
    "DigitsMosaic",
    "DigitsMosaicDataset",
    "export_png",
    "make_digits_mosaic",
]

#: side of one source digit in pixels
CELL_PIXELS = 8
#: mean and std of ``pixel / 255`` over the default train split (seed 0, 2,000 images),
#: rounded; the default normalisation of :class:`DigitsMosaicDataset`
MOSAIC_MEAN = 0.19
MOSAIC_STD = 0.33


@dataclass(frozen=True)
class DigitsMosaic:
    """A generated mosaic dataset (see the module docstring for the generator).

    Attributes:
        train_images, test_images: uint8 ``[N, 1, H, W]``, 0 = blank.
        train_labels, test_labels: uint8 ``[N, 10]`` multi-hot.
        train_sources, test_sources: int64 ``[N, grid**2]``, index into ``load_digits()`` of
            the digit in each (row-major) cell, ``-1`` for an empty cell.
        train_pool, test_pool: the disjoint source-digit indices each split draws from.
        class_names: ``("0", ..., "9")``.
        seed, image_size, grid, max_digits: the generator's arguments.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    train_sources: np.ndarray
    test_sources: np.ndarray
    train_pool: np.ndarray
    test_pool: np.ndarray
    class_names: tuple[str, ...]
    seed: int
    image_size: int
    grid: int
    max_digits: int

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(images, labels)`` of ``"train"`` or ``"test"``."""
        if name == "train":
            return self.train_images, self.train_labels
        if name == "test":
            return self.test_images, self.test_labels
        raise ValueError(f"split must be 'train' or 'test', got {name!r}")


def _load_source_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits as uint8 0..255 ``[1797, 8, 8]`` and int labels ``[1797]``."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError(
            "the digits mosaic uses the handwritten digits shipped with scikit-learn; "
            "install it with `pip install scikit-learn`"
        ) from err
    digits = load_digits()
    raw = np.rint(digits.images).astype(np.int64)  # integers 0..16 stored as float
    scaled = (raw * 255 + 8) // 16  # round(v * 255 / 16), halves up, exact
    return scaled.astype(np.uint8), digits.target.astype(np.int64)


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as a Python int if it is an integer >= ``minimum`` (bools refused), else a
    ValueError naming ``name``; the seed uses it with ``minimum=0``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def make_digits_mosaic(
    num_train: int = 2000,
    num_test: int = 1000,
    seed: int = 0,
    image_size: int = 32,
    max_digits: int = 4,
    *,
    grid: int = 2,
    train_fraction: float = 2 / 3,
) -> DigitsMosaic:
    """Generate a multi-label digit-mosaic dataset (bit-exact for a given ``seed``).

    Args:
        num_train, num_test: number of mosaics per split.
        seed: seed of the single ``numpy.random.RandomState`` driving every draw.
        image_size: output side in pixels, a multiple of ``8 * grid`` (nearest upsampling).
        max_digits: the number of digits per image is uniform on ``1..max_digits``
            (at most ``grid**2``).
        grid: cells per side of the mosaic.
        train_fraction: share of the 1,797 source digits in the train pool.
    """
    num_train = _check_positive_int("num_train", num_train)
    num_test = _check_positive_int("num_test", num_test)
    grid = _check_positive_int("grid", grid)
    max_digits = _check_positive_int("max_digits", max_digits)
    image_size = _check_positive_int("image_size", image_size)
    seed = _check_positive_int("seed", seed, minimum=0)
    cells = grid * grid
    if max_digits > cells:
        raise ValueError(
            f"max_digits={max_digits} exceeds the {cells} cells of a {grid}x{grid} grid; "
            "lower max_digits or raise grid"
        )
    canvas = CELL_PIXELS * grid
    if image_size % canvas != 0:
        raise ValueError(
            f"image_size={image_size} must be a multiple of {canvas} (8 pixels x grid={grid}) "
            f"so upsampling is an exact pixel repetition; e.g. {canvas}, {2 * canvas}, {3 * canvas}"
        )
    if not 0.0 < float(train_fraction) < 1.0:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction!r}")

    sources, targets = _load_source_digits()
    n_src = len(sources)
    rng = np.random.RandomState(seed)
    perm = rng.permutation(n_src)
    n_pool = int(np.round(float(train_fraction) * n_src))
    if not 0 < n_pool < n_src:
        raise ValueError(f"train_fraction={train_fraction} leaves an empty source pool")
    train_pool, test_pool = perm[:n_pool], perm[n_pool:]

    def draw(n: int, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        used = np.full((n, cells), -1, dtype=np.int64)
        for i in range(n):
            k = rng.randint(1, max_digits + 1)
            where = rng.choice(cells, k, replace=False)
            used[i, where] = rng.choice(pool, k, replace=False)
        images = np.zeros((n, grid, grid, CELL_PIXELS, CELL_PIXELS), dtype=np.uint8)
        filled = used >= 0
        images.reshape(n, cells, CELL_PIXELS, CELL_PIXELS)[filled] = sources[used[filled]]
        # [n, row, col, y, x] -> [n, row, y, col, x] -> canvas, then pixel repetition
        images = images.transpose(0, 1, 3, 2, 4).reshape(n, canvas, canvas)
        factor = image_size // canvas
        images = images.repeat(factor, axis=1).repeat(factor, axis=2)[:, None]
        labels = np.zeros((n, 10), dtype=np.uint8)
        rows = np.repeat(np.arange(n), cells)[filled.ravel()]
        labels[rows, targets[used[filled]]] = 1
        return np.ascontiguousarray(images), labels, used

    train_images, train_labels, train_sources = draw(num_train, train_pool)
    test_images, test_labels, test_sources = draw(num_test, test_pool)
    return DigitsMosaic(
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        train_sources=train_sources,
        test_sources=test_sources,
        train_pool=train_pool,
        test_pool=test_pool,
        class_names=tuple(str(d) for d in range(10)),
        seed=seed,
        image_size=image_size,
        grid=grid,
        max_digits=max_digits,
    )


class DigitsMosaicDataset(Dataset):
    """Torch-style dataset over mosaic images yielding ``(image, index)``.

    ``image`` is float32 ``[channels, H, W]`` equal to ``(pixel / 255 - mean) / std`` (the grey
    channel repeated ``channels`` times, 3 by default for ImageNet-shaped backbones). Labels are
    not returned: the training loop looks them up by ``index`` in its label state, which is
    where observed and pseudo-labels live.

    The training pipeline reads whole batches of uint8 pixels (:meth:`pixels`, a gather from
    the in-memory array) and normalises them on the run's device with :attr:`transform`, the
    same arithmetic as the items (:mod:`spmlkit.data.images`).
    """

    def __init__(
        self,
        images: np.ndarray,
        *,
        channels: int = 3,
        mean: float = MOSAIC_MEAN,
        std: float = MOSAIC_STD,
    ) -> None:
        from .images import ImageTransform

        images = np.asarray(images)
        if images.ndim != 4 or images.shape[1] != 1 or images.dtype != np.uint8:
            raise ValueError(
                "images must be uint8 [N, 1, H, W] as produced by make_digits_mosaic, got "
                f"{images.dtype} {images.shape}"
            )
        if images.shape[2] != images.shape[3]:
            raise ValueError(f"mosaic images must be square, got {images.shape[2]} x {images.shape[3]}")
        channels = _check_positive_int("channels", channels)
        if not std > 0:
            raise ValueError(f"std must be positive, got {std!r}")
        self.images = images
        self.channels = channels
        self.mean = float(mean)
        self.std = float(std)
        self.transform = ImageTransform(images.shape[2], (self.mean,), (self.std,), grey=True, channels=channels)

    @classmethod
    def from_mosaic(
        cls, mosaic: DigitsMosaic, split: str = "train", **kwargs: Any
    ) -> DigitsMosaicDataset:
        """The dataset of one split (``"train"`` or ``"test"``) of ``mosaic``."""
        return cls(mosaic.split(split)[0], **kwargs)

    def __len__(self) -> int:
        return len(self.images)

    def pixels(self, rows: Any) -> torch.Tensor:
        """uint8 ``[len(rows), H, W, 1]`` pixels of ``rows``, in that order (one gather)."""
        from .images import new_pixel_batch

        out = new_pixel_batch(len(rows), self.transform.size, 1)
        out.numpy()[..., 0] = self.images[np.asarray(rows, dtype=np.int64), 0]
        return out

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform.normalize(self.pixels([index]))[0], int(index)


def export_png(mosaic: DigitsMosaic, out_dir: str | Path) -> Path:
    """Write the mosaics as PNG files in spmlkit's prepared form; returns ``out_dir``.

    ``out_dir/images/{train,test}/00000.png`` ... hold the images (8-bit greyscale, lossless,
    ``image_size`` pixels square) and ``out_dir`` becomes a prepared folder
    (:func:`spmlkit.data.formats.prepared.write_prepared`: ``meta.json``,
    ``{train,test}_images.txt``, ``{train,test}_labels.npy``) whose image root is ``out_dir``
    itself, so ``load_prepared(out_dir)`` -- and every command reading prepared data, such as
    ``predict`` -- works on it. The generator arguments are recorded in ``meta["options"]``.
    """
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError("export_png needs Pillow; install it with `pip install pillow`") from err
    from .formats.prepared import claim_prepared_dir, write_prepared

    out = claim_prepared_dir(out_dir)  # marked before its images are written: they are part of it
    width = max(5, len(str(max(len(mosaic.train_images), len(mosaic.test_images)) - 1)))
    names: dict[str, list[str]] = {}
    for split in ("train", "test"):
        images, _ = mosaic.split(split)
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        names[split] = [f"images/{split}/{i:0{width}d}.png" for i in range(len(images))]
        for rel, image in zip(names[split], images):
            Image.fromarray(image[0]).save(out / rel)
    write_prepared(
        out,
        dataset="digits_mosaic",
        class_names=mosaic.class_names,
        train_images=names["train"],
        train_labels=mosaic.train_labels,
        test_images=names["test"],
        test_labels=mosaic.test_labels,
        root=out,
        selection=[
            "Generated by spmlkit.data.digits_mosaic.make_digits_mosaic from the 1,797 "
            + "scikit-learn handwritten digits.",
            "Train and test mosaics draw on disjoint pools of source digits.",
        ],
        options={
            "seed": mosaic.seed,
            "image_size": mosaic.image_size,
            "grid": mosaic.grid,
            "max_digits": mosaic.max_digits,
        },
    )
    return out
