"""A pre-resized copy of a prepared folder's images, written once by ``spmlkit prepare --cache-size S``.

Part of the prepared form (:mod:`.prepared`): an optional folder of it, recorded in its
``meta.json``.

Why: a run decodes every training image once per epoch. A COCO image is a ~160 kB JPEG of
about 640 x 480 pixels; PIL decodes and resizes a few hundred of them per second and core,
while one H100 trains ResNet-50 at 448 x 448 on 1,500-2,500 images per second. Decoding the
full-size JPEGs therefore needs most of a machine's cores to keep one GPU busy. With the cache a
worker copies ``S x S x 3`` bytes out of a memory-mapped file and (when ``S`` is larger than
the run's image size) resizes that small image: no decoding at all.

Form: one uncompressed uint8 array ``[N, S, S, 3]`` per split (``.npy``, memory-mapped when
read), row ``i`` the pixels of line ``i`` of ``<split>_images.txt``, computed by the transforms'
own resize step (:func:`spmlkit.data.images.resize_step`, PIL bilinear with antialiasing).
The trade-off against re-encoding smaller JPEGs (quality 95):

* raw pixels cost ``3 S^2`` bytes per image: 786 kB at S = 512, 602 kB at S = 448, i.e. about
  96 GB (74 GB) for COCO 2014's 82k train + 40k test images and 9 GB (7 GB) for VOC 2012,
  against ~8-10x less for JPEG files. Reading them is a copy from the page cache or, at 2,000
  images per second, 1.2-1.6 GB/s from an NVMe disk;
* JPEGs of 512 x 512 hold almost as many pixels as COCO's originals, so decoding them is
  barely faster than decoding the originals; and JPEG is lossy, so their pixels never equal
  the uncached ones. Raw pixels cached at exactly the run's image size are the very bytes the
  uncached transform computes, so such a run is bit-identical to one without the cache
  (docs/protocol.md, "Pre-resized image cache").

Layout, inside the prepared folder::

    image_cache/train-S.npy    uint8 [N_train, S, S, 3]
    image_cache/test-S.npy     uint8 [N_test, S, S, 3] (absent when the folder has no test list)

and ``meta.json`` gains ``"image_cache": {"size": S, "format": ..., "resize": ..., "files":
{split: relative path}, "lists": {list file: its SHA-256}, "known_bad": n}``. ``lists`` ties
the cache to the image lists it was made from; ``files`` checksums of the data files are
unchanged and do not cover the cache (hashing 100 GB on every load would cost minutes). A
folder prepared again without ``--cache-size`` loses the key (``write_prepared`` writes a new
``meta.json``), so a stale cache is never read; its files stay until the next ``--cache-size``
run, which keeps only the size it writes. Images a ``--check`` scan found unreadable get
zero rows (a run that lists them is refused before training anyway); any other unreadable
image stops the cache with the file's name.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..images import ImageTransform, loader_workers
from .prepared import PreparedDataset, PreparedFormatError, load_prepared, record_image_cache

__all__ = ["CACHE_DIR", "META_KEY", "CachedSplit", "ImageCache", "open_cache", "write_image_cache"]

log = logging.getLogger(__name__)

CACHE_DIR = "image_cache"
META_KEY = "image_cache"
_FORMAT = "uint8 npy [N, S, S, 3], RGB"
_RESIZE = "torchvision Resize((S, S)) of the PIL RGB image (bilinear, antialiased), as the image transforms"
_SPLITS = ("train", "test")


class CachedSplit:
    """The cached rows of one split, opened lazily in whichever process reads them.

    The memory map is not pickled into DataLoader workers (pickling a ``np.memmap`` copies
    the whole array): each worker opens the file on its first read and shares the page cache.
    It is a :class:`~spmlkit.data.images.PixelStore`: :meth:`take` reads a whole batch of rows
    in one gather.
    """

    def __init__(self, path: Path, rows: int, size: int) -> None:
        self.path, self.rows, self.size = Path(path), rows, size
        self._array: np.ndarray | None = None

    def __len__(self) -> int:
        return self.rows

    def _open(self) -> np.ndarray:
        if self._array is None:
            self._array = np.load(self.path, mmap_mode="r")
        return self._array

    def __getitem__(self, index: int) -> np.ndarray:
        return self._open()[index]

    def take(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Copy rows ``rows`` into ``out`` (uint8 ``[len(rows), S, S, 3]``): one gather.

        The bounds are checked here once, so that the gather may run in numpy's unbuffered mode
        (``mode="raise"`` copies the whole batch once more, measured at a quarter of the speed).
        """
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            raise IndexError(f"rows {rows.min()}..{rows.max()} of the image cache {self.path}, which has {self.rows}")
        np.take(self._open(), rows, axis=0, out=out, mode="clip")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_array": None}


@dataclass(frozen=True)
class ImageCache:
    """The cache of a prepared folder: its size ``S`` and one file per split."""

    folder: Path
    size: int
    files: dict[str, Path]
    counts: dict[str, int]

    def split(self, name: str) -> CachedSplit | None:
        """The rows of split ``name`` ("train" or "test"); None when that split has no images."""
        return CachedSplit(self.files[name], self.counts[name], self.size) if name in self.files else None


