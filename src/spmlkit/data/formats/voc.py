"""PASCAL VOC 2012 and VOC 2007 readers (Everingham et al., "The PASCAL Visual Object
Classes (VOC) Challenge", IJCV 2010), following docs/protocol.md, "VOC 2012" and "VOC 2007".

VOC 2012 (the base SPML protocol of Cole et al., CVPR 2021), from
``VOCtrainval_11-May-2012.tar``:

- official train = ``ImageSets/Main/<class>_train.txt``, test = ``<class>_val.txt``;
- each line is ``<id> <flag>``, flag = last whitespace token in {1, 0, -1}; only 1 is a
  positive, so 0 ("difficult only") and -1 are negatives;
- an image is kept only if it is positive for at least one class (this is what yields the
  published 5,717 / 5,823), and rows are sorted lexicographically by file name ``<id>.jpg``.

VOC 2007 (used by PU-MLC), from ``VOCtrainval_06-Nov-2007.tar`` and
``VOCtest_06-Nov-2007.tar`` unpacked into the same ``VOCdevkit``:

- train = ``ImageSets/Main/trainval.txt`` (5,011), test = ``ImageSets/Main/test.txt`` (4,952),
  rows in list-file order, no filtering;
- labels from ``Annotations/<id>.xml``: class c is positive iff at least one object of c
  is not flagged ``<difficult>1</difficult>`` (a missing flag counts as not difficult).

``root`` may be the folder that contains ``VOCdevkit``, ``VOCdevkit`` itself or the
``VOC20xx`` folder. Image paths are written relative to the folder that contains
``VOCdevkit`` (``VOCdevkit/VOC2012/JPEGImages/<id>.jpg``), or relative to the ``VOC20xx``
folder when it does not sit inside a ``VOCdevkit`` folder.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
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

__all__ = ["VOC_CLASSES", "parse_voc2007", "parse_voc2012"]

VOC_CLASSES: tuple[str, ...] = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip
"""The 20 VOC classes in the fixed column order of docs/protocol.md, "VOC 2012" (shared by VOC 2007)."""

_ARCHIVES = {
    "VOC2012": "VOCtrainval_11-May-2012.tar",
    "VOC2007": "VOCtrainval_06-Nov-2007.tar (and VOCtest_06-Nov-2007.tar for the test list)",
}
_YEAR_FOLDER = re.compile(r"^VOC\d{4}$")
_SHOW_IDS = 10  # how many image ids an error about incomplete class lists names


def _locate(root: Path, year: str, probe: str) -> tuple[Path, Path, str]:
    """Find the ``VOC<year>`` folder from ``root``; return (voc folder, base, path prefix).

    ``probe`` is a file (relative to the VOC folder) whose presence identifies the layout.
    The root itself is accepted only if it is not visibly another year's folder, so that a
    VOC 2007 folder is never read as VOC 2012.
    """
    hint = f"Point root at the folder that contains VOCdevkit/ (unpacked from {_ARCHIVES[year]})."
    root = existing_root(root, hint)
    candidates = [root / "VOCdevkit" / year, root / year]
    if root.name == year or not _YEAR_FOLDER.match(root.name):
        candidates.append(root)
    for voc_dir in candidates:
        if (voc_dir / probe).is_file():
            break
    else:
        raise DatasetNotFoundError(f"expected VOCdevkit/{year}/{probe} under {root}: not found. {hint}")
    if voc_dir.parent.name == "VOCdevkit":
        return voc_dir, voc_dir.parent.parent, f"VOCdevkit/{year}"
    return voc_dir, voc_dir, ""


def _read_flags(path: Path) -> dict[str, int]:
    """Parse a ``<class>_<set>.txt`` file: image id -> flag (last whitespace token)."""
    flags: dict[str, int] = {}
    for number, line in enumerate(read_lines(path), start=1):
        tokens = line.split()
        try:
            flag = int(tokens[-1])
        except ValueError:
            flag = None
        if len(tokens) < 2 or flag not in (-1, 0, 1):
            raise AnnotationError(
                f"{path}, line {number}: expected '<image id> <flag>' with flag 1, 0 or -1, got {line!r}"
            )
        flags[tokens[0]] = flag
    return flags


def _require_complete_lists(flags_by_file: dict[Path, dict[str, int]], image_set: str) -> set[str]:
    """The ids of one image set, after checking that every class list names all of them.

    Each ``<class>_<set>.txt`` of the official archive lists every image of the set with a
    flag (1, 0 or -1); the reference formatter only reads those flags, so an id absent from
    one file would silently become a negative of that class. An absent id therefore means a
    damaged or partly extracted download, and is refused here instead.
    """
    listed: set[str] = set().union(*flags_by_file.values())
    lacking = {path: sorted(listed.difference(flags)) for path, flags in flags_by_file.items()}
    lacking = {path: ids for path, ids in lacking.items() if ids}
    if not lacking:
        return listed
    path, ids = next(iter(lacking.items()))
    shown = ", ".join(ids[:_SHOW_IDS]) + (f" (and {len(ids) - _SHOW_IDS} more)" if len(ids) > _SHOW_IDS else "")
    lister = next(p for p, flags in flags_by_file.items() if ids[0] in flags)
    others = f" {len(lacking) - 1} other class lists of this set lack ids too." if len(lacking) > 1 else ""
    raise AnnotationError(
        f"{path} lacks {len(ids)} image id(s) that other class lists of image set {image_set!r} name: "
        f"{shown} (e.g. listed in {lister.name}).{others} Every <class>_{image_set}.txt names every image "
        "of its set with a flag 1, 0 or -1, so this file is incomplete (a damaged or partly extracted "
        "download) and those images would silently count as negatives of its class. "
        f"Re-extract {_ARCHIVES['VOC2012']}."
    )


def _voc2012_split(voc_dir: Path, prefix: str, image_set: str) -> tuple[SplitLists, int]:
    """Labels of one VOC 2012 image set ("train" or "val"); returns the split and #listed ids."""
    main = voc_dir / "ImageSets" / "Main"
    flags_by_file: dict[Path, dict[str, int]] = {}
    for name in VOC_CLASSES:
        path = require_file(
            main / f"{name}_{image_set}.txt",
            f"the VOC 2012 class list {name}_{image_set}.txt",
            f"{_ARCHIVES['VOC2012']} contains one such file per class and image set.",
        )
        flags_by_file[path] = _read_flags(path)
    listed = _require_complete_lists(flags_by_file, image_set)
    positives: dict[str, set[int]] = {}
    for c, flags in enumerate(flags_by_file.values()):  # files in VOC_CLASSES order
        for image_id, flag in flags.items():
            if flag == 1:
                positives.setdefault(image_id, set()).add(c)
    # Sort by file name, as the reference formatter does (docs/protocol.md, "VOC 2012").
    file_names = sorted(f"{image_id}.jpg" for image_id in positives)
    labels = np.zeros((len(file_names), len(VOC_CLASSES)), dtype=np.uint8)
    for row, file_name in enumerate(file_names):
        labels[row, sorted(positives[file_name[: -len(".jpg")]])] = 1
    images = [posix_relative((prefix, "JPEGImages", f)) for f in file_names]
    return SplitLists(images, labels), len(listed)


