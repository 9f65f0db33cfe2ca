"""Feature runs through the one trainer: exact first Adam step, reproducibility, label-state hooks,
selection, stopping rules."""

import numpy as np
import pytest
import torch
from torch import nn

from spmlkit import metrics
from spmlkit.labels import Kind
from spmlkit.training import RunConfig, train
from spmlkit.training.run_data import RunData
from spmlkit.training.sources import predict_proba


def FeatureTrainConfig(**kwargs):
    """A feature run on in-memory rows: observed labels as given, no standardisation, no test set,
    on the CPU, named (the numbers below are the CPU's; ``auto`` would also choose it for features)."""
    return RunConfig(dataset="toy", observation="given", standardize=False, device="cpu", **kwargs)


def train_on_features(X, obs, X_val, y_val, config, truth_train=None):
    data = RunData("features", "toy", tuple(f"c{i}" for i in range(obs.shape[1])), truth_train, X_train=X,
                   observed=obs, X_val=X_val, Y_val=y_val)
    return train(config, data=data)


def _toy(n=60, d=5, c=4, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d).astype(np.float32)
    W = rng.randn(d, c)
    truth = (X @ W + 0.5 * rng.randn(n, c) > 0.3).astype(np.uint8)
    truth[truth.sum(1) == 0, 0] = 1
    obs = np.zeros_like(truth, dtype=np.int8)
    for i in range(n):  # one positive per row: the first true positive
        obs[i, np.flatnonzero(truth[i])[0]] = 1
    return X, truth, obs


def test_one_full_batch_epoch_is_exactly_one_adam_step_on_the_an_loss():
    X, truth, obs = _toy()
    lr = 0.01
    cfg = FeatureTrainConfig(method="an", epochs=1, batch_size=len(X), lr=lr, seed=3)
    fit = train_on_features(X, obs, X[:10], truth[:10], cfg)

    torch.manual_seed(3)
    ref = nn.Linear(X.shape[1], truth.shape[1])
    W0, b0 = ref.weight.detach().double(), ref.bias.detach().double()
    x = torch.from_numpy(X).double()
    p = torch.sigmoid(x @ W0.T + b0)
    y = torch.from_numpy((obs == 1).astype(np.float64))
    dz = (p - y) / y.numel()                  # d BC-mean(BCE) / d logits
    gW, gb = dz.T @ x, dz.sum(0)
    eps = 1e-8                                 # Adam's first step: m_hat = g, v_hat = g^2
    W1 = W0 - lr * gW / (gW.abs() + eps)
    b1 = b0 - lr * gb / (gb.abs() + eps)
    assert torch.allclose(fit.model.net.weight.double(), W1, atol=1e-6)
    assert torch.allclose(fit.model.net.bias.double(), b1, atol=1e-6)


def test_same_seed_same_bits_different_seed_different_run():
    X, truth, obs = _toy()
    cfg = FeatureTrainConfig(method="em_apl", hparams={"warmup_epochs": 2}, epochs=4, batch_size=16, lr=0.01, seed=1)
    a = train_on_features(X, obs, X[:20], truth[:20], cfg, truth_train=truth)
    b = train_on_features(X, obs, X[:20], truth[:20], cfg, truth_train=truth)
    assert torch.equal(a.model.net.weight, b.model.net.weight)
    assert [r["val_map"] for r in a.history] == [r["val_map"] for r in b.history]
    assert torch.equal(a.label_state.kind, b.label_state.kind)
    cfg = FeatureTrainConfig(method="em_apl", hparams={"warmup_epochs": 2}, epochs=4, batch_size=16, lr=0.01, seed=2)
    c = train_on_features(X, obs, X[:20], truth[:20], cfg, truth_train=truth)
    assert not torch.equal(a.model.net.weight, c.model.net.weight)


