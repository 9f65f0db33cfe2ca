"""Element-wise SPML losses: hand-computed values, gradients, finiteness, schedules.

Reference values are computed per element with plain ``math`` from the formulas of
docs/methods.md ("Reference settings" and "Element-wise losses"), never with the code under
test.
"""

from __future__ import annotations

import math

import pytest
import torch

from spmlkit import losses
from spmlkit.labeling.large_loss import large_loss_mask, rejection_count
from spmlkit.labeling.splc import splc_correction_mask
from spmlkit.losses import PseudoLabels

torch.set_num_threads(1)

ELEMENTWISE = [
    "bce", "iun", "an", "an_ls", "n_ls", "wan", "dw", "entmin", "focal", "asl", "hill",
    "splc", "em", "em_apl", "gr", "ll_r", "ll_ct", "ll_cp",
]

# tiny batch: 2 x 4, every row has an observed positive, unobserved entries and a -1
Z = [[1.5, -0.5, 0.9, 0.3], [-1.2, 2.0, 0.7, -2.5]]
Y = [[1, 0, 0, -1], [0, -1, 1, 0]]
N = 8


# --------------------------------------------------------------------------- plain-math helpers
def sig(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def nlp(z: float) -> float:  # -log p
    return -math.log(sig(z))


def nl1mp(z: float) -> float:  # -log(1 - p)
    return -math.log(1.0 - sig(z))


def H(z: float) -> float:
    p = sig(z)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def ref_mean(pos, unobs, neg) -> float:
    """BC-mean of per-element values; each callable gets (z, i, j)."""
    total = 0.0
    for i, row in enumerate(Z):
        for j, z in enumerate(row):
            y = Y[i][j]
            total += (pos if y == 1 else neg if y == -1 else unobs)(z, i, j)
    return total / N


def run(name: str, *, epoch: int | None = None, num_epochs: int = 10, pseudo=None, **hp) -> float:
    fn = losses.create(name, **hp)
    if epoch is not None:
        fn.set_epoch(epoch, num_epochs)
    z = torch.tensor(Z, dtype=torch.float64)
    y = torch.tensor(Y, dtype=torch.float64)
    return float(fn(z, y, **_context(fn, pseudo)))


def _context(fn: losses.SPMLLoss, pseudo) -> dict:
    """APL's pseudo-labels for the loss that reads them (``reads``), nothing for the others."""
    return {"pseudo": pseudo} if "pseudo" in type(fn).reads else {}


def check(value: float, expected: float) -> None:
    assert value == pytest.approx(expected, abs=1e-10, rel=1e-9)


# --------------------------------------------------------------------------- values
def test_bce_an_iun_values():
    an = ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: nl1mp(z), lambda z, i, j: nl1mp(z))
    check(run("an"), an)
    check(run("bce"), an)  # every non-positive entry is a negative
    iun = ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: 0.0, lambda z, i, j: nl1mp(z))
    check(run("iun"), iun)


def test_label_smoothing_values():
    e = 0.2
    pos = lambda z, i, j: -(1 - e) * math.log(sig(z)) - e * math.log(1 - sig(z))  # noqa: E731
    smooth_neg = lambda z, i, j: -(1 - e) * math.log(1 - sig(z)) - e * math.log(sig(z))  # noqa: E731
    check(run("an_ls", ls_coef=e), ref_mean(pos, smooth_neg, smooth_neg))
    check(run("n_ls", ls_coef=e), ref_mean(lambda z, i, j: nlp(z), smooth_neg, lambda z, i, j: nl1mp(z)))
    # default ls_coef = 0.1
    e1 = 0.1
    check(run("n_ls"), ref_mean(
        lambda z, i, j: nlp(z),
        lambda z, i, j: -(1 - e1) * math.log(1 - sig(z)) - e1 * math.log(sig(z)),
        lambda z, i, j: nl1mp(z),
    ))


