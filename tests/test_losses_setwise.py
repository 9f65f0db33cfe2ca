"""Set-wise losses (ZLPR, OPML, soft OPML): hand values, bounds, gradients, stability."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.losses.setwise import opml_loss, soft_opml_loss

torch.set_num_threads(1)

# rows: (1 positive, 1 unobserved, 1 observed negative), (1 positive, 2 unobserved)
Z = [[0.7, -0.3, 1.2], [-1.1, 0.4, 2.0]]
Y = [[1.0, 0.0, -1.0], [0.0, 1.0, 0.0]]


def _t(rows, dtype=torch.float64):
    return torch.tensor(rows, dtype=dtype)


def hand_opml(z, y, a=1.0, b=1.0, eps=None):
    """Per element, plain math: docs/methods.md, "opml" / "opml_soft" (eps only on unobserved entries)."""
    total = 0.0
    for n, (zr, yr) in enumerate(zip(z, y)):
        neg, pos = a, b
        for c, (zc, yc) in enumerate(zip(zr, yr)):
            e = eps[n][c] if (eps is not None and yc == 0) else 0.0
            if yc > 0:
                pos += math.exp(-zc)
            else:
                neg += (1 - e) * math.exp(zc)
                pos += e * math.exp(-zc)
        total += math.log(neg) + math.log(pos)
    return total / len(z)


def _random_batch(
    seed: int, batch: int = 5, classes: int = 4, dtype=torch.float64, scale: float = 2.0
):
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(batch, classes, generator=g, dtype=dtype)
    y = torch.randint(-1, 2, (batch, classes), generator=g).to(dtype)
    y[:, 0] = 1.0  # at least one positive per row
    return z, y


def test_zlpr_hand_value():
    z, y = _t(Z), _t(Y)
    expected = (
        math.log(1 + math.exp(-0.3) + math.exp(1.2))
        + math.log(1 + math.exp(-0.7))
        + math.log(1 + math.exp(-1.1) + math.exp(2.0))
        + math.log(1 + math.exp(-0.4))
    ) / 2
    assert losses.create("zlpr")(z, y).item() == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(hand_opml(Z, Y), abs=1e-12)


@pytest.mark.parametrize("a,b", [(2.0, 0.5), (0.1, 3.0)])
def test_opml_hand_value_and_subtract_min(a, b):
    z, y = _t(Z), _t(Y)
    expected = hand_opml(Z, Y, a, b)
    assert losses.create("opml", a=a, b=b)(z, y).item() == pytest.approx(expected, abs=1e-12)
    shifted = losses.create("opml", a=a, b=b, subtract_min=True)(z, y).item()
    assert shifted == pytest.approx(expected - math.log(a * b), abs=1e-12)


def test_zlpr_equals_opml_with_unit_constants():
    for seed in range(3):
        z, y = _random_batch(seed)
        torch.testing.assert_close(
            losses.create("zlpr")(z, y), losses.create("opml", a=1.0, b=1.0)(z, y)
        )


def test_opml_log_parameterisation():
    z, y = _t(Z), _t(Y)
    via_u = losses.create("opml", u=math.log(2.0), v=math.log(0.5))(z, y)
    direct = losses.create("opml", a=2.0, b=0.5)(z, y)
    torch.testing.assert_close(via_u, direct)
    with pytest.raises(ValueError, match="either a or u"):
        losses.create("opml", a=2.0, u=0.3)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="must be a finite number > 0"):
            losses.create("opml", a=bad)


def test_opml_lower_bound_log_ab():
    a, b = 2.0, 3.0
    fn = losses.create("opml", a=a, b=b)
    for seed in range(3):
        z, y = _random_batch(seed, scale=5.0)
        assert fn(z, y).item() > math.log(a * b)
    # perfectly separated rows approach the bound from above
    y = _t([[1.0, 0.0, -1.0]])
    z = _t([[40.0, -40.0, -40.0]])
    assert fn(z, y).item() == pytest.approx(math.log(a * b), abs=1e-12)
    assert fn.lower_bound == pytest.approx(math.log(6.0))
    assert losses.create("opml", a=a, b=b, subtract_min=True)(z, y).item() == pytest.approx(
        0.0, abs=1e-12
    )


def test_opml_gradients_match_paper_claims():
    # single example, one positive, the rest unobserved: the gradient statements of
    # docs/methods.md, "opml" (a = b = 1)
    z = _t([[0.3, -0.8, 1.5, 0.1]]).requires_grad_(True)
    y = _t([[1.0, 0.0, 0.0, 0.0]])
    losses.create("opml")(z, y).backward()
    grad = z.grad[0]
    zs = [0.3, -0.8, 1.5, 0.1]
    assert grad[0].item() == pytest.approx(-1 / (1 + math.exp(zs[0])), abs=1e-12)
    denom = 1 + sum(math.exp(v) for v in zs[1:])
    for j in range(1, 4):
        assert grad[j].item() == pytest.approx(math.exp(zs[j]) / denom, abs=1e-12)
        assert grad[j].item() <= 1 / (1 + math.exp(-zs[j]))  # below BCE's σ(z_j)


def test_opml_soft_without_ap_equals_opml():
    z, y = _random_batch(4)
    soft = losses.create("opml_soft", a=2.0, b=0.5, r=2.0)
    hard = losses.create("opml", a=2.0, b=0.5)
    assert soft.class_ap is None
    torch.testing.assert_close(soft(z, y), hard(z, y))
    soft.set_class_ap(np.zeros(z.shape[1]))
    torch.testing.assert_close(soft(z, y), hard(z, y))


def test_opml_soft_hand_value():
    ap, r, a, b = [0.8, 0.5, 0.3], 2.0, 1.5, 0.7
    fn = losses.create("opml_soft", a=a, b=b, r=r)
    fn.set_class_ap(ap)  # plain list: stored in float64
    eps = [[ap[c] ** r / (1 + math.exp(-Z[n][c])) for c in range(3)] for n in range(2)]
    expected = hand_opml(Z, Y, a, b, eps)
    assert fn(_t(Z), _t(Y)).item() == pytest.approx(expected, abs=1e-12)
    # the value differs from hard OPML (smoothing is active)
    assert abs(expected - hand_opml(Z, Y, a, b)) > 1e-3


def test_opml_soft_ap_validation_and_checkpoint():
    fn = losses.create("opml_soft")
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        fn.set_class_ap([0.2, float("nan"), 0.3])
    with pytest.raises(ValueError, match="1-D"):
        fn.set_class_ap([[0.2, 0.3]])
    fn.set_class_ap([0.2, 0.3])
    with pytest.raises(ValueError, match="one AP per class"):
        fn(_t(Z), _t(Y))
    fn.set_class_ap([0.2, 0.9, 0.4])
    fresh = losses.create("opml_soft")
    fresh.load_state_dict(fn.state_dict())
    torch.testing.assert_close(fresh(_t(Z), _t(Y)), fn(_t(Z), _t(Y)))


def test_gradcheck_zlpr_opml():
    z, y = _random_batch(7, batch=3, classes=4)
    z.requires_grad_(True)
    for fn in (losses.create("zlpr"), losses.create("opml", a=0.5, b=2.0, subtract_min=True)):
        assert torch.autograd.gradcheck(lambda t: fn(t, y), (z,))


def test_opml_soft_gradient_is_that_of_frozen_smoothing():
    """ε = AP^r·sg(p): the module's gradient is the pure function's with ε held fixed."""
    z, y = _random_batch(8, batch=3, classes=4)
    ap = torch.tensor([0.9, 0.4, 0.7, 0.2], dtype=torch.float64)
    eps = torch.where(y == 0, ap.pow(1.5) * torch.sigmoid(z), 0.0)
    z1 = z.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: soft_opml_loss(t, y, eps, a=1.3, b=0.8).mean(), (z1,))
    fn = losses.create("opml_soft", a=1.3, b=0.8, r=1.5)
    fn.set_class_ap(ap)
    fn(z1, y).backward()
    z2 = z.clone().requires_grad_(True)
    soft_opml_loss(z2, y, eps, a=1.3, b=0.8).mean().backward()
    torch.testing.assert_close(z1.grad, z2.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_setwise_finite_for_extreme_logits(dtype):
    g = torch.Generator().manual_seed(0)
    z = (torch.rand(6, 5, generator=g) * 100 - 50).to(dtype)
    z[0] = 50.0
    z[1] = -50.0
    y = torch.randint(-1, 2, (6, 5), generator=g).to(dtype)
    soft = losses.create("opml_soft", r=0.0)
    soft.set_class_ap(torch.ones(5))  # ε = σ(z), exactly 1 for z = 50 in float32
    for fn in (losses.create("zlpr"), losses.create("opml", a=0.3, b=4.0), soft):
        zz = z.clone().requires_grad_(True)
        value = fn(zz, y)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(zz.grad).all()


def test_opml_loss_pure_function_is_per_example():
    z, y = _t(Z), _t(Y)
    rows = opml_loss(z, y)
    assert rows.shape == (2,)
    assert rows[0].item() == pytest.approx(hand_opml(Z[:1], Y[:1]), abs=1e-12)


def test_create_defaults_and_unknown_hparams():
    for name in ("zlpr", "opml", "opml_soft"):
        assert losses.create(name)(_t(Z), _t(Y)).dim() == 0
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        losses.create("zlpr", a=2.0)
    with pytest.raises(ValueError, match="r \\(power"):
        losses.create("opml_soft", r=-1.0)
