"""Runs trained at once (spmlkit.training.train_group): each run of a batched group equals its solo
run within the stated tolerance (docs/architecture.md, "Many runs at once": weights to 1e-6, metrics
to 1e-6; on this CPU the differences measured are 0 for every method but the ones named below), whatever
its method, optimiser or head; runs that cannot be batched are refused with the reason their parts
declare; sweeps and the benchmark use it and give the same table as one run at a time.

Every comparison runs on the CPU (``device: cpu``), with one torch thread (as sweep workers)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from spmlkit.cli import main
from spmlkit.experiments import sweep as sweep_module
from spmlkit.experiments.presets import TABULAR_PROTOCOL, resolve_config
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import SweepSpec, execute_runs, expand
from spmlkit.experiments.sweep.processes import InProcess
from spmlkit.methods import METHODS
from spmlkit.training import RunResult, train
from spmlkit.training.plan import batch_key, unbatchable_reason
from spmlkit.training.trainer import train_group

#: history keys that are times: a group's are its time divided among its runs
TIMES = {"train_seconds", "epoch_seconds", "images_per_second"}
#: a quick Yeast setting (first 300 official-train rows: 240 train, 60 val; batches of 64 and 48)
QUICK = {"dataset": "yeast", "subset": 300, "epochs": 6, "device": "cpu"}
#: the stated tolerance of a batched run against its solo run (docs/architecture.md, "Many runs at once")
WEIGHTS, METRICS = 1e-6, 1e-6

pytestmark = pytest.mark.usefixtures("one_thread")


def _configs(method: str, seeds=(0, 1), lrs=(3e-3, 1e-2), **values: Any):
    return [resolve_config({**QUICK, "method": method, "seed": s, "lr": lr, **values}) for lr in lrs for s in seeds]


def _close(a: Any, b: Any, tol: float) -> bool:
    """Equal within ``tol`` (absolute), NaN equal to NaN, through dicts and lists; other values exact."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    return a == b


def _assert_equal_runs(batched: RunResult, solo: RunResult, group_size: int) -> float:
    """The run's numbers within the tolerance, the first trained in a group of ``group_size`` and
    the second alone (as their records say: equal numbers alone would not show that a group
    formed); returns the largest weight difference seen."""
    assert (batched.group_size, solo.group_size) == (group_size, 1), "the runs did not train as one group"
    untimed = [[{k: v for k, v in h.items() if k not in TIMES} for h in r.history] for r in (batched, solo)]
    assert _close(*untimed, METRICS), "histories differ"
    assert _close(batched.val_map, solo.val_map, METRICS) and _close(batched.test_map, solo.test_map, METRICS)
    assert batched.best_epoch == solo.best_epoch and batched.stopped_early == solo.stopped_early
    assert _close(batched.test_ap, solo.test_ap, METRICS) and _close(batched.test_metrics, solo.test_metrics, METRICS)
    assert _close(batched.analysis, solo.analysis, METRICS)
    assert torch.equal(batched.label_state.kind, solo.label_state.kind)
    assert torch.allclose(batched.label_state.target, solo.label_state.target, atol=WEIGHTS, rtol=0)
    worst = 0.0
    for p, q in zip(batched.model.parameters(), solo.model.parameters(), strict=True):
        worst = max(worst, float((p - q).detach().abs().max()))
    assert worst <= WEIGHTS
    return worst


@pytest.mark.parametrize("method, hparams", [
    ("an", {}), ("em", {}), ("em_apl", {"warmup_epochs": 2}), ("gr", {}), ("epr", {}), ("role", {}),
    ("ll_cp", {"delta_rel": 2.0}), ("l1r", {}), ("l2r", {}), ("zlpr", {}), ("pu_mlc", {}), ("splc", {}),
    ("opml_sp", {"start_epoch": 2, "rho": 0.05}), ("crisp", {"lam": 0.5}),
    ("mime", {"threshold": 0.2, "start_epoch": 1}),
])
def test_batched_runs_equal_their_solo_runs(method: str, hparams: dict) -> None:
    configs = _configs(method, hparams=hparams)
    batched = train_group(configs)
    for config, result in zip(configs, batched):
        _assert_equal_runs(result, train(config), len(configs))
        assert result.seconds > 0 and result.config is config


