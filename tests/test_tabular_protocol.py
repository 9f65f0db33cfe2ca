"""The tabular protocol of SMILE and CRISP as run settings (docs/protocol.md, "The tabular protocol"):
``partition: random`` pools a feature set's official lists and cuts them 80/10/10 by the run's seed, with
full labels on validation and test and one observed positive per training row; ``hidden: classes`` is
SMILE's MLP; a group shares its rows, so under a random partition the seed stays out of what groups vary;
runs differing in weight decay train as one group, each equal to its solo run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from spmlkit.data import load_dataset
from spmlkit.errors import InputError
from spmlkit.experiments.presets import get_preset, resolve_config
from spmlkit.protocol import random_partition
from spmlkit.training import train
from spmlkit.training.plan import batch_key, plan_run
from spmlkit.training.run_data import _randomly_partitioned
from spmlkit.training.trainer import train_group

TABULAR = {"dataset": "yeast", "partition": "random", "head": "mlp", "hidden": "classes", "device": "cpu"}


def test_a_random_partition_pools_the_official_lists_and_cuts_them_by_the_seed():
    plan = plan_run(resolve_config({**TABULAR, "seed": 4}))
    ds = load_dataset("yeast")
    X = np.concatenate([ds.X_train, ds.X_test])  # the official train list, then the test list
    Y = np.concatenate([ds.Y_train, ds.Y_test])
    tr, va, te = random_partition(len(Y), 4)
    data, split = plan.data, plan.split
    assert (len(tr), len(va), len(te)) == (1933, 242, 242)
    assert np.array_equal(data.X_train, X[tr]) and np.array_equal(data.X_val, X[va]) and np.array_equal(data.X_test, X[te])
    assert np.array_equal(split.val_targets, Y[va]) and np.array_equal(data.Y_test, Y[te])  # fully labelled
    assert np.array_equal(split.train_idx, np.arange(1933)) and len(split.val_idx) == 0
    # one observed positive per training row, a true one, nothing else
    assert (split.observed == 1).sum(axis=1).tolist() == [1] * 1933 and not (split.observed == -1).any()
    assert np.all(Y[tr][split.observed == 1] == 1)


def test_rows_without_a_positive_leave_every_part_and_subset_cuts_the_pool_first():
    X = np.arange(40, dtype=np.float32).reshape(20, 2)
    Y = np.zeros((20, 3), dtype=np.uint8)
    Y[np.arange(20), np.arange(20) % 3] = 1
    Y[[2, 13]] = 0  # one empty row in each official list
    ds = SimpleNamespace(name="toy", class_names=("a", "b", "c"), X_train=X[:12], Y_train=Y[:12], X_test=X[12:],
                         Y_test=Y[12:])
    config = resolve_config({"dataset": "yeast", "partition": "random", "seed": 1, "subset": 15})
    data = _randomly_partitioned(ds, config)
    kept = np.delete(np.arange(20), [2, 13])[:15]  # 18 labelled rows, the first 15 of them
    tr, va, te = random_partition(15, 1)
    assert data.X_train[:, 0].tolist() == X[kept[tr], 0].tolist()
    assert data.X_val[:, 0].tolist() == X[kept[va], 0].tolist() and data.X_test[:, 0].tolist() == X[kept[te], 0].tolist()


def test_smiles_mlp_is_as_wide_as_the_set_has_labels():
    model = plan_run(resolve_config({**TABULAR, "seed": 0})).build_model()
    first, _, _, last = model.net
    assert (first.in_features, first.out_features, last.out_features) == (103, 14, 14)
    with pytest.raises(ValueError, match="hidden must be a positive integer or 'classes'"):
        resolve_config({"hidden": "labels"})


@pytest.mark.parametrize("setting, message", [
    ({"val_frac": 0.3}, "val_frac 0.3 splits the official train list; partition 'random' holds out 10 % of the whole"),
    ({"val_variant": "observed"}, "val_variant 'observed' does not apply: use val_variant 'clean'"),
    ({"partition": "halves"}, "partition must be one of official, random; got 'halves'"),
])
def test_settings_the_random_partition_cannot_honour_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        resolve_config({"partition": "random", **setting})


def test_an_image_run_refuses_a_random_partition():
    with pytest.raises(InputError, match="partition only apply to feature runs"):
        plan_run(resolve_config({"dataset": "digits-mosaic", "partition": "random", "device": "cpu"}))


def test_under_a_random_partition_the_seed_stays_in_the_group_key():
    a, b = (resolve_config({**TABULAR, "seed": s, "lr": 0.01}) for s in (0, 1))
    assert batch_key(a) != batch_key(b)  # their rows differ: they cannot share one group's data
    official = [resolve_config({"dataset": "yeast", "seed": s, "lr": lr, "weight_decay": wd})
                for s, lr, wd in ((0, 0.01, 0.0), (1, 0.001, 1e-4))]
    assert batch_key(official[0]) == batch_key(official[1])


def test_the_tabular_preset_names_the_protocol_and_no_method_preset_is_layered_under_it():
    preset = get_preset("tabular")
    config = resolve_config({"dataset": "yeast", "method": "em"}, preset="tabular")
    assert preset.config == {"partition": "random", "head": "mlp", "hidden": "classes", "epochs": 10,
                             "standardize": False}
    assert (config.data.partition, config.model.hidden, config.schedule.epochs, config.data.standardize) == (
        "random", "classes", 10, False)
    assert config.method.hparams == {}  # em/yeast's tuned alpha belongs to spmlkit's own protocol


@pytest.mark.usefixtures("one_thread")
def test_runs_differing_in_weight_decay_train_as_one_group_each_equal_to_its_solo_run():
    configs = [resolve_config({**TABULAR, "subset": 300, "epochs": 2, "batch_size": 16, "seed": 2, "lr": lr,
                               "weight_decay": wd}) for lr in (1e-2, 1e-3) for wd in (0.0, 1e-2)]
    grouped = train_group(configs)
    finals = []
    for config, g in zip(configs, grouped):
        solo = train(config)
        weights = zip(g.model.state_dict().values(), solo.model.state_dict().values())
        assert max(float((a - b).abs().max()) for a, b in weights) <= 1e-6  # docs/architecture.md's tolerance
        assert abs(g.test_map - solo.test_map) <= 1e-6 and g.best_epoch == solo.best_epoch
        finals.append(torch.cat([p.flatten() for p in solo.model.state_dict().values()]))
    assert not torch.equal(finals[0], finals[1])  # the weight decay did act: 0 and 1e-2 end elsewhere


def test_a_subset_that_leaves_a_part_empty_is_refused_before_training_and_leaves_no_folder(tmp_path, capsys):
    """`--subset 5` under `partition: random` cut 5/0/0: a traceback ("scores is empty") after training,
    and a run folder with best.pt and last.pt but no result.json."""
    from pathlib import Path

    from spmlkit.cli import main

    (tmp_path / "random.yaml").write_text("partition: random\n")
    assert main(["train", "--config", str(tmp_path / "random.yaml"), "--dataset", "yeast", "--subset", "5",
                 "--epochs", "1", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "spmlkit train: error: subset 5 of yeast: a partition of 5 rows into 80 / 10 / 10 % leaves the validation and the test part "
        "empty (5 / 0 / 0 rows); use at least 6 rows (subset) or larger shares\n")
    assert not Path("runs").exists()
