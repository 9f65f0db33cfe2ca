"""Users' own partially labelled images: what the folder and the CSV forms have in common.

A user's pile of images carries, per image, the labels someone observed (the folder it was
filed in, the search query, the label an annotator clicked), never the full truth. The two
readers (:mod:`.folder`, :mod:`.csv_labels`; docs/protocol.md, "Your own data") turn such
a pile into a :class:`UserData`: the training images with their {-1, 0, 1} observed labels
and, when the user has one, a fully labelled test list. :func:`write_user_data` stores it
in the prepared form (:mod:`.prepared`, ``observation: given``) that training reads.

Readers never stop at the first mistake: every problem they find (an empty folder, an
unknown label on row 7, a missing file, an unreadable image) goes into
``UserData.problems``, so that ``spmlkit prepare ... --check`` can list them all at once;
:func:`write_user_data` refuses data with problems (:class:`UserDataError`) and nothing is
dropped silently. Things worth knowing that are not mistakes (labels that differ only in
case, test images identical to training images) go into ``UserData.warnings``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .check import BadImage, ProgressCallback, verify_images
from .common import AnnotationError
from .prepared import PreparedDataset, write_prepared

__all__ = [
    "IMAGE_SUFFIXES",
    "LABEL_SEPARATOR",
    "USER_DATASETS",
    "ImageList",
    "UserData",
    "UserDataError",
    "assemble",
    "case_warnings",
    "closest",
    "common_base",
    "content_digests",
    "count",
    "default_user_out",
    "is_image_name",
    "link_outside",
    "unreadable_images",
    "write_user_data",
]

USER_DATASETS: tuple[str, ...] = ("folder", "csv")
"""The ``dataset`` names of users' own data in a prepared folder's ``meta.json``."""

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
"""File name endings taken for images (case-insensitive); any other file is ignored and counted."""

LABEL_SEPARATOR = ";"
"""Separates label names inside one CSV cell (a comma would clash with the CSV delimiter)."""

PREPARED_FOLDER = "spmlkit-prepared"
"""Default home of prepared folders inside the user's image folder; never read as a label folder."""

_CHUNK = 1 << 20


class UserDataError(AnnotationError):
    """The user's data has problems; ``problems`` holds every one of them, in reading order.

    The message shows the first problem and how many more there are, because the command line
    prints an error as one line; ``--check`` prints the whole list.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        more = len(self.problems) - 1
        tail = f" (and {more} more problem{'s' if more > 1 else ''}; add --check to list them all)" if more > 0 else ""
        super().__init__(f"{self.problems[0] if self.problems else 'no problem recorded'}{tail}")


@dataclass
class UserData:
    """Users' data as read, before anything is written.

    ``train_images`` and ``test_images`` are paths relative to ``base`` ('/' separators);
    ``observed[i]`` is the int8 {-1, 0, 1} row of ``train_images[i]``; ``test_labels`` the
    uint8 0/1 rows of the test list, or None (with ``test_images`` None) without one.
    ``notes`` say how the data was read (they go to ``meta.json`` as the selection);
    ``problems`` block writing; ``warnings`` do not.
    """

    dataset: str
    class_names: list[str]
    base: Path
    train_images: list[str]
    observed: np.ndarray
    test_images: list[str] | None = None
    test_labels: np.ndarray | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing blocks writing the prepared form."""
        return not self.problems

    def summary(self) -> str:
        """One line: how many images, classes and observed labels were read."""
        n = len(self.train_images)
        pos = int((self.observed == 1).sum()) if self.observed.size else 0
        neg = int((self.observed == -1).sum()) if self.observed.size else 0
        test = ("no labelled test set" if self.test_images is None
                else f"{len(self.test_images)} fully labelled test images")
        negatives = f", {neg} observed negatives" if neg else ""
        return (f"{n} training images, {len(self.class_names)} classes, {pos} observed positives{negatives}; "
                f"{test}")


