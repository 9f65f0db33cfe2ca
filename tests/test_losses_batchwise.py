"""Batch-wise losses (EPR, high-rank, PU-MLC and its mixup term): values, gradients, stability."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.losses.batchwise import (
    high_rank_regularizer,
    pu_mixup_consistency,
    pu_temperature,
    pu_variational_loss,
)

torch.set_num_threads(1)

Z = [[0.7, -0.3, 1.2], [-1.1, 0.4, 2.0], [0.2, -2.2, 0.5]]
Y = [[1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def _t(rows, dtype=torch.float64):
    return torch.tensor(rows, dtype=dtype)


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _random_batch(
    seed: int, batch: int = 6, classes: int = 4, dtype=torch.float64, scale: float = 2.0
):
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(batch, classes, generator=g, dtype=dtype)
    y = torch.randint(-1, 2, (batch, classes), generator=g).to(dtype)
    return z, y


# ----------------------------------------------------------------------------- EPR


@pytest.mark.parametrize("norm", ["l2", "l1"])
def test_epr_hand_value(norm):
    k = 1.5
    batch, classes = len(Z), len(Z[0])
    pos = sum(-math.log(sig(Z[n][c])) for n in range(batch) for c in range(classes) if Y[n][c] == 1)
    mean_count = sum(sig(v) for row in Z for v in row) / batch
    reg = (mean_count - k) ** 2 / classes**2 if norm == "l2" else abs(mean_count - k) / classes
    expected = pos / (batch * classes) + reg
    value = losses.create("epr", expected_num_pos=k, norm=norm)(_t(Z), _t(Y))
    assert value.item() == pytest.approx(expected, abs=1e-12)


def test_epr_validation():
    with pytest.raises(ValueError, match="norm must be one of"):
        losses.create("epr", norm="l3")
    with pytest.raises(ValueError, match="expected_num_pos"):
        losses.create("epr", expected_num_pos=-1.0)


# ----------------------------------------------------------------------------- high-rank


def numpy_high_rank(z: np.ndarray, lam: float, delta: float) -> float:
    p = 1 / (1 + np.exp(-z))
    batch, classes = p.shape
    sign, logdet = np.linalg.slogdet(p.T @ p / batch + delta * np.eye(classes))
    assert sign > 0
    return -lam / classes * logdet


@pytest.mark.parametrize("batch,classes", [(7, 3), (2, 5)])
def test_high_rank_matches_numpy_slogdet(batch, classes):
    z, y = _random_batch(3, batch=batch, classes=classes)
    fn = losses.create("highrank", lam=0.3, delta=1e-3)
    value = fn(z, y).item()
    assert value == pytest.approx(numpy_high_rank(z.numpy(), 0.3, 1e-3), abs=1e-10)
    # singular-value form; for B < C the C - B missing directions add log δ each
    s = np.linalg.svd(1 / (1 + np.exp(-z.numpy())), compute_uv=False)
    logs = np.log(s**2 / batch + 1e-3).sum() + max(classes - batch, 0) * math.log(1e-3)
    assert value == pytest.approx(-0.3 / classes * logs, abs=1e-10)


@pytest.mark.parametrize("batch,classes", [(16, 40), (40, 16), (1, 6)])
def test_high_rank_equals_the_full_log_det_and_its_gradient_on_either_side(batch, classes):
    """The value and gradient come from the smaller Gram matrix (B x B when B < C); both equal
    those of the C x C log-determinant taken directly, for R stacked batches at once."""
    g = torch.Generator().manual_seed(5)
    z = (3 * torch.randn(2, batch, classes, generator=g, dtype=torch.float64)).requires_grad_(True)
    value = high_rank_regularizer(z, 0.3, 1e-3)
    (grad,) = torch.autograd.grad(value.sum(), z)
    zz = z.detach().clone().requires_grad_(True)
    p = torch.sigmoid(zz)
    full = -0.3 / classes * torch.logdet(p.mT @ p / batch + 1e-3 * torch.eye(classes, dtype=torch.float64))
    (ref,) = torch.autograd.grad(full.sum(), zz)
    torch.testing.assert_close(value, full, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref, rtol=1e-9, atol=1e-12)


def test_high_rank_ignores_labels_keeps_dtype():
    z, y = _random_batch(4, dtype=torch.float32)
    fn = losses.create("highrank")
    value = fn(z, y)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, fn(z, torch.zeros_like(y)))
    assert value.item() == pytest.approx(numpy_high_rank(z.double().numpy(), 0.01, 1e-4), rel=1e-5)
    with pytest.raises(ValueError, match="delta"):
        losses.create("highrank", delta=0.0)


# ----------------------------------------------------------------------------- PU-MLC


def hand_pu(z, y, gamma, alpha, floor=1e-6, eps=1e-10):
    """docs/methods.md, "pu_mlc", per element in plain Python, with the code's epsilons."""
    batch, classes = len(z), len(z[0])
    total = 0.0
    for c in range(classes):
        col = [z[n][c] for n in range(batch)]
        tau = max(min(alpha * statistics.pstdev(col), 1.0), floor)
        q = [sig(v / tau) for v in col]
        mean_q = sum(q) / batch
        total += mean_q**gamma * math.log(mean_q + eps)
        pos = [math.log(q[n] + eps) for n in range(batch) if y[n][c] == 1]
        if pos:
            total -= sum(pos) / len(pos)
    return total