def test_smile_runs_that_share_their_batches_equal_their_solo_runs_bit_for_bit() -> None:
    """The tabular protocol's groups (one trial's learning rates and weight decays) draw the same
    batches, so SMILE's graph network computes each run's rows as a solo run computes them, in its
    order: on Yeast's shapes every weight and metric is exactly the solo run's (on scene's, PyTorch's
    batched product of tiny matrices rounds apart: docs/architecture.md, "Many runs at once"). (Runs that differ in seed, above, draw
    different batches; their rows are computed together, and the sums over rows round apart.)"""
    base = {**TABULAR_PROTOCOL, **QUICK, "method": "smile", "epochs": 3, "batch_size": 16, "seed": 4}
    configs = [resolve_config({**base, "lr": lr, "weight_decay": wd}) for lr in (1e-2, 1e-3) for wd in (0.0, 1e-3)]
    for config, result in zip(configs, train_group(configs)):
        solo = train(config)
        assert _assert_equal_runs(result, solo, len(configs)) == 0.0
        assert result.test_metrics == solo.test_metrics and result.history[-1]["train_loss"] == solo.history[-1]["train_loss"]


def test_smile_groups_only_runs_of_one_seed() -> None:
    """Under the reference protocol, runs of other methods that differ in seed share a group;
    SMILE's do not (their batches differ: ``Method.group_varies``), its learning rates do."""
    smile, an = _configs("smile"), _configs("an")
    assert len({batch_key(c) for c in an}) == 1
    assert len({batch_key(c) for c in smile}) == 2  # seeds 0 and 1, each with both learning rates
    assert {batch_key(c) for c in smile if c.optimisation.seed == 0} == {batch_key(smile[0])}
    with pytest.raises(ValueError, match="differ in more than lr, weight_decay"):
        train_group(smile)


@pytest.mark.parametrize("values", [
    {"batch_size": 37, "epochs": 3},  # batches that are no multiple of the vector width
    {"head": "mlp", "hidden": 16},  # a two-layer head (no dropout)
    {"optimizer": "sgd", "weight_decay": 1e-3},  # another optimiser, with weight decay
    {"standardize": False},
])
def test_batched_runs_equal_their_solo_runs_for_other_settings(values: dict) -> None:
    configs = _configs("em_apl", hparams={"warmup_epochs": 1}, **values)
    for config, result in zip(configs, train_group(configs)):
        _assert_equal_runs(result, train(config), len(configs))


def test_runs_that_stop_early_leave_the_group_and_the_others_go_on() -> None:
    configs = _configs("an", seeds=(0, 1, 2), lrs=(1e-2, 1e-1), epochs=12, patience=0)
    batched = train_group(configs)
    assert len({len(r.history) for r in batched}) > 1  # some stopped before others
    for config, result in zip(configs, batched):
        _assert_equal_runs(result, train(config), len(configs))


def test_what_cannot_be_batched_is_refused_with_the_reason(monkeypatch) -> None:
    base = resolve_config({**QUICK, "method": "an"})
    assert unbatchable_reason(base) is None and batch_key(base) is not None
    assert batch_key(resolve_config({**QUICK, "method": "an", "seed": 5, "lr": 0.1})) == batch_key(base)
    assert batch_key(resolve_config({**QUICK, "method": "an", "batch_size": 32})) != batch_key(base)
    reasons = {
        "dropout": {"head": "mlp", "dropout": 0.5},
        "run folder": {"out": "somewhere"},
        "loggers": {"loggers": ["tensorboard"]},
        "compiled": {"compile": True},
    }
    for words, values in reasons.items():
        config = resolve_config({**QUICK, "method": "an", **values})
        assert words in unbatchable_reason(config) and batch_key(config) is None
    image = resolve_config({"dataset": "digits-mosaic", "method": "an"})
    assert "image runs" in unbatchable_reason(image)
    with pytest.raises(ValueError, match="dropout"):
        train_group([base, resolve_config({**QUICK, "method": "an", "head": "mlp", "dropout": 0.5})])
    with pytest.raises(ValueError, match="differ in more than seed, lr"):
        train_group([base, resolve_config({**QUICK, "method": "an", "batch_size": 32})])
    assert train_group([]) == []
    # a method that does not declare itself batchable trains one run at a time
    monkeypatch.setattr(METHODS["an"], "batchable", False)
    assert "method 'an' declares that it cannot be batched" in unbatchable_reason(base)