def test_weighted_an_values():
    gamma = 1.0 / (4 - 1)
    check(run("wan"), ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: gamma * nl1mp(z), lambda z, i, j: nl1mp(z)))
    check(run("dw", weight=0.3),
          ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: 0.3 * nl1mp(z), lambda z, i, j: nl1mp(z)))
    check(run("dw"), ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: 0.1 * nl1mp(z), lambda z, i, j: nl1mp(z)))


def test_entropy_losses_values():
    check(run("em", alpha=0.2),
          ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: -0.2 * H(z), lambda z, i, j: nl1mp(z)))
    check(run("em"), ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: -0.1 * H(z), lambda z, i, j: nl1mp(z)))
    check(run("entmin", weight=0.4),
          ref_mean(lambda z, i, j: nlp(z), lambda z, i, j: 0.4 * H(z), lambda z, i, j: nl1mp(z)))


def test_focal_value():
    g, a = 2.0, 0.75
    check(run("focal"), ref_mean(
        lambda z, i, j: -a * (1 - sig(z)) ** g * math.log(sig(z)),
        lambda z, i, j: -(1 - a) * sig(z) ** g * math.log(1 - sig(z)),
        lambda z, i, j: -(1 - a) * sig(z) ** g * math.log(1 - sig(z)),
    ))


def _asl_neg(z: float, g: float, m: float) -> float:
    pm = max(sig(z) - m, 0.0)
    return -(pm ** g) * math.log(1 - pm)


def test_asl_values():
    pos = lambda z, i, j: -(1 - sig(z)) ** 1.0 * math.log(sig(z))  # noqa: E731
    neg = lambda z, i, j: _asl_neg(z, 4.0, 0.05)  # noqa: E731
    check(run("asl"), ref_mean(pos, neg, neg))
    # EM's setting; clip 0.2 zeroes the entries with p <= 0.2 (z = -2.5 and -1.2 here)
    neg2 = lambda z, i, j: _asl_neg(z, 2.0, 0.2)  # noqa: E731
    check(run("asl", gamma_pos=0.0, gamma_neg=2.0, clip=0.2), ref_mean(lambda z, i, j: nlp(z), neg2, neg2))
    neg0 = lambda z, i, j: _asl_neg(z, 1.0, 0.0)  # noqa: E731
    check(run("asl", gamma_pos=0.0, gamma_neg=1.0, clip=0.0), ref_mean(lambda z, i, j: nlp(z), neg0, neg0))


def test_asl_detach_focal_changes_gradient_not_value():
    z0 = 0.8
    for detach in (False, True):
        z = torch.tensor([[z0]], dtype=torch.float64, requires_grad=True)
        loss = losses.create("asl", gamma_pos=2.0, detach_focal=detach)(z, torch.ones(1, 1, dtype=torch.float64))
        loss.backward()
        p = sig(z0)
        assert loss.item() == pytest.approx(-(1 - p) ** 2 * math.log(p), abs=1e-12)
        if detach:  # d/dz of -w log p with w constant: -w (1 - p)
            expected = -((1 - p) ** 2) * (1 - p)
        else:  # d/dz of -(1-p)^2 log p = 2(1-p) p(1-p) log p - (1-p)^3
            expected = 2 * (1 - p) ** 2 * p * math.log(p) - (1 - p) ** 3
        assert float(z.grad) == pytest.approx(expected, abs=1e-12)


def _focal_margin_pos(z: float, g: float, m: float) -> float:
    pm = sig(z - m)
    return -(1 - pm) ** g * math.log(pm)


def test_hill_value():
    hill_neg = lambda z, i, j: (1.5 - sig(z)) * sig(z) ** 2  # noqa: E731
    check(run("hill"), ref_mean(lambda z, i, j: _focal_margin_pos(z, 2.0, 1.0), hill_neg, hill_neg))
    neg2 = lambda z, i, j: (1.0 - sig(z)) * sig(z) ** 2  # noqa: E731
    check(run("hill", lamb=1.0, margin=0.5, gamma=1.0),
          ref_mean(lambda z, i, j: _focal_margin_pos(z, 1.0, 0.5), neg2, neg2))


