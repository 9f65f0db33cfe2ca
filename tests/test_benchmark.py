"""Benchmark aggregation (hand-computed) and a CLI run on a small Yeast subset.

``spmlkit benchmark`` has no --device: it trains feature runs, which ``auto`` puts on the CPU
(training/plan.py), so the numbers compared here are the CPU's on any machine. ``spmlkit
train`` names the CPU."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from spmlkit.experiments.benchmark import BenchmarkSpec, gap_note, summarize
from spmlkit.cli import main


def _run(method, lr, seed, val, test, status="ok"):
    return {"run_id": f"{method}-{lr}-{seed}", "dataset": "yeast", "observation": "single_positive",
            "method": method, "lr": lr, "batch_size": 64, "hparams": {}, "seed": seed, "val_map": val,
            "test_map": test, "best_epoch": 2, "status": status}


def test_summarize_selects_lr_on_mean_val_and_reports_test_mean_std():
    runs = pd.DataFrame([
        _run("an", 0.1, 0, 0.50, 0.40), _run("an", 0.1, 1, 0.52, 0.42),
        _run("an", 0.01, 0, 0.49, 0.90), _run("an", 0.01, 1, 0.49, 0.90),   # better test, worse val: not chosen
        _run("bce", 0.1, 0, 0.70, 0.60), _run("bce", 0.1, 1, 0.70, 0.62),
        _run("em", 0.1, 0, 0.60, 0.50), _run("em", 0.1, 1, 0.62, 0.54),
        _run("em", 0.01, 0, 0.99, 0.99, status="failed"),                     # failures never count
    ])
    rows = {r["method"]: r for r in summarize(runs, ("bce", "an", "em"))[0]}
    assert rows["an"]["lr"] == 0.1
    assert rows["an"]["test_map"] == pytest.approx(41.0)
    assert rows["an"]["test_map_std"] == pytest.approx(1.0)        # population std of 40, 42
    assert rows["an"]["val_map"] == pytest.approx(51.0)
    assert rows["bce"]["test_map"] == pytest.approx(61.0)
    assert rows["em"]["test_map"] == pytest.approx(52.0) and rows["em"]["lr"] == 0.1
    assert rows["em"]["gap_closed"] == pytest.approx((52 - 41) / (61 - 41))
    assert rows["an"]["gap_closed"] == 0 and rows["bce"]["gap_closed"] == 1


def test_one_selection_rule_ties_go_to_more_seeds_then_sorted_config():
    """The benchmark selects with report.select_and_aggregate: equal mean val -> more seeds -> sorted JSON."""
    runs = pd.DataFrame([
        _run("an", 0.1, 0, 0.5, 0.1), _run("an", 0.01, 0, 0.5, 0.2), _run("an", 0.01, 1, 0.5, 0.3),
        _run("em", 0.1, 0, 0.5, 0.4), _run("em", 0.01, 0, 0.5, 0.6),
    ])
    rows = {r["method"]: r for r in summarize(runs)[0]}
    assert rows["an"]["lr"] == 0.01 and rows["an"]["seeds"] == 2   # more seeds wins the tie
    assert rows["em"]["lr"] == 0.01                                  # '{"lr": 0.01...' sorts before '{"lr": 0.1...'


def test_a_gap_within_noise_is_left_out_and_the_line_says_why():
    """BCE 50.0 ± 1.0 and AN 49.5 ± 1.0 over 2 seeds (population std 1, sample std sqrt 2): the
    difference's standard error is sqrt(2/2 + 2/2) = 1.41, twice that 2.83 > 0.5; no quotient by 0.5."""
    runs = pd.DataFrame([_run("bce", 0.1, 0, 0.7, 0.49), _run("bce", 0.1, 1, 0.7, 0.51),
                         _run("an", 0.1, 0, 0.6, 0.485), _run("an", 0.1, 1, 0.6, 0.505),
                         _run("em", 0.1, 0, 0.6, 0.40), _run("em", 0.1, 1, 0.6, 0.40)])
    rows, _ = summarize(runs, ("bce", "an", "em"))
    assert all(math.isnan(r["gap_closed"]) for r in rows)
    assert gap_note(rows) == ("no gap closed: BCE − AN = +0.50 points is within noise (2 standard errors of the "
                              "difference over the seeds: 2.83 points), so a share of it would be noise")
    rows, _ = summarize(pd.DataFrame([_run("em", 0.1, 0, 0.6, 0.5)]))
    assert gap_note(rows) is None  # no references, no column, no footnote