def _grid(**extra: Any) -> SweepSpec:
    return SweepSpec(name="g", datasets=["yeast"], methods=["an", "em"], seeds=[0, 1], lrs=[0.003, 0.01],
                     settings={"epochs": 3, "subset": 200, "device": "cpu", **extra.pop("settings", {})}, **extra)


def test_a_failing_group_falls_back_to_one_run_at_a_time_with_each_its_own_error(tmp_path: Path) -> None:
    spec = SweepSpec(name="f", datasets=["yeast"], methods=["gr"], seeds=[0, 1], lrs=[0.003],
                     hparams={"gr": {"schedule": [{"bogus": [0, 1]}]}},
                     settings={"epochs": 2, "subset": 200, "device": "cpu"})
    records = execute_runs(expand(spec))
    assert [r["status"] for r in records] == ["failed", "failed"]
    assert all("bogus" in r["error"] and r["run_id"] == run["run_id"] for r, run in zip(records, expand(spec)))
    # each record says it trained alone, and why: its group stopped, with the group's error
    assert [r["group_size"] for r in records] == [1, 1]
    assert all(r["alone_reason"].startswith("its group of 2 runs stopped (InputError: loss 'gr': unknown schedule "
                                            "key(s) bogus") for r in records)


def test_a_bug_that_stops_a_group_is_raised_not_hidden_by_solo_runs(monkeypatch) -> None:
    """Only a bad setting or memory sends a group's runs back one at a time; anything else is a
    bug of ours, raised with its traceback rather than silently trained around."""
    from spmlkit.training import trainer

    def broken(configs):
        raise TypeError("a bug in the batched loop")

    monkeypatch.setattr(trainer, "train_group", broken)
    solo = []
    monkeypatch.setattr(sweep_module.execute, "execute_run", lambda *a, **k: solo.append(a) or {})
    with pytest.raises(TypeError, match="a bug in the batched loop"):
        execute_runs(expand(_grid())[:2])
    assert solo == []  # no run was trained around it


def test_a_value_error_of_ours_is_no_bad_setting_and_is_raised(monkeypatch) -> None:
    """The fallback catches the declared reasons (a refused setting, memory), not any ValueError:
    a group the sweep made and the run plan refuses is our bug (they read one decision)."""
    from spmlkit.training import trainer

    def refused(configs):
        raise ValueError("run an seed 1 lr 0.01 cannot train in the group of seed 0 lr 0.01")

    monkeypatch.setattr(trainer, "train_group", refused)
    monkeypatch.setattr(sweep_module.execute, "execute_run", lambda *a, **k: pytest.fail("trained around a bug"))
    with pytest.raises(ValueError, match="cannot train in the group"):
        execute_runs(expand(_grid())[:2])


def test_a_sweep_of_smile_trains_each_seeds_learning_rates_as_one_group(tmp_path: Path) -> None:
    """SMILE groups one seed's runs (``group_varies``), and the sweep forms exactly those groups: the
    run plan and the sweep read one decision. Seeds 0-5 and two learning rates on two workers: every
    run trains in a group of 2 (its seed's two lrs), none falls back, each equals its solo run."""
    spec = tmp_path / "smile.yaml"
    spec.write_text("name: smile_groups\ndatasets: [yeast]\nmethods: [smile]\nseeds: [0, 1, 2, 3, 4, 5]\n"
                    "lrs: [0.01, 0.001]\nsettings: {epochs: 1, subset: 300, device: cpu}\n")
    assert main(["sweep", str(spec), "--jobs", "2", "--store", str(tmp_path / "s.db"), "--quiet"]) == 0
    records = ResultsStore(tmp_path / "s.db").records()
    assert sorted((r["seed"], r["lr"], r["group_size"], r.get("alone_reason")) for r in records) == sorted(
        (seed, lr, 2, None) for seed in range(6) for lr in (0.01, 0.001))
    first = next(r for r in records if (r["seed"], r["lr"]) == (3, 0.001))
    solo = sweep_module.execute_run(first["config"])
    assert solo["test_map"] == first["test_map"] and solo["test_ap"] == first["test_ap"]


