"""Sweeps on Ray: each run of a sweep as one Ray task, on this machine or on a Ray cluster.

``spmlkit sweep grid.yaml --backend ray`` exists because the process backend stops at one
machine: Ray schedules the runs over every node of a cluster (``--address``), giving image
runs a GPU each and feature runs a CPU each, and retries a run whose worker died.

What does not change, and why it holds:

* **One writer.** The driver (the process running the sweep) keeps the
  :mod:`~spmlkit.experiments.sweep` bookkeeping: it claims each run in the results store
  (a lease) only when the cluster has room for it, renews its leases while tasks run and
  records every result. Tasks only train and return a record, so the store never has to be
  reachable from the workers, and concurrent sweeps on one store split the grid as before.
* **Same numbers.** A task calls the same :func:`~spmlkit.experiments.sweep.execute_run`
  with the driver's ``SPMLKIT_RUN_THREADS`` (default one thread per run) and the driver's
  working directory, so a run gives what the process backend gives on the same hardware.
* **Failures.** ``execute_run`` never raises: a run that fails is a record with its error.
  A worker process that dies (killed, out of memory, its node lost) is a system failure, and
  Ray runs the task again, at most ``max_retries`` times; past that the run is recorded as
  failed with the reason and the sweep goes on (``--retry-failed`` runs it again).
* **Resume.** A killed driver leaves finished runs in the store and its leases to be taken
  over, as with processes. Image runs checkpoint into the sweep's runs folder and continue
  from ``last.pt``; on a cluster that folder must be on storage every node sees, otherwise a
  run retried or resumed on another node starts from its first epoch.

Every node needs spmlkit (the same version) and the datasets at the same paths. Ray is an
optional dependency (``pip install "spmlkit[ray]"``), imported only inside functions.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:
    from types import ModuleType

    from .sweep import _SweepState

__all__ = ["MISSING_RAY", "RayOptions", "import_ray", "run_on_ray"]

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


def _task(run: dict[str, Any], runs_dir: str, threads: str, cwd: str) -> dict[str, Any]:
    """What a Ray worker does for one run: the process backend's ``execute_run``, under the
    driver's thread count and working directory, so both backends compute the same thing
    (and relative dataset paths mean the same folder on every node that has it)."""
    from .sweep import execute_run

    os.environ["SPMLKIT_RUN_THREADS"] = threads
    if os.path.isdir(cwd):
        os.chdir(cwd)
    return execute_run(run, runs_dir)


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
        from ..training.run_data import is_feature_run
        from .sweep import run_config

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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _lost_record(ray: ModuleType, run: dict[str, Any], exc: BaseException, started: str, t0: float,
                 max_retries: int) -> dict[str, Any]:
    """The record of a run Ray could not bring back: the worker died on every attempt, or the
    task itself raised (spmlkit missing on a node, a result that could not be sent back). It
    has the shape of :func:`~spmlkit.experiments.sweep.execute_run`'s failed records, so the
    sweep goes on, the report ignores it and ``--retry-failed`` runs it again."""
    from .store import git_commit, package_version

    text = str(exc)
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.OutOfMemoryError)):
        text = (f"the worker process running this run died {max_retries + 1} time(s) (killed, out of memory, or "
                f"its node lost); raise --max-retries or give runs more memory. Ray said: {text}")
    return {
        "run_id": run["run_id"], "sweep": run["sweep"], "dataset": run["dataset"], "method": run["method"],
        "observation": run["observation"], "seed": run["seed"], "lr": run["lr"], "batch_size": run["batch_size"],
        "hparams": run["hparams"], "config": run, "started_at": started, "spmlkit_version": package_version(),
        "git_commit": git_commit(), "status": "failed", "error": f"{type(exc).__name__}: {text}"[:_ERROR_CHARS],
        "history": [], "best_epoch": 0, "val_map": float("nan"), "test_map": float("nan"), "test_metrics": {},
        "test_ap": [], "class_names": [], "analysis": {}, "seconds": time.perf_counter() - t0,
        "finished_at": _now(),
    }


def run_on_ray(state: _SweepState, runs_dir: str, options: RayOptions) -> None:
    """Run the runs ``state`` hands out as Ray tasks until none is left; record each result.

    The loop mirrors ``_SweepState.run_in_pool``: claim while the cluster has room, submit,
    wait for any task, record it, repeat. On any exit by exception (Ctrl-C, SIGTERM, a bug)
    the tasks in flight are cancelled (their workers killed), results that had arrived are
    kept for ``give_up`` to record, and a Ray instance started here is shut down, so the
    sweep stops within seconds and the same command resumes. The runs folder is made absolute
    first: a worker does not start in the driver's working directory (:func:`_task` moves it).
    """
    ray = import_ray()
    started_ray = _connect(ray, options)
    try:
        _drive(ray, state, str(Path(runs_dir).resolve()), options)
    finally:
        if started_ray:
            ray.shutdown()


def _drive(ray: ModuleType, state: _SweepState, runs_dir: str, options: RayOptions) -> None:
    """The submit / wait / record loop of :func:`run_on_ray`."""
    remote = ray.remote(_task)
    placement = _Placement(ray, options)
    threads, cwd = os.environ.get("SPMLKIT_RUN_THREADS", "1"), os.getcwd()
    in_flight: dict[Any, tuple[dict[str, Any], str, float]] = {}  # ObjectRef -> (run, started_at, t0)
    try:
        while True:
            while len(in_flight) < _capacity(ray, options) and (run := state.claim_next()) is not None:
                cpus, gpus = placement.resources(run, runs_dir)
                ref = remote.options(num_cpus=cpus, num_gpus=gpus, max_retries=options.max_retries,
                                     retry_exceptions=False, name=f"spmlkit-run-{run['run_id']}"
                                     ).remote(run, runs_dir, threads, cwd)
                in_flight[ref] = (run, _now(), time.perf_counter())
            state.heartbeat.start()
            if not in_flight:
                break
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=_WAIT_SECONDS)
            for ref in done:
                run, started, t0 = in_flight[ref]
                try:
                    rec = ray.get(ref)
                except ray.exceptions.RayError as exc:  # retries used up, or the task raised
                    rec = _lost_record(ray, run, exc, started, t0, options.max_retries)
                state.record(rec)
                del in_flight[ref]  # only now: an interrupt before this line still finds it below
    except BaseException:
        _stop_tasks(ray, state, in_flight)
        raise


def _stop_tasks(ray: ModuleType, state: _SweepState, in_flight: dict[Any, tuple[dict[str, Any], str, float]]) -> None:
    """Keep results that arrived but were not recorded, cancel the rest (force: a run in
    progress is given up, as stopping a sweep means). Never raises: it runs while another
    exception is on its way out, and that one is what the user must see."""
    for ref, (run, _, _) in in_flight.items():
        try:
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                state._unrecorded[run["run_id"]] = ray.get(ref, timeout=0)  # give_up() stores it
            else:
                ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - a failed task or a failed cancel: the run is simply not recorded
            continue
