"""``spmlkit sweep`` on the command line: a sweep file's mistakes are one line (exit 2, no
traceback), an axis is a scalar or a list under either spelling, and a sweep whose every
run fails exits non-zero with a summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from spmlkit.cli import main
from spmlkit.experiments.store import ResultsStore

QUICK = "settings: {epochs: 2, subset: 200}\nstore: q.db\n"


@pytest.mark.parametrize("axis", ["method: [an]", "method: an", "methods: an", "dataset: [yeast]\nmethod: [an]"])
def test_an_axis_may_be_a_scalar_or_a_list_under_either_key(tmp_path: Path, capsys, axis: str) -> None:
    (tmp_path / "s.yaml").write_text(f"{axis}\nseeds: 0\nlrs: 1e-3\n{QUICK}")  # PyYAML reads 1e-3 as text
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 0, capsys.readouterr().err
    (rec,) = ResultsStore(tmp_path / "q.db").records()
    assert (rec["dataset"], rec["method"], rec["seed"], rec["lr"], rec["status"]) == ("yeast", "an", 0, 1e-3, "ok")


@pytest.mark.parametrize("line, message", [
    ("seeds: abc", "seeds must be an integer, got str 'abc'"),
    ("seeds: [0, x]", "seeds[1] must be an integer"),
    ("batch_sizes: [true]", "batch_sizes[0] must be an integer, got bool"),
    ("lrs: [fast]", "lrs[0] must be a number"),
    ("methods: [[an]]", "methods[0] must be a non-empty string, got list"),
    ("method: [an]\nmethods: [em]", "either `method` or `methods`"),
    ("datasets: []", "datasets must not be empty"),
    ("settings: 3", "settings must be a mapping"),
    ("hparams: [em]", "hparams must map method names"),
    ("methods: [em]\nhparams: {em: 0.1}", "hparams.em must map hyperparameter names"),
    ("name: [x]", "name must be a non-empty string"),
    ("methods: [nope]", "unknown method 'nope'"),
])
def test_wrong_types_in_a_sweep_file_are_one_line(tmp_path: Path, capsys, line: str, message: str) -> None:
    (tmp_path / "s.yaml").write_text(f"{line}\nstore: q.db\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert message in err and "s.yaml" in err, err
    assert not (tmp_path / "q.db").exists()  # refused before anything ran


def test_a_sweep_where_every_run_fails_exits_non_zero_with_a_summary(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.yaml").write_text(
        "methods: [gr]\nseeds: [0, 1]\nhparams:\n  gr: {schedule: [{bogus: [0, 1]}]}\n" + QUICK)
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 2
    out, err = capsys.readouterr()
    # the summary, and the two runs' one error said once, naming both
    assert "ran 2 run(s) (2 failed)" in out and out.count("failed ") == 1 and "bogus" in out
    assert "failed 2 runs (gr; lr=0.001; seed=0,1): " in " ".join(out.split())
    assert "every one of the 2 runs failed" in err and "--retry-failed" in err and "Traceback" not in err
    assert [r["status"] for r in ResultsStore(tmp_path / "q.db").records()] == ["failed", "failed"]
    # recorded failures count as finished: nothing to do, nothing failed this time
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 0
    assert "ran 0 run(s) (0 failed), skipped 2 finished" in capsys.readouterr().out
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet", "--retry-failed"]) == 2


@pytest.mark.parametrize("settings, words", [
    ("{epochs: 2}", "method 'em_apl' cannot run in 2 epoch(s): APL needs warmup_epochs < num_epochs"),
    ("{epochs: 1, subset: 100000}", "subset 100000 is larger than the 1500 training rows of yeast"),
    ("{epochs: 1, subset: 5, partition: random}", "subset 5 of yeast: a partition of 5 rows into 80 / 10 / 10 % leaves the validation and the test part empty"),
])
def test_a_grid_that_cannot_run_is_refused_once_before_any_run(tmp_path: Path, capsys, settings: str,
                                                                words: str) -> None:
    """A warm-up as long as the run, or a subset the data cannot give, failed every run of the grid one by
    one after each had started; now the sweep says it once, before anything is written."""
    (tmp_path / "s.yaml").write_text(f"methods: [an, em_apl]\nseeds: [0, 1]\nlrs: [0.01]\nsettings: {settings}\n"
                                     "store: s.db\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "s.db").exists()
