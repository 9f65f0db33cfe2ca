"""The bookkeeping of one sweep in its results store: claims (leases), their heartbeat, records.

Several sweeps may work on one store at once: each claims a run before starting it (a lease,
renewed while the run is in progress; :mod:`spmlkit.experiments.store`), so together they run
each grid point once. Runs are claimed only when a backend has room for them, so that a
concurrent sweep gets the runs this one has not started yet. Only the process running the
sweep writes the store, whatever backend trains the runs.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..store import CLAIMED, FINISHED, ResultsStore, StoreError
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

    def __init__(self, store: ResultsStore, owner: str, candidates: Iterable[dict[str, Any]], max_runs: int | None,
                 redo_failed_until: str | None, lease_seconds: float, heartbeat: Heartbeat,
                 on_result: Callable[[dict[str, Any]], None] | None,
                 on_skip: Callable[[dict[str, Any], str], None] | None, *, count: int | None = None,
                 alone_reason: str = "its backend trains one run per task") -> None:
        self.store, self.owner, self.heartbeat = store, owner, heartbeat
        # the grid's runs come one at a time (a sweep never lists its grid); ``_ahead`` holds the
        # few looked at before they are taken (docs/architecture.md, "Grids of any size")
        self._candidates: Iterator[dict[str, Any]] = iter(candidates)
        self._ahead: deque[dict[str, Any]] = deque()
        self._left = count if count is not None else len(candidates)  # type: ignore[arg-type]
        self._budget = max_runs
        self._redo_failed_until, self._lease_seconds = redo_failed_until, lease_seconds
        self._on_result, self._on_skip = on_result, on_skip
        self._alone_reason = alone_reason
        self.ran = self.failed = self.found_finished = self.held = 0
        self._unrecorded: dict[str, dict[str, Any]] = {}  # finished by a backend, not yet in the store
        self._unbatchable: dict[str, str | None] = {}  # group key -> why such runs cannot train as a group
        self._why_alone: dict[str, str] = {}  # run id -> why it was claimed as a task of its own

    @property
    def candidates_left(self) -> int:
        """Runs of the grid not looked at yet."""
        return self._left

    def _next(self) -> dict[str, Any] | None:
        """The next candidate, taken (None when the grid is done)."""
        run = self._ahead.popleft() if self._ahead else next(self._candidates, None)
        if run is not None:
            self._left -= 1
        return run

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
        that cannot train in a group (an image run, ...) comes alone, and so does a run with no
        partner left; why is kept for its record (:meth:`why_alone`). Runs finished or leased
        by another sweep meanwhile are skipped and reported to ``on_skip``."""
        while True:
            room = size if self._budget is None else min(size, self._budget - self.ran)
            if room <= 0:
                return []
            first = self._next()
            if first is None:
                return []
            group, key = [first], group_key(first)
            why = self._unbatchable_reason(key, first)
            if why is None and room > 1:
                block = 1 + self._same_key_ahead(key, 4 * size)
                take = min(room, size if block > 4 * size else math.ceil(block / math.ceil(block / size)))
                group += [self._next() for _ in range(take - 1)]  # type: ignore[misc]
            outcomes = self.store.claim_many([run["run_id"] for run in group], self.owner,
                                             duration=self._lease_seconds, redo_failed_until=self._redo_failed_until)
            claimed = [run for run, outcome in zip(group, outcomes) if self._tally(run, outcome)]
            if len(claimed) == 1:
                self._why_alone[claimed[0]["run_id"]] = self._alone_because(why, room, size, len(group))
            if claimed:
                return claimed

    def _alone_because(self, unbatchable: str | None, room: int, size: int, asked: int) -> str:
        """Why a run was claimed as a task of its own, in the words its record keeps."""
        if unbatchable is not None:
            return unbatchable
        if size <= 1:
            return self._alone_reason
        if room <= 1:
            return "--max-runs left room for one run only"
        if asked > 1:
            return f"the other {asked - 1} run(s) of its group were finished or held by another sweep"
        return "no unclaimed run of the grid next to it differs from it only in seed and lr"

    def why_alone(self, run_id: str) -> str | None:
        """Why the run ``run_id`` was claimed alone (None when it was claimed with others)."""
        return self._why_alone.get(run_id)

    def _same_key_ahead(self, key: str, most: int) -> int:
        """How many of the next candidates (``most`` looked at, at most: a claim stays cheap in a
        grid of thousands of seeds) have group key ``key``, counted until the first that has not."""
        count = 0
        while count <= most:
            if count == len(self._ahead):
                run = next(self._candidates, None)
                if run is None:
                    break
                self._ahead.append(run)
            if group_key(self._ahead[count]) != key:
                break
            count += 1
        return count

    def _unbatchable_reason(self, key: str, run: dict[str, Any]) -> str | None:
        """Why the runs of group ``key`` (``run`` is one of them) cannot train as one group,
        None when they can; asked once per group key, since they differ only in seed and lr.
        The sweep checked every value of its grid before it began, but not every combination:
        a combination refused here (a ``ValueError``, the user's setting) trains alone and is
        recorded with its own error. Anything else is a bug of ours and keeps its traceback."""
        if key not in self._unbatchable:
            from ...training.plan import unbatchable_reason

            try:
                config = run_config(run)
            except ValueError as exc:
                self._unbatchable[key] = f"its settings were refused ({str(exc)[:300]})"
            else:
                self._unbatchable[key] = unbatchable_reason(config)
        return self._unbatchable[key]

    def annotate(self, records: list[dict[str, Any]]) -> None:
        """Give each record of a run trained alone the reason it was claimed alone, where the
        backend that trained it did not know a reason of its own (a group that failed)."""
        for rec in records:
            rec.setdefault("group_size", 1)
            if rec["group_size"] == 1 and not rec.get("alone_reason"):
                rec["alone_reason"] = self._why_alone.get(rec["run_id"]) or self._alone_reason
            self._why_alone.pop(rec["run_id"], None)

    def keep(self, records: list[dict[str, Any]]) -> None:
        """Hold a task's records until they are written: a backend hands them here the moment
        they arrive, so an interrupt at any later point still stores them (:meth:`give_up`)."""
        self._unrecorded.update((rec["run_id"], rec) for rec in records)

    def record_many(self, records: list[dict[str, Any]]) -> None:
        """Store a task's records and drop their leases in one transaction (one record and one
        lease per run; one write instead of one per run)."""
        self.keep(records)
        self.annotate(records)
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
        lease still held, so the runs left unfinished are free for the next sweep at once.

        A store that fails meanwhile (a full disk) is one :class:`~spmlkit.experiments.store.StoreError`
        saying how many finished runs it could not take; their leases end with this process
        (a sweep on this host takes them over at once, elsewhere when they expire), so the next
        sweep runs them again and nothing recorded before is touched."""
        self.heartbeat.stop()
        unrecorded = list(self._unrecorded.values())
        self.annotate(unrecorded)
        failure: StoreError | None = None
        try:
            for rec in unrecorded:
                rec["owner"] = self.owner
                self.store.add(rec, release_lease=self.owner)
                self._unrecorded.pop(rec["run_id"], None)
        except StoreError as exc:
            failure = exc
        try:
            self.store.release(self.owner)
        except StoreError as exc:
            failure = failure or exc
        if failure is not None:
            lost = len(self._unrecorded)
            more = f"; {lost} finished run(s) could not be recorded and will run again" if lost else ""
            raise StoreError(f"{failure}{more}") from failure


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
            except (sqlite3.Error, StoreError) as exc:
                self.error = exc