def _splc_expected(active: bool, negative: str = "focal", tau: float = 0.6) -> float:
    g = 2.0

    def neg(z, i, j):
        p = sig(z)
        return (1.5 - p) * p * p if negative == "hill" else -(p ** g) * math.log(1 - p)

    def unobs(z, i, j):
        if active and sig(z) > tau:  # corrected: positive focal term, no margin
            return -(1 - sig(z)) ** g * math.log(sig(z))
        return neg(z, i, j)

    return ref_mean(lambda z, i, j: _focal_margin_pos(z, g, 1.0), unobs, neg)


def test_splc_values_and_activation_by_epoch():
    # unobserved entry z = 0.9 has p = 0.711 > 0.6: corrected only once active
    assert _splc_expected(True) != pytest.approx(_splc_expected(False))
    check(run("splc"), _splc_expected(False))  # no set_epoch yet: epoch 1
    check(run("splc", epoch=1), _splc_expected(False))
    check(run("splc", epoch=2), _splc_expected(True))  # code's epoch index 1 = change_epoch
    check(run("splc", epoch=5), _splc_expected(True))
    check(run("splc", epoch=2, change_epoch=2), _splc_expected(False))
    check(run("splc", epoch=3, change_epoch=2), _splc_expected(True))
    check(run("splc", epoch=1, change_epoch=0), _splc_expected(True))
    check(run("splc", epoch=2, negative="hill"), _splc_expected(True, "hill"))
    # tau above every p: nothing corrected even when active
    check(run("splc", epoch=2, tau=0.95), _splc_expected(False, tau=0.95))


def test_splc_correction_mask_is_strict_and_unobserved_only():
    z = torch.tensor([[0.0, 0.0, 3.0, 3.0]])
    y = torch.tensor([[0.0, 1.0, -1.0, 0.0]])
    mask = splc_correction_mask(z, y, tau=0.5)
    assert mask.tolist() == [[False, False, False, True]]  # sigmoid(0) = 0.5 is not > 0.5


def _pseudo() -> PseudoLabels:
    mask = torch.tensor([[True, True, False, True], [False, False, False, True]])
    target = torch.tensor([[0.7, 0.3, 0.9, 0.5], [0.0, 0.0, 0.0, 0.1]])
    return PseudoLabels(mask, target)


def test_em_apl_values_with_pseudo_labels_and_hard_observed_negatives():
    a, b = 0.2, 0.4
    target = _pseudo().target.tolist()
    mask = _pseudo().mask.tolist()

    def unobs(z, i, j):
        if mask[i][j]:
            s = target[i][j]
            return b * (-s * math.log(sig(z)) - (1 - s) * math.log(1 - sig(z)))
        return -a * H(z)

    # (0, 3) is an observed -1 with a pseudo entry: stays -log(1 - p) (docs/protocol.md,
    # "APL soft negatives stored inside the label matrix");
    # (0, 0) is an observed positive with a pseudo entry: stays -log p
    expected = ref_mean(lambda z, i, j: nlp(z), unobs, lambda z, i, j: nl1mp(z))
    check(run("em_apl", alpha=a, beta=b, pseudo=_pseudo()), expected)
    # without pseudo-labels it is EM
    check(run("em_apl", alpha=a, beta=b), run("em", alpha=a))
    check(run("em_apl"), run("em"))


def test_em_apl_rejects_bad_pseudo():
    bad = PseudoLabels(torch.zeros(3, 4, dtype=torch.bool), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="pseudo.mask shape"):
        run("em_apl", pseudo=bad)
    out_of_range = PseudoLabels(torch.ones(2, 4, dtype=torch.bool), torch.full((2, 4), 1.5))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        run("em_apl", pseudo=out_of_range)


