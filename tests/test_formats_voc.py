"""PASCAL VOC 2012 / 2007 preparation from miniature datasets in the official layout."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.image_formats import build_voc2007, build_voc2012, write_text

from spmlkit.data.formats import (
    AnnotationError,
    DatasetNotFoundError,
    MissingImagesError,
    load_prepared,
    prepare,
)

CLASSES = [
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
]  # fmt: skip

# List order deliberately not sorted; 2007_000005 is "difficult only" (flag 0) for cat and
# therefore has no positive and is dropped; 2009_000002 has no positive either.
TRAIN = {
    "2008_000010": {"dog": 1, "cat": 0},
    "2008_000002": {"person": 1, "bicycle": 1, "chair": 0},
    "2007_000005": {"cat": 0},
    "2008_000003": {"tvmonitor": 1},
}
VAL = {
    "2009_000001": {"aeroplane": 1},
    "2009_000002": {"sheep": -1},
    "2008_000100": {"horse": 1, "cat": 1, "dog": 0},
}


def _row(*names: str) -> list[int]:
    return [1 if c in names else 0 for c in CLASSES]


EXPECTED_TRAIN_IDS = ["2008_000002", "2008_000003", "2008_000010"]
EXPECTED_TRAIN = np.array([_row("bicycle", "person"), _row("tvmonitor"), _row("dog")], dtype=np.uint8)
EXPECTED_TEST_IDS = ["2008_000100", "2009_000001"]
EXPECTED_TEST = np.array([_row("horse", "cat"), _row("aeroplane")], dtype=np.uint8)


def test_voc2012_lists_labels_and_order(tmp_path):
    build_voc2012(tmp_path / "data", TRAIN, VAL)
    out = tmp_path / "prepared"
    ds = prepare("voc2012", tmp_path / "data", out)
    assert ds.class_names == CLASSES
    assert ds.train_images == [f"VOCdevkit/VOC2012/JPEGImages/{i}.jpg" for i in EXPECTED_TRAIN_IDS]
    assert ds.test_images == [f"VOCdevkit/VOC2012/JPEGImages/{i}.jpg" for i in EXPECTED_TEST_IDS]
    np.testing.assert_array_equal(ds.train_labels, EXPECTED_TRAIN)
    np.testing.assert_array_equal(ds.test_labels, EXPECTED_TEST)
    assert ds.train_labels.dtype == np.uint8
    assert ds.root == (tmp_path / "data").resolve()
    assert all(p.is_file() for p in ds.paths("train") + ds.paths("test"))
    assert ds.meta["counts"] == {"train": 3, "test": 2}
    assert ds.meta["reference_counts"] == {"train": 5717, "test": 5823}
    assert ds.meta["matches_reference_counts"] is False
    assert ds.meta["positives_per_image"]["train"] == pytest.approx(4 / 3)
    assert ds.meta["variant"] is None  # VOC has no variants; recorded as null

    loaded = load_prepared(out)
    assert loaded.train_images == ds.train_images and loaded.test_images == ds.test_images
    np.testing.assert_array_equal(loaded.train_labels, EXPECTED_TRAIN)
    np.testing.assert_array_equal(loaded.test_labels, EXPECTED_TEST)
    assert (out / "train_images.txt").read_text() == "".join(
        f"VOCdevkit/VOC2012/JPEGImages/{i}.jpg\n" for i in EXPECTED_TRAIN_IDS
    )


@pytest.mark.parametrize("sub", ["VOCdevkit", "VOCdevkit/VOC2012"])
def test_voc2012_root_may_be_vocdevkit_or_voc2012(tmp_path, sub):
    build_voc2012(tmp_path / "data", TRAIN, VAL)
    ds = prepare("voc2012", tmp_path / "data" / sub, tmp_path / "out")
    assert ds.root == (tmp_path / "data").resolve()
    assert ds.train_images[0] == "VOCdevkit/VOC2012/JPEGImages/2008_000002.jpg"
    np.testing.assert_array_equal(ds.train_labels, EXPECTED_TRAIN)


def test_voc2012_folder_outside_vocdevkit(tmp_path):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    moved = voc.rename(tmp_path / "VOC2012")
    ds = prepare("voc2012", moved, tmp_path / "out")
    assert ds.root == moved.resolve()
    assert ds.test_images == ["JPEGImages/2008_000100.jpg", "JPEGImages/2009_000001.jpg"]


def test_voc2012_wrong_root_message(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError) as err:
        prepare("voc2012", tmp_path / "empty", tmp_path / "out")
    msg = str(err.value)
    assert "VOCdevkit/VOC2012/ImageSets/Main/aeroplane_train.txt" in msg
    assert str((tmp_path / "empty").resolve()) in msg
    assert "VOCtrainval_11-May-2012.tar" in msg
    assert not (tmp_path / "out").exists()


def test_voc2012_refuses_a_voc2007_folder(tmp_path):
    build_voc2012(tmp_path / "data", TRAIN, VAL)
    voc07 = (tmp_path / "data" / "VOCdevkit" / "VOC2012").rename(tmp_path / "VOC2007")
    with pytest.raises(DatasetNotFoundError, match="VOCdevkit/VOC2012"):
        prepare("voc2012", voc07, tmp_path / "out")


def test_voc2012_missing_class_file_is_named(tmp_path):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    (voc / "ImageSets" / "Main" / "cow_val.txt").unlink()
    with pytest.raises(DatasetNotFoundError) as err:
        prepare("voc2012", tmp_path / "data", tmp_path / "out")
    assert str(voc / "ImageSets" / "Main" / "cow_val.txt") in str(err.value)


def test_voc2012_bad_flag_names_file_and_line(tmp_path):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    write_text(voc / "ImageSets" / "Main" / "dog_train.txt", "2008_000010  1\n2008_000002 yes\n")
    with pytest.raises(AnnotationError, match=r"dog_train\.txt, line 2"):
        prepare("voc2012", tmp_path / "data", tmp_path / "out")


def test_voc2012_class_list_lacking_an_image_id_is_refused(tmp_path):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    # A truncated download: cow_train.txt lost the lines of two images every other class lists.
    cow = voc / "ImageSets" / "Main" / "cow_train.txt"
    kept = [line for line in cow.read_text().splitlines(keepends=True) if not line.startswith(("2008_000010", "2007"))]
    write_text(cow, "".join(kept))
    with pytest.raises(AnnotationError) as err:
        prepare("voc2012", tmp_path / "data", tmp_path / "out")
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert f"{cow} lacks 2 image id(s) that other class lists of image set 'train' name" in msg
    assert "name: 2007_000005, 2008_000010 " in msg
    assert "(e.g. listed in aeroplane_train.txt)" in msg
    assert "Re-extract VOCtrainval_11-May-2012.tar" in msg
    assert not (tmp_path / "out").exists()


def test_voc2012_missing_id_error_names_at_most_ten_ids(tmp_path):
    many = {f"2010_{i:06d}": {"dog": 1} for i in range(12)}
    voc = build_voc2012(tmp_path / "data", many, VAL)
    write_text(voc / "ImageSets" / "Main" / "bird_train.txt", "")
    with pytest.raises(AnnotationError) as err:
        prepare("voc2012", tmp_path / "data", tmp_path / "out")
    msg = str(err.value)
    assert "bird_train.txt lacks 12 image id(s)" in msg
    assert "2010_000009 (and 2 more)" in msg and "2010_000010" not in msg


def test_voc2012_missing_images_listed_with_count(tmp_path):
    voc = build_voc2012(tmp_path / "data", TRAIN, VAL)
    (voc / "JPEGImages" / "2008_000003.jpg").unlink()
    with pytest.raises(MissingImagesError) as err:
        prepare("voc2012", tmp_path / "data", tmp_path / "out")
    msg = str(err.value)
    assert "1 of 5 listed images are missing" in msg
    assert "VOCdevkit/VOC2012/JPEGImages/2008_000003.jpg" in msg
    # The message names what a command-line user can do, not a Python argument.
    assert "point --root at the folder that holds them" in msg and "check_exists" not in msg
    # Labels only: the same lists without touching the images.
    ds = prepare("voc2012", tmp_path / "data", tmp_path / "out", check_exists=False)
    np.testing.assert_array_equal(ds.train_labels, EXPECTED_TRAIN)
    assert ds.meta["check"]["images_exist"] is False


# ----------------------------------------------------------------------------- VOC 2007
TRAINVAL07 = {
    "000009": [("horse", 0), ("person", None)],  # no <difficult> tag = not difficult
    "000005": [("chair", 0), ("chair", 1), ("sofa", 1)],  # sofa difficult only -> negative
    "000007": [("car", 1)],  # difficult only: all-negative row, kept (no filtering)
}
TEST07 = {
    "000004": [],
    "000001": [("dog", 1), ("dog", 0), ("person", 1)],
}


def test_voc2007_labels_from_non_difficult_objects(tmp_path):
    build_voc2007(tmp_path / "data", TRAINVAL07, TEST07)
    ds = prepare("voc2007", tmp_path / "data", tmp_path / "out")
    assert ds.class_names == CLASSES
    assert ds.train_images == [f"VOCdevkit/VOC2007/JPEGImages/{i}.jpg" for i in ("000009", "000005", "000007")]
    assert ds.test_images == [f"VOCdevkit/VOC2007/JPEGImages/{i}.jpg" for i in ("000004", "000001")]
    np.testing.assert_array_equal(
        ds.train_labels, np.array([_row("horse", "person"), _row("chair"), _row()], dtype=np.uint8)
    )
    np.testing.assert_array_equal(ds.test_labels, np.array([_row(), _row("dog")], dtype=np.uint8))
    assert ds.meta["reference_counts"] == {"train": 5011, "test": 4952}


def test_voc2007_missing_test_list_points_at_test_archive(tmp_path):
    voc = build_voc2007(tmp_path / "data", TRAINVAL07, TEST07)
    (voc / "ImageSets" / "Main" / "test.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match="VOCtest_06-Nov-2007.tar"):
        prepare("voc2007", tmp_path / "data", tmp_path / "out")


def test_voc2007_broken_and_unknown_annotations(tmp_path):
    voc = build_voc2007(tmp_path / "data", TRAINVAL07, TEST07)
    xml = voc / "Annotations" / "000005.xml"
    xml.write_text("<annotation><object><name>chair</name>")
    with pytest.raises(AnnotationError, match=r"000005\.xml is not well-formed XML"):
        prepare("voc2007", tmp_path / "data", tmp_path / "out")
    xml.write_text("<annotation><object><name>unicorn</name><difficult>0</difficult></object></annotation>")
    with pytest.raises(AnnotationError, match="unknown class 'unicorn'"):
        prepare("voc2007", tmp_path / "data", tmp_path / "out")
    (voc / "Annotations" / "000001.xml").unlink()
    xml.unlink()
    with pytest.raises(DatasetNotFoundError, match="annotation of image 000005"):
        prepare("voc2007", tmp_path / "data", tmp_path / "out")