def parse_voc2012(root: str | Path) -> ParsedDataset:
    """Read VOC 2012: train from ``<class>_train.txt``, test from ``<class>_val.txt``.

    See docs/protocol.md, "VOC 2012".
    """
    voc_dir, base, prefix = _locate(Path(root), "VOC2012", f"ImageSets/Main/{VOC_CLASSES[0]}_train.txt")
    train, n_train = _voc2012_split(voc_dir, prefix, "train")
    test, n_test = _voc2012_split(voc_dir, prefix, "val")
    notes = [
        "train = ImageSets/Main/<class>_train.txt, test = ImageSets/Main/<class>_val.txt",
        "flag = last token of each line; only 1 is positive (0 'difficult only' and -1 are negative)",
        (
            f"kept images positive for >= 1 class: train {len(train.images)} of {n_train} listed, "
            f"test {len(test.images)} of {n_test} listed"
        ),
        "rows sorted lexicographically by file name <id>.jpg",
    ]
    return _voc_dataset(train, test, base, notes, (5717, 5823), f"JPEGImages/ comes with {_ARCHIVES['VOC2012']}.")


def _voc2007_objects(xml_path: Path) -> list[tuple[str, bool]]:
    """(class name, difficult) for each ``<object>`` of a VOC annotation file."""
    try:
        tree = ET.parse(xml_path)
    except ET.ParseError as err:
        raise AnnotationError(f"{xml_path} is not well-formed XML ({err})") from err
    objects = []
    for obj in tree.getroot().iter("object"):
        name = (obj.findtext("name") or "").strip()
        difficult_text = (obj.findtext("difficult") or "0").strip()
        if difficult_text not in ("0", "1"):
            raise AnnotationError(
                f"{xml_path}: object {name!r} has <difficult>{difficult_text}</difficult>, expected 0 or 1"
            )
        objects.append((name, difficult_text == "1"))
    return objects


