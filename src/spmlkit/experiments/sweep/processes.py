"""The local backend: a sweep's runs in this process (``jobs=1``) or in worker processes.

With ``jobs > 1`` a worker's task is a group of feature runs that differ only in seed and lr,
trained as one (:func:`~spmlkit.experiments.sweep.execute.execute_runs`; each run with its own
record, equal to its solo run's), or a single run that cannot be grouped.

Workers never outlive the sweep: killed even with SIGKILL, its workers exit too
(:func:`_worker_init`). Workers are forked, which is fast because they inherit everything the
sweep has imported, except from a process that has initialised CUDA: a forked child cannot
use CUDA then ("Cannot re-initialize CUDA in forked subprocess"), so such a sweep spawns
fresh workers (:func:`safe_start_method`).
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool

from ...allocator import keep_freed_memory
from ...training.device import num_threads
from .execute import execute_run, execute_runs
from .executor import Executor, Keep, Record, Run

__all__ = ["InProcess", "WorkerPool", "STACK_MAX", "safe_start_method"]

#: the most runs one worker trains as one group in one task
STACK_MAX = 16
#: how long a terminated worker gets to exit before it is killed
_WORKER_EXIT_SECONDS = 5.0
#: how often a worker checks that the sweep that started it still exists
_PARENT_POLL_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class InProcess(Executor):
    """``jobs=1``: every run here, one after the other, each alone (no worker to start)."""

    alone_reason = "--jobs 1 trains one run at a time in the sweep's own process"

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._runs_dir = "runs"
        self._task: list[Run] | None = None

    def start(self, runs_dir: str) -> None:
        self._runs_dir = runs_dir

    def room(self) -> int:
        return 0 if self._task is not None else 1

    def submit(self, runs: list[Run]) -> None:
        self._task = runs

    def busy(self) -> bool:
        return self._task is not None

    def wait(self, keep: Keep) -> None:
        """Train the submitted task now; an interrupt inside it loses only that task."""
        runs, self._task = self._task or [], None
        with num_threads(self.threads):
            keep([execute_run(run, self._runs_dir) for run in runs])

    def stop(self, keep: Keep) -> None:
        self._task = None


class WorkerPool(Executor):
    """``jobs > 1``: one task per worker process, at most ``jobs`` at a time, each run with
    ``threads`` torch threads. Tasks are groups of runs (:meth:`task_size`), small enough that
    every worker gets about two, so that workers finish together and a sweep stopped midway
    keeps most of what was done (a task is recorded when all its runs are).

    ``task`` is what a worker calls with ``(runs, runs_dir, threads)``; it must be importable by
    name in a spawned worker (:func:`~spmlkit.experiments.sweep.execute.execute_runs`)."""

    starts_in_background = True
    alone_reason = "few runs were left for the workers (two tasks each at most), so each task got one run"

    def __init__(self, jobs: int, threads: int,
                 task: Callable[[list[Run], str, int], list[Record]] = execute_runs,
                 datasets: Sequence[str] = ()) -> None:
        self.jobs, self.threads, self.task = jobs, threads, task
        #: the sweep's datasets, which each worker reads while it starts (:func:`_warm_up`)
        self.datasets = tuple(datasets)
        self._runs_dir = "runs"
        self._pool: ProcessPoolExecutor | None = None
        #: how the workers were started (``fork`` or ``spawn``, :func:`safe_start_method`); None before start
        self.start_method: str | None = None
        self._in_flight: dict[Future[list[Record]], list[Run]] = {}

    def start(self, runs_dir: str) -> None:
        self._runs_dir = runs_dir
        self.start_method = safe_start_method()
        context = multiprocessing.get_context(self.start_method)
        self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=context, initializer=_worker_start,
                                         initargs=(os.getpid(), self.datasets))
        # a pool that forks starts all its workers at its first task: this one (a no-op) starts
        # them now, so that their start-up (:func:`_warm_up`) overlaps the sweep's own checks
        self._pool.submit(os.getpid)

    def task_size(self, candidates: int) -> int:
        return max(1, min(STACK_MAX, math.ceil(candidates / (2 * self.jobs))))

    def room(self) -> int:
        return self.jobs - len(self._in_flight)

    def submit(self, runs: list[Run]) -> None:
        assert self._pool is not None, "start() first"
        self._in_flight[self._pool.submit(self.task, runs, self._runs_dir, self.threads)] = runs

    def busy(self) -> bool:
        return bool(self._in_flight)

    def wait(self, keep: Keep) -> None:
        """Hand back every finished task. A worker that died (killed, out of memory) breaks the
        pool: that is one line for the user, after the other finished tasks are kept."""
        done, _ = wait_futures(self._in_flight, return_when=FIRST_COMPLETED)
        broken: tuple[list[Run], BaseException] | None = None
        for fut in done:
            exc = fut.exception()
            if isinstance(exc, BrokenProcessPool):
                broken = broken or (self._in_flight[fut], exc)
                continue
            keep(fut.result())  # any other exception is ours: a bug, with its traceback
            del self._in_flight[fut]
        if broken is not None:
            runs, exc = broken
            run, more = runs[0], f" and {len(runs) - 1} run(s) trained with it" if len(runs) > 1 else ""
            raise RuntimeError(
                f"a worker process died while running {run['run_id']} ({run['method']}, seed {run['seed']}){more}: "
                "killed, or out of memory? Finished runs are recorded; run the sweep again to resume, with fewer "
                "--jobs if memory is short") from exc

    def stop(self, keep: Keep) -> None:
        """Cancel what has not started and end the workers now: a run in progress is lost (the
        next sweep runs it again), which is what stopping a sweep means. Tasks that finished
        before the stop are still handed to ``keep``."""
        if self._pool is not None:
            _stop_workers(self._pool)
        for fut, _ in list(self._in_flight.items()):
            try:
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    keep(fut.result())
            except Exception:  # noqa: BLE001 - a broken task: its runs are simply not recorded
                continue
        self._in_flight.clear()
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def safe_start_method() -> str:
    """``fork`` where it is safe and available, else ``spawn``.

    A fork starts a worker in milliseconds with the sweep's imports (torch included) already
    loaded; a spawned worker imports them again (seconds). But a process that has initialised
    CUDA cannot be forked usefully: the child's first CUDA call fails. Asked when the pool
    starts, since the sweep's own process may have initialised CUDA since it was started.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    import torch

    return "spawn" if torch.cuda.is_initialized() else "fork"


