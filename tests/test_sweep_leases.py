"""Leases in the results store: a run is claimed before it starts, so sweeps sharing a store
split the grid; a lease expires, a dead owner's lease is taken over, the heartbeat keeps a
long run's lease alive, and an interrupted sweep releases what it held."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from spmlkit.experiments.store import CLAIMED, FINISHED, HELD, ResultsStore, new_owner_id
from spmlkit.experiments.sweep import SweepSpec, expand, run_sweep
from spmlkit.experiments.sweep import processes as local_backend
from spmlkit.experiments.sweep.execute import now

#: an owner on another host: never considered dead, its leases end only by expiry
OTHER = "other-host:1:cafe"


def _record(run_id: str, status: str = "ok", finished_at: str = "2026-01-01T00:00:00+00:00") -> dict[str, Any]:
    rec: dict[str, Any] = {"run_id": run_id, "status": status, "dataset": "yeast", "method": "an",
                           "observation": "single_positive", "seed": 0, "finished_at": finished_at}
    if status == "ok":
        rec.update(val_map=0.5, test_map=0.5)
    else:
        rec["error"] = "RuntimeError: boom"
    return rec


def _fake_run(run: dict[str, Any], runs_dir: str | None = None) -> dict[str, Any]:
    """A stand-in for execute_run: a valid record at once, no training."""
    return {**_record(run["run_id"]), "sweep": run["sweep"], "lr": run["lr"], "batch_size": run["batch_size"],
            "finished_at": now()}


def test_a_claim_is_exclusive_until_released_or_recorded(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "s.db")
    me = new_owner_id()
    assert store.claim("r1", me, duration=60) == CLAIMED
    assert store.claim("r1", OTHER, duration=60) == HELD
    assert [lease["owner"] for lease in store.leases()] == [me]
    assert store.release(me, "r1") == 1
    assert store.claim("r1", OTHER, duration=60) == CLAIMED
    store.add(_record("r1"), release_lease=OTHER)  # the record and the lease's end: one transaction
    assert store.leases() == []
    assert store.claim("r1", me, duration=60) == FINISHED


def test_release_and_record_only_touch_the_owners_leases(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "s.db")
    me = new_owner_id()
    store.claim("a", me, duration=60)
    store.claim("b", me, duration=60)
    store.claim("c", OTHER, duration=60)
    store.add(_record("c"), release_lease=me)  # not my lease: it stays
    assert {lease["run_id"] for lease in store.leases()} == {"a", "b", "c"}
    assert store.release(me) == 2
    assert [lease["run_id"] for lease in store.leases()] == ["c"]


class _Clock:
    """The store's clock (``time.time``), moved by hand: a lease expires when the test says so,
    not when a busy machine happens to stall the test for longer than a lease."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    from spmlkit.experiments import store as store_module

    fake = _Clock()
    monkeypatch.setattr(store_module, "time", fake)
    return fake


def test_an_expired_lease_may_be_taken_over(tmp_path: Path, clock: _Clock) -> None:
    store = ResultsStore(tmp_path / "s.db")
    assert store.claim("r1", OTHER, duration=60) == CLAIMED
    clock.advance(59.9)
    assert store.claim("r1", new_owner_id(), duration=60) == HELD
    clock.advance(0.2)
    assert store.claim("r1", new_owner_id(), duration=60) == CLAIMED


def test_renewal_keeps_a_lease_alive(tmp_path: Path, clock: _Clock) -> None:
    store = ResultsStore(tmp_path / "s.db")
    assert store.claim("r1", OTHER, duration=60) == CLAIMED
    for _ in range(3):
        clock.advance(40)
        assert store.renew(OTHER, duration=60) == 1
    assert store.claim("r1", new_owner_id(), duration=60) == HELD  # 120 s after the claim, renewed 20 s ago
    clock.advance(61)
    assert store.claim("r1", new_owner_id(), duration=60) == CLAIMED  # and without renewal it ends


def test_the_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    """A killed sweep's runs are free for the next sweep without waiting for the expiry."""
    store = ResultsStore(tmp_path / "s.db")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process
    dead_owner = f"{socket.gethostname()}:{gone.pid}:0000"
    assert store.claim("r1", dead_owner, duration=3600) == CLAIMED
    assert store.claim("r1", new_owner_id(), duration=60) == CLAIMED
    alive_owner = f"{socket.gethostname()}:{os.getpid()}:1111"  # this process: alive
    assert store.claim("r2", alive_owner, duration=3600) == CLAIMED
    assert store.claim("r2", new_owner_id(), duration=60) == HELD


