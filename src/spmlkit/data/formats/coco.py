"""MS-COCO 2014 reader (Lin et al., "Microsoft COCO: Common Objects in Context", ECCV 2014),
following docs/protocol.md, "MS-COCO 2014".

Layout (``annotations_trainval2014.zip``, ``train2014.zip``, ``val2014.zip`` unpacked into
``root``): ``annotations/instances_{train,val}2014.json``, ``train2014/``, ``val2014/``.
train2014 is the official train list, val2014 the test list.

- Classes: the order of the JSON ``categories`` list (80 classes, ids 1..90 with gaps); the
  two files must agree exactly (id and name at every position), else an error.
- ``variant="spml"`` (default; Cole et al. and every SPML code base): the images with at
  least one annotation (crowd annotations included), ordered by image id **sorted as
  strings** (so ids 9, 10, 100 come as 10, 100, 9); 82,081 train / 40,137 test.
- ``variant="pu_mlc"`` (PU-MLC code): every image of the JSON ``images`` list in JSON
  order; images without annotations become all-negative rows; 82,783 / 40,504.
- Paths ``train2014/COCO_train2014_<id, 12 digits>.jpg`` (likewise ``val2014``), relative
  to ``root``, built from the id as the reference formatter does.

The JSON is loaded with ``json`` and its fields checked first, so that a malformed file gets
an error naming it rather than an assertion inside an API; it is then indexed with
``pycocotools`` (``COCO`` API) when installed, else with an equivalent plain-Python index
(the format is simple; the tests check both give the same result).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import AnnotationError, ParsedDataset, SplitLists, existing_root, require_file

__all__ = ["COCO_VARIANTS", "parse_coco2014"]

COCO_VARIANTS = ("spml", "pu_mlc")
_ARCHIVE_HINT = (
    "Point root at the folder into which annotations_trainval2014.zip, train2014.zip and "
    "val2014.zip were unpacked (it contains annotations/, train2014/ and val2014/)."
)
_REFERENCE_COUNTS = {"spml": (82081, 40137), "pu_mlc": (82783, 40504)}


@dataclass
class _Instances:
    """What the readers need from one instances file, independent of how it was indexed.

    ``image_ids`` in JSON order; ``labels_of`` maps every annotated image id to the category
    ids of its annotations (crowd included).
    """

    categories: list[tuple[int, str]]
    image_ids: list[int]
    labels_of: dict[int, list[int]]


def _read_json(path: Path) -> dict[str, Any]:
    """Load an instances file and check the fields the readers use, with errors naming the file."""
    try:
        with path.open("r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AnnotationError(f"{path} is not valid JSON ({err}); re-download annotations_trainval2014.zip") from err
    if not isinstance(data, dict):
        raise AnnotationError(f"{path} must hold a JSON object with images, annotations and categories")
    for key, fields in (
        ("images", ("id",)),
        ("annotations", ("id", "image_id", "category_id")),
        ("categories", ("id", "name")),
    ):
        entries = data.get(key)
        if not isinstance(entries, list):
            raise AnnotationError(f"{path} has no '{key}' list; is it an instances_*.json file?")
        for position, entry in enumerate(entries):
            if not isinstance(entry, dict) or any(f not in entry for f in fields):
                raise AnnotationError(f"{path}: {key}[{position}] must be an object with the fields {list(fields)}")
    ann_ids = [ann["id"] for ann in data["annotations"]]
    if len(set(ann_ids)) != len(ann_ids):
        raise AnnotationError(f"{path} lists some annotation ids more than once")
    return data


def _index_with_pycocotools(data: dict[str, Any]) -> _Instances:
    """Index with the official ``COCO`` API (categories, images and annotations per image)."""
    from pycocotools.coco import COCO

    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):  # createIndex prints progress lines
        coco.createIndex()
    categories = [(cat["id"], str(cat["name"])) for cat in coco.loadCats(coco.getCatIds())]  # JSON order
    labels_of = {
        image_id: [ann["category_id"] for ann in coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))]
        for image_id in list(coco.imgToAnns)
    }
    return _Instances(categories, [img["id"] for img in data["images"]], labels_of)


def _index_plain(data: dict[str, Any]) -> _Instances:
    """The same index in plain Python, used when pycocotools is not installed."""
    labels_of: dict[int, list[int]] = {}
    for ann in data["annotations"]:
        labels_of.setdefault(ann["image_id"], []).append(ann["category_id"])
    categories = [(cat["id"], str(cat["name"])) for cat in data["categories"]]
    return _Instances(categories, [img["id"] for img in data["images"]], labels_of)


def _choose_indexer() -> Callable[[dict[str, Any]], _Instances]:
    """pycocotools when installed (the reference tool), else the plain indexer (same result)."""
    try:
        import pycocotools.coco  # noqa: F401
    except ImportError:
        return _index_plain
    return _index_with_pycocotools


def _load_instances(path: Path) -> _Instances:
    data = _read_json(path)
    instances = _choose_indexer()(data)
    ids = instances.image_ids
    if len(set(ids)) != len(ids):
        raise AnnotationError(f"{path} lists some image ids more than once")
    known = set(ids)
    orphans = [i for i in instances.labels_of if i not in known]
    if orphans:
        raise AnnotationError(f"{path}: annotations refer to image ids not in 'images', e.g. {orphans[:3]}")
    return instances


def _split(instances: _Instances, path: Path, split: str, variant: str) -> SplitLists:
    """Rows of one COCO split: selection and order per ``variant``, labels from annotations."""
    column = {cat_id: c for c, (cat_id, _) in enumerate(instances.categories)}
    if variant == "spml":
        # Annotated images only, ids sorted as strings (docs/protocol.md, "MS-COCO 2014"), as
        # the reference formatter does.
        image_ids = sorted(instances.labels_of, key=str)
    else:
        image_ids = list(instances.image_ids)  # all images, JSON order
    labels = np.zeros((len(image_ids), len(column)), dtype=np.uint8)
    for row, image_id in enumerate(image_ids):
        for cat_id in instances.labels_of.get(image_id, ()):
            if cat_id not in column:
                raise AnnotationError(f"{path}: an annotation of image {image_id} has unknown category_id {cat_id}")
            labels[row, column[cat_id]] = 1
    images = [f"{split}2014/COCO_{split}2014_{int(i):012d}.jpg" for i in image_ids]
    return SplitLists(images, labels)


def parse_coco2014(root: str | Path, *, variant: str = "spml") -> ParsedDataset:
    """Read COCO 2014 (docs/protocol.md, "MS-COCO 2014").

    ``variant``: "spml" (annotated images, string-sorted ids) or "pu_mlc".
    """
    if variant not in COCO_VARIANTS:
        raise ValueError(f"variant must be one of {list(COCO_VARIANTS)}, got {variant!r}")
    root = existing_root(root, _ARCHIVE_HINT)
    if root.name == "annotations" and not (root / "annotations").is_dir():
        root = root.parent  # pointed at annotations/ itself: its parent is the dataset root
    files = {
        split: require_file(
            root / "annotations" / f"instances_{split}2014.json",
            f"annotations/instances_{split}2014.json (from annotations_trainval2014.zip) under {root}",
            _ARCHIVE_HINT,
        )
        for split in ("train", "val")
    }
    train_instances = _load_instances(files["train"])
    val_instances = _load_instances(files["val"])
    categories, val_categories = train_instances.categories, val_instances.categories
    if val_categories != categories:
        mismatch = next(
            (i for i, (a, b) in enumerate(zip(categories, val_categories)) if a != b),
            min(len(categories), len(val_categories)),
        )
        first = categories[mismatch] if mismatch < len(categories) else "nothing"
        second = val_categories[mismatch] if mismatch < len(val_categories) else "nothing"
        raise AnnotationError(
            f"the category lists of {files['train']} and {files['val']} differ at position {mismatch}: "
            f"{first} vs {second} (as (id, name)); both files must come from the same COCO 2014 release"
        )
    train = _split(train_instances, files["train"], "train", variant)
    test = _split(val_instances, files["val"], "val", variant)
    if variant == "spml":
        notes = [
            "train = instances_train2014.json, test = instances_val2014.json",
            "kept images with >= 1 annotation (crowd included), ordered by image id sorted as strings",
        ]
    else:
        notes = [
            "train = instances_train2014.json, test = instances_val2014.json",
            "variant pu_mlc: all JSON images in JSON order; unannotated images are all-negative rows",
        ]
    notes.append("class order = JSON categories order (identical in both files)")
    return ParsedDataset(
        class_names=[name for _, name in categories],
        train=train,
        test=test,
        base=root,
        notes=notes,
        details={"variant": variant},
        reference_counts=_REFERENCE_COUNTS[variant],
        image_hint="train2014.zip and val2014.zip unpack into train2014/ and val2014/ under the root.",
    )
