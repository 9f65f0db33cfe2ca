"""Image datasets over files on disk, the papers' transforms, and tolerant loading.

Every dataset yields ``(image_tensor, index)``: labels are looked up by index in the label
state, which is where observed and pseudo-labels live, so a dataset never needs to know the
observation setting.

Transforms follow the base protocol (docs/protocol.md, "Training protocols"): resize to
``size x size`` (no crop), horizontal flip with probability 0.5 for training, ImageNet
normalisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch
from torch.utils.data import Dataset

from ..errors import InputError

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "build_transform",
    "transform_from_spec",
    "ImageFileDataset",
    "UnreadableImageError",
    "collate_skip_bad",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def build_transform(size: int, *, train: bool, hflip: bool = True) -> Callable:
    """Resize to ``size x size`` (+ random horizontal flip when training), tensor, normalise."""
    from torchvision import transforms as T

    steps = [T.Resize((size, size))]
    if train and hflip:
        steps.append(T.RandomHorizontalFlip(0.5))
    steps += [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return T.Compose(steps)


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
    """

    def __init__(self, paths: Sequence[str | Path], transform: Callable, *, skip_bad: bool = False):
        self.paths = [Path(p) for p in paths]
        self.transform = transform
        self.skip_bad = skip_bad
        self.errors: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        from PIL import Image

        path = self.paths[index]
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
