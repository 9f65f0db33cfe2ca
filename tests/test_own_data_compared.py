"""Your own data compared like a benchmark: a table or a prepared image folder through `prepare table`,
`extract`, `train`, `sweep` and `benchmark`, on the data's own labels (docs/protocol.md, "Your own data").

Every table here is tiny (at most 60 rows, 4 features) and every image 32 x 32, so each test takes a
few seconds on one CPU thread.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_user_data_folder import CLASSES, _photos, write_image

from spmlkit.cli import main
from spmlkit.data import load_dataset
from spmlkit.experiments.store import ResultsStore

pytestmark = pytest.mark.usefixtures("one_thread")

#: a hand-written table: an id, two features, observed positives and negatives (classes sorted: bird, cat, dog)
TABLE = "id,f1,f2,positives,negatives\na,1.5,2,cat,\nb,0,-1,dog;cat,bird\nc,3,4.25,bird,cat\n"
#: its test table: the features in another column order (taken by name), every label of a row listed
TEST_TABLE = "id,f2,f1,positives\nt1,1,2,cat;dog\nt2,0,0,\n"


def _said(capsys) -> tuple[str, str]:
    """What a command printed, with line breaks of the console's wrapping joined."""
    out, err = capsys.readouterr()
    return " ".join(out.split()), err


