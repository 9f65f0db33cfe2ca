"""How a sweep uses the machine: workers and threads from the CPUs this process may use, tasks
cut so that many workers are all busy, and workers spawned (not forked) once CUDA is
initialised, with the same records either way (docs/architecture.md, "Many runs at once")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from spmlkit.cli import main
from spmlkit.experiments.store import ResultsStore, new_owner_id
from spmlkit.experiments.sweep import SweepSpec, expand, processes, run_sweep
from spmlkit.experiments.sweep.backends import make_executor
from spmlkit.experiments.sweep.claims import Heartbeat, SweepState
from spmlkit.cpus import usable_cpus
from spmlkit.experiments.sweep.cores import THREADS_ENV, default_jobs, threads_per_run

#: per-epoch timings: the only history entries that may differ between two executions
_TIMINGS = ("epoch_seconds", "train_seconds", "images_per_second")


@pytest.fixture
def sixteen_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process may use 16 CPUs (of a machine that has 64), whatever it runs on."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.delenv(THREADS_ENV, raising=False)


@pytest.mark.usefixtures("sixteen_cpus")
def test_workers_and_threads_come_from_the_usable_cpus() -> None:
    assert usable_cpus() == 16  # the affinity mask, not the machine's 64
    assert default_jobs(["yeast"]) == 16
    assert threads_per_run(16, ["yeast"]) == 1
    assert threads_per_run(2, ["yeast"]) == 1  # feature runs: one thread, however few workers
    # image runs share the CPUs out, one thread at least
    assert default_jobs(["yeast", "voc2012"]) == 1
    assert [threads_per_run(jobs, ["voc2012"]) for jobs in (1, 2, 3, 16, 40)] == [16, 8, 5, 1, 1]
    pool = make_executor("process", 16, None, ["yeast"])
    assert isinstance(pool, processes.WorkerPool) and (pool.jobs, pool.threads) == (16, 1)
    here = make_executor("process", None, None, ["voc2012"])
    assert isinstance(here, processes.InProcess) and here.threads == 16


def test_without_an_affinity_mask_every_cpu_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_affinity(pid: int) -> set[int]:
        raise OSError("not supported")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cpus() == 6
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    assert usable_cpus() == 6 and default_jobs(["yeast"]) == 6


@pytest.mark.usefixtures("sixteen_cpus")
def test_the_thread_variable_wins_and_a_bad_one_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path, capsys) -> None:
    monkeypatch.setenv(THREADS_ENV, "3")
    assert threads_per_run(16, ["yeast"]) == 3 and threads_per_run(1, ["voc2012"]) == 3
    monkeypatch.setenv(THREADS_ENV, "many")
    with pytest.raises(ValueError, match=f"{THREADS_ENV} must be a positive integer.*'many'"):
        threads_per_run(2)
    (tmp_path / "s.yaml").write_text("methods: [an]\nstore: s.db\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "must be a positive integer" in err and "Traceback" not in err
    assert not (tmp_path / "s.db").exists()  # refused before the store was opened


def test_omitted_jobs_are_sized_from_the_cpus_and_typed_jobs_are_kept(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path, capsys) -> None:
    from spmlkit.experiments.sweep import run as sweep_run

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    started: list[int | None] = []  # the jobs each sweep's executor was made with
    make = sweep_run.make_executor
    monkeypatch.setattr(sweep_run, "make_executor",
                        lambda backend, jobs=None, *rest: started.append(jobs) or make(backend, jobs, *rest))
    quick = ["--methods", "an", "--seeds", "0", "--lrs", "0.003", "--epochs", "1", "--subset", "200", "--quiet"]

    def said() -> str:  # the line wraps between whole words where the run folder's path is long
        return " ".join(capsys.readouterr().out.split())

    assert main(["benchmark", *quick, "--out", str(tmp_path / "auto")]) == 0
    assert ", 3 worker(s)" in said()
    assert main(["benchmark", *quick, "--jobs", "1", "--out", str(tmp_path / "typed")]) == 0
    assert ", 1 worker(s)" in said()
    (tmp_path / "s.yaml").write_text("methods: [an]\nsettings: {epochs: 1, subset: 200}\nstore: s.db\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 0
    assert ", 3 worker(s)" in said()
    assert started == [3, 1, 3]  # what the sweeps ran with, not only what they printed


def _task_sizes(spec: SweepSpec, size: int) -> list[int]:
    store = ResultsStore(spec.store)
    owner = new_owner_id()
    state = SweepState(store, owner, expand(spec), None, None, 60.0, Heartbeat(store, owner, 60.0, 30.0), None, None)
    sizes = []
    while group := state.claim_group(size):
        assert len({(r["method"], json.dumps(r["hparams"])) for r in group}) == 1  # one group key per task
        sizes.append(len(group))
    store.release(owner)
    return sizes


def test_tasks_split_a_group_evenly_so_many_workers_stay_busy(tmp_path: Path) -> None:
    """The Yeast benchmark has 26 methods x 9 runs (3 lrs x 3 seeds): on 2 workers each method is
    one task; on 16 workers two tasks of 5 and 4, not 8 and 1 (the 1 costing nearly as much)."""
    spec = SweepSpec(name="g", methods=["an", "em"], seeds=[0, 1, 2], lrs=[1e-3, 3e-3, 1e-2],
                     store=str(tmp_path / "g.db"))
    assert processes.WorkerPool(2, 1).task_size(234) == 16
    assert processes.WorkerPool(16, 1).task_size(234) == 8
    assert _task_sizes(spec, 16) == [9, 9]
    assert _task_sizes(spec, 8) == [5, 4, 5, 4]
    assert _task_sizes(spec, 4) == [3, 3, 3, 3, 3, 3]
    assert _task_sizes(spec, 1) == [1] * 18
    # a block of 19: 3 tasks of 7, 6 and 6, not 8, 8 and 3; beyond 4 x size runs (which a claim
    # does not look past, so a grid of thousands of seeds stays cheap), tasks of the most runs
    long = SweepSpec(name="l", seeds=list(range(19)), store=str(tmp_path / "l.db"))
    assert _task_sizes(long, 8) == [7, 6, 6]
    assert _task_sizes(long, 4) == [4, 4, 4, 4, 3]


def _numbers(store: Path) -> dict[str, str]:
    """Each run's results as JSON text (NaN equal to NaN), timings left out."""
    out = {}
    for rec in ResultsStore(store).records():
        history = [{k: v for k, v in epoch.items() if k not in _TIMINGS} for epoch in rec["history"]]
        out[rec["run_id"]] = json.dumps({k: rec[k] for k in ("status", "val_map", "test_map", "best_epoch", "test_ap",
                                                             "test_metrics")} | {"history": history}, sort_keys=True)
    return out