@dataclass
class ImageList:
    """One list of images as a form reader found it, before the lists are put together.

    ``files[i]`` is the absolute path of image i, ``where[i]`` how a message names it (the
    path, or ``labels.csv row 7 (a.jpg)``), ``labels[i]`` its row: int8 {-1, 0, 1} observed
    labels for training, uint8 0/1 full labels for a test list. ``folder`` holds every file.
    """

    folder: Path
    files: list[Path]
    where: list[str]
    labels: np.ndarray


def assemble(
    dataset: str,
    class_names: list[str],
    train: ImageList,
    test: ImageList | None,
    *,
    digests: dict[Path, str],
    problems: list[str],
    notes: list[str],
    warnings: list[str],
    options: dict[str, Any],
    progress: ProgressCallback | None = None,
) -> UserData:
    """Put a training list and an optional test list together, with the checks that need both.

    A file in both lists is a problem (a test image the model was trained on measures
    nothing); byte-identical files across the lists are a warning (the user may keep copies
    on purpose). Every image is opened with PIL: an unreadable one is a problem named as the
    form names it. Paths become relative to the deepest folder holding both lists.
    """
    base = common_base(train.folder, test.folder) if test is not None else train.folder
    if test is not None:
        trained = dict(zip(train.files, train.where))
        for file, where in zip(test.files, test.where):
            if file in trained:
                problems.append(f"{where}: this test image is also a training image ({trained[file]}); a test image "
                                "must be one the model is not trained on")
        train_digests = {digests[f] for f in train.files if f in digests}
        leaked = [where for file, where in zip(test.files, test.where)
                  if file in digests and digests[file] in train_digests]
        if leaked:
            warnings.append(f"{count(len(leaked), 'test image')} {'is' if len(leaked) == 1 else 'are'} byte-identical "
                            "to training images (e.g. "
                            f"{'; '.join(leaked[:3])}); the test metric over-estimates on them")
        empty = [name for name, n in zip(class_names, test.labels.sum(axis=0)) if n == 0]
        if empty and test.files:
            warnings.append(f"{count(len(empty), 'class', 'classes')} without a positive test image "
                            f"({', '.join(empty[:5])}{', ...' if len(empty) > 5 else ''}); their test AP counts as 0 "
                            "in the mAP")
    unobserved = [name for name, n in zip(class_names, (train.labels == 1).sum(axis=0)) if n == 0]
    if unobserved and train.files:
        warnings.append(f"{count(len(unobserved), 'class', 'classes')} without an observed positive "
                        f"({', '.join(unobserved[:5])}"
                        f"{', ...' if len(unobserved) > 5 else ''}); nothing can teach the model to recognise them")
    warnings += case_warnings(class_names)
    lists = [train] if test is None else [train, test]
    named = {file.relative_to(base).as_posix(): where
             for image_list in lists for file, where in zip(image_list.files, image_list.where)}
    for bad in unreadable_images(base, list(named), progress):
        problems.append(f"{named[bad.path]}: not a readable image ({bad.reason}); replace it with a readable copy or "
                        "remove it")
    problems[:] = sorted(problems, key=_file_and_row)
    return UserData(
        dataset=dataset,
        class_names=list(class_names),
        base=base,
        train_images=[f.relative_to(base).as_posix() for f in train.files],
        observed=np.asarray(train.labels, dtype=np.int8),
        test_images=None if test is None else [f.relative_to(base).as_posix() for f in test.files],
        test_labels=None if test is None else np.asarray(test.labels, dtype=np.uint8),
        problems=problems,
        notes=notes,
        warnings=warnings,
        options=options,
    )


_ROW = re.compile(r"(.+?) (?:row|line) (\d+)\b")


