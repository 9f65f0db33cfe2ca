"""Executing runs: a grid point's configuration, and training one run or a group into records.

This is what every backend calls, in whatever process it runs the work (the sweep's own, a
worker process, a Ray task), so a run gives the same record whichever backend ran it. Nothing
here touches the results store: records are returned, and the sweep writes them
(docs/architecture.md, "Many runs at once").
"""

from __future__ import annotations

import platform
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from ...errors import InputError
from ...training import RunConfig, train
from ...training.config import applies_to, flat_settings
from ...training.divergence import RunDiverged
from ...training.device import num_threads
from ...plugins import plugin_records
from ...training.provenance import command_line, process_git_commit, utc_now
from ..presets import resolve_config
from ..store import package_version
from .spec import SweepSpec

__all__ = ["run_config", "execute_run", "execute_runs", "failed_record", "now", "settings_for_other_kinds",
           "methods_that_cannot_run", "GROUP_FALLBACK"]


#: how many frames of a failed run's traceback its record keeps (the innermost ones)
_FRAMES = 6


def now() -> str:
    """The time stamp of records (``started_at``, ``finished_at``): UTC, to the second, as
    ``result.json``'s (:func:`~spmlkit.training.provenance.utc_now`)."""
    return utc_now()


def run_config(run: dict[str, Any], runs_dir: str | None = None) -> RunConfig:
    """The :class:`~spmlkit.training.RunConfig` of a grid point: the same resolution as ``spmlkit
    train`` (:func:`~spmlkit.experiments.presets.resolve_config`), with the sweep's ``settings`` as
    the config-file layer. Image runs get a folder of their own (they checkpoint and resume);
    feature runs stay in memory."""
    from ...data.registry import resolve_dataset
    from ...training.network import check_network
    from ...training.recipe import check_parts
    from ...training.run_check import check_run_length, check_subset
    from ...training.run_data import check_labels

    values = {k: run[k] for k in ("dataset", "method", "observation", "seed", "lr", "batch_size", "hparams",
                                  "val_variant", "weight_decay") if k in run}  # weight_decay: a sweep's axis
    if run.get("plugins"):  # loaded here by path or module name: a spawned worker or a Ray task has not yet
        from ...plugins import load_plugins

        load_plugins(run["plugins"])  # before the dataset is resolved: it may be a plug-in's
        values["plugins"] = list(run["plugins"])
    kind = resolve_dataset(run["dataset"]).kind  # an unknown dataset: one line, with the closest name
    where = f"sweep settings (run {run['run_id']})"
    settings = {k: v for k, v in flat_settings(dict(run["settings"]), where=where).items()
                if applies_to(k) in (None, kind)}  # another kind's settings: said once by the sweep
    config = resolve_config(values, file_values=settings, file_name=where, hparams_from=run.get("hparams_from"))
    check_labels(config)
    check_network(config, kind)  # a method with no meaning on the data; its model parts (training/network.py)
    check_parts(config, kind)  # train_only names the model's parts: said before any run, dry run included
    check_run_length(config)  # a warm-up as long as the run (EM+APL in 2 epochs)
    check_subset(config)  # more rows than the set has, or too few to partition
    if kind == "images":
        config.output.out = str(Path(runs_dir or "runs") / run["run_id"])
    return config


def methods_that_cannot_run(spec: SweepSpec) -> dict[str, Any]:
    """The methods of ``spec`` that cannot run in its epochs (EM+APL's warm-up of 5
    epochs in a run of 2), each with its :class:`~spmlkit.training.run_check.TooFewEpochs`: a grid of
    every method (a reproduction, a benchmark that names none) leaves them out and says why, where a
    sweep that names them is refused. Any other refusal is raised."""
    from ...training.run_check import TooFewEpochs
    from .spec import settings_to_check

    found: dict[str, Any] = {}
    for run in settings_to_check(spec):
        if run["method"] in found:
            continue
        try:
            run_config(run)
        except TooFewEpochs as exc:
            found[run["method"]] = exc
    return found


