"""The prepared form: writing, loading, validation on load, and the check=True image scan."""

from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest
from fixtures.image_formats import build_voc2012

import spmlkit
from spmlkit.cli import main
from spmlkit.data.formats import (
    DATASETS,
    FORMAT_VERSION,
    DatasetNotFoundError,
    PreparedFormatError,
    PreparedMismatchError,
    dataset_options,
    load_prepared,
    prepare,
)
from spmlkit.data.formats.prepared import write_prepared

TRAIN = {"2008_000002": {"dog": 1}, "2008_000001": {"cat": 1, "person": 1}}
VAL = {"2009_000001": {"bird": 1}}


def _write_small(out, **kwargs):
    return write_prepared(
        out,
        dataset="toy",
        class_names=["a", "b", "c"],
        train_images=["x/1.jpg", "x/2.jpg"],
        train_labels=np.array([[1, 0, 0], [0, 1, 1]]),
        test_images=["y/3.jpg"],
        test_labels=np.array([[0, 0, 1]]),
        root="/data/toy",
        selection=["everything"],
        **kwargs,
    )


def test_written_files_and_meta(tmp_path):
    out = tmp_path / "out"
    _write_small(out, reference_counts=(2, 1))
    # No temporary files left behind, and no bad_images.txt without a check=True scan.
    assert sorted(p.name for p in out.iterdir()) == [
        ".spmlkit.json",   # the output-folder marker (spmlkit.output_dir)
        "meta.json",
        "test_images.txt",
        "test_labels.npy",
        "train_images.txt",
        "train_labels.npy",
    ]
    assert (out / "train_images.txt").read_text(encoding="utf-8") == "x/1.jpg\nx/2.jpg\n"
    labels = np.load(out / "train_labels.npy")
    assert labels.dtype == np.uint8
    np.testing.assert_array_equal(labels, [[1, 0, 0], [0, 1, 1]])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION == 1
    assert meta["dataset"] == "toy" and meta["class_names"] == ["a", "b", "c"] and meta["num_classes"] == 3
    assert meta["counts"] == {"train": 2, "test": 1}
    assert meta["positives_per_image"] == {"train": 1.5, "test": 1.0}
    assert meta["matches_reference_counts"] is True
    assert meta["created_by"] == f"spmlkit {spmlkit.__version__}"
    assert meta["selection"] == ["everything"]
    assert meta["check"]["verified"] is False


def test_load_round_trip_and_root_override(tmp_path):
    _write_small(tmp_path / "out")
    ds = load_prepared(tmp_path / "out")
    assert ds.dataset == "toy" and ds.num_classes == 3
    assert ds.train_images == ["x/1.jpg", "x/2.jpg"] and ds.images("test") == ["y/3.jpg"]
    np.testing.assert_array_equal(ds.labels("test"), [[0, 0, 1]])
    assert str(ds.paths("test")[0]).replace("\\", "/").endswith("/data/toy/y/3.jpg")
    moved = load_prepared(tmp_path / "out", root=tmp_path / "elsewhere")
    assert moved.paths("train")[1] == tmp_path / "elsewhere" / "x" / "2.jpg"
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        ds.images("val")


def test_load_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="does not exist: not a prepared dataset"):
        load_prepared(tmp_path / "nothing")
    out = tmp_path / "out"
    _write_small(out)
    meta = json.loads((out / "meta.json").read_text())

    (out / "meta.json").write_text(json.dumps({**meta, "format_version": 2}))
    with pytest.raises(PreparedFormatError, match="version 2, but this spmlkit reads version 1: upgrade"):
        load_prepared(out)
    (out / "meta.json").write_text(json.dumps({**meta, "counts": {"train": 3, "test": 1}}))
    with pytest.raises(
        PreparedFormatError, match=r"2 listed images, labels of shape \(2, 3\), meta.json expects \(3, 3\)"
    ):
        load_prepared(out)
    (out / "meta.json").write_text(json.dumps(meta))
    np.save(out / "test_labels.npy", np.array([[0, 0, 2]], dtype=np.uint8))
    with pytest.raises(PreparedFormatError, match="test_labels.npy does not match the checksum"):
        load_prepared(out)
    (out / "train_images.txt").unlink()
    with pytest.raises(PreparedFormatError, match="train_images.txt is missing"):
        load_prepared(out)


