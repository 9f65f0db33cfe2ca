"""Sweeps: expansion, skip-finished resume (also after a hard kill), failure isolation. Every sweep
names the CPU in its settings (``device: cpu``)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import SweepSpec, expand, load_sweep, run_sweep

SWEEP = """
name: t
datasets: [yeast]
methods: [an, em, gr]
seeds: [0, 1]
lrs: [0.003]
hparams:
  em: {alpha: [0.05, 0.1]}
  gr: {schedule: [{bogus: [0, 1]}]}
settings: {epochs: 2, device: cpu}
store: t.db
"""


def test_expand_is_the_full_grid_with_stable_ids(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    spec = load_sweep(tmp_path / "s.yaml")
    runs = expand(spec)
    assert len(runs) == 2 * (1 + 2 + 1)
    assert [r["hparams"] for r in runs if r["method"] == "em"] == [{"alpha": 0.05}] * 2 + [{"alpha": 0.1}] * 2
    assert len({r["run_id"] for r in runs}) == len(runs)
    assert [r["run_id"] for r in expand(load_sweep(tmp_path / "s.yaml"))] == [r["run_id"] for r in runs]
    assert spec.store == str(tmp_path / "t.db")


def test_bad_sweep_files_are_explained(tmp_path):
    (tmp_path / "s.yaml").write_text("methods: [an]\nlearning_rates: [1]\n")
    with pytest.raises(ValueError, match="unknown key.*learning_rates"):
        load_sweep(tmp_path / "s.yaml")
    with pytest.raises(ValueError, match="hparams given for methods not in the sweep"):
        SweepSpec(methods=["an"], hparams={"em": {"alpha": [0.1]}})


def test_resume_skips_finished_runs_and_failures_do_not_stop_the_sweep(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    spec = load_sweep(tmp_path / "s.yaml")
    first = run_sweep(spec, max_runs=3)
    assert (first.ran, first.skipped, first.failed) == (3, 0, 0)
    store = ResultsStore(spec.store)
    stamps = {r["run_id"]: r["finished_at"] for r in store.records()}
    second = run_sweep(spec, jobs=2)
    assert (second.ran, second.skipped, second.failed) == (5, 3, 2)
    records = {r["run_id"]: r for r in store.records()}
    assert len(records) == 8
    assert all(records[k]["finished_at"] == v for k, v in stamps.items())  # not re-run
    failed = [r for r in records.values() if r["status"] == "failed"]
    assert {r["method"] for r in failed} == {"gr"} and all("bogus" in r["error"] for r in failed)
    ok = [r for r in records.values() if r["status"] == "ok"]
    assert all(0 < r["test_map"] <= 1 and len(r["history"]) == 2 and len(r["test_ap"]) == 14 for r in ok)
    assert all(len(r["analysis"]["hist_pos"]) == 14 for r in ok)
    third = run_sweep(spec)
    assert third.ran == 0 and third.skipped == 8
    assert run_sweep(spec, retry_failed=True).ran == 2


def test_a_killed_sweep_resumes_where_it_stopped(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: k\ndatasets: [yeast]\nmethods: [an, em, epr, dw]\nseeds: [0, 1, 2]\nlrs: [0.003]\n"
        "settings: {epochs: 15, device: cpu}\nstore: k.db\n")
    cmd = [sys.executable, "-m", "spmlkit", "sweep", str(tmp_path / "s.yaml"), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    store = ResultsStore(tmp_path / "k.db")
    deadline = time.time() + 120
    while len(store) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {r["run_id"]: r["finished_at"] for r in store.records()}
    assert 2 <= len(done_before) < 12
    result = run_sweep(load_sweep(tmp_path / "s.yaml"))
    assert result.skipped == len(done_before) and result.ran == 12 - len(done_before)
    after = {r["run_id"]: r["finished_at"] for r in store.records()}
    assert len(after) == 12 and all(after[k] == v for k, v in done_before.items())


def test_report_command_writes_tables_and_every_figure(tmp_path):
    import pandas as pd

    from spmlkit.cli import main

    (tmp_path / "s.yaml").write_text(
        "name: r\ndatasets: [yeast]\nmethods: [bce, an, em_apl]\nseeds: [0, 1]\nlrs: [0.003, 0.01]\n"
        "hparams:\n  em_apl: {alpha: [0.05, 0.1], warmup_epochs: 1}\nsettings: {epochs: 3, device: cpu}\nstore: r.db\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--quiet"]) == 0
    out = tmp_path / "rep"
    assert main(["report", "--store", str(tmp_path / "r.db"), "--out", str(out), "--reference", "EM"]) == 0
    md = (out / "table.md").read_text()
    assert "EM+APL" in md and "±" in md and "**" in md
    assert (out / "table.tex").read_text().count(r"\pm") >= 3
    thresholds = pd.read_csv(out / "thresholds.csv")
    assert set(thresholds["method"]) == {"bce", "an", "em_apl"}
    assert thresholds.loc[thresholds.method == "an", "OF1 @0.75"].iloc[0] != "–"      # 0.5 and 0.75 for every method
    assert thresholds.loc[thresholds.method == "em_apl", "OF1 @val (global t)"].iloc[0] != "–"
    figures = {p.stem.split("_yeast")[0] for p in (out / "figures").glob("*.png")}
    assert {"densities", "wasserstein_vs_an", "ap_gain_vs_an", "pseudo_labels", "training_curves"} <= figures
    assert any(p.name.startswith("sensitivity_alpha") for p in (out / "figures").glob("*.svg"))
    # the table's numbers are the mean over seeds of the configuration selected on validation
    import pandas as pd

    from spmlkit.experiments.store import ResultsStore

    df = ResultsStore(tmp_path / "r.db").to_dataframe()
    an = df[df.method == "an"]
    best_lr = an.groupby("lr").val_map.mean().idxmax()
    expected = 100 * an[an.lr == best_lr].test_map.mean()
    sel = pd.read_csv(out / "selected_configs.csv")
    assert sel[sel.method == "an"]["mean"].iloc[0] == pytest.approx(expected)
