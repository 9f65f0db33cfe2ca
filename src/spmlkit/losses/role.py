"""ROLE: regularised online label estimation (docs/methods.md, "role").

Cole et al., "Multi-Label Learning from Single Positive Labels", CVPR 2021.

ROLE learns, next to the classifier f, a free estimate ĝ = σ(Φ) of every training label
(Φ a logit matrix ``[num_train, C]`` indexed by example id). Classifier and estimator are
trained jointly to agree with each other and with the observed positives, and both are
held to the expected number of positives per example by EPR's regulariser, so the
unobserved labels are neither all assumed negative nor free to become positive.
"""

from __future__ import annotations

import math
from typing import Any, Unpack

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import LossContext, LossOptions, SPMLLoss, check_number, register
from .batchwise import elements_plus_batch_term, expected_positive_regularizer
from .terms import soft_bce

__all__ = ["clamped_logit", "role_objective", "RoleEstimator", "RoleLoss"]

#: initial estimator probabilities (Cole et al.): observed positives / negatives, and the
#: half-width of the unobserved interval (0.4, 0.6) in probability space
POSITIVE_INIT = 0.995
NEGATIVE_INIT = 0.005
UNOBSERVED_HALF_WIDTH_PROB = 0.6
#: probabilities are clamped to [CLAMP, 1 - CLAMP] before taking the logit
CLAMP = 1e-5