def test_a_group_that_runs_out_of_memory_trains_its_runs_alone_and_says_so(monkeypatch) -> None:
    from spmlkit.training import trainer

    def no_memory(configs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(trainer, "train_group", no_memory)
    runs = expand(_grid(settings={"epochs": 1}))[:2]
    records = execute_runs(runs)
    assert [(r["run_id"], r["status"], r["group_size"]) for r in records] == [(run["run_id"], "ok", 1) for run in runs]
    assert all(r["alone_reason"] == "its group of 2 runs stopped (OutOfMemoryError: CUDA out of memory. Tried to "
                                    "allocate 2.00 GiB), so each run trained alone" for r in records)


def test_batched_records_equal_solo_records(tmp_path: Path) -> None:
    runs = expand(_grid())[:4]  # an: 2 lrs x 2 seeds
    batched = execute_runs(runs)
    solo = [sweep_module.execute_run(run) for run in runs]
    # one group formed, as the training step saw it: nothing fell back, nothing trained one by one
    assert [r["group_size"] for r in batched] == [4, 4, 4, 4], "the runs did not train as one group"
    assert [r["group_size"] for r in solo] == [1, 1, 1, 1]
    for a, b in zip(batched, solo):
        assert a.keys() == b.keys() and a["status"] == b["status"] == "ok"
        for key in ("val_map", "test_map", "best_epoch", "test_ap", "test_metrics", "analysis", "class_names"):
            assert _close(a[key], b[key], METRICS), key
        untimed = [[{k: v for k, v in h.items() if k not in TIMES} for h in rec["history"]] for rec in (a, b)]
        assert _close(*untimed, METRICS)


def test_the_benchmark_table_is_the_same_batched_and_one_run_at_a_time(tmp_path: Path) -> None:
    """``--jobs 2`` batches each method's runs; ``--jobs 1`` trains them one by one in this process."""
    args = ["benchmark", "--methods", "bce,an,em_apl,role,pu_mlc,ll_cp", "--seeds", "0,1", "--lrs", "0.003,0.01",
            "--epochs", "5", "--subset", "300", "--quiet"]  # feature runs: the CPU under --device auto
    assert main(args + ["--jobs", "2", "--out", str(tmp_path / "batched")]) == 0
    assert main(args + ["--jobs", "1", "--out", str(tmp_path / "solo")]) == 0
    assert (tmp_path / "batched" / "table.csv").read_text() == (tmp_path / "solo" / "table.csv").read_text()
    cols = ["method", "seed", "lr", "val_map", "test_map", "best_epoch"]
    a, b = (pd.read_csv(tmp_path / d / "runs.csv")[cols].sort_values(cols[:3]).reset_index(drop=True)
            for d in ("batched", "solo"))
    pd.testing.assert_frame_equal(a, b, check_exact=False, atol=METRICS, rtol=0)
    assert np.allclose(a.test_map.to_numpy(), b.test_map.to_numpy(), atol=METRICS, rtol=0)
    # the groups formed: 24 runs on 2 workers are tasks of up to 6, so each method's 2 lrs x 2
    # seeds train as one group of 4; one at a time, each run says why it trained alone
    batched = ResultsStore(tmp_path / "batched" / "results.db").records()
    assert sorted((r["method"], r["group_size"], r.get("alone_reason")) for r in batched) == sorted(
        (m, 4, None) for m in ("bce", "an", "em_apl", "role", "pu_mlc", "ll_cp") for _ in range(4))
    solo = ResultsStore(tmp_path / "solo" / "results.db").records()
    assert {(r["group_size"], r["alone_reason"]) for r in solo} == {(1, InProcess.alone_reason)} and len(solo) == 24


def test_a_group_trains_with_the_threads_its_configs_ask_for(monkeypatch, one_thread) -> None:
    """A group honours ``num_threads`` as a solo run does (a sweep's setting applies to its
    grouped feature runs too), and gives the process its threads back afterwards."""
    from spmlkit.training import loop

    seen: list[int] = []
    real = loop.train_epoch

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())  # what the epoch's steps run with
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_epoch", recording)
    assert torch.get_num_threads() == 1  # one_thread's: 2 can only come from the configs
    results = train_group(_configs("an", seeds=(0,), epochs=2, num_threads=2))
    assert len(results) == 2 and seen == [2, 2] and torch.get_num_threads() == 1
