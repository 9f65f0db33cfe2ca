"""CRISP's published tables as data, its Table 1 as image presets' targets, and ``spmlkit reproduce
crisp-tabular`` (docs/reproductions.md): every registered method of the tables, the papers' grid and trials
as one resumable sweep, each cell's selected runs beside the published mean ± std with z in published stds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spmlkit.cli import main
from spmlkit.experiments.presets import PRESETS
from spmlkit.experiments.published import CRISP_METHODS, published, published_rows
from spmlkit.experiments.reproduce import (ReproducedCell, get_reproduction, images_only_methods, images_only_note,
                                          reproduction_methods, reproduction_sweeps)
from spmlkit.methods import METHODS


def test_crisps_tables_are_there_cell_for_cell():
    t1 = published_rows(source="CRISP Table 1")
    assert len(t1) == 16 * 4 and {r.metric for r in t1} == {"map"}
    for table, metric in (("CRISP Table 2", "ranking_loss"), ("CRISP Table 8", "example_ap"),
                          ("CRISP Table 9", "coverage"), ("CRISP Table 10", "hamming_loss"),
                          ("CRISP Table 11", "one_error")):
        rows = published_rows(source=table)
        assert len(rows) == 12 * 6 and {r.metric for r in rows} == {metric}
    # one cell of each, read off the paper
    assert published("crisp", "voc2012", source="CRISP")[0][1:3] == (89.820, 0.191)
    assert published("an", "scene", metric="example_ap")[0][1:3] == (0.580, 0.104)
    assert published("smile", "yeast", metric="ranking_loss")[0][1:3] == (0.167, 0.002)
    assert published("ll_cp", "delicious", metric="coverage")[0][1:3] == (0.708, 0.004)
    assert published("em", "scene", metric="hamming_loss")[0][1:3] == (0.820, 0.003)
    assert published("role", "corel5k", metric="one_error")[0][1:3] == (0.705, 0.016)
    # mAP lookups stay mAP: a tabular number never stands in for a run's mAP
    assert published("an", "scene") == []


def test_crisps_table_1_targets_every_image_preset_it_has_a_row_for():
    assert PRESETS["wan/voc2012"].target.table == "CRISP Table 1" and PRESETS["wan/cub"].target.mean == 14.622
    assert PRESETS["epr/coco2014"].target.mean == 63.604  # EPR had no published target before
    em = [t for t in PRESETS["em_apl/nuswide"].targets if t.source == "CRISP"]
    assert [(t.mean, t.std) for t in em] == [(47.778, 0.181)]


def test_presets_shows_one_papers_targets(capsys):
    assert main(["presets", "--dataset", "cub", "--source", "crisp"]) == 0
    out = capsys.readouterr().out
    assert "wan/cub" in out and "14.62 ± 1.30" in out and "pu_mlc" not in out
    assert main(["presets", "--source", "nature"]) == 2
    assert "--source 'nature': choose one of EM, OPML, GR, PU-MLC, CRISP, BoostLU\n" in capsys.readouterr().err
    assert main(["presets", "--source", "boostlu", "--dataset", "coco2014"]) == 0  # any case
    out = capsys.readouterr().out
    assert "boostlu_ll_r/coco2014" in out and "72.89" in out and "73.27" not in out  # BoostLU's own number, not CRISP's


def test_the_rows_are_every_registered_method_of_the_tables_in_their_order():
    rep = get_reproduction("crisp-tabular")
    methods = reproduction_methods(rep)
    assert methods == ("an", "an_ls", "wan", "epr", "role", "em", "em_apl", "smile", "ll_r", "ll_cp", "ll_ct", "crisp",
                       "crisp_true_prior")  # the paper's rows, then the reference that separates CRISP's parts
    assert set(methods) <= set(METHODS)
    assert METHODS["crisp_true_prior"].sees_more_labels and rep.grid_hparams["crisp_true_prior"] == rep.grid_hparams["crisp"]
    # CRISP's other methods (its Table 1, on images) are registered too, and train on images only: named, not run
    assert images_only_methods(rep) == ("plc", "boostlu_ll_r", "boostlu_ll_cp", "boostlu_ll_ct")
    assert images_only_note(rep) == ("Not run: PLC, BoostLU+LL-R, BoostLU+LL-Cp, BoostLU+LL-Ct, which CRISP compares "
                                     "on its image sets; they train on images only (`spmlkit methods` says why).")
    specs = reproduction_sweeps(rep, "x.db", datasets=["yeast", "scene"], methods=["an", "em"])
    assert [s.datasets for s in specs] == [["yeast"], ["scene"]]
    for spec in specs:
        assert (spec.seeds, spec.lrs, spec.weight_decays, spec.batch_sizes, spec.hparams_from) == (
            [0, 1, 2, 3, 4], [1e-2, 1e-3, 1e-4, 1e-5], [1e-2, 1e-3, 1e-4, 1e-5], [8, 16], "defaults")
    with pytest.raises(ValueError, match="crisp-tabular has no data set 'mirflickr'"):
        reproduction_sweeps(rep, "x.db", datasets=["mirflickr"], methods=["an"])


def test_a_method_takes_the_hyperparameters_a_paper_published_for_the_set_not_spmlkits_own_tuning():
    from spmlkit.experiments.reproduce import published_hparams

    assert PRESETS["em/yeast"].config["hparams"] == {"alpha": 0.005}  # tuned by spmlkit on its own protocol
    assert published_hparams("em", "yeast") == {} and published_hparams("an", "scene") == {}
    rep = get_reproduction("crisp-tabular")
    specs = reproduction_sweeps(rep, "x.db", datasets=["yeast"], methods=["an", "em"])
    from spmlkit.experiments.sweep import expand, run_config

    em = next(r for r in expand(specs[0]) if r["method"] == "em")
    assert run_config(em).method.hparams == {}  # the recipe's defaults, not em/yeast's alpha
    # SMILE's README values for the set, in the sweep of that set only
    assert published_hparams("smile", "scene") == PRESETS["smile/scene"].config["hparams"] != {}
    assert PRESETS["smile/scene"].config["hparams"] != PRESETS["smile/yeast"].config["hparams"]
    yeast, scene = reproduction_sweeps(rep, "x.db", datasets=["yeast", "scene"], methods=["an", "smile"])
    assert yeast.hparams == {"smile": PRESETS["smile/yeast"].config["hparams"]}
    assert scene.hparams == {"smile": PRESETS["smile/scene"].config["hparams"]}


def test_a_method_with_its_own_network_on_features_trains_it_in_a_sweep_of_its_own():
    from spmlkit.experiments.sweep import expand, run_config
    from spmlkit.models import FeatureHead, GaussianBottleneck
    from spmlkit.training.network import build_run_model

    rep = get_reproduction("crisp-tabular")
    specs = reproduction_sweeps(rep, "x.db", datasets=["yeast", "scene"], methods=["an", "mime"])
    assert [(s.datasets, s.methods) for s in specs] == [(["yeast"], ["an"]), (["yeast"], ["mime"]),
                                                        (["scene"], ["an"]), (["scene"], ["mime"])]
    assert (specs[0].settings["head"], specs[0].settings["hidden"]) == ("mlp", "classes")
    assert "head" not in specs[1].settings and "hidden" not in specs[1].settings
    assert specs[1].settings == {k: v for k, v in specs[0].settings.items() if k not in ("head", "hidden")}
    an, mime = (run_config(expand(s)[0]) for s in specs[:2])
    assert mime.data.partition == "random" and mime.model.head == "linear" and mime.schedule.epochs == 10
    assert isinstance(build_run_model(mime, "features", 14, 103), GaussianBottleneck)
    mlp = build_run_model(an, "features", 14, 103)  # SMILE's MLP: one hidden layer as wide as yeast has labels
    assert isinstance(mlp, FeatureHead) and [tuple(p.shape) for p in mlp.parameters()] == [(14, 103), (14,), (14, 14),
                                                                                             (14,)]


@pytest.mark.usefixtures("one_thread")
def test_a_method_that_trains_on_images_only_is_refused_before_anything_is_written(tmp_path: Path, capsys):
    out = tmp_path / "rep"
    assert main(["reproduce", "crisp-tabular", "--methods", "an,plc", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "spmlkit reproduce: error: crisp-tabular trains on the features of MULAN's sets, and method 'plc' trains "
        "on images only: it learns from a weak and a strong augmentation") and err[0].endswith(
        "; leave it out of the methods")
    assert not out.exists()


@pytest.mark.usefixtures("one_thread")
def test_a_method_of_the_users_gets_its_row_and_every_run_names_its_plugin(tmp_path: Path, capsys):
    from fixtures.plugins import MY_LOSS, isolated_plugins

    plugin = tmp_path / "my_loss.py"
    plugin.write_text(MY_LOSS)
    out = tmp_path / "rep"
    with isolated_plugins():
        assert main(["reproduce", "crisp-tabular", "--plugin", str(plugin), "--methods", "an,my_loss", "--datasets",
                     "yeast", "--trials", "1", "--epochs", "1", "--subset", "200", "--jobs", "2", "--out", str(out),
                     "--quiet"]) == 0
    capsys.readouterr()
    cells = pd.read_csv(out / "crisp-tabular.csv")
    mine = cells[cells["method"] == "my_loss"]
    assert len(mine) == 5 and mine["ours"].notna().all() and mine["published"].isna().all() and mine["z"].isna().all()
    assert "| my_loss | " in (out / "crisp-tabular.md").read_text()
    assert json.loads((out / "crisp-tabular.json").read_text())["sweeps"][0]["methods"] == ["an", "my_loss"]
    # each run carries the plug-in by path, so a spawned worker or a Ray task loads it (docs/plugins.md)
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(out / "results.db").to_dataframe()
    assert len(runs) == 64 and all(c["plugins"] == [str(plugin)] for c in runs["config"])


def test_z_divides_by_the_published_std_floored_at_half_the_printed_digit():
    def cell(ours: float, pub: float | None, std: float | None) -> ReproducedCell:
        return ReproducedCell("CRISP Table 8", "example_ap", "an", "AN", "scene", ours, 0.01, 5, ours, pub, std, {})
    assert cell(0.790, 0.580, 0.104).z == pytest.approx(0.21 / 0.104)
    assert cell(0.012, 0.010, 0.000).z == pytest.approx(0.002 / 0.0005)  # 0.000 printed: a std below 0.0005
    assert math.isnan(cell(0.5, None, None).z)


@pytest.mark.usefixtures("one_thread")
def test_reproduce_runs_the_grid_selects_on_validation_and_writes_the_tables_beside_the_paper(
        tmp_path: Path, capsys):
    out = tmp_path / "rep"
    args = ["reproduce", "crisp-tabular", "--datasets", "yeast", "--methods", "an", "--trials", "2", "--epochs",
            "2", "--subset", "300", "--out", str(out), "--jobs", "2", "--quiet"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "CRISP Table 8: Average precision (larger is better)" in printed and "0.531 ± 0.079" in printed
    said = " ".join(printed.split())
    assert ("Protocol run: 2 trials (seeds 0-1), 2 epochs, the first 300 rows of each set -- NOT the paper's (2 trials "
            "instead of 5; 2 epochs instead of 10; the first 300 rows of each set instead of every row): the values "
            "cannot be compared with the published ones, and no z is printed.") in said
    cells = pd.read_csv(out / "crisp-tabular.csv")
    fair = cells
    assert fair["table"].tolist() == ["CRISP Table 2", "CRISP Table 8", "CRISP Table 9", "CRISP Table 10",
                                      "CRISP Table 11"]
    assert set(cells["trials"]) == {2} and set(cells["dataset"]) == {"yeast"} and set(fair["label"]) == {"AN"}
    ap = fair[fair["metric"] == "example_ap"].iloc[0]
    assert (ap["published"], ap["published_std"]) == (0.531, 0.079) and ap["reading"] == "fair grid"
    assert math.isnan(ap["z"]) and not ap["comparable"]  # not the paper's protocol: no z, in the csv or the tables
    markdown = (out / "crisp-tabular.md").read_text()
    assert "| method | reading | yeast: ours | yeast: published |\n" in markdown and ": z" not in markdown
    # the selected configuration is the grid point with the best mean validation mAP over the 2 trials
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(out / "results.db").to_dataframe()
    assert len(runs) == 2 * 4 * 4 * 2 and (runs["group_size"] == 16).all()  # groups of lr x weight decay
    best = runs.groupby(["lr", "weight_decay", "batch_size"])["val_map"].mean().idxmax()
    assert (ap["lr"], ap["weight_decay"], ap["batch_size"]) == best
    chosen = runs.set_index(["lr", "weight_decay", "batch_size"]).loc[best]
    assert ap["ours"] == pytest.approx(chosen["test.smile.example_ap"].mean(), abs=1e-12)
    # "ours ± std": the population std over the trials, as the docs promise (not the sample std, √2 wider here)
    ours = chosen["test.smile.example_ap"].to_numpy(float)
    assert ours.std(ddof=1) != pytest.approx(ours.std(ddof=0))  # two trials that differ tell the two apart
    assert ap["ours_std"] == pytest.approx(ours.std(ddof=0), abs=1e-12), \
        "ours ± std is not the population std over the trials"
    assert ap["ours_spmlkit"] == pytest.approx(chosen["test.example_ap"].mean(), abs=1e-12)
    saved = json.loads((out / "crisp-tabular.json").read_text())
    assert saved["sweeps"][0]["settings"]["partition"] == "random" and len(saved["cells"]) == 5
    assert saved["protocol"] == {"trials": 2, "epochs": 2, "subset": 300} and saved["comparable"] is False
    assert "| AN | fair grid | " in markdown
    # the same command again trains nothing
    assert main(args) == 0
    assert "64 finished runs reused" in capsys.readouterr().out


@pytest.mark.usefixtures("one_thread")
def test_smile_as_published_is_read_at_the_epoch_best_select_votes_for(tmp_path: Path, capsys):
    """SMILE as its code ran it: the README's setting, lr 1e-3, batch 16, no weight decay, one run per
    trial, each read at the epoch Best.select votes for, beside SMILE's fair grid."""
    from spmlkit.experiments.selection import selected_epoch
    from spmlkit.experiments.store import ResultsStore

    out = tmp_path / "rep"
    assert main(["reproduce", "crisp-tabular", "--datasets", "yeast", "--methods", "smile", "--trials", "2",
                 "--epochs", "3", "--subset", "300", "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    capsys.readouterr()
    everything = ResultsStore(out / "results.db").to_dataframe()
    code = everything[(everything["lr"] == 1e-3) & (everything["batch_size"] == 16)
                      & (everything["weight_decay"] == 0.0)]
    assert len(code) == 2 and all(h == PRESETS["smile/yeast"].config["hparams"] for h in code["hparams"])
    voted = [next(e for e in history if e["epoch"] == selected_epoch(history, "smile_votes"))["test.smile.example_ap"]
             for history in code["history"]]
    cells = pd.read_csv(out / "crisp-tabular.csv")
    published_ap = cells[(cells["reading"] == "as published") & (cells["metric"] == "example_ap")].iloc[0]
    assert published_ap["ours"] == pytest.approx(sum(voted) / 2, abs=1e-12) and published_ap["rule"] == "smile_votes"
    markdown = (out / "crisp-tabular.md").read_text()
    assert "| SMILE | fair grid | " in markdown and "| SMILE | as published | " in markdown and "Best.select" in markdown


def test_reproduce_writes_only_into_a_new_folder_or_its_own(tmp_path: Path, capsys):
    theirs = tmp_path / "notes"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    assert main(["reproduce", "crisp-tabular", "--out", str(theirs), "--quiet"]) == 2
    assert "already holds files that spmlkit did not write (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]  # nothing written, nothing removed


@pytest.mark.usefixtures("one_thread")
def test_a_reproduction_of_another_grid_on_a_live_reproductions_folder_is_refused(tmp_path: Path, capsys):
    """Two reproductions of different grids on one --out at once: the tables were those of whichever finished last."""
    from spmlkit.experiments import reproduce as rp
    from spmlkit.experiments.benchmark_hold import hold_out_folder
    from spmlkit.output_dir import claim_output_dir

    out = claim_output_dir(tmp_path / "rep", "reproduction", option="--out")
    args = ["reproduce", "crisp-tabular", "--datasets", "yeast", "--methods", "an", "--trials", "1", "--epochs", "1",
            "--subset", "200", "--out", str(out), "--jobs", "1", "--quiet"]
    with hold_out_folder(out, "another-grid"):  # a live reproduction of, say, --methods em (its lock: a grid of its own)
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"--out {out} is in use by another reproduction of a different grid" in err
        assert "wait for it to finish, or give another --out" in err
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []  # no run, no table
    mine = rp.grid_of(rp.reproduction_sweeps(rp.get_reproduction("crisp-tabular"), out / rp.STORE_NAME,
                                             datasets=("yeast",), methods=("an",), trials=1, epochs=1, subset=200))
    with hold_out_folder(out, mine):  # a live one of the same grid: this one joins it
        assert main(args) == 0
    assert (out / "crisp-tabular.md").is_file()
    assert [p.name for p in out.glob(".spmlkit-grid-*.lock")] == [f".spmlkit-grid-{mine}.lock"]


@pytest.mark.parametrize("args, words", [
    (["--datasets", ""], "--datasets is empty; name data sets of crisp-tabular (yeast, scene, corel5k, delicious), or "
                         "leave the option out for all of them"),
    (["--methods", ""], "--methods is empty; name methods, or leave the option out for every method of the tables"),
    (["--methods", "an,an"], "--methods lists an twice; give each value once"),
    (["--datasets", "yeast,yeast"], "--datasets lists yeast twice; give each value once"),
    (["--datasets", "yeast", "--subset", "1"], "subset 1 of yeast: a partition of 1 rows into 80 / 10 / 10 % leaves the validation and the test part empty (1 / 0 / 0 rows); use at least 6 rows"),
    (["--datasets", "yeast", "--subset", "5"], "subset 5 of yeast: a partition of 5 rows into 80 / 10 / 10 % leaves the validation and the test part empty"),
    (["--datasets", "yeast", "--subset", "10000000"], "subset 10000000 is larger than the 2417 rows of yeast"),
    (["--datasets", "yeast", "--methods", "em_apl", "--epochs", "2"],
     "method 'em_apl' cannot run in 2 epoch(s): APL needs warmup_epochs < num_epochs"),
    (["--datasets", "yeast", "--methods", "crisp", "--epochs", "1"],
     "method 'crisp' cannot run in 1 epoch(s): CRISP, every warmup_epochs of whose grid (1, 3, 5) is as long as the run"),
])
def test_what_cannot_run_is_refused_in_one_line_before_any_run(tmp_path: Path, capsys, args, words):
    out = tmp_path / "rep"
    assert main(["reproduce", "crisp-tabular", *args, "--trials", "1", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()  # nothing trained, nothing written


def test_the_quick_check_leaves_out_what_cannot_run_in_its_epochs_and_says_why(tmp_path: Path):
    """Every method of the tables in 2 epochs: EM-APL's warm-up of 5 cannot end, so it is left out with
    the reason; CRISP keeps the warm-up lengths that can (1) and says which it dropped."""
    from spmlkit.experiments.reproduce import plan_reproduction
    from spmlkit.experiments.reproduce_tables import heading, table_rows

    rep = get_reproduction("crisp-tabular")
    plan = plan_reproduction(rep, tmp_path / "r.db", datasets=["yeast"], trials=2, epochs=2)
    assert "em_apl" not in plan.methods and set(plan.left_out) == {"em_apl"}
    assert plan.left_out["em_apl"].startswith("EM-APL, which cannot run in 2 epoch(s): APL needs warmup_epochs < "
                                              "num_epochs")
    assert plan.notes == [f"{label}: warmup_epochs 3, 5 left out of its grid, as long as the run (2 epochs) or longer"
                          for label in ("CRISP", "CRISP (true priors)")]
    (yeast,) = plan.fair
    assert yeast.hparams["crisp"] == {"warmup_epochs": [1]} and "em_apl" not in yeast.methods
    said = heading(plan)
    assert "Not run: EM-APL, which cannot run in 2 epoch(s)" in said and "CRISP: warmup_epochs 3, 5 left out" in said
    em = ReproducedCell("CRISP Table 8", "example_ap", "em", "EM", "yeast", 0.7, 0.01, 2, 0.7, 0.642, 0.029, {},
                        comparable=False)
    smile = ReproducedCell("CRISP Table 8", "example_ap", "smile", "SMILE", "yeast", 0.7, 0.01, 2, 0.7, 0.751, 0.004, {},
                           comparable=False)
    header, rows = table_rows(plan, [smile, em], "CRISP Table 8")
    assert [r[:3] for r in rows] == [["EM", "fair grid", "0.700 ± 0.010"], ["EM-APL", "fair grid", "not run"],
                                     ["SMILE", "fair grid", "0.700 ± 0.010"]]  # its row stays, in its place
    assert rows[1][3] == "0.654 ± 0.040"  # beside the published number
    # the paper's 10 epochs: every method, CRISP's three warm-up lengths as an axis of its grid
    full = plan_reproduction(rep, tmp_path / "r.db", datasets=["yeast"])
    assert full.left_out == {} and full.notes == [] and full.fair[0].hparams["crisp"] == {"warmup_epochs": [1, 3, 5]}


def test_smile_runs_as_its_code_ran_it_beside_the_fair_grid(tmp_path: Path):
    from spmlkit.experiments.reproduce import plan_reproduction
    from spmlkit.experiments.sweep import expand, run_config

    rep = get_reproduction("crisp-tabular")
    plan = plan_reproduction(rep, tmp_path / "r.db", datasets=["yeast", "scene"], methods=["an", "smile"])
    assert [spec.datasets for _, spec in plan.published] == [["yeast"], ["scene"]]
    for (run, spec), name in zip(plan.published, ("yeast", "scene")):
        assert (spec.lrs, spec.batch_sizes, spec.weight_decays, spec.seeds) == ([1e-3], [16], [0.0], [0, 1, 2, 3, 4])
        assert spec.hparams == {"smile": PRESETS[f"smile/{name}"].config["hparams"]} and run.rule == "smile_votes"
        config = run_config(expand(spec)[0])
        assert (config.schedule.epochs, config.schedule.epoch_metrics, config.data.partition) == (10, True, "random")
        assert (config.model.head, config.model.hidden, config.optimisation.weight_decay) == ("mlp", "classes", 0.0)
    # the fair grid keeps its ids (no per-epoch records under val_map); --select smile_votes records them
    assert "epoch_metrics" not in plan.fair[0].settings
    voted = plan_reproduction(rep, tmp_path / "r.db", datasets=["yeast"], methods=["an"], select="smile_votes")
    assert voted.fair[0].settings["epoch_metrics"] is True and voted.rule == "smile_votes"


def test_a_method_whose_runs_failed_keeps_its_row_with_the_failure_named(tmp_path: Path):
    """Every run of WAN recorded failed: its row says so in every table, and the failure is listed with
    its count and first error; AN's row has its numbers."""
    import time

    from spmlkit.experiments.reproduce import plan_reproduction, summarize_reproduction
    from spmlkit.experiments.reproduce_tables import failure_lines, table_rows
    from spmlkit.experiments.store import ResultsStore
    from spmlkit.experiments.sweep import expand
    from spmlkit.experiments.sweep.execute import failed_record

    rep = get_reproduction("crisp-tabular")
    store = tmp_path / "r.db"
    plan = plan_reproduction(rep, store, datasets=["yeast"], methods=["an", "wan"], trials=1, epochs=1, subset=200)
    runs = expand(plan.fair[0])
    db = ResultsStore(store)
    for run in runs:
        if run["method"] == "wan":
            db.add(failed_record(run, "ValueError: the loss went wrong\nTraceback ...", "2026-01-01T00:00:00Z",
                                 time.perf_counter()))
    from spmlkit.experiments.sweep import run_sweep

    run_sweep(plan.fair[0], jobs=1)  # AN's runs; WAN's are recorded failed and count as finished
    cells = summarize_reproduction(plan, store)
    wan = [c for c in cells if c.method == "wan"]
    assert len(wan) == 5 and all(c.ours is None and c.failed == c.runs == 32 for c in wan)
    assert wan[0].error == "ValueError: the loss went wrong"
    header, rows = table_rows(plan, cells, "CRISP Table 8")
    assert ["WAN", "fair grid", "failed (32 of 32 runs)", "0.698 ± 0.017"] in rows
    assert failure_lines(cells) == ["WAN (fair grid) on yeast: 32 of 32 runs failed, so the row has no value: "
                                    "ValueError: the loss went wrong"]


def test_z_is_printed_only_under_the_papers_protocol(tmp_path: Path):
    from spmlkit.experiments.reproduce import ReproducedCell, plan_reproduction
    from spmlkit.experiments.reproduce_tables import table_rows

    rep = get_reproduction("crisp-tabular")
    paper = plan_reproduction(rep, tmp_path / "r.db", datasets=["scene"], methods=["an"])
    cell = ReproducedCell("CRISP Table 8", "example_ap", "an", "AN", "scene", 0.790, 0.034, 5, 0.79, 0.580, 0.104, {})
    header, rows = table_rows(paper, [cell], "CRISP Table 8")
    assert header == ["method", "reading", "scene: ours", "scene: published", "scene: z"]
    assert rows == [["AN", "fair grid", "0.790 ± 0.034", "0.580 ± 0.104", "+2.0"]]
    quick = plan_reproduction(rep, tmp_path / "r.db", datasets=["scene"], methods=["an"], trials=3)
    cell = ReproducedCell("CRISP Table 8", "example_ap", "an", "AN", "scene", 0.790, 0.034, 3, 0.79, 0.580, 0.104, {},
                          comparable=False)
    header, rows = table_rows(quick, [cell], "CRISP Table 8")
    assert header == ["method", "reading", "scene: ours", "scene: published"] and math.isnan(cell.z)


@pytest.mark.usefixtures("one_thread")
def test_crisps_priors_are_shown_at_the_selected_epoch_in_the_tables_and_the_report(tmp_path: Path, capsys):
    """CRISP's rows come with the error of the priors it trained with at the selected epoch (its runs record
    it every epoch), in the reproduction's tables and in `spmlkit report`; the run keeps every class's prior.
    The reference with the true priors has its row beside CRISP's (its error 0), named as a reference."""
    out = tmp_path / "rep"
    assert main(["reproduce", "crisp-tabular", "--datasets", "yeast", "--methods", "crisp,crisp_true_prior",
                 "--trials", "1", "--epochs", "3", "--subset", "300", "--jobs", "2", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(out / "results.db").to_dataframe()
    assert sorted({h["warmup_epochs"] for h in runs["hparams"]}) == [1]  # 3 and 5 cannot end within 3 epochs
    cells = pd.read_csv(out / "crisp-tabular.csv")
    reference = cells[(cells["metric"] == "example_ap") & (cells["method"] == "crisp_true_prior")].iloc[0]
    assert reference["prior_error"] == 0.0 and pd.isna(reference["published"])
    runs = runs[runs["method"] == "crisp"]
    cells = cells[cells["method"] == "crisp"]
    cell = cells[cells["metric"] == "example_ap"].iloc[0]
    chosen = runs[(runs["lr"] == cell["lr"]) & (runs["weight_decay"] == cell["weight_decay"])
                  & (runs["batch_size"] == cell["batch_size"])].iloc[0]
    at = chosen["history"][chosen["best_epoch"] - 1]
    assert cell["prior_error"] == pytest.approx(at["class_prior_error"]) and cell["selected_epoch"] == chosen["best_epoch"]
    assert cell["prior_mean"] == pytest.approx(at["labeling_prior_mean"]) and 0 < cell["true_prior"] < 1
    markdown = (out / "crisp-tabular.md").read_text()
    assert "**Class priors at the selected epoch" in markdown
    assert f"| CRISP | fair grid | {cell['prior_error']:.3f} | " in markdown
    assert "| CRISP (true priors) | fair grid | 0.000 | " in markdown
    assert "- Reference, not a method of the paper: CRISP (true priors), CRISP's risk and warm-up with each" in markdown
    assert main(["report", "--store", str(out / "results.db"), "--no-figures", "--out", str(tmp_path / "rep2")]) == 0
    priors = pd.read_csv(tmp_path / "rep2" / "class_priors.csv")
    assert priors["method"].tolist() == ["crisp", "crisp_true_prior"] and priors["prior_error"].iloc[0] > 0


@pytest.mark.usefixtures("one_thread")
def test_a_crisp_run_keeps_every_classs_estimated_prior():
    from spmlkit.training import RunConfig, train

    result = train(RunConfig(dataset="yeast", method="crisp", epochs=2, subset=300, partition="random", head="mlp",
                             hidden="classes", standardize=False, lr=1e-2, device="cpu"))
    for entry in result.history:
        assert len(entry["class_prior"]) == 14 and all(0 <= p <= 1 for p in entry["class_prior"])
        assert np.mean(entry["class_prior"]) == pytest.approx(entry["labeling_prior_mean"])
