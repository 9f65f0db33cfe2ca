"""Shared pieces of the dataset readers: errors, the parsed form, small file helpers.

Every reader (:mod:`.voc`, :mod:`.coco`, :mod:`.nuswide`, :mod:`.cub`) turns an official
on-disk layout into a :class:`ParsedDataset`: class names, and for the official train and
test lists the image paths (relative to a base folder) and a 0/1 label matrix. The
preparation step (:func:`spmlkit.data.formats.prepare`) then checks the images and writes
the prepared form (:mod:`.prepared`).

Errors say which path was expected, what was found instead and what to do, because the
usual cause is a ``--root`` that points one folder too high or too low.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "AnnotationError",
    "DatasetNotFoundError",
    "MissingImagesError",
    "ParsedDataset",
    "PrepareError",
    "SplitLists",
    "existing_root",
    "posix_relative",
    "read_lines",
    "require_file",
]


class PrepareError(Exception):
    """Base class of every error raised while preparing or loading a dataset."""


class DatasetNotFoundError(PrepareError, FileNotFoundError):
    """An expected file or folder of the official layout is not there (usually a wrong root)."""


class AnnotationError(PrepareError, ValueError):
    """An annotation or list file exists but does not parse, or contradicts another file."""


class MissingImagesError(PrepareError, FileNotFoundError):
    """Images named by the annotation files are absent on disk."""


@dataclass
class SplitLists:
    """One official split: image paths relative to the dataset base and their labels.

    ``labels`` is ``uint8`` 0/1 of shape ``[len(images), C]``; row ``i`` belongs to
    ``images[i]``. Paths use ``/`` separators on every platform so the prepared files are
    portable.
    """

    images: list[str]
    labels: np.ndarray

    def __post_init__(self) -> None:
        labels = np.asarray(self.labels)
        if labels.ndim != 2 or labels.shape[0] != len(self.images):
            raise ValueError(f"labels must have shape [{len(self.images)}, C] (one row per image), got {labels.shape}")
        if labels.size and not np.isin(labels, (0, 1)).all():
            raise ValueError("labels must contain only 0 and 1")
        self.labels = labels.astype(np.uint8, copy=False)


@dataclass
class ParsedDataset:
    """What a reader extracts from an official layout, before any image check.

    ``base`` is the absolute folder the image paths are relative to. ``notes`` are
    human-readable sentences on the selection rule applied (they go to ``meta.json``);
    ``details`` are the reader's options worth recording (variant, mode, ...);
    ``reference_counts`` are the published (train, test) sizes of the official lists, or
    ``None`` where there are none. ``images_checked`` is set by readers whose selection rule
    already consulted the disk, and ``image_hint`` tells the user how to obtain the images.
    """

    class_names: list[str]
    train: SplitLists
    test: SplitLists
    base: Path
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    reference_counts: tuple[int, int] | None = None
    images_checked: bool = False
    image_hint: str = ""

    def __post_init__(self) -> None:
        n_classes = len(self.class_names)
        if len(set(self.class_names)) != n_classes:
            raise AnnotationError(f"class names are not unique: {self.class_names}")
        for name, split in (("train", self.train), ("test", self.test)):
            if split.labels.shape[1] != n_classes:
                raise AnnotationError(
                    f"{name} labels have {split.labels.shape[1]} columns but there are {n_classes} class names"
                )


def existing_root(root: str | Path, hint: str) -> Path:
    """``root`` expanded (``~``) and made absolute, or a :class:`DatasetNotFoundError`.

    Every reader starts here, so that a mistyped ``--root`` is reported as such, with the
    reader's ``hint`` on what the folder should contain, before any file inside it is sought.
    """
    resolved = Path(root).expanduser().resolve()
    if not resolved.is_dir():
        raise DatasetNotFoundError(f"dataset root {resolved} is not an existing folder. {hint}")
    return resolved


def require_file(path: Path, what: str, hint: str) -> Path:
    """Return ``path`` if it is an existing file, else raise a :class:`DatasetNotFoundError`.

    ``what`` names the file in the message ("the VOC 2012 class list ..."); ``hint`` says
    where it comes from or how to fix the root.
    """
    if not path.is_file():
        found = "a folder, not a file" if path.is_dir() else "not found"
        raise DatasetNotFoundError(f"expected {what} at {path}: {found}. {hint}".rstrip())
    return path


def read_lines(path: Path) -> list[str]:
    """Non-empty, stripped lines of a text file (tolerates CRLF, BOM and trailing blanks)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise AnnotationError(f"{path} is not a UTF-8 text file ({err})") from err
    return [line.strip() for line in text.splitlines() if line.strip()]


def posix_relative(parts: Sequence[str] | Iterable[str]) -> str:
    """Join path components with ``/`` (the prepared form's separator on every platform)."""
    return "/".join(p for p in parts if p)
