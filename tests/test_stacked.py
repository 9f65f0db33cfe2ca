"""Stacked feature runs (spmlkit.training.stacked): every run of a group equals its solo run bit for
bit (history, val/test mAP, test metrics, analysis, label state, weights), whatever its method;
runs that cannot be stacked are refused or run alone; sweeps and the benchmark use it and give
the same table as one run at a time."""

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
from spmlkit.experiments.presets import resolve_config
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import SweepSpec, execute_runs, expand
from spmlkit.training import RunResult, train
from spmlkit.training.stacked import stack_key, train_stacked, unstackable_reason

#: history keys that are times: a stacked group's are its time divided among its runs
TIMES = {"train_seconds", "epoch_seconds", "images_per_second"}
#: a quick Yeast setting (first 300 official-train rows: 240 train, 60 val; batches of 64 and 48)
QUICK = {"dataset": "yeast", "subset": 300, "epochs": 6}


def _configs(method: str, seeds=(0, 1), lrs=(3e-3, 1e-2), **values: Any):
    return [resolve_config({**QUICK, "method": method, "seed": s, "lr": lr, **values}) for lr in lrs for s in seeds]


def _same(a: Any, b: Any) -> bool:
    """Exact equality, NaN equal to NaN, through dicts and lists."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _assert_equal_runs(stacked: RunResult, solo: RunResult) -> None:
    untimed = [[{k: v for k, v in h.items() if k not in TIMES} for h in r.history] for r in (stacked, solo)]
    assert _same(*untimed), "histories differ"
    assert stacked.val_map == solo.val_map and stacked.test_map == solo.test_map
    assert stacked.best_epoch == solo.best_epoch and stacked.stopped_early == solo.stopped_early
    assert _same(stacked.test_ap, solo.test_ap) and _same(stacked.test_metrics, solo.test_metrics)
    assert _same(stacked.analysis, solo.analysis)
    for name in ("kind", "target", "epoch"):
        assert torch.equal(getattr(stacked.label_state, name), getattr(solo.label_state, name)), name
    for p, q in zip(stacked.model.parameters(), solo.model.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("method, hparams", [
    ("an", {}), ("em", {}), ("em_apl", {"warmup_epochs": 2}), ("gr", {}), ("epr", {}), ("role", {}),
    ("ll_cp", {"delta_rel": 2.0}), ("l2r", {}), ("zlpr", {}), ("pu_mlc", {}),
    ("opml_sp", {"start_epoch": 2, "rho": 0.05}),
])
def test_stacked_runs_equal_their_solo_runs_bit_for_bit(method: str, hparams: dict, one_thread) -> None:
    configs = _configs(method, hparams=hparams)
    stacked = train_stacked(configs)
    for config, result in zip(configs, stacked):
        _assert_equal_runs(result, train(config))
        assert result.seconds > 0 and result.config is config


@pytest.mark.parametrize("method", ["an", "role", "ll_cp", "pu_mlc"])
def test_batch_sizes_without_whole_simd_blocks_take_each_runs_own_loss_and_stay_equal(method: str,
                                                                                      one_thread) -> None:
    """37 rows x 14 classes: no batch fills whole vector blocks, so every step computes each
    run's loss on its own slice (the solo code); still the solo numbers."""
    configs = _configs(method, batch_size=37, epochs=3, hparams={"delta_rel": 2.0} if method == "ll_cp" else {})
    for config, result in zip(configs, train_stacked(configs)):
        _assert_equal_runs(result, train(config))


def test_runs_that_stop_early_leave_the_group_and_the_others_go_on(one_thread) -> None:
    configs = _configs("an", seeds=(0, 1, 2), lrs=(1e-2, 1e-1), epochs=12, patience=0)
    stacked = train_stacked(configs)
    assert len({len(r.history) for r in stacked}) > 1  # some stopped before others
    for config, result in zip(configs, stacked):
        _assert_equal_runs(result, train(config))


def test_what_cannot_be_stacked_is_refused_with_the_reason() -> None:
    base = resolve_config({**QUICK, "method": "an"})
    assert unstackable_reason(base) is None and stack_key(base) is not None
    mlp = resolve_config({**QUICK, "method": "an", "head": "mlp"})
    assert "linear head" in unstackable_reason(mlp) and stack_key(mlp) is None
    assert "Adam" in unstackable_reason(resolve_config({**QUICK, "method": "an", "optimizer": "sgd"}))
    with pytest.raises(ValueError, match="linear head"):
        train_stacked([base, mlp])
    with pytest.raises(ValueError, match="differ only in seed, lr"):
        train_stacked([base, resolve_config({**QUICK, "method": "an", "batch_size": 32})])
    assert stack_key(resolve_config({**QUICK, "method": "an", "seed": 5, "lr": 0.1})) == stack_key(base)
    assert train_stacked([]) == []


