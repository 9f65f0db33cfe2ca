"""A malformed feature folder is refused in one line naming the file and the fix (data/feature_dir.py).

One test per kind of fault: text or complex features, unreadable arrays, class names that are
not a list, a meta.json without what ``extract`` records but a run does not need, shapes that do
not agree, missing files, labels that are not 0/1. Each goes through ``spmlkit train`` too where
the exit status matters (2: the user's mistake, no traceback).
"""

import json

import numpy as np
import pytest

from spmlkit.cli import main
from spmlkit.data import load_dataset
from spmlkit.data.feature_dir import load_feature_dir


def _folder(tmp_path, *, X_train=None, X_test=None, Y_train=None, Y_test=None, meta=None, skip=()):
    """A valid 6 + 3 row, 4-feature, 2-class folder, with any part replaced or left out."""
    d = tmp_path / "feats"
    d.mkdir()
    rng = np.random.default_rng(0)
    parts = {
        "train_features.npy": rng.normal(size=(6, 4)).astype(np.float32) if X_train is None else X_train,
        "test_features.npy": rng.normal(size=(3, 4)).astype(np.float32) if X_test is None else X_test,
        "train_labels.npy": np.array([[1, 0], [0, 1], [1, 1], [1, 0], [0, 1], [1, 0]], np.uint8) if Y_train is None
        else Y_train,
        "test_labels.npy": np.array([[1, 0], [0, 1], [1, 1]], np.uint8) if Y_test is None else Y_test,
    }
    for name, array in parts.items():
        if name not in skip:
            np.save(d / name, array)
    recorded = {"kind": "spmlkit-features", "format_version": 1, "dataset": "toy", "backbone": "small:cnn",
                "image_size": 64, "class_names": ["cat", "dog"]}
    recorded.update(meta or {})
    recorded = {k: v for k, v in recorded.items() if v is not _DROP}
    (d / "meta.json").write_text(json.dumps(recorded))
    return d


_DROP = object()


def _refused(capsys, folder) -> str:
    """``spmlkit train`` on the folder: exit 2 and one line (returned)."""
    assert main(["train", "--features", str(folder), "--method", "an", "--epochs", "1", "--device", "cpu",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_valid_folder_loads_with_its_values(tmp_path):
    d = _folder(tmp_path)
    ds = load_dataset(str(d))
    assert ds.name == "toy-features" and ds.class_names == ("cat", "dog")
    np.testing.assert_array_equal(ds.X_train, np.load(d / "train_features.npy"))
    assert ds.Y_test.dtype == np.uint8 and ds.Y_test.tolist() == [[1, 0], [0, 1], [1, 1]]


def test_text_features_are_refused_naming_the_file(tmp_path, capsys):
    d = _folder(tmp_path, X_train=np.array([["a", "b", "c", "d"]] * 6))
    with pytest.raises(ValueError, match=r"train_features\.npy: the features are of type <U1 \(text\)"):
        load_feature_dir(d)
    assert "train_features.npy" in _refused(capsys, d)


def test_complex_features_are_refused_instead_of_losing_their_imaginary_part(tmp_path, capsys):
    d = _folder(tmp_path, X_test=np.ones((3, 4), np.complex64) * 1j)
    with pytest.raises(ValueError, match=r"test_features\.npy: the features are complex numbers \(complex64\)"):
        load_feature_dir(d)
    err = _refused(capsys, d)
    assert "imaginary" in err and "ComplexWarning" not in err


def test_class_names_null_or_not_a_list_of_names(tmp_path, capsys):
    d = _folder(tmp_path, meta={"class_names": None})
    with pytest.raises(ValueError, match=r'meta\.json: "class_names" must be a non-empty list of label names.*null'):
        load_feature_dir(d)
    assert "class_names" in _refused(capsys, d)
    for bad in (["cat", 3], [], "cat,dog", ["cat", "cat"]):
        (d / "meta.json").write_text(json.dumps({"kind": "spmlkit-features", "format_version": 1,
                                                 "class_names": bad}))
        with pytest.raises(ValueError, match=r"meta\.json: \"class_names\""):
            load_feature_dir(d)


def test_meta_without_backbone_dataset_or_image_size_still_loads(tmp_path):
    """Those are records of how ``extract`` made the features; a folder from another tool has none."""
    d = _folder(tmp_path, meta={"backbone": _DROP, "dataset": _DROP, "image_size": _DROP})
    ds = load_feature_dir(d)
    assert ds.name == "feats-features" and ds.notes == {"backbone": None, "image_size": None}
    assert ds.X_train.shape == (6, 4)


def test_wrong_shapes_name_the_file_and_the_expected_shape(tmp_path, capsys):
    d = _folder(tmp_path, Y_train=np.zeros((5, 2), np.uint8))
    with pytest.raises(ValueError, match=r"train_labels\.npy: labels have shape \(5, 2\), expected \(6, 2\)"):
        load_feature_dir(d)
    assert "train_labels.npy" in _refused(capsys, d)


def test_three_dimensional_features(tmp_path):
    d = _folder(tmp_path, X_train=np.zeros((6, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"train_features\.npy: features must be a 2-D .* shape \(6, 2, 2\)"):
        load_feature_dir(d)


def test_train_and_test_with_different_feature_counts(tmp_path):
    d = _folder(tmp_path, X_test=np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"train_features\.npy has 4 columns but test_features\.npy 5"):
        load_feature_dir(d)


def test_label_columns_that_disagree_with_the_class_names(tmp_path):
    d = _folder(tmp_path, meta={"class_names": ["cat", "dog", "owl"]})
    with pytest.raises(ValueError, match=r"train_labels\.npy: labels have shape \(6, 2\), expected \(6, 3\)"):
        load_feature_dir(d)


def test_labels_other_than_0_and_1(tmp_path):
    d = _folder(tmp_path, Y_test=np.array([[1, 0], [0, 2], [1, -1]]))
    with pytest.raises(ValueError, match=r"test_labels\.npy: labels must be 0 or 1, found \[-1, 2\]"):
        load_feature_dir(d)


def test_a_missing_file_is_named(tmp_path, capsys):
    d = _folder(tmp_path, skip=("test_labels.npy",))
    with pytest.raises(FileNotFoundError, match=r"test_labels\.npy is missing"):
        load_feature_dir(d)
    assert "test_labels.npy is missing" in _refused(capsys, d)


def test_an_unreadable_array_is_named(tmp_path, capsys):
    d = _folder(tmp_path)
    (d / "train_features.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match=r"train_features\.npy: not a readable \.npy array"):
        load_feature_dir(d)
    np.save(d / "train_features.npy", np.array([{"a": 1}] * 6, dtype=object))  # would need pickle to load
    assert "train_features.npy: not a readable .npy array" in _refused(capsys, d)


def test_non_finite_features_name_the_folder(tmp_path):
    X = np.ones((6, 4), np.float32)
    X[2, 1] = np.nan
    d = _folder(tmp_path, X_train=X)
    with pytest.raises(ValueError, match=r"feats: .*train features contain NaN or infinite values"):
        load_feature_dir(d)