def test_apl_rounds_select_the_quota_each_epoch_after_warmup():
    X, truth, obs = _toy(n=80)
    cfg = FeatureTrainConfig(method="em_apl", hparams={"warmup_epochs": 2, "theta": 0.5},
                             epochs=4, batch_size=16, lr=0.01, seed=0)
    fit = train_on_features(X, obs, X[:20], truth[:20], cfg, truth_train=truth)
    unobserved = (obs == 0).sum(0)
    quota = np.floor(0.5 * unobserved / (4 - 2)).astype(int)
    counts = [r["pseudo_negatives"] for r in fit.history]
    # rounds after epochs 2 and 3; none after warm-up epoch 1 or the last epoch
    assert counts == [0, quota.sum(), 2 * quota.sum(), 2 * quota.sum()]


def test_ll_cp_corrections_reach_the_label_state():
    X, truth, obs = _toy(n=80)
    cfg = FeatureTrainConfig(method="ll_cp", hparams={"delta_rel": 5.0}, epochs=3, batch_size=20, lr=0.05, seed=0)
    fit = train_on_features(X, obs, X[:20], truth[:20], cfg, truth_train=truth)
    hist = [r["corrections"] for r in fit.history]
    assert hist[0] == 0 and hist[1] > 0 and hist[2] >= hist[1]
    best = fit.history[fit.best_epoch - 1]["corrections"]
    assert fit.label_state.count(Kind.CORRECTED) == best   # label state restored with the best epoch
    assert (fit.label_state.observed.numpy() == obs).all()  # observed labels never modified


def test_restored_model_is_the_best_validation_epoch():
    X, truth, obs = _toy(n=80)
    cfg = FeatureTrainConfig(method="an", epochs=6, batch_size=8, lr=0.05, seed=0)
    fit = train_on_features(X, obs, X[60:], truth[60:], cfg)
    vals = [r["val_map"] for r in fit.history]
    assert fit.val_map == max(vals) and fit.best_epoch == vals.index(max(vals)) + 1
    got = metrics.mean_average_precision(predict_proba(fit.model, torch.from_numpy(X[60:])).numpy(), truth[60:])
    assert got == pytest.approx(fit.val_map, abs=1e-12)


def test_patience_zero_stops_at_the_first_epoch_that_is_not_better():
    X, truth, obs = _toy(n=80)
    cfg = FeatureTrainConfig(method="an", epochs=30, batch_size=8, lr=0.2, seed=0, patience=0)
    fit = train_on_features(X, obs, X[60:], truth[60:], cfg)
    vals = [r["val_map"] for r in fit.history]
    assert len(vals) < 30
    assert all(vals[i] > max(vals[:i]) for i in range(1, len(vals) - 1))
    assert vals[-1] <= max(vals[:-1])


def test_bad_inputs_are_explained():
    X, truth, obs = _toy()
    cfg = FeatureTrainConfig(method="an", epochs=1)
    with pytest.raises(ValueError, match="rows"):
        train_on_features(X[:-1], obs, X, truth, cfg)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        train_on_features(bad, obs, X, truth, cfg)
    with pytest.raises(ValueError, match="valid names are"):
        FeatureTrainConfig(method="emm")
    with pytest.raises(ValueError, match="needs the full training labels"):
        train_on_features(X, obs, X, truth, FeatureTrainConfig(method="bce", epochs=1))


def _determinism_settings() -> tuple:
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


def test_a_deterministic_run_switches_every_setting_for_its_epochs_and_restores_them():
    """``--deterministic`` (docs/architecture.md, "Numbers across devices"): deterministic
    algorithms (warning, not failing, where an operation has none), cuDNN without benchmarking
    and TF32 off while the run trains; the process's own settings afterwards. The switches are
    process-wide torch flags, so the CPU shows them as a GPU would."""
    X, truth, obs = _toy()
    before = _determinism_settings()
    during: list[tuple] = []
    data = RunData("features", "toy", tuple(f"c{i}" for i in range(obs.shape[1])), truth, X_train=X, observed=obs,
                   X_val=X[:20], Y_val=truth[:20])
    train(FeatureTrainConfig(method="an", epochs=2, batch_size=32, deterministic=True), data=data,
          on_epoch=lambda record: during.append(_determinism_settings()))
    assert during == [(True, True, True, False, False, False)] * 2
    assert _determinism_settings() == before