def test_workers_are_spawned_once_cuda_is_initialised_with_the_same_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU machine cannot initialise CUDA, so the test says it did; the sweep must then not
    fork (a forked child cannot use CUDA) and still record the same numbers."""
    spec = SweepSpec(name="f", methods=["an", "em"], seeds=[0, 1], lrs=[3e-3, 1e-2],
                     settings={"epochs": 2, "subset": 200, "device": "cpu"})
    methods: list[str | None] = []
    start = processes.WorkerPool.start

    def recording_start(self: processes.WorkerPool, runs_dir: str) -> None:
        start(self, runs_dir)
        methods.append(self.start_method)

    monkeypatch.setattr(processes.WorkerPool, "start", recording_start)
    forked = run_sweep(spec, jobs=2, store_path=tmp_path / "fork.db")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert processes.safe_start_method() == "spawn"
    spawned = run_sweep(spec, jobs=2, store_path=tmp_path / "spawn.db")
    assert methods == ["fork", "spawn"]
    assert (forked.ran, forked.failed) == (spawned.ran, spawned.failed) == (8, 0)
    fork_numbers, spawn_numbers = _numbers(tmp_path / "fork.db"), _numbers(tmp_path / "spawn.db")
    assert sorted(fork_numbers) == sorted(r["run_id"] for r in expand(spec))
    assert spawn_numbers == fork_numbers
    assert all(json.loads(text)["status"] == "ok" for text in spawn_numbers.values())


def _probe(runs: list[dict[str, Any]], runs_dir: str, threads: int) -> list[dict[str, Any]]:
    """A worker task that reports what it was given instead of training."""
    return [{"run_id": run["run_id"], "threads": threads, "runs_dir": runs_dir} for run in runs]


def test_a_worker_pool_hands_back_every_task_with_its_threads(tmp_path: Path) -> None:
    runs = expand(SweepSpec(name="p", seeds=[0, 1, 2], lrs=[1e-3, 1e-2]))
    pool = processes.WorkerPool(2, 3, task=_probe)
    pool.start(str(tmp_path))
    kept: list[dict[str, Any]] = []
    try:
        assert pool.room() == 2 and not pool.busy()
        for i in range(0, 6, 2):
            while pool.room() == 0:
                pool.wait(kept.extend)
            pool.submit(runs[i:i + 2])
        while pool.busy():
            pool.wait(kept.extend)
    finally:
        pool.close()
    assert sorted(r["run_id"] for r in kept) == sorted(r["run_id"] for r in runs)
    assert {(r["threads"], r["runs_dir"]) for r in kept} == {(3, str(tmp_path))}


def test_workers_start_before_the_grid_is_checked_and_a_refused_grid_stops_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' start-up (imports, the data) overlaps the sweep's checks of its grid; when
    a check refuses a setting, the workers it started are gone before the error reaches the user."""
    from spmlkit.errors import InputError
    from spmlkit.experiments.sweep import execute

    events: list[str] = []
    start, check = processes.WorkerPool.start, execute.run_config

    workers: list[Any] = []

    def recording_start(self: processes.WorkerPool, runs_dir: str) -> None:
        events.append("start")
        start(self, runs_dir)
        workers.extend(self._pool._processes.values())  # a forking pool has started them all

    def recording_check(run: dict[str, Any], runs_dir: str | None = None) -> Any:
        events.append("check")
        return check(run, runs_dir)

    monkeypatch.setattr(processes.WorkerPool, "start", recording_start)
    monkeypatch.setattr("spmlkit.experiments.sweep.run.run_config", recording_check)
    spec = SweepSpec(name="bad", seeds=[0, 1], settings={"epochs": 0}, store=str(tmp_path / "bad.db"))
    with pytest.raises(InputError, match="epochs must be a positive integer"):
        run_sweep(spec, jobs=2)
    assert events == ["start", "check"]
    # this sweep's own workers (the suite's other tests may leave children of this process): a
    # forking pool starts both at once, a spawning one (once this process has used CUDA) one
    assert 1 <= len(workers) <= 2 and not any(w.is_alive() for w in workers)


