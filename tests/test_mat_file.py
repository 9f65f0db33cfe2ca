"""A paper's ``.mat`` data file as a data set (docs/protocol.md, "A paper's own partition"): ``X``, ``Y``,
``Y_obs`` and the 0-based partition ``tr_idx``, ``va_idx``, ``te_idx`` as SMILE's files hold them, so that
``train``, ``sweep`` and ``reproduce`` run on the authors' exact rows. The files here are written in that
layout with scipy.io.savemat (float32 ``X``, 1 x n int64 index arrays)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.io import loadmat, savemat

from spmlkit.cli import main
from spmlkit.data.registry import load_features, resolve_dataset

ROWS, FEATURES, LABELS = 120, 7, 4


def write_mat(path: Path, *, seed: int = 0, **replace) -> dict[str, np.ndarray]:
    """A small set in SMILE's layout: every row has a positive, one observed positive per training row,
    a 96 / 12 / 12 partition of shuffled rows."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    Y = (rng.random((ROWS, LABELS)) < 0.4).astype(np.float64)
    Y[np.arange(ROWS), rng.integers(0, LABELS, ROWS)] = 1
    perm = rng.permutation(ROWS)
    tr, va, te = perm[:96], perm[96:108], perm[108:]
    Y_obs = np.zeros_like(Y)
    for i in tr:
        Y_obs[i, rng.choice(np.flatnonzero(Y[i]))] = 1
    data = {"X": X, "Y": Y, "Y_obs": Y_obs, "tr_idx": tr[None].astype(np.int64), "va_idx": va[None].astype(np.int64),
            "te_idx": te[None].astype(np.int64), **replace}
    savemat(path, data)
    return data


def test_the_files_rows_are_read_as_the_official_code_indexes_them(tmp_path: Path):
    data = write_mat(tmp_path / "yeast.mat")
    raw = loadmat(tmp_path / "yeast.mat")
    assert raw["tr_idx"].shape == (1, 96) and raw["tr_idx"].dtype == np.int64 and raw["X"].dtype == np.float32
    ref = resolve_dataset(str(tmp_path / "yeast.mat"))
    assert (ref.kind, ref.form, ref.name, ref.observed) == ("features", "mat-file", "yeast", True)
    ds = load_features(str(tmp_path / "yeast.mat"))
    # X[data['tr_idx'][0]]: numpy indexing, 0-based
    np.testing.assert_array_equal(ds.X_train, raw["X"][raw["tr_idx"][0]])
    np.testing.assert_array_equal(ds.Y_train, raw["Y"][raw["tr_idx"][0]])
    np.testing.assert_array_equal(ds.X_val, raw["X"][raw["va_idx"][0]])
    np.testing.assert_array_equal(ds.Y_test, raw["Y"][raw["te_idx"][0]])
    np.testing.assert_array_equal(ds.observed, data["Y_obs"][data["tr_idx"][0]])
    assert ds.X_train.dtype == np.float32 and ds.Y_train.dtype == np.uint8


def test_a_run_trains_on_the_files_partition_and_its_observed_positives(tmp_path: Path):
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training.run_data import load_run_data, split_and_observe

    data = write_mat(tmp_path / "scene.mat")
    config = resolve_config({"dataset": str(tmp_path / "scene.mat"), "method": "an"})
    assert config.data.observation == "given" and config.data.partition == "official"  # the file's own, by default
    run = load_run_data(config)
    split = split_and_observe(config, run)
    tr, va = data["tr_idx"][0], data["va_idx"][0]
    np.testing.assert_array_equal(split.observed, data["Y_obs"][tr])  # the authors' positives, not a new draw
    np.testing.assert_array_equal(split.val_targets, data["Y"][va])
    np.testing.assert_array_equal(split.truth_train, data["Y"][tr])
    assert len(split.train_idx) == 96 and len(split.val_idx) == 0  # validation is the file's own rows
    # partition 'random' pools the file's rows and draws spmlkit's own partition, with its own observed draw
    pooled = load_run_data(resolve_config({"dataset": str(tmp_path / "scene.mat"), "method": "an",
                                           "partition": "random", "observation": "single_positive"}))
    assert len(pooled.Y_train) + len(pooled.Y_val) + len(pooled.Y_test) == ROWS