# --------------------------------------------------------------------------- GR
def _gr_expected(w, b, mu, sigma, q1=None, q2=0.01, q3=1.0) -> float:
    def pos(z, i, j):
        p = sig(z)
        return -math.log(p) if q1 is None else (1 - p ** q1) / q1

    def unobs(z, i, j):
        p = sig(z)
        k = 1 / (1 + math.exp(-(w * p + b)))
        v = math.exp(-((p - mu) ** 2) / (2 * sigma ** 2))
        l2 = (1 - p ** q2) / q2
        l3 = (1 - (1 - p) ** q3) / q3
        return v * (k * l2 + (1 - k) * l3)

    def neg(z, i, j):
        return (1 - (1 - sig(z)) ** q3) / q3

    return ref_mean(pos, unobs, neg)


def test_gr_constant_values():
    check(run("gr"), _gr_expected(2, -2, 0.8, 0.5))
    check(run("gr", w=2, b=-2, mu=0.8, sigma=0.5, q2=0.01, q3=1), _gr_expected(2, -2, 0.8, 0.5))
    check(run("gr", w=10, b=-8, mu=0.7, sigma=1.0, q1=0.01, q2=0.05, q3=1.5),
          _gr_expected(10, -8, 0.7, 1.0, q1=0.01, q2=0.05, q3=1.5))
    # constants do not move with the epoch
    check(run("gr", epoch=3, num_epochs=8), _gr_expected(2, -2, 0.8, 0.5))


def test_gr_schedule_code_indexing():
    fn = losses.create("gr", schedule=True)
    T = 8
    fn.set_epoch(1, T)  # w, b at 0/8; mu, sigma at 1/8
    assert fn.values == pytest.approx({"w": 0.0, "b": -2.0, "mu": 0.5 + 0.3 / 8, "sigma": 2.0 - 1.5 / 8})
    fn.set_epoch(T, T)  # w, b at 7/8 (never the end); mu, sigma at 8/8
    assert fn.values == pytest.approx({"w": 1.75, "b": -2.0, "mu": 0.8, "sigma": 0.5})
    z = torch.tensor(Z, dtype=torch.float64)
    y = torch.tensor(Y, dtype=torch.float64)
    check(float(fn(z, y)), _gr_expected(1.75, -2.0, 0.8, 0.5))

    paper = losses.create("gr", schedule=True, schedule_indexing="paper")
    paper.set_epoch(T, T)
    assert paper.values == pytest.approx({"w": 2.0, "b": -2.0, "mu": 0.8, "sigma": 0.5})
    paper.set_epoch(2, T)
    assert paper.values == pytest.approx({"w": 0.5, "b": -2.0, "mu": 0.575, "sigma": 1.625})

    # LinearInit epochs hold the start values; D = T - n
    li = losses.create("gr", schedule=True, linear_init_epochs=2)
    li.set_epoch(2, 10)
    assert li.values == pytest.approx({"w": 0.0, "b": -2.0, "mu": 0.5, "sigma": 2.0})
    li.set_epoch(4, 10)  # w at 1/8, mu at 2/8
    assert li.values == pytest.approx({"w": 0.25, "b": -2.0, "mu": 0.575, "sigma": 1.625})


def test_gr_explicit_schedule_mapping():
    fn = losses.create("gr", w=5.0, schedule={"mu": (0.5, 0.9), "b": (-1.0, -3.0)})
    assert fn.values == pytest.approx({"w": 5.0, "b": -1.0, "mu": 0.5, "sigma": 0.5})  # start values
    fn.set_epoch(3, 5)  # b at 2/5, mu at 3/5; w, sigma constant
    assert fn.values == pytest.approx({"w": 5.0, "b": -1.8, "mu": 0.74, "sigma": 0.5})
    with pytest.raises(ValueError, match="valid keys are: b, mu, sigma, w"):
        losses.create("gr", schedule={"lambda": (0, 1)})
    with pytest.raises(ValueError, match="schedule_indexing"):
        losses.create("gr", schedule_indexing="linear")