def test_a_sweep_with_nothing_to_run_stops_its_starting_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid already finished submits no task: the workers started for it are stopped, not
    waited for through their start-up (imports, data), and none is left alive."""
    spec = SweepSpec(name="done", datasets=["yeast"], methods=["an"], seeds=[0], settings={"epochs": 1},
                     store=str(tmp_path / "done.db"))
    assert run_sweep(spec, jobs=2).ran == 1
    stops: list[int] = []
    workers: list[Any] = []
    start, stop = processes.WorkerPool.start, processes.WorkerPool.stop

    def recording_start(self: processes.WorkerPool, runs_dir: str) -> None:
        start(self, runs_dir)
        workers.extend(self._pool._processes.values())

    def recording_stop(self: processes.WorkerPool, keep: Any) -> None:
        stops.append(len(self._in_flight))
        stop(self, keep)

    monkeypatch.setattr(processes.WorkerPool, "start", recording_start)
    monkeypatch.setattr(processes.WorkerPool, "stop", recording_stop)
    result = run_sweep(spec, jobs=2)
    assert (result.ran, result.skipped) == (0, 1)
    assert stops == [0]
    assert 1 <= len(workers) <= 2 and not any(w.is_alive() for w in workers)  # fork: both; spawn: one


def test_an_executor_that_starts_blocking_is_not_started_for_a_refused_grid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connecting to a cluster blocks: such an executor starts after the grid's checks, so a
    refused setting is reported without it; a grid that passes them starts it once."""
    from spmlkit.errors import InputError

    events: list[str] = []

    class Blocking(processes.InProcess):
        def start(self, runs_dir: str) -> None:
            events.append("start")
            super().start(runs_dir)

        def close(self) -> None:
            events.append("close")

    monkeypatch.setattr("spmlkit.experiments.sweep.run.make_executor", lambda *args: Blocking(1))
    bad = SweepSpec(name="bad", seeds=[0], settings={"epochs": 0}, store=str(tmp_path / "bad.db"))
    with pytest.raises(InputError, match="epochs must be a positive integer"):
        run_sweep(bad)
    assert events == ["close"]
    good = SweepSpec(name="good", datasets=["yeast"], methods=["an"], seeds=[0], settings={"epochs": 1},
                     store=str(tmp_path / "good.db"))
    events.clear()
    assert run_sweep(good).ran == 1
    assert events == ["start", "close"]
