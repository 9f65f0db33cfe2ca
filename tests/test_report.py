"""Tests for spmlkit.experiments.report and .published on a small fabricated store."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spmlkit.experiments import published as P
from spmlkit.experiments.report import paper_table, select_and_aggregate, to_csv, to_latex, to_markdown
from spmlkit.experiments.store import ResultsStore


def rec(run_id: str, method: str, seed: int, val: float, test: float, *, dataset: str = "voc2012",
        lr: float = 1e-3, hparams: dict[str, Any] | None = None, status: str = "ok", **over: Any) -> dict[str, Any]:
    r = {"run_id": run_id, "status": status, "dataset": dataset, "method": method,
         "observation": "single_positive", "seed": seed, "lr": lr, "batch_size": 8,
         "hparams": hparams or {}, "val_map": val, "test_map": test,
         "test_metrics": {"map": test, "CF1@0.5": test / 2}}
    r.update(over)
    return r


@pytest.fixture()
def df(tmp_path: Path) -> pd.DataFrame:
    store = ResultsStore(tmp_path / "runs.sqlite")
    runs = [
        # VOC: references
        rec("bce0", "bce", 0, 0.90, 0.90), rec("bce1", "bce", 1, 0.90, 0.90), rec("bce2", "bce", 2, 0.90, 0.90),
        rec("an0", "an", 0, 0.70, 0.80), rec("an1", "an", 1, 0.72, 0.82),
        # EM, config A (lr 1e-3): mean val 0.82, test 85/86/88 -> chosen
        rec("emA0", "em", 0, 0.80, 0.85), rec("emA1", "em", 1, 0.82, 0.86), rec("emA2", "em", 2, 0.84, 0.88),
        # EM, config B (lr 1e-2): better test (95) but worse mean val (0.80) -> not chosen
        rec("emB0", "em", 0, 0.79, 0.95, lr=1e-2), rec("emB1", "em", 1, 0.80, 0.95, lr=1e-2),
        rec("emB2", "em", 2, 0.81, 0.95, lr=1e-2),
        # EM, config C: best single seed on val (0.99) but only with a NaN seed -> never chosen
        rec("emC0", "em", 0, 0.99, 0.99, lr=1e-4), rec("emC1", "em", 1, float("nan"), 0.99, lr=1e-4),
        # a failed run is ignored
        rec("emF", "em", 3, 0.0, 0.0, status="failed", error="RuntimeError: boom", val_map=None, test_map=None),
        # COCO: EM+APL configs differ only in hparams: alpha 0.2 wins on val
        rec("c_an", "an", 0, 0.50, 0.60, dataset="coco2014"),
        rec("c_em", "em", 0, 0.55, 0.70, dataset="coco2014"),
        rec("c_apl1", "em_apl", 0, 0.50, 0.80, dataset="coco2014", hparams={"alpha": 0.1}),
        rec("c_apl2", "em_apl", 0, 0.56, 0.72, dataset="coco2014", hparams={"alpha": 0.2}),
    ]
    for r in runs:
        store.add(r)
    return store.to_dataframe()


def test_select_and_aggregate_numbers(df: pd.DataFrame) -> None:
    agg = select_and_aggregate(df)
    # canonical order: datasets VOC, COCO; methods bce, an, em, em_apl
    assert list(zip(agg["dataset"], agg["method"])) == [
        ("voc2012", "bce"), ("voc2012", "an"), ("voc2012", "em"),
        ("coco2014", "an"), ("coco2014", "em"), ("coco2014", "em_apl"),
    ]
    em = agg[(agg.dataset == "voc2012") & (agg.method == "em")].iloc[0]
    # test 85, 86, 88: mean 259/3; population std sqrt(((-4/3)^2 + (-1/3)^2 + (5/3)^2) / 3) = sqrt(14/9)
    assert em["mean"] == pytest.approx(259 / 3, abs=1e-9)
    assert em["std"] == pytest.approx(math.sqrt(14 / 9), abs=1e-9)
    assert em["lr"] == 1e-3  # not config B (better test, worse mean val), not C (NaN val)
    assert em["n_seeds"] == 3 and em["seeds"] == [0, 1, 2] and em["n_configs"] == 3
    assert em["select_mean"] == pytest.approx(82.0, abs=1e-9)
    assert sorted(em["run_ids"]) == ["emA0", "emA1", "emA2"]
    an = agg[(agg.dataset == "voc2012") & (agg.method == "an")].iloc[0]
    assert an["mean"] == pytest.approx(81.0, abs=1e-9) and an["std"] == pytest.approx(1.0, abs=1e-9)
    apl = agg[agg.method == "em_apl"].iloc[0]
    assert apl["hparams"] == {"alpha": 0.2} and apl["mean"] == pytest.approx(72.0, abs=1e-9)
    assert apl["std"] == 0.0 and apl["n_seeds"] == 1


def test_runs_of_equal_hparams_from_two_sources_are_two_configurations() -> None:
    """yeast's em with its preset (alpha 0.005, hparams {}) and with the recipe defaults (alpha 0.1, also
    hparams {}, the record saying hparams_from "defaults"): two configurations, never one of 6 seeds."""
    runs = [rec(f"p{s}", "em", s, 0.42, 0.41) for s in range(3)]
    runs += [rec(f"d{s}", "em", s, 0.40, 0.30, hparams_from="defaults") for s in range(3)]
    agg = select_and_aggregate(pd.DataFrame(runs))
    (row,) = agg.to_dict("records")
    assert row["n_configs"] == 2 and row["n_seeds"] == 3 and row["mean"] == pytest.approx(41.0)
    assert math.isnan(row["hparams_from"]) if isinstance(row["hparams_from"], float) else row["hparams_from"] is None


def test_select_other_metric_and_ties(df: pd.DataFrame) -> None:
    agg = select_and_aggregate(df, metric="test.CF1@0.5")
    em = agg[(agg.dataset == "voc2012") & (agg.method == "em")].iloc[0]
    assert em["mean"] == pytest.approx(259 / 6, abs=1e-9) and em["metric"] == "test.CF1@0.5"
    # equal mean val: the configuration with more seeds wins, whatever the row order
    tie = pd.DataFrame([
        {"dataset": "d", "observation": "o", "method": "m", "lr": 0.1, "seed": 0, "val_map": 0.5, "test_map": 0.1},
        {"dataset": "d", "observation": "o", "method": "m", "lr": 0.2, "seed": 0, "val_map": 0.5, "test_map": 0.2},
        {"dataset": "d", "observation": "o", "method": "m", "lr": 0.2, "seed": 1, "val_map": 0.5, "test_map": 0.4},
    ])
    for frame in (tie, tie.iloc[::-1]):
        row = select_and_aggregate(frame).iloc[0]
        assert row["lr"] == 0.2 and row["mean"] == pytest.approx(30.0) and row["std"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match="column"):
        select_and_aggregate(tie, metric="test.nope")


def test_paper_table_marks_best_and_gap(df: pd.DataFrame) -> None:
    table = paper_table(select_and_aggregate(df))
    assert list(table.index) == ["All P. & All N. (BCE)", "AN", "EM", "EM+APL"]
    assert list(table.columns) == ["VOC", "VOC gap closed", "COCO"]  # COCO lacks bce: no gap column
    assert table.loc["EM", "VOC"] == "86.33 ± 1.25"
    assert table.loc["AN", "VOC"] == "81.00 ± 1.00"
    assert table.loc["EM+APL", "VOC"] == "–"
    # gap = (86.333 - 81) / (90 - 81) = 59.26 %
    assert table.loc["EM", "VOC gap closed"] == "+59%"
    assert table.loc["AN", "VOC gap closed"] == "+0%"
    assert table.loc["All P. & All N. (BCE)", "VOC gap closed"] == "+100%"
    # bce (90) is excluded from "best": EM is best on VOC, EM+APL on COCO
    assert sorted(table.attrs["bold"]) == [("EM", "VOC"), ("EM+APL", "COCO")]

    md = to_markdown(table)
    lines = md.splitlines()
    assert lines[0] == "| method | VOC | VOC gap closed | COCO |"
    assert lines[1] == "|---|---|---|---|"
    # COCO's cells come from one seed each: a mean without a made-up "± 0.00"
    assert "| EM | **86.33 ± 1.25** | +59% | 70.00 |" in lines
    assert "| EM+APL | – | – | **72.00** |" in lines
    assert table.attrs["notes"] == ["gap closed = (method − AN) / (full BCE − AN), in percent.",
                                    "Cells without ± come from one seed, which gives no standard deviation."]

    tex = to_latex(table, caption="mAP (%) & more", label="tab:main")
    assert r"\begin{tabular}{lccc}" in tex
    assert r"EM & \textbf{86.33 $\pm$ 1.25} & +59\% & 70.00 \\" in tex
    assert r"All P. \& All N. (BCE) & 90.00 $\pm$ 0.00 & +100\% & -- \\" in tex
    assert r"\caption{mAP (\%) \& more}" in tex and r"\label{tab:main}" in tex
    assert tex.count(r"\textbf") == 2


def _references(bce: list[float], an: list[float], em: float = 0.60) -> pd.DataFrame:
    runs = [rec(f"bce{i}", "bce", i, 0.9, t) for i, t in enumerate(bce)]
    runs += [rec(f"an{i}", "an", i, 0.8, t) for i, t in enumerate(an)]
    runs += [rec(f"em{i}", "em", i, 0.8, em) for i in range(len(an))]
    return select_and_aggregate(pd.DataFrame(runs))


@pytest.mark.parametrize("bce, an, why", [
    # BCE 75.0, AN 74.5, each a sample std of 1.0 over 3 seeds: standard error of the difference
    # sqrt(1/3 + 1/3) = 0.816, twice that 1.63 > 0.50
    ([0.74, 0.75, 0.76], [0.735, 0.745, 0.755],
     "BCE − AN = +0.50 points is within noise (2 standard errors of the difference over the seeds: 1.63 points), "
     "so a share of it would be noise"),
    # AN above BCE by far more than the noise: nothing to close
    ([0.70, 0.71, 0.72], [0.80, 0.81, 0.82],
     "BCE − AN = -10.00 points: full labels score below AN here, so there is no gap to close"),
    # one seed each: no spread to judge the 20 points against
    ([0.90], [0.70], "BCE − AN = +20.00 points from a single seed, with no spread over seeds to tell it from noise "
                     "(the default seeds 0,1,2 give one)"),
])
def test_a_gap_within_noise_is_not_divided_by_and_says_why(bce, an, why) -> None:
    table = paper_table(_references(bce, an))
    assert list(table.columns) == ["VOC"]  # no column of noise quotients (scene once read -1440 %)
    assert f"VOC: no gap-closed column: {why}." in table.attrs["notes"]
    assert not any(note.startswith("gap closed =") for note in table.attrs["notes"])  # no formula for no column


def test_a_gap_beyond_noise_is_shown():
    # BCE − AN = 0.60 points against 2 standard errors of 2 * sqrt(0.01/3 + 0.01/3) = 0.163: shown
    table = paper_table(_references([0.749, 0.750, 0.751], [0.743, 0.744, 0.745], em=0.747))
    assert table.loc["EM", "VOC gap closed"] == f"{100 * (74.7 - 74.4) / 0.6:+.0f}%" == "+50%"


def test_paper_table_reference_and_plain_names(df: pd.DataFrame, tmp_path: Path) -> None:
    agg = select_and_aggregate(df)
    table = paper_table(agg[agg.dataset == "voc2012"], reference="EM", gap_closed=False, pretty=False, decimals=1)
    assert list(table.columns) == ["voc2012", "voc2012 (EM)", "voc2012 Δ"]
    assert table.loc["em", "voc2012"] == "86.3 ± 1.2"
    assert table.loc["em", "voc2012 (EM)"] == "89.1 ± 0.2"
    assert table.loc["em", "voc2012 Δ"] == f"{259 / 3 - 89.09:+.1f}" == "-2.8"
    assert table.loc["an", "voc2012 (EM)"] == "85.9 ± 0.4"
    assert table.loc["bce", "voc2012 Δ"] == f"{90 - 89.42:+.1f}"
    text = to_csv(table, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text(encoding="utf-8") == text
    assert text.splitlines()[0] == "method,voc2012,voc2012 (EM),voc2012 Δ"
    assert "**" not in text
    # ties after rounding are all marked
    tie = pd.DataFrame({"method": ["an", "em"], "dataset": ["d", "d"], "mean": [70.004, 69.996], "std": [0.0, 0.0]})
    assert sorted(paper_table(tie, decimals=2).attrs["bold"]) == [("AN", "d"), ("EM", "d")]


def test_paper_table_rejects_ambiguous_cells(df: pd.DataFrame) -> None:
    agg = select_and_aggregate(df)
    two_obs = pd.concat([agg, agg.assign(observation="full")])
    with pytest.raises(ValueError, match="observation"):
        paper_table(two_obs)


def test_published_lookups() -> None:
    hits = P.published("em_apl", "voc2012", source="EM")
    assert hits == [P.Published("EM", 89.19, 0.31, "EM Table 1", "single_positive")]
    assert hits[0].mean == 89.19 and hits[0].std == 0.31
    assert {h.source for h in P.published("em_apl", "voc2012")} == {"EM", "OPML", "GR", "CRISP"}
    assert P.published("em", "voc2012", source="GR")[0].mean == 88.67  # differs from EM's 89.09
    assert P.published("gr", "coco2014")[0][1:3] == (73.17, 0.36)
    assert P.published("opml_sp", "cub")[0].mean == 24.11
    assert P.published("ll_r", "voc2012", source="OPML")[0].mean == 88.79
    assert P.published("ll_r", "voc2012", source="GR")[0].mean == 89.15
    assert P.published("zlpr", "nuswide", source="OPML Table III")[0][1:3] == (47.72, 0.14)
    full = P.published("focal", "cub", observation="full")
    assert full == [P.Published("OPML", 33.36, 0.05, "OPML Table V", "full")]
    assert P.published("iun", "coco2014", source="EM")[0].mean == 71.39
    assert P.published("role_li", "nuswide")[0].mean == 45.98
    pu = P.published("pu_mlc", "voc2007", observation="ratio=0.1")
    assert pu == [P.Published("PU-MLC", 88.0, None, "PU-MLC Table I", "ratio=0.1")]
    assert P.published("asl", "coco2014", observation="ratio=0.9")[0].mean == 79.7
    assert P.published("hill", "nuswide") == []  # "–" in GR Table 2
    assert [(r.mean, r.std) for r in P.published_rows("an_ls", "cub", source="GR Table 2")] == [(16.45, 0.27)]
    keys = {(r.table, r.method, r.dataset, r.observation) for r in P.PUBLISHED_ROWS}
    assert len(keys) == len(P.PUBLISHED_ROWS)  # no number is transcribed twice
    with pytest.raises(ValueError, match="unknown source"):
        P.published("em", "voc2012", source="XYZ")
    assert P.display_name("em_apl") == "EM+APL" and P.display_name("mine") == "mine"


def test_the_threshold_table_names_degenerate_thresholds_and_in_how_many_runs(tmp_path: Path) -> None:
    """A cell of F1 at a threshold that decided every test label positive (or none) in some of its runs
    says so: that F1 measures the labels' frequency, not the model."""
    from spmlkit.experiments.report import threshold_table

    def metrics(rate_val: float, rate_half: float) -> dict[str, float]:
        return {"map": 0.5, "OF1@0.5": 0.4, "CF1@0.5": 0.3, "predicted_positive@0.5": rate_half,
                "OF1@val_global": 0.72, "CF1@val_global": 0.7, "predicted_positive@val_global": rate_val}

    store = ResultsStore(tmp_path / "runs.sqlite")
    for seed, (rate_val, rate_half) in enumerate([(1.0, 0.0), (1.0, 0.2), (0.4, 0.3)]):
        store.add(rec(f"an{seed}", "an", seed, 0.5, 0.5, dataset="photos", test_metrics=metrics(rate_val, rate_half)))
    store.add(rec("em0", "em", 0, 0.5, 0.5, dataset="photos", test_metrics=metrics(0.5, 0.5)))
    table = threshold_table(store.to_dataframe()).set_index("method")
    assert table.loc["an", "OF1 @val (global t)"].endswith(" (degenerate: every label on in 2 of 3 runs)")
    assert table.loc["an", "OF1 @0.5"].endswith(" (degenerate: no label on in 1 of 3 runs)")
    assert "degenerate" not in table.loc["em", "OF1 @val (global t)"] + table.loc["em", "OF1 @0.5"]