# --------------------------------------------------------------------------- LL
def test_ll_rate_per_epoch():
    r = losses.create("ll_r")  # delta_rel = 0.2 percent
    cp = losses.create("ll_cp")
    expected_r = {1: 0.0, 2: 0.002, 3: 0.004, 6: 0.010}
    for e, rate in expected_r.items():
        r.set_epoch(e, 10)
        cp.set_epoch(e, 10)
        assert r.rate == pytest.approx(rate)
        assert cp.rate == pytest.approx(0.0 if e == 1 else 0.002)
    assert rejection_count(1000, 3 * 0.002) == 6  # 6.000000000000001 is not 7
    assert rejection_count(10, 0.25) == 3
    assert rejection_count(10, 0.0) == 0
    assert rejection_count(10, 5.0) == 10


def test_ll_epoch_one_is_an():
    an = run("an")
    for name in ("ll_r", "ll_ct", "ll_cp"):
        check(run(name, delta_rel=50.0), an)
        check(run(name, delta_rel=50.0, epoch=1), an)


def test_ll_rejection_and_correction_values():
    # delta_rel = 20 %: at epoch 2, k = ceil(8 * 0.2) = 2. Unobserved losses -log(1-p) at
    # z = -0.5, 0.9, -1.2, -2.5: the two largest are z = 0.9 (0, 2) and z = -0.5 (0, 1).
    selected = {(0, 1), (0, 2)}
    pos = lambda z, i, j: nlp(z)  # noqa: E731
    neg = lambda z, i, j: nl1mp(z)  # noqa: E731
    rejected = ref_mean(pos, lambda z, i, j: 0.0 if (i, j) in selected else nl1mp(z), neg)
    corrected = ref_mean(pos, lambda z, i, j: nlp(z) if (i, j) in selected else nl1mp(z), neg)
    check(run("ll_r", delta_rel=20.0, epoch=2), rejected)
    check(run("ll_ct", delta_rel=20.0, epoch=2), corrected)
    check(run("ll_cp", delta_rel=20.0, epoch=2), corrected)
    # LL-Ct's rate grows: epoch 3 -> k = ceil(8 * 0.4) = 4 -> all four unobserved
    all_corrected = ref_mean(pos, lambda z, i, j: nlp(z), neg)
    check(run("ll_ct", delta_rel=20.0, epoch=3), all_corrected)
    # LL-Cp's rate stays at delta: epoch 3 same as epoch 2
    check(run("ll_cp", delta_rel=20.0, epoch=3), corrected)
    # k (7) larger than the number of unobserved entries (4): every unobserved entry,
    # and no observed one, is rejected
    check(run("ll_r", delta_rel=80.0, epoch=2), ref_mean(pos, lambda z, i, j: 0.0, neg))


def test_ll_cp_correction_mask_is_strict():
    fn = losses.create("ll_cp", delta_rel=40.0)  # k = ceil(8 * 0.4) = 4 at epoch >= 2
    y = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0]])
    # unobserved logits 3, 2, 2, 2, 1, -1: loss order 3 > 2 = 2 = 2 > ...; lambda at the tie
    z = torch.tensor([[5.0, 3.0, 2.0, 2.0], [2.0, 1.0, -1.0, 4.0]], dtype=torch.float64)
    fn(z, y)
    assert fn.corrects_labels
    assert not fn.corrections(z, y).any()  # epoch 1: unmodified
    fn.set_epoch(2, 10)
    value = float(fn(z, y))
    mask = fn.corrections(z.requires_grad_(), y)
    assert mask.tolist() == [[False, True, False, False], [False, False, False, False]]
    assert not mask.requires_grad
    # the step's loss corrects every entry with L >= lambda (the three tied at z = 2 too)
    ge = {(0, 1), (0, 2), (0, 3), (1, 0)}
    zl, yl = z.tolist(), y.tolist()
    total = 0.0
    for i in range(2):
        for j in range(4):
            zz = zl[i][j]
            total += nlp(zz) if yl[i][j] == 1 or (i, j) in ge else nl1mp(zz)
    assert value == pytest.approx(total / 8, abs=1e-12)


