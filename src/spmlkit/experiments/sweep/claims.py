"""The bookkeeping of one sweep in its results store: claims (leases), their heartbeat, records.

Several sweeps may work on one store at once: each claims a run before starting it (a lease,
renewed while the run is in progress; :mod:`spmlkit.experiments.store`), so together they run
each grid point once. Runs are claimed only when a backend has room for them, so that a
concurrent sweep gets the runs this one has not started yet. Only the process running the
sweep writes the store, whatever backend trains the runs.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..store import CLAIMED, FINISHED, ResultsStore
from .execute import run_config
from .spec import group_key

__all__ = ["SweepState", "Heartbeat", "LEASE_SECONDS", "RENEW_SECONDS"]

#: how long a claimed run stays ours without renewal, and how often the sweep renews it
LEASE_SECONDS = 120.0
RENEW_SECONDS = 30.0


class SweepState:
    """What one ``run_sweep`` call has claimed and recorded.

    Runs are claimed a task at a time (:meth:`claim_group`); each run of a task still has its
    own lease and its own record. A backend's finished records are first *kept*
    (:meth:`keep`), then written (:meth:`record_many`), so that a sweep interrupted between
    the two still stores them (:meth:`give_up`).
    """

    def __init__(self, store: ResultsStore, owner: str, candidates: list[dict[str, Any]], max_runs: int | None,
                 redo_failed_until: str | None, lease_seconds: float, heartbeat: Heartbeat,
                 on_result: Callable[[dict[str, Any]], None] | None,
                 on_skip: Callable[[dict[str, Any], str], None] | None) -> None:
        self.store, self.owner, self.heartbeat = store, owner, heartbeat
        self._queue = deque(candidates)
        self._budget = max_runs
        self._redo_failed_until, self._lease_seconds = redo_failed_until, lease_seconds
        self._on_result, self._on_skip = on_result, on_skip
        self.ran = self.failed = self.found_finished = self.held = 0
        self._unrecorded: dict[str, dict[str, Any]] = {}  # finished by a backend, not yet in the store
        self._stackable: dict[str, bool] = {}  # group key -> whether such runs can train as one group

    @property
    def candidates_left(self) -> int:
        """Runs of the grid not looked at yet."""
        return len(self._queue)

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
        """The next runs this sweep may start as one task (leases taken), at most ``size``;
        [] when nothing is left. A task is the next candidate and candidates right after it
        that differ from it only in seed and lr, claimed in one store transaction. Such a block
        of runs longer than ``size`` is cut into near-equal tasks (9 runs at most 8 a task:
        5 + 4, not 8 + 1), since a task's time grows far slower than its runs: a task of one
        run costs nearly as much as one of five, and it would be the last to finish. A run
        that cannot train in a group (an image run, ...) comes alone. Runs finished or leased
        by another sweep meanwhile are skipped and reported to ``on_skip``."""
        while True:
            room = size if self._budget is None else min(size, self._budget - self.ran)
            if room <= 0 or not self._queue:
                return []
            first = self._queue.popleft()
            group, key = [first], group_key(first)
            if room > 1 and self._can_stack(key, first):
                block = 1 + self._same_key_ahead(key, 4 * size)
                take = min(room, size if block > 4 * size else math.ceil(block / math.ceil(block / size)))
                group += [self._queue.popleft() for _ in range(take - 1)]
            outcomes = self.store.claim_many([run["run_id"] for run in group], self.owner,
                                             duration=self._lease_seconds, redo_failed_until=self._redo_failed_until)
            claimed = [run for run, outcome in zip(group, outcomes) if self._tally(run, outcome)]
            if claimed:
                return claimed

    def _same_key_ahead(self, key: str, most: int) -> int:
        """How many of the next candidates (``most`` looked at, at most: a claim stays cheap in a
        grid of thousands of seeds) have group key ``key``, counted until the first that has not."""
        count = 0
        for run in itertools.islice(self._queue, most + 1):
            if group_key(run) != key:
                break
            count += 1
        return count

    def _can_stack(self, key: str, run: dict[str, Any]) -> bool:
        """Whether the runs of group ``key`` (``run`` is one of them) can train as one group;
        asked once per group key, since they differ only in seed and lr."""
        if key not in self._stackable:
            from ...training.plan import batch_key

            try:
                self._stackable[key] = batch_key(run_config(run)) is not None
            except Exception:  # noqa: BLE001 - the run then fails on its own, with its error
                self._stackable[key] = False
        return self._stackable[key]

    def keep(self, records: list[dict[str, Any]]) -> None:
        """Hold a task's records until they are written: a backend hands them here the moment
        they arrive, so an interrupt at any later point still stores them (:meth:`give_up`)."""
        self._unrecorded.update((rec["run_id"], rec) for rec in records)

    def record_many(self, records: list[dict[str, Any]]) -> None:
        """Store a task's records and drop their leases in one transaction (one record and one
        lease per run; one write instead of one per run)."""
        self.keep(records)
        for rec in records:
            rec["owner"] = self.owner
        self.store.add_many(records, release_lease=self.owner)
        for rec in records:
            del self._unrecorded[rec["run_id"]]
            self.failed += rec["status"] == "failed"
            if self._on_result:
                self._on_result(rec)

    def give_up(self) -> None:
        """After the sweep ends, normally or not: store runs that finished but were not
        recorded yet (an interrupt between a backend's result and its write), then drop every
        lease still held, so the runs left unfinished are free for the next sweep at once."""
        self.heartbeat.stop()
        try:
            for rec in list(self._unrecorded.values()):
                rec["owner"] = self.owner
                self.store.add(rec, release_lease=self.owner)
                self._unrecorded.pop(rec["run_id"], None)
        finally:
            self.store.release(self.owner)


class Heartbeat:
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
        """Start beating (once; later calls do nothing). The sweep calls it after its first
        tasks are submitted: a backend that forks its workers has forked them by then, so no
        worker is forked while this thread may hold a lock."""
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
