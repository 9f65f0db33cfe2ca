"""`spmlkit benchmark --suite mulan` on the machine it was sized for: one worker per usable CPU, one
torch thread per run, and every MULAN set read once per worker (docs/leaderboard.md, "Cost")."""

from __future__ import annotations

import os

import pytest
from fixtures.mulan import TINY, tiny_mulan_fixture  # noqa: F401 - the fixture "tiny_mulan"

from spmlkit.data import mulan, registry
from spmlkit.experiments.suites import suite_datasets
from spmlkit.experiments.sweep import processes
from spmlkit.experiments.sweep.cores import THREADS_ENV, default_jobs, threads_per_run


_WAITED: list[bool] = []  # per process: a worker waits for the other one at its first run only


def _train_in_a_worker(config, **kwargs):
    """Stands in for training in a sweep worker: leaves this process's id and torch threads in
    ``$MARKS/<pid>``, waits at its first run until two processes have (so that two workers are
    shown to train at once), and returns a result without training."""
    import time
    from pathlib import Path

    import torch

    from spmlkit.training import RunResult

    marks = Path(os.environ["MARKS"])
    (marks / str(os.getpid())).write_text(str(torch.get_num_threads()))
    deadline = time.monotonic() + 30  # a safety net: the other worker, forked already, marks at once
    while not _WAITED and len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    _WAITED.append(True)
    return RunResult(config, 1, 0.5, 0.5, [{"epoch": 1, "train_loss": 0.5, "val_map": 0.5}], test_ap=[0.5],
                     class_names=["a"])


def test_the_mulan_suite_starts_one_single_threaded_worker_per_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from spmlkit.cli import main
    from spmlkit.experiments.sweep import execute

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # 2 usable CPUs
    monkeypatch.delenv(THREADS_ENV, raising=False)
    names = suite_datasets("mulan")
    assert len(names) == 12
    assert default_jobs(names) == 2 and threads_per_run(2, names) == 1
    aliases = [f"mulan/{n}" for n in names]
    assert default_jobs(aliases) == 2 and threads_per_run(2, aliases) == 1
    # and the suite's command starts them: its runs train in two worker processes at once, each
    # with one torch thread (training itself is replaced, and so is the workers' first read of
    # the sets, which would fetch them: only who trains, and how, is looked at)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("MARKS", str(marks))
    monkeypatch.setattr(execute, "train", _train_in_a_worker)
    monkeypatch.setattr(processes, "_warm_up", lambda datasets: None)
    assert main(["benchmark", "--suite", "mulan", "--methods", "an", "--seeds", "0", "--lrs", "0.01",
                 "--out", str(tmp_path / "board"), "--quiet"]) == 0
    workers = {int(p.name): int(p.read_text()) for p in marks.iterdir()}
    assert os.getpid() not in workers and list(workers.values()) == [1, 1], \
        f"not one single-threaded worker per CPU: {workers} (pid: torch threads; the sweep is {os.getpid()})"


@pytest.fixture
def fresh_cache():
    registry._load_named.cache_clear()
    yield
    registry._load_named.cache_clear()


@pytest.mark.usefixtures("fresh_cache")
def test_a_worker_reads_each_mulan_set_once(tiny_mulan, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_mulan.install("emotions", "flags")  # two small sets pinned as MULAN's
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
    assert registry.load_features("flags").Y_train.shape == (TINY.train_rows, len(TINY.labels))
    assert reads == ["emotions", "flags"]
    assert not first.X_train.flags.writeable
