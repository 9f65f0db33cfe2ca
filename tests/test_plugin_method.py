"""The whole method of docs/plugins.md, "A whole method", as written there: a plug-in with a network
of its own, draws of its own and a step between epochs trains, resumes, sweeps in batched groups
that equal their solo runs, and takes its row in a benchmark, with nothing in spmlkit edited."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fixtures.plugins import isolated_plugins
from spmlkit.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def _doc_file(name: str) -> str:
    """The block of docs/plugins.md that is the file ``name`` (its first line is ``# name``)."""
    for body in re.findall(r"^```\w*\n(.*?)^```", DOC.read_text(), re.M | re.S):
        if body.startswith(f"# {name}\n"):
            return body
    raise AssertionError(f"docs/plugins.md has no block for {name}")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_method.py").write_text(_doc_file("my_method.py"))
    (tmp_path / "cooc.yaml").write_text(_doc_file("cooc.yaml"))
    with isolated_plugins():
        yield tmp_path


def _records(store: Path) -> list[dict]:
    from spmlkit.experiments.store import ResultsStore

    return ResultsStore(store).records()


@pytest.mark.usefixtures("one_thread")
def test_the_whole_method_trains_with_its_network_draws_and_step_between_epochs(plugin) -> None:
    base = ["train", "--plugin", "my_method.py", "--method", "cooc", "--hparam", "threshold=0.15", "--epochs", "4",
            "--subset", "400", "--quiet"]
    assert main(base + ["--out", "whole"]) == 0
    history = json.loads(Path("whole/metrics.json").read_text())
    added = [h["teacher_positives"] for h in history]
    assert sum(added) > 0  # its step between epochs added labels, and the label state holds them all
    assert history[-1]["corrections"] == sum(added)
    # its teacher, its draws' position (the run's generator) and its labels are in the checkpoint: a resumed
    # run is the whole run
    assert main(base + ["--out", "cut", "--stop-after", "2"]) == 0
    assert main(["train", "--resume", "--out", "cut", "--quiet"]) == 0
    resumed = json.loads(Path("cut/metrics.json").read_text())
    assert [h["train_loss"] for h in resumed] == [h["train_loss"] for h in history]
    whole = json.loads(Path("whole/result.json").read_text())
    assert json.loads(Path("cut/result.json").read_text())["test_map"] == whole["test_map"]
    assert any(p["name"] == "my_method.py" for p in whole["plugins"])


@pytest.mark.usefixtures("one_thread")
def test_the_whole_method_sweeps_in_groups_equal_to_its_solo_runs_and_is_benchmarked(plugin) -> None:
    from spmlkit.experiments.sweep import execute_run

    spec = Path("cooc.yaml")
    spec.write_text(spec.read_text().replace("settings: {epochs: 5}", "settings: {epochs: 3, subset: 400}"))
    assert main(["sweep", "cooc.yaml", "--jobs", "2", "--store", "s.db", "--quiet"]) == 0
    records = [r for r in _records(Path("s.db")) if r["method"] == "cooc"]
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    assert all(r["group_size"] > 1 and r.get("alone_reason") is None for r in records)
    for record in records:  # docs/architecture.md, "Many runs at once": each equals its solo run to 1e-6
        solo = execute_run(record["config"])
        assert solo["group_size"] == 1
        assert abs(solo["test_map"] - record["test_map"]) <= 1e-6 and abs(solo["val_map"] - record["val_map"]) <= 1e-6
    assert main(["benchmark", "--plugin", "my_method.py", "--methods", "an,cooc", "--lrs", "0.01", "--seeds", "0",
                 "--epochs", "2", "--subset", "400", "--out", "bench", "--quiet"]) == 0
    table = Path("bench/table.csv").read_text()
    assert "\ncooc," in table and "\nan," in table


@pytest.mark.parametrize("returned, said", [
    ("(logits - labels) ** 2", "returned a floating-point tensor of shape [64, 14] from its loss"),
    ("3", "returned int 3 from its loss"),
    ("None", "returned NoneType None from its loss"),
])
def test_a_plugin_loss_that_is_no_scalar_is_one_line_before_any_step(tmp_path, monkeypatch, capsys, returned, said):
    """A plug-in's loss that returns its element matrix, a number or nothing is refused at the first
    step, before any backward pass or optimiser step, in one line naming the plug-in and what it
    returned; the run leaves no folder behind."""
    monkeypatch.chdir(tmp_path)
    Path("bad_loss.py").write_text(
        "from spmlkit.losses.base import SPMLLoss, register\n\n\n"
        "@register('per_entry', 'returns what it should reduce')\n"
        "class PerEntry(SPMLLoss):\n"
        "    batchable = True\n\n"
        "    def loss(self, logits, labels, ctx):\n"
        f"        return {returned}\n")
    with isolated_plugins():
        code = main(["train", "--plugin", "bad_loss.py", "--method", "per_entry", "--epochs", "1", "--out", "run",
                     "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("spmlkit train: error: method 'per_entry' of plug-in bad_loss " + said)
    assert "nothing was trained on it" in err and not Path("run").exists()