def _grid(**extra: Any) -> SweepSpec:
    return SweepSpec(name="g", datasets=["yeast"], methods=["an", "em"], seeds=[0, 1], lrs=[0.003, 0.01],
                     settings={"epochs": 3, "subset": 200, **extra.pop("settings", {})}, **extra)


def test_a_sweep_groups_stackable_runs_into_one_task_each_with_its_own_record(tmp_path: Path, monkeypatch) -> None:
    tasks: list[list[str]] = []
    real = sweep_module.execute_runs

    def spy(runs, runs_dir=None):
        tasks.append([r["method"] for r in runs])
        return real(runs, runs_dir)

    monkeypatch.setattr(sweep_module, "execute_runs", spy)
    state = sweep_module._SweepState(ResultsStore(tmp_path / "s.db"), "me", expand(_grid()), None, None, 60.0,
                                     None, None, None)  # type: ignore[arg-type]
    groups = []
    while group := state.claim_group(3):
        groups.append([(r["method"], r["lr"], r["seed"]) for r in group])
    # consecutive runs of one method (differing in seed and lr only), at most 3 per task
    assert groups == [[("an", 0.003, 0), ("an", 0.003, 1), ("an", 0.01, 0)], [("an", 0.01, 1)],
                      [("em", 0.003, 0), ("em", 0.003, 1), ("em", 0.01, 0)], [("em", 0.01, 1)]]
    assert state.ran == 8 and len(ResultsStore(tmp_path / "s.db").leases()) == 8


def test_a_failing_group_falls_back_to_one_run_at_a_time_with_each_its_own_error(tmp_path: Path) -> None:
    spec = SweepSpec(name="f", datasets=["yeast"], methods=["gr"], seeds=[0, 1], lrs=[0.003],
                     hparams={"gr": {"schedule": [{"bogus": [0, 1]}]}}, settings={"epochs": 2, "subset": 200})
    records = execute_runs(expand(spec))
    assert [r["status"] for r in records] == ["failed", "failed"]
    assert all("bogus" in r["error"] and r["run_id"] == run["run_id"] for r, run in zip(records, expand(spec)))


def test_stacked_records_equal_solo_records(tmp_path: Path) -> None:
    runs = expand(_grid())[:4]  # an: 2 lrs x 2 seeds
    stacked = execute_runs(runs)
    solo = [sweep_module.execute_run(run) for run in runs]
    for a, b in zip(stacked, solo):
        assert a.keys() == b.keys() and a["status"] == b["status"] == "ok"
        for key in ("val_map", "test_map", "best_epoch", "test_ap", "test_metrics", "analysis", "class_names"):
            assert _same(a[key], b[key]), key
        untimed = [[{k: v for k, v in h.items() if k not in TIMES} for h in rec["history"]] for rec in (a, b)]
        assert _same(*untimed)


def test_the_benchmark_table_is_the_same_stacked_and_one_run_at_a_time(tmp_path: Path) -> None:
    """``--jobs 2`` stacks each method's runs; ``--jobs 1`` trains them one by one in this process."""
    args = ["benchmark", "--methods", "bce,an,em_apl,role,pu_mlc,ll_cp", "--seeds", "0,1", "--lrs", "0.003,0.01",
            "--epochs", "5", "--subset", "300", "--quiet"]
    assert main(args + ["--jobs", "2", "--out", str(tmp_path / "stacked")]) == 0
    assert main(args + ["--jobs", "1", "--out", str(tmp_path / "solo")]) == 0
    assert (tmp_path / "stacked" / "table.csv").read_text() == (tmp_path / "solo" / "table.csv").read_text()
    cols = ["method", "seed", "lr", "val_map", "test_map", "best_epoch"]
    a, b = (pd.read_csv(tmp_path / d / "runs.csv")[cols].sort_values(cols[:3]).reset_index(drop=True)
            for d in ("stacked", "solo"))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert np.array_equal(a.test_map.to_numpy(), b.test_map.to_numpy())
