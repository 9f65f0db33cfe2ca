"""`spmlkit report --out`: spmlkit writes into its own report folder or a folder without the
report's names, and refuses a folder holding a person's files of those names
(docs/figures.md, "The report folder")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spmlkit.cli import main
from spmlkit.experiments.report_folder import MARKER
from spmlkit.experiments.store import ResultsStore
from spmlkit.output_dir import RUN, claim_output_dir


def rec(method: str, observation: str = "single_positive") -> dict[str, Any]:
    """A finished run with only what the tables need: no history, no analysis, no per-class
    APs, so every figure is skipped with a note (a store of that shape must not crash either)."""
    return {"run_id": f"{method}-{observation}", "status": "ok", "dataset": "yeast", "method": method,
            "observation": observation, "seed": 0, "lr": 1e-3, "batch_size": 64, "hparams": {},
            "val_map": 0.4, "test_map": 0.38, "test_metrics": {"map": 0.38}}


@pytest.fixture()
def stores(tmp_path: Path) -> tuple[str, str]:
    """Two stores: one with two observations (two tables), one with one."""
    two, one = ResultsStore(tmp_path / "two.db"), ResultsStore(tmp_path / "one.db")
    two.add_many([rec("an"), rec("em"), rec("an", "full"), rec("em", "full")])
    one.add_many([rec("an"), rec("gr")])
    return str(two.path), str(one.path)


def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def users_folder(tmp_path: Path) -> Path:
    """A person's folder holding a file of a report's name (``table.md``) and one of their own."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "table.md").write_text("my notes")
    (mine / "keep.txt").write_text("keep")
    return mine


def test_a_folder_with_the_users_files_of_the_same_names_is_refused(
        tmp_path: Path, stores: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    mine = users_folder(tmp_path)
    err = refused(["report", "--store", stores[1], "--out", str(mine)], capsys)
    assert f"--out {mine} holds table.md, which spmlkit's report did not write" in err
    assert "--overwrite" in err and "another folder with --out" in err
    assert (mine / "table.md").read_text() == "my notes"
    assert sorted(p.name for p in mine.iterdir()) == ["keep.txt", "table.md"]  # nothing written, no marker
    # a figures folder of the person's own counts too
    other = tmp_path / "other"
    (other / "figures").mkdir(parents=True)
    assert "holds figures," in refused(["report", "--store", stores[1], "--out", str(other)], capsys)


def test_overwrite_replaces_them_and_leaves_other_files(
        tmp_path: Path, stores: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    mine = users_folder(tmp_path)
    assert main(["report", "--store", stores[1], "--out", str(mine), "--overwrite", "--no-figures"]) == 0
    assert "| GR |" in (mine / "table.md").read_text()
    assert (mine / "keep.txt").read_text() == "keep"
    marker = json.loads((mine / MARKER).read_text())
    assert marker["written_by"] == "spmlkit report"
    assert marker["files"] == ["selected_configs.csv", "table.csv", "table.md", "table.tex"]


def test_a_report_folder_is_reused_and_the_previous_reports_files_removed(
        tmp_path: Path, stores: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rep = tmp_path / "rep"
    assert main(["report", "--store", stores[0], "--out", str(rep)]) == 0
    printed = capsys.readouterr().out
    # the store has no histories, analyses or per-class APs: each figure is a note, not a crash
    assert printed.count("note: figure ") == 2 * 5 + 1  # 5 figures x 2 observations, and the sensitivity
    assert "note: figure training_curves (yeast, full) skipped: no run record has a history" in printed
    tables = [f"table_{o}.{x}" for o in ("full", "single_positive") for x in ("md", "tex", "csv")]
    assert sorted(p.name for p in rep.iterdir()) == sorted([MARKER, "selected_configs.csv", *tables])
    (rep / "notes.txt").write_text("mine")  # a person's file added to the report folder stays
    assert main(["report", "--store", stores[1], "--out", str(rep), "--no-figures"]) == 0
    assert "removed 6 file(s) of the previous report" in capsys.readouterr().out
    assert sorted(p.name for p in rep.iterdir()) == sorted(
        [MARKER, "notes.txt", "selected_configs.csv", "table.csv", "table.md", "table.tex"])


def test_only_spmlkits_marker_counts_and_it_reaches_nothing_outside(
        tmp_path: Path, stores: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / MARKER).write_text(json.dumps({"written_by": "someone else", "files": []}))
    (foreign / "table.md").write_text("theirs")
    refused(["report", "--store", stores[1], "--out", str(foreign)], capsys)
    assert (foreign / "table.md").read_text() == "theirs"
    # a marker edited to list a file outside its folder: that file is never removed
    rep = tmp_path / "rep"
    assert main(["report", "--store", stores[1], "--out", str(rep), "--no-figures"]) == 0
    outside = tmp_path / "outside.txt"
    outside.write_text("safe")
    marker = json.loads((rep / MARKER).read_text())
    (rep / MARKER).write_text(json.dumps({**marker, "files": marker["files"] + ["../outside.txt"]}))
    assert main(["report", "--store", stores[1], "--out", str(rep), "--no-figures"]) == 0
    assert outside.read_text() == "safe"


def test_a_folder_without_the_reports_names_is_used(tmp_path: Path, stores: tuple[str, str]) -> None:
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "draft.tex").write_text("draft")
    assert main(["report", "--store", stores[1], "--out", str(folder), "--no-figures"]) == 0
    assert (folder / "draft.tex").read_text() == "draft" and (folder / "table.md").is_file()
    assert "draft.tex" not in json.loads((folder / MARKER).read_text())["files"]


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_folder_holding_another_kind_of_spmlkit_output_is_refused(
        tmp_path: Path, stores: tuple[str, str], capsys: pytest.CaptureFixture[str], overwrite: list[str]) -> None:
    run = claim_output_dir(tmp_path / "run", RUN, option="--out")
    (run / "metrics.csv").write_text("epoch,map\n1,0.4\n")
    before = sorted(p.name for p in run.iterdir())
    err = refused(["report", "--store", stores[1], "--out", str(run), *overwrite], capsys)
    assert f"--out {run} holds spmlkit's run output, not a report" in err and "another folder with --out" in err
    assert sorted(p.name for p in run.iterdir()) == before  # no table, no figures, no report marker