def settings_for_other_kinds(spec: SweepSpec) -> dict[str, list[str]]:
    """The sweep's ``settings`` that some of its data sets do not use, each with those data sets
    (image settings such as ``backbone`` on a feature set, ``head`` on images): their runs train
    without them, and the sweep says so once (docs/sweep-files.md). A setting that no data set of
    the sweep uses is a mistake, refused (ValueError) before any run. A setting at its default
    (``head: linear``, which a benchmark always names) changes no run and is left out."""
    from ...data.registry import resolve_dataset

    flat = flat_settings(dict(spec.settings), where=f"sweep {spec.name!r} settings")
    kinds = {dataset: resolve_dataset(dataset).kind for dataset in spec.datasets}
    defaults = RunConfig().flat()
    unused: dict[str, list[str]] = {}
    for setting, value in flat.items():
        kind = applies_to(setting)
        if kind is None or value == defaults[setting]:  # a default changes no run, of either kind
            continue
        others = [d for d, k in kinds.items() if k != kind]
        if len(others) == len(kinds):
            what = "image" if kind == "images" else "feature"
            raise ValueError(f"setting {setting!r} only applies to {what} data sets, and none of "
                             f"{', '.join(spec.datasets)} is one; remove it")
        if others:
            unused[setting] = others
    return unused


#: what may stop a group that its runs alone survive, or that names one run's bad setting: a
#: setting refused when the runs' parts are built (:class:`~spmlkit.errors.InputError`; each run
#: then fails with it, or trains, on its own) and memory (a group holds R models at once).
#: Anything else stopping a group is a bug of ours -- a group the sweep made that the run plan
#: refuses among them: both read one decision (:func:`~spmlkit.training.plan.group_settings`) --
#: and is raised, with its traceback, never hidden by training the runs again one at a time
#: (docs/architecture.md, "Many runs at once")
GROUP_FALLBACK = (InputError, MemoryError, torch.OutOfMemoryError)


def execute_run(run: dict[str, Any], runs_dir: str | None = None, threads: int | None = None,
                alone_reason: str | None = None) -> dict[str, Any]:
    """Train one run and return its results-store record (never raises: a run that fails is a
    record with its error). ``threads``: torch CPU threads while it trains, restored after, so
    a caller's process keeps its own setting; None leaves them as they are (a backend passes
    :func:`~spmlkit.experiments.sweep.cores.threads_per_run`). The record says it trained
    alone (``group_size`` 1, as its result says) and, when the caller knows, why
    (``alone_reason``; a sweep fills it in from its claims otherwise)."""
    started, t0 = now(), time.perf_counter()
    try:
        with num_threads(threads):
            fields = _train(run, runs_dir)
    except RunDiverged as exc:  # its one line says everything (training/divergence.py)
        record = failed_record(run, str(exc), started, t0)
    except Exception as exc:
        # the frames nearest to where it was raised: a plug-in's loss that fails shows its own file's line
        record = failed_record(run, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-_FRAMES)}", started, t0)
    else:
        record = record_head(run, started)
        record.update(fields)
        record.update({"status": "ok", "error": None, "seconds": time.perf_counter() - t0, "finished_at": now()})
    if alone_reason is not None:
        record["alone_reason"] = alone_reason
    return record