def test_large_loss_mask_edges():
    loss = torch.tensor([[0.5, 2.0, 1.0], [3.0, 1.0, 0.2]])
    unobs = torch.tensor([[True, True, True], [False, True, True]])
    mask, lam = large_loss_mask(loss, unobs, 2 / 6)  # k = 2; 3.0 is observed -> 0
    assert float(lam) == 1.0
    assert mask.tolist() == [[False, True, True], [False, True, False]]  # ties at 1.0 included
    mask, lam = large_loss_mask(loss, unobs, 0.0)
    assert not mask.any() and math.isinf(float(lam))
    mask, lam = large_loss_mask(loss, unobs, 1.0)  # k = 6 > 5 unobserved: lambda = 0
    assert float(lam) == 0.0 and mask.equal(unobs)
    with pytest.raises(ValueError, match="does not match"):
        large_loss_mask(loss, unobs[:1], 0.5)


# --------------------------------------------------------------------------- gradients / finiteness
def _configured(name: str) -> losses.SPMLLoss:
    """A loss in a state where its special behaviour is active."""
    if name == "gr":
        fn = losses.create("gr", schedule=True)
        fn.set_epoch(3, 8)
    elif name.startswith("ll_"):
        fn = losses.create(name, delta_rel=10.0)
        fn.set_epoch(3, 10)
    elif name == "splc":
        fn = losses.create("splc", tau=0.5)
        fn.set_epoch(2, 10)
    else:
        fn = losses.create(name)
    return fn