def _worker_start(sweep_pid: int, datasets: Sequence[str]) -> None:
    """Pool initializer: tie the worker to the sweep (:func:`_worker_init`), keep freed memory
    (:func:`~spmlkit.allocator.keep_freed_memory`: a forked worker inherits the sweep's setting,
    a spawned one does not), then :func:`_warm_up`."""
    _worker_init(sweep_pid)
    keep_freed_memory()
    _warm_up(datasets)


def _warm_up(datasets: Sequence[str]) -> None:
    """Do, once per worker and before its first task, the start-up work that every task would
    otherwise pay in the worker's first one.

    * ``torch._dynamo``: torch.optim's optimisers import it on their first call (their methods
      are wrapped by ``torch._disable_dynamo``, which imports it lazily), about 1.6 s of CPU
      time here. The sweep itself never builds an optimiser, so it does not import it before
      forking; each worker does, while the sweep checks its grid (docs/architecture.md, "The
      sweep: claims, executors, cores").
    * the named feature datasets of the sweep (Yeast), which are read once per process: read
      here, they are in memory when the first task plans its runs. A dataset that cannot be
      read is left alone: the run that needs it reports the error as its own.
    """
    import torch._dynamo  # noqa: F401  (imported for its side effect: loaded once, here)

    from ...data.registry import FEATURE_DATASETS, load_features

    for name in datasets:
        if name in FEATURE_DATASETS:
            try:
                load_features(name)
            except Exception:  # noqa: BLE001 - the run that needs it reports it, with its record
                continue


def _worker_init(sweep_pid: int, death_signal: bool = True) -> None:
    """Pool initializer: a worker must never outlive the sweep that started it.

    A worker orphaned by a killed sweep would wait for work forever, holding its memory (about
    half a GB with torch loaded). Linux ends it through ``prctl(PR_SET_PDEATHSIG, SIGTERM)``
    the moment its parent dies; elsewhere (or if prctl is unavailable) a daemon thread exits
    the process when its parent changes. Ctrl-C is ignored here: it reaches the whole
    process group, and the sweep (main process) decides what to stop and terminates the
    workers itself; SIGTERM gets its default action back (a forked worker inherits the
    sweep's handler from :func:`~spmlkit.experiments.sweep.sigterm_stops_sweep`).
    ``death_signal=False`` leaves the fallback alone (the tests check it that way).
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
    """End the pool's workers now. ``shutdown`` alone would wait for the runs in progress to
    finish, minutes for an image run.

    The pool's manager thread reaps the workers too, concurrently: until it has finished, a
    worker it has reaped can still look alive to this thread (its exit status went to the other
    ``waitpid``), so this waits for that thread before returning."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # private, but stable since 3.3
    manager = getattr(pool, "_executor_manager_thread", None)
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
    if manager is not None:
        manager.join(_WORKER_EXIT_SECONDS)
