"""One run configuration for feature and image runs: layering, source checks, stopping rules."""

import json

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.errors import InputError
from spmlkit.experiments.presets import resolve_config
from spmlkit.training import RunConfig, config_from_dict, train


def test_a_config_file_drives_a_feature_run(tmp_path, capsys):
    cfg = tmp_path / "f.yaml"
    cfg.write_text("method: em\nepochs: 2\nsubset: 200\nhparams: {alpha: 0.1}\n")
    assert main(["train", "--config", str(cfg), "--dataset", "yeast", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["config"]["data"]["dataset"] == "yeast" and result["config"]["method"]["hparams"] == {"alpha": 0.1}
    assert len(result["history"]) == 2
    # the feature run folder holds what an image run folder holds
    for name in ("config.yaml", "metrics.csv", "metrics.json", "best.pt", "last.pt", "result.json"):
        assert (tmp_path / "run" / name).is_file(), name


def test_options_of_the_other_source_are_refused_not_ignored(capsys):
    assert main(["train", "--dataset", "yeast", "--backbone", "timm:resnet18", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "backbone only apply to image runs" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="head only apply to feature runs"):
        train(RunConfig(dataset="digits-mosaic", head="mlp", epochs=1))


def test_zero_and_negative_values_are_rejected_never_replaced_by_defaults(capsys):
    for option, value in (("--epochs", "0"), ("--batch-size", "0"), ("--subset", "0"), ("--lr", "-1")):
        assert main(["train", "--dataset", "yeast", option, value]) == 2, option
        err = capsys.readouterr().err
        assert option.lstrip("-").replace("-", "_") in err and "Traceback" not in err


def test_feature_runs_follow_the_drop_rule_and_patience():
    base = {"dataset": "yeast", "method": "an", "subset": 300, "epochs": 12, "lr": 0.05, "device": "cpu"}
    free = train(resolve_config(base))
    vals = [h["val_map"] for h in free.history]
    best = np.maximum.accumulate(vals)
    drop = 0.004
    first_drop = next((i for i, v in enumerate(vals) if v < best[i] - drop), None)
    assert first_drop is not None  # the data makes val mAP fall at this lr
    stopped = train(resolve_config({**base, "stop_drop": drop}))
    assert len(stopped.history) == first_drop + 1 and stopped.stopped_early
    assert [h["val_map"] for h in stopped.history] == vals[: first_drop + 1]
    patient = train(resolve_config({**base, "patience": 0}))
    n = len(patient.history)
    assert all(vals[i] > max(vals[:i]) for i in range(1, n - 1)) and vals[n - 1] <= max(vals[: n - 1])


def test_without_validation_the_last_epoch_is_kept():
    res = train(resolve_config({"dataset": "yeast", "method": "an", "subset": 200, "epochs": 3, "val_frac": 0.0,
                                "device": "cpu"}))
    assert res.best_epoch == 3 and np.isnan(res.val_map) and len(res.history) == 3
    # the kept model is the last epoch's: its test predictions give the reported test mAP
    from sklearn.metrics import average_precision_score

    from spmlkit.data.registry import load_features
    from spmlkit.training.run_data import standardize

    ds = load_features("yeast")
    # no validation rows: the 200 training rows, gathered by index as the run gathers its split's
    # rows (a C-ordered copy: its float32 column means round as the run's do)
    _, X_test = standardize(ds.X_train[np.arange(200)], ds.X_test)
    with torch.no_grad():
        probs = torch.sigmoid(res.model(torch.from_numpy(X_test)).logits).numpy()
    ap = [average_precision_score(ds.Y_test[:, c], probs[:, c]) for c in range(ds.Y_test.shape[1])]
    assert res.test_map == pytest.approx(float(np.mean(ap)), abs=1e-12)
    with pytest.raises(ValueError, match="needs validation data"):
        resolve_config({"dataset": "yeast", "val_frac": 0.0, "patience": 0})


def test_hparams_merge_key_by_key_across_layers():
    config = resolve_config({"dataset": "yeast", "method": "em_apl", "hparams": {"beta": 0.5}})
    assert config.method.hparams == {"alpha": 0.005, "beta": 0.5, "warmup_epochs": 4}
    with pytest.raises(ValueError, match="unknown setting.*lrr"):
        config_from_dict({"lrr": 1})


def test_user_mistakes_are_one_line_and_our_bugs_keep_their_traceback(monkeypatch, capsys):
    assert main(["train", "--dataset", "yeasst"]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset 'yeasst' (did you mean 'yeast'?)" in err and "Traceback" not in err

    def broken_step(*args, **kwargs):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr("spmlkit.training.loop.train_epoch", broken_step)
    with pytest.raises(ValueError, match="internal invariant") as info:
        main(["train", "--dataset", "yeast", "--epochs", "1", "--subset", "100"])
    assert not isinstance(info.value, InputError)


def test_bad_config_files_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochs: [1\n")
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "does not parse" in err and "Traceback" not in err


def test_the_config_has_sections_and_reads_flat_or_nested_settings_alike():
    nested = config_from_dict({"data": {"dataset": "yeast", "subset": 200}, "method": {"name": "em", "hparams": {"alpha": 0.1}},
                               "optimisation": {"lr": 0.01, "seed": 3}, "schedule": {"epochs": 4}})
    flat = config_from_dict({"dataset": "yeast", "subset": 200, "method": "em", "hparams": {"alpha": 0.1}, "lr": 0.01,
                             "seed": 3, "epochs": 4})
    assert nested == flat == RunConfig(dataset="yeast", subset=200, method="em", hparams={"alpha": 0.1}, lr=0.01,
                                       seed=3, epochs=4)
    assert (flat.data.dataset, flat.method.name, flat.optimisation.lr, flat.schedule.epochs) == ("yeast", "em", 0.01, 4)
    assert list(flat.to_dict()) == ["data", "model", "method", "optimisation", "schedule", "recipe", "machine", "output"]
    assert flat.flat()["method"] == "em" and flat.flat()["lr"] == 0.01
    assert config_from_dict(flat.to_dict()) == flat  # config.yaml's nested form reads back
    with pytest.raises(ValueError, match="unknown setting 'lr' in section 'data' \\(it belongs to section 'optimisation'\\)"):
        config_from_dict({"data": {"lr": 0.1}})
    with pytest.raises(ValueError, match="'lr' is given twice"):
        config_from_dict({"lr": 0.1, "optimisation": {"lr": 0.2}})


def test_config_yaml_is_written_nested_and_an_earlier_flat_run_folder_still_resumes(tmp_path):
    import torch
    import yaml

    from spmlkit.training.checkpoint import load_checkpoint
    from spmlkit.training.config import saved_settings

    run = tmp_path / "run"
    config = resolve_config({"dataset": "yeast", "method": "an", "subset": 200, "epochs": 3, "device": "cpu",
                             "out": str(run)})
    full = train(resolve_config({**config.flat(), "out": str(tmp_path / "full")}))
    train(config, stop_after=2)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert list(saved) == ["data", "model", "method", "optimisation", "schedule", "recipe", "machine", "output"]
    # the run folder of an earlier version: flat config.yaml, flat config in its checkpoints
    flat = saved_settings(saved)
    (run / "config.yaml").write_text(yaml.safe_dump(flat))
    for name in ("last.pt", "best.pt"):
        ckpt = load_checkpoint(run / name)
        ckpt["config"] = flat
        torch.save(ckpt, run / name)
    # `spmlkit train --out RUN --resume`, with no other option, continues it with its own settings
    assert main(["train", "--out", str(run), "--resume", "--quiet"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["config"]["data"]["dataset"] == "yeast" and result["resumed_from"] == 2
    assert [h["val_map"] for h in result["history"]] == [h["val_map"] for h in full.history]


def test_a_typed_option_that_differs_from_the_resumed_run_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "yeast", "--subset", "200", "--epochs", "3", "--stop-after", "1", "--out", str(run),
                 "--quiet"]) == 0
    assert main(["train", "--out", str(run), "--resume", "--lr", "0.5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--resume continues a run with its own settings, but lr=0.5 (the run has 0.003)" in err
    assert main(["train", "--out", str(run), "--resume", "--num-workers", "0", "--quiet"]) == 2  # image-only option
    assert main(["train", "--out", str(run), "--resume", "--quiet"]) == 0
