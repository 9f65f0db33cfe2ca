"""CRISP's class-prior estimator: each class's prior from a classifier's scores and its single positives.

Liu, Xu, Wang, Geng, "Can Class-Priors Help Single-Positive Multi-Label Learning?"
(docs/methods.md, "crisp"). After every epoch the current model scores the whole training
split; for class j, with ``n`` training rows and the ``n_p`` rows whose observed positive is j,

* ``q(z)   = #{i : f_j(x_i) >= z} / n``           (every training row)
* ``q_p(z) = #{i labelled j : f_j(x_i) >= z} / n_p``  (the rows annotated with j)

and the prior is the ratio of the two at the threshold that minimises an upper confidence bound
of that ratio (the paper's Theorem 4.1 and Eq. 2, after the top-bin estimator of Garg et al.,
NeurIPS 2021):

``ẑ = argmin_z  q(z)/q_p(z) + (1 + τ)/q_p(z) · (√(log(4/δ)/(2n)) + √(log(4/δ)/(2n_p)))``,
``π̂_j = q(ẑ)/q_p(ẑ)``.

Why it works: the rows annotated with j are a sample of the class's positives (the observation
picks one of a row's positives without looking at the features), so above a threshold that only
positives reach, the share of all rows is π_j times the share of annotated ones. The bound's
second term keeps the search away from thresholds so high that a handful of rows decides it.

The search is exhaustive over the scores themselves (the paper's Appendix A.2): a threshold
between two scores counts the same rows as the next score above it. Equal scores form one
candidate (``>=`` takes all of them), and among candidates with the same bound the highest
threshold wins. The estimate never exceeds 1 (the lowest score gives ratio 1 with the smallest
penalty, so any threshold that beats it has a ratio below 1) and never falls below ``n_p/n``
(every annotated row is a row). A class with no annotated row has no estimate: its prior is 0
[ours], which makes CRISP's risk push that class's mean prediction to 0 -- the same as the
observed evidence, none.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from ..labels import LabelState
from .apl import as_probabilities
from .base import LabelingAlgorithm, Probabilities, check_epoch

__all__ = ["ClassPriorEstimate", "ClassPriorEstimation", "estimate_class_prior"]

#: entries of the score matrix handled at once: bounds the working memory of a large training set
#: (delicious: 16,000 x 983) to a few arrays of this many float64 values
_CHUNK_ENTRIES = 1 << 22


class ClassPriorEstimate(NamedTuple):
    """The estimate of every class (float64 ``[C]`` tensors)."""

    #: π̂_j = q(ẑ)/q_p(ẑ); 0 for a class without annotated rows
    prior: torch.Tensor
    #: ẑ, the chosen threshold (a score of the class); NaN without annotated rows
    threshold: torch.Tensor
    #: the minimised bound at ẑ; inf without annotated rows
    bound: torch.Tensor
    #: n_p, the annotated rows of each class
    num_labelled: torch.Tensor


def _check_unit(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0.0 < float(value) < 1.0:
        raise ValueError(f"class-prior estimation: {name} must be a number in (0, 1), got {value!r}")
    return float(value)


def estimate_class_prior(scores: torch.Tensor | np.ndarray, labelled: torch.Tensor | np.ndarray, *,
                         delta: float = 0.01, tau: float = 0.01) -> ClassPriorEstimate:
    """CRISP's estimate of every class's prior from ``scores`` and the annotated positives.

    Args:
        scores: ``[n, C]`` classifier outputs f_j(x_i) (probabilities; any monotone score gives the
            same thresholds and counts) over the whole training split.
        labelled: bool ``[n, C]``, True where row i's observed positive is class j.
        delta: δ of the confidence bound, in (0, 1).
        tau: τ of the confidence bound, in (0, 1).

    Computed in float64, classes in chunks so that memory stays bounded on large sets.
    """
    delta, tau = _check_unit("delta", delta), _check_unit("tau", tau)
    s = torch.as_tensor(np.asarray(scores) if not isinstance(scores, torch.Tensor) else scores).detach().cpu()
    lab = torch.as_tensor(np.asarray(labelled) if not isinstance(labelled, torch.Tensor) else labelled).detach().cpu()
    if s.dim() != 2 or tuple(lab.shape) != tuple(s.shape) or s.shape[0] == 0:
        raise ValueError(f"class-prior estimation: scores {tuple(s.shape)} and labelled {tuple(lab.shape)} "
                         "must be the same non-empty [rows, classes] matrix")
    s, lab = s.to(torch.float64), lab.to(torch.bool)
    n, classes = s.shape
    log_term = math.log(4.0 / delta)
    eps = math.sqrt(log_term / (2.0 * n))
    step = max(1, _CHUNK_ENTRIES // n)
    parts = [_estimate_chunk(s[:, c0:c0 + step], lab[:, c0:c0 + step], eps, log_term, tau)
             for c0 in range(0, classes, step)]
    return ClassPriorEstimate(*(torch.cat([p[k] for p in parts]) for k in range(4)))


def _estimate_chunk(s: torch.Tensor, lab: torch.Tensor, eps: float, log_term: float,
                    tau: float) -> tuple[torch.Tensor, ...]:
    """The estimate of a block of classes: one descending sort per column, the counts above every
    score as cumulative sums, the bound at the last row of each run of equal scores."""
    n = s.shape[0]
    order = torch.sort(s, dim=0, descending=True, stable=True)
    ranked, lab_ranked = order.values, torch.gather(lab, 0, order.indices).to(torch.float64)
    n_p = lab_ranked.sum(dim=0)  # [c]
    count = torch.arange(1, n + 1, dtype=torch.float64).unsqueeze(1)  # rows scoring >= ranked[k]
    count_p = torch.cumsum(lab_ranked, dim=0)  # annotated rows scoring >= ranked[k]
    # a candidate is the last row of a run of equal scores: the counts there include every tie
    last = torch.ones_like(ranked, dtype=torch.bool)
    last[:-1] = ranked[:-1] != ranked[1:]
    q = (count / n).expand_as(ranked)
    q_p = count_p / n_p.clamp_min(1.0)
    eps_p = torch.sqrt(log_term / (2.0 * n_p.clamp_min(1.0)))
    bound = q / q_p + (1.0 + tau) / q_p * (eps + eps_p)  # inf where no annotated row scores >= z
    bound = torch.where(last & (count_p > 0), bound, torch.full_like(bound, math.inf))
    best = torch.argmin(bound, dim=0, keepdim=True)  # the first minimum: the highest threshold
    has = n_p > 0
    ratio = (torch.gather(q, 0, best) / torch.gather(q_p, 0, best)).squeeze(0)
    prior = torch.where(has, ratio, torch.zeros_like(ratio))
    threshold = torch.where(has, torch.gather(ranked, 0, best).squeeze(0), torch.full_like(ratio, math.nan))
    minimum = torch.where(has, torch.gather(bound, 0, best).squeeze(0), torch.full_like(ratio, math.inf))
    return prior, threshold, minimum, n_p.to(torch.long)


class ClassPriorEstimation(LabelingAlgorithm):
    """Re-estimate every class's prior after each epoch (CRISP's Algorithm 1, steps 2-6).

    It leaves the label state as it is: what it makes is a vector of priors (:meth:`class_prior`),
    which the ``crisp`` method hands to its loss (:mod:`spmlkit.methods.crisp`).

    Args:
        delta: δ of the confidence bound (paper: 0.01).
        tau: τ of the confidence bound (paper: 0.01).
    """


    def __init__(self, delta: float = 0.01, tau: float = 0.01) -> None:
        self.delta = _check_unit("delta", delta)
        self.tau = _check_unit("tau", tau)
        self._prior: torch.Tensor | None = None

    def is_active(self, epoch: int) -> bool:
        """Every epoch: the paper re-estimates after each one (its Table 5 measures doing it every
        third epoch as slightly worse)."""
        return True

    def class_prior(self) -> torch.Tensor | None:
        """The latest estimate (float64 ``[C]``), None before the first round."""
        return self._prior

    def step(self, probs: Probabilities, state: LabelState, epoch: int) -> dict[str, Any]:
        """Estimate the priors from ``probs`` (``sigmoid(z)`` over the whole training split) and the
        observed positives of ``state``. Returns ``{"epoch", "active", "prior_mean",
        "class_prior"}``; the label state is not changed."""
        epoch = check_epoch("ClassPriorEstimation.step", epoch)
        p = as_probabilities(probs, state, where="ClassPriorEstimation.step")
        estimate = estimate_class_prior(p, state.observed == 1, delta=self.delta, tau=self.tau)
        self._prior = estimate.prior
        return {"epoch": epoch, "active": True, "prior_mean": float(estimate.prior.mean()),
                "class_prior": estimate.prior}

    def state_dict(self) -> dict[str, Any]:
        """The settings and the latest estimate, so that a resumed run trains with the same priors."""
        prior = None if self._prior is None else self._prior.tolist()
        return {"delta": self.delta, "tau": self.tau, "prior": prior}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a checkpoint made with other settings is refused."""
        mine = {"delta": self.delta, "tau": self.tau}
        theirs = {k: state.get(k) for k in mine}
        if theirs != mine:
            raise ValueError(f"ClassPriorEstimation checkpoint settings {theirs} differ from this object's {mine}; "
                             "resume with the original settings")
        prior = state.get("prior")
        self._prior = None if prior is None else torch.tensor(prior, dtype=torch.float64)

    def __repr__(self) -> str:
        return f"ClassPriorEstimation(delta={self.delta}, tau={self.tau})"