def _table(tmp_path, rows: int = 60, seed: int = 0, test: bool = True):
    """A table of ``rows`` rows whose labels follow a linear rule of 4 features, one observed positive
    per row, and a fully labelled test table of 30 rows; written as CSV files, returned as arrays too."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(4, 3))
    X, Xt = rng.normal(size=(rows, 4)).round(4), rng.normal(size=(30, 4)).round(4)
    Y, Yt = (X @ W > 0.3).astype(int), (Xt @ W > 0.3).astype(int)
    Y[Y.sum(1) == 0, 0] = 1
    observed = np.zeros_like(Y)
    observed[np.arange(rows), [rng.choice(np.flatnonzero(y)) for y in Y]] = 1
    names = ("a", "b", "c")

    def write(path, X, Y):
        lines = ["x0,x1,x2,x3,positives"] + [",".join(map(str, x)) + "," + ";".join(names[c] for c in np.flatnonzero(y))
                                            for x, y in zip(X, Y)]
        path.write_text("\n".join(lines) + "\n")

    write(tmp_path / "train.csv", X, observed)
    if test:
        write(tmp_path / "test.csv", Xt, Yt)
    return X, observed, Xt, Yt


# --------------------------------------------------------------------------- prepare table


def test_prepare_table_reads_a_csv_into_a_feature_folder_of_observed_labels(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    (tmp_path / "test.csv").write_text(TEST_TABLE)
    out = tmp_path / "feats"
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--ignore-columns", "id", "--test-table",
                 str(tmp_path / "test.csv"), "--out", str(out)]) == 0
    said, _ = _said(capsys)
    assert ("prepared table: 3 training rows, 2 features, 3 classes, 4 observed positives and 2 observed negatives; 2 "
            "fully labelled test rows") in said
    assert f"spmlkit benchmark --dataset {out}" in said
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["format_version"], meta["observation"], meta["class_names"], meta["feature_names"]) == (
        2, "given", ["bird", "cat", "dog"], ["f1", "f2"])
    assert sorted(p.name for p in out.iterdir()) == [".spmlkit.json", "meta.json", "test_features.npy",
                                                      "test_labels.npy", "train_features.npy", "train_observed.npy"]
    ds = load_dataset(str(out))
    assert ds.Y_train is None and ds.labels == "observed"
    assert ds.observed.tolist() == [[0, 1, 0], [-1, 1, 1], [1, -1, 0]] and ds.observed.dtype == np.int8
    assert ds.X_train.tolist() == [[1.5, 2.0], [0.0, -1.0], [3.0, 4.25]]
    assert ds.X_test.tolist() == [[2.0, 1.0], [0.0, 0.0]]  # f1, f2: by name, not by position
    assert ds.Y_test.tolist() == [[0, 1, 1], [0, 0, 0]]
    # the id column without --ignore-columns: one problem for the column, naming the fix
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "column 'id' holds no number at all ('a' in row 2)" in err
    assert "--ignore-columns id" in err and not (tmp_path / "other").exists()


def test_a_feature_folder_of_observed_labels_is_checked_as_one_of_full_labels_is(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "feats"
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--ignore-columns", "id", "--out",
                 str(out)]) == 0
    np.save(out / "train_observed.npy", np.array([[0, 2, 0], [1, 0, 0], [1, 0, 0]], np.int8))
    assert main(["train", "--features", str(out), "--method", "an", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / 'train_observed.npy'}: labels must be -1, 0 or 1, found [2]" in err
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps({**meta, "format_version": 1}))  # version 1 holds full labels only
    assert main(["train", "--features", str(out), "--method", "an", "--quiet"]) == 2
    assert 'format version 1 holds full labels and a test list' in capsys.readouterr().err


def test_prepare_table_takes_label_columns_and_npz_arrays(tmp_path):
    from spmlkit.data.table import read_table

    (tmp_path / "cols.csv").write_text("f1,y_a,y_b\n1,1,\n2,-1,1\n3,0,0\n")
    data = read_table(tmp_path / "cols.csv", label_columns=["y_a", "y_b"])
    assert data.problems == [] and data.class_names == ["y_a", "y_b"] and data.feature_names == ["f1"]
    assert data.observed.tolist() == [[1, 0], [-1, 1], [0, 0]] and data.X_test is None

    np.savez(tmp_path / "t.npz", X=np.array([[0.5, 1], [2, 3]]), Y=np.array([[1, -1], [0, 1]]),
             class_names=np.array(["x", "y"]), X_test=np.array([[1.0, 1.0]]), Y_test=np.array([[1, 1]]))
    assert main(["prepare", "table", "--table", str(tmp_path / "t.npz"), "--out", str(tmp_path / "f")]) == 0
    ds = load_dataset(str(tmp_path / "f"))
    assert ds.class_names == ("x", "y") and ds.observed.tolist() == [[1, -1], [0, 1]]
    assert ds.X_train.tolist() == [[0.5, 1.0], [2.0, 3.0]] and ds.Y_test.tolist() == [[1, 1]]
    # without a test list the folder has no test files and says so
    np.savez(tmp_path / "u.npz", X=np.ones((2, 1)), Y=np.array([[1], [0]]))
    assert main(["prepare", "table", "--table", str(tmp_path / "u.npz"), "--out", str(tmp_path / "g")]) == 0
    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert meta["test"] is False and not (tmp_path / "g" / "test_features.npy").exists()
    ds = load_dataset(str(tmp_path / "g"))
    assert ds.X_test is None and ds.Y_test is None and ds.class_names == ("label0",)


def test_prepare_table_check_lists_every_problem_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("f1,f2,positives,negatives\n1,x,cat,\n2,3,cow,\n4,5,cat,cat\n")
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    (tmp_path / "test.csv").write_text("f1,positives\n1,cat\n")
    args = ["prepare", "table", "--table", str(tmp_path / "t.csv"), "--classes", str(tmp_path / "classes.txt"),
            "--test-table", str(tmp_path / "test.csv"), "--out", str(tmp_path / "f")]
    assert main([*args, "--check"]) == 1
    out, _ = _said(capsys)
    t = tmp_path / "t.csv"
    listed = (f"3 problems (nothing written): {t} row 2, column 'f2': 'x' is not a finite number; every feature cell "
              f"needs one (fill or drop the row) {t} row 3: unknown label(s) 'cow' (classes: cat, dog) {t} row 4: "
              "'cat' both positive and negative; keep one")
    assert out.endswith(listed) and not (tmp_path / "f").exists()
    assert main(args) == 2  # without --check: the first problem as the one line, and how many more
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'x' is not a finite number" in err and "(and 2 more problems" in err
    assert not (tmp_path / "f").exists()
    # a test table without a training feature column: named (the training table itself is fine now)
    (tmp_path / "t.csv").write_text("f1,f2,positives\n1,2,cat\n")
    assert main(args) == 2
    assert "the test table lacks the training table's feature column(s) 'f2'" in capsys.readouterr().err


# --------------------------------------------------------------------------- the data's own labels by default


def test_own_data_defaults_to_its_own_labels_on_train_sweep_and_benchmark(tmp_path, capsys):
    from spmlkit.experiments.benchmark import BenchmarkSpec
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.experiments.sweep import SweepSpec, expand

    _table(tmp_path)
    feats = str(tmp_path / "feats")
    assert main(["prepare", "table", "--table", str(tmp_path / "train.csv"), "--test-table",
                 str(tmp_path / "test.csv"), "--out", feats]) == 0
    config = resolve_config({"dataset": feats, "method": "an"})
    assert (config.data.observation, config.data.val_variant, config.optimisation.batch_size) == ("given", "observed", 64)
    runs = {r["dataset"]: r for r in expand(SweepSpec(datasets=["yeast", feats], methods=["an"]))}
    assert (runs[feats]["observation"], runs[feats]["val_variant"]) == ("given", "observed")
    assert (runs["yeast"]["observation"], runs["yeast"]["val_variant"]) == ("single_positive", "clean")
    spec = BenchmarkSpec(dataset=feats, methods=("an",))
    assert (spec.observation_used, spec.val_used) == ("given", "observed")

    run = tmp_path / "run"
    assert main(["train", "--features", feats, "--method", "an", "--epochs", "2", "--observation", "given", "--out",
                 str(run), "--quiet"]) == 0
    said, _ = _said(capsys)
    result = json.loads((run / "result.json").read_text())
    assert (result["val_map_labels"], result["test_map_labels"]) == ("observed", "full")
    assert f"val mAP {100 * result['val_map']:.2f}% (observed labels), test mAP {100 * result['test_map']:.2f}%" in said


def test_a_simulated_observation_of_own_data_is_refused_once_before_any_run(tmp_path, capsys):
    _table(tmp_path, test=False)
    feats = tmp_path / "feats"
    assert main(["prepare", "table", "--table", str(tmp_path / "train.csv"), "--out", str(feats)]) == 0
    (tmp_path / "s.yaml").write_text(f"datasets: [{feats}]\nmethods: [an, em]\nseeds: [0, 1, 2]\n"
                                     "observations: [single_positive]\nstore: s.db\n")
    capsys.readouterr()
    expected = (f"{feats} holds only the labels someone observed (your own data), no full labels to simulate "
                "observation 'single_positive' from; use observation 'given'")
    for command in (["sweep", str(tmp_path / "s.yaml"), "--dry-run"], ["sweep", str(tmp_path / "s.yaml"), "--quiet"],
                    ["benchmark", "--dataset", str(feats), "--observation", "single_positive", "--out",
                     str(tmp_path / "b"), "--quiet"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err  # once, not once per run
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "b" / "results.db").exists()
    # a reference that needs the truth, named by the user: refused the same way
    assert main(["benchmark", "--dataset", str(feats), "--methods", "an,bce", "--out", str(tmp_path / "b"),
                 "--quiet"]) == 2
    assert "method 'bce' is a reference that trains on 'full' labels" in capsys.readouterr().err


# --------------------------------------------------------------------------- benchmark


def test_benchmark_compares_every_method_on_a_tables_own_labels(tmp_path, capsys):
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.methods import METHODS
    from spmlkit.training import train

    _table(tmp_path)
    feats, out = str(tmp_path / "feats"), tmp_path / "bench"
    assert main(["prepare", "table", "--table", str(tmp_path / "train.csv"), "--test-table",
                 str(tmp_path / "test.csv"), "--out", feats]) == 0
    capsys.readouterr()
    assert main(["benchmark", "--dataset", feats, "--seeds", "0", "--lrs", "0.01", "--epochs", "6", "--jobs", "1",
                 "--out", str(out), "--quiet"]) == 0
    said, _ = _said(capsys)
    assert "note: left out bce, iun, crisp_true_prior: references that need full labels, which " + feats + " does not have" in said
    assert ("note: left out plc, lac, boostlu_ll_r, boostlu_ll_ct, boostlu_ll_cp: methods that train on images only "
            "(`spmlkit methods` says why); a benchmark of images alone includes them") in said
    assert (f"{feats} (given): test mAP (%) on the test list's full labels; lr selected on the observed positives of "
            "the validation rows") in said
    assert "test mAP (full labels)" in said and "val mAP (observed labels)" in said
    table = {row["method"]: row for row in json.loads((out / "results.json").read_text())["table"]}
    # every method with a meaning on features but the references; the two-view methods learn from images
    assert list(table) == [m for m in METHODS if not METHODS[m].sees_more_labels and METHODS[m].on_features.trains]
    image_only = {"plc", "lac", "boostlu_ll_r", "boostlu_ll_ct", "boostlu_ll_cp"}
    assert image_only <= set(METHODS) and not image_only & set(table)
    assert {(r["val_map_labels"], r["test_map_labels"]) for r in table.values()} == {("observed", "full")}
    # the table's number is the run `spmlkit train` gives on the same settings
    solo = train(resolve_config({"dataset": feats, "method": "em", "lr": 0.01, "epochs": 6, "seed": 0}))
    assert table["em"]["test_map"] == pytest.approx(100 * solo.test_map, abs=1e-9)
    assert table["em"]["val_map"] == pytest.approx(100 * solo.val_map, abs=1e-9)
    records = ResultsStore(out / "results.db").records()
    assert {(r["observation"], r["batch_size"], r["val_map_labels"]) for r in records} == {("given", 64, "observed")}


def test_benchmark_of_a_prepared_image_folder_takes_train_image_settings_and_a_config_file(tmp_path, capsys):
    photos, prepared = _photos(tmp_path / "photos", per_class=3), tmp_path / "prepared"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(prepared)]) == 0
    quick = ["--methods", "an", "--seeds", "0", "--lrs", "0.003", "--quiet"]
    assert main(["benchmark", "--dataset", str(prepared), "--backbone", "small:cnn", "--no-pretrained",
                 "--image-size", "32", "--epochs", "1", *quick, "--out", str(tmp_path / "a")]) == 0
    said, _ = _said(capsys)
    assert "no labelled test list, so no test mAP; lr selected on the observed positives" in said
    assert "test mAP (full labels)" not in said and "add a fully labelled test set" in said
    (record,) = ResultsStore(tmp_path / "a" / "results.db").records()
    assert record["status"] == "ok" and record["batch_size"] == 16  # the folder's batch, as `train` uses it
    assert (record["observation"], record["val_map_labels"], record["test_map_labels"]) == ("given", "observed", None)
    assert {k: record["config"]["settings"][k] for k in ("backbone", "pretrained", "image_size", "epochs")} == {
        "backbone": "small:cnn", "pretrained": False, "image_size": 32, "epochs": 1}
    # the same settings from a config file give the same run (found finished in the same store)
    (tmp_path / "c.yaml").write_text("backbone: small:cnn\npretrained: false\nimage_size: 32\nepochs: 1\n")
    assert main(["benchmark", "--dataset", str(prepared), "--config", str(tmp_path / "c.yaml"), *quick,
                 "--out", str(tmp_path / "a")]) == 0
    assert "1 finished runs reused" in _said(capsys)[0]
    # the grid's own settings are the options', never silently replaced by a file's
    (tmp_path / "c.yaml").write_text("lr: 0.1\nseed: 3\n")
    assert main(["benchmark", "--dataset", str(prepared), "--config", str(tmp_path / "c.yaml"), *quick,
                 "--out", str(tmp_path / "b")]) == 2
    assert ("sets lr, seed, which the benchmark's grid sets per run; give --lrs, --seeds on the command line"
            in capsys.readouterr().err)


def test_a_sweep_of_features_and_images_says_once_which_settings_a_set_ignores(tmp_path, capsys):
    photos, prepared = _photos(tmp_path / "photos", per_class=3), tmp_path / "prepared"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(prepared)]) == 0
    _table(tmp_path)
    feats = tmp_path / "feats"
    assert main(["prepare", "table", "--table", str(tmp_path / "train.csv"), "--out", str(feats)]) == 0
    (tmp_path / "s.yaml").write_text(f"datasets: [{feats}, {prepared}]\nmethods: [an]\nlrs: [0.003]\nstore: s.db\n"
                                     "settings: {backbone: 'small:cnn', pretrained: false, image_size: 32, epochs: 1}\n")
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 0
    said, _ = _said(capsys)
    note = f"note: backbone, pretrained, image_size apply to image data sets only; the runs of {feats} train without them"
    assert said.count(note) == 1
    records = {r["dataset"]: r for r in ResultsStore(tmp_path / "s.db").records()}
    assert [records[d]["status"] for d in (str(feats), str(prepared))] == ["ok", "ok"]
    assert (records[str(feats)]["batch_size"], records[str(prepared)]["batch_size"]) == (64, 16)  # `train`'s
    # image settings on feature sets alone are a mistake: said once, before any run
    (tmp_path / "s.yaml").write_text(f"datasets: [{feats}]\nsettings: {{image_size: 32}}\nstore: t.db\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    assert "setting 'image_size' only applies to image data sets, and none of" in capsys.readouterr().err


# --------------------------------------------------------------------------- extract


def test_extract_of_a_users_folder_keeps_its_observed_and_test_labels(tmp_path, capsys):
    from spmlkit.data.formats import load_prepared

    photos, tests = _photos(tmp_path / "photos", per_class=3), tmp_path / "test_photos"
    for k, name in enumerate(CLASSES):
        write_image(tests / name / f"t{name}.png", {name}, 5000 + k)
    net = ["--backbone", "small:cnn", "--no-pretrained", "--image-size", "32", "--device", "cpu", "--quiet"]
    for test, name in ((["--test-root", str(tests)], "with"), ([], "without")):
        prepared, feats = tmp_path / f"prep-{name}", tmp_path / f"feats-{name}"
        assert main(["prepare", "folder", "--root", str(photos), *test, "--out", str(prepared)]) == 0
        assert main(["extract", "--prepared", str(prepared), *net, "--features-out", str(feats)]) == 0
        ds, source = load_dataset(str(feats)), load_prepared(prepared)
        np.testing.assert_array_equal(ds.observed, source.observed)
        assert ds.Y_train is None and ds.X_train.shape == (len(source.train_images), 128)
        assert not (feats / "train_labels.npy").exists()
        if test:
            np.testing.assert_array_equal(ds.Y_test, source.test_labels)
            assert ds.X_test.shape == (3, 128)
        else:
            assert ds.X_test is None and json.loads((feats / "meta.json").read_text())["test"] is False
    said, _ = _said(capsys)
    assert f"compare every method on them with `spmlkit benchmark --dataset {tmp_path / 'feats-without'}`" in said
    run = tmp_path / "run"
    assert main(["train", "--features", str(tmp_path / "feats-with"), "--method", "an", "--epochs", "2", "--out",
                 str(run), "--quiet"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["config"]["data"]["observation"] == "given" and math.isfinite(result["test_map"])


def test_features_of_random_weights_say_so_where_written_and_under_every_table(tmp_path, capsys):
    """`--backbone small:cnn --no-pretrained`, the offline way, extracts features of random weights: a
    benchmark on them looked like a real comparison. extract says so, meta.json records it, and the
    benchmark's printed table, table.md, table.csv, results.json and the leaderboard say it too."""
    import pandas as pd

    photos, tests = _photos(tmp_path / "photos", per_class=3), tmp_path / "test_photos"
    for k, name in enumerate(CLASSES):
        write_image(tests / name / f"t{name}.png", {name}, 5000 + k)
    prepared, feats = tmp_path / "prepared", tmp_path / "feats"
    assert main(["prepare", "folder", "--root", str(photos), "--test-root", str(tests), "--out", str(prepared)]) == 0
    capsys.readouterr()
    assert main(["extract", "--prepared", str(prepared), "--backbone", "small:cnn", "--no-pretrained", "--image-size",
                 "32", "--device", "cpu", "--quiet", "--features-out", str(feats)]) == 0
    warning = ("features of small:cnn with random weights (extracted with --no-pretrained), not learned from images: "
               "methods compared on them are compared on random projections of the pixels, which does not show how "
               "they compare on the features of a pretrained network")
    said, _ = _said(capsys)
    assert f"warning: {feats} holds {warning}. Its meta.json and every benchmark table of it say so" in said
    meta = json.loads((feats / "meta.json").read_text())
    assert meta["pretrained"] is False and meta["warning"] == warning
    out = tmp_path / "board"
    assert main(["benchmark", "--dataset", str(feats), "--dataset", "yeast", "--methods", "an,em", "--seeds", "0",
                 "--lrs", "0.01", "--epochs", "2", "--jobs", "1", "--out", str(out), "--quiet"]) == 0
    said, _ = _said(capsys)
    assert said.count(f"warning: {feats} holds {warning}") == 1  # under its table, not under yeast's
    assert f"Warning: {feats} holds {warning}." in said  # the leaderboard's notes
    (table,) = [p for p in out.iterdir() if p.is_dir() and (p / "table.md").is_file() and p.name != "yeast"]
    assert f"Warning: {feats} holds {warning}." in (table / "table.md").read_text()
    assert set(pd.read_csv(table / "table.csv")["warning"]) == {warning}
    assert f"Warning: {feats} holds {warning}." in json.loads((table / "results.json").read_text())["notes"]
    assert "warning" not in pd.read_csv(out / "yeast" / "table.csv").columns
    assert "random weights" not in (out / "yeast" / "table.md").read_text()
    assert f"Warning: {feats} holds {warning}." in (out / "leaderboard.md").read_text()


