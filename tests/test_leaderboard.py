"""The leaderboard across data sets: ranks and tests checked by hand, the diagram's looks, and
``spmlkit benchmark`` with two data sets end to end (docs/leaderboard.md, "How the leaderboard ranks")."""

import json
import math
import warnings
from itertools import combinations

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from fixtures.feature_folders import feature_folder as _feature_folder
from fixtures.feature_folders import own_table
from scipy.stats import friedmanchisquare

from spmlkit.cli import main
from spmlkit.experiments.cd_diagram import DPI, save_png
from spmlkit.experiments.leaderboard import (build_leaderboard, critical_difference, diagram, rank_within_datasets,
                                             scores_from_tables, to_markdown, write_leaderboard)
from spmlkit.experiments.suites import SUITES, suite_datasets
from spmlkit.methods import METHODS


def _scores(rows, methods, datasets=None):
    datasets = datasets or [f"d{i}" for i in range(len(rows))]
    return pd.DataFrame(rows, index=datasets, columns=methods, dtype=float)


# --------------------------------------------------------------------------- ranks and tests


def test_ranks_by_hand_ties_share_their_mean_rank():
    scores = _scores([[80, 70, 70, 60],    # b and c tie for places 2 and 3 -> 2.5 each
                      [50, 50, 50, 90],    # d first; a, b, c tie for places 2..4 -> 3 each
                      [10, 20, 30, 40]], ["a", "b", "c", "d"])
    ranks = rank_within_datasets(scores)
    assert ranks.to_numpy().tolist() == [[1, 2.5, 2.5, 4], [3, 3, 3, 1], [4, 3, 2, 1]]
    board = build_leaderboard(scores)
    # averages (1+3+4)/3, (2.5+3+3)/3, (2.5+3+2)/3, (4+1+1)/3, best first
    assert list(board.average_rank.index) == ["d", "c", "a", "b"]
    assert board.average_rank.to_numpy() == pytest.approx([2.0, 7.5 / 3, 8 / 3, 8.5 / 3])
    # every data set's ranks sum to k(k+1)/2, ties or not
    assert (board.ranks.sum(axis=1) == 10).all()


def test_friedman_by_hand_and_equal_to_scipy():
    # ranks per data set (no ties): a,b,c = (1,2,3), (1,2,3), (1,3,2), (2,1,3) -> rank sums 5, 8, 11
    scores = _scores([[0.9, 0.8, 0.7], [0.6, 0.5, 0.4], [0.9, 0.1, 0.2], [0.5, 0.6, 0.3]], ["a", "b", "c"])
    board = build_leaderboard(scores)
    f = board.friedman
    # chi2 = 12 N / (k (k+1)) * (sum_j R_j^2 - k (k+1)^2 / 4) with mean ranks R = 1.25, 2, 2.75
    assert f.statistic == pytest.approx(12 * 4 / 12 * (1.25**2 + 2**2 + 2.75**2 - 3 * 16 / 4))
    assert f.statistic == pytest.approx(4.5)
    assert f.pvalue == pytest.approx(math.exp(-4.5 / 2))  # chi-square with 2 df: survival exp(-x/2)
    assert (f.df, f.n_datasets, f.n_methods) == (2, 4, 3)
    ref = friedmanchisquare(scores["a"], scores["b"], scores["c"])
    assert f.statistic == ref.statistic and f.pvalue == ref.pvalue


def test_friedman_with_ties_is_scipys():
    rng = np.random.default_rng(3)
    scores = _scores(rng.integers(0, 4, size=(7, 5)), list("abcde"))  # many ties within each data set
    f = build_leaderboard(scores).friedman
    ref = friedmanchisquare(*(scores[c] for c in scores.columns))
    assert f.statistic == ref.statistic and f.pvalue == ref.pvalue


def test_critical_difference_matches_demsars_table_and_nemenyi():
    # Demšar (2006), Table 5(a), to its 3 decimals: q_0.05 = 2.343 for 3 classifiers, 3.164 for 10
    assert critical_difference(3, 4) / math.sqrt(3 * 4 / (6 * 4)) == pytest.approx(2.343, abs=1e-3)
    assert critical_difference(10, 12) / math.sqrt(10 * 11 / (6 * 12)) == pytest.approx(3.164, abs=1e-3)
    board = build_leaderboard(_fake_scores(26, 12))
    cd, p, avg = board.critical_difference, board.nemenyi, board.average_rank
    assert cd == pytest.approx(critical_difference(26, 12))
    pairs = list(combinations(avg.index, 2))
    apart = [(a, b) for a, b in pairs if abs(avg[a] - avg[b]) > cd + 1e-9]
    close = [(a, b) for a, b in pairs if abs(avg[a] - avg[b]) < cd - 1e-9]
    assert apart and close  # the fake table has both kinds
    assert all(p.loc[a, b] < 0.05 for a, b in apart) and all(p.loc[a, b] >= 0.05 for a, b in close)


