"""Grids of any size (docs/architecture.md, "Grids of any size"): a sweep makes its runs one at a
time, so planning a grid of ten million runs costs what planning ten thousand does; a grid too
large to run is refused at once with its size; every value of every axis is still checked
before anything runs. And no run trains alone without its record saying why."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from spmlkit.cli import main
from spmlkit.experiments.store import ResultsStore, new_owner_id
from spmlkit.experiments.sweep import SweepSpec, expand, run_sweep
from spmlkit.experiments.sweep import processes
from spmlkit.experiments.sweep.claims import Heartbeat, SweepState
from spmlkit.experiments.sweep.execute import failed_record, now
from spmlkit.experiments.sweep.run import finished_ids
from spmlkit.experiments.sweep.spec import MAX_GRID_RUNS, grid_size, iter_runs

QUICK = {"epochs": 1, "subset": 200}


def _grid(seeds: int, lrs: int, batch_sizes: int, store: Path, **extra) -> SweepSpec:
    return SweepSpec(name=store.stem, seeds=list(range(seeds)), lrs=[1e-4 * (i + 1) for i in range(lrs)],
                     batch_sizes=list(range(16, 16 + batch_sizes)), settings=dict(QUICK), store=str(store), **extra)


def test_the_grid_is_counted_and_made_one_run_at_a_time(tmp_path: Path) -> None:
    spec = SweepSpec(name="c", methods=["an", "em"], seeds=[0, 1], lrs=[1e-3, 1e-2],
                     hparams={"em": {"alpha": [0.1, 0.2, 0.3]}}, store=str(tmp_path / "c.db"))
    assert grid_size(spec) == (1 + 3) * 2 * 2 == len(expand(spec)) == 16
    runs = iter_runs(spec)
    assert iter(runs) is runs  # a generator, not a list
    assert [r["run_id"] for r in runs] == [r["run_id"] for r in expand(spec)]
    big = _grid(1000, 100, 100, tmp_path / "big.db")
    assert grid_size(big) == 10_000_000
    first = next(iter_runs(big))
    assert (first["seed"], first["lr"], first["batch_size"]) == (0, 1e-4, 16)


def test_planning_memory_is_small_and_independent_of_the_grid_size(tmp_path: Path, monkeypatch) -> None:
    """The whole sweep but training (a run "trains" into a failed record at once), measured with
    tracemalloc: 10^4, 10^6 and 10^7 runs. Before grids were made lazily, 10^7 runs grew the
    process by gigabytes before the first run."""
    monkeypatch.setattr(processes, "execute_run", lambda run, runs_dir=None, *a, **k: failed_record(
        run, "not trained: this test measures planning", now(), time.perf_counter()))
    run_sweep(_grid(2, 2, 2, tmp_path / "warm.db"), jobs=1, max_runs=1)  # imports and caches first
    peaks = {}
    for size, axes in {10**4: (100, 10, 10), 10**6: (100, 100, 100), 10**7: (1000, 100, 100)}.items():
        spec = _grid(*axes, tmp_path / f"g{size}.db")
        tracemalloc.start()
        try:
            result = run_sweep(spec, jobs=1, max_runs=1)
            peaks[size] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (result.total, result.ran, len(ResultsStore(spec.store))) == (size, 1, 1)
    print({k: f"{v / 1e6:.2f} MB" for k, v in peaks.items()})
    assert max(peaks.values()) < 4e6  # a run dict is ~1 KB: 10^7 of them would be ~10 GB
    assert abs(peaks[10**6] - peaks[10**4]) < 2e6 and abs(peaks[10**7] - peaks[10**4]) < 2e6


def _sweep_file(path: Path, seeds: int, lrs: int, batch_sizes: int) -> Path:
    path.write_text(f"methods: [an]\nseeds: {list(range(seeds))}\nlrs: {[round(1e-4 * (i + 1), 6) for i in range(lrs)]}\n"
                    f"batch_sizes: {list(range(16, 16 + batch_sizes))}\nsettings: {{epochs: 1, subset: 200}}\n"
                    "store: big.db\n")
    return path


def test_max_runs_1_of_a_ten_million_run_grid_runs_one_run_at_once(tmp_path: Path, capsys) -> None:
    sweep_file = _sweep_file(tmp_path / "big.yaml", 1000, 100, 100)
    assert sweep_file.stat().st_size < 8000  # a few kilobytes of sweep file
    t0 = time.perf_counter()
    assert main(["sweep", str(sweep_file), "--max-runs", "1", "--jobs", "1", "--quiet"]) == 0
    seconds = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert "sweep big: 10000000 runs, 0 already finished" in out and "ran 1 run(s) (0 failed)" in out
    print(f"--max-runs 1 of 10^7 runs: {seconds:.1f} s")
    assert seconds < 60  # ~3 s on 2 idle cores: the check of 1200 axis values and one Yeast run
    # resumed: the finished run is counted from the store, and the next one runs
    assert main(["sweep", str(sweep_file), "--max-runs", "1", "--jobs", "1", "--quiet"]) == 0
    assert "10000000 runs, 1 already finished" in capsys.readouterr().out
    assert [(r["seed"], r["lr"], r["batch_size"]) for r in ResultsStore(tmp_path / "big.db").records()] == [
        (0, 1e-4, 16), (1, 1e-4, 16)]


def test_a_grid_too_large_to_run_is_refused_at_once_with_its_size(tmp_path: Path, capsys) -> None:
    sweep_file = _sweep_file(tmp_path / "huge.yaml", 1000, 1000, 1000)
    t0 = time.perf_counter()
    assert main(["sweep", str(sweep_file), "--quiet"]) == 2
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert (f"sweep file {sweep_file}: sweep 'huge': the grid has 1,000,000,000 runs (1 datasets x 1 observations x "
            "1 method x hyperparameter combinations x 1000 lrs x 1000 batch sizes x 1000 seeds), more than the "
            f"{MAX_GRID_RUNS:,} one sweep may hold") in err
    assert not (tmp_path / "big.db").exists()


@pytest.mark.parametrize("text, message", [
    ("", "is empty; name the grid"),
    ("# nothing but a comment\n", "is empty; name the grid"),
    ("lrs: [0.01, 0.1, -1]\nstore: q.db\n", "lr must be"),  # the last value of an axis is checked too
    ("settings: {epochs: 0}\nstore: q.db\n", "epochs must be a positive integer, got 0"),
    ("methods: [em]\nhparams: {em: {alpha: []}}\nstore: q.db\n", "hparams.em.alpha must not be empty"),
])
def test_a_sweep_refused_by_its_checks_is_one_line_and_leaves_no_store(tmp_path: Path, capsys, text: str,
                                                                       message: str) -> None:
    (tmp_path / "s.yaml").write_text(text)
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "q.db").exists() and not (tmp_path / "results.db").exists()


def test_finished_runs_are_counted_from_the_store_only_where_they_are_this_grids(tmp_path: Path) -> None:
    spec = _grid(3, 2, 1, tmp_path / "s.db")
    store = ResultsStore(spec.store)
    runs = expand(spec)
    other = expand(_grid(3, 2, 1, tmp_path / "s.db", val_variant="observed"))  # same axes, other settings
    wider = expand(_grid(5, 2, 1, tmp_path / "s.db"))[3:5]  # seeds 3 and 4: not on this grid's axis
    for run, status in [(runs[0], "ok"), (runs[4], "failed"), (other[0], "ok"), (wider[0], "ok"), (wider[1], "ok")]:
        store.add({**run, "status": status, "config": run, "val_map": 0.5, "test_map": 0.5, "error": "x"})
    assert finished_ids(spec, store, retry_failed=False) == {runs[0]["run_id"], runs[4]["run_id"]}
    assert finished_ids(spec, store, retry_failed=True) == {runs[0]["run_id"]}


# ---------------------------------------------------------------- why a run trains alone


def _state(spec: SweepSpec, max_runs: int | None = None, alone_reason: str = "backend says so") -> SweepState:
    store = ResultsStore(spec.store)
    owner = new_owner_id()
    return SweepState(store, owner, iter_runs(spec), max_runs, None, 60.0, Heartbeat(store, owner, 60.0, 30.0),
                      None, None, count=grid_size(spec), alone_reason=alone_reason)


def test_a_run_claimed_alone_says_why(tmp_path: Path) -> None:
    pair = SweepSpec(name="p", methods=["an", "em"], seeds=[0, 1], lrs=[0.01], settings=QUICK,
                     store=str(tmp_path / "p.db"))
    state = _state(pair)
    first, second = state.claim_group(4), state.claim_group(4)
    assert [(r["method"], r["seed"]) for r in first + second] == [("an", 0), ("an", 1), ("em", 0), ("em", 1)]
    assert all(state.why_alone(r["run_id"]) is None for r in first + second)
    assert state.candidates_left == 0 and state.claim_group(4) == []

    def alone(spec: SweepSpec, size: int = 4, **kwargs) -> str:
        state = _state(spec, **kwargs)
        (run,) = state.claim_group(size)
        record = {"run_id": run["run_id"], "group_size": 1}
        state.annotate([record])
        assert record["alone_reason"] == state.why_alone(run["run_id"]) or state.why_alone(run["run_id"]) is None
        return record["alone_reason"]

    single = SweepSpec(name="s", methods=["an"], seeds=[0], settings=QUICK, store=str(tmp_path / "s.db"))
    assert alone(single) == "no unclaimed run of the grid next to it differs from it only in seed and lr"
    assert alone(SweepSpec(name="m", seeds=[0, 1], settings=QUICK, store=str(tmp_path / "m.db")),
                 max_runs=1) == "--max-runs left room for one run only"
    assert alone(SweepSpec(name="d", seeds=[0, 1], settings={**QUICK, "head": "mlp", "dropout": 0.5},
                           store=str(tmp_path / "d.db")), size=4) == (
        "a feature head with dropout draws from the global random stream, which batched runs cannot share")
    assert alone(SweepSpec(name="o", seeds=[0, 1], settings=QUICK, store=str(tmp_path / "o.db")), size=1,
                 alone_reason="--jobs 1 says so") == "--jobs 1 says so"
    # the partner of a run was taken by another sweep
    held = SweepSpec(name="h", seeds=[0, 1], settings=QUICK, store=str(tmp_path / "h.db"))
    ResultsStore(held.store).claim(expand(held)[1]["run_id"], "elsewhere:1:x", duration=60.0)
    assert alone(held) == "the other 1 run(s) of its group were finished or held by another sweep"


def test_a_combination_refused_when_claimed_trains_alone_and_a_bug_is_raised(tmp_path: Path, monkeypatch) -> None:
    """The sweep checks every value of every axis, not every combination: one refused at its
    claim (a ValueError) trains alone, to be recorded with its own error; anything else is ours."""
    from spmlkit.experiments.sweep import claims

    spec = SweepSpec(name="r", seeds=[0, 1], settings=QUICK, store=str(tmp_path / "r.db"))

    def refused(run, runs_dir=None):
        raise ValueError("batch_size 64 is larger than this combination allows")

    monkeypatch.setattr(claims, "run_config", refused)
    state = _state(spec)
    (run,) = state.claim_group(4)
    assert state.why_alone(run["run_id"]) == (
        "its settings were refused (batch_size 64 is larger than this combination allows)")

    def bug(run, runs_dir=None):
        raise KeyError("oops")

    monkeypatch.setattr(claims, "run_config", bug)
    with pytest.raises(KeyError, match="oops"):
        _state(SweepSpec(name="b", seeds=[0, 1], settings=QUICK, store=str(tmp_path / "b.db"))).claim_group(4)