@pytest.mark.usefixtures("one_thread")
def test_train_and_sweep_run_on_a_mat_file(tmp_path: Path, capsys):
    write_mat(tmp_path / "set.mat")
    out = tmp_path / "run"
    assert main(["train", "--dataset", str(tmp_path / "set.mat"), "--method", "an", "--epochs", "2",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["data"]["observation"] == "given" and len(result["history"]) == 2
    assert result["val_map_labels"] == "full" and result["test_map_labels"] == "full"
    (tmp_path / "g.yaml").write_text(f"name: g\ndatasets: [{tmp_path / 'set.mat'}]\nmethods: [an, smile]\n"
                                     "seeds: [0, 1]\nlrs: [0.01]\nsettings: {epochs: 2}\nstore: g.db\n")
    assert main(["sweep", str(tmp_path / "g.yaml"), "--jobs", "1", "--quiet"]) == 0, capsys.readouterr().err
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(tmp_path / "g.db").to_dataframe()
    assert len(runs) == 4 and (runs["status"] == "ok").all() and set(runs["observation"]) == {"given"}


@pytest.mark.parametrize("change, message", [
    ({"tr_idx": None}, "holds no tr_idx; a paper's data file holds X, Y, Y_obs, tr_idx, va_idx, te_idx"),
    ("one_based", "holds row 120, outside the file's rows 0..119 (the indices run from 1 to 120: 1-based, as MATLAB counts; the official code and spmlkit read 0-based "
                  "indices, so subtract 1 from every index"),
    ("overlap", "tr_idx and va_idx share 12 row(s)"),
    ("wrong_observed", "observed positive(s) of Y_obs are not positives of Y"),
    ({"Y": "labels"}, "Y must be a rows x labels matrix"),
    ({"te_idx": np.array([[1.5, 2.0]])}, "te_idx must hold whole row numbers"),
])
def test_a_file_that_cannot_be_read_as_it_is_is_refused_in_one_line(tmp_path: Path, capsys, change, message):
    path = tmp_path / "bad.mat"
    data = write_mat(path)
    if change == "one_based":
        # shift every part up by one: row 0 is nobody's, row 120 does not exist
        write_mat(path, **{k: data[k] + 1 for k in ("tr_idx", "va_idx", "te_idx")})
    elif change == "overlap":  # the validation rows still in the training part, as before the authors removed them
        write_mat(path, tr_idx=np.concatenate([data["tr_idx"], data["va_idx"]], axis=1))
    elif change == "wrong_observed":
        Y_obs = data["Y_obs"].copy()
        Y_obs[data["Y"] == 0] = 1
        write_mat(path, Y_obs=Y_obs)
    else:
        kept = {k: v for k, v in data.items() if change.get(k, 0) is not None}
        kept.update({k: v for k, v in change.items() if v is not None})
        savemat(path, kept)
    load_features.cache_clear() if hasattr(load_features, "cache_clear") else None
    assert main(["train", "--dataset", str(path), "--method", "an", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and str(path) in err[0], err
    assert main(["train", "--dataset", str(tmp_path / "none.mat"), "--method", "an"]) == 2
    assert "none.mat: no such .mat file" in capsys.readouterr().err


@pytest.mark.usefixtures("one_thread")
def test_reproduce_runs_on_the_files_partition(tmp_path: Path, capsys):
    """A reproduction on a paper's data file standing for one of its sets: the file's rows and observed
    positives; a subset, which would cut the file's partition, is refused."""
    write_mat(tmp_path / "yeast.mat")
    out = tmp_path / "rep"
    args = ["reproduce", "crisp-tabular", "--datasets", str(tmp_path / "yeast.mat"), "--methods", "an,wan",
            "--trials", "2", "--epochs", "2", "--jobs", "1", "--quiet", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    said = " ".join(capsys.readouterr().out.split())
    assert f"yeast: the partition and the observed positives of {tmp_path / 'yeast.mat'}, the seed varying only" in said
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(out / "results.db").to_dataframe()
    assert set(runs["observation"]) == {"given"} and (runs["status"] == "ok").all()
    assert {c["settings"]["partition"] for c in runs["config"]} == {"official"}
    assert len(runs) == 2 * 2 * 32  # AN's and WAN's grids, two trials each
    assert "| WAN | fair grid |" in (out / "crisp-tabular.md").read_text()
    named = ["reproduce", "crisp-tabular", "--datasets", f"scene={tmp_path / 'yeast.mat'}", "--methods", "an",
             "--subset", "50", "--out", str(tmp_path / "sub"), "--quiet"]
    assert main(named) == 2
    assert "--subset cuts a whole set before its random partition" in capsys.readouterr().err
    assert main(["reproduce", "crisp-tabular", "--datasets", str(tmp_path / "set.mat"), "--quiet",
                 "--out", str(tmp_path / "x")]) == 2
    assert "a .mat file stands for one of crisp-tabular's sets (yeast, scene, corel5k, delicious); name it as " \
           "SET=FILE.mat" in capsys.readouterr().err
