"""Sweeps on Ray: the runs of a sweep as Ray tasks, on this machine or on a Ray cluster.

``spmlkit sweep grid.yaml --backend ray`` exists because the process backend stops at one
machine: Ray schedules the runs over every node of a cluster (``--address``), giving image
runs a GPU each and feature runs a CPU each, and retries a run whose worker died.

What does not change, and why it holds:

* **One writer.** The driver (the process running the sweep) keeps the sweep's
  bookkeeping (:mod:`~spmlkit.experiments.sweep.claims`): it claims each run in the results
  store (a lease) only when the cluster has room for it (:meth:`RayExecutor.room`), renews its
  leases while tasks run and records every result. Tasks only train and return a record, so
  the store never has to be reachable from the workers, and concurrent sweeps on one store
  split the grid as before. This module is an :class:`~spmlkit.experiments.sweep.executor.Executor`
  and knows nothing else of the sweep.
* **Same numbers.** A task is what a worker process of the process backend gets: a run, or runs
  that differ only in seed, lr and weight decay, trained as one group
  (:func:`~spmlkit.experiments.sweep.execute.execute_runs`; groups of the same size, claimed in
  the same order, so a reproduction on a cluster gives the tables it gives here), in the driver's
  working directory, with as many torch threads as it has CPUs (``cpus_per_run``, whole;
  ``SPMLKIT_RUN_THREADS`` when set; threads do not change the numbers:
  :mod:`~spmlkit.experiments.sweep.cores`).
* **Failures.** ``execute_runs`` never raises: a run that fails is a record with its error.
  A worker process that dies (killed, out of memory, its node lost) is a system failure, and
  Ray runs the task again, at most ``max_retries`` times; past that a group's runs are tried once
  more, each as a task of its own (a group holds R models: alone, a run may fit), and a run alone
  is recorded as failed with the reason; the sweep goes on (``--retry-failed`` runs it again).
* **Resume.** A killed driver leaves finished runs in the store and its leases to be taken
  over, as with processes. Image runs checkpoint into the sweep's runs folder and continue
  from ``last.pt``; on a cluster that folder must be on storage every node sees, otherwise a
  run retried or resumed on another node starts from its first epoch.

Every node needs spmlkit (the same version) and the datasets at the same paths. Ray is an
optional dependency (``pip install "spmlkit[ray]"``), imported only inside functions.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import InputError
from .execute import execute_run, execute_runs, failed_record, now, run_config
from .executor import Executor, Keep, Run
from .processes import STACK_MAX

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["MISSING_RAY", "RayOptions", "RayExecutor", "import_ray"]

#: the one line a user without the extra sees
MISSING_RAY = 'the Ray backend needs Ray, which is not installed: pip install "spmlkit[ray]"'
#: how long the driver waits for a task before it looks again (and lets Ctrl-C / SIGTERM in)
_WAIT_SECONDS = 1.0
#: the smallest fraction of a CPU or GPU that Ray schedules
_RESOURCE_UNIT = 1e-4
#: the most characters of a Ray error kept in a failed run's record (they carry whole tracebacks)
_ERROR_CHARS = 4000


@dataclass(frozen=True)
class RayOptions:
    """How the runs of a sweep are placed on Ray.

    ``address``: an existing cluster (``ray.init(address=...)``, e.g. ``HEAD:6379`` or
    ``auto``); None starts a Ray instance on this machine for the sweep (unless Ray is
    already initialised in this process, which is then used as it is). ``gpus_per_run``: GPUs
    of an image run (fractions share a GPU); None means 1 when the cluster has a GPU, else 0.
    Feature runs never request one. ``cpus_per_run``: CPUs of every run. ``max_retries``: how
    many times a run whose worker process died is run again. ``jobs``: the most runs in flight;
    None fits as many as the cluster's CPUs hold (a local instance then uses every CPU here).
    """

    address: str | None = None
    gpus_per_run: float | None = None
    cpus_per_run: float = 1.0
    max_retries: int = 2
    jobs: int | None = None

    def __post_init__(self) -> None:
        """Refuse what Ray would refuse only at the first submission, mid-sweep, as a traceback
        (Ray counts resources in units of 0.0001)."""
        if not self.cpus_per_run >= _RESOURCE_UNIT:
            raise ValueError(f"--cpus-per-run must be at least {_RESOURCE_UNIT:g}, got {self.cpus_per_run:g}")
        if self.gpus_per_run is not None and not (self.gpus_per_run == 0 or self.gpus_per_run >= _RESOURCE_UNIT):
            raise ValueError(f"--gpus-per-run must be 0 or at least {_RESOURCE_UNIT:g}, got {self.gpus_per_run:g}")
        if self.max_retries < 0:
            raise ValueError(f"--max-retries must be 0 or more, got {self.max_retries}")
        if self.jobs is not None and self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {self.jobs}")


def import_ray() -> ModuleType:
    """The ``ray`` module, or :class:`~spmlkit.errors.InputError` with the install command:
    Ray is an extra, and a user who asked for it without installing it made a fixable mistake."""
    try:
        import ray
    except ImportError:
        raise InputError(MISSING_RAY) from None
    return ray


def _task(runs: list[dict[str, Any]], runs_dir: str, threads: int, cwd: str,
          alone_reason: str | None = None) -> list[dict[str, Any]]:
    """What a Ray worker does for one task: the process backend's ``execute_runs`` (one run, or a
    group), in the driver's working directory, so both backends compute the same thing (and relative
    dataset paths mean the same folder on every node that has it). ``alone_reason``: why a run that
    came in a group trains alone now (its group's worker died)."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    if alone_reason is not None:
        return [execute_run(run, runs_dir, threads, alone_reason=alone_reason) for run in runs]
    return execute_runs(runs, runs_dir, threads)


def _connect(ray: ModuleType, options: RayOptions) -> bool:
    """Connect to the cluster, or start a local instance; True when this call started Ray
    (and so must shut it down). No dashboard web UI: a sweep has its own progress bar, and the
    plain ``ray`` package has no UI to serve. A cluster that cannot be reached is the user's input.

    ``ray.init`` replaces the SIGTERM handler (with ``sys.exit``, and its C++ core with a
    crash handler that aborts the process), which would bypass the sweep's cleanup under
    :func:`~spmlkit.experiments.sweep.sigterm_stops_sweep`; the handler in place before is
    put back, so SIGTERM still stops the sweep with finished runs recorded and leases freed."""
    if ray.is_initialized():
        return False
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main else None
    try:
        _init(ray, options)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return True


def _init(ray: ModuleType, options: RayOptions) -> None:
    """``ray.init`` for :func:`_connect`: the cluster at ``address`` (or Ray's own
    ``RAY_ADDRESS``), else a new instance on this machine. ``address="local"`` says *new*:
    a bare ``ray.init()`` would join whatever cluster ``ray start`` left recorded in Ray's
    temporary folder, even a dead one, and wait minutes for it. The local instance gets
    every CPU here, or ``jobs x cpus_per_run`` when ``jobs`` is given."""
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
    if options.address:
        kwargs["address"] = options.address
    elif not os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = "local"
        kwargs["num_cpus"] = None if options.jobs is None else max(1, round(options.jobs * options.cpus_per_run))
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        where = options.address or os.environ.get("RAY_ADDRESS")
        raise InputError(f"cannot reach the Ray cluster at {where}: {exc}. Start it with `ray start --head` on the "
                         "head machine, or leave out --address to use this machine only; a cluster with token "
                         "authentication also needs RAY_AUTH_MODE=token and its token here") from None


def _capacity(ray: ModuleType, options: RayOptions) -> int:
    """How many runs may be in flight now: ``jobs``, or as many as the cluster's CPUs hold.
    Asked again before each claim, so nodes that join (or leave) a cluster count. Claiming
    only what can start keeps the other runs free for a concurrent sweep on the same store."""
    if options.jobs is not None:
        return options.jobs
    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    return max(1, int(cpus // options.cpus_per_run))


class _Placement:
    """The resources a run requests, checked once against the cluster's nodes: a request no
    node can ever meet would wait forever in Ray's queue, so it is refused in one line."""

    def __init__(self, ray: ModuleType, options: RayOptions) -> None:
        self.ray, self.options = ray, options
        self._checked: set[tuple[float, float]] = set()
        self._default_gpus: float | None = None

    def resources(self, run: dict[str, Any], runs_dir: str) -> tuple[float, float]:
        """(CPUs, GPUs) of ``run``: image runs get GPUs (by default 1 when the cluster has any);
        feature runs CPUs only, as in the process backend."""
        from ...training.run_data import is_feature_run

        gpus = 0.0
        if not is_feature_run(run_config(run, runs_dir)):
            gpus = self.options.gpus_per_run if self.options.gpus_per_run is not None else self._cluster_default()
        need = (self.options.cpus_per_run, gpus)
        if need not in self._checked:
            self._check(*need)
            self._checked.add(need)
        return need

    def _cluster_default(self) -> float:
        if self._default_gpus is None:
            self._default_gpus = 1.0 if float(self.ray.cluster_resources().get("GPU", 0.0)) >= 1 else 0.0
        return self._default_gpus

    def _check(self, cpus: float, gpus: float) -> None:
        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        if any(float(r.get("CPU", 0.0)) >= cpus and float(r.get("GPU", 0.0)) >= gpus for r in nodes):
            return
        have = ", ".join(f"{r.get('CPU', 0):g} CPU / {r.get('GPU', 0):g} GPU" for r in nodes) or "no nodes"
        raise InputError(f"no node of the Ray cluster can run a run needing {cpus:g} CPU(s) and {gpus:g} GPU(s) "
                         f"(nodes: {have}); lower --cpus-per-run / --gpus-per-run, or add such a node")


def _worker_died(ray: ModuleType, exc: BaseException) -> bool:
    """Whether a task failed because its worker process or its node died (not because it raised)."""
    return isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                            ray.exceptions.OutOfMemoryError))


def _lost_record(ray: ModuleType, run: Run, exc: BaseException, started: str, t0: float,
                 max_retries: int) -> dict[str, Any]:
    """The record of a run Ray could not bring back: the worker died on every attempt, or the
    task itself raised (spmlkit missing on a node, a result that could not be sent back); the
    shape of every failed record (:func:`~spmlkit.experiments.sweep.execute.failed_record`)."""
    text = str(exc)
    if _worker_died(ray, exc):
        text = (f"the worker process running this run died {max_retries + 1} time(s) (killed, out of memory, or "
                f"its node lost); raise --max-retries or give runs more memory. Ray said: {text}")
    return failed_record(run, f"{type(exc).__name__}: {text}"[:_ERROR_CHARS], started, t0)


class RayExecutor(Executor):
    """The runs of a sweep as Ray tasks: one run, or a group of runs that train together, per task,
    groups as large as the process backend's for the same number of workers
    (:meth:`task_size`: about two tasks per CPU the cluster holds).

    :meth:`start` connects to the cluster (or starts a local instance, shut down again by
    :meth:`close`); :meth:`room` is the cluster's capacity in tasks, asked again before each claim,
    so nodes that join (or leave) count. On a stop the tasks in flight are cancelled (their
    workers killed) and results that had arrived are kept, so the sweep stops within seconds
    and the same command resumes.
    """

    alone_reason = "few runs were left for the cluster's workers (two tasks each at most), so each task got one run"

    def __init__(self, options: RayOptions, threads: int) -> None:
        self.ray = import_ray()  # before any run is claimed: a missing Ray is one line
        self.options, self.threads = options, threads
        self._started_ray = False
        self._runs_dir = ""
        self._cwd = os.getcwd()
        self._remote: Any = None
        self._placement: _Placement | None = None
        self._in_flight: dict[Any, tuple[list[Run], str, float]] = {}  # ObjectRef -> (runs, started_at, t0)

    def start(self, runs_dir: str) -> None:
        """Connect, and make the runs folder absolute: a worker does not start in the driver's
        working directory (:func:`_task` moves it there)."""
        self._started_ray = _connect(self.ray, self.options)
        self._runs_dir, self._cwd = str(Path(runs_dir).resolve()), os.getcwd()
        self._remote = self.ray.remote(_task)
        self._placement = _Placement(self.ray, self.options)

    def task_size(self, candidates: int) -> int:
        """As many runs a task as the process backend gives a worker: the runs left shared among about
        two tasks per slot of the cluster, at most :data:`~spmlkit.experiments.sweep.processes.STACK_MAX`."""
        return max(1, min(STACK_MAX, math.ceil(candidates / (2 * _capacity(self.ray, self.options)))))

    def room(self) -> int:
        return _capacity(self.ray, self.options) - len(self._in_flight)

    def submit(self, runs: list[Run], alone_reason: str | None = None) -> None:
        """One task for ``runs`` (a group trains in one process); with ``alone_reason``, one task per run."""
        assert self._placement is not None, "start() first"
        tasks = [[run] for run in runs] if alone_reason is not None else [runs]
        for task in tasks:
            cpus, gpus = self._placement.resources(task[0], self._runs_dir)  # a group's runs are of one kind
            ref = self._remote.options(num_cpus=cpus, num_gpus=gpus, max_retries=self.options.max_retries,
                                       retry_exceptions=False, name=f"spmlkit-run-{task[0]['run_id']}"
                                       ).remote(task, self._runs_dir, self.threads, self._cwd, alone_reason)
            self._in_flight[ref] = (task, now(), time.perf_counter())

    def busy(self) -> bool:
        return bool(self._in_flight)

    def wait(self, keep: Keep) -> None:
        """Wait up to :data:`_WAIT_SECONDS` for a task; a run whose retries are used up, or
        whose task raised, is kept as a failed record."""
        done, _ = self.ray.wait(list(self._in_flight), num_returns=1, timeout=_WAIT_SECONDS)
        for ref in done:
            runs, started, t0 = self._in_flight[ref]
            try:
                records = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                if len(runs) > 1 and _worker_died(self.ray, exc):  # each run of the group gets a worker of its own
                    first = (str(exc).strip().splitlines() or [""])[0][:300]
                    self.submit(runs, alone_reason=f"the worker of its group of {len(runs)} runs died "
                                                   f"{self.options.max_retries + 1} time(s) ({first}), so each run "
                                                   "trained alone")
                    del self._in_flight[ref]
                    continue
                records = [_lost_record(self.ray, run, exc, started, t0, self.options.max_retries) for run in runs]
            keep(records)
            del self._in_flight[ref]  # only now: a stop before this line still finds it

    def stop(self, keep: Keep) -> None:
        """Keep results that arrived, cancel the rest (force: a run in progress is given up)."""
        for ref in list(self._in_flight):
            try:
                ready, _ = self.ray.wait([ref], timeout=0)
                if ready:
                    keep(self.ray.get(ref, timeout=0))
                else:
                    self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - a failed task or a failed cancel: the run is simply not recorded
                continue
        self._in_flight.clear()

    def close(self) -> None:
        if self._started_ray:
            self.ray.shutdown()
            self._started_ray = False


def with_jobs(options: RayOptions | None, jobs: int | None) -> RayOptions:
    """``options`` (default :class:`RayOptions`) with ``jobs`` when given: ``run_sweep(jobs=N,
    backend="ray")`` and ``--jobs N --backend ray`` cap the runs in flight."""
    options = options or RayOptions()
    return options if jobs is None else replace(options, jobs=jobs)