def clamped_logit(probs: torch.Tensor, clamp: float = CLAMP) -> torch.Tensor:
    """``logit(clip(p, clamp, 1 - clamp))``: probabilities back to finite logits (max ≈ ±11.5)."""
    p = probs.clamp(clamp, 1.0 - clamp)
    return torch.log(p) - torch.log1p(-p)


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def _as_matrix(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        mat = value.detach().cpu()
    else:
        mat = torch.as_tensor(np.asarray(value))
    if mat.dim() != 2 or mat.numel() == 0:
        raise ValueError(
            f"RoleEstimator: {what} must be a non-empty [num_train, classes] matrix, got shape {tuple(mat.shape)}"
        )
    return mat


class RoleEstimator(nn.Module):
    """Per-example label estimator ``ĝ = σ(Φ)`` with ``Φ`` a parameter ``[num_train, C]``.

    Initialisation (docs/methods.md, "role"): observed positives ``logit(0.995) ≈ 5.2933``,
    observed negatives ``logit(0.005)``, unobserved entries ``U(-q, q)`` with
    ``q = logit(0.6) ≈ 0.4055`` (probabilities in (0.4, 0.6)). The uniform part comes from
    a ``torch.Generator`` seeded with ``seed`` (recorded as ``self.seed``), not from the
    global RNG as in the base code (docs/protocol.md, "Unseeded ROLE estimator
    initialisation"), so the initial estimate is reproducible.

    Give ``observed`` (``[N, C]`` in {-1, 0, 1}) or ``num_train`` and ``num_classes`` (all
    entries unobserved). ``estimator(index)`` returns the probabilities ``[B, C]`` of the
    rows ``index``; :meth:`logits` the corresponding rows of Φ.
    """

    def __init__(
        self,
        num_train: int | None = None,
        num_classes: int | None = None,
        *,
        observed: torch.Tensor | np.ndarray | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        obs = None
        if observed is not None:
            obs = _as_matrix(observed, "observed")
            bad = ~((obs == -1) | (obs == 0) | (obs == 1))
            if bad.any():
                r, c = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"RoleEstimator: observed labels must be -1, 0 or 1; entry ({r}, {c}) is {obs[r, c].item()!r}"
                )
            for key, given, actual in (
                ("num_train", num_train, obs.shape[0]),
                ("num_classes", num_classes, obs.shape[1]),
            ):
                if given is not None and given != actual:
                    raise ValueError(
                        f"RoleEstimator: {key}={given} does not match observed shape {tuple(obs.shape)}"
                    )
            num_train, num_classes = obs.shape
        if num_train is None or num_classes is None:
            raise ValueError(
                "RoleEstimator needs the training-set shape: pass observed=<[num_train, classes] "
                "label matrix> or both num_train and num_classes"
            )
        for key, value in (("num_train", num_train), ("num_classes", num_classes)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RoleEstimator: {key} must be a positive integer, got {value!r}")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise ValueError(f"RoleEstimator: seed must be an integer, got {seed!r}")
        self.num_train, self.num_classes, self.seed = int(num_train), int(num_classes), int(seed)

        generator = torch.Generator().manual_seed(self.seed)
        half_width = _logit(UNOBSERVED_HALF_WIDTH_PROB)
        init = half_width * (
            2.0 * torch.rand(self.num_train, self.num_classes, generator=generator) - 1.0
        )
        if obs is not None:
            init = torch.where(obs > 0, _logit(POSITIVE_INIT), init)
            init = torch.where(obs < 0, _logit(NEGATIVE_INIT), init)
        self.phi = nn.Parameter(init)

    @torch.no_grad()
    def load_probabilities(self, probs: torch.Tensor | np.ndarray) -> None:
        """Overwrite Φ in place with ``clamped_logit(probs)`` (probabilities clamped to [1e-5, 1-1e-5])."""
        mat = _as_matrix(probs, "probs").to(torch.float64)
        if tuple(mat.shape) != tuple(self.phi.shape):
            raise ValueError(
                f"RoleEstimator: probs shape {tuple(mat.shape)} does not match Φ shape {tuple(self.phi.shape)}"
            )
        if not torch.isfinite(mat).all() or (mat < 0).any() or (mat > 1).any():
            raise ValueError("RoleEstimator: probs must be finite probabilities in [0, 1]")
        self.phi.copy_(clamped_logit(mat).to(self.phi))

    def _check_index(self, index: torch.Tensor, *, values: bool = True) -> None:
        if (
            not isinstance(index, torch.Tensor)
            or index.dim() != self.phi.dim() - 1
            or index.dtype not in (torch.int64, torch.int32)
        ):
            raise ValueError(
                "RoleEstimator: index must be a 1-D integer tensor of training-example ids [batch] (with "
                "leading dimensions when Φ has them: one row of ids per table)"
            )
        if values and index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.num_train):
            raise ValueError(
                f"RoleEstimator: index values must lie in [0, {self.num_train}); got range "
                f"[{int(index.min())}, {int(index.max())}]"
            )

    def logits(self, index: torch.Tensor, *, check_values: bool = True) -> torch.Tensor:
        """Rows ``index`` of Φ, ``[B, C]``.

        Φ may carry leading dimensions (the stacked tables of R runs trained at once, in place of
        one run's); ``index`` then has them too and each row of ids reads its
        own table. ``check_values=False`` skips the range check of the ids, which reads them on the
        host (a device sync per step); the loss turns it off under ``validate_args=False``.
        """
        self._check_index(index, values=check_values)
        return torch.take_along_dim(self.phi, index.to(self.phi.device).unsqueeze(-1), dim=-2)

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        """Estimated label probabilities ``σ(Φ[index])``, ``[B, C]``."""
        return torch.sigmoid(self.logits(index))

    def extra_repr(self) -> str:
        return f"num_train={self.num_train}, num_classes={self.num_classes}, seed={self.seed}"


def role_objective(
    logits: torch.Tensor,
    estimator_logits: torch.Tensor,
    labels: torch.Tensor,
    classifier_target: torch.Tensor,
    estimator_target: torch.Tensor,
    expected_num_pos: float = 1.5,
    reduction: str = "mean",
) -> torch.Tensor:
    """ROLE's objective with its stop-gradient targets as explicit inputs.

    With ``f = σ(z)``, ``ĝ = σ(φ)``:
    ``L = BC-mean( ½·1[Y=+1]·(-log f - log ĝ) + ½·[BCE(f; t_ĝ) + BCE(ĝ; t_f)] ) + ½·(R(f) + R(ĝ))``

    ``estimator_target`` ``t_ĝ`` is the target of the classifier (ROLE passes ``sg(ĝ)``) and
    ``classifier_target`` ``t_f`` that of the estimator (``sg(f)``); ``R`` is EPR's squared
    regulariser with ``k = expected_num_pos``. The cross terms cover every entry, observed
    positives included. All logs are log-sigmoids of logits.

    ``reduction="sum"`` returns ``B·C`` times the value (see
    :func:`~spmlkit.losses.batchwise.elements_plus_batch_term`); there is no ``"none"``,
    because the regularisers belong to the whole batch.
    """
    positive = labels > 0
    positive_term = torch.where(
        positive, -(F.logsigmoid(logits) + F.logsigmoid(estimator_logits)), 0.0
    )
    # the library's one soft-target BCE, the stable log-sigmoid form of every element term
    cross = soft_bce(logits, estimator_target) + soft_bce(estimator_logits, classifier_target)
    reg = expected_positive_regularizer(
        torch.sigmoid(logits), expected_num_pos
    ) + expected_positive_regularizer(torch.sigmoid(estimator_logits), expected_num_pos)
    return elements_plus_batch_term(0.5 * positive_term + 0.5 * cross, 0.5 * reg, reduction)


@register(
    "role",
    "ROLE: classifier and per-example label estimator trained to agree, both held to k positives",
)
class RoleLoss(SPMLLoss):
    """ROLE (docs/methods.md, "role"); owns the :class:`RoleEstimator` as a submodule.

    Needs ``index`` (the batch's training-example ids) at every call. Construct with
    ``observed`` (the ``[N, C]`` observed label matrix, used for the initialisation) or
    with ``num_train`` and ``num_classes``. ``expected_num_pos`` is EPR's k (VOC 1.5). The
    estimator is trained by the same optimiser at ``lr_mult`` × the classifier lr: add
    :meth:`param_groups` to it. Φ lives in this module's ``state_dict``, so checkpoints
    carry it.

    Contract: it reads ``index``; the training-set shape, the observed labels and the seed of
    the initial estimate are *data arguments* (filled by the trainer, not tuned), leaving
    ``expected_num_pos`` and ``lr_mult`` as hyperparameters. :meth:`transfer_from` copies
    the estimate of an earlier ROLE loss (LinearInit's phase 1). ``reduction``: ``"mean"``
    (the paper's form) or ``"sum"`` (``B·C`` times it); ``"none"`` is not defined.
    """

    batchable = True

    reads = ("index",)
    data_arguments = ("num_train", "num_classes", "observed", "seed")
    reductions = ("mean", "sum")

    def __init__(
        self,
        expected_num_pos: float = 1.5,
        num_train: int | None = None,
        num_classes: int | None = None,
        observed: torch.Tensor | np.ndarray | None = None,
        seed: int = 0,
        lr_mult: float = 10.0,
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        self.expected_num_pos = check_number("role", "expected_num_pos", expected_num_pos, low=0.0, low_open=True)
        self.lr_mult = check_number("role", "lr_mult", lr_mult, low=0.0, low_open=True)
        if observed is None and (num_train is None or num_classes is None):
            raise ValueError(
                "loss 'role' needs the training set's shape for its label estimator: pass "
                "observed=<[num_train, classes] observed label matrix> (recommended: observed "
                "positives/negatives then get their own initial values) or num_train and num_classes"
            )
        self.estimator = RoleEstimator(num_train, num_classes, observed=observed, seed=seed)
        self.num_train, self.num_classes, self.seed = (
            self.estimator.num_train,
            self.estimator.num_classes,
            self.estimator.seed,
        )

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Optimiser parameter groups of the estimator: ``[{"params": [Φ], "lr": lr · lr_mult}]``."""
        return [{"params": list(self.estimator.parameters()), "lr": lr * self.lr_mult}]

    def transfer_from(self, other: SPMLLoss) -> None:
        """Start from ``other``'s label estimate (LinearInit: phase 1's ROLE hands over ĝ).

        Only the probabilities move (clamped as in :meth:`RoleEstimator.load_probabilities`);
        optimiser state does not. Any other loss type is a mistake in the run, so it raises.
        """
        if not isinstance(other, RoleLoss):
            raise TypeError(f"loss 'role' can only take its estimate from another 'role' loss, got {other.name!r}")
        self.estimator.load_probabilities(torch.sigmoid(other.estimator.phi.detach()))

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        index = ctx.index
        if index is None:
            raise ValueError(
                "loss 'role' needs index=<long tensor [batch] of training-example ids> to look up "
                "its label estimator; pass the batch's dataset indices"
            )
        if tuple(index.shape) != tuple(logits.shape[:-1]):
            raise ValueError(
                f"loss 'role': index must have shape {list(logits.shape[:-1])} (one id per row), got "
                f"{tuple(index.shape)}"
            )
        if logits.shape[-1] != self.num_classes:
            raise ValueError(
                f"loss 'role': logits have {logits.shape[-1]} classes but the estimator was built for {self.num_classes}"
            )
        phi = self.estimator.logits(index, check_values=self.validate_args)
        phi = phi.to(dtype=logits.dtype, device=logits.device)
        return role_objective(
            logits,
            phi,
            labels,
            classifier_target=torch.sigmoid(logits.detach()),
            estimator_target=torch.sigmoid(phi.detach()),
            expected_num_pos=self.expected_num_pos,
            reduction=self.reduction,
        )

    def extra_repr(self) -> str:
        return f"expected_num_pos={self.expected_num_pos}, lr_mult={self.lr_mult}, seed={self.seed}"
