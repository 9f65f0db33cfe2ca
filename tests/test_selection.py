"""Selection rules (docs/protocol.md, "Selection rules"): ``val_map`` and SMILE's ``Best.select``
(``smile_votes``), as a reading of stored runs: which epoch of a run, and which configuration of a
grid, a table reports."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from spmlkit.experiments.report import select_and_aggregate
from spmlkit.experiments.selection import (RULES, choose_by_votes, needs_epoch_metrics, read_at, selected_epoch,
                                           vote)

_ORDER = ("hamming_loss@0.5", "coverage", "example_ap", "ranking_loss", "one_error")


def _epoch(epoch: int, hamming: float, coverage: float, ap: float, ranking: float, one_error: float, **more) -> dict:
    values = dict(zip(_ORDER, (hamming, coverage, ap, ranking, one_error)))
    return {"epoch": epoch, **{f"val.smile.{k}": v for k, v in values.items()}, **more}


def test_the_epoch_most_measures_vote_for_wins():
    history = [_epoch(1, 0.30, 0.50, 0.60, 0.20, 0.30),
               _epoch(2, 0.25, 0.45, 0.70, 0.18, 0.28),  # best in four measures
               _epoch(3, 0.26, 0.46, 0.72, 0.19, 0.29)]  # best in average precision only
    assert selected_epoch(history, "smile_votes") == 2
    assert vote(history) == 1


def test_a_tie_between_epochs_goes_to_the_one_the_earliest_measure_voted_for():
    # Hamming loss and AP vote for epoch 3, coverage and ranking loss for epoch 2, one-error for epoch 1:
    # 2 votes against 2, and Hamming loss comes first in the voting order
    history = [_epoch(1, 0.30, 0.50, 0.60, 0.20, 0.10),
               _epoch(2, 0.29, 0.40, 0.61, 0.15, 0.20),
               _epoch(3, 0.20, 0.45, 0.70, 0.17, 0.25)]
    assert selected_epoch(history, "smile_votes") == 3
    # the same with coverage first among the tied: swap which epoch Hamming loss prefers
    history[1]["val.smile.hamming_loss@0.5"], history[2]["val.smile.hamming_loss@0.5"] = 0.20, 0.29
    # now Hamming loss, coverage, ranking loss vote for epoch 2: three votes
    assert selected_epoch(history, "smile_votes") == 2


def test_five_different_votes_take_average_precisions_epoch_as_the_code_does():
    # each measure best at another epoch: Best.select falls back to its default, AveragePrecision
    history = [_epoch(1, 0.10, 0.50, 0.60, 0.30, 0.30),
               _epoch(2, 0.20, 0.40, 0.61, 0.30, 0.30),
               _epoch(3, 0.20, 0.50, 0.70, 0.30, 0.30),
               _epoch(4, 0.20, 0.50, 0.60, 0.10, 0.30),
               _epoch(5, 0.20, 0.50, 0.60, 0.30, 0.10)]
    assert selected_epoch(history, "smile_votes") == 3


def test_an_equal_value_later_does_not_take_the_vote_and_nan_gives_none():
    # every measure is equal at epochs 1 and 2: each votes for the first (strictly better only)
    history = [_epoch(1, 0.2, 0.4, 0.6, 0.2, 0.3), _epoch(2, 0.2, 0.4, 0.6, 0.2, 0.3)]
    assert selected_epoch(history, "smile_votes") == 1
    history = [_epoch(1, math.nan, math.nan, 0.6, math.nan, math.nan), _epoch(2, math.nan, math.nan, 0.7, 0.1, 0.2)]
    assert selected_epoch(history, "smile_votes") == 2
    with pytest.raises(ValueError, match="no candidate holds any of the measures"):
        vote([{"epoch": 1}])


def test_val_map_is_the_runs_own_best_epoch_and_unknown_rules_are_named():
    assert selected_epoch([], "val_map", best_epoch=7) == 7
    assert set(RULES) == {"val_map", "smile_votes"}
    assert needs_epoch_metrics("smile_votes") and not needs_epoch_metrics("val_map")
    with pytest.raises(ValueError, match="unknown selection rule 'best'; choose one of val_map, smile_votes"):
        selected_epoch([], "best")


def _run(run_id: str, lr: float, seed: int, history: list[dict], best_epoch: int, **more) -> dict:
    return {"run_id": run_id, "dataset": "yeast", "observation": "single_positive", "method": "an", "lr": lr,
            "batch_size": 8, "seed": seed, "status": "ok", "history": history, "best_epoch": best_epoch,
            "val_map": history[best_epoch - 1]["val_map"], "test_map": history[best_epoch - 1]["test.map"], **more}


def _with_test(entry: dict, val_map: float, test_map: float, test_ap: float) -> dict:
    return {**entry, "val_map": val_map, "test.map": test_map, "test.smile.example_ap": test_ap,
            "test.example_ap": test_ap + 0.001}


def test_read_at_reports_the_voted_epochs_test_values_and_nothing_measured_elsewhere():
    history = [_with_test(_epoch(1, 0.30, 0.50, 0.60, 0.20, 0.30), 0.40, 0.41, 0.61),
               _with_test(_epoch(2, 0.25, 0.45, 0.70, 0.18, 0.28), 0.39, 0.42, 0.71),
               _with_test(_epoch(3, 0.26, 0.46, 0.72, 0.19, 0.29), 0.45, 0.43, 0.73)]
    runs = pd.DataFrame([_run("a", 0.01, 0, history, 3, **{"test.smile.example_ap": 0.73, "test.OF1@val_global": 0.5})])
    by_map = read_at(runs, "val_map")
    assert by_map["selected_epoch"].tolist() == [3.0]
    assert by_map["test.smile.example_ap"].tolist() == [0.73] and by_map["test.OF1@val_global"].tolist() == [0.5]
    assert by_map["val.smile.example_ap"].tolist() == [0.72]
    by_votes = read_at(runs, "smile_votes")
    assert by_votes["selected_epoch"].tolist() == [2.0]
    assert by_votes[["test_map", "val_map", "test.smile.example_ap", "test.example_ap"]].iloc[0].tolist() == \
        pytest.approx([0.42, 0.39, 0.71, 0.711])
    assert math.isnan(by_votes["test.OF1@val_global"].iloc[0])  # not measured at epoch 2: not read from epoch 3
    assert runs["test_map"].tolist() == [0.43]  # the input is left as it was
    bare = pd.DataFrame([_run("b", 0.01, 0, [{"epoch": 1, "val_map": 0.4, "test.map": 0.4}], 1)])
    with pytest.raises(ValueError, match=r"run b \(an, yeast\) recorded no per-epoch validation measures, which "
                                         r"selection rule 'smile_votes' reads: it trained without epoch_metrics"):
        read_at(bare, "smile_votes")


def test_across_a_grid_each_measure_votes_for_a_configuration_by_its_mean_over_seeds():
    good = [{f"val.smile.{k}": v for k, v in zip(_ORDER, (0.2, 0.4, 0.7, 0.15, 0.25))}] * 2
    one_better = [{f"val.smile.{k}": v for k, v in zip(_ORDER, (0.3, 0.5, 0.75, 0.2, 0.3))}] * 2
    assert choose_by_votes({"lr=0.01": one_better, "lr=0.001": good}) == "lr=0.001"
    # a NaN in one seed takes that configuration out of that measure's vote
    holed = [dict(good[0]), {**good[0], "val.smile.hamming_loss@0.5": math.nan, "val.smile.coverage": math.nan,
                              "val.smile.ranking_loss": math.nan, "val.smile.one_error": math.nan}]
    assert choose_by_votes({"lr=0.01": one_better, "lr=0.001": holed}) == "lr=0.01"


def test_select_and_aggregate_under_smile_votes_chooses_and_reports_by_the_vote():
    def history(shift: float, best_ap_epoch_test: float) -> list[dict]:
        return [_with_test(_epoch(1, 0.30 + shift, 0.50, 0.60, 0.20, 0.30), 0.50, 0.41, 0.61),
                _with_test(_epoch(2, 0.25 + shift, 0.45 + shift, 0.70, 0.18 + shift, 0.28 + shift), 0.40, 0.42,
                           best_ap_epoch_test)]
    rows = [_run(f"{lr}-{seed}", lr, seed, history(0.0 if lr == 0.001 else 0.1, 0.70 + seed / 100), 1)
            for lr in (0.01, 0.001) for seed in (0, 1)]
    df = pd.DataFrame(rows)
    by_map = select_and_aggregate(df, metric="test_map", scale=1.0)
    assert by_map["mean"].tolist() == pytest.approx([0.41])  # val mAP is best at epoch 1, equal for both lrs
    by_votes = select_and_aggregate(df, metric="test.smile.example_ap", scale=1.0, rule="smile_votes")
    assert by_votes["lr"].tolist() == [0.001] and by_votes["mean"].tolist() == pytest.approx([0.705])
    assert by_votes["select_mean"].tolist() == pytest.approx([0.40])  # the voted epoch's val mAP, shown
    assert np.isclose(by_votes["std"].iloc[0], 0.005)


@pytest.mark.usefixtures("one_thread")
def test_a_run_with_epoch_metrics_records_every_epochs_measures_and_its_best_epoch_reads_as_its_result():
    """The history's test values at the best epoch are the run's reported ones (the same model, the
    same functions); alone and in a group alike."""
    from spmlkit.training import RunConfig, train
    from spmlkit.training.trainer import train_group

    settings = dict(dataset="yeast", method="an", epochs=3, subset=300, partition="random", head="mlp",
                    hidden="classes", standardize=False, epoch_metrics=True, batch_size=16, device="cpu")
    solo = train(RunConfig(**settings, lr=1e-2, seed=1))
    group = train_group([RunConfig(**settings, lr=lr, seed=1) for lr in (1e-2, 1e-3)])
    for result in (solo, *group):
        assert [e["epoch"] for e in result.history] == [1, 2, 3]
        for entry in result.history:
            assert {f"val.smile.{k}" for k in _ORDER} <= set(entry) and {f"test.smile.{k}" for k in _ORDER} <= set(entry)
            assert {"test.map", "test.ranking_loss", "test.example_ap", "test.coverage", "test.one_error",
                    "test.hamming_loss@0.5"} <= set(entry)
        best = result.history[result.best_epoch - 1]
        assert best["test.map"] == pytest.approx(result.test_map, abs=1e-12)
        for key in ("smile.example_ap", "smile.coverage", "smile.hamming_loss@0.5", "ranking_loss", "one_error"):
            assert best[f"test.{key}"] == pytest.approx(result.test_metrics[key], abs=1e-12)
    assert group[0].history[-1]["test.map"] == pytest.approx(solo.history[-1]["test.map"], abs=1e-5)
    # off by default: a run records only what it always did
    plain = train(RunConfig(**{**settings, "epoch_metrics": False}, lr=1e-2, seed=1))
    assert not any(k.startswith(("val.smile.", "test.")) for k in plain.history[0])


@pytest.mark.usefixtures("one_thread")
def test_sweep_report_and_benchmark_take_the_rule_by_name(tmp_path, capsys):
    """``sweep --select smile_votes`` records what the vote reads; ``report --select`` reads the same store
    under either rule; a store whose runs did not record it is refused in one line, nothing written."""
    from pathlib import Path

    from spmlkit.cli import main
    from spmlkit.experiments.store import ResultsStore

    grid = "name: s\ndatasets: [yeast]\nmethods: [an]\nseeds: [0, 1]\nlrs: [0.01, 0.001]\nsettings: {epochs: 3, subset: 300}\n"
    (tmp_path / "voted.yaml").write_text(grid + "store: voted.db\n")
    (tmp_path / "plain.yaml").write_text(grid + "store: plain.db\n")
    assert main(["sweep", str(tmp_path / "voted.yaml"), "--select", "smile_votes", "--jobs", "1", "--quiet"]) == 0
    assert f"spmlkit report --store {tmp_path / 'voted.db'} --select smile_votes" in " ".join(
        capsys.readouterr().out.split())
    runs = ResultsStore(tmp_path / "voted.db").to_dataframe()
    assert all(c["settings"]["epoch_metrics"] for c in runs["config"])
    assert all("val.smile.example_ap" in e for h in runs["history"] for e in h)
    assert main(["report", "--store", str(tmp_path / "voted.db"), "--select", "smile_votes", "--no-figures",
                 "--out", str(tmp_path / "r1")]) == 0
    title = (Path(tmp_path / "r1") / "table.md").read_text().splitlines()[0]
    assert "configuration and epoch selected on smile_votes" in title
    selected = pd.read_csv(tmp_path / "r1" / "selected_configs.csv")
    read = read_at(runs, "smile_votes")
    chosen = read[read["lr"] == selected["lr"].iloc[0]]
    assert selected["mean"].iloc[0] == pytest.approx(100 * chosen["test_map"].mean())
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "plain.yaml"), "--jobs", "1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", "--store", str(tmp_path / "plain.db"), "--select", "smile_votes",
                 "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recorded no per-epoch validation measures, which selection rule 'smile_votes' reads" \
        in err[0] and not (tmp_path / "r2").exists()
    assert main(["benchmark", "--dataset", "yeast", "--methods", "an", "--seeds", "0", "--lrs", "0.01", "--epochs", "2",
                 "--subset", "300", "--jobs", "1", "--select", "smile_votes", "--out", str(tmp_path / "b"),
                 "--quiet"]) == 0
    assert "epoch and lr selected by smile_votes" in (tmp_path / "b" / "table.md").read_text()
