"""CUB-200-2011 attribute reader (Wah et al., "The Caltech-UCSD Birds-200-2011 Dataset",
CNS-TR-2011-001), following docs/protocol.md, "CUB-200-2011": 312 binary attributes as classes.

``CUB_200_2011.tgz`` unpacks to ``attributes.txt`` (attribute names) next to the dataset
folder ``CUB_200_2011/``, which holds ``images.txt`` (id, relative path),
``train_test_split.txt`` (id, is_train), ``attributes/image_attribute_labels.txt``
(image_id, attribute_id, is_present, certainty_id, time) and ``images/``.

The code bases disagree on the depth (docs/protocol.md, "Inconsistent numbers and paths
across papers and code bases"): the base code expects
``<root>/CUB_200_2011/attributes.txt`` and ``<root>/CUB_200_2011/CUB_200_2011/images.txt``,
the EM, LL and GR forks ``<root>/attributes.txt`` and ``<root>/CUB_200_2011/images.txt``.
Both are searched, and ``root`` may also be the dataset folder itself. ``attributes.txt`` is
looked for next to the dataset folder, then inside it (and in its ``attributes/``).

- Label = ``is_present`` (certainty and time ignored); only the first three columns are
  read, so the few real lines with extra columns or whitespace parse fine; every (image,
  attribute) pair must appear exactly once.
- Train = is_train 1 (5,994), test = is_train 0 (5,794); ``images.txt`` order; no
  filtering (some rows may have no positive attribute).
- Paths ``CUB_200_2011/images/<path from images.txt>``, relative to the folder containing
  the dataset folder (or ``images/...`` relative to the dataset folder when it is not
  named ``CUB_200_2011``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import (
    AnnotationError,
    DatasetNotFoundError,
    ParsedDataset,
    SplitLists,
    existing_root,
    posix_relative,
    read_lines,
    require_file,
)

__all__ = ["parse_cub"]

_FOLDER = "CUB_200_2011"
_HINT = (
    "Point root at the folder into which CUB_200_2011.tgz was unpacked (it contains attributes.txt "
    "and CUB_200_2011/), or at CUB_200_2011/ itself."
)


def _locate(root: str | Path) -> tuple[Path, Path]:
    """Return (dataset folder holding images.txt, attributes.txt path)."""
    root = existing_root(root, _HINT)
    candidates = [root, root / _FOLDER, root / _FOLDER / _FOLDER]
    data_dir = next((d for d in candidates if (d / "images.txt").is_file()), None)
    if data_dir is None:
        tried = ", ".join(str(d / "images.txt") for d in candidates)
        raise DatasetNotFoundError(f"expected CUB-200-2011's images.txt; looked for {tried}: not found. {_HINT}")
    names = [
        data_dir.parent / "attributes.txt",
        data_dir / "attributes.txt",
        data_dir / "attributes" / "attributes.txt",
    ]
    attributes = next((p for p in names if p.is_file()), None)
    if attributes is None:
        tried = ", ".join(str(p) for p in names)
        raise DatasetNotFoundError(
            f"expected the attribute names attributes.txt (shipped next to CUB_200_2011/ in CUB_200_2011.tgz); "
            f"looked for {tried}: not found"
        )
    return data_dir, attributes


def _id_value_pairs(path: Path, what: str) -> tuple[np.ndarray, list[str]]:
    """Parse lines ``<integer id> <value>``; returns ids and the raw values (rest of line)."""
    ids, values = [], []
    for number, line in enumerate(read_lines(path), start=1):
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not parts[0].isdigit():
            raise AnnotationError(f"{path}, line {number}: expected '<id> <{what}>', got {line!r}")
        ids.append(int(parts[0]))
        values.append(parts[1].strip())
    id_array = np.asarray(ids, dtype=np.int64)
    if len(np.unique(id_array)) != len(id_array):
        raise AnnotationError(f"{path} lists some ids more than once")
    return id_array, values


def _attribute_names(path: Path) -> list[str]:
    ids, names = _id_value_pairs(path, "attribute name")
    if not np.array_equal(np.sort(ids), np.arange(1, len(ids) + 1)):
        raise AnnotationError(f"{path}: attribute ids must be 1..{len(ids)}, each once")
    ordered = [""] * len(ids)
    for attribute_id, name in zip(ids, names):
        ordered[attribute_id - 1] = name
    return ordered


def _label_matrix(path: Path, image_ids: np.ndarray, n_attributes: int) -> np.ndarray:
    """``[N_images, A]`` is_present matrix, rows in ``image_ids`` order (vectorised parse)."""
    try:
        table = np.loadtxt(path, usecols=(0, 1, 2), dtype=np.int64, ndmin=2)
    except ValueError as err:
        raise AnnotationError(
            f"{path} must have lines 'image_id attribute_id is_present certainty_id time' ({err})"
        ) from err
    image_col, attr_col, present = table[:, 0], table[:, 1], table[:, 2]
    lookup = np.full(int(max(image_ids.max(), image_col.max(initial=0))) + 1, -1, dtype=np.int64)
    lookup[image_ids] = np.arange(len(image_ids))
    rows = np.where(image_col >= 0, lookup[np.clip(image_col, 0, None)], -1)
    bad = np.flatnonzero((rows < 0) | (attr_col < 1) | (attr_col > n_attributes) | ~np.isin(present, (0, 1)))
    if bad.size:
        i = bad[0]
        raise AnnotationError(
            f"{path}, data row {i + 1}: image {image_col[i]}, attribute {attr_col[i]}, is_present {present[i]} "
            f"(expected an image id of images.txt, an attribute id in 1..{n_attributes} and is_present 0 or 1)"
        )
    flat = rows * n_attributes + (attr_col - 1)
    counts = np.bincount(flat, minlength=len(image_ids) * n_attributes)
    wrong = np.flatnonzero(counts != 1)
    if wrong.size:
        row, col = divmod(int(wrong[0]), n_attributes)
        times = int(counts[wrong[0]])
        raise AnnotationError(
            f"{path}: (image {image_ids[row]}, attribute {col + 1}) appears {times} times; every image of "
            f"images.txt needs exactly one line per attribute ({wrong.size} pairs are wrong)"
        )
    labels = np.zeros(len(image_ids) * n_attributes, dtype=np.uint8)
    labels[flat] = present
    return labels.reshape(len(image_ids), n_attributes)


def parse_cub(root: str | Path) -> ParsedDataset:
    """Read CUB-200-2011 attributes from either directory depth used by the code bases.

    See docs/protocol.md, "CUB-200-2011".
    """
    data_dir, attributes_path = _locate(root)
    image_ids, relative = _id_value_pairs(data_dir / "images.txt", "relative image path")
    split_path = require_file(
        data_dir / "train_test_split.txt", "train_test_split.txt", f"It comes with CUB_200_2011.tgz. {_HINT}"
    )
    split_ids, flags = _id_value_pairs(split_path, "is_train")
    if set(split_ids.tolist()) != set(image_ids.tolist()) or any(f not in ("0", "1") for f in flags):
        raise AnnotationError(f"{split_path} must give is_train 0 or 1 for exactly the ids of images.txt")
    is_train_by_id = dict(zip(split_ids.tolist(), (f == "1" for f in flags)))
    is_train = np.array([is_train_by_id[i] for i in image_ids.tolist()], dtype=bool)

    names = _attribute_names(attributes_path)
    labels_path = require_file(
        data_dir / "attributes" / "image_attribute_labels.txt",
        "attributes/image_attribute_labels.txt",
        "It comes with CUB_200_2011.tgz.",
    )
    labels = _label_matrix(labels_path, image_ids, len(names))

    if data_dir.name == _FOLDER:
        base, prefix = data_dir.parent, _FOLDER
    else:
        base, prefix = data_dir, ""
    images = [posix_relative((prefix, "images", rel)) for rel in relative]
    train_rows, test_rows = np.flatnonzero(is_train), np.flatnonzero(~is_train)
    notes = [
        f"dataset folder {data_dir}, attribute names from {attributes_path}",
        "label = is_present (certainty ignored); train = is_train 1, test = is_train 0; images.txt order; no filtering",
        (
            f"rows without any positive attribute: train {int((labels[train_rows].sum(1) == 0).sum())}, "
            f"test {int((labels[test_rows].sum(1) == 0).sum())}"
        ),
    ]
    return ParsedDataset(
        class_names=names,
        train=SplitLists([images[i] for i in train_rows], labels[train_rows]),
        test=SplitLists([images[i] for i in test_rows], labels[test_rows]),
        base=base,
        notes=notes,
        reference_counts=(5994, 5794),
        image_hint="images/ comes with CUB_200_2011.tgz.",
    )