def _voc2007_split(voc_dir: Path, prefix: str, list_name: str, archive: str) -> SplitLists:
    main = voc_dir / "ImageSets" / "Main"
    list_path = require_file(main / list_name, f"the VOC 2007 image list {list_name}", f"It comes with {archive}.")
    ids = [line.split()[0] for line in read_lines(list_path)]
    if len(set(ids)) != len(ids):
        raise AnnotationError(f"{list_path} lists some image ids more than once")
    index = {name: c for c, name in enumerate(VOC_CLASSES)}
    labels = np.zeros((len(ids), len(VOC_CLASSES)), dtype=np.uint8)
    for row, image_id in enumerate(ids):
        xml_path = require_file(
            voc_dir / "Annotations" / f"{image_id}.xml",
            f"the annotation of image {image_id} (listed in {list_name})",
            f"Annotations/ for this list comes with {archive}.",
        )
        for name, difficult in _voc2007_objects(xml_path):
            if name not in index:
                raise AnnotationError(f"{xml_path}: unknown class {name!r}; expected one of {list(VOC_CLASSES)}")
            if not difficult:
                labels[row, index[name]] = 1
    images = [posix_relative((prefix, "JPEGImages", f"{image_id}.jpg")) for image_id in ids]
    return SplitLists(images, labels)


def parse_voc2007(root: str | Path) -> ParsedDataset:
    """Read VOC 2007: ``trainval.txt`` / ``test.txt``, labels from non-difficult objects.

    See docs/protocol.md, "VOC 2007".
    """
    voc_dir, base, prefix = _locate(Path(root), "VOC2007", "ImageSets/Main/trainval.txt")
    train = _voc2007_split(voc_dir, prefix, "trainval.txt", "VOCtrainval_06-Nov-2007.tar")
    test = _voc2007_split(voc_dir, prefix, "test.txt", "VOCtest_06-Nov-2007.tar (unpack it into the same VOCdevkit)")
    notes = [
        "train = ImageSets/Main/trainval.txt, test = ImageSets/Main/test.txt, list-file order, no filtering",
        "class positive iff >= 1 object of that class is not flagged difficult (difficult-only = negative)",
    ]
    hint = "JPEGImages/ comes with VOCtrainval_06-Nov-2007.tar and VOCtest_06-Nov-2007.tar."
    return _voc_dataset(train, test, base, notes, (5011, 4952), hint)


def _voc_dataset(
    train: SplitLists,
    test: SplitLists,
    base: Path,
    notes: list[str],
    reference_counts: tuple[int, int],
    image_hint: str,
) -> ParsedDataset:
    """The parsed form shared by both VOC editions: the 20 classes in VOC 2012 column order."""
    return ParsedDataset(
        list(VOC_CLASSES), train, test, base, notes, reference_counts=reference_counts, image_hint=image_hint
    )