def _labels(shape: tuple[int, int], dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return torch.randint(-1, 2, shape, generator=gen).to(dtype)


def _pseudo_for(labels: torch.Tensor, dtype) -> PseudoLabels:
    gen = torch.Generator().manual_seed(4)
    mask = torch.rand(labels.shape, generator=gen) < 0.5
    return PseudoLabels(mask, torch.rand(labels.shape, generator=gen).to(dtype))


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_gradcheck(name):
    gen = torch.Generator().manual_seed(0)
    z = (2.0 * torch.randn(4, 6, generator=gen, dtype=torch.float64)).requires_grad_(True)
    y = _labels((4, 6), torch.float64)
    fn = _configured(name)
    pseudo = _pseudo_for(y, torch.float64) if name == "em_apl" else None
    if name == "gr":
        # k and v are stop-gradient functions of p: finite differences would see them move.
        # Here w = 0 makes k constant and a huge sigma makes v flat, so the check covers the
        # GCE terms; test_gr_gradient_stops_at_k_and_v covers the detached weights.
        fn = losses.create("gr", w=0.0, b=-1.0, sigma=1e6, q1=0.01, q3=1.5)
    assert torch.autograd.gradcheck(lambda x: fn(x, y, **_context(fn, pseudo)), (z,))


@pytest.mark.parametrize("q1", [None, 0.01])
def test_gr_gradient_stops_at_k_and_v(q1):
    """Autograd gradient = hand derivative with k and v held at their current values."""
    fn = losses.create("gr", schedule=True, q1=q1, q3=1.5)
    fn.set_epoch(5, 8)
    w, b, mu, sigma = (fn.values[key] for key in ("w", "b", "mu", "sigma"))
    q2, q3 = 0.01, 1.5
    z = torch.tensor(Z, dtype=torch.float64, requires_grad=True)
    fn(z, torch.tensor(Y, dtype=torch.float64)).backward()
    for i, row in enumerate(Z):
        for j, zz in enumerate(row):
            p = sig(zz)
            d_pos = -(1 - p) if q1 is None else -(p ** q1) * (1 - p)  # d/dz of L1
            d_l2 = -(p ** q2) * (1 - p)  # d/dz (1 - p^q2)/q2
            d_l3 = (1 - p) ** q3 * p  # d/dz (1 - (1-p)^q3)/q3
            k = 1 / (1 + math.exp(-(w * p + b)))
            v = math.exp(-((p - mu) ** 2) / (2 * sigma ** 2))
            expected = {1: d_pos, -1: d_l3, 0: v * (k * d_l2 + (1 - k) * d_l3)}[Y[i][j]] / N
            assert float(z.grad[i, j]) == pytest.approx(expected, abs=1e-12)


def test_special_behaviour_is_active_in_gradcheck_setup():
    """The gradchecks above exercise the modified branches, not just the plain loss."""
    gen = torch.Generator().manual_seed(0)
    z = 2.0 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    y = _labels((4, 6), torch.float64)
    an = float(losses.create("an")(z, y))
    for name in ("ll_r", "ll_ct", "ll_cp"):
        assert float(_configured(name)(z, y)) != pytest.approx(an)
    assert bool(splc_correction_mask(z, y, 0.5).any())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_finite_for_extreme_logits(name, dtype):
    row = torch.linspace(-50, 50, 21, dtype=dtype)
    z = row.repeat(3, 1).requires_grad_(True)
    y = torch.stack([torch.ones(21), torch.zeros(21), -torch.ones(21)]).to(dtype)
    fn = _configured(name)
    pseudo = PseudoLabels(torch.ones(3, 21, dtype=torch.bool), torch.full((3, 21), 0.3, dtype=dtype)) \
        if name == "em_apl" else None
    loss = fn(z, y, **_context(fn, pseudo))
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(z.grad).all()


# --------------------------------------------------------------------------- registry / validation
def test_all_registered_with_defaults():
    available = losses.available()
    for name in ELEMENTWISE:
        assert name in available and available[name]
    assert losses.hyperparameters("asl") == {"gamma_neg": 4.0, "gamma_pos": 1.0, "clip": 0.05, "detach_focal": False}
    assert losses.hyperparameters("splc") == {
        "tau": 0.6, "gamma": 2.0, "margin": 1.0, "change_epoch": 1, "negative": "focal"
    }
    assert losses.hyperparameters("hill") == {"lamb": 1.5, "margin": 1.0, "gamma": 2.0}
    assert losses.hyperparameters("focal") == {"gamma": 2.0, "alpha": 0.75}
    assert losses.hyperparameters("ll_cp") == {"delta_rel": 0.2, "record": "gt"}
    assert losses.hyperparameters("em_apl") == {"alpha": 0.1, "beta": 0.9}
    assert losses.hyperparameters("gr")["q2"] == 0.01


def test_create_rejects_unknown_names_and_hyperparameters():
    with pytest.raises(ValueError, match="valid names are: .*an_ls"):
        losses.create("ann")
    with pytest.raises(ValueError, match="valid ones are: .*sigma"):
        losses.create("gr", sigmaa=0.5)
    with pytest.raises(ValueError, match="valid ones are: alpha"):
        losses.create("em", beta=0.2)


@pytest.mark.parametrize("name, hp, match", [
    ("splc", {"negative": "mae"}, "'focal' or 'hill'"),
    ("splc", {"tau": 1.5}, "tau"),
    ("gr", {"sigma": 0.0}, "sigma must be > 0"),
    ("gr", {"q2": -0.1}, "q2"),
    ("focal", {"alpha": 2.0}, "alpha"),
    ("an_ls", {"ls_coef": -0.1}, "ls_coef"),
    ("ll_r", {"delta_rel": -1.0}, "delta_rel"),
    ("asl", {"detach_focal": "yes"}, "detach_focal"),
])
def test_bad_hyperparameter_values(name, hp, match):
    with pytest.raises(ValueError, match=match):
        losses.create(name, **hp)


def test_bad_labels_and_epochs():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="may only contain"):
        losses.create("an")(z, torch.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="1-indexed"):
        losses.create("ll_r").set_epoch(0, 10)
    with pytest.raises(ValueError, match="at least 2 classes"):
        losses.create("wan")(torch.zeros(2, 1), torch.ones(2, 1))
