"""NUS-WIDE preparation: the EM authors' formatted lists and the official raw distribution."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.image_formats import build_nuswide_formatted, build_nuswide_raw, write_text

from spmlkit.data.formats import (
    AnnotationError,
    DatasetNotFoundError,
    MissingImagesError,
    load_prepared,
    prepare,
)

CONCEPTS = ["animal", "beach", "sky"]
RAW_TRAIN = [
    ("actor\\0001_11.jpg", [1, 0, 1]),
    ("beach\\0002_22.jpg", [0, 0, 0]),  # no positive: dropped
    ("sky\\0003_33.jpg", [0, 0, 1]),  # missing on disk: dropped (or an error)
    ("zoo\\0004_44.jpg", [1, 1, 0]),
]
RAW_TEST = [("a\\1.jpg", [0, 1, 0]), ("b\\2.jpg", [0, 0, 0])]


def test_raw_selection_order_and_paths(tmp_path):
    build_nuswide_raw(tmp_path / "nus", CONCEPTS, RAW_TRAIN, RAW_TEST, absent=["sky\\0003_33.jpg"])
    ds = prepare("nuswide", tmp_path / "nus", tmp_path / "out")
    assert ds.class_names == CONCEPTS
    assert ds.train_images == ["Flickr/actor/0001_11.jpg", "Flickr/zoo/0004_44.jpg"]
    np.testing.assert_array_equal(ds.train_labels, np.array([[1, 0, 1], [1, 1, 0]], dtype=np.uint8))
    assert ds.test_images == ["Flickr/a/1.jpg"]
    np.testing.assert_array_equal(ds.test_labels, np.array([[0, 1, 0]], dtype=np.uint8))
    assert ds.meta["options"]["mode"] == "raw"
    assert ds.meta["reference_counts"] is None
    assert any("1 without positive label dropped, 1 missing on disk dropped, 2 kept" in s for s in ds.meta["selection"])


def test_raw_missing_error_mode_and_concepts_list_folder(tmp_path):
    build_nuswide_raw(
        tmp_path / "nus",
        CONCEPTS,
        RAW_TRAIN,
        RAW_TEST,
        absent=["sky\\0003_33.jpg", "beach\\0002_22.jpg"],
        concepts_path="ConceptsList/Concepts81.txt",
    )
    with pytest.raises(MissingImagesError) as err:
        prepare("nuswide", tmp_path / "nus", tmp_path / "out", missing="error")
    # beach/0002_22 has no positive label, so its absence does not matter.
    assert "1 positive-labelled images of TrainImagelist.txt are missing" in str(err.value)
    assert "Flickr/sky/0003_33.jpg" in str(err.value)
    assert "what spmlkit prepare does" in str(err.value)  # the command line always drops them
    ds = prepare("nuswide", tmp_path / "nus", tmp_path / "out", mode="raw")
    assert ds.class_names == CONCEPTS and len(ds.train_images) == 2


def test_raw_label_file_errors(tmp_path):
    root = build_nuswide_raw(tmp_path / "nus", CONCEPTS, RAW_TRAIN, RAW_TEST)
    labels = root / "Groundtruth" / "TrainTestLabels" / "Labels_beach_Test.txt"
    write_text(labels, "0\n1\n0\n")
    with pytest.raises(AnnotationError, match="has 3 values but TestImagelist.txt lists 2 images"):
        prepare("nuswide", root, tmp_path / "out")
    write_text(labels, "0\n2\n")
    with pytest.raises(AnnotationError, match="only 0 and 1"):
        prepare("nuswide", root, tmp_path / "out")
    labels.unlink()
    with pytest.raises(DatasetNotFoundError, match="Labels_beach_Test.txt"):
        prepare("nuswide", root, tmp_path / "out")


def test_nothing_recognisable_under_root(tmp_path):
    (tmp_path / "nus").mkdir()
    with pytest.raises(DatasetNotFoundError) as err:
        prepare("nuswide", tmp_path / "nus", tmp_path / "out")
    assert "formatted_train_labels.npy" in str(err.value) and "Concepts81.txt" in str(err.value)


FMT_TRAIN = (["actor/0001_11.jpg", "zoo\\0004_44.jpg"], np.array([[1, 0, 1], [0, 1, 0]]))
FMT_TEST = (["a/1.jpg"], np.array([[0, 0, 1]]))


def test_formatted_lists_used_as_given(tmp_path):
    build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, FMT_TEST)
    ds = prepare("nuswide", tmp_path / "nus", tmp_path / "out", expect_counts=False)
    assert ds.train_images == ["Flickr/actor/0001_11.jpg", "Flickr/zoo/0004_44.jpg"]
    assert ds.test_images == ["Flickr/a/1.jpg"]
    np.testing.assert_array_equal(ds.train_labels, np.array([[1, 0, 1], [0, 1, 0]], dtype=np.uint8))
    np.testing.assert_array_equal(ds.test_labels, np.array([[0, 0, 1]], dtype=np.uint8))
    assert ds.class_names == ["concept_00", "concept_01", "concept_02"]
    assert ds.meta["options"]["mode"] == "formatted"
    assert load_prepared(tmp_path / "out").train_images == ds.train_images


def test_formatted_class_names_from_concepts_file_or_option(tmp_path):
    root = build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, FMT_TEST, test_stem="formatted_test")
    write_text(root / "Concepts81.txt", "animal\nbeach\nsky\n")
    ds = prepare("nuswide", root, tmp_path / "out", expect_counts=False)
    assert ds.class_names == CONCEPTS
    assert any("Concepts81.txt" in s for s in ds.meta["selection"])
    ds = prepare("nuswide", root, tmp_path / "out", expect_counts=False, class_names=["x", "y", "z"])
    assert ds.class_names == ["x", "y", "z"]
    assert ds.meta["options"]["class_names"] == ["x", "y", "z"]
    with pytest.raises(AnnotationError, match="2 class names from class_names option, but the label files have 3"):
        prepare("nuswide", root, tmp_path / "out", expect_counts=False, class_names=["x", "y"])


def test_formatted_count_check(tmp_path):
    build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, FMT_TEST)
    with pytest.raises(AnnotationError) as err:
        prepare("nuswide", tmp_path / "nus", tmp_path / "out")
    msg = str(err.value)
    assert "2 train / 1 test" in msg and "150000 / 60260" in msg and "add --no-expect-counts" in msg
    assert "expect_counts=False" not in msg  # the CLI option, not the Python argument


def test_pickled_formatted_list_is_refused_with_a_fix(tmp_path):
    root = build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, FMT_TEST)
    names = np.empty(len(FMT_TRAIN[0]), dtype=object)
    names[:] = list(FMT_TRAIN[0])
    np.save(root / "formatted_train_images.npy", names, allow_pickle=True)
    with pytest.raises(AnnotationError) as err:
        prepare("nuswide", root, tmp_path / "out", expect_counts=False)
    msg = str(err.value)
    assert "formatted_train_images.npy stores Python objects (pickled)" in msg
    assert "re-save it as a plain array" in msg and "pass allow_pickle=True" not in msg


def test_formatted_missing_files_are_named(tmp_path):
    build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, FMT_TEST, skip=["formatted_val_labels.npy"])
    with pytest.raises(DatasetNotFoundError) as err:
        prepare("nuswide", tmp_path / "nus", tmp_path / "out", expect_counts=False)
    assert "missing ['formatted_val_labels.npy']" in str(err.value)


def test_formatted_shape_errors(tmp_path):
    build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, (["a/1.jpg"], np.array([[0, 1]])))
    with pytest.raises(AnnotationError, match="train labels have 3 columns but formatted_val_labels.npy has 2"):
        prepare("nuswide", tmp_path / "nus", tmp_path / "out", expect_counts=False)
    build_nuswide_formatted(tmp_path / "nus2", FMT_TRAIN, (["a/1.jpg", "b/2.jpg"], np.array([[0, 1, 1]])))
    with pytest.raises(AnnotationError, match=r"must be a \[2, C\] matrix"):
        prepare("nuswide", tmp_path / "nus2", tmp_path / "out", expect_counts=False)


def test_bad_mode(tmp_path):
    build_nuswide_formatted(tmp_path / "nus", FMT_TRAIN, FMT_TEST)
    with pytest.raises(ValueError, match="mode must be None"):
        prepare("nuswide", tmp_path / "nus", tmp_path / "out", mode="official")