def test_each_benchmark_names_where_its_hyperparameters_come_from():
    """One data set keeps its own presets, as train does; several get one source: the recipe defaults
    unless a data set's presets are named, and every run then resolves to that source."""
    from spmlkit.experiments.benchmark import hyperparameter_source, one_source
    from spmlkit.experiments.presets import YEAST_HPARAMS
    from spmlkit.experiments.sweep import expand, run_config

    yeast = BenchmarkSpec(dataset="yeast", methods=("an", "em", "l2r"), seeds=(0,), lrs=(0.01,))
    assert hyperparameter_source(yeast) == (
        "Hyperparameters: those of the presets em/yeast, l2r/yeast (tuned on yeast: spmlkit (chosen on validation); "
        "`spmlkit presets --dataset yeast`) on yeast; recipe defaults for the other methods.")
    pair = one_source([yeast, BenchmarkSpec(dataset="digits-mosaic", methods=("an", "em", "l2r"), seeds=(0,),
                                            lrs=(0.01,))])
    assert [s.hparams_from for s in pair] == ["defaults", "defaults"]
    assert hyperparameter_source(pair[0], ["yeast", "digits-mosaic"]) == (
        "Hyperparameters: each method's recipe defaults on every data set (`spmlkit methods`); no preset is used.")
    hparams = {r["method"]: run_config(r).method.hparams for r in expand(pair[0].sweep("unused.db"))}
    assert hparams == {"an": {}, "em": {}, "l2r": {}}  # yeast's presets are not applied
    own = {r["method"]: run_config(r).method.hparams for r in expand(yeast.sweep("unused.db"))}
    assert own == {"an": {}, "em": YEAST_HPARAMS["em"], "l2r": YEAST_HPARAMS["l2r"]}
    # only the runs a preset touches carry the source, so every other run keeps its id
    single = {r["method"]: r["run_id"] for r in expand(yeast.sweep("unused.db"))}
    suite = {r["method"]: r for r in expand(pair[0].sweep("unused.db"))}
    assert suite["an"]["run_id"] == single["an"] and "hparams_from" not in suite["an"]
    assert suite["em"]["hparams_from"] == "defaults" and suite["em"]["run_id"] != single["em"]
    # the yeast presets on every data set: named as such, and a feature run elsewhere takes them
    tuned = BenchmarkSpec(dataset="mulan/yeast", methods=("an", "em"), seeds=(0,), lrs=(0.01,), hparams_from="yeast")
    assert hyperparameter_source(tuned, ["mulan/yeast", "yeast"]) == (
        "Hyperparameters: those of the presets em/yeast (tuned on yeast: spmlkit (chosen on validation); `spmlkit "
        "presets --dataset yeast`) on every data set (mulan/yeast, yeast); recipe defaults for the other methods.")
    from spmlkit.experiments.presets import resolve_config

    em = next(r for r in expand(tuned.sweep("unused.db")) if r["method"] == "em")
    assert resolve_config({"dataset": "emotions", "method": "em"}, hparams_from=em["hparams_from"]).method.hparams \
        == YEAST_HPARAMS["em"]


def test_summarize_without_references_has_no_gap():
    rows, _ = summarize(pd.DataFrame([_run("em", 0.1, 0, 0.6, 0.5)]))
    assert math.isnan(rows[0]["gap_closed"])