def test_failed_prepare_leaves_previous_output_intact(tmp_path):
    build_voc2012(tmp_path / "data", TRAIN, VAL)
    out = tmp_path / "out"
    first = prepare("voc2012", tmp_path / "data", out)
    with pytest.raises(DatasetNotFoundError):
        prepare("voc2012", tmp_path / "missing", out)
    again = load_prepared(out)
    assert (
        again.train_images
        == first.train_images
        == [
            "VOCdevkit/VOC2012/JPEGImages/2008_000001.jpg",
            "VOCdevkit/VOC2012/JPEGImages/2008_000002.jpg",
        ]
    )


def test_check_reports_corrupt_image_without_aborting(tmp_path, caplog):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    (voc / "JPEGImages" / "2008_000001.jpg").write_bytes(b"this is not a JPEG")
    calls = []
    out = tmp_path / "out"
    # Reported as a value and a log record, never as a Python warning (which the CLI would
    # print with its source line).
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="spmlkit.data.formats"):
        warnings.simplefilter("error")
        ds = prepare("voc2012", tmp_path / "data", out, check=True, progress=lambda d, t: calls.append((d, t)))
    assert "1 of 3 images could not be read (VOCdevkit/VOC2012/JPEGImages/2008_000001.jpg)" in caplog.text
    assert calls == [(1, 3), (2, 3), (3, 3)]  # every image scanned despite the first being bad
    assert [b.path for b in ds.bad_images] == ["VOCdevkit/VOC2012/JPEGImages/2008_000001.jpg"]
    assert "UnidentifiedImageError" in ds.bad_images[0].reason
    assert len(ds.train_images) == 2  # reported, not dropped: the lists stay the reference lists
    lines = (out / "bad_images.txt").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("VOCdevkit/VOC2012/JPEGImages/2008_000001.jpg\t")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["check"]["verified"] is True and meta["check"]["bad_images"] == 1
    assert meta["check"]["bad_examples"][0]["path"] == "VOCdevkit/VOC2012/JPEGImages/2008_000001.jpg"
    assert [b.path for b in load_prepared(out).bad_images] == [ds.bad_images[0].path]

    # A later run without the scan removes the stale report.
    prepare("voc2012", tmp_path / "data", out)
    assert not (out / "bad_images.txt").exists()
    assert load_prepared(out).bad_images == []


def test_check_clean_dataset_writes_empty_report(tmp_path):
    build_voc2012(tmp_path / "data", TRAIN, VAL)
    ds = prepare("voc2012", tmp_path / "data", tmp_path / "out", check=True)
    assert ds.bad_images == []
    assert (tmp_path / "out" / "bad_images.txt").read_text() == ""
    assert ds.meta["check"] == {"images_exist": True, "verified": True, "bad_images": 0, "bad_examples": []}


def test_dataset_names_and_options():
    assert DATASETS == ("voc2012", "voc2007", "coco2014", "nuswide", "cub")
    assert dataset_options("coco2014") == {"variant": "spml"}
    assert dataset_options("voc2012") == {}
    assert dataset_options("nuswide")["expect_counts"] is True
    with pytest.raises(ValueError, match=r"unknown dataset 'imagenet'; choose one of \['voc2012'"):
        prepare("imagenet", ".", ".")


def test_cli_check_reports_unreadable_images_without_a_python_warning(tmp_path, capsys):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    (voc / "JPEGImages" / "2008_000001.jpg").write_bytes(b"this is not a JPEG")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warnings.warn anywhere in prepare would fail here
        code = main(["prepare", "voc2012", "--root", str(tmp_path / "data"), "--check"])
    captured = capsys.readouterr()
    assert code == 1
    assert "1 unreadable images" in captured.out
    assert "Warning" not in captured.err and "warnings.warn" not in captured.err


def test_variant_recorded_as_null_for_datasets_without_variants(tmp_path):
    _write_small(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["variant"] is None
    ds = _write_small(tmp_path / "b", variant="v1")
    assert ds.meta["variant"] == "v1" and load_prepared(tmp_path / "b", expect_variant="v1").dataset == "toy"
    with pytest.raises(PreparedMismatchError, match="holds the prepared toy, but toy \\(variant 'v1'\\) was expected"):
        load_prepared(tmp_path / "a", expect_variant="v1")
