"""Sweeps: a grid over methods x hyperparameters x datasets x observations x seeds, one command.

A sweep file (YAML/TOML/JSON) names the grid::

    name: yeast-grid
    datasets: [yeast]                 # feature datasets, `extract` folders, or image datasets
    methods: [an, em, em_apl, gr]
    seeds: [0, 1, 2]
    lrs: [0.001, 0.003, 0.01]
    batch_sizes: [64]
    observations: [single_positive]
    hparams:                          # per-method grids (lists are swept, scalars fixed)
      em: {alpha: [0.05, 0.1, 0.2]}
    settings: {epochs: 20}            # anything else the trainer takes (TrainConfig fields for images)
    store: results.db                 # relative to the sweep file's folder

Every grid point is one *run* with a stable id (a hash of its resolved settings). Runs whose
id is already in the store as finished are skipped, so a killed sweep resumes where it
stopped, losing at most the runs in progress (image runs even resume from their last epoch
checkpoint). A run that raises is recorded with its error and the sweep goes on. With
``jobs > 1`` runs execute in worker processes, one run each; only the main process writes
the store.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import os
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import user_input
from ..training import RunConfig, train
from .presets import resolve_config
from .store import ResultsStore, git_commit, package_version

__all__ = ["SweepSpec", "load_sweep", "expand", "run_config", "run_sweep", "execute_run"]

_GRID_KEYS = {"name", "datasets", "methods", "seeds", "lrs", "batch_sizes", "observations", "hparams", "settings",
              "store", "val_variant", "dataset", "method"}


@dataclass
class SweepSpec:
    name: str = "sweep"
    datasets: list[str] = field(default_factory=lambda: ["yeast"])
    methods: list[str] = field(default_factory=lambda: ["an"])
    seeds: list[int] = field(default_factory=lambda: [0])
    lrs: list[float] = field(default_factory=lambda: [1e-3])
    batch_sizes: list[int] = field(default_factory=lambda: [64])
    observations: list[str] = field(default_factory=lambda: ["single_positive"])
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    val_variant: str = "clean"
    store: str = "results.db"

    def __post_init__(self) -> None:
        from ..methods import get_method, resolve_hparams
        from ..protocol import Observation

        for m in self.methods:
            get_method(m)
        for o in self.observations:
            Observation.parse(o)
        unknown = sorted(set(self.hparams) - set(self.methods))
        if unknown:
            raise ValueError(f"sweep {self.name!r}: hparams given for methods not in the sweep: {', '.join(unknown)}")
        for m, grid in self.hparams.items():
            resolve_hparams(m, {k: (v[0] if isinstance(v, list) and v else v) for k, v in grid.items()})
        for key in ("datasets", "methods", "seeds", "lrs", "batch_sizes", "observations"):
            if not getattr(self, key):
                raise ValueError(f"sweep {self.name!r}: {key} must not be empty")


def load_sweep(path: str | Path) -> SweepSpec:
    from ..training.config import load_config_file

    p = Path(path)
    data = load_config_file(p)
    unknown = sorted(set(data) - _GRID_KEYS)
    if unknown:
        raise ValueError(f"sweep file {p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(_GRID_KEYS))}")
    if "dataset" in data:
        data["datasets"] = [data.pop("dataset")]
    if "method" in data:
        data["methods"] = [data.pop("method")]
    for key in ("datasets", "methods", "seeds", "lrs", "batch_sizes", "observations"):
        if key in data and not isinstance(data[key], list):
            data[key] = [data[key]]
    spec = SweepSpec(**data)
    if not Path(spec.store).is_absolute():
        spec.store = str(p.resolve().parent / spec.store)
    spec.name = data.get("name", p.stem)
    return spec


def _hparam_grid(grid: dict[str, Any]) -> list[dict[str, Any]]:
    keys = sorted(grid)
    values = [grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)] or [{}]


def run_id(run: dict[str, Any]) -> str:
    """A stable id of a run's settings (the sweep name is not part of it)."""
    key = {k: v for k, v in run.items() if k != "sweep"}
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def expand(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every run of the sweep, in a deterministic order (dataset, method, hparams, lr, bs, seed)."""
    runs = []
    for dataset, observation, method in itertools.product(spec.datasets, spec.observations, spec.methods):
        for hp in _hparam_grid(spec.hparams.get(method, {})):
            for lr, bs, seed in itertools.product(spec.lrs, spec.batch_sizes, spec.seeds):
                run = {"sweep": spec.name, "dataset": dataset, "method": method, "observation": observation,
                       "seed": int(seed), "lr": float(lr), "batch_size": int(bs), "hparams": hp,
                       "val_variant": spec.val_variant, "settings": dict(spec.settings)}
                run["run_id"] = run_id(run)
                runs.append(run)
    return runs


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def execute_run(run: dict[str, Any], runs_dir: str | None = None) -> dict[str, Any]:
    """Train one run and return its results-store record (never raises)."""
    import time

    import torch

    torch.set_num_threads(int(os.environ.get("SPMLKIT_RUN_THREADS", "1")))
    started, t0 = _now(), time.perf_counter()
    record: dict[str, Any] = {
        "run_id": run["run_id"], "sweep": run["sweep"], "dataset": run["dataset"], "method": run["method"],
        "observation": run["observation"], "seed": run["seed"], "lr": run["lr"], "batch_size": run["batch_size"],
        "hparams": run["hparams"], "config": run, "started_at": started, "spmlkit_version": package_version(),
        "git_commit": git_commit(),
    }
    try:
        record.update(_train(run, runs_dir))
        record["status"], record["error"] = "ok", None
    except Exception as exc:
        record.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}",
                       "history": [], "best_epoch": 0, "val_map": float("nan"), "test_map": float("nan"),
                       "test_metrics": {}, "test_ap": [], "class_names": [], "analysis": {}})
    record["seconds"] = time.perf_counter() - t0
    record["finished_at"] = _now()
    return record


def run_config(run: dict[str, Any], runs_dir: str | None = None) -> RunConfig:
    """The :class:`~spmlkit.training.RunConfig` of a grid point: the same resolution as ``spmlkit
    train`` (:func:`~spmlkit.experiments.presets.resolve_config`), with the sweep's ``settings`` as
    the config-file layer. Image runs get a folder of their own (they checkpoint and resume);
    feature runs stay in memory."""
    from ..training.run_data import check_dataset, is_feature_run

    values = {k: run[k] for k in ("dataset", "method", "observation", "seed", "lr", "batch_size", "hparams",
                                  "val_variant")}
    config = resolve_config(values, file_values=run["settings"], file_name=f"sweep settings (run {run['run_id']})")
    check_dataset(config)
    if not is_feature_run(config):
        config.out = str(Path(runs_dir or "runs") / run["run_id"])
    return config


def _train(run: dict[str, Any], runs_dir: str | None) -> dict[str, Any]:
    config = run_config(run, runs_dir)
    resume = config.out is not None and (Path(config.out) / "last.pt").is_file()
    res = train(config, resume=resume, overwrite=not resume)
    record = res.to_record()
    return {k: record[k] for k in ("history", "best_epoch", "val_map", "test_map", "test_metrics", "test_ap",
                                   "class_names", "analysis")}


@dataclass
class SweepResult:
    total: int
    skipped: int
    ran: int
    failed: int
    store: Path


def run_sweep(
    spec: SweepSpec,
    *,
    jobs: int = 1,
    store_path: str | Path | None = None,
    max_runs: int | None = None,
    retry_failed: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Run every unfinished run of ``spec``.

    ``max_runs`` stops after that many runs (time slicing); ``retry_failed`` runs failed runs
    again (by default a recorded failure counts as finished, so a broken setting is not
    retried forever).
    """
    store = ResultsStore(store_path or spec.store)
    runs = expand(spec)
    def finished(run_id: str) -> bool:
        if retry_failed:
            rec = store.get(run_id)
            return rec is not None and rec["status"] == "ok"
        return store.has_finished(run_id)

    with user_input():  # a bad setting fails here, before any run, not once per run
        for run in runs:
            run_config(run)
    unfinished = [r for r in runs if not finished(r["run_id"])]
    todo = unfinished if max_runs is None else unfinished[:max_runs]
    already = len(runs) - len(unfinished)
    if on_start:
        on_start(len(runs), already)
    runs_dir = str(Path(store.path).parent / f"{spec.name}-runs")
    failed = 0

    def record(rec: dict[str, Any]) -> None:
        nonlocal failed
        store.add(rec)
        failed += rec["status"] == "failed"
        if on_result:
            on_result(rec)

    if jobs <= 1:
        for run in todo:
            record(execute_run(run, runs_dir))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            pending = {pool.submit(execute_run, run, runs_dir) for run in todo}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    record(fut.result())
    return SweepResult(total=len(runs), skipped=already, ran=len(todo), failed=failed, store=Path(store.path))
