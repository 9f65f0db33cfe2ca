"""Image datasets over files on disk, the papers' transforms, and tolerant loading.

Every dataset yields ``(image_tensor, index)``: labels are looked up by index in the label
state, which is where observed and pseudo-labels live, so a dataset never needs to know the
observation setting.

Transforms follow the base protocol (docs/protocol.md, "Training protocols"): resize to
``size x size`` (no crop), horizontal flip with probability 0.5 for training, ImageNet
normalisation.

An image of a prepared folder that holds a pre-resized cache (``spmlkit prepare ...
--cache-size S``, :mod:`spmlkit.data.image_cache`) is read from the cache instead of its file:
the same transform then runs on the cached ``S x S`` pixels (docs/protocol.md, "Pre-resized
image cache", on when that equals resizing the original).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch.utils.data import Dataset

from ..errors import InputError

if TYPE_CHECKING:  # the cache module imports this one
    from .image_cache import CachedSplit

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MAX_AUTO_WORKERS",
    "build_transform",
    "loader_workers",
    "resize_step",
    "transform_size",
    "transform_from_spec",
    "ImageFileDataset",
    "UnreadableImageError",
    "collate_skip_bad",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: at most this many loader workers per process when the count is automatic: beyond it the
#: workers' memory grows while a GPU step is rarely still waiting for images
MAX_AUTO_WORKERS = 8


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
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity mask
        cpus = os.cpu_count() or 1
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(MAX_AUTO_WORKERS, cpus // processes - 1))


def resize_step(size: int) -> Callable:
    """The one resize of every image transform (PIL bilinear with antialiasing, to ``size x size``).

    The pre-resized cache is written with this very step, so that a cache of exactly the run's
    size holds the pixels the transform would compute from the original (docs/protocol.md,
    "Pre-resized image cache").
    """
    from torchvision import transforms as T

    return T.Resize((size, size))


def build_transform(size: int, *, train: bool, hflip: bool = True) -> Callable:
    """Resize to ``size x size`` (+ random horizontal flip when training), tensor, normalise."""
    from torchvision import transforms as T

    steps = [resize_step(size)]
    if train and hflip:
        steps.append(T.RandomHorizontalFlip(0.5))
    steps += [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return T.Compose(steps)


def transform_size(transform: Callable | None) -> int | None:
    """The side a transform of :func:`build_transform` resizes to; None for any other transform.

    ``--decode gpu`` replaces the CPU transform of the training images by the same resize on the
    GPU, and learns the run's size from the transform the run built.
    """
    from torchvision import transforms as T

    for step in getattr(transform, "transforms", ()):
        size = step.size if isinstance(step, T.Resize) else None
        if isinstance(size, (tuple, list)) and len(size) == 2 and size[0] == size[1]:
            return int(size[0])
    return None


def transform_from_spec(spec: dict) -> Callable:
    """The evaluation transform recorded in a checkpoint (``spmlkit predict`` uses it).

    ``{"kind": "imagenet", "size": S}``: RGB, resize, ImageNet normalisation (the papers);
    ``{"kind": "grey", "size": S, "mean": m, "std": s, "channels": 3}``: the digits-mosaic
    normalisation, grey repeated over channels.
    """
    from torchvision import transforms as T

    kind = spec.get("kind")
    if kind == "imagenet":
        return build_transform(int(spec["size"]), train=False)
    if kind == "grey":
        mean, std, channels = float(spec["mean"]), float(spec["std"]), int(spec.get("channels", 3))
        return T.Compose([
            T.Grayscale(1),
            T.Resize((int(spec["size"]), int(spec["size"])), interpolation=T.InterpolationMode.NEAREST),
            T.ToTensor(),
            T.Normalize((mean,), (std,)),
            T.Lambda(lambda x: x.expand(channels, -1, -1).contiguous()),
        ])
    raise ValueError(f"unknown image transform spec {spec!r}")


class UnreadableImageError(InputError):
    """An image of the training or test list cannot be read: the user's data, not a bug.

    Raised inside ``__getitem__``, which may run in a DataLoader worker. The worker sends
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


class ImageFileDataset(Dataset):
    """Images from a list of file paths; item ``i`` is ``(transform(image_i), i)``.

    With ``skip_bad=True`` an unreadable image yields ``(None, i)`` and the error is recorded
    in :attr:`errors` (in the worker that read it); :func:`collate_skip_bad` drops such items
    so one broken file never stops a batch. Training uses ``skip_bad=False``: the training set
    was validated by ``spmlkit prepare`` and silently dropping examples would change results;
    there an unreadable image raises :class:`UnreadableImageError` naming the file and the
    ``spmlkit prepare --check`` scan that finds all of them at once.

    ``cache``: the pre-resized pixels of these very paths, row ``i`` for image ``i``
    (:meth:`spmlkit.data.image_cache.ImageCache.split`); image ``i`` is then
    ``transform(cached row i)`` and its file is never opened, which spares the JPEG decode of
    the full-size image, the slowest step of an epoch.
    """

    def __init__(self, paths: Sequence[str | Path], transform: Callable, *, skip_bad: bool = False,
                 cache: CachedSplit | None = None):
        self.paths = [Path(p) for p in paths]
        self.transform = transform
        self.skip_bad = skip_bad
        self.errors: dict[int, str] = {}
        if cache is not None and len(cache) != len(self.paths):
            raise ValueError(f"the image cache {cache.path} has {len(cache)} rows but the list has {len(self.paths)} "
                             "images; prepare the folder again with --cache-size")
        self.cache = cache

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        from PIL import Image

        path = self.paths[index]
        if self.cache is not None:
            return self.transform(Image.fromarray(self.cache[index])), index
        try:
            with Image.open(path) as img:
                image = img.convert("RGB")
            return self.transform(image), index
        except Exception as exc:  # PIL raises many types for broken files
            if not self.skip_bad:
                reason = " ".join(f"{type(exc).__name__}: {exc}".split())
                raise UnreadableImageError(
                    f"cannot read image {path} ({reason}); find every unreadable image with `spmlkit prepare "
                    "DATASET --root DIR --check` (it lists them in the prepared folder's bad_images.txt), then "
                    "re-download them (replace each with a readable copy) and prepare again"
                ) from exc
            self.errors[index] = f"{type(exc).__name__}: {exc}"
            return None, index


def collate_skip_bad(items: list) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Stack the readable images; return ``(images, indices, bad_indices)``."""
    good = [(x, i) for x, i in items if x is not None]
    bad = torch.tensor([i for x, i in items if x is None], dtype=torch.long)
    if not good:
        return None, torch.empty(0, dtype=torch.long), bad
    xs, idx = zip(*good)
    return torch.stack(xs), torch.tensor(idx, dtype=torch.long), bad
