"""``spmlkit sweep --backend ray``: the same records as the process backend, and a worker that
dies mid-run costs a retry, never the run.

One local Ray instance (2 CPUs, no dashboard) serves the whole module: starting Ray takes
seconds (6-9 s here), and every fresh worker imports torch, so the tests reuse both. Ray is an extra; the
module is skipped only where it is not installed (CI installs it through the ``test`` extra).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spmlkit.cli import main
from spmlkit.experiments.sweep.ray_backend import RayOptions
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import expand, load_sweep, run_sweep

ray = pytest.importorskip("ray")

GRID = ("name: r\ndatasets: [yeast]\nmethods: [an, em]\nseeds: [0, 1]\nlrs: [0.003]\n"
        "settings: {epochs: 2, subset: 200, device: cpu}\nstore: r.db\n")
#: per-epoch timings: the only history entries that may differ between two executions
_TIMINGS = ("epoch_seconds", "train_seconds", "images_per_second")


def _crash_hook(crash_dir: str) -> Callable[[], None]:
    """A Ray worker setup hook: a task holding a run whose file in ``crash_dir`` holds a count
    above zero lowers the count and SIGKILLs its own worker, as the OOM killer or an operator
    would. It wraps the backend's task (what a worker looks up by name), before torch is
    imported, so a killed worker is cheap to replace. A closure, so Ray ships it by value (the
    tests folder is not importable in a worker)."""

    def hook() -> None:
        import signal

        from spmlkit.experiments.sweep import ray_backend

        task = ray_backend._task

        def crashing_task(runs: list[dict[str, Any]], *args: Any) -> list[dict[str, Any]]:
            for run in runs:
                marker = os.path.join(crash_dir, run["run_id"])
                if os.path.exists(marker):
                    left = int(Path(marker).read_text())
                    if left > 0:
                        Path(marker).write_text(str(left - 1))
                        os.kill(os.getpid(), signal.SIGKILL)
            return task(runs, *args)

        ray_backend._task = crashing_task

    return hook


@pytest.fixture(scope="module")
def crash_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module's Ray instance; yields the folder where a test asks a run's worker to die."""
    folder = tmp_path_factory.mktemp("crash")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
             runtime_env={"worker_process_setup_hook": _crash_hook(str(folder))})
    try:
        yield folder
    finally:
        ray.shutdown()


def _comparable(rec: dict[str, Any]) -> str:
    """A run's numbers as JSON text, where NaN (an unused metric) equals NaN; timings left out."""
    history = [{k: v for k, v in epoch.items() if k not in _TIMINGS} for epoch in rec["history"]]
    numbers = {"val_map": rec["val_map"], "test_map": rec["test_map"], "best_epoch": rec["best_epoch"],
               "test_ap": rec["test_ap"], "history": history}
    return json.dumps(numbers, sort_keys=True)


def _records(store: Path) -> dict[str, dict[str, Any]]:
    return {rec["run_id"]: rec for rec in ResultsStore(store).records()}