def _file_and_row(problem: str) -> tuple[int, str, int]:
    """Sort key: problems without a row number first (in reading order), then by file and row number.

    The checks run one after the other (paths, labels, files, bytes, pixels), but a user
    fixes a file from top to bottom, so ``--check`` lists its problems in row order.
    """
    match = _ROW.match(problem)
    return (1, match.group(1), int(match.group(2))) if match else (0, "", 0)


def write_user_data(data: UserData, out: str | Path) -> PreparedDataset:
    """Write ``data`` as a prepared folder (``observation: given``), or raise :class:`UserDataError`.

    Every image was opened with PIL while reading (an unreadable one is a problem), so the
    folder records a verified scan with no bad image.
    """
    if data.problems:
        raise UserDataError(data.problems)
    return write_prepared(
        out,
        dataset=data.dataset,
        class_names=data.class_names,
        train_images=data.train_images,
        train_observed=data.observed,
        test_images=data.test_images,
        test_labels=data.test_labels,
        root=data.base,
        selection=[*data.notes, *(f"warning: {w}" for w in data.warnings)],
        options=data.options,
        images_exist_checked=True,
        bad_images=[],
    )


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 image``, ``2 images``: messages read as sentences."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def default_user_out(base: str | Path, dataset: str) -> Path:
    """``<base>/spmlkit-prepared/<dataset>``: where ``spmlkit prepare folder|csv`` writes without ``--out``.

    The same place as a benchmark's prepared folder (inside the data), so a user finds it;
    the folder reader skips ``spmlkit-prepared``, so preparing again never mistakes it for a label.
    """
    return Path(base) / PREPARED_FOLDER / dataset


def link_outside(file: Path, folder: Path) -> Path | None:
    """Where ``file`` really is when a symbolic link (of it or a folder above it) leads out of
    ``folder`` (a resolved path), else None.

    The prepared folder records image paths relative to the images folder and training reads
    them there; a link out of it makes the data depend on files the user never handed over
    (and lets a labels file reach any file on the machine), so such an image is a problem.
    """
    target = file.resolve()
    return None if target == folder or folder in target.parents else target


def is_image_name(path: Path) -> bool:
    """True when the file name ends like an image (:data:`IMAGE_SUFFIXES`)."""
    return path.suffix.lower() in IMAGE_SUFFIXES


def common_base(*folders: Path) -> Path:
    """The deepest folder holding all ``folders``: image paths are stored relative to one root."""
    return Path(os.path.commonpath([os.fspath(f) for f in folders]))


def content_digests(paths: Iterable[Path]) -> dict[Path, str]:
    """SHA-256 of every file that has the same size as another one of ``paths``.

    Files of different sizes cannot be identical, so only size collisions are read; on a
    pile of photos that is usually a handful of files, not the whole collection.
    """
    by_size: dict[int, list[Path]] = defaultdict(list)
    for path in dict.fromkeys(paths):
        by_size[path.stat().st_size].append(path)
    digests: dict[Path, str] = {}
    for group in by_size.values():
        if len(group) < 2:
            continue
        for path in group:
            sha = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    sha.update(chunk)
            digests[path] = sha.hexdigest()
    return digests


def unreadable_images(base: Path, relative: Sequence[str], progress: ProgressCallback | None = None) -> list[BadImage]:
    """The images among ``relative`` (paths under ``base``) that PIL cannot open, with the reason.

    Users' piles hold the odd truncated download or a text file named ``.jpg``; found here
    it is one line in a list, found in epoch 3 it is a crashed run.
    """
    return verify_images(base, relative, progress)


def case_warnings(class_names: Sequence[str]) -> list[str]:
    """A warning per group of class names that differ only in letter case ("Cat", "cat")."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in class_names:
        groups[name.casefold()].append(name)
    return [f"the labels {', '.join(repr(n) for n in names)} differ only in letter case; they are "
            "separate classes (rename them to one spelling if they mean the same thing)"
            for names in groups.values() if len(names) > 1]


def closest(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'cat'?)`` for a misspelt label, or an empty string."""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""