def test_cli_benchmark_on_a_small_subset(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["benchmark", "--dataset", "yeast", "--methods", "bce,an,em_apl,gr", "--seeds", "0,1",
                 "--lrs", "0.01,0.003", "--epochs", "5", "--subset", "300", "--jobs", "1",
                 "--out", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "full labels (BCE)" in printed and "gap closed" in printed
    said = " ".join(printed.split())
    hyper = ("Hyperparameters: those of the presets em_apl/yeast (tuned on yeast: spmlkit (chosen on validation); "
             "`spmlkit presets --dataset yeast`) on yeast; recipe defaults for the other methods.")
    assert hyper in said and hyper in (out / "table.md").read_text()
    assert f"Next: `spmlkit report --store {out / 'results.db'} --out {out / 'report'}`" in said
    runs = pd.read_csv(out / "runs.csv")
    table = pd.read_csv(out / "table.csv")
    assert len(runs) == 4 * 2 * 2 and set(table["method"]) == {"bce", "an", "em_apl", "gr"}
    for _, row in table.iterrows():
        chosen = runs[(runs.method == row.method) & (runs.lr == row.lr)]
        other = runs[(runs.method == row.method) & (runs.lr != row.lr)]
        assert chosen.val_map.mean() >= other.val_map.mean()
        assert row.test_map == pytest.approx(100 * chosen.test_map.mean())
        assert row.test_map_std == pytest.approx(100 * chosen.test_map.std(ddof=0))
    payload = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in payload["table"]] == ["bce", "an", "em_apl", "gr"]
    assert (out / "table.md").read_text().count("\n|") >= 5
    # the same benchmark again reuses every finished run and writes the same table
    before = (out / "table.csv").read_text()
    assert main(["benchmark", "--dataset", "yeast", "--methods", "bce,an,em_apl,gr", "--seeds", "0,1",
                 "--lrs", "0.01,0.003", "--epochs", "5", "--subset", "300", "--jobs", "1",
                 "--out", str(out), "--quiet"]) == 0
    assert "16 finished runs reused" in " ".join(capsys.readouterr().out.split())  # wherever lines break
    assert (out / "table.csv").read_text() == before


def test_parallel_workers_give_the_same_numbers(tmp_path):
    args = ["benchmark", "--methods", "an,em", "--seeds", "0", "--lrs", "0.01", "--epochs", "2",
            "--subset", "200", "--quiet"]
    assert main(args + ["--jobs", "1", "--out", str(tmp_path / "a")]) == 0
    assert main(args + ["--jobs", "2", "--out", str(tmp_path / "b")]) == 0
    a = pd.read_csv(tmp_path / "a" / "runs.csv").sort_values(["method"]).reset_index(drop=True)
    b = pd.read_csv(tmp_path / "b" / "runs.csv").sort_values(["method"]).reset_index(drop=True)
    assert np.array_equal(a.test_map.to_numpy(), b.test_map.to_numpy())
    # and they were parallel workers: each record says which executor trained it (one run per
    # method here, so every run trains alone, and its record says why)
    from spmlkit.experiments.store import ResultsStore
    from spmlkit.experiments.sweep.processes import InProcess, WorkerPool

    why = {name: {r["alone_reason"] for r in ResultsStore(tmp_path / name / "results.db").records()}
           for name in ("a", "b")}
    assert why == {"a": {InProcess.alone_reason}, "b": {WorkerPool.alone_reason}}, f"--jobs was not followed: {why}"


def test_cli_errors_are_one_clear_line(capsys):
    assert main(["benchmark", "--methods", "an,nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'nope'" in err and "Traceback" not in err
    # a mistyped method is answered with the closest one, on every command that takes one
    for argv in (["benchmark", "--methods", "an,em_alp", "--quiet"], ["train", "--method", "em_alp", "--epochs", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "unknown method 'em_alp' (did you mean 'em_apl'?)" in err and len(err.strip().splitlines()) == 1
    assert main(["benchmark", "--hparams-from", "emotions", "--quiet"]) == 2
    assert ("--hparams-from 'emotions': no preset was tuned on 'emotions'; give defaults (each method's recipe "
            "defaults) or one of coco2014, cub, nuswide, voc2012, yeast, voc2007") in capsys.readouterr().err
    assert main(["benchmark", "--rank-references", "--quiet"]) == 2
    assert "--rank-references ranks methods across data sets" in capsys.readouterr().err
    assert main(["train", "--method", "em", "--hparam", "alhpa=0.2", "--epochs", "1"]) == 2
    assert "no hyperparameter 'alhpa'" in capsys.readouterr().err


def test_cli_train_prints_epochs(tmp_path, capsys):
    code = main(["train", "--dataset", "digits-mosaic", "--method", "em_apl", "--epochs", "3", "--subset", "300",
                 "--hparam", "alpha=0.2",
                 "--hparam", "warmup_epochs=1", "--device", "cpu", "--out", str(tmp_path / "run")])
    assert code == 0
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert res["config"]["method"]["hparams"] == {"alpha": 0.2, "warmup_epochs": 1}
    # APL's rounds follow epochs 1 and 2 (not the last); each takes floor(0.9 * U_c / 2 rounds) of
    # every class's U_c unobserved training entries (theta 0.9, APL's default)
    from spmlkit.protocol import observe_labels, split_train_val
    from spmlkit.training.config import config_from_dict
    from spmlkit.training.run_data import load_run_data

    assert res["config"]["data"]["dataset"] == "digits-mosaic"
    observed = observe_labels(load_run_data(config_from_dict(res["config"])).Y_train)  # its first 300 rows
    unobserved = (observed[split_train_val(300)[0]] == 0).sum(0)
    quota = sum(int(np.floor(0.9 * u / 2)) for u in unobserved)
    assert [h["pseudo_negatives"] for h in res["history"]] == [quota, 2 * quota, 2 * quota]
    printed = capsys.readouterr().out
    from spmlkit.training.loggers import EpochLines

    lines = printed.splitlines()  # a header naming the columns, then one row per epoch
    start = lines.index(EpochLines().header())
    assert lines[start + 1 : start + 4] == [EpochLines().row(h) for h in res["history"]]


def test_dataset_presets_are_valid_and_used_by_train_and_benchmark():
    from spmlkit.experiments.presets import YEAST_HPARAMS, resolve_config
    from spmlkit.experiments.sweep import expand, run_config
    from spmlkit.methods import check_hparams

    for method, hp in YEAST_HPARAMS.items():
        check_hparams(method, hp)  # raises on a stale name
    # `train --dataset yeast --method em_apl` and the benchmark's em_apl runs resolve the same way
    trained = resolve_config({"dataset": "yeast", "method": "em_apl"})
    assert trained.method.hparams == YEAST_HPARAMS["em_apl"]
    assert (trained.optimisation.lr, trained.optimisation.batch_size, trained.schedule.epochs) == (3e-3, 64, 20)
    spec = BenchmarkSpec(dataset="yeast", methods=("em_apl",), seeds=(0,), lrs=(3e-3,))
    (run,) = expand(spec.sweep("unused.db"))
    assert run_config(run) == trained
