"""The prepared form of users' own data: observed labels, an optional test list, benchmarks untouched.

A user folder records the {-1, 0, 1} labels the user has (``observation: given``) instead of
full labels, and may have no test list; benchmark folders must come out byte for byte as
before the extension, so every folder prepared so far keeps loading and keeps its checksums.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest

from spmlkit.data.formats import PreparedFormatError, load_prepared
from spmlkit.data.formats.prepared import write_prepared
from spmlkit.experiments.presets import resolve_config
from spmlkit.training.run_data import load_run_data, split_and_observe

#: SHA-256 of the data files of the toy benchmark below, as written before users' data existed
#: (computed with the previous write_prepared); a benchmark folder must not change by a byte
BENCHMARK_HASHES = {
    "train_images.txt": "68beaeff01fd6e376c2b4f0ad6cb49dfc108a5827d27144705b1a7689bf8852d",
    "train_labels.npy": "217091fa266e1ec8fc91a127d04044d8e42d01d85512ce652daf2f3f96f94274",
    "test_images.txt": "a946c67e7a1416bdae9be9779440538974456e770d8034f1f7380b074c5301f4",
    "test_labels.npy": "f590daa1f22a726521d0d2de3eb792d35d53380a7345043c61d8cbee8e9b08d1",
}
OBSERVED = np.array([[1, 0, -1], [0, 1, 1], [1, 0, 0], [0, 0, 1], [1, 1, 0]], dtype=np.int8)


def _benchmark(out):
    return write_prepared(out, dataset="toy", class_names=["a", "b", "c"], train_images=["x/1.jpg", "x/2.jpg"],
                          train_labels=np.array([[1, 0, 0], [0, 1, 1]]), test_images=["y/3.jpg"],
                          test_labels=np.array([[0, 0, 1]]), root="/data/toy", selection=["everything"])


def _user(out, *, test: bool = False):
    extra = {"test_images": ["t/1.jpg", "t/2.jpg"], "test_labels": np.array([[1, 0, 1], [0, 1, 0]])} if test else {}
    return write_prepared(out, dataset="folder", class_names=["a", "b", "c"],
                          train_images=[f"x/{i}.jpg" for i in range(len(OBSERVED))], train_observed=OBSERVED,
                          root="/data/mine", bad_images=[], **extra)


def test_benchmark_folders_are_written_exactly_as_before(tmp_path):
    _benchmark(tmp_path / "b")
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert meta["files"] == BENCHMARK_HASHES
    assert "observation" not in meta and "observed_per_image" not in meta
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [".spmlkit.json", "meta.json",
                                                                  *sorted(BENCHMARK_HASHES)]
    ds = load_prepared(tmp_path / "b")
    assert ds.observed is None and ds.train_labels.dtype == np.uint8


def test_user_data_without_a_test_set_round_trips(tmp_path):
    written = _user(tmp_path / "u")
    names = sorted(p.name for p in (tmp_path / "u").iterdir())
    assert names == [".spmlkit.json", "bad_images.txt", "meta.json", "train_images.txt", "train_observed.npy"]
    meta = json.loads((tmp_path / "u" / "meta.json").read_text())
    assert meta["dataset"] == "folder" and meta["observation"] == "given"
    assert meta["counts"] == {"train": 5, "test": 0}
    assert meta["observed_per_image"] == {"positives": 7 / 5, "negatives": 1 / 5}
    assert meta["check"]["verified"] is True and meta["check"]["bad_images"] == 0
    ds = load_prepared(tmp_path / "u")
    np.testing.assert_array_equal(ds.observed, OBSERVED)
    assert ds.observed.dtype == np.int8 and written.observed.dtype == np.int8
    assert ds.train_labels is None and ds.test_images == [] and ds.test_labels is None
    assert ds.labels("test") is None and ds.paths("test") == []


def test_user_data_with_a_test_set_round_trips(tmp_path):
    _user(tmp_path / "u", test=True)
    ds = load_prepared(tmp_path / "u")
    assert ds.test_images == ["t/1.jpg", "t/2.jpg"]
    np.testing.assert_array_equal(ds.test_labels, [[1, 0, 1], [0, 1, 0]])
    assert json.loads((tmp_path / "u" / "meta.json").read_text())["positives_per_image"] == {"test": 1.5}


def test_loading_checks_the_observed_labels(tmp_path):
    out = tmp_path / "u"
    _user(out)
    meta = json.loads((out / "meta.json").read_text())
    bad = OBSERVED.copy()
    bad[0, 0] = 2
    buffer = io.BytesIO()
    np.save(buffer, bad)
    (out / "train_observed.npy").write_bytes(buffer.getvalue())
    with pytest.raises(PreparedFormatError, match="train_observed.npy does not match the checksum"):
        load_prepared(out)
    meta["files"]["train_observed.npy"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PreparedFormatError, match="values other than -1, 0 and 1"):
        load_prepared(out)
    (out / "meta.json").write_text(json.dumps({**meta, "observation": "simulated"}))
    with pytest.raises(PreparedFormatError, match="records observation 'simulated'"):
        load_prepared(out)


def test_rewriting_a_folder_leaves_no_file_of_the_previous_data(tmp_path):
    out = tmp_path / "same"
    _benchmark(out)
    _user(out)
    assert not (out / "train_labels.npy").exists() and not (out / "test_labels.npy").exists()
    _benchmark(out)
    assert not (out / "train_observed.npy").exists()
    assert load_prepared(out).observed is None


def test_write_prepared_refuses_ambiguous_arguments(tmp_path):
    with pytest.raises(ValueError, match="exactly one of train_labels"):
        write_prepared(tmp_path, dataset="x", class_names=["a"], train_images=["1"], train_labels=np.ones((1, 1)),
                       train_observed=np.ones((1, 1)), root=tmp_path)
    with pytest.raises(ValueError, match="test_images and test_labels go together"):
        write_prepared(tmp_path, dataset="x", class_names=["a"], train_images=["1"], train_observed=np.ones((1, 1)),
                       test_images=["2"], root=tmp_path)
    with pytest.raises(ValueError, match="a benchmark needs its official test list"):
        write_prepared(tmp_path, dataset="x", class_names=["a"], train_images=["1"], train_labels=np.ones((1, 1)),
                       root=tmp_path)
    with pytest.raises(ValueError, match="only -1"):
        write_prepared(tmp_path, dataset="x", class_names=["a"], train_images=["1"],
                       train_observed=np.full((1, 1), 0.5), root=tmp_path)
    assert not (tmp_path / "meta.json").exists()


def test_a_user_folder_alone_gives_a_run_on_its_own_labels(tmp_path):
    _user(tmp_path / "u", test=False)
    config = resolve_config({"prepared": str(tmp_path / "u"), "method": "an"})
    assert (config.data.dataset, config.data.observation, config.data.val_variant) == ("folder", "given", "observed")
    assert (config.model.backbone, config.model.pretrained, config.data.image_size, config.optimisation.batch_size, config.optimisation.lr) == (
        "torchvision:resnet50", True, 448, 16, 1e-4)
    data = load_run_data(config)
    assert data.kind == "images" and data.Y_train is None and data.Y_test is None
    np.testing.assert_array_equal(data.observed, OBSERVED)
    assert data.class_names == ("a", "b", "c")
    split = split_and_observe(config, data)
    assert len(split.train_idx) + len(split.val_idx) == 5 and split.truth_train is None
    np.testing.assert_array_equal(split.val_targets, (OBSERVED[split.val_idx] == 1).astype(np.uint8))
    with pytest.raises(ValueError, match="no full labels to simulate observation 'single_positive'"):
        split_and_observe(resolve_config({"prepared": str(tmp_path / "u"), "method": "an",
                                          "observation": "single_positive"}), data)