def open_cache(prepared_dir: str | Path, ds: PreparedDataset, image_size: int) -> ImageCache | None:
    """The cache a run at ``image_size`` reads instead of the original files, or None.

    None when the folder was prepared without ``--cache-size``, or with a size smaller than
    ``image_size`` (upsampling cached pixels would blur what the originals still hold; the run
    reads the originals and says so in the log). A cache recorded in ``meta.json`` that does
    not match its lists or files raises :class:`PreparedFormatError` with the command that
    rebuilds it, rather than being skipped: silently reading the originals would make the run
    several times slower without a word.
    """
    prepared_dir = Path(prepared_dir)
    entry = ds.meta.get(META_KEY)
    if entry is None:
        return None
    rebuild = f"prepare the folder again with --cache-size (or remove the {META_KEY!r} entry of its meta.json)"
    if not (isinstance(entry, dict) and isinstance(entry.get("size"), int) and isinstance(entry.get("files"), dict)
            and isinstance(entry.get("lists"), dict)):
        raise PreparedFormatError(f"{prepared_dir / 'meta.json'}: the {META_KEY!r} entry is malformed; {rebuild}")
    size = entry["size"]
    if size < image_size:
        log.info("the image cache of %s holds %d x %d images, smaller than this run's %d: reading the original "
                 "files", prepared_dir, size, size, image_size)
        return None
    hashes = ds.meta.get("files", {})
    for list_file, digest in entry["lists"].items():
        if hashes.get(list_file) != digest:
            raise PreparedFormatError(f"the image cache of {prepared_dir} was made for another {list_file} than the "
                                      f"one the folder now holds; {rebuild}")
    files, counts = {}, {}
    for split in _SPLITS:
        rows = len(ds.images(split))
        if rows == 0:
            continue
        if split not in entry["files"]:
            raise PreparedFormatError(f"the image cache of {prepared_dir} has no {split} file; {rebuild}")
        path = prepared_dir / entry["files"][split]
        try:
            array = np.load(path, mmap_mode="r")  # reads the header only
        except (OSError, ValueError) as exc:
            raise PreparedFormatError(f"cannot open the image cache file {path} ({exc}); {rebuild}") from exc
        if array.dtype != np.uint8 or array.shape != (rows, size, size, 3):
            raise PreparedFormatError(f"the image cache file {path} holds {array.dtype} {array.shape}, expected "
                                      f"uint8 {(rows, size, size, 3)}; {rebuild}")
        files[split], counts[split] = path, rows
    return ImageCache(prepared_dir / CACHE_DIR, size, files, counts)


class _Resized:
    """Item ``i``: the uint8 ``[S, S, 3]`` pixels of image ``i`` (zeros for a known-bad image)."""

    def __init__(self, paths: list[Path], size: int, known_bad: set[int]) -> None:
        self.paths, self.size, self.known_bad = paths, size, known_bad
        self.transform = ImageTransform(size)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        if index in self.known_bad:
            return np.zeros((self.size, self.size, 3), dtype=np.uint8)
        return self.transform.read(self.paths[index])


def write_image_cache(
    prepared_dir: str | Path,
    size: int,
    *,
    progress: Callable[[int, int], None] | None = None,
    num_workers: int | None = None,
) -> ImageCache:
    """Write the ``size x size`` cache of every train and test image of ``prepared_dir``.

    Runs after the folder was prepared (it reads the folder's lists) and records itself in
    ``meta.json`` last: the entry is removed first, so an interrupted run leaves a folder that
    trains from the original files, never one that reads a half-written cache.
    ``num_workers`` processes decode in parallel (None: :func:`~spmlkit.data.images.loader_workers`).
    """
    from torch.utils.data import DataLoader

    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"the cache size must be a positive number of pixels, got {size!r} (--cache-size)")
    prepared_dir = Path(prepared_dir)
    ds = load_prepared(prepared_dir)
    total = len(ds.train_images) + len(ds.test_images)
    needed, free = total * size * size * 3, shutil.disk_usage(prepared_dir).free
    if needed > free:
        raise ValueError(f"the {size} x {size} image cache of {total} images needs {needed / 1e9:.1f} GB in "
                         f"{prepared_dir}, but only {free / 1e9:.1f} GB are free; free some space or choose a smaller "
                         "--cache-size (at least the --image-size you train at)")
    record_image_cache(prepared_dir, None)
    folder = prepared_dir / CACHE_DIR
    folder.mkdir(exist_ok=True)
    bad_paths = {b.path for b in ds.bad_images}
    done = 0
    files: dict[str, str] = {}
    for split in _SPLITS:
        rel_paths = ds.images(split)
        if not rel_paths:
            continue
        name = f"{split}-{size}.npy"
        tmp = folder / f".{name}.tmp"
        known_bad = {i for i, rel in enumerate(rel_paths) if rel in bad_paths}
        data = _Resized(ds.paths(split), size, known_bad)
        workers = loader_workers(num_workers)
        loader = DataLoader(data, batch_size=32, num_workers=workers, collate_fn=np.stack,
                            prefetch_factor=4 if workers > 0 else None)
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(len(data), size, size, 3))
        try:
            start = 0
            for batch in loader:
                array[start : start + len(batch)] = batch
                start += len(batch)
                done += len(batch)
                if progress is not None:
                    progress(done, total)
            array.flush()
            del array
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, folder / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        files[split] = f"{CACHE_DIR}/{name}"
    for stale in folder.iterdir():  # one size at a time: an older size would only take disk space
        if stale.name not in {Path(f).name for f in files.values()}:
            stale.unlink()
    lists = {f"{split}_images.txt": ds.meta["files"][f"{split}_images.txt"] for split in files}
    record_image_cache(prepared_dir, {"size": size, "format": _FORMAT, "resize": _RESIZE, "files": files,
                                      "lists": lists, "known_bad": len(bad_paths)})
    cache = open_cache(prepared_dir, load_prepared(prepared_dir), size)
    assert cache is not None  # just written and recorded
    return cache