def test_failures_count_as_finished_unless_recorded_before_a_retry_started(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "s.db")
    store.add(_record("old", "failed", finished_at="2026-01-01T00:00:00+00:00"))
    store.add(_record("new", "failed", finished_at="2026-01-01T00:00:05+00:00"))
    me = new_owner_id()
    assert store.claim("old", me, duration=60) == FINISHED  # no retry: a failure is final
    retry_since = "2026-01-01T00:00:02+00:00"
    assert store.claim("old", me, duration=60, redo_failed_until=retry_since) == CLAIMED
    # recorded after the retrying sweep started: a concurrent retry already did it again
    assert store.claim("new", me, duration=60, redo_failed_until=retry_since) == FINISHED
    with pytest.raises(ValueError, match="lease duration must be positive"):
        store.claim("x", me, duration=0)


def test_the_heartbeat_renews_the_lease_of_a_run_longer_than_the_lease(tmp_path: Path, monkeypatch,
                                                                       clock: _Clock) -> None:
    """The run lasts four times its 60 s lease on the store's clock; each time the clock moves on
    by 45 s, the run waits for the heartbeat's next renewal (an event, not a sleep), and another
    sweep's claim then finds the lease held."""
    import threading

    spec = SweepSpec(name="hb", seeds=[0], store=str(tmp_path / "hb.db"))
    store = ResultsStore(spec.store)
    outcomes: list[str] = []
    renewed = threading.Event()
    renew = ResultsStore.renew

    def watched_renew(self, owner, *, duration):
        count = renew(self, owner, duration=duration)
        renewed.set()
        return count

    def slow_run(run: dict[str, Any], runs_dir: str | None = None) -> dict[str, Any]:
        for _ in range(6):  # 270 s on the store's clock
            renewed.clear()
            clock.advance(45)
            # a renewal that read the clock before the advance still covers the claim below
            assert renewed.wait(timeout=60), "the heartbeat did not renew the lease"
            outcomes.append(store.claim(run["run_id"], OTHER, duration=60))
        return _fake_run(run)

    monkeypatch.setattr(ResultsStore, "renew", watched_renew)
    monkeypatch.setattr(local_backend, "execute_run", slow_run)
    result = run_sweep(spec, lease_seconds=60, renew_seconds=0.01)
    assert result.ran == 1 and outcomes == [HELD] * 6
    assert store.leases() == []
    (rec,) = store.records()
    assert rec["owner"] == result.owner


def test_an_interrupted_sweep_keeps_its_records_releases_its_leases_and_resumes(tmp_path: Path, monkeypatch) -> None:
    spec = SweepSpec(name="ki", seeds=[0, 1, 2, 3], store=str(tmp_path / "ki.db"))
    store = ResultsStore(spec.store)
    calls = 0

    def interrupted_on_the_third(run: dict[str, Any], runs_dir: str | None = None) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return _fake_run(run)

    monkeypatch.setattr(local_backend, "execute_run", interrupted_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec)
    assert len(store) == 2 and store.leases() == []
    monkeypatch.setattr(local_backend, "execute_run", _fake_run)
    resumed = run_sweep(spec)
    assert (resumed.ran, resumed.skipped, resumed.held) == (2, 2, 0)
    assert sorted(r["run_id"] for r in store.records()) == sorted(r["run_id"] for r in expand(spec))


def test_runs_held_by_another_sweep_are_skipped_and_counted(tmp_path: Path, monkeypatch) -> None:
    spec = SweepSpec(name="held", seeds=[0, 1, 2], store=str(tmp_path / "h.db"))
    store = ResultsStore(spec.store)
    first = expand(spec)[0]["run_id"]
    store.claim(first, OTHER, duration=60)
    skipped: list[tuple[str, str]] = []
    monkeypatch.setattr(local_backend, "execute_run", _fake_run)
    result = run_sweep(spec, on_skip=lambda run, why: skipped.append((run["run_id"], why)))
    assert (result.ran, result.skipped, result.held) == (2, 0, 1)
    assert skipped == [(first, HELD)]
    assert [lease["owner"] for lease in store.leases()] == [OTHER]
    with pytest.raises(ValueError, match="renewal interval"):
        run_sweep(spec, lease_seconds=10, renew_seconds=10)
