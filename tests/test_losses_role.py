"""ROLE: estimator initialisation, loss value, gradients, errors, optimiser groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.losses.role import RoleEstimator, role_objective

torch.set_num_threads(1)

Q = math.log(0.6 / 0.4)  # logit(0.6)
OBSERVED = torch.tensor([[1, 0, 0, -1], [0, 1, 0, 0], [0, 0, 1, 0], [-1, 0, 0, 1], [0, 0, 0, 0]])


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_estimator_initialisation():
    est = RoleEstimator(observed=OBSERVED, seed=3)
    phi = est.phi.detach().double()
    assert est.seed == 3 and tuple(phi.shape) == (5, 4)
    torch.testing.assert_close(
        phi[OBSERVED == 1],
        torch.full((4,), math.log(199.0), dtype=torch.float64),
        atol=1e-6,
        rtol=0,
    )
    assert phi[OBSERVED == 1][0].item() == pytest.approx(5.2933, abs=1e-4)
    torch.testing.assert_close(
        phi[OBSERVED == -1],
        torch.full((2,), -math.log(199.0), dtype=torch.float64),
        atol=1e-6,
        rtol=0,
    )
    unobserved = phi[OBSERVED == 0]
    assert ((unobserved > -Q) & (unobserved < Q)).all()
    assert unobserved.std() > 0.1  # actually spread over the interval
    again = RoleEstimator(observed=OBSERVED.numpy(), seed=3).phi.detach()
    torch.testing.assert_close(again, est.phi.detach())
    other = RoleEstimator(observed=OBSERVED, seed=4).phi.detach()
    assert not torch.equal(other, est.phi.detach())
    sized = RoleEstimator(5, 4, seed=3).phi.detach()  # all unobserved, same uniform draw
    torch.testing.assert_close(sized[OBSERVED == 0], est.phi.detach()[OBSERVED == 0])


def test_estimator_forward_and_probabilities():
    probs = np.array([[0.0, 0.25, 1.0], [0.5, 0.9, 1e-7]])
    est = RoleEstimator(2, 3)
    est.load_probabilities(probs)  # Φ is float32 like any parameter
    phi = est.phi.detach()
    assert phi.dtype == torch.float32
    clamp = math.log((1 - 1e-5) / 1e-5)
    expected = [[-clamp, math.log(1 / 3), clamp], [0.0, math.log(9.0), -clamp]]
    torch.testing.assert_close(phi, torch.tensor(expected, dtype=torch.float32), atol=1e-5, rtol=0)
    out = est(torch.tensor([1, 0, 1]))
    assert out.shape == (3, 3)
    assert out[0, 1].item() == pytest.approx(0.9, abs=1e-6)
    with pytest.raises(ValueError, match="index values must lie"):
        est(torch.tensor([2]))
    with pytest.raises(ValueError, match="does not match"):
        est.load_probabilities(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="-1, 0 or 1"):
        RoleEstimator(observed=[[0.5, 1.0]])
    with pytest.raises(ValueError, match="does not match observed"):
        RoleEstimator(num_train=3, observed=OBSERVED)


def test_role_loss_hand_value():
    z = [[0.7, -0.3, 1.2], [-1.1, 0.4, 2.0]]
    phi = [[2.0, -0.5, 0.1], [0.3, 1.5, -1.0], [9.0, 9.0, 9.0]]
    y = [[1, 0, -1], [0, 1, 0]]
    index = [1, 0]  # row n of the batch is example index[n]
    k = 1.2
    fn = losses.create("role", num_train=3, num_classes=3, expected_num_pos=k).double()
    with torch.no_grad():
        fn.estimator.phi.copy_(torch.tensor(phi, dtype=torch.float64))

    def bce(p, t):
        return -(t * math.log(p) + (1 - t) * math.log(1 - p))

    total, f_count, g_count = 0.0, 0.0, 0.0
    for n in range(2):
        for c in range(3):
            f, g = sig(z[n][c]), sig(phi[index[n]][c])
            f_count, g_count = f_count + f, g_count + g
            ell = 0.5 * (bce(f, g) + bce(g, f))
            if y[n][c] == 1:
                ell += 0.5 * (-math.log(f) - math.log(g))
            total += ell
    reg = ((f_count / 2 - k) ** 2 + (g_count / 2 - k) ** 2) / 9
    expected = total / 6 + 0.5 * reg
    value = fn(
        torch.tensor(z, dtype=torch.float64),
        torch.tensor(y, dtype=torch.float64),
        index=torch.tensor(index),
    )
    assert value.item() == pytest.approx(expected, abs=1e-12)


def test_role_errors_and_param_groups():
    with pytest.raises(ValueError, match="observed=.*num_train and num_classes"):
        losses.create("role")
    fn = losses.create("role", observed=OBSERVED, lr_mult=10.0)
    z, y = torch.zeros(2, 4), torch.zeros(2, 4)
    with pytest.raises(ValueError, match="needs index"):
        fn(z, y)
    with pytest.raises(ValueError, match="shape \\[2\\]"):
        fn(z, y, index=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="4"):
        fn(torch.zeros(2, 3), torch.zeros(2, 3), index=torch.tensor([0, 1]))
    groups = fn.param_groups(1e-4)
    assert len(groups) == 1 and groups[0]["lr"] == pytest.approx(1e-3)
    assert groups[0]["params"][0] is fn.estimator.phi
    with pytest.raises(ValueError, match="lr_mult"):
        losses.create("role", observed=OBSERVED, lr_mult=0.0)
    # Φ is in the loss's state dict, so checkpoints carry it
    assert "estimator.phi" in fn.state_dict()


def test_role_gradients():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 4, generator=g, dtype=torch.float64)
    phi = torch.randn(3, 4, generator=g, dtype=torch.float64)
    y = OBSERVED[:3].double()
    f_t, g_t = torch.sigmoid(z), torch.sigmoid(phi)
    # the objective with explicit targets is an honest function of (z, φ)
    zz, pp = z.clone().requires_grad_(True), phi.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: role_objective(a, b, y, f_t, g_t, 1.5), (zz, pp))
    ref_z, ref_phi = torch.autograd.grad(role_objective(zz, pp, y, f_t, g_t, 1.5), (zz, pp))
    # the module (sg targets) has the same gradients at the point, on the indexed Φ rows only
    fn = losses.create("role", num_train=5, num_classes=4).double()
    index = torch.tensor([4, 0, 2])
    with torch.no_grad():
        fn.estimator.phi[index] = phi
    z2 = z.clone().requires_grad_(True)
    fn(z2, y, index=index).backward()
    torch.testing.assert_close(z2.grad, ref_z)
    torch.testing.assert_close(fn.estimator.phi.grad[index], ref_phi)
    assert torch.all(fn.estimator.phi.grad[[1, 3]] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_role_finite_for_extreme_logits(dtype):
    g = torch.Generator().manual_seed(1)
    z = (torch.rand(5, 4, generator=g) * 100 - 50).to(dtype)
    z[0] = 50.0
    z[1] = -50.0
    fn = losses.create("role", observed=OBSERVED).to(dtype)
    with torch.no_grad():
        fn.estimator.phi[0] = -50.0
        fn.estimator.phi[1] = 50.0
    zz = z.requires_grad_(True)
    value = fn(zz, OBSERVED.to(dtype), index=torch.arange(5))
    value.backward()
    assert torch.isfinite(value)
    assert torch.isfinite(zz.grad).all() and torch.isfinite(fn.estimator.phi.grad).all()
