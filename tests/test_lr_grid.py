"""A learning rate selected on the edge of its grid is said, and `--extend-lrs` widens the grid
(docs/benchmark.md, "Learning rates on the edge"): positions and steps by hand, then the command
on a small table of one's own (120 rows, 4 features: each run a fraction of a second)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from fixtures.feature_folders import own_table
from test_benchmark import _run

from spmlkit.cli import main
from spmlkit.experiments.benchmark import summarize
from spmlkit.experiments.lr_grid import edge_note, lr_position, marked_lr, step_beyond

pytestmark = pytest.mark.usefixtures("one_thread")


def test_where_a_selected_lr_lies_among_the_lrs_tried():
    assert [lr_position(lr, (0.001, 0.003, 0.01)) for lr in (0.001, 0.003, 0.01)] == ["lowest", "inside", "highest"]
    assert lr_position(0.01, (0.01,)) == "only" and lr_position(0.01, (0.01, 0.01)) == "only"  # nothing selected
    assert marked_lr(0.01, "highest") == "0.01 (highest)" and marked_lr(0.003, "inside") == "0.003"
    assert marked_lr(0.01, "only") == "0.01"


def test_a_step_beyond_the_edge_keeps_the_grids_ratio_in_round_numbers():
    grid = (1e-3, 3e-3, 1e-2)
    above, below = list(grid), list(grid)
    for _ in range(3):
        above.append(step_beyond(grid, above, "highest"))
        below.insert(0, step_beyond(grid, below, "lowest"))
    assert above[3:] == [0.03, 0.1, 0.3] and below[:3] == [3e-5, 1e-4, 3e-4]  # ratios 10/3 and 3
    # a fine grid is not rounded back onto its own edge: 0.011 * 1.1 = 0.0121 is 0.012, not 0.01
    assert step_beyond((0.01, 0.011), (0.01, 0.011), "highest") == 0.012
    # a decade grid steps by decades
    assert step_beyond((0.01, 0.1), (0.01, 0.1), "highest") == 1.0 and step_beyond((0.01, 0.1), (0.01, 0.1),
                                                                                     "lowest") == 0.001
    with pytest.raises(ValueError, match="ratio of two positive lrs"):
        step_beyond((0.01,), (0.01,), "highest")


def test_the_table_marks_a_selection_on_the_edge_and_the_note_names_it():
    runs = pd.DataFrame([
        _run("an", 0.001, 0, 0.40, 0.4), _run("an", 0.01, 0, 0.50, 0.5),  # highest wins
        _run("em", 0.001, 0, 0.60, 0.6), _run("em", 0.01, 0, 0.50, 0.5),  # lowest wins
        _run("gr", 0.001, 0, 0.40, 0.4), _run("gr", 0.003, 0, 0.50, 0.5), _run("gr", 0.01, 0, 0.45, 0.4),
        # role's best finished lr is its highest finished one, but a higher lr was tried (its run failed:
        # diverged), so the best is not beyond the grid
        _run("role", 0.001, 0, 0.40, 0.4), _run("role", 0.003, 0, 0.50, 0.5),
        _run("role", 0.01, 0, None, None, status="failed"),
        _run("l2r", 0.003, 0, 0.5, 0.5),  # one lr: nothing was selected
    ])
    rows, _ = summarize(runs, ("an", "em", "gr", "role", "l2r"))
    assert {r["method"]: r["lr_position"] for r in rows} == {"an": "highest", "em": "lowest", "gr": "inside",
                                                             "role": "inside", "l2r": "only"}
    assert edge_note(rows) == (
        "Learning rate on the edge of the grid: em chose 0.001, the lowest lr tried; an chose 0.01, the highest lr "
        "tried. Their best lr may lie beyond it; --extend-lrs tries further lrs until each is inside "
        "(docs/benchmark.md, \"Learning rates on the edge\").")
    assert "--extend-lrs took its 3 steps and they are still there: give --lrs further out" in edge_note(rows,
                                                                                                      widened=3)
    assert edge_note([r for r in rows if r["method"] in ("gr", "l2r")]) is None


def test_extend_lrs_widens_the_grid_of_methods_on_its_edge_and_reuses_every_run(tmp_path, capsys):
    """Two epochs are too few for lrs of 1e-3 and 3e-3 on this table (val mAP 40.1 and 41.4 %, at 0.1
    87.6 %): the best lr is the highest, three steps of the grid's ratio (3) later still, and the
    table and note say so. The same command again trains nothing and writes the same table."""
    feats = str(own_table(tmp_path))
    out = tmp_path / "bench"
    args = ["benchmark", "--dataset", feats, "--methods", "an", "--seeds", "0", "--lrs", "0.001,0.003", "--epochs",
            "2", "--jobs", "1", "--out", str(out), "--quiet"]
    capsys.readouterr()
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    table = pd.read_csv(out / "table.csv")
    assert table["lr_position"].tolist() == ["highest"] and table["lr"].tolist() == [0.003]
    assert "0.003 (highest)" in said
    assert "Learning rate on the edge of the grid: an chose 0.003, the highest lr tried." in said
    assert "--extend-lrs tries further lrs" in (out / "table.md").read_text()

    assert main([*args, "--extend-lrs"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    for lr in ("0.009", "0.03", "0.09"):  # x 3 each step; 0.027 rounds to 0.03
        assert f"--extend-lrs on {feats}: best lr on the edge of the grid, so trying an at {lr} (1 run)" in said
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["lr"]) == [0.001, 0.003, 0.009, 0.03, 0.09]  # the cap: 3 lrs added, no more
    table = pd.read_csv(out / "table.csv")
    assert table["lr"].tolist() == [0.09] and table["lr_position"].tolist() == ["highest"]
    assert "--extend-lrs took its 3 steps and they are still there: give --lrs further out" in said
    assert "2 finished runs reused" in said  # the base grid's runs were not trained again
    payload = json.loads((out / "results.json").read_text())
    assert payload["spec"]["extra_lrs"] == {"an": [0.009, 0.03, 0.09]} and payload["spec"]["extend_lrs"] is True
    assert any("took its 3 steps" in note for note in payload["notes"])
    before = (out / "table.csv").read_text()

    assert main([*args, "--extend-lrs"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "so trying an at 0.009 (1 run, all finished already)" in said
    assert "5 finished runs reused" in said and (out / "table.csv").read_text() == before
    # without --extend-lrs the table is the grid of --lrs again, and says so
    assert main(args) == 0
    assert pd.read_csv(out / "table.csv")["lr"].tolist() == [0.003]


def test_extend_lrs_needs_two_lrs_to_know_its_step(tmp_path, capsys):
    assert main(["benchmark", "--methods", "an", "--lrs", "0.01", "--extend-lrs", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--extend-lrs widens the lr grid by the ratio of its lrs; give at least two " \
                                    "--lrs (got 0.01)" in err
    assert not (tmp_path / "o").exists()
    assert math.isclose(step_beyond((1e-3, 3e-3), (1e-3, 3e-3), "highest"), 9e-3)
