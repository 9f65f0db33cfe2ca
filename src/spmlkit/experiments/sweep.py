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
``jobs > 1`` runs execute in worker processes; only the main process writes the store. A
worker's task is a group of feature runs that differ only in seed and lr, trained as one
stacked model (:func:`execute_runs`, :mod:`spmlkit.training.stacked`; the same numbers as one
run at a time, each run with its own record), or a single run that cannot be stacked.

Several sweeps may work on one store at once (``spmlkit sweep`` started twice, on one
machine or on several that share the file): each claims a run in the store before starting
it (a lease, renewed while the run is in progress; :mod:`spmlkit.experiments.store`), so
together they run each grid point once, and each reports how many runs it left to the
others. The store must sit on a file system with working locks (not most NFS/SMB mounts).

Stopping: Ctrl-C or SIGTERM (under :func:`sigterm_stops_sweep`, as ``spmlkit sweep`` runs)
stop the sweep within seconds -- runs not started are cancelled, the workers terminated,
finished runs recorded, leases released -- and the same command resumes. Workers never
outlive the sweep: killed even with SIGKILL, its workers exit too (:func:`_worker_init`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime as _dt
import functools
import hashlib
import itertools
import json
import math
import os
import signal
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import user_input
from ..training import RunConfig, train
from .presets import resolve_config
from .store import CLAIMED, FINISHED, ResultsStore, git_commit, new_owner_id, package_version

if TYPE_CHECKING:
    from .ray_backend import RayOptions

__all__ = ["SweepSpec", "SweepResult", "SweepTerminated", "load_sweep", "expand", "run_config", "run_sweep",
           "execute_run", "execute_runs", "sigterm_stops_sweep", "LEASE_SECONDS", "RENEW_SECONDS", "STACK_MAX"]

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


#: the grid axes: a scalar or a list of these, and an example for the error message
_AXES: dict[str, tuple[str, str]] = {
    "datasets": ("str", "[yeast]"), "methods": ("str", "[an, em]"), "observations": ("str", "[single_positive]"),
    "seeds": ("int", "[0, 1, 2]"), "batch_sizes": ("int", "[64]"), "lrs": ("number", "[0.001, 0.01]"),
}
#: the singular spelling a sweep file may use for an axis
_SINGULAR = {"dataset": "datasets", "method": "methods"}
_KIND_WORDS = {"str": "a non-empty string", "int": "an integer", "number": "a number"}


def _axis_value(value: Any, kind: str) -> Any:
    """One value of a grid axis, checked (and for ``lrs`` converted), so that a wrong type is
    one clear message from the file check instead of a traceback inside ``expand`` or the
    trainer; None when ``value`` does not fit."""
    if kind == "str" and isinstance(value, str) and value:
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "number" and isinstance(value, str):  # PyYAML reads `1e-3` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _check_sweep_types(data: dict[str, Any], p: Path) -> dict[str, Any]:
    """The sweep file's values with every type checked: an axis may be a scalar or a list
    (``method: an`` and ``methods: [an]`` alike); the rest must be strings or mappings.
    Wrong types raise ``ValueError``, not ``TypeError``: they are the user's input, which
    :func:`~spmlkit.errors.user_input` turns into one line."""
    for single, plural in _SINGULAR.items():
        if single in data and plural in data:
            raise ValueError(f"sweep file {p}: give either `{single}` or `{plural}`, not both")
        if single in data:
            data[plural] = data.pop(single)
    for key, (kind, example) in _AXES.items():
        if key not in data:
            continue
        is_list = isinstance(data[key], list)
        values = data[key] if is_list else [data[key]]
        if not values:
            raise ValueError(f"sweep file {p}: {key} must not be empty; e.g. `{key}: {example}`")
        checked = []
        for i, value in enumerate(values):
            ok = _axis_value(value, kind)
            if ok is None:
                where = f"{key}[{i}]" if is_list else key
                raise ValueError(f"sweep file {p}: {where} must be {_KIND_WORDS[kind]}, got {type(value).__name__} "
                                 f"{value!r}; write one value or a list, e.g. `{key}: {example}`")
            checked.append(ok)
        data[key] = checked
    for key in ("name", "store", "val_variant"):
        if key in data and not (isinstance(data[key], str) and data[key]):
            raise ValueError(f"sweep file {p}: {key} must be a non-empty string, got {data[key]!r}")
    if "settings" in data and not isinstance(data["settings"], dict):
        raise ValueError(f"sweep file {p}: settings must be a mapping of trainer settings, got "
                         f"{type(data['settings']).__name__} {data['settings']!r}; e.g. `settings: {{epochs: 20}}`")
    hparams = data.get("hparams", {})
    if not isinstance(hparams, dict):
        raise ValueError(f"sweep file {p}: hparams must map method names to their grids, got "
                         f"{type(hparams).__name__} {hparams!r}; e.g. `hparams: {{em: {{alpha: [0.1, 0.2]}}}}`")
    for method, grid in hparams.items():
        if not isinstance(grid, dict):
            raise ValueError(f"sweep file {p}: hparams.{method} must map hyperparameter names to a value or a "
                             f"list of values, got {type(grid).__name__} {grid!r}; e.g. `{method}: {{alpha: [0.1]}}`")
    return data


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; every mistake in it is a ``ValueError`` naming the file,
    the key and the fix (the CLI prints it as one line)."""
    from ..training.config import load_config_file

    p = Path(path)
    data = load_config_file(p)
    unknown = sorted(set(data) - _GRID_KEYS)
    if unknown:
        raise ValueError(f"sweep file {p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(_GRID_KEYS))}")
    data = _check_sweep_types(data, p)
    data.setdefault("name", p.stem)
    try:
        spec = SweepSpec(**data)
    except ValueError as exc:
        raise ValueError(f"sweep file {p}: {exc}") from None
    if not Path(spec.store).is_absolute():
        spec.store = str(p.resolve().parent / spec.store)
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
    record = _record_head(run, started)
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


def _record_head(run: dict[str, Any], started: str) -> dict[str, Any]:
    """The keys of a run's record that describe the run rather than its results."""
    return {
        "run_id": run["run_id"], "sweep": run["sweep"], "dataset": run["dataset"], "method": run["method"],
        "observation": run["observation"], "seed": run["seed"], "lr": run["lr"], "batch_size": run["batch_size"],
        "hparams": run["hparams"], "config": run, "started_at": started, "spmlkit_version": package_version(),
        "git_commit": _process_git_commit(),
    }


@functools.lru_cache(maxsize=1)
def _process_git_commit() -> str | None:
    """The commit of the code this process runs, asked once: ``git rev-parse`` is a subprocess
    (milliseconds in a process holding torch), and the code imported here cannot change."""
    return git_commit()


def execute_runs(runs: list[dict[str, Any]], runs_dir: str | None = None) -> list[dict[str, Any]]:
    """Train runs that differ only in seed and lr as one stacked group
    (:func:`~spmlkit.training.stacked.train_stacked`) and return each run's record, as
    :func:`execute_run` would (never raises). The group shares the steps of its training,
    nothing else: each run is still its own record with its own numbers, equal to its solo
    run's. ``seconds`` is the group's time divided among its runs. A group that fails for any
    reason is run again one run at a time through :func:`execute_run`, so every run gets its
    own result or its own error."""
    import time

    import torch

    from ..training.trainer import train_group

    if len(runs) == 1:
        return [execute_run(runs[0], runs_dir)]
    torch.set_num_threads(int(os.environ.get("SPMLKIT_RUN_THREADS", "1")))
    started, t0 = _now(), time.perf_counter()
    try:
        results = train_group([run_config(run, runs_dir) for run in runs])
    except Exception:  # noqa: BLE001 - each run then meets its own error (or none) on its own
        return [execute_run(run, runs_dir) for run in runs]
    seconds, finished = (time.perf_counter() - t0) / len(runs), _now()
    records = []
    for run, res in zip(runs, results):
        record = _record_head(run, started)
        record.update(_result_fields(res))
        record.update({"status": "ok", "error": None, "seconds": seconds, "finished_at": finished})
        records.append(record)
    return records


def _group_key(run: dict[str, Any]) -> str:
    """Runs of one sweep with equal keys differ only in seed and lr (everything else of a run
    is the rest of its grid point), which is what stacking asks of a group."""
    return json.dumps({k: v for k, v in run.items() if k not in ("seed", "lr", "run_id", "sweep")}, sort_keys=True,
                      default=str)


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
        config.output.out = str(Path(runs_dir or "runs") / run["run_id"])
    return config


def _train(run: dict[str, Any], runs_dir: str | None) -> dict[str, Any]:
    config = run_config(run, runs_dir)
    resume = config.output.out is not None and (Path(config.output.out) / "last.pt").is_file()
    res = train(config, resume=resume, overwrite=not resume)
    return _result_fields(res)


def _result_fields(res: Any) -> dict[str, Any]:
    """The keys of a run's record that a :class:`~spmlkit.training.RunResult` fills."""
    record = res.to_record()
    return {k: record[k] for k in ("history", "best_epoch", "val_map", "test_map", "test_metrics", "test_ap",
                                   "class_names", "analysis")}


#: how long a claimed run stays ours without renewal, and how often the sweep renews it
LEASE_SECONDS = 120.0
#: the most runs one worker trains stacked in one task (the process backend, jobs > 1)
STACK_MAX = 16
RENEW_SECONDS = 30.0
#: how long a terminated worker gets to exit before it is killed
_WORKER_EXIT_SECONDS = 5.0
#: how often a worker checks that the sweep that started it still exists
_PARENT_POLL_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class SweepResult:
    """What one ``run_sweep`` call did. ``skipped`` counts runs found finished (before the
    start or, with a concurrent sweep, when their turn came); ``held`` counts runs skipped
    because another sweep holds their lease; ``owner`` is this sweep's lease owner id, also
    stored in each of its records as ``owner``."""

    total: int
    skipped: int
    ran: int
    failed: int
    store: Path
    held: int = 0
    owner: str = ""


class SweepTerminated(KeyboardInterrupt):
    """SIGTERM received (see :func:`sigterm_stops_sweep`). A ``KeyboardInterrupt`` so that a
    terminated sweep cleans up exactly like one stopped with Ctrl-C."""


@contextlib.contextmanager
def sigterm_stops_sweep() -> Iterator[None]:
    """While active, SIGTERM raises :class:`SweepTerminated` in the main thread.

    The default SIGTERM action ends the process at once: the run in progress is lost (which
    resuming repairs) but the workers are orphaned until they notice, and the leases of the
    runs in progress stay until they expire. Raised as an exception, SIGTERM instead goes
    through :func:`run_sweep`'s cleanup: workers terminated, finished runs recorded, leases
    released. Outside the main thread (where Python cannot set handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SweepTerminated(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _worker_init(sweep_pid: int, death_signal: bool = True) -> None:
    """Pool initializer: a worker must never outlive the sweep that started it.

    A worker orphaned by a killed sweep would wait for work forever, holding its memory (about
    half a GB with torch loaded). Linux ends it through ``prctl(PR_SET_PDEATHSIG, SIGTERM)``
    the moment its parent dies; elsewhere (or if prctl is unavailable) a daemon thread exits
    the process when its parent changes. Ctrl-C is ignored here: it reaches the whole
    process group, and the sweep (main process) decides what to stop and terminates the
    workers itself; SIGTERM gets its default action back (a forked worker inherits the
    sweep's handler from :func:`sigterm_stops_sweep`). ``death_signal=False`` leaves the
    fallback alone (the tests check it that way).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if death_signal and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # no libc symbol: the thread below still covers it
            pass
    parent = os.getppid()  # the sweep itself, or the start method's fork server
    if parent != sweep_pid and not _process_exists(sweep_pid):  # it died before prctl took effect
        os._exit(1)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), name="spmlkit-orphan-watch", daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    """Worker thread: exit the process once its parent is gone (it is then re-parented)."""
    while True:
        time.sleep(_PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


def _process_exists(pid: int) -> bool:
    """Whether ``pid`` names a process (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists under another user
        return True
    return True


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now: a run in progress is lost (the
    next sweep runs it again), which is what stopping a sweep means. ``shutdown`` alone would
    wait for the runs in progress to finish, minutes for an image run."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # private, but stable since 3.3
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + _WORKER_EXIT_SECONDS
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)


class _Heartbeat:
    """Renews this sweep's leases from a daemon thread while runs are in progress, so that a
    run longer than the lease is not taken over by another sweep. A failed renewal (the store
    busy past its timeout) is kept in ``error`` and retried at the next beat; the lease
    duration is several beats long for that reason."""

    def __init__(self, store: ResultsStore, owner: str, lease_seconds: float, every: float) -> None:
        self.store, self.owner, self.lease_seconds, self.every = store, owner, lease_seconds, every
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._started = False
        self._thread = threading.Thread(target=self._loop, name="spmlkit-lease-heartbeat", daemon=True)

    def start(self) -> None:
        """Start beating (once; later calls do nothing). The pool forks its workers before
        this is called, so no worker is forked while this thread may hold a lock."""
        if not self._started and not self._stop.is_set():
            self._started = True
            self._thread.start()

    def stop(self) -> None:
        """Stop beating. The join is short: a beat stuck on a busy store must not delay a
        Ctrl-C, and a late beat is harmless (it renews only leases this sweep still has)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.store.renew(self.owner, duration=self.lease_seconds)
            except sqlite3.Error as exc:
                self.error = exc


def run_sweep(
    spec: SweepSpec,
    *,
    jobs: int | None = None,
    store_path: str | Path | None = None,
    max_runs: int | None = None,
    retry_failed: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_skip: Callable[[dict[str, Any], str], None] | None = None,
    lease_seconds: float = LEASE_SECONDS,
    renew_seconds: float = RENEW_SECONDS,
    backend: str = "process",
    ray_options: RayOptions | None = None,
) -> SweepResult:
    """Run every unfinished run of ``spec``.

    ``max_runs`` stops after that many runs (time slicing); ``retry_failed`` runs failed runs
    again (by default a recorded failure counts as finished, so a broken setting is not
    retried forever). Each run is claimed in the store before it starts (a lease of
    ``lease_seconds``, renewed every ``renew_seconds``), so sweeps sharing a store split the
    grid; a run finished or leased by another sweep meanwhile is skipped and reported to
    ``on_skip(run, "finished" | "held")``.

    Stopping: ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM under :func:`sigterm_stops_sweep`)
    cancels the runs not started, terminates the workers, records every run that had
    finished, releases this sweep's leases and re-raises, within seconds. The store is
    consistent whenever the process dies: a record is one transaction, and leases of a dead
    sweep are taken over.

    ``backend``: ``"process"`` runs here (``jobs`` worker processes, default 1); ``"ray"``
    runs each run as a Ray task on this machine or a cluster (:mod:`spmlkit.experiments.ray_backend`,
    placed by ``ray_options``; ``jobs``, when given, caps the runs in flight). This process
    stays the only writer of the store either way, so everything above holds on both.
    """
    if backend not in ("process", "ray"):
        raise ValueError(f"unknown sweep backend {backend!r}; choose process or ray")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if backend == "ray":  # before any run is claimed: a missing Ray or a bad option is one line
        from .ray_backend import RayOptions, import_ray

        import_ray()
        ray_options = ray_options or RayOptions()
        if jobs is not None:
            ray_options = dataclasses.replace(ray_options, jobs=jobs)
    if not 0 < renew_seconds < lease_seconds:
        raise ValueError(f"the lease renewal interval ({renew_seconds} s) must be positive and shorter than the "
                         f"lease ({lease_seconds} s); by default leases last {LEASE_SECONDS:g} s, renewed every "
                         f"{RENEW_SECONDS:g} s")
    store = ResultsStore(store_path or spec.store)
    runs = expand(spec)
    started_at = _now()

    def finished(run_id: str) -> bool:
        if retry_failed:
            rec = store.get(run_id)
            return rec is not None and rec["status"] == "ok"
        return store.has_finished(run_id)

    with user_input():  # a bad setting fails here, before any run, not once per run
        for run in runs:
            run_config(run)
    unfinished = [r for r in runs if not finished(r["run_id"])]
    already = len(runs) - len(unfinished)
    if on_start:
        on_start(len(runs), already)
    runs_dir = str(Path(store.path).parent / f"{spec.name}-runs")
    owner = new_owner_id()
    sweep = _SweepState(store, owner, unfinished, max_runs, started_at if retry_failed else None, lease_seconds,
                        _Heartbeat(store, owner, lease_seconds, renew_seconds), on_result, on_skip)
    try:
        if backend == "ray":
            from .ray_backend import run_on_ray

            run_on_ray(sweep, runs_dir, ray_options)
        elif (jobs or 1) <= 1:
            sweep.run_here(runs_dir)
        else:
            sweep.run_in_pool(runs_dir, jobs)
    finally:
        sweep.give_up()
    return SweepResult(total=len(runs), skipped=already + sweep.found_finished, ran=sweep.ran, failed=sweep.failed,
                       store=Path(store.path), held=sweep.held, owner=owner)


class _SweepState:
    """The bookkeeping of one ``run_sweep`` call: which runs are claimed, what is recorded.

    Runs are claimed one at a time, only when a worker is free, so that a concurrent sweep
    on the same store gets the runs this one has not started yet. The process pool claims a
    worker's task as a group of runs that can train stacked (:meth:`claim_group`); each run of
    it still has its own lease and its own record.
    """

    def __init__(self, store: ResultsStore, owner: str, candidates: list[dict[str, Any]], max_runs: int | None,
                 redo_failed_until: str | None, lease_seconds: float, heartbeat: _Heartbeat,
                 on_result: Callable[[dict[str, Any]], None] | None,
                 on_skip: Callable[[dict[str, Any], str], None] | None) -> None:
        self.store, self.owner, self.heartbeat = store, owner, heartbeat
        self._candidates = iter(candidates)
        self._budget = max_runs
        self._redo_failed_until, self._lease_seconds = redo_failed_until, lease_seconds
        self._on_result, self._on_skip = on_result, on_skip
        self.ran = self.failed = self.found_finished = self.held = 0
        self._unrecorded: dict[str, dict[str, Any]] = {}  # finished in a worker, not yet in the store
        self.candidates_left = len(candidates)
        self._peeked: dict[str, Any] | None = None  # read by claim_group, not part of its group
        self._stackable: dict[str, bool] = {}  # group key -> whether such runs can train stacked

    def _next_candidate(self) -> dict[str, Any] | None:
        """The next run of the grid not looked at yet (the one :meth:`claim_group` put back first)."""
        run, self._peeked = self._peeked, None
        if run is None:
            run = next(self._candidates, None)
        if run is not None:
            self.candidates_left -= 1
        return run

    def claim_next(self) -> dict[str, Any] | None:
        """The next run this sweep may start (its lease taken), or None when there is none."""
        while self._budget is None or self.ran < self._budget:
            run = self._next_candidate()
            if run is None:
                return None
            outcome = self.store.claim(run["run_id"], self.owner, duration=self._lease_seconds,
                                       redo_failed_until=self._redo_failed_until)
            if self._tally(run, outcome):
                return run
        return None

    def _tally(self, run: dict[str, Any], outcome: str) -> bool:
        """Count a claim's outcome (reporting a skipped run); True when the run is ours to start."""
        if outcome == CLAIMED:
            self.ran += 1
            return True
        if outcome == FINISHED:
            self.found_finished += 1
        else:
            self.held += 1
        if self._on_skip:
            self._on_skip(run, outcome)
        return False

    def claim_group(self, size: int) -> list[dict[str, Any]]:
        """The next runs this sweep may start as one stacked task (leases taken), at most
        ``size``: the next candidate and the candidates right after it that differ from it only
        in seed and lr, claimed in one store transaction; [] when nothing is left. A run that
        cannot train stacked (an image run, ...) comes alone. Runs finished or leased by another
        sweep meanwhile are skipped and reported as :meth:`claim_next` does."""
        while True:
            room = size if self._budget is None else min(size, self._budget - self.ran)
            first = self._next_candidate() if room > 0 else None
            if first is None:
                return []
            group, key = [first], _group_key(first)
            while self._can_stack(key, first) and len(group) < room:
                run = self._next_candidate()
                if run is None:
                    break
                if _group_key(run) != key:
                    self.candidates_left += 1
                    self._peeked = run
                    break
                group.append(run)
            outcomes = self.store.claim_many([run["run_id"] for run in group], self.owner,
                                             duration=self._lease_seconds, redo_failed_until=self._redo_failed_until)
            claimed = [run for run, outcome in zip(group, outcomes) if self._tally(run, outcome)]
            if claimed:
                return claimed

    def _can_stack(self, key: str, run: dict[str, Any]) -> bool:
        """Whether the runs of group ``key`` (``run`` is one of them) can train stacked; asked
        once per group key, since they differ only in seed and lr."""
        if key not in self._stackable:
            from ..training.plan import batch_key

            try:
                self._stackable[key] = batch_key(run_config(run)) is not None
            except Exception:  # noqa: BLE001 - the run then fails on its own, with its error
                self._stackable[key] = False
        return self._stackable[key]

    def record_many(self, records: list[dict[str, Any]]) -> None:
        """Store a task's records and drop their leases in one transaction (one record and one
        lease per run, as :meth:`record`; one write instead of one per run)."""
        for rec in records:
            self._unrecorded[rec["run_id"]] = rec
            rec["owner"] = self.owner
        self.store.add_many(records, release_lease=self.owner)
        for rec in records:
            del self._unrecorded[rec["run_id"]]
            self.failed += rec["status"] == "failed"
            if self._on_result:
                self._on_result(rec)

    def record(self, rec: dict[str, Any]) -> None:
        """Store a finished run's record and drop its lease in one transaction."""
        self._unrecorded[rec["run_id"]] = rec
        rec["owner"] = self.owner
        self.store.add(rec, release_lease=self.owner)
        del self._unrecorded[rec["run_id"]]
        self.failed += rec["status"] == "failed"
        if self._on_result:
            self._on_result(rec)

    def give_up(self) -> None:
        """After the sweep ends, normally or not: store runs that finished but were not
        recorded yet (an interrupt between a worker's result and its write), then drop every
        lease still held, so the runs left unfinished are free for the next sweep at once."""
        self.heartbeat.stop()
        try:
            for rec in list(self._unrecorded.values()):
                rec["owner"] = self.owner
                self.store.add(rec, release_lease=self.owner)
                self._unrecorded.pop(rec["run_id"], None)
        finally:
            self.store.release(self.owner)

    def run_here(self, runs_dir: str) -> None:
        """``jobs=1``: every run in this process, one after the other."""
        self.heartbeat.start()
        while (run := self.claim_next()) is not None:
            self.record(execute_run(run, runs_dir))

    def run_in_pool(self, runs_dir: str, jobs: int) -> None:
        """``jobs>1``: one task per worker process, at most ``jobs`` claimed at a time. A task
        is a group of runs that train stacked (:func:`execute_runs`), so that a sweep of feature
        runs takes its steps several runs at a time; groups are small enough to give every
        worker a few tasks (:func:`_group_size`), and a run that cannot be stacked is a task alone."""
        pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init, initargs=(os.getpid(),))
        in_flight: dict[Future[list[dict[str, Any]]], list[dict[str, Any]]] = {}
        size = _group_size(self.candidates_left, jobs)
        try:
            while True:
                while len(in_flight) < jobs and (group := self.claim_group(size)):
                    in_flight[pool.submit(execute_runs, group, runs_dir)] = group
                self.heartbeat.start()
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                finished: list[list[dict[str, Any]]] = []
                for fut in done:
                    group = in_flight[fut]
                    try:
                        recs = fut.result()
                    except BrokenProcessPool as exc:
                        run, more = group[0], f" and {len(group) - 1} run(s) stacked with it" if len(group) > 1 else ""
                        raise RuntimeError(
                            f"a worker process died while running {run['run_id']} ({run['method']}, seed "
                            f"{run['seed']}){more}: killed, or out of memory? Finished runs are recorded; run the "
                            "sweep again to resume, with fewer --jobs if memory is short") from exc
                    self._unrecorded.update((rec["run_id"], rec) for rec in recs)  # stored even if interrupted now
                    del in_flight[fut]
                    finished.append(recs)
                # the freed workers get their next task before the results are written (a store
                # write takes milliseconds; a worker should not wait for it)
                while len(in_flight) < jobs and (group := self.claim_group(size)):
                    in_flight[pool.submit(execute_runs, group, runs_dir)] = group
                for recs in finished:
                    self.record_many(recs)
        except BaseException:
            _stop_workers(pool)
            for fut in in_flight:  # finished before the stop but not handled yet
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    for rec in fut.result():
                        self._unrecorded[rec["run_id"]] = rec
            raise
        pool.shutdown(wait=True)


def _group_size(candidates: int, jobs: int) -> int:
    """How many runs one stacked task takes: as many as fit in :data:`STACK_MAX` while the
    sweep still makes about two tasks per worker, so that workers finish together and a sweep
    stopped midway keeps most of what was done (a task is recorded when all its runs are)."""
    return max(1, min(STACK_MAX, math.ceil(candidates / (2 * jobs))))
