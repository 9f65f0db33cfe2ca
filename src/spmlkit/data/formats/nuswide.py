"""NUS-WIDE reader (Chua et al., "NUS-WIDE: A Real-World Web Image Database from National
University of Singapore", CIVR 2009), following docs/protocol.md, "NUS-WIDE".

There is no official formatting script for the SPML protocol, so two modes exist.

``mode="formatted"``: the lists the EM authors distribute (used by EM and GR; 150,000 train
/ 60,260 test). ``root`` holds ``formatted_train_images.npy``, ``formatted_train_labels.npy``
and the test pair ``formatted_val_{images,labels}.npy`` (the base code's name for the test
list) or ``formatted_test_{images,labels}.npy``; ``Flickr/`` holds the images. The EM README
lists the train label file twice and omits ``formatted_val_labels.npy``, so whatever is
there is accepted and a missing file is named in the error. Rows and columns are used
exactly as given. Image names are relative to ``Flickr/`` (backslashes turned into ``/``; a
leading ``Flickr/`` is not doubled). The counts are checked against 150,000 / 60,260
(``expect_counts=False``, ``--no-expect-counts`` on the command line, accepts other
versions, e.g. Cole et al.'s re-crawled subset).
The ``.npy`` files hold no class names: they come from ``class_names=`` (a list or a file
with one name per line), else from ``Concepts81.txt`` if present (assumed to be the column
order, as for the raw distribution; recorded in ``meta.json``), else ``concept_00`` ....

``mode="raw"``: the official distribution. ``root`` holds ``ImageList/TrainImagelist.txt``
and ``ImageList/TestImagelist.txt``, ``Concepts81.txt`` (or ``ConceptsList/Concepts81.txt``),
``Groundtruth/TrainTestLabels/Labels_<concept>_{Train,Test}.txt`` (one 0/1 per line,
aligned with the image lists) and the images under ``Flickr/``. Our selection rule (the
EM lists cannot be rebuilt from it, so this is *our definition*, not the published split):

- list entries such as ``actor\\0001_2124494179.jpg`` map to ``Flickr/actor/0001_2124494179.jpg``
  (the last two components of the entry, whatever the separator);
- keep an image iff it has at least one positive among the 81 concepts and its file
  exists on disk (many Flickr copies are incomplete); ``missing="error"`` raises instead of
  dropping absent files;
- image-list order; columns in ``Concepts81.txt`` order.

``mode=None`` picks "formatted" when any ``formatted_*.npy`` file is in ``root``, else "raw".
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    AnnotationError,
    DatasetNotFoundError,
    MissingImagesError,
    ParsedDataset,
    SplitLists,
    existing_root,
    posix_relative,
    read_lines,
    require_file,
)

__all__ = ["EXPECTED_FORMATTED_COUNTS", "NUSWIDE_MODES", "parse_nuswide"]

NUSWIDE_MODES = ("formatted", "raw")
EXPECTED_FORMATTED_COUNTS = (150000, 60260)
"""Official-version list sizes distributed by the EM authors (EM Table 5; docs/protocol.md,
"Datasets")."""

_CONCEPT_FILES = ("Concepts81.txt", "ConceptsList/Concepts81.txt")
_IMAGE_HINT = "The images come from the official Flickr.zip, unpacked as Flickr/ under the root."
_SEPARATORS = re.compile(r"[\\/]+")


def _to_flickr_path(entry: str) -> str:
    """``Flickr/<subdir>/<file>`` from a list entry with either kind of separator."""
    parts = [p for p in _SEPARATORS.split(entry.strip()) if p]
    if len(parts) < 2:
        raise AnnotationError(f"image list entry {entry!r} is not of the form <subdir>\\<file>")
    return posix_relative(("Flickr", parts[-2], parts[-1]))


def _find_concepts(root: Path) -> Path | None:
    for name in _CONCEPT_FILES:
        if (root / name).is_file():
            return root / name
    return None


def _read_names(path: Path) -> list[str]:
    names = read_lines(path)
    if len(set(names)) != len(names):
        raise AnnotationError(f"{path} lists some names more than once")
    return names


def _load_npy(path: Path, allow_pickle: bool) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=allow_pickle)
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise AnnotationError(
                f"{path} stores Python objects (pickled), which spmlkit prepare does not load because "
                "unpickling can run code. If you trust its source, re-save it as a plain array "
                "(numpy: np.save(path, np.load(path, allow_pickle=True).astype(str)) for image names, "
                ".astype(float) for labels) and prepare again"
            ) from err
        raise AnnotationError(f"{path} is not a readable .npy file ({err})") from err
    except OSError as err:
        raise AnnotationError(f"{path} is not a readable .npy file ({err})") from err


def _formatted_split(root: Path, stem: str, allow_pickle: bool) -> SplitLists:
    images_path, labels_path = root / f"{stem}_images.npy", root / f"{stem}_labels.npy"
    names = _load_npy(images_path, allow_pickle)
    labels = _load_npy(labels_path, allow_pickle)
    if names.ndim != 1:
        raise AnnotationError(f"{images_path} must be a 1-D array of image names, got shape {names.shape}")
    if labels.ndim != 2 or labels.shape[0] != names.shape[0]:
        raise AnnotationError(
            f"{labels_path} must be a [{names.shape[0]}, C] matrix (one row per image in {images_path.name}), "
            f"got shape {labels.shape}"
        )
    if not np.isin(labels, (0, 1)).all():
        raise AnnotationError(f"{labels_path} must contain only 0 and 1")
    images = []
    for name in names:
        parts = [p for p in _SEPARATORS.split(str(name).strip()) if p]
        if not parts:
            raise AnnotationError(f"{images_path} contains an empty image name")
        images.append(posix_relative(parts if parts[0] == "Flickr" else ["Flickr", *parts]))
    return SplitLists(images, labels.astype(np.uint8))


def _parse_formatted(
    root: Path, expect_counts: bool, class_names: Sequence[str] | str | Path | None, allow_pickle: bool
) -> ParsedDataset:
    test_stem = (
        "formatted_val"
        if (root / "formatted_val_images.npy").is_file() or (root / "formatted_val_labels.npy").is_file()
        else "formatted_test"
    )
    needed = [
        "formatted_train_images.npy",
        "formatted_train_labels.npy",
        f"{test_stem}_images.npy",
        f"{test_stem}_labels.npy",
    ]
    missing = [name for name in needed if not (root / name).is_file()]
    if missing:
        raise DatasetNotFoundError(
            f"NUS-WIDE formatted lists incomplete under {root}: missing {missing}. The EM authors' "
            "archive holds formatted_{train,val}_{images,labels}.npy (their README omits "
            "formatted_val_labels.npy, which is still needed as the test labels); "
            "the test pair may also be named formatted_test_*.npy."
        )
    train = _formatted_split(root, "formatted_train", allow_pickle)
    test = _formatted_split(root, test_stem, allow_pickle)
    if train.labels.shape[1] != test.labels.shape[1]:
        raise AnnotationError(
            f"train labels have {train.labels.shape[1]} columns but {test_stem}_labels.npy has {test.labels.shape[1]}"
        )
    counts = (len(train.images), len(test.images))
    if expect_counts and counts != EXPECTED_FORMATTED_COUNTS:
        raise AnnotationError(
            f"NUS-WIDE formatted lists under {root} have {counts[0]} train / {counts[1]} test images, "
            f"but the EM authors' official version has {EXPECTED_FORMATTED_COUNTS[0]} / "
            f"{EXPECTED_FORMATTED_COUNTS[1]}. For another version (e.g. Cole et al.'s re-crawled subset) "
            "add --no-expect-counts to spmlkit prepare; its results are not comparable with the EM/GR tables."
        )
    n_classes = train.labels.shape[1]
    notes = [
        f"formatted lists used as given: train = formatted_train_*.npy, test = {test_stem}_*.npy",
        "image names relative to Flickr/",
    ]
    if class_names is not None:
        names = list(class_names) if not isinstance(class_names, (str, Path)) else _read_names(Path(class_names))
        source = "class_names option"
    elif (concepts := _find_concepts(root)) is not None:
        names = _read_names(concepts)
        source = f"{concepts.relative_to(root).as_posix()} (assumed to be the column order of the formatted files)"
    else:
        names = [f"concept_{c:02d}" for c in range(n_classes)]
        source = "placeholder names: no Concepts81.txt found and no class_names given"
    if len(names) != n_classes:
        raise AnnotationError(f"{len(names)} class names from {source}, but the label files have {n_classes} columns")
    notes.append(f"class names from {source}")
    details = {"mode": "formatted", "expect_counts": expect_counts}
    return _nuswide_dataset(root, [str(n) for n in names], train, test, notes, details, EXPECTED_FORMATTED_COUNTS)


def _raw_split(root: Path, concepts: list[str], which: str, missing: str) -> tuple[SplitLists, list[str]]:
    list_path = require_file(
        root / "ImageList" / f"{which}Imagelist.txt",
        f"the NUS-WIDE image list ImageList/{which}Imagelist.txt",
        "It comes with the official ImageList.zip; point root at the folder that contains ImageList/.",
    )
    images = [_to_flickr_path(entry) for entry in read_lines(list_path)]
    labels = np.zeros((len(images), len(concepts)), dtype=np.uint8)
    for c, concept in enumerate(concepts):
        path = require_file(
            root / "Groundtruth" / "TrainTestLabels" / f"Labels_{concept}_{which}.txt",
            f"the label file of concept {concept!r}",
            "It comes with the official Groundtruth.zip (TrainTestLabels/).",
        )
        try:
            column = np.loadtxt(path, dtype=np.int64, ndmin=1)
        except ValueError as err:
            raise AnnotationError(f"{path} must hold one 0/1 integer per line ({err})") from err
        if column.shape != (len(images),):
            raise AnnotationError(
                f"{path} has {column.size} values but {list_path.name} lists {len(images)} images; "
                "they must be aligned line by line"
            )
        if not np.isin(column, (0, 1)).all():
            raise AnnotationError(f"{path} must contain only 0 and 1")
        labels[:, c] = column
    positive = labels.any(axis=1)
    base = os.fspath(root)
    exists = np.fromiter((os.path.isfile(os.path.join(base, p)) for p in images), dtype=bool, count=len(images))
    absent = [p for p, ok, pos in zip(images, exists, positive) if pos and not ok]
    if absent and missing == "error":
        raise MissingImagesError(
            f"{len(absent)} positive-labelled images of {list_path.name} are missing under {root / 'Flickr'}, "
            f"e.g. {absent[:5]}. Unpack the official Flickr.zip there, or prepare without missing='error' "
            "to drop them (the default, and what spmlkit prepare does)."
        )
    keep = positive & exists
    kept = [p for p, k in zip(images, keep) if k]
    note = (
        f"{which.lower()}: {len(images)} listed, {int((~positive).sum())} without positive label dropped, "
        f"{len(absent)} missing on disk dropped, {len(kept)} kept"
    )
    return SplitLists(kept, labels[keep]), [note]


def _parse_raw(root: Path, missing: str) -> ParsedDataset:
    concepts_path = _find_concepts(root)
    if concepts_path is None:
        raise DatasetNotFoundError(
            f"NUS-WIDE not found under {root}: expected formatted_train_labels.npy (EM authors' lists) or the "
            f"official distribution with {' or '.join(_CONCEPT_FILES)}, ImageList/ and Groundtruth/. "
            "Point root at the folder that contains them."
        )
    concepts = _read_names(concepts_path)
    train, train_notes = _raw_split(root, concepts, "Train", missing)
    test, test_notes = _raw_split(root, concepts, "Test", missing)
    notes = [
        (
            "raw official distribution (our selection rule, not the EM/GR lists): "
            "ImageList/{Train,Test}Imagelist.txt with Groundtruth/TrainTestLabels/Labels_<concept>_{Train,Test}.txt"
        ),
        "kept images with >= 1 positive concept that exist under Flickr/; image-list order",
        f"class order = {concepts_path.relative_to(root).as_posix()}",
        *train_notes,
        *test_notes,
    ]
    details = {"mode": "raw", "missing": missing}
    return _nuswide_dataset(root, concepts, train, test, notes, details, None, images_checked=True)


def _nuswide_dataset(
    root: Path,
    class_names: list[str],
    train: SplitLists,
    test: SplitLists,
    notes: list[str],
    details: dict[str, Any],
    reference_counts: tuple[int, int] | None,
    *,
    images_checked: bool = False,
) -> ParsedDataset:
    """The parsed form of either mode: both keep the images under ``Flickr/`` of the root."""
    return ParsedDataset(
        class_names, train, test, root, notes, details,
        reference_counts=reference_counts, images_checked=images_checked, image_hint=_IMAGE_HINT,
    )  # fmt: skip


def parse_nuswide(
    root: str | Path,
    *,
    mode: str | None = None,
    expect_counts: bool = True,
    class_names: Sequence[str] | str | Path | None = None,
    missing: str = "drop",
    allow_pickle: bool = False,
) -> ParsedDataset:
    """Read NUS-WIDE from the EM authors' formatted lists or the official raw files.

    See docs/protocol.md, "NUS-WIDE". ``expect_counts``, ``class_names`` and ``allow_pickle`` apply to the formatted mode,
    ``missing`` ("drop" or "error") to the raw mode; see the module docstring.
    """
    if mode not in (None, *NUSWIDE_MODES):
        raise ValueError(f"mode must be None (auto) or one of {list(NUSWIDE_MODES)}, got {mode!r}")
    if missing not in ("drop", "error"):
        raise ValueError(f"missing must be 'drop' or 'error', got {missing!r}")
    root = existing_root(
        root,
        "Point root at the folder with the NUS-WIDE formatted lists (formatted_*.npy) or the official "
        "ImageList/, Groundtruth/ and Flickr/.",
    )
    if mode is None:
        mode = "formatted" if any(root.glob("formatted_*.npy")) else "raw"
    if mode == "formatted":
        return _parse_formatted(root, expect_counts, class_names, allow_pickle)
    return _parse_raw(root, missing)
