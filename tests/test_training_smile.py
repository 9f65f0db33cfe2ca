"""SMILE through the trainer (docs/methods.md, "smile"): what its graph is built from in a feature
run and in an image run, that a resumed image run continues exactly, and that feature runs train in
batched groups (equal to their solo runs: tests/test_batched.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmlkit.experiments.presets import DATASET_DEFAULTS
from spmlkit.training import RunConfig, train
from spmlkit.training.checkpoint import load_checkpoint
from spmlkit.training.config import config_from_dict
from spmlkit.training.distributed import Distributed
from spmlkit.training.plan import plan_run
from spmlkit.training.run_data import RunData, standardize
from spmlkit.training.trainer import _build_run, _source

pytestmark = pytest.mark.usefixtures("one_thread")

MOSAIC = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 120, "mosaic_test": 40,
          "batch_size": 32, "device": "cpu", "method": "smile"}


def _toy_data(n: int = 50, d: int = 4, c: int = 3) -> RunData:
    rng = np.random.RandomState(0)
    X = (3.0 * rng.randn(n, d) + 1.0).astype(np.float32)
    truth = (X @ rng.randn(d, c) > 0).astype(np.uint8)
    truth[truth.sum(1) == 0, 0] = 1
    observed = np.zeros_like(truth, dtype=np.int8)
    observed[np.arange(n), truth.argmax(1)] = 1
    return RunData("features", "toy", ("a", "b", "c"), truth, X_train=X, observed=observed, X_val=X[:10],
                   Y_val=truth[:10])


def test_a_feature_run_builds_its_graph_from_the_rows_the_model_sees():
    data = _toy_data()
    config = RunConfig(dataset="toy", observation="given", standardize=True, device="cpu", method="smile", epochs=2,
                       batch_size=16, lr=0.01)
    plan = plan_run(config, data=data)
    run = _build_run(plan, _source(plan, Distributed()))
    expected = standardize(data.X_train[plan.split.train_idx])[0]
    assert np.array_equal(run.method.encoder.features.numpy(), expected)
    result = train(config, data=data)
    assert result.finished and np.isfinite([h["train_loss"] for h in result.history]).all()


def test_an_image_run_builds_its_graph_from_the_initial_backbones_pooled_features():
    plan = plan_run(config_from_dict(MOSAIC))
    source = _source(plan, Distributed())
    run = _build_run(plan, source)
    model = plan.build_model()  # the same seed: the same initial weights
    model.eval()
    images = plan.data.images.train_dataset()
    with torch.no_grad():
        pixels = images.pixels(np.asarray(plan.split.train_idx))
        expected = model.features(source.transform.normalize(pixels.to(plan.device)))
    assert torch.allclose(run.method.encoder.features, expected, rtol=0, atol=1e-6)
    assert run.model.training  # computing them left the model as it was


def test_a_resumed_image_run_rebuilds_the_same_graph_and_continues_the_draws(tmp_path):
    cfg = {**MOSAIC, "epochs": 2}
    full = train(config_from_dict({**cfg, "out": str(tmp_path / "full")}))
    part = train(config_from_dict({**cfg, "out": str(tmp_path / "cut")}), stop_after=1)
    assert not part.finished
    resumed = train(config_from_dict({**cfg, "out": str(tmp_path / "cut")}), resume=True)
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in full.history]
    assert resumed.test_map == full.test_map
    a, b = load_checkpoint(tmp_path / "full" / "last.pt"), load_checkpoint(tmp_path / "cut" / "last.pt")
    tensors = [k for k in a["method"] if k != "_extra_state"]
    assert tensors and all(torch.equal(a["method"][k], b["method"][k]) for k in tensors)
    assert torch.equal(a["method"]["_extra_state"]["draws"], b["method"]["_extra_state"]["draws"])
    assert "encoder.features" not in a["method"]  # the data is not checkpointed
