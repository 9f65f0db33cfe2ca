"""``run_sweep``: every unfinished run of a grid, claimed, trained by a backend, recorded.

This module owns the loop that ties the parts together: the grid
(:mod:`~spmlkit.experiments.sweep.spec`), the claims and records in the store
(:mod:`~spmlkit.experiments.sweep.claims`) and an executor that trains
(:mod:`~spmlkit.experiments.sweep.executor`, chosen by name in
:mod:`~spmlkit.experiments.sweep.backends`). It also turns SIGTERM into the same clean stop as
Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import user_input
from ...file_names import file_stem
from ..store import ResultsStore, new_owner_id
from .backends import make_executor
from .claims import LEASE_SECONDS, RENEW_SECONDS, Heartbeat, SweepState
from .execute import now, run_config, settings_for_other_kinds
from .spec import SweepSpec, grid_size, in_grid, iter_runs, settings_to_check

if TYPE_CHECKING:
    from .executor import Executor
    from .ray_backend import RayOptions

__all__ = ["run_sweep", "SweepResult", "SweepTerminated", "finished_ids", "sigterm_stops_sweep"]


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
    #: runs of the grid recorded as failed before this call and not run again (no ``retry_failed``):
    #: counted among ``skipped``
    failed_before: int = 0


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

    ``backend``: ``"process"`` runs here (``jobs`` worker processes; None or 1: in this
    process, one run at a time; :func:`~spmlkit.experiments.sweep.cores.default_jobs` is what
    the CLI passes when ``--jobs`` is left out); ``"ray"`` runs each run as a Ray task on this
    machine or a cluster (:mod:`spmlkit.experiments.sweep.ray_backend`, placed by
    ``ray_options``; ``jobs``, when given, caps the runs in flight). Each run gets
    :func:`~spmlkit.experiments.sweep.cores.threads_per_run` torch threads. This process stays
    the only writer of the store either way, so everything above holds on both.
    """
    with user_input():  # a bad option, a missing extra: one line, before any run is claimed
        executor = make_executor(backend, jobs, ray_options, spec.datasets)
    if not 0 < renew_seconds < lease_seconds:
        raise ValueError(f"the lease renewal interval ({renew_seconds} s) must be positive and shorter than the "
                         f"lease ({lease_seconds} s); by default leases last {LEASE_SECONDS:g} s, renewed every "
                         f"{RENEW_SECONDS:g} s")
    store_file = Path(store_path or spec.store)
    runs_dir = str(store_file.parent / f"{file_stem(spec.name)}-runs")  # a name of the user's stays in that folder
    # an executor that starts in the background overlaps its start-up with the checks below
    # (docs/architecture.md, "The sweep: claims, executors, cores")
    if executor.starts_in_background:
        executor.start(runs_dir)
    try:
        _check_settings(spec)  # before the store is opened: a refused sweep leaves no file behind
        store = ResultsStore(store_file)
        store.check()  # a damaged store is one line now, not after hours of runs it cannot record
        started_at = now()
        total = grid_size(spec)
        finished = finished_ids(spec, store, retry_failed)
        already = len(finished)
        failed_before = 0 if retry_failed else len(finished - finished_ids(spec, store, True))
        if on_start:
            on_start(total, already)
        if not executor.starts_in_background:
            executor.start(runs_dir)
        owner = new_owner_id()
        candidates = (run for run in iter_runs(spec) if run["run_id"] not in finished)
        sweep = SweepState(store, owner, candidates, max_runs, started_at if retry_failed else None, lease_seconds,
                           Heartbeat(store, owner, lease_seconds, renew_seconds), on_result, on_skip,
                           count=total - already, alone_reason=executor.alone_reason)
    except BaseException:
        executor.stop(lambda records: None)  # nothing was submitted: there is nothing to keep
        executor.close()
        raise
    try:
        _drive(sweep, executor)
    finally:
        sweep.give_up()
    return SweepResult(total=total, skipped=already + sweep.found_finished, ran=sweep.ran, failed=sweep.failed,
                       store=Path(store.path), held=sweep.held, owner=owner, failed_before=failed_before)


def _check_settings(spec: SweepSpec) -> None:
    """Every value of the grid checked as a run's settings (a bad setting fails here, before
    any run, not once per run), in as many checks as the axes have values
    (:func:`~spmlkit.experiments.sweep.spec.settings_to_check`), whatever the grid's size."""
    with user_input():
        settings_for_other_kinds(spec)  # a setting none of the data sets uses
        for run in settings_to_check(spec):
            run_config(run)  # its labels too: a mistake that would fail every run of a grid is said here, once


def finished_ids(spec: SweepSpec, store: ResultsStore, retry_failed: bool) -> set[str]:
    """The ids of the grid's runs that ``store`` holds as finished (``ok``; ``failed`` too
    unless they are to be retried): read from the store's finished records, so it costs the
    store's size, never the grid's (docs/architecture.md, "Grids of any size")."""
    statuses = ("ok",) if retry_failed else ("ok", "failed")
    return {run_id for run_id, config in store.configs(status=statuses) if in_grid(spec, config)}


def _drive(sweep: SweepState, executor: Executor) -> None:
    """Claim while the executor has room, submit, wait for finished tasks, record, repeat.

    Freed workers get their next task before the finished results are written (a store write
    takes milliseconds; a worker should not wait for it). On any exit by exception the
    executor stops at once and hands over what had finished, which ``give_up`` records."""
    try:
        size = executor.task_size(sweep.candidates_left)
        finished: list[list[dict[str, Any]]] = []
        submitted = False
        while True:
            while executor.room() > 0 and (group := sweep.claim_group(size)):
                executor.submit(group)
                submitted = True
            sweep.heartbeat.start()
            for records in finished:
                sweep.record_many(records)
            finished = []
            if not executor.busy():
                break

            def hold(records: list[dict[str, Any]]) -> None:
                sweep.keep(records)
                finished.append(records)

            executor.wait(hold)
        if not submitted:  # nothing to run: workers still starting up are ended, not waited for
            executor.stop(sweep.keep)
    except BaseException:
        executor.stop(sweep.keep)
        raise
    finally:
        executor.close()
