"""MS-COCO 2014 preparation from miniature instances JSON files in the official layout."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from fixtures.image_formats import build_coco2014, write_text

from spmlkit.cli import main
from spmlkit.data.formats import (
    AnnotationError,
    DatasetNotFoundError,
    PreparedMismatchError,
    dataset_options,
    dataset_variants,
    default_prepared_dir,
    load_prepared,
    prepare,
)
from spmlkit.data.formats import coco as coco_module

# JSON category order is deliberately not ascending by id: the column order must follow it.
CATEGORIES = [(1, "person"), (3, "car"), (2, "bicycle")]
# (image_id, category_id, iscrowd). Image 10 has only a crowd annotation, image 7 none.
TRAIN = (
    [100, 9, 10, 7, 55],
    [(9, 1, 0), (10, 3, 1), (100, 2, 0), (100, 1, 0), (9, 1, 0), (55, 2, 1), (55, 3, 0)],
)
VAL = ([3, 20, 4], [(20, 2, 0), (3, 3, 0)])


def _path(split: str, image_id: int) -> str:
    return f"{split}2014/COCO_{split}2014_{image_id:012d}.jpg"


# The reader indexes with pycocotools when installed, else in plain Python: both must agree.
INDEXERS = ["plain"] + (["pycocotools"] if importlib.util.find_spec("pycocotools") else [])


@pytest.fixture(params=INDEXERS)
def indexer(request, monkeypatch):
    chosen = {"plain": coco_module._index_plain, "pycocotools": coco_module._index_with_pycocotools}
    monkeypatch.setattr(coco_module, "_choose_indexer", lambda: chosen[request.param])
    return request.param


def test_coco_annotated_images_sorted_as_strings(tmp_path, indexer):
    build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    ds = prepare("coco2014", tmp_path / "coco", tmp_path / "out")
    assert ds.class_names == ["person", "car", "bicycle"]
    # ids 100, 9, 10, 55 as strings: "10" < "100" < "55" < "9"; 7 has no annotation.
    assert ds.train_images == [_path("train", i) for i in (10, 100, 55, 9)]
    assert ds.train_images[0] == "train2014/COCO_train2014_000000000010.jpg"
    np.testing.assert_array_equal(
        ds.train_labels, np.array([[0, 1, 0], [1, 0, 1], [0, 1, 1], [1, 0, 0]], dtype=np.uint8)
    )
    assert ds.test_images == [_path("val", 20), _path("val", 3)]
    np.testing.assert_array_equal(ds.test_labels, np.array([[0, 0, 1], [0, 1, 0]], dtype=np.uint8))
    assert ds.meta["options"]["variant"] == "spml"
    assert ds.meta["reference_counts"] == {"train": 82081, "test": 40137}
    loaded = load_prepared(tmp_path / "out")
    assert loaded.test_images == ds.test_images


def test_coco_pu_mlc_variant_keeps_all_images_in_json_order(tmp_path, indexer):
    build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    ds = prepare("coco2014", tmp_path / "coco", tmp_path / "out", variant="pu_mlc")
    assert ds.train_images == [_path("train", i) for i in (100, 9, 10, 7, 55)]
    np.testing.assert_array_equal(
        ds.train_labels,
        np.array([[1, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 1, 1]], dtype=np.uint8),
    )
    assert ds.test_images == [_path("val", i) for i in (3, 20, 4)]
    np.testing.assert_array_equal(ds.test_labels, np.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=np.uint8))
    assert ds.meta["options"]["variant"] == "pu_mlc"
    assert ds.meta["reference_counts"] == {"train": 82783, "test": 40504}


def test_coco_root_may_be_the_annotations_folder(tmp_path):
    build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    ds = prepare("coco2014", tmp_path / "coco" / "annotations", tmp_path / "out")
    assert ds.root == (tmp_path / "coco").resolve()
    assert len(ds.train_images) == 4


def test_coco_category_order_mismatch(tmp_path):
    swapped = [(1, "person"), (2, "bicycle"), (3, "car")]
    build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES, val_categories=swapped)
    with pytest.raises(AnnotationError) as err:
        prepare("coco2014", tmp_path / "coco", tmp_path / "out")
    msg = str(err.value)
    assert "position 1" in msg and "(3, 'car') vs (2, 'bicycle')" in msg
    assert "instances_train2014.json" in msg and "instances_val2014.json" in msg


def test_coco_missing_file_and_bad_json(tmp_path):
    root = build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    val_json = root / "annotations" / "instances_val2014.json"
    text = val_json.read_text()
    val_json.unlink()
    with pytest.raises(DatasetNotFoundError) as err:
        prepare("coco2014", root, tmp_path / "out")
    assert "annotations/instances_val2014.json" in str(err.value)
    assert "annotations_trainval2014.zip" in str(err.value)

    write_text(val_json, text[: len(text) // 2])
    with pytest.raises(AnnotationError, match=r"instances_val2014\.json is not valid JSON"):
        prepare("coco2014", root, tmp_path / "out")

    write_text(val_json, json.dumps({"images": [], "categories": []}))
    with pytest.raises(AnnotationError, match="no 'annotations' list"):
        prepare("coco2014", root, tmp_path / "out")


def test_coco_unknown_category_and_orphan_annotation(tmp_path, indexer):
    build_coco2014(tmp_path / "a", ([1, 2], [(1, 99, 0)]), VAL, CATEGORIES)
    with pytest.raises(AnnotationError, match="unknown category_id 99"):
        prepare("coco2014", tmp_path / "a", tmp_path / "out")
    build_coco2014(tmp_path / "b", ([1, 2], [(5, 1, 0)]), VAL, CATEGORIES)
    with pytest.raises(AnnotationError, match=r"image ids not in 'images', e\.g\. \[5\]"):
        prepare("coco2014", tmp_path / "b", tmp_path / "out")


def test_coco_bad_options(tmp_path):
    build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    with pytest.raises(ValueError, match="variant must be one of"):
        prepare("coco2014", tmp_path / "coco", tmp_path / "out", variant="all")
    with pytest.raises(
        ValueError, match=r"unknown option\(s\) \['mode'\] for coco2014; its options are: variant='spml'"
    ):
        prepare("coco2014", tmp_path / "coco", tmp_path / "out", mode="raw")


def test_coco_missing_val_images(tmp_path):
    root = build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    (root / _path("val", 20)).unlink()
    with pytest.raises(FileNotFoundError, match="val2014/COCO_val2014_000000000020.jpg"):
        prepare("coco2014", root, tmp_path / "out")


# ------------------------------------------------------------- one prepared folder per variant
def test_default_prepared_dir_separates_coco_variants(tmp_path):
    root = tmp_path / "coco"
    assert default_prepared_dir("coco2014", root) == root / "spmlkit-prepared" / "coco2014"
    assert default_prepared_dir("coco2014", root, "spml") == root / "spmlkit-prepared" / "coco2014"
    assert default_prepared_dir("coco2014", root, "pu_mlc") == root / "spmlkit-prepared" / "coco2014-pu_mlc"
    assert default_prepared_dir("voc2012", str(root)) == root / "spmlkit-prepared" / "voc2012"
    assert dataset_variants("coco2014") == ("spml", "pu_mlc") and dataset_variants("cub") == ()
    assert dataset_variants("coco2014")[0] == dataset_options("coco2014")["variant"]  # the default comes first
    with pytest.raises(ValueError, match=r"unknown variant 'all' of coco2014; choose one of \['spml', 'pu_mlc'\]"):
        default_prepared_dir("coco2014", root, "all")
    with pytest.raises(ValueError, match="voc2012 has no variants, got variant 'pu_mlc'; drop --variant"):
        default_prepared_dir("voc2012", root, "pu_mlc")
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        default_prepared_dir("imagenet", root)


def test_cli_prepares_each_variant_into_its_own_folder(tmp_path, capsys):
    root = build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    assert main(["prepare", "coco2014", "--root", str(root)]) == 0
    assert main(["prepare", "coco2014", "--variant", "pu_mlc", "--root", str(root)]) == 0
    spml = load_prepared(root / "spmlkit-prepared" / "coco2014", expect_dataset="coco2014", expect_variant="spml")
    pu_mlc = load_prepared(
        root / "spmlkit-prepared" / "coco2014-pu_mlc", expect_dataset="coco2014", expect_variant="pu_mlc"
    )
    # Neither run overwrote the other: each folder keeps its own list.
    assert len(spml.train_images) == 4 and len(pu_mlc.train_images) == 5
    assert (spml.meta["variant"], pu_mlc.meta["variant"]) == ("spml", "pu_mlc")
    assert "coco2014-pu_mlc" in capsys.readouterr().out.replace("\n", "")


def test_load_prepared_refuses_the_other_variant(tmp_path):
    root = build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    out = tmp_path / "out"
    prepare("coco2014", root, out, variant="pu_mlc")
    with pytest.raises(PreparedMismatchError) as err:
        load_prepared(out, expect_dataset="coco2014", expect_variant="spml")
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert f"{out} holds the prepared coco2014 (variant 'pu_mlc')" in msg
    assert "but coco2014 (variant 'spml') was expected" in msg
    assert f"`spmlkit prepare coco2014 --variant spml --root {root.resolve()}`" in msg
    assert f"--out {out}" in msg
    # Without expectations, or with matching ones, it loads as before.
    assert len(load_prepared(out).train_images) == 5
    assert len(load_prepared(out, expect_dataset="coco2014", expect_variant="pu_mlc").train_images) == 5
    assert len(load_prepared(out, expect_variant="pu_mlc").train_images) == 5
    # A dataset named without a variant means its default variant: a run that names no
    # variant must not train on the PU-MLC list left in its folder by an earlier version.
    with pytest.raises(PreparedMismatchError, match=r"but coco2014 \(variant 'spml'\) was expected"):
        load_prepared(out, expect_dataset="coco2014")


def test_load_prepared_refuses_another_dataset(tmp_path):
    root = build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    prepare("coco2014", root, tmp_path / "out")
    with pytest.raises(PreparedMismatchError) as err:
        load_prepared(tmp_path / "out", expect_dataset="voc2012")
    msg = str(err.value)
    assert "holds the prepared coco2014 (variant 'spml'), but voc2012 was expected" in msg
    # The coco root would be wrong for VOC, so the command leaves the root to the user.
    assert "`spmlkit prepare voc2012 --root DIR` (DIR: the folder voc2012 was downloaded" in msg


def test_folders_written_before_the_variant_key_use_the_recorded_option(tmp_path):
    root = build_coco2014(tmp_path / "coco", TRAIN, VAL, CATEGORIES)
    out = tmp_path / "out"
    prepare("coco2014", root, out, variant="pu_mlc")
    meta_path = out / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["variant"]  # as written by earlier spmlkit versions; options still hold it
    meta_path.write_text(json.dumps(meta))
    assert load_prepared(out, expect_variant="pu_mlc").meta["options"]["variant"] == "pu_mlc"
    with pytest.raises(PreparedMismatchError, match=r"variant 'pu_mlc'\), but coco2014 \(variant 'spml'\)"):
        load_prepared(out, expect_variant="spml")
