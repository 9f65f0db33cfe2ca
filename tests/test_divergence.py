"""Runs that diverge (training/loop.py, training/divergence.py; docs/protocol.md, "Runs that diverge"):
schedules that cannot work are refused before the run; a run whose loss, weights or predictions stop
being finite stops in one line naming the epoch, the step and the likely cause, leaves a record
(``diverged.json`` in a run folder, a failed record in a sweep) and no traceback, and leaves the other
runs of its batched group as they would have been."""

import json
import math

import pytest

from spmlkit.cli import main
from spmlkit.experiments.presets import resolve_config
from spmlkit.experiments.sweep import SweepSpec, execute_run, execute_runs, expand
from spmlkit.training import config_from_dict, train
from spmlkit.training.divergence import RunDiverged

QUICK = {"dataset": "yeast", "subset": 300, "epochs": 2, "device": "cpu"}
LINE = ("the run (an on yeast, seed 0) diverged in epoch 1, step 2 of 4: its training loss became nan; the likely "
        "cause is a learning rate too large for it (lr 1e+38): lower --lr (lr: in a config or sweep file), or "
        "check the data for extreme values")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("values, message", [
    ({"lr_schedule": "step", "step_epochs": 1, "step_gamma": 1e300},
     "step_gamma must be at most 1, got 1e+300: the step schedule multiplies the lr by it every step_epochs "
     "epochs, and lr is the highest lr it reaches"),
    ({"lr_schedule": "onecycle", "div_factor": 1e-300},
     "div_factor must be at least 1, got 1e-300: the one-cycle schedule starts at lr / div_factor and rises to "
     "lr, the highest lr it reaches"),
    ({"lr_schedule": "onecycle", "final_div_factor": 1e-300},
     "final_div_factor 1e-300 with div_factor 25.0 would end the one-cycle schedule at lr / div_factor / "
     "final_div_factor, above lr, the highest lr it reaches; make their product at least 1"),
])
def test_schedule_factors_that_take_the_lr_above_its_own_are_refused_before_the_run(values, message):
    with pytest.raises(ValueError) as caught:
        config_from_dict(values)
    assert str(caught.value) == f"config: {message}"


def test_schedule_factors_that_stay_at_or_below_the_lr_are_accepted():
    config_from_dict({"lr_schedule": "onecycle", "div_factor": 1.0, "final_div_factor": 1.0})
    config_from_dict({"lr_schedule": "onecycle", "div_factor": 25.0, "final_div_factor": 0.04})  # ends at lr
    config_from_dict({"lr_schedule": "step", "step_epochs": 1, "step_gamma": 1.0})