def direct_pu(z: torch.Tensor, y: torch.Tensor, gamma: float, alpha: float) -> torch.Tensor:
    """docs/methods.md, "pu_mlc", with plain torch ops, no stability tricks."""
    tau = torch.clamp(alpha * z.detach().std(dim=0, unbiased=False), max=1.0).clamp(min=1e-6)
    q = torch.sigmoid(z / tau)
    prior = q.mean(dim=0).detach()
    pos = (y == 1).to(z.dtype)
    n_pos = pos.sum(dim=0)
    pos_term = (pos * torch.log(q + 1e-10)).sum(dim=0) / n_pos.clamp(min=1)
    return (prior**gamma * torch.log(q.mean(dim=0) + 1e-10) - (n_pos > 0) * pos_term).sum()


def test_pu_mlc_hand_value():
    for numerics, tol in (("stable", 1e-6), ("reference", 1e-12)):
        fn = losses.create("pu_mlc", gamma=0.55, alpha=0.3, numerics=numerics)
        assert fn(_t(Z), _t(Y)).item() == pytest.approx(hand_pu(Z, Y, 0.55, 0.3), abs=tol)
    # alpha large enough that τ = 1 for every column
    assert losses.create("pu_mlc", alpha=5.0)(_t(Z), _t(Y)).item() == pytest.approx(
        hand_pu(Z, Y, 0.55, 5.0), abs=1e-6
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_pu_mlc_matches_direct_formula_values_and_grads(seed):
    z, y = _random_batch(seed, batch=8, classes=5)
    y[:, 4] = 0.0  # a class without positives
    for numerics, tol in (("stable", 1e-6), ("reference", 1e-12)):
        z1 = z.clone().requires_grad_(True)
        z2 = z.clone().requires_grad_(True)
        a = losses.create("pu_mlc", gamma=0.85, alpha=2.0, numerics=numerics)(z1, y)
        b = direct_pu(z2, y, 0.85, 2.0)
        assert a.item() == pytest.approx(b.item(), abs=tol)
        a.backward()
        b.backward()
        torch.testing.assert_close(z1.grad, z2.grad, atol=tol, rtol=0)


def test_pu_mlc_ignores_observed_negatives():
    z, y = _random_batch(5)
    fn = losses.create("pu_mlc")
    torch.testing.assert_close(fn(z, y), fn(z, y.clamp(min=0)))


def test_pu_temperature_floor_constant_column():
    z, y = _random_batch(6, batch=5, classes=3)
    z[:, 1] = -3.0  # constant column: std 0 -> no tempering (the cap), not the floor
    y[:, 1] = 1.0
    tau = pu_temperature(z, alpha=1.0, floor=1e-6)
    assert tau[1].item() == 1.0
    assert 0 < tau[0].item() <= 1.0
    z[0, 2], z[1:, 2] = 1e-9, 0.0  # tiny but non-zero spread: the floor still applies
    assert pu_temperature(z, alpha=1.0, floor=1e-6)[2].item() == 1e-6
    for dtype in (torch.float32, torch.float64):
        for numerics in ("stable", "reference"):
            zz = z.to(dtype).requires_grad_(True)
            value = losses.create("pu_mlc", numerics=numerics)(zz, y.to(dtype))
            value.backward()
            assert torch.isfinite(value) and torch.isfinite(zz.grad).all()


def test_gradcheck_pu_variational_with_frozen_statistics():
    """τ and p̄ are stop-gradient: frozen at the point, the pure function passes gradcheck and
    its gradient there equals the module's."""
    z, y = _random_batch(9, batch=5, classes=3)
    y[0, :] = 1.0
    tau = pu_temperature(z, alpha=1.5)
    prior = torch.sigmoid(z / tau).mean(dim=0)
    for numerics in ("stable", "reference"):
        zz = z.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(
            lambda t: pu_variational_loss(t, y, tau, prior, 0.7, numerics), (zz,)
        )
        pure = torch.autograd.grad(pu_variational_loss(zz, y, tau, prior, 0.7, numerics), zz)[0]
        module = torch.autograd.grad(
            losses.create("pu_mlc", gamma=0.7, alpha=1.5, numerics=numerics)(zz, y), zz
        )[0]
        torch.testing.assert_close(module, pure)


# ----------------------------------------------------------------------------- mixup


def _linear_model(weight: torch.Tensor):
    return lambda x: x @ weight


def test_mixup_hand_value_odd_batch():
    # B = 3: A = row 0, A' = row 2, middle row dropped; perm of one element is trivial
    x = _t([[1.0, 2.0], [9.0, 9.0], [-1.0, 0.5]])
    w = _t([[0.3, -0.2, 0.1], [0.5, 0.4, -0.6]])
    lam = 0.3
    value = pu_mixup_consistency(_linear_model(w), x, _t(Z), _t(Y), lam=lam)
    xm = [lam * x[0, i].item() + (1 - lam) * x[2, i].item() for i in range(2)]
    targets = [[1.0 if Y[n][c] == 1 else sig(Z[n][c]) for c in range(3)] for n in range(3)]
    expected = 0.0
    for c in range(3):
        t = lam * targets[0][c] + (1 - lam) * targets[2][c]
        f = sum(xm[i] * w[i, c].item() for i in range(2))
        expected += (math.log(t + 1e-10) - math.log(sig(f) + 1e-10)) ** 2
    assert value.item() == pytest.approx(expected, abs=1e-12)
    # the middle row does not matter
    x2, z2 = x.clone(), _t(Z)
    x2[1] = -7.0
    z2[1] = 3.0
    torch.testing.assert_close(
        pu_mixup_consistency(_linear_model(w), x2, z2, _t(Y), lam=lam), value
    )


def test_mixup_even_batch_against_independent_computation():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    z = torch.randn(6, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (6, 3), generator=g).to(torch.float64)
    w = torch.randn(4, 3, generator=g, dtype=torch.float64)
    lam = 0.8
    value = pu_mixup_consistency(
        _linear_model(w), x, z, y, generator=torch.Generator().manual_seed(5), lam=lam
    )
    perm = torch.randperm(
        3, generator=torch.Generator().manual_seed(5)
    )  # documented: perm is drawn first
    t = torch.where(y == 1, 1.0, torch.sigmoid(z))
    xm = lam * x[:3][perm] + (1 - lam) * x[3:]
    tm = lam * t[:3][perm] + (1 - lam) * t[3:]
    expected = (
        ((torch.log(tm + 1e-10) - torch.log(torch.sigmoid(xm @ w) + 1e-10)) ** 2).mean(dim=0).sum()
    )
    assert value.item() == pytest.approx(expected.item(), abs=1e-12)


def test_mixup_reproducible_with_generator_seed():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    z = torch.randn(8, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (8, 3), generator=g).to(torch.float64)
    model = _linear_model(torch.randn(4, 3, generator=g, dtype=torch.float64))

    def run(seed):
        return pu_mixup_consistency(
            model, x, z, y, generator=torch.Generator().manual_seed(seed)
        ).item()

    assert run(3) == run(3)
    assert len({run(s) for s in range(6)}) > 1


def test_beta_draws_follow_beta_03():
    gen = torch.Generator().manual_seed(0)
    from spmlkit.losses.batchwise import _draw_beta

    draws = np.array([_draw_beta(0.3, gen) for _ in range(4000)])
    assert ((draws >= 0) & (draws <= 1)).all()
    assert abs(draws.mean() - 0.5) < 0.03
    assert abs(draws.var() - 0.09 / (0.36 * 1.6)) < 0.015  # ab / ((a+b)^2 (a+b+1))


def test_mixup_small_batch_validation_and_detach():
    w = _t([[0.3, -0.2, 0.1], [0.5, 0.4, -0.6]])
    model = _linear_model(w)
    assert pu_mixup_consistency(model, _t([[1.0, 2.0]]), _t(Z[:1]), _t(Y[:1])).item() == 0.0
    with pytest.raises(ValueError, match="batch size"):
        pu_mixup_consistency(model, _t([[1.0, 2.0]]), _t(Z), _t(Y))
    with pytest.raises(ValueError, match="lam"):
        pu_mixup_consistency(model, _t([[1.0, 2.0]] * 3), _t(Z), _t(Y), lam=1.5)
    z = _t(Z).requires_grad_(True)
    x = _t([[1.0, 2.0], [0.0, 0.0], [-1.0, 0.5]])
    # with a fixed model the detached-target value depends on the logits through nothing
    assert not pu_mixup_consistency(model, x, z, _t(Y), lam=0.4, detach_targets=True).requires_grad
    pu_mixup_consistency(model, x, z, _t(Y), lam=0.4).backward()
    assert z.grad.abs().sum() > 0  # targets not detached by default (as in the code)


def test_gradcheck_mixup_wrt_logits_inputs_and_weights():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    z = torch.randn(5, 2, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    y = _t([[1, 0], [0, 1], [0, 0], [1, 1], [0, 0]])

    def fn(x_, z_, w_):
        return pu_mixup_consistency(
            _linear_model(w_), x_, z_, y, generator=torch.Generator().manual_seed(1)
        )

    assert torch.autograd.gradcheck(fn, (x, z, w))


# ----------------------------------------------------------------------------- shared


def test_gradcheck_epr_highrank():
    z, y = _random_batch(12, batch=4, classes=3)
    z.requires_grad_(True)
    for fn in (
        losses.create("epr"),
        losses.create("epr", norm="l1", expected_num_pos=0.7),
        losses.create("highrank", lam=0.5),
    ):
        assert torch.autograd.gradcheck(lambda t: fn(t, y), (z,))
    z2 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)  # B < C
    assert torch.autograd.gradcheck(lambda t: high_rank_regularizer(t, 0.5, 1e-2), (z2,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batchwise_finite_for_extreme_logits(dtype):
    g = torch.Generator().manual_seed(0)
    z = (torch.rand(6, 5, generator=g) * 100 - 50).to(dtype)
    z[0] = 50.0
    z[:, 1] = -50.0
    y = torch.randint(-1, 2, (6, 5), generator=g).to(dtype)
    y[:, 1] = 1.0
    for fn in (
        losses.create("epr"),
        losses.create("epr", norm="l1"),
        losses.create("highrank", lam=1.0),
        losses.create("pu_mlc"),
        losses.create("pu_mlc", numerics="reference"),
    ):
        zz = z.clone().requires_grad_(True)
        value = fn(zz, y)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(zz.grad).all(), fn.name
    x = torch.randn(6, 5, generator=g).to(dtype)
    zz = z.clone().requires_grad_(True)
    value = pu_mixup_consistency(
        lambda t: 50 * t, x, zz, y, generator=torch.Generator().manual_seed(0)
    )
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(zz.grad).all()


def test_create_defaults():
    for name in ("epr", "highrank", "pu_mlc"):
        assert losses.create(name)(_t(Z), _t(Y)).dim() == 0
    assert losses.hyperparameters("pu_mlc")["gamma"] == 0.55
    with pytest.raises(ValueError, match="numerics"):
        losses.create("pu_mlc", numerics="fast")
