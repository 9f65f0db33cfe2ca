"""`spmlkit benchmark --suite mulan` on the machine it was sized for: one worker per usable CPU, one
torch thread per run, and every MULAN set read once per worker (docs/leaderboard.md, "Cost")."""

from __future__ import annotations

import os

import pytest
from fixtures.mulan import data_home_with, needs_mulan

from spmlkit.data import mulan, registry
from spmlkit.experiments.suites import suite_datasets
from spmlkit.experiments.sweep import processes
from spmlkit.experiments.sweep.cores import THREADS_ENV, default_jobs, threads_per_run


def test_the_mulan_suite_starts_one_single_threaded_worker_per_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # 2 usable CPUs
    monkeypatch.delenv(THREADS_ENV, raising=False)
    names = suite_datasets("mulan")
    assert len(names) == 12
    assert default_jobs(names) == 2 and threads_per_run(2, names) == 1
    aliases = [f"mulan/{n}" for n in names]
    assert default_jobs(aliases) == 2 and threads_per_run(2, aliases) == 1


@pytest.fixture
def fresh_cache():
    registry._load_named.cache_clear()
    yield
    registry._load_named.cache_clear()


@needs_mulan
@pytest.mark.usefixtures("fresh_cache")
def test_a_worker_reads_each_mulan_set_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPMLKIT_DATA", str(data_home_with(tmp_path, "emotions", "flags")))
    reads: list[str] = []
    real = mulan.load_mulan

    def counted(name: str):
        reads.append(name)
        return real(name)

    monkeypatch.setattr(mulan, "load_mulan", counted)
    processes._warm_up(["emotions", "flags"])  # what a sweep worker does before its first task
    assert reads == ["emotions", "flags"]
    first = registry.load_features("emotions")
    for _ in range(3):  # every later run of the worker gets the same arrays, read-only
        assert registry.load_features("emotions") is first
    assert registry.load_features("flags").Y_train.shape == (129, 7)
    assert reads == ["emotions", "flags"]
    assert not first.X_train.flags.writeable