def execute_runs(runs: list[dict[str, Any]], runs_dir: str | None = None,
                 threads: int | None = None) -> list[dict[str, Any]]:
    """Train runs that differ only in seed and lr as one group
    (:func:`~spmlkit.training.train_group`) and return each run's record, as
    :func:`execute_run` would. The group shares the steps of its training, nothing else: each
    run is still its own record with its own numbers, equal to its solo run's, and its
    ``group_size`` says how many trained together: the number its training step saw
    (:class:`~spmlkit.training.RunResult`), not the number asked for. ``seconds`` is the
    group's time divided among its runs. A group stopped by a bad setting or by memory (:data:`GROUP_FALLBACK`) is
    run again one run at a time, so every run gets its own result or its own error, and each
    record says so in ``alone_reason``; anything else is our bug and is raised."""
    from ...training.trainer import train_group

    if len(runs) == 1:
        return [execute_run(runs[0], runs_dir, threads)]
    started, t0 = now(), time.perf_counter()
    try:
        with num_threads(threads):
            results = train_group([run_config(run, runs_dir) for run in runs])
    except GROUP_FALLBACK as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        why = f"its group of {len(runs)} runs stopped ({type(exc).__name__}: {first}), so each run trained alone"
        return [execute_run(run, runs_dir, threads, alone_reason=why) for run in runs]
    seconds, finished = (time.perf_counter() - t0) / len(runs), now()
    records = []
    for run, res in zip(runs, results):
        if res.diverged is not None:  # a failed run with its line, as alone
            record = failed_record(run, res.diverged, started, t0)
            record.update({"group_size": res.group_size, "seconds": seconds, "finished_at": finished})
        else:
            record = record_head(run, started)
            record.update(_result_fields(res))
            record.update({"status": "ok", "error": None, "seconds": seconds, "finished_at": finished})
        records.append(record)
    return records


def record_head(run: dict[str, Any], started: str, group_size: int = 1) -> dict[str, Any]:
    """The keys of a run's record that describe the run rather than its results;
    ``group_size``: how many runs trained together with it in one loop (1: alone). A run of a
    plug-in's method or dataset also names that code (``plugin_code``), which the report reads; a
    run whose hyperparameters come from a stated source (``hparams_from``) says so, so that a
    report tells it from a run of the same ``hparams`` that took its data set's preset."""
    code = {"plugin_code": run["plugin_code"]} if run.get("plugin_code") else {}
    source = {"hparams_from": run["hparams_from"]} if "hparams_from" in run else {}
    return {**code, **source,
        "run_id": run["run_id"], "sweep": run["sweep"], "dataset": run["dataset"], "method": run["method"],
        "observation": run["observation"], "seed": run["seed"], "lr": run["lr"], "batch_size": run["batch_size"],
        "hparams": run["hparams"], "config": run, "started_at": started, "spmlkit_version": package_version(),
        "git_commit": process_git_commit(), "group_size": group_size, "torch_version": torch.__version__,
        "python_version": platform.python_version(), "command": command_line(), "plugins": plugin_records(),
    }


def failed_record(run: dict[str, Any], error: str, started: str, t0: float) -> dict[str, Any]:
    """The record of a run that produced no results: its error, empty results, NaN mAP. One
    shape for every way a run can fail (it raised; a backend lost it), so the sweep goes on,
    the report skips it and ``--retry-failed`` runs it again. ``t0``: its start on
    :func:`time.perf_counter`."""
    record = record_head(run, started)
    record.update({"status": "failed", "error": error, "history": [], "best_epoch": 0, "val_map": float("nan"),
                   "test_map": float("nan"), "test_metrics": {}, "test_ap": [], "class_names": [], "analysis": {},
                   "seconds": time.perf_counter() - t0, "finished_at": now()})
    return record


def _train(run: dict[str, Any], runs_dir: str | None) -> dict[str, Any]:
    config = run_config(run, runs_dir)
    resume = config.output.out is not None and (Path(config.output.out) / "last.pt").is_file()
    res = train(config, resume=resume, overwrite=not resume)
    return _result_fields(res)


def _result_fields(res: Any) -> dict[str, Any]:
    """The keys of a run's record that a :class:`~spmlkit.training.RunResult` fills."""
    record = res.to_record()
    fields = {k: record[k] for k in ("history", "best_epoch", "val_map", "test_map", "val_map_labels",
                                     "test_map_labels", "test_metrics", "test_ap", "class_names", "analysis",
                                     "group_size", "compiled")}
    # measured only where the platform can (docs/architecture.md, "Peak memory")
    fields.update({k: record[k] for k in ("peak_host_memory_bytes", "peak_gpu_memory_bytes", "device", "forward_dtype")
                   if k in record})
    return fields