# --------------------------------------------------------------------------- the estimator


def test_the_estimator_scores_on_observed_labels_by_name(tmp_path):
    from sklearn.metrics import average_precision_score
    from sklearn.model_selection import KFold, cross_val_score

    from spmlkit.estimator import SPMLClassifier, observed_map

    X, observed, _, _ = _table(tmp_path, test=False)
    clf = SPMLClassifier(method="an", epochs=3).fit(X[:40], observed[:40])
    assert clf.validation_ == "observed" and clf.val_map_ == clf.history_[clf.best_epoch_ - 1]["val_map"]
    scores = clf.predict_proba(X[40:])
    by_hand = np.mean([average_precision_score(observed[40:, c] == 1, scores[:, c]) for c in range(3)])
    assert observed_map(clf, X[40:], observed[40:]) == pytest.approx(by_hand, abs=1e-12)
    with pytest.raises(ValueError, match="scoring=spmlkit.estimator.observed_map"):
        clf.score(X[40:], (observed[40:] == 1).astype(int))  # observed labels are not full ones
    folds = list(KFold(3).split(X))
    got = cross_val_score(SPMLClassifier(method="em", epochs=3), X, observed, cv=folds, scoring=observed_map)
    want = [observed_map(SPMLClassifier(method="em", epochs=3).fit(X[tr], observed[tr]), X[te], observed[te])
            for tr, te in folds]
    assert got.tolist() == pytest.approx(want, abs=1e-12)