@pytest.mark.parametrize("shape, friedman_note", [((3, 1), "1 data set"), ((3, 2), "2 data sets"),
                                                  ((2, 5), "2 methods")])
def test_too_few_methods_or_datasets_say_why(tmp_path, shape, friedman_note):
    k, n = shape
    board = build_leaderboard(_fake_scores(k, n))
    assert board.friedman is None
    assert any(note.startswith("no Friedman test") and friedman_note in note for note in board.notes)
    paths = write_leaderboard(tmp_path, board)
    text = (tmp_path / "leaderboard.md").read_text()
    assert "No Friedman test" in text and friedman_note in text
    assert pd.read_csv(paths["csv"]).shape[0] == k
    if n == 1:  # one data set: no spread of ranks to test, so no diagram either
        assert not board.has_diagram and "png" not in paths and "No critical-difference diagram" in text
    else:
        assert board.has_diagram and (tmp_path / "leaderboard.png").is_file()


def test_a_board_of_nothing_but_ties_has_no_friedman_test_and_says_so(tmp_path):
    board = build_leaderboard(_scores([[1, 1, 1], [2, 2, 2], [3, 3, 3]], ["a", "b", "c"]))
    assert board.friedman is None and board.average_rank.tolist() == [2, 2, 2]
    assert board.notes == ["no Friedman test: every method ties with every other on every data set"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's statistic would divide by zero here
        write_leaderboard(tmp_path, board)
    assert "every method ties with every other" in diagram(board).axes[0].get_title()
    assert (board.nemenyi == 1).all().all()  # nothing tells them apart


def test_missing_results_are_left_out_with_the_reason():
    scores = _scores([[60, 50, 40, np.nan], [70, np.nan, 65, np.nan], [55, 54, 53, np.nan], [1, 2, 3, np.nan]],
                     ["a", "b", "c", "d"], ["s1", "s2", "s3", "s4"])
    board = build_leaderboard(scores)
    assert board.left_out == {"d": "method without a finished run on any data set",
                              "s2": "data set where b finished no run"}
    assert board.ranked_datasets == ["s1", "s3", "s4"] and list(board.ranks.columns) == ["a", "b", "c"]
    assert board.friedman.n_datasets == 3
    md = to_markdown(board)
    assert "Left out of the ranks: s2 (data set where b finished no run)." in md
    assert "| 60.00 (1) | 70.00 | 55.00 (1) | 1.00 (3) |" in md  # a's row: s2's score shown, unranked


def test_scores_from_tables_keeps_the_benchmark_numbers():
    tables = {"x": [{"method": "an", "test_map": 41.0}, {"method": "em", "test_map": 52.5}],
              "y": [{"method": "em", "test_map": 60.0}]}
    s = scores_from_tables(tables)
    assert list(s.columns) == ["an", "em"] and s.loc["x", "em"] == 52.5 and math.isnan(s.loc["y", "an"])


def test_the_mulan_suite_is_its_twelve_sets():
    assert suite_datasets("mulan") == SUITES["mulan"]
    assert set(SUITES["mulan"]) == {"bibtex", "birds", "corel5k", "delicious", "emotions", "enron", "flags",
                                    "genbase", "medical", "scene", "tmc2007", "yeast"}
    with pytest.raises(ValueError, match="unknown suite 'mulam'; choose one of mulan"):
        suite_datasets("mulam")


# --------------------------------------------------------------------------- the diagram


def _fake_scores(k, n, seed=0):
    """k methods (spmlkit's names) on n data sets: method i is better than i+1 by 0.4 points on
    average, with noise of 3 points per data set."""
    rng = np.random.default_rng(seed)
    methods = list(METHODS)[:k] if k <= len(METHODS) else [f"method_{i}" for i in range(k)]
    skill = np.linspace(0.4 * k, 0, k)
    values = np.round(50 + skill[None, :] + rng.normal(0, 3, (n, k)), 2)
    return _scores(values, methods, [f"set_{j}" for j in range(n)])


@pytest.mark.parametrize("k, n", [(3, 2), (26, 12), (30, 12), (2, 3)])
def test_the_diagram_is_readable_and_sanely_sized(tmp_path, k, n):
    board = build_leaderboard(_fake_scores(k, n))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any matplotlib (or other) warning fails the test
        fig = diagram(board)
        path = save_png(fig, tmp_path / "cd.png")
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        texts = [t for t in [*ax.texts, ax.title, *ax.get_xticklabels()] if t.get_visible() and t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    # every method is labelled once, with its average rank
    labels = [t.get_text() for t in ax.texts]
    assert sum("(" in s and ")" in s for s in labels) >= k
    for (a, box_a), (b, box_b) in combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    for text, box in boxes:  # nothing cut off at the figure's edge
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, \
            f"{text!r} leaves the figure"
    height, width = matplotlib.image.imread(path).shape[:2]
    assert 900 <= width <= 1800 and 250 <= height <= 1600, (width, height)
    # one label row per method and side takes the same height for 3 and for 30 methods
    assert height <= 300 + 0.4 * DPI * ((k + 1) // 2 + k), (height, k)


def test_the_diagram_draws_each_method_in_its_colour_of_every_figure():
    """The diagram cycled matplotlib's 10 colours (EPR, OPML and EM+APL all blue); the report gives each
    method one colour. Every dot, elbow and label here is the method's own, and 26 methods have 26."""
    from matplotlib.colors import to_hex

    from spmlkit.experiments.method_colors import METHOD_COLORS, method_color
    from spmlkit.experiments.plots import method_color as report_colour
    from spmlkit.experiments.published import display_name

    board = build_leaderboard(_fake_scores(26, 12))
    ax = diagram(board).axes[0]
    by_label = {}
    for text in ax.texts:
        name = next((m for m in board.average_rank.index if text.get_text().startswith(f"{display_name(m)} (")
                     or text.get_text().endswith(f") {display_name(m)}")), None)
        if name is not None:
            by_label[name] = to_hex(text.get_color())
    assert set(by_label) == set(board.average_rank.index)
    assert by_label == {m: METHOD_COLORS[m] for m in board.average_rank.index}
    assert all(method_color(m) == report_colour(m) for m in by_label)  # one table of colours for both
    assert len(set(by_label.values())) == 26
    dots = {to_hex(c.get_facecolor()[0]) for c in ax.collections}
    assert dots == set(by_label.values())
    assert {m: by_label[m] for m in ("epr", "opml", "em_apl")} == {"epr": "#e7969c", "opml": "#9467bd",
                                                                  "em_apl": "#08306b"}


@pytest.mark.parametrize("k, n", [(10, 12), (3, 2), (26, 2)])
def test_the_cd_bar_is_the_critical_difference_in_rank_units(k, n):
    """The bar runs from rank 1 to rank 1 + CD, also where CD is longer than the rank axis (two data
    sets: no two methods can differ), where the label says so and the view reaches its end; the axis
    line itself spans the ranks 1 to k."""
    board = build_leaderboard(_fake_scores(k, n))
    cd = board.critical_difference
    ax = diagram(board).axes[0]
    bar = [line for line in ax.get_lines() if len(line.get_xdata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1]
           and line.get_ydata()[0] > 0]
    (line,) = bar
    x0, x1 = line.get_xdata()
    assert x0 == 1 and x1 - x0 == pytest.approx(cd)
    assert ax.get_xlim()[0] < 1 and ax.get_xlim()[1] > max(k, 1 + cd)
    assert tuple(ax.spines["top"].get_bounds()) == (1, k)
    (label,) = [t.get_text() for t in ax.texts if t.get_text().startswith("CD = ")]
    longer = cd > k - 1
    assert (k, n, longer) in ((10, 12, False), (3, 2, True), (26, 2, True))
    assert label == (f"CD = {cd:.2f}, longer than the rank axis (1 to {k}): no two methods can differ" if longer
                     else f"CD = {cd:.2f}")


# --------------------------------------------------------------------------- the CLI, two data sets


def test_cli_two_datasets_end_to_end_and_resumed(tmp_path, capsys, monkeypatch):
    feats = _feature_folder(tmp_path / "toy", seed=0)
    out = tmp_path / "board"
    grid = ["--methods", "an,em,bce", "--seeds", "0", "--lrs", "0.01,0.003", "--epochs", "2", "--subset", "200",
            "--jobs", "1", "--out", str(out), "--quiet"]
    args = ["benchmark", "--dataset", "yeast", "--dataset", str(feats), *grid]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "12 runs, 0 already finished" in printed and "average rank over 2 data sets" in printed
    # a table per data set, in its own folder, as a one-data-set benchmark writes it
    board = pd.read_csv(out / "leaderboard.csv").set_index("method")
    for name in ("yeast", "toy"):
        table = pd.read_csv(out / name / "table.csv").set_index("method")
        runs = pd.read_csv(out / name / "runs.csv")
        assert len(runs) == 6 and set(runs["dataset"]) == {"yeast" if name == "yeast" else str(feats)}
        assert set(table.index) == {"an", "em", "bce"}
        key = "yeast" if name == "yeast" else str(feats)
        for method in table.index:  # the leaderboard's number is the table's: the lr selected on val
            assert board.loc[method, f"{key} test_map"] == table.loc[method, "test_map"]
        # bce sees every label: shown with its score, not ranked; an and em are ranked between them
        ranks = table["test_map"].drop("bce").rank(ascending=False, method="average")
        assert board.loc[list(ranks.index), f"{key} rank"].tolist() == ranks.tolist()
        assert math.isnan(board.loc["bce", f"{key} rank"])
    assert board["reference"].to_dict() == {"an": False, "em": False, "bce": True}
    avg = (board["yeast rank"] + board[f"{feats} rank"]) / 2
    assert board["average_rank"].tolist()[:2] == pytest.approx(avg.tolist()[:2])
    assert board["average_rank"].iloc[:2].is_monotonic_increasing  # best first
    assert list(board.index)[2] == "bce" and math.isnan(board.loc["bce", "average_rank"])  # references last
    md = (out / "leaderboard.md").read_text()
    assert "No Friedman test" in md and "2 data sets" in md and "![critical-difference diagram](leaderboard.png)" in md
    assert "| – | All P. & All N. (BCE) (reference, not ranked) | – |" in md and "Not ranked: All P. & All N. (BCE)" in md
    assert "Hyperparameters: each method's recipe defaults on every data set" in md  # yeast's em preset is not used
    assert (out / "leaderboard.png").is_file()
    saved = json.loads((out / "leaderboard.json").read_text())
    assert saved["friedman"] is None and saved["critical_difference"] == pytest.approx(critical_difference(2, 2))
    assert saved["references"] == ["bce"]
    from spmlkit.experiments.store import ResultsStore

    sources = {(r["dataset"], r["method"]): r.get("hparams_from") for r in ResultsStore(out / "results.db").records()}
    assert sources[("yeast", "em")] == "defaults"  # the record says so: yeast has an em preset it did not use
    assert sources[("yeast", "an")] is None and sources[(str(feats), "em")] is None  # no preset either way
    assert "Next: `spmlkit report --store" in " ".join(printed.split())

    # resumable: the same grid again, here named as a suite (--suite reads SUITES when the parser
    # is built), trains nothing and writes the same leaderboard
    before = {p: (out / p).read_bytes() for p in ("leaderboard.csv", "leaderboard.md", "yeast/table.csv")}
    monkeypatch.setitem(SUITES, "tiny", ("yeast", str(feats)))
    assert main(["benchmark", "--suite", "tiny", *grid]) == 0
    again = capsys.readouterr().out
    assert "benchmark tiny" in again and "12 runs, 12 already finished" in again and "12 finished runs reused" in again
    assert all((out / p).read_bytes() == b for p, b in before.items())
    # a data set's runs are its one-data-set benchmark's runs with the same hyperparameters: that benchmark
    # finds them all finished; with yeast's own presets (its default alone) em's 2 runs are others
    assert main(["benchmark", "--dataset", "yeast", "--hparams-from", "defaults", *grid]) == 0
    assert "6 runs, 6 already finished" in capsys.readouterr().out
    assert main(["benchmark", "--dataset", "yeast", "--methods", "an,em", *grid[2:]]) == 0
    assert "4 runs, 2 already finished" in capsys.readouterr().out


def test_cli_a_table_of_ones_own_beside_yeast_is_labelled_by_its_own_labels(tmp_path, capsys, monkeypatch):
    """yeast simulates single positives and selects on full labels; a table of one's own trains on its
    given labels and selects on observed ones. The leaderboard labelled both "(single_positive)", and
    the references, which the own table cannot train, were dropped on Yeast too, though the note named
    only the own table. (The default methods, cut to four here to be quick, are what the CLI drops
    references from: named ones are used as named.)"""
    from spmlkit.experiments import benchmark as bm

    feats = str(own_table(tmp_path, rows=200))  # --subset 200 takes Yeast's first 200 rows and all of these
    every = bm.default_methods
    monkeypatch.setattr(bm, "default_methods", lambda datasets, plugins=(), installed=False: tuple(
        m for m in every(datasets, plugins, installed=installed) if m in ("bce", "iun", "an", "em")))
    out = tmp_path / "board"
    capsys.readouterr()
    assert main(["benchmark", "--dataset", "yeast", "--dataset", feats, "--seeds", "0", "--lrs", "0.01", "--epochs",
                 "2", "--subset", "200", "--jobs", "1", "--out", str(out), "--quiet"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert (f"note: left out bce, iun on {feats} only: references that need full labels, which it does not have; "
            "they run on yeast") in said
    assert "benchmark 2 data sets: 6 runs, 0 already finished" in said  # 4 methods on yeast, 2 on the table
    assert list(pd.read_csv(out / "yeast" / "table.csv")["method"]) == ["bce", "iun", "an", "em"]
    assert list(pd.read_csv(out / "mytable" / "table.csv")["method"]) == ["an", "em"]
    md = (out / "leaderboard.md").read_text()
    assert md.startswith(f"**Leaderboard over yeast (single_positive), {feats} (given): test mAP (%)")
    assert "(single_positive)" not in md.split(f"{feats} (given)")[1].split("\n")[0]
    for line in ("yeast: trained on the single_positive observation of its full labels, test mAP (%) on the test "
                 "list's full labels; lr selected on the validation rows' full labels.",
                 f"{feats}: trained on its own labels (given), test mAP (%) on the test list's full labels; lr "
                 "selected on the observed positives of the validation rows.",
                 f"The references bce, iun ran on yeast only: {feats} has no full labels to train them on."):
        assert line in md and " ".join(line.split()) in said
    board = pd.read_csv(out / "leaderboard.csv").set_index("method")
    assert board.loc["bce", "yeast test_map"] > 0 and math.isnan(board.loc["bce", f"{feats} test_map"])
    assert json.loads((out / "leaderboard.json").read_text())["references"] == ["bce", "iun"]


def test_cli_refuses_a_dataset_named_twice(tmp_path, capsys):
    args = ["--methods", "an", "--seeds", "0", "--lrs", "0.01", "--epochs", "1", "--quiet",
            "--out", str(tmp_path / "o")]
    assert main(["benchmark", "--dataset", "yeast", "--dataset", "yeast", *args]) == 2
    err = capsys.readouterr().err
    assert "--dataset yeast is given twice" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # refused before any run
    with pytest.raises(SystemExit) as stop:  # a suite and data sets at once: which did the user mean?
        main(["benchmark", "--suite", "mulan", "--dataset", "yeast", *args])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_references_are_shown_beside_the_ranks_not_ranked(tmp_path):
    """bce sees every label and wins everywhere: ranked, it alone would make the methods "differ"."""
    scores = _scores([[90, 60, 61, 59], [80, 50, 49, 52], [70, 40, 41, 39], [85, 55, 54, 56], [75, 45, 46, 44]],
                     ["bce", "an", "em", "role"], ["a", "b", "c", "d", "e"])
    spread = scores * 0 + 0.5
    board = build_leaderboard(scores, references=("bce", "iun"), spread=spread)
    assert board.references == ["bce"] and list(board.ranks.columns) == ["an", "em", "role"]
    assert board.ranks.loc["a"].tolist() == [2, 1, 3]
    assert board.friedman.n_methods == 3
    # ranked, bce is first on all 5 (average rank 1), an 3, em 2.8, role 3.2:
    # chi2 = 12 * 5 / (4 * 5) * (1 + 9 + 7.84 + 10.24 - 4 * 25 / 4) = 9.24, p = 0.026 with 3 df
    ranked = build_leaderboard(scores)
    assert ranked.average_rank["bce"] == 1 and ranked.friedman.statistic == pytest.approx(9.24)
    assert ranked.friedman.pvalue == pytest.approx(0.02626, abs=1e-5) and board.friedman.pvalue > 0.5
    md = to_markdown(board)
    assert "| – | All P. & All N. (BCE) (reference, not ranked) | – | 90.00 ± 0.50 | 80.00 ± 0.50 |" in md
    assert "| 1 | " in md and "Not ranked: All P. & All N. (BCE), references that see more labels" in md
    assert "`spmlkit benchmark --rank-references` ranks them" in md


def test_scores_that_read_the_same_tie():
    """Ranked as printed, to 0.01 points: 73.736086 and 73.736019 are one number to a reader."""
    scores = _scores([[73.736086, 73.736019, 70.0], [60.0, 60.0, 61.0], [50.0, 50.0, 40.0]], ["l2r", "an", "em"])
    board = build_leaderboard(scores)
    assert board.ranks.loc["d0"].tolist() == [1.5, 1.5, 3]
    assert board.average_rank["l2r"] == board.average_rank["an"]
    assert build_leaderboard(scores, decimals=None).ranks.loc["d0"].tolist() == [1, 2, 3]


def test_tied_methods_share_a_split_dot_and_say_tied(tmp_path):
    from matplotlib.colors import to_hex

    from spmlkit.experiments.cd_diagram import tie_groups

    # an and l2r tie on every data set: equal average ranks, which drew one dot over the other
    scores = _scores([[70, 70, 65, 60], [50, 50, 55, 40], [30, 30, 20, 25]], ["an", "l2r", "em", "role"])
    board = build_leaderboard(scores)
    assert tie_groups(board.average_rank.rename(index=lambda m: m)) == [["an", "l2r"]]
    fig = diagram(board)
    ax = fig.axes[0]
    at = board.average_rank["an"]
    dots = [c for c in ax.collections if np.allclose(c.get_offsets(), [[at, 0]])]
    elbow = {t.get_text(): t.get_color() for t in ax.texts}
    tied = {text: colour for text, colour in elbow.items() if "tied" in text}
    assert sorted(tied) == [f"AN ({at:.2f}, tied)", f"L2R ({at:.2f}, tied)"]
    assert len(dots) == 2 and {to_hex(d.get_facecolor()[0]) for d in dots} == {to_hex(c) for c in tied.values()}
    # two halves of one dot (two equal round markers would be one drawn over the other)
    halves = [d.get_paths()[0].vertices for d in dots]
    assert not np.array_equal(halves[0], halves[1]) and all(v[:, 0].min() > -0.6 and v[:, 0].max() < 0.6 for v in halves)
    assert {round(float(np.sign(v[np.abs(v[:, 0]) > 0.2, 0]).mean())) for v in halves} == {-1, 1}  # left, right
    save_png(fig, tmp_path / "ties.png")


@pytest.mark.parametrize("first, second, why", [
    ("emotions", "mulan/emotions", "mulan/emotions is another name for emotions"),
    ("mulan/yeast", "yeast", "river's copy of yeast and MULAN's own files hold the same arrays"),
    ("FOLDER", "FOLDER/", "both are the folder "),
])
def test_cli_refuses_one_data_set_under_two_names_with_advice_that_applies(tmp_path, capsys, first, second, why):
    """Two names of one data set would train it twice and rank it twice; "give the feature folders distinct
    names" cannot apply to two names of a MULAN set. Refused before anything is written, --out included."""
    folder = _feature_folder(tmp_path / "feats", seed=1)
    first, second = (str(folder) if a == "FOLDER" else str(folder) + "/" if a == "FOLDER/" else a
                     for a in (first, second))
    out = tmp_path / "o"
    assert main(["benchmark", "--dataset", first, "--dataset", second, "--methods", "an", "--seeds", "0", "--lrs",
                 "0.01", "--epochs", "1", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"--dataset {first} and --dataset {second} are the same data set ({why}" in err and err.endswith(
        "; name it once")
    assert not out.exists()


def test_cli_refuses_a_feature_folder_named_as_a_file_the_benchmark_keeps_before_any_run(tmp_path, capsys):
    """A feature folder named results.db would have its tables written over the benchmark's store: it used to
    fail only after every run trained."""
    feats = _feature_folder(tmp_path / "results.db", seed=1)
    out = tmp_path / "o"
    assert main(["benchmark", "--dataset", "yeast", "--dataset", str(feats), "--methods", "an", "--seeds", "0",
                 "--lrs", "0.01", "--epochs", "1", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"the tables of data set {feats} would go to {out / 'results.db'}, which is the benchmark's "
                        "own results.db; give the feature folder another name (or a link to it)")
    assert not out.exists()


# --------------------------------------------------------------------------- what the benchmark's runs decide

#: each method's test mAP (%) on the three data sets: the references see more labels and score higher
SUITE_SCORES = {"bce": 90.0, "iun": 80.0, "an": 50.0, "em": 55.0, "role": 52.0, "em_apl": 60.0}


def _suite_leaderboard(tmp_path, *, observation=None, failing=()):
    """A three-set benchmark through the path `spmlkit benchmark` takes (its specs, its store, its tables,
    :func:`write_suite_outputs`), with the store's records written here instead of trained: the methods
    ``failing`` failed every run, the others scored :data:`SUITE_SCORES` (+ the set's number)."""
    from spmlkit.experiments.benchmark import BenchmarkSpec, write_suite_outputs
    from spmlkit.experiments.store import ResultsStore
    from spmlkit.experiments.sweep import expand

    out = tmp_path / "board"
    out.mkdir(parents=True)
    specs = [BenchmarkSpec(dataset=str(_feature_folder(tmp_path / f"set{i}", seed=i)), methods=tuple(SUITE_SCORES),
                           seeds=(0, 1), lrs=(0.01,), epochs=1, observation=observation) for i in range(3)]
    store = ResultsStore(out / "results.db")
    for i, spec in enumerate(specs):
        for run in expand(spec.sweep(store.path)):
            if run["method"] in failing:
                store.add({**run, "status": "failed", "error": f"ValueError: {run['method']} broke\nmore lines"})
            else:
                test = SUITE_SCORES[run["method"]] + i + run["seed"] / 10
                store.add({**run, "status": "ok", "val_map": test / 100, "test_map": test / 100, "best_epoch": 1,
                           "history": [], "test_metrics": {}})
    tables, board, paths = write_suite_outputs(out, specs, store.path)
    return board, paths


def test_a_method_whose_every_run_failed_is_named_with_its_reason(tmp_path):
    """em_apl failed all 6 of its runs: leaderboard.md and .json never named it, while
    docs/leaderboard.md says the Markdown names each left-out method with its reason."""
    board, paths = _suite_leaderboard(tmp_path, failing=("em_apl",))
    why = "method none of whose 6 runs on 3 data sets finished; the first error: ValueError: em_apl broke"
    assert board.left_out == {"em_apl": why}
    assert json.loads(paths["json"].read_text())["left_out"] == {"em_apl": why}
    md = paths["markdown"].read_text()
    assert f"Left out of the ranks: em_apl ({why})." in md
    assert "| – | EM+APL | – | – | – | – |" in md  # its row, without a number
    assert list(board.ranks.columns) == ["an", "em", "role"] and len(board.ranks) == 3


def test_the_references_come_from_the_methods_declaration_unless_every_label_is_observed(tmp_path):
    """Which methods are references is what each method declares (`Method.sees_more_labels`: bce sees
    every label, iun one positive and every negative), read by the benchmark itself, not passed by
    hand; under observation `full` every method sees every label, and all are ranked."""
    board, _ = _suite_leaderboard(tmp_path / "sp")
    assert board.references == ["bce", "iun"], "the references are not the methods that see more labels"
    assert list(board.ranks.columns) == ["an", "em", "role", "em_apl"]
    assert [m for m in SUITE_SCORES if METHODS[m].sees_more_labels] == ["bce", "iun"]
    full, _ = _suite_leaderboard(tmp_path / "full", observation="full")
    assert full.references == [], "under observation full a method was left unranked as a reference"
    assert list(full.average_rank.index) == ["bce", "iun", "em_apl", "em", "role", "an"]


def test_with_no_score_anywhere_the_note_says_so_and_not_that_all_are_references():
    nothing = _scores([[math.nan, math.nan], [math.nan, math.nan]], ["an", "em"])
    assert build_leaderboard(nothing).notes == ["no method has a finished run on any data set, so nothing is ranked"]
    with_refs = _scores([[90, math.nan, math.nan], [91, math.nan, math.nan]], ["bce", "an", "em"])
    board = build_leaderboard(with_refs, references=("bce",))
    assert board.notes == ["no method but the references has a finished run on any data set, so nothing is ranked"]
    assert build_leaderboard(with_refs[["bce"]], references=("bce",)).notes == [
        "every method here is a reference, so nothing is ranked (rank_references ranks them)"]
