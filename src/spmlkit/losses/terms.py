"""Element pieces of the element-wise SPML losses: terms, estimators, weights and the spine.

Most single-positive losses differ only in what they plug into one sentence (docs/methods.md,
"The element-wise view", after the unified table of the GR paper, "Boosting Single Positive
Multi-label Classification with Generalized Robust Loss", Chen et al., IJCAI 2024). For an entry with logit ``z`` and
``p = sigmoid(z)``:

* observed positive: ``L1(z)``;
* observed negative: ``L3(z)``;
* unobserved: ``v(sg p) * [k(sg p) * L2(z) + (1 - k(sg p)) * L3(z)]``,

with ``k`` an estimate of the probability that the missing label is positive (a soft pseudo
label) and ``v`` a weight, both evaluated on the detached probability.

Every term here works from logits with stable forms: ``log p = logsigmoid(z)``,
``log(1 - p) = logsigmoid(-z)`` and powers ``p**q = exp(q * logsigmoid(z))``, so values and
gradients stay finite for any logit a float32 network produces (no ``log(p + eps)``).
Terms return the element loss matrix; reductions are the caller's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch
import torch.nn.functional as F

__all__ = [
    "Term",
    "Weight",
    "bce_pos",
    "bce_neg",
    "soft_bce",
    "gce_pos",
    "gce_neg",
    "entropy",
    "neg_entropy",
    "focal_pos",
    "focal_neg",
    "asl_neg",
    "hill_neg",
    "Logistic",
    "Gaussian",
    "label_masks",
    "spine",
]

#: an element term: logits ``[B, C]`` -> element losses ``[B, C]`` (or a precomputed matrix)
Term = Union[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]
#: an estimator/weight: a number, a ``[B, C]`` tensor, or a function of the detached p
Weight = Union[float, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]


# --------------------------------------------------------------------------- element terms
def bce_pos(z: torch.Tensor) -> torch.Tensor:
    """``-log p``: the BCE term toward target 1, as ``-logsigmoid(z)``."""
    return -F.logsigmoid(z)


def bce_neg(z: torch.Tensor) -> torch.Tensor:
    """``-log(1 - p)``: the BCE term toward target 0, as ``-logsigmoid(-z)``."""
    return -F.logsigmoid(-z)


def soft_bce(z: torch.Tensor, target: torch.Tensor | float) -> torch.Tensor:
    """``-t log p - (1 - t) log(1 - p)``: BCE toward a soft target ``t`` in [0, 1].

    Used for label smoothing (``t = 1 - eps`` or ``eps``) and for APL's soft pseudo-negatives
    (``t`` = the frozen prediction).
    """
    return -(target * F.logsigmoid(z) + (1.0 - target) * F.logsigmoid(-z))


def _gce(log_prob: torch.Tensor, q: float | None) -> torch.Tensor:
    # (1 - x**q)/q = -expm1(q log x)/q; expm1 keeps the small-q case accurate (q -> 0: -log x)
    if q is None or q == 0:
        return -log_prob
    return -torch.expm1(q * log_prob) / q


def gce_pos(z: torch.Tensor, q: float | None) -> torch.Tensor:
    """``(1 - p**q)/q``, the generalised cross-entropy toward 1 (GR's L1/L2).

    Interpolates between ``-log p`` (``q -> 0``; ``q=None`` or ``0`` gives it exactly) and
    MAE ``1 - p`` (``q = 1``): larger q bounds the loss, making it robust to wrong targets.
    """
    return _gce(F.logsigmoid(z), q)


def gce_neg(z: torch.Tensor, q: float | None) -> torch.Tensor:
    """``(1 - (1 - p)**q)/q``, the generalised cross-entropy toward 0 (GR's L3)."""
    return _gce(F.logsigmoid(-z), q)


def entropy(z: torch.Tensor) -> torch.Tensor:
    """Binary entropy ``H(p) = -[p log p + (1 - p) log(1 - p)]`` from logits.

    ``p`` and ``1 - p`` are both computed as sigmoids (never ``1 - sigmoid``), so the
    products stay exact when one of them underflows. Gradient: ``-z p (1 - p)``.
    """
    return -(torch.sigmoid(z) * F.logsigmoid(z) + torch.sigmoid(-z) * F.logsigmoid(-z))


def neg_entropy(z: torch.Tensor) -> torch.Tensor:
    """``-H(p)``: minimising it *maximises* the entropy (EM's L2)."""
    return -entropy(z)


def focal_pos(
    z: torch.Tensor, gamma: float, margin: float = 0.0, *, detach_weight: bool = False
) -> torch.Tensor:
    """``-(1 - p_m)**gamma * log p_m`` with ``p_m = sigmoid(z - margin)`` (focal / Hill L1).

    The focusing factor down-weights positives that are already well classified; the margin
    (Hill's "focal margin") demands a larger logit before the loss vanishes.
    ``(1 - p_m)**gamma`` is ``exp(gamma * logsigmoid(-(z - m)))``. ``detach_weight`` stops the
    gradient through the focusing factor (ASL's reference class).
    """
    zm = z - margin
    weight = torch.exp(gamma * F.logsigmoid(-zm))
    if detach_weight:
        weight = weight.detach()
    return -weight * F.logsigmoid(zm)


def focal_neg(z: torch.Tensor, gamma: float, *, detach_weight: bool = False) -> torch.Tensor:
    """``-p**gamma * log(1 - p)``: focal negative term (focal loss, SPLC's L3)."""
    weight = torch.exp(gamma * F.logsigmoid(z))
    if detach_weight:
        weight = weight.detach()
    return -weight * F.logsigmoid(-z)


def asl_neg(z: torch.Tensor, gamma: float, clip: float, *, detach_weight: bool = False) -> torch.Tensor:
    """ASL's negative term ``-p_m**gamma * log(1 - p_m)`` with ``p_m = max(p - clip, 0)``.

    The probability shift discards easy negatives (``p <= clip`` gives exactly 0) and, with
    ``gamma``, down-weights the rest: under SPML many "negatives" are missing positives.
    For ``clip > 0``, ``1 - p_m = sigmoid(-z) + clip >= clip``, so its log is finite; the power is
    taken only where ``p_m > 0`` so its gradient never meets ``0**(gamma - 1)``.
    """
    if clip <= 0:
        return focal_neg(z, gamma, detach_weight=detach_weight)
    shifted = torch.sigmoid(z) - clip
    active = shifted > 0
    safe = torch.where(active, shifted, torch.ones_like(shifted))
    weight = torch.where(active, safe.pow(gamma), torch.zeros_like(shifted))
    if detach_weight:
        weight = weight.detach()
    log_q = torch.where(active, torch.log(torch.sigmoid(-z) + clip), torch.zeros_like(shifted))
    return -weight * log_q


def hill_neg(z: torch.Tensor, lamb: float) -> torch.Tensor:
    """Hill's negative term ``(lamb - p) * p**2``.

    Its gradient ``p(1-p)(2 lamb p - 3 p**2)`` vanishes for confident predictions, so a
    missing positive that the model already scores high is pushed down only weakly.
    """
    p = torch.sigmoid(z)
    return (lamb - p) * p * p


# --------------------------------------------------------------------------- estimators / weights
@dataclass(frozen=True)
class Logistic:
    """``k(p) = sigmoid(w * p + b)``: GR's soft pseudo-label, rising past ``p = -b/w``."""

    w: float
    b: float

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.w * p + self.b)


@dataclass(frozen=True)
class Gaussian:
    """``v(p) = exp(-(p - mu)**2 / (2 sigma**2))``: GR's weight, trusting entries near ``mu``."""

    mu: float
    sigma: float

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        return torch.exp(-((p - self.mu) ** 2) / (2.0 * self.sigma**2))


# --------------------------------------------------------------------------- the spine
def label_masks(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bool masks ``(observed positive, observed negative, unobserved)`` of a label matrix.

    The values are not checked here: :class:`~spmlkit.losses.base.SPMLLoss` checks them once
    at its boundary (or the trainer once per run), so the spine adds no host sync per step.
    An entry outside {-1, 0, 1} falls in none of the masks and gets loss 0.
    """
    return labels == 1, labels == -1, labels == 0


def _term(term: Term, z: torch.Tensor) -> torch.Tensor:
    return term if isinstance(term, torch.Tensor) else term(z)


def _weight(weight: Weight, p: torch.Tensor | None) -> torch.Tensor | float:
    if callable(weight):
        return weight(p)
    return weight


def _is_zero(weight: Weight) -> bool:
    return isinstance(weight, (int, float)) and weight == 0


def _is_one(weight: Weight) -> bool:
    return isinstance(weight, (int, float)) and weight == 1


def spine(
    logits: torch.Tensor,
    labels: torch.Tensor,
    L1: Term,
    L2: Term | None,
    L3: Term,
    k: Weight = 0.0,
    v: Weight = 1.0,
) -> torch.Tensor:
    """The element loss matrix ``s*L1 + n*L3 + u*v*(k*L2 + (1 - k)*L3)`` (unreduced).

    ``s``, ``n``, ``u`` mark observed positives, observed negatives and unobserved entries.
    ``L1``, ``L2``, ``L3`` are terms of the logits (or precomputed ``[B, C]`` matrices); ``k``
    and ``v`` are numbers, ``[B, C]`` tensors or functions of the **detached** probability,
    so they re-weight the loss without becoming targets the model can move. ``L2`` may be
    ``None`` when ``k`` is the constant 0. Entries are selected with ``torch.where``, so the
    terms of the other kinds never leak into values or gradients.
    """
    pos, neg, unobs = label_masks(labels)
    # the detached probability only where an estimator or weight is a function of it
    p = torch.sigmoid(logits.detach()) if callable(k) or callable(v) else None
    l1 = _term(L1, logits)
    l3 = _term(L3, logits)
    if _is_zero(v):
        unobserved = torch.zeros_like(l3)
    else:
        kk = _weight(k, p)
        if _is_zero(kk):
            inner = l3
        else:
            if L2 is None:
                raise ValueError("spine: L2 is required when the estimator k is not the constant 0")
            l2 = _term(L2, logits)
            inner = l2 if _is_one(kk) else kk * l2 + (1.0 - kk) * l3
        vv = _weight(v, p)
        unobserved = inner if _is_one(vv) else vv * inner
    zero = torch.zeros((), dtype=logits.dtype, device=logits.device)
    return torch.where(pos, l1, torch.where(neg, l3, torch.where(unobs, unobserved, zero)))