def test_a_diverged_run_is_one_line_and_its_folder_says_so(tmp_path, capsys):
    """`--lr 1e38`: the second step's loss is NaN. One line (exit 2), no traceback, `diverged.json` instead of
    `result.json`; the folder is then refused as a start and as a resume, with the way out, and replaced on
    --overwrite."""
    out = tmp_path / "run"
    args = ["train", "--dataset", "yeast", "--subset", "300", "--epochs", "2", "--method", "an", "--quiet",
            "--out", str(out)]
    assert main([*args, "--lr", "1e38"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"spmlkit train: error: {LINE}"
    assert sorted(p.name for p in out.iterdir()) == [".spmlkit.json", "config.yaml", "diverged.json"]
    record = json.loads((out / "diverged.json").read_text())
    assert record["status"] == "diverged" and record["error"] == LINE and record["history"] == []
    assert (record["epoch"], record["step"], record["steps"], record["what"], record["value"]) == (
        1, 2, 4, "training loss", "nan")
    assert record["config"]["optimisation"]["lr"] == 1e38

    assert main([*args, "--lr", "1e-3"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{out} holds a run that diverged (diverged.json); to start it afresh, run the command with --overwrite (or "
        "write to another --out)")
    assert main([*args, "--lr", "1e38", "--resume"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"--resume: the run in {out} diverged (diverged.json); resuming would repeat it from its last saved epoch: "
        "start it afresh with --overwrite and a smaller lr")
    assert main([*args, "--lr", "1e-3", "--overwrite"]) == 0
    assert (out / "result.json").is_file() and not (out / "diverged.json").exists()


def test_train_raises_the_line_in_code_too():
    with pytest.raises(RunDiverged) as caught:
        train(resolve_config({**QUICK, "method": "an", "lr": 1e38}))
    assert str(caught.value) == LINE


def test_a_diverged_run_of_a_sweep_is_a_failed_record_with_its_line():
    spec = SweepSpec(name="d", datasets=["yeast"], methods=["an"], seeds=[0], lrs=[1e38], settings=dict(QUICK))
    record = execute_run(expand(spec)[0])
    assert record["status"] == "failed" and record["error"] == LINE  # the line, no traceback
    assert math.isnan(record["test_map"]) and record["history"] == []


def test_a_diverged_run_leaves_its_group_and_the_others_train_as_alone():
    """A group of lrs 1e-3 and 1e38 (one seed): the 1e38 run is a failed record with its line; the 1e-3 run is
    the record it has when trained alone (the group's tolerance, docs/architecture.md, "Many runs at once")."""
    spec = SweepSpec(name="d", datasets=["yeast"], methods=["an"], seeds=[0], lrs=[1e-3, 1e38], settings=dict(QUICK))
    runs = expand(spec)
    grouped = execute_runs(runs)
    assert [r["group_size"] for r in grouped] == [2, 2] and [r["lr"] for r in grouped] == [1e-3, 1e38]
    assert grouped[0]["status"] == "ok" and grouped[1]["status"] == "failed" and grouped[1]["error"] == LINE
    alone = execute_run(runs[0])
    for key in ("val_map", "test_map", "best_epoch"):
        assert grouped[0][key] == pytest.approx(alone[key], abs=1e-6), key
    assert [h["train_loss"] for h in grouped[0]["history"]] == pytest.approx(
        [h["train_loss"] for h in alone["history"]], abs=1e-6)


def test_predictions_that_overflow_with_finite_weights_stop_the_run_by_name(monkeypatch):
    """Weights of 1e37 are finite, yet their logits can overflow to inf - inf = NaN: the run stops on its
    validation predictions (here made NaN where they are read) instead of a traceback from the metric."""
    from spmlkit.training.sources import FeatureSource

    plain = FeatureSource.predict_val

    def overflowing(self, model):
        probs = plain(self, model)
        probs[3, 1] = float("nan")
        return probs

    monkeypatch.setattr(FeatureSource, "predict_val", overflowing)
    with pytest.raises(RunDiverged) as caught:
        train(resolve_config({**QUICK, "method": "an", "lr": 1e-3}))
    assert str(caught.value).startswith("the run (an on yeast, seed 0) diverged in epoch 1: its predictions on its "
                                        "validation rows became nan; the likely cause is a learning rate too large")


def test_a_weight_decay_that_takes_the_weights_past_zero_is_named_as_the_cause(capsys):
    """`--weight-decay 1e30` (SGD): the line blamed the learning rate alone, which was the default."""
    assert main(["train", "--dataset", "yeast", "--subset", "300", "--epochs", "2", "--method", "an", "--quiet",
                 "--optimizer", "sgd", "--weight-decay", "1e30", "--out", "run"]) == 2
    assert capsys.readouterr().err.strip() == (
        "spmlkit train: error: the run (an on yeast, seed 0) diverged in epoch 1, step 3 of 4: its training loss became "
        "nan; the likely cause is a weight decay too large for it (weight decay 1e+30 with lr 0.003: lr × weight decay "
        "is 3e+27, and at 1 or more a step can take the weights past zero): lower --weight-decay (weight_decay: in a "
        "config or sweep file), or check the data for extreme values")


def test_a_weight_decay_beside_a_large_lr_is_named_beside_it_and_none_beyond_float32_is_taken(capsys):
    with pytest.raises(RunDiverged) as caught:
        train(resolve_config({**QUICK, "method": "an", "lr": 1e38, "weight_decay": 1e-4}))
    assert str(caught.value).endswith(
        "the likely cause is a learning rate or a weight decay too large for it (lr 1e+38, weight decay 0.0001): lower "
        "--lr or --weight-decay (lr, weight_decay: in a config or sweep file), or check the data for extreme values")
    # 1e300 cannot be a float32 weight's factor: SGD raised torch's overflow error with a traceback
    for option in ("--weight-decay", "--lr"):
        assert main(["train", "--optimizer", "sgd", option, "1e300", "--epochs", "1", "--out", "big"]) == 2
        assert capsys.readouterr().err.strip().endswith(
            f"{option.removeprefix('--').replace('-', '_')} 1e+300 is beyond the largest float32 number (3.4e+38), the "
            "precision the weights are updated in; no run could use it: give a smaller value")
