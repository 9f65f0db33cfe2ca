"""Weight decay as a sweep axis (``weight_decays``; docs/sweep-files.md): each value is its runs' setting and
part of their ids, selected on validation with the lr; a sweep without the axis keeps the ids it always had;
and where the seed draws each run's rows (partition 'random') the runs of one seed and batch size come
together, the seed staying in what groups share (docs/architecture.md, "Many runs at once")."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from spmlkit.experiments.sweep import SweepSpec, expand, load_sweep, run_config
from spmlkit.experiments.sweep.spec import grid_size, group_key, in_grid, run_id


def test_without_the_axis_a_run_has_no_weight_decay_key_and_its_id_hashes_what_it_did(tmp_path: Path):
    run = expand(SweepSpec(name="s", lrs=[1e-3], store=str(tmp_path / "s.db")))[0]
    assert "weight_decay" not in run
    keys = ("dataset", "method", "observation", "seed", "lr", "batch_size", "hparams", "val_variant", "settings")
    assert run["run_id"] == run_id({k: run[k] for k in keys})  # the fields runs always had, nothing more


def test_the_axis_multiplies_the_grid_and_reaches_each_runs_optimiser(tmp_path: Path):
    spec = SweepSpec(name="w", lrs=[1e-3, 1e-2], seeds=[0, 1], weight_decays=[0.0, 1e-4, 1e-3],
                     store=str(tmp_path / "w.db"))
    runs = expand(spec)
    assert grid_size(spec) == len(runs) == 12 and len({r["run_id"] for r in runs}) == 12
    assert sorted({r["weight_decay"] for r in runs}) == [0.0, 1e-4, 1e-3]
    assert {run_config(r).optimisation.weight_decay for r in runs} == {0.0, 1e-4, 1e-3}
    assert all(in_grid(spec, r) for r in runs)
    assert not in_grid(spec, {**runs[0], "weight_decay": 0.5})
    assert len({group_key(r) for r in runs}) == 1  # seed, lr and weight decay are what a group may vary


def test_a_sweep_file_reads_the_axis_and_refuses_what_cannot_be_one(tmp_path: Path):
    path = tmp_path / "grid.yaml"
    path.write_text("datasets: [yeast]\nmethods: [an]\nweight_decays: [0, 1e-4]\n")
    assert load_sweep(path).weight_decays == [0.0, 1e-4]  # YAML's `1e-4` (a string) read as a number
    for text, message in (("weight_decays: [-1]", "weight_decays must be numbers >= 0, got -1.0"),
                          ("weight_decays: []", "weight_decays must not be empty"),
                          ("weight_decays: [0.1]\nsettings: {optimisation: {weight_decay: 0.1}}",
                           "give the weight decay either in settings or as the weight_decays axis, not both"),
                          ("weight_decays: [0.001, 1e-3]", "weight_decays lists 0.001 twice; give each value once")):
        path.write_text(f"datasets: [yeast]\nmethods: [an]\n{text}\n")
        with pytest.raises(ValueError, match=message):
            load_sweep(path)


def test_under_a_random_partition_one_seeds_runs_are_adjacent_and_keep_the_seed_in_their_key(tmp_path: Path):
    spec = SweepSpec(name="t", lrs=[1e-3, 1e-2], seeds=[0, 1], batch_sizes=[8, 16], weight_decays=[0.0, 1e-4],
                     settings={"data": {"partition": "random"}}, store=str(tmp_path / "t.db"))
    runs = expand(spec)
    blocks = [[(r["seed"], r["batch_size"]) for r in block]
              for _, block in itertools.groupby(runs, key=group_key)]
    # four groups of lr x weight decay, each one seed's and one batch size's
    assert [len(b) for b in blocks] == [4, 4, 4, 4] and [b[0] for b in blocks] == [(0, 8), (0, 16), (1, 8), (1, 16)]
    assert all(len(set(b)) == 1 for b in blocks)
