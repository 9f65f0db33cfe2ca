"""Bad input and faults of results and reports (docs/bad-input.md): no output over an input, file names
from users' names that stay in their folder and never share a file, grids that name a point once,
failed runs that can be run again, checks a dry run makes as a start does, two benchmarks on one
folder, figures that are the same bytes for the same store and that show every name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from fixtures.feature_folders import feature_folder
from test_figures_any_store import layout_problems, real_like

from spmlkit.cli import main
from spmlkit.errors import InputError
from spmlkit.experiments import benchmark as bm
from spmlkit.experiments import figure_text, plots
from spmlkit.experiments.benchmark_hold import grid_digest, hold_out_folder, sweep_until_none_held
from spmlkit.experiments.figure_layout import DPI
from spmlkit.experiments.store import CLAIMED, ResultsStore
from spmlkit.experiments.sweep import SweepResult, expand
from spmlkit.file_names import MAX_STEM, UniqueNames, file_stem
from spmlkit.io import atomic_write_text, inputs_kept

ROOT = Path(__file__).resolve().parents[1]
#: the smallest benchmark that trains: one method, seed and lr, one epoch on 200 rows
TINY = ["--seeds", "0", "--lrs", "0.01", "--epochs", "1", "--subset", "200", "--jobs", "1", "--quiet"]


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------- no output over an input


def _store(path: Path, methods=("an", "em")) -> ResultsStore:
    store = ResultsStore(path)
    store.add_many({"run_id": m, "status": "ok", "dataset": "yeast", "method": m, "observation": "single_positive",
                    "seed": 0, "lr": 1e-3, "batch_size": 64, "hparams": {}, "val_map": 0.4, "test_map": 0.38,
                    "test_metrics": {"map": 0.38}} for m in methods)
    return store


def test_a_report_never_writes_over_the_store_it_reads(tmp_path, capsys):
    """`report --store rep/table.csv --out rep --overwrite` replaced the store by the CSV table: every run lost.
    Files are compared, not names: the store reached through a link in --out is refused too."""
    rep = tmp_path / "rep"
    store = _store(rep / "table.csv")
    before = store.path.read_bytes()
    assert main(["report", "--store", str(rep / "table.csv"), "--out", str(rep), "--overwrite"]) == 2
    err = one_line(capsys)
    assert f"--store {rep / 'table.csv'} is {rep / 'table.csv'}, a file the report writes in --out {rep}" in err
    assert "--overwrite or not; give another --out, or move it out of" in err
    assert store.path.read_bytes() == before and sorted(p.name for p in rep.iterdir()) == ["table.csv"]
    # a hard link of the store under a name the report writes, in a folder a report already owns
    owned = tmp_path / "owned"
    assert main(["report", "--store", str(store.path), "--out", str(owned), "--no-figures"]) == 0
    (owned / "table.md").unlink()
    os.link(store.path, owned / "table.md")
    capsys.readouterr()
    assert main(["report", "--store", str(store.path), "--out", str(owned), "--overwrite"]) == 2
    assert f"{owned / 'table.md'}, a file the report writes in --out {owned}, is --store {store.path} itself" in \
        one_line(capsys)
    assert len(ResultsStore(store.path).records()) == 2
    # a store below figures/ is a file the report may write or remove
    figs = tmp_path / "figs"
    _store(figs / "figures" / "runs.db")
    assert main(["report", "--store", str(figs / "figures" / "runs.db"), "--out", str(figs)]) == 2
    assert "a file the report writes" in one_line(capsys)


def test_a_write_over_a_kept_input_is_refused_whatever_its_name(tmp_path):
    """The guarantee behind the commands' checks: while a command keeps its inputs, no atomic write replaces one
    of them, reached by its own name, a symbolic link or a hard link; a file removed from a report folder's
    previous report is never one of them either."""
    data = tmp_path / "results.db"
    data.write_text("runs")
    (tmp_path / "soft.csv").symlink_to(data)
    os.link(data, tmp_path / "hard.csv")
    with inputs_kept([data], "the results store this report reads"):
        for name in ("results.db", "soft.csv", "hard.csv"):
            with pytest.raises(InputError, match=f"{name} is the results store this report reads"):
                atomic_write_text(tmp_path / name, "table")
        atomic_write_text(tmp_path / "table.csv", "table")  # anything else is written
    atomic_write_text(tmp_path / "hard.csv", "table")  # outside the block: a write as any other
    assert data.read_text() == "runs" and (tmp_path / "table.csv").read_text() == "table"


# --------------------------------------------------------------------------- names of files and folders


def test_file_names_from_users_names_are_injective_bounded_and_stay_in_their_folder():
    plain = file_stem("densities", "yeast", "single_positive")
    assert plain == "densities_yeast_single_positive"  # spmlkit's own names stay as they are
    spaced, dashed = file_stem("densities", "a b", "single_positive"), file_stem("densities", "a-b", "single_positive")
    assert dashed == "densities_a-b_single_positive" and spaced != dashed and spaced.startswith(dashed + "~")
    for hostile in ("..", ".", "../../etc", "a/b", "x" * 240, "中文", "a\u202eb", ""):
        name = file_stem("figure", hostile)
        assert "/" not in name and name not in (".", "..") and not name.startswith(".") and len(name) <= MAX_STEM
        assert name.isascii()
    assert len({file_stem("d", "x" * n) for n in (200, 201, 240)}) == 3  # cut names keep their digests apart
    names = UniqueNames()
    assert names.name("a_b", "c") == "a_b_c"
    assert names.name("a", "b_c").startswith("a_b_c~")  # joins to the same text: the digest tells them apart
    assert names.name("a_b", "c") == "a_b_c"  # the same parts, the same name


def test_figures_of_data_sets_named_alike_or_too_long_each_keep_their_file(tmp_path, capsys):
    """`a b` and `a-b` got one file name (one set's figures silently replaced, the report counting files it
    did not keep); a 240-character name crashed the report with "File name too long"."""
    store = ResultsStore(tmp_path / "r.db")
    long_name = "n" * 240
    store.add_many(real_like(m, 0, 1e-3, ds) for ds in ("a b", "a-b", long_name) for m in ("an", "em"))
    out = tmp_path / "rep"
    assert main(["report", "--store", str(store.path), "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    files = sorted(p for p in (out / "figures").iterdir())
    per_set = {ds: [p for p in files if p.name.startswith("densities_")] for ds in ("a b", "a-b", long_name)}
    assert len(per_set["a b"]) == 6  # densities of three sets, PNG and SVG: none replaced another
    assert all(len(p.name) <= MAX_STEM + 4 for p in files)
    written = json.loads((out / ".spmlkit-report.json").read_text())["files"]
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name[0] != ".")
    assert written == on_disk and f"wrote {len(on_disk)} files to {out}" in printed


def test_a_benchmarks_data_set_folders_stay_inside_out_and_never_collide(tmp_path, monkeypatch, capsys):
    """`--dataset ff/myfeats/sub/..`, `--dataset .` or `..` named the set's folder `..` or `.`: its tables
    landed above --out (over the user's files) or in --out itself. Two folders of one name now each get
    their own folder instead of a refusal."""
    feats = feature_folder(tmp_path / "ff" / "myfeats", seed=1)
    (feats / "sub").mkdir()
    a, b = feature_folder(tmp_path / "a" / "feats", seed=2), feature_folder(tmp_path / "b" / "feats", seed=3)
    out = tmp_path / "work" / "out"
    folders = bm.dataset_folders(["yeast", str(feats / "sub" / ".."), str(a), str(b)], out)
    assert folders["yeast"] == out / "yeast" and folders[str(feats / "sub" / "..")] == out / "myfeats"
    assert folders[str(a)].name.startswith("feats~") and folders[str(b)].name.startswith("feats~")
    assert folders[str(a)] != folders[str(b)] and all(f.parent == out for f in folders.values())
    monkeypatch.chdir(feats / "sub")
    assert bm.dataset_folders(["yeast", ".."], out)[".."] == out / "myfeats"
    monkeypatch.chdir(feats)
    assert bm.dataset_folders(["yeast", "."], out)["."] == out / "myfeats"
    # end to end: the user's table.md beside --out is left alone
    mine = tmp_path / "work" / "table.md"
    mine.parent.mkdir()
    mine.write_text("my notes")
    assert main(["benchmark", "--dataset", "yeast", "--dataset", "sub/..", "--methods", "an", *TINY,
                 "--out", str(out)]) == 0
    assert mine.read_text() == "my notes" and (out / "myfeats" / "table.md").is_file()
    assert not (out / "table.md").exists()


# --------------------------------------------------------------------------- grids that name a point once


@pytest.mark.parametrize("option, values, words", [
    ("--methods", "an,an", "--methods lists an twice"),
    ("--seeds", "0,0", "--seeds lists 0 twice"),
    ("--lrs", "0.001,1e-3", "--lrs lists 0.001 twice"),
])
def test_repeated_benchmark_options_are_refused(tmp_path, capsys, option, values, words):
    """A value given twice trained one grid point twice under one id: a table row twice, "mean ± std over 2
    seeds" of one seed."""
    grid = {"--methods": "an", "--seeds": "0", "--lrs": "0.01", option: values}
    assert main(["benchmark", *(x for pair in grid.items() for x in pair), "--epochs", "1", "--quiet",
                 "--out", str(tmp_path / "o")]) == 2
    err = one_line(capsys)
    assert words in err and err.endswith("give each value once")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("grid, words", [
    ("seeds: [0, 1, 0]", "seeds lists 0 twice"),
    ("methods: [an, em, an]", "methods lists an twice"),
    ("lrs: [0.001, 1.0e-3]", "lrs lists 0.001 twice"),
    ("methods: [an, em]\nhparams: {em: {alpha: [0.1, 0.2, 0.1]}}", "hparams.em.alpha lists 0.1 twice"),
    ("observations: [single_positive, 'pos=1,neg=0']",
     "observations lists single_positive and pos=1,neg=0, the same value"),
    ("datasets: [emotions, mulan/emotions]",
     "datasets emotions and mulan/emotions are the same data set (mulan/emotions is another name for emotions)"),
])
def test_repeated_sweep_axis_values_are_refused_by_the_dry_run_and_the_start(tmp_path, capsys, grid, words):
    sweep = tmp_path / "grid.yaml"
    sweep.write_text(grid + "\n")
    for extra in (["--dry-run"], []):
        assert main(["sweep", str(sweep), "--quiet", *extra]) == 2
        err = one_line(capsys)
        assert f"sweep file {sweep}" in err and words in err
    assert not (tmp_path / "results.db").exists()


def test_the_dry_run_count_is_the_product_of_its_factors(tmp_path, capsys):
    sweep = tmp_path / "grid.yaml"
    sweep.write_text("methods: [an, em]\nhparams: {em: {alpha: [0.1, 0.2]}}\nlrs: [0.001, 0.01]\nseeds: [0, 1, 2]\n"
                     "observations: [single_positive, full]\n")
    assert main(["sweep", str(sweep), "--dry-run"]) == 0
    line = " ".join(capsys.readouterr().out.split())
    assert ("sweep grid: 36 runs = 1 dataset(s) x 2 observation(s) x 3 method/hyperparameter point(s) x 2 lr(s) x "
            "1 batch size(s) x 3 seed(s)") in line
    assert 1 * 2 * 3 * 2 * 1 * 3 == 36


# --------------------------------------------------------------------------- failed runs run again


#: a plug-in's data set read from the arrays beside it: mending them mends the data set, and its runs keep
#: their ids (the plug-in's code is what a run's id holds of it, docs/plugins.md)
ARRAYS_SET = """import numpy as np
from pathlib import Path
from spmlkit.data import TabularDataset
from spmlkit.data.registry import register_dataset

HERE = Path(__file__).parent


@register_dataset("arrays_set", source="arrays beside the plug-in")
def load():
    a = {k: np.load(HERE / f"{k}.npy") for k in ("X_train", "Y_train", "X_test", "Y_test")}
    return TabularDataset("arrays_set", a["X_train"], a["Y_train"], a["X_test"], a["Y_test"],
                          tuple(f"c{i}" for i in range(a["Y_train"].shape[1])))
"""


def test_benchmark_retry_failed_runs_a_mended_data_set_again(tmp_path, capsys):
    """A recorded failure counts as finished: after the user mended the data set, the benchmark kept leaving it
    out, and a one-set benchmark said "the first error is above" with nothing above."""
    from fixtures.plugins import isolated_plugins

    feats = feature_folder(tmp_path / "feats", seed=1)
    plugin = tmp_path / "arrays_set.py"
    plugin.write_text(ARRAYS_SET)
    good = {f"{k}_{split}": np.load(feats / f"{split}_{name}.npy") for split in ("train", "test")
            for k, name in (("X", "features"), ("Y", "labels"))}
    broken = good["X_train"].copy()
    broken[3, 2] = np.nan
    for key, array in {**good, "X_train": broken}.items():
        np.save(tmp_path / f"{key}.npy", array)
    out = tmp_path / "o"
    args = ["benchmark", "--plugin", str(plugin), "--dataset", "arrays_set", "--methods", "an", *TINY, "--out", str(out)]
    with isolated_plugins():
        assert main(args) == 2
        assert "train features contain NaN" in " ".join(capsys.readouterr().out.split())
        np.save(tmp_path / "X_train.npy", good["X_train"])  # mended
        assert main(args) == 2  # without --retry-failed: the earlier failure is said again, with the way out
        captured = capsys.readouterr()
        printed = " ".join(captured.out.split())
        assert "failed in an earlier start" in printed and "train features contain NaN" in printed
        assert "run again with --retry-failed" in printed and "their errors are above" in captured.err
        assert main([*args, "--retry-failed"]) == 0
        assert "1 runs, 0 already finished" in " ".join(capsys.readouterr().out.split())
        assert (out / "table.md").is_file()
        assert main(args) == 0  # finished now: nothing failed, nothing run
        assert "1 runs, 1 already finished" in " ".join(capsys.readouterr().out.split())


def test_a_mended_feature_folder_is_new_data_whose_runs_train_at_once(tmp_path, capsys):
    """A feature folder is known by its files (docs/architecture.md, "What a run's id is made of"): mended, it is
    other data, whose run has never failed; the broken data's failure is neither its record nor said again."""
    feats = feature_folder(tmp_path / "feats", seed=1)
    good = np.load(feats / "train_features.npy")
    broken = good.copy()
    broken[3, 2] = np.nan
    np.save(feats / "train_features.npy", broken)
    out = tmp_path / "o"
    args = ["benchmark", "--dataset", str(feats), "--methods", "an", *TINY, "--out", str(out)]
    assert main(args) == 2
    assert "train features contain NaN" in " ".join(capsys.readouterr().out.split())
    np.save(feats / "train_features.npy", good)  # mended
    assert main(args) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "1 runs, 0 already finished" in printed and "failed in an earlier start" not in printed
    assert (out / "table.md").is_file()


# --------------------------------------------------------------------------- checks of a dry run and a start


def test_a_dry_run_checks_train_only_names_as_a_start_does(tmp_path, capsys):
    sweep = tmp_path / "grid.yaml"
    sweep.write_text("methods: [an]\nsettings: {train_only: [layer99]}\n")
    for extra in (["--dry-run"], []):
        assert main(["sweep", str(sweep), "--quiet", *extra]) == 2
        assert "train_only names 'layer99', which this model does not have" in one_line(capsys)
    sweep.write_text("methods: [an]\nsettings: {train_only: [head]}\n")
    assert main(["sweep", str(sweep), "--dry-run"]) == 0


def test_min_lr_above_the_lr_is_refused_on_the_whole_configuration(tmp_path, capsys):
    """The cosine schedule ends at min_lr: above the lr it climbed. Refused, checked on the settings of every
    layer together: a config file's min_lr beside a higher typed lr trains."""
    sweep = tmp_path / "grid.yaml"
    sweep.write_text("methods: [an]\nlrs: [0.001]\nsettings: {lr_schedule: cosine, min_lr: 0.01}\n")
    assert main(["sweep", str(sweep), "--dry-run"]) == 2
    assert ("min_lr 0.01 is above the lr 0.001: the cosine schedule would climb from the lr to min_lr"
            in one_line(capsys))
    sweep.write_text("methods: [an]\nlrs: [0.02]\nsettings: {lr_schedule: cosine, min_lr: 0.01}\n")
    assert main(["sweep", str(sweep), "--dry-run"]) == 0
    config = tmp_path / "c.yaml"
    config.write_text("lr_schedule: cosine\nmin_lr: 0.01\n")
    out = tmp_path / "run"
    assert main(["train", "--dataset", "yeast", "--config", str(config), "--lr", "0.001", "--epochs", "1",
                 "--out", str(out)]) == 2
    assert "min_lr 0.01 is above the lr 0.001" in one_line(capsys) and not out.exists()


# --------------------------------------------------------------------------- two benchmarks on one folder


def test_a_benchmark_of_another_grid_on_a_live_benchmarks_folder_is_refused(tmp_path, capsys):
    """Two different grids on one --out at once: the last to finish silently decided the tables."""
    out = tmp_path / "o"
    assert main(["benchmark", "--methods", "an", *TINY, "--out", str(out)]) == 0
    mine = bm.grid_of([bm.BenchmarkSpec(methods=("an",), seeds=(0,), lrs=(0.01,), epochs=1, subset=200)],
                      out / bm.STORE_NAME)
    with hold_out_folder(out, mine):  # a live benchmark of the same grid: this one joins it
        assert main(["benchmark", "--methods", "an", *TINY, "--out", str(out)]) == 0
    with hold_out_folder(out, "another-grid"):  # a live benchmark of another grid
        capsys.readouterr()
        assert main(["benchmark", "--methods", "an", *TINY, "--out", str(out)]) == 2
        err = one_line(capsys)
        assert f"--out {out} is in use by another benchmark of a different grid" in err
        assert "wait for it to finish, or give another --out" in err
    assert main(["benchmark", "--methods", "an", *TINY, "--out", str(out)]) == 0  # it ended: its lock went with it
    assert [p.name for p in out.glob(".spmlkit-grid-*.lock")] == [f".spmlkit-grid-{mine}.lock"]


def test_a_benchmark_waits_for_the_runs_another_sweep_holds_before_writing_its_tables(tmp_path, capsys):
    """A benchmark whose runs another live benchmark held wrote incomplete tables with exit 0."""
    out = tmp_path / "o"
    args = ["benchmark", "--methods", "an,em", *TINY, "--out", str(out)]
    assert main(["benchmark", "--methods", "an,em", "--seeds", "0", "--lrs", "0.01", "--epochs", "1", "--subset",
                 "200", "--jobs", "1", "--quiet", "--out", str(out)]) == 0  # both runs finished
    store = ResultsStore(out / bm.STORE_NAME)
    spec = bm.BenchmarkSpec(methods=("an", "em"), seeds=(0,), lrs=(0.01,), epochs=1, subset=200)
    em = next(r for r in expand(spec.sweep(store.path)) if r["method"] == "em")
    record = store.get(em["run_id"])
    assert store.delete(em["run_id"])
    other = "other-host:1:cafe"  # a live sweep elsewhere trains em
    assert store.claim(em["run_id"], other, duration=60.0) == CLAIMED

    def finish_elsewhere() -> None:
        time.sleep(1.5)
        store.add(record, release_lease=other)

    worker = threading.Thread(target=finish_elsewhere)
    worker.start()
    capsys.readouterr()
    try:
        assert main(args) == 0
    finally:
        worker.join()
    printed = " ".join(capsys.readouterr().out.split())
    assert "waiting for 1 run(s) of this grid that another sweep or benchmark is training" in printed
    assert {row["method"] for row in json.loads((out / "results.json").read_text())["table"]} == {"an", "em"}


def test_waiting_adds_every_calls_runs_and_stops_when_none_is_held():
    calls, waits = [], []
    answers = [SweepResult(total=4, skipped=1, ran=1, failed=0, store=Path("s"), held=2),
               SweepResult(total=4, skipped=3, ran=0, failed=0, store=Path("s"), held=2),
               SweepResult(total=4, skipped=3, ran=1, failed=1, store=Path("s"), held=0)]

    def sweep(first: bool) -> SweepResult:
        calls.append(first)
        return answers[len(calls) - 1]

    result = sweep_until_none_held(sweep, waits.append, wait_seconds=0.0)
    assert calls == [True, False, False] and waits == [2, 2]
    assert (result.ran, result.failed, result.held, result.skipped) == (2, 1, 0, 1)
    assert grid_digest(["b", "a"]) == grid_digest(["a", "b"]) != grid_digest(["a"])


# --------------------------------------------------------------------------- figures


_RENDER = """
import sys
from spmlkit.experiments import plots
from spmlkit.experiments.leaderboard import build_leaderboard, write_leaderboard
import numpy as np, pandas as pd
plots.make_all_figures(sys.argv[1], sys.argv[2])
methods = ["an", "em", "em_apl", "gr", "role", "ll_r", "bce", "opml"]
scores = pd.DataFrame(np.random.default_rng(0).uniform(20, 60, (5, len(methods))), columns=methods,
                      index=[f"d{i}" for i in range(5)])
write_leaderboard(sys.argv[2], build_leaderboard(scores), title="t")
"""


def test_figures_are_the_same_bytes_for_the_same_store(tmp_path):
    """leaderboard.png differed byte for byte between two renders of one store (the diagram's groups are Python
    sets of names, whose order changes with each process's string hashes; the SVGs carried a date)."""
    store = ResultsStore(tmp_path / "r.db")
    store.add_many(real_like(m, 0, lr) for m in ("an", "em", "em_apl") for lr in (1e-3, 1e-2))
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"render{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT / "src")}
        subprocess.run([sys.executable, "-c", _RENDER, str(store.path), str(out)], check=True, env=env, timeout=300)
        outs.append({p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert "leaderboard.png" in outs[0] and any(name.endswith(".svg") for name in outs[0])
    assert outs[0].keys() == outs[1].keys()
    assert [name for name in outs[0] if outs[0][name] != outs[1][name]] == []


def test_names_in_figures_are_escaped_reordered_and_shortened():
    assert figure_text.name("a\u202eb") == "a<U+202E>b"  # acts on nothing, shows itself
    assert figure_text.name("中文") == "<U+4E2D><U+6587>"  # the figure font has no such glyph: no empty box
    assert figure_text.name("line\nbreak\ttab") == "line<U+000A>break<U+0009>tab"
    assert figure_text.name("cost $5") == r"cost \$5"  # a dollar is not the start of mathematics
    long_name = "class_" + "x" * 200 + "_end"
    short = figure_text.name(long_name)
    assert len(short) == figure_text.MAX_NAME and short.startswith("class_") and short.endswith("x_end")
    assert "…" in short
    cut = figure_text.name("中" * 10)  # 80 characters of escapes, cut between escapes, never inside one
    assert cut == "<U+4E2D>" * 2 + "…" + "<U+4E2D>" and len(cut) <= figure_text.MAX_NAME
    assert figure_text.short_labels(["p" * 40 + "1" + "q" * 40, "p" * 40 + "2" + "q" * 40])[1].endswith(" #2")
    assert figure_text.reading_order("שלום (עולם) 12 abc") == "(םלוע) םולש 12 abc"
    assert figure_text.reading_order("כיתה 12 ב") == "ב 12 התיכ"  # the number reads left to right
    assert figure_text.reading_order("abc") == "abc"


def test_a_report_of_right_to_left_cjk_long_and_control_character_names_draws_them_all(tmp_path, monkeypatch):
    """Figures clipped, overlapped or showed empty boxes for such names, and U+202E reordered what followed.
    Every figure is drawn without a matplotlib warning (a missing glyph warns) and without text cut off or
    overlapping; the PNGs were looked at (docs/figures.md, "Names in figures")."""
    names = ["שלום עולם", "مرحبا", "中文类别", "\u202eevil", "a" * 120, "Class$1$", "ok"]
    records = []
    for m in ("an", "em"):
        r = real_like(m, 0, 1e-3, dataset="データ\u202e" + "d" * 80)
        r["class_names"] = names + [f"c{i}" for i in range(len(r["class_names"]) - len(names))]
        records.append(r)
    store = ResultsStore(tmp_path / "r.db")
    store.add_many(records)
    kept = {}
    real_save = plots.save

    def keep(fig, path, formats=("png",)):
        kept[Path(path).name] = fig
        fig.set_dpi(DPI)
        return real_save(fig, path, formats)

    monkeypatch.setattr(plots, "save", keep)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        files = plots.make_all_figures(store, tmp_path / "figs", formats=("png",))
    assert files and {n: layout_problems(f, drawn=True) for n, f in kept.items() if layout_problems(f, drawn=True)} \
        == {}
    shown = [t.get_text() for f in kept.values() for ax in f.axes for t in ax.get_xticklabels()]
    assert "<U+202E>evil" in shown and "<U+4E2D><U+6587><U+7C7B><U+522B>" in shown
    assert "םלוע םולש" in shown and not any(len(t) > figure_text.MAX_NAME for t in shown)
    title = next(iter(kept.values()))._suptitle.get_text()
    assert "<U+30C7>" in title and "\u202e" not in title
    if os.environ.get("SPMLKIT_KEEP_FIGURES"):  # to look at them: SPMLKIT_KEEP_FIGURES=folder
        shutil.copytree(tmp_path / "figs", os.environ["SPMLKIT_KEEP_FIGURES"], dirs_exist_ok=True)