@pytest.fixture(scope="module")
def process_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The grid on the process backend, once, as the reference for both tests."""
    folder = tmp_path_factory.mktemp("process")
    (folder / "g.yaml").write_text(GRID)
    result = run_sweep(load_sweep(folder / "g.yaml"))
    assert (result.ran, result.failed) == (4, 0)
    return _records(folder / "r.db")


def test_ray_backend_records_the_same_runs_as_processes(
        tmp_path: Path, crash_dir: Path, process_records: dict[str, dict[str, Any]],
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "g.yaml").write_text(GRID)
    assert main(["sweep", str(tmp_path / "g.yaml"), "--backend", "ray", "--quiet"]) == 0, capsys.readouterr().err
    on_ray = _records(tmp_path / "r.db")
    assert sorted(on_ray) == sorted(process_records) and len(on_ray) == 4
    for run_id, rec in on_ray.items():
        assert rec["status"] == "ok" and len(rec["history"]) == 2
        assert rec["val_map"] == process_records[run_id]["val_map"]
        assert rec["test_map"] == process_records[run_id]["test_map"]
        assert _comparable(rec) == _comparable(process_records[run_id])
    assert ResultsStore(tmp_path / "r.db").leases() == []
    # finished runs are skipped on this backend too
    assert main(["sweep", str(tmp_path / "g.yaml"), "--backend", "ray", "--quiet"]) == 0
    assert "ran 0 run(s) (0 failed), skipped 4 finished" in capsys.readouterr().out


def test_a_worker_that_dies_is_retried_and_one_that_keeps_dying_is_recorded_failed(
        tmp_path: Path, crash_dir: Path, process_records: dict[str, dict[str, Any]]) -> None:
    (tmp_path / "g.yaml").write_text(GRID)
    spec = load_sweep(tmp_path / "g.yaml")
    runs = expand(spec)
    once, always = runs[0]["run_id"], runs[3]["run_id"]
    (crash_dir / once).write_text("1")  # dies on its first attempt only
    (crash_dir / always).write_text("9")  # dies on every attempt
    seen: list[str] = []
    result = run_sweep(spec, backend="ray", ray_options=RayOptions(max_retries=1),
                       on_result=lambda rec: seen.append(rec["run_id"]))
    assert (result.ran, result.failed) == (4, 1)
    assert sorted(seen) == sorted(r["run_id"] for r in runs)  # every run recorded, each once
    assert (crash_dir / once).read_text() == "0" and (crash_dir / always).read_text() == "7"  # 1 try + 1 retry
    records = _records(tmp_path / "r.db")
    assert records[once]["status"] == "ok"
    assert _comparable(records[once]) == _comparable(process_records[once])  # the retry starts clean
    assert records[always]["status"] == "failed" and "died 2 time(s)" in records[always]["error"]
    assert all(records[r["run_id"]]["status"] == "ok" for r in runs[1:3])
    assert ResultsStore(tmp_path / "r.db").leases() == []


def test_a_ray_task_loads_the_sweeps_plugin_by_its_path(tmp_path: Path, crash_dir: Path) -> None:
    """A Ray worker is a process of its own that never saw the plug-in: it imports it from the
    path the run carries (docs/plugins.md) and trains what the process backend trains."""
    from fixtures.plugins import MY_LOSS, isolated_plugins

    (tmp_path / "my_loss.py").write_text(MY_LOSS)
    (tmp_path / "p.yaml").write_text("name: p\nmethods: [an, my_loss]\nplugins: [my_loss.py]\nseeds: [0]\n"
                                     "lrs: [0.003]\nsettings: {epochs: 2, subset: 200, device: cpu}\n")
    with isolated_plugins():
        spec = load_sweep(tmp_path / "p.yaml")
        on_ray = run_sweep(spec, backend="ray", store_path=tmp_path / "ray.db")
        here = run_sweep(spec, store_path=tmp_path / "here.db")
    assert (on_ray.ran, on_ray.failed) == (here.ran, here.failed) == (2, 0)
    ray_records, here_records = _records(tmp_path / "ray.db"), _records(tmp_path / "here.db")
    assert sorted(ray_records) == sorted(here_records)
    for run_id, rec in ray_records.items():
        assert _comparable(rec) == _comparable(here_records[run_id])
        assert [p["name"] for p in rec["plugins"]] == ["my_loss.py"]  # loaded in the Ray worker itself
    (mine,) = [rec for rec in ray_records.values() if rec["method"] == "my_loss"]
    assert mine["plugin_code"] == [f"my_loss.py sha256:{mine['plugins'][0]['sha256']}"]


def test_runs_train_in_groups_and_a_group_whose_worker_keeps_dying_is_split_into_runs(
        tmp_path: Path, crash_dir: Path) -> None:
    """A task is a group, sized as the process backend sizes them (8 runs on 2 CPUs: groups of 2). A
    group whose worker died on every try is tried again run by run: the run that kills its worker is
    recorded failed, its partner trains alone and says why."""
    (tmp_path / "g.yaml").write_text("name: grp\ndatasets: [yeast]\nmethods: [an]\nseeds: [0, 1, 2, 3, 4, 5, 6, 7]\n"
                                     "lrs: [0.003]\nsettings: {epochs: 1, subset: 200, device: cpu}\nstore: g.db\n")
    spec = load_sweep(tmp_path / "g.yaml")
    runs = expand(spec)
    (crash_dir / runs[0]["run_id"]).write_text("1")  # its group dies once, then trains
    (crash_dir / runs[5]["run_id"]).write_text("9")  # dies on every try, in its group and alone
    result = run_sweep(spec, backend="ray", ray_options=RayOptions(max_retries=1))
    assert (result.ran, result.failed) == (8, 1)
    records = _records(tmp_path / "g.db")
    by_seed = {rec["seed"]: rec for rec in records.values()}
    assert by_seed[0]["status"] == "ok" and by_seed[0]["group_size"] == 2
    assert by_seed[5]["status"] == "failed" and "died 2 time(s)" in by_seed[5]["error"]
    partner = by_seed[4]  # runs 4 and 5 were one task
    assert partner["status"] == "ok" and partner["group_size"] == 1
    assert partner["alone_reason"].startswith("the worker of its group of 2 runs died 2 time(s)")
    assert sorted(rec["group_size"] for rec in records.values() if rec["status"] == "ok") == [1] + [2] * 6
    assert (crash_dir / runs[5]["run_id"]).read_text() == "5"  # 2 tries in its group, 2 alone
