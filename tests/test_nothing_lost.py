"""Nothing lost, nothing silently wrong: earlier results survive failures, odd input is refused."""

import errno
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from spmlkit import losses, metrics
from spmlkit.cli import main
from spmlkit.data import registry
from spmlkit.experiments.presets import resolve_config
from spmlkit.training import RunConfig, train
from spmlkit.training.run_data import feature_scaling

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = ["--dataset", "yeast", "--subset", "200", "--epochs", "2", "--quiet"]


def test_a_failed_benchmark_leaves_the_earlier_results_as_they_were(tmp_path, capsys):
    out = tmp_path / "bench"
    args = ["benchmark", "--methods", "an,em", "--seeds", "0", "--lrs", "1e-3", "--subset", "200", "--jobs", "1",
            "--out", str(out), "--quiet"]
    assert main(args + ["--epochs", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".md", ".csv", ".json")}
    capsys.readouterr()
    assert main(args + ["--epochs", "0"]) == 2
    err = capsys.readouterr().err
    assert "epochs must be a positive integer" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".md", ".csv", ".json")} == before


def test_train_never_replaces_an_earlier_run_without_being_asked(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *QUICK, "--method", "an", "--out", str(run)]) == 0
    first = (run / "result.json").read_text()
    assert main(["train", *QUICK, "--method", "an", "--lr", "0.01", "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "--overwrite" in err
    assert (run / "result.json").read_text() == first
    assert main(["train", *QUICK, "--method", "an", "--lr", "0.01", "--out", str(run), "--overwrite"]) == 0
    assert json.loads((run / "result.json").read_text())["config"]["optimisation"]["lr"] == 0.01


def test_a_feature_run_resumes_exactly(tmp_path):
    config = resolve_config({"dataset": "yeast", "method": "em_apl", "subset": 300, "epochs": 6, "lr": 0.01,
                             "hparams": {"warmup_epochs": 2}, "device": "cpu", "out": str(tmp_path / "cut")})
    part = train(config, stop_after=3)
    assert not part.finished and len(part.history) == 3
    resumed = train(config, resume=True)
    full = train(resolve_config({**config.flat(), "out": str(tmp_path / "full")}))
    assert resumed.resumed_from == 3
    assert [h["val_map"] for h in resumed.history] == [h["val_map"] for h in full.history]
    assert resumed.test_map == full.test_map
    assert torch.equal(resumed.label_state.kind, full.label_state.kind)


def test_subset_cuts_only_the_training_rows():
    res = train(resolve_config({"dataset": "yeast", "method": "an", "subset": 30, "epochs": 2, "device": "cpu"}))
    ds = registry.load_features("yeast")
    tr = np.arange(30)[np.isin(np.arange(30), np.sort(np.random.RandomState(1200).permutation(30)[:24]))]
    mean, std = feature_scaling(ds.X_train[tr])
    X_test = torch.from_numpy(((ds.X_test - mean) / std).astype(np.float32))
    with torch.no_grad():
        probs = torch.sigmoid(res.model(X_test).logits).numpy()
    assert len(probs) == len(ds.Y_test) == 917
    assert res.test_map == pytest.approx(metrics.mean_average_precision(probs, ds.Y_test), abs=1e-12)


def test_pu_mlc_stays_well_defined_with_a_one_row_last_batch():
    # 1200 training rows in batches of 109: the last batch has one row
    res = train(resolve_config({"dataset": "yeast", "method": "pu_mlc", "batch_size": 109, "epochs": 15,
                                "device": "cpu"}))
    losses_per_epoch = [h["train_loss"] for h in res.history]
    assert all(np.isfinite(losses_per_epoch)) and max(abs(v) for v in losses_per_epoch) < 20


def test_an_observation_that_observes_nothing_is_refused(capsys):
    assert main(["train", *QUICK, "--observation", "pos=0,neg=0"]) == 2
    assert "observes no label" in capsys.readouterr().err


def test_unwritable_outputs_and_a_full_disk_are_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["train", *QUICK, "--out", str(blocker / "run")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the run folder" in err and "Traceback" not in err
    assert main(["train", *QUICK, "--out", str(blocker)]) == 2
    assert "is an existing file" in capsys.readouterr().err

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("spmlkit.training.run_dir.atomic_torch_save", lambda obj, path: full(path, b""))
    assert main(["train", *QUICK, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "disk is full" in err and "--resume" in err and "Traceback" not in err


def test_a_misspelt_dataset_leaves_no_stray_files(tmp_path, capsys):
    assert main(["train", "--dataset", "yeasst", "--method", "an"]) == 2
    assert "did you mean 'yeast'" in capsys.readouterr().err
    assert list(Path.cwd().iterdir()) == []


def test_fp16_on_the_cpu_warns_and_trains_in_float32():
    config = RunConfig(dataset="digits-mosaic", backbone="small:cnn", pretrained=False, image_size=32, hflip=False,
                       mosaic_train=120, mosaic_test=30, epochs=1, batch_size=32, lr=3e-3, amp="fp16", device="cpu")
    with pytest.warns(RuntimeWarning, match="float32"):
        res = train(config)
    plain = train(RunConfig(**{**config.flat(), "amp": "none"}))
    assert res.finished and res.history[0]["train_loss"] == plain.history[0]["train_loss"]
    assert res.val_map == plain.val_map and res.test_map == plain.test_map  # float32, bit for bit


def test_the_mixup_term_explains_how_to_use_it():
    with pytest.raises(ValueError, match="needs the model.*pu_mixup_consistency\\(model"):
        losses.create("pu_mixup_consistency")


def test_runs_csv_has_the_fixed_threshold_columns_for_every_method(tmp_path):
    out = tmp_path / "bench"
    assert main(["benchmark", "--methods", "an,em", "--seeds", "0", "--lrs", "1e-3", "--epochs", "2",
                 "--subset", "200", "--jobs", "1", "--out", str(out), "--quiet"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    cols = {c for c in runs.columns if "@0.75" in c or "@0.5" in c}
    # both fixed thresholds for both methods (an's is 0.5, em's 0.75), as the runs recorded them, for
    # the ML-GCN counts, the metrics of the field that decide labels and the share of labels decided
    # positive (a degenerate threshold's sign); SMILE's convention of the Hamming loss thresholds at 0.5
    # whatever the method (docs/protocol.md, "Metric conventions")
    names = ("CP", "CR", "CF1", "OP", "OR", "OF1", "hamming_loss", "example_f1", "micro_f1", "macro_f1",
             "predicted_positive")
    assert cols == {f"test.{k}@{t}" for k in names for t in ("0.5", "0.75")} | {"test.smile.hamming_loss@0.5"}
    assert {"test.ranking_loss", "test.one_error", "test.coverage", "test.example_ap"} <= set(runs.columns)
    from spmlkit.experiments.benchmark import STORE_NAME
    from spmlkit.experiments.store import ResultsStore

    records = {r["run_id"]: r for r in ResultsStore(out / STORE_NAME).records()}
    assert sorted(runs["method"]) == ["an", "em"]
    for row in runs.to_dict("records"):
        recorded = records[row["run_id"]]["test_metrics"]
        assert {c: row[c] for c in cols} == pytest.approx({c: recorded[c[len("test."):]] for c in cols}, abs=1e-12)


def test_a_refused_method_leaves_no_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *QUICK, "--method", "bce", "--observation", "given", "--out", str(run)]) == 2
    assert not run.exists()
    assert main(["train", *QUICK, "--method", "an", "--out", str(run)]) == 0   # the folder is free to use


def test_more_user_mistakes_are_one_line(tmp_path, capsys):
    def one_line(args, *needles):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        for needle in needles:
            assert needle in err, (needle, err)

    one_line(["train", *QUICK, "--device", "tpu"], "tpu", "cpu")
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("just text")
    one_line(["report", "--store", str(not_a_store)], "is not a SQLite database")
    one_line(["report", "--store", str(tmp_path / "missing.db")], "not found")
    (tmp_path / "sweep.yaml").write_text("methods: [an\n")
    one_line(["sweep", str(tmp_path / "sweep.yaml")], "does not parse")
    one_line(["predict", "--checkpoint", str(tmp_path), "--images", str(tmp_path), "--threshold", "1.5"],
             "--threshold", "[0, 1]")
    out = tmp_path / "bench"
    assert main(["benchmark", "--methods", "an", "--seeds", "0", "--lrs", "1e-3", "--epochs", "1", "--subset", "100",
                 "--jobs", "1", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    one_line(["report", "--store", str(out / "results.db"), "--formats", "pdf"], "pdf", "md, tex, csv")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    one_line(["report", "--store", str(out / "results.db"), "--out", str(a_file)], "existing file")
