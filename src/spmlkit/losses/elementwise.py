"""Element-wise SPML losses, each a recipe on the spine of :mod:`spmlkit.losses.terms`.

Papers: Cole et al., "Multi-Label Learning from Single Positive Labels", CVPR 2021 (BCE,
IUN, AN, LS, WAN, EPR); Zhou et al., "Acknowledging the Unknown for Multi-label Learning
with Single Positive Labels", ECCV 2022 (EM, APL and the DW, N-LS, EntMin, Focal, ASL
baselines); Ridnik et al., "Asymmetric Loss for Multi-Label Classification", ICCV 2021;
Zhang et al., "Simple and Robust Loss Design for Multi-Label Learning with Missing Labels"
(Hill, SPLC); Kim et al., "Large Loss Matters in Weakly Supervised Multi-Label
Classification", CVPR 2022 (LL-R/Ct/Cp); Chen et al., "Boosting Single Positive
Multi-label Classification with Generalized Robust Loss", IJCAI 2024 (GR).

Every loss here is ``spine(L1, L2, L3, k, v)`` (docs/methods.md, "The element-wise view"):
observed positives get ``L1``, observed negatives ``L3`` and unobserved entries
``v * (k * L2 + (1 - k) * L3)``, reduced by the BC-mean (sum over the ``[B, C]`` matrix /
``B*C``; also for ASL, Hill and SPLC, whose own code sums, so that hyperparameters such as
the learning rate transfer between methods). Hyperparameter defaults live in each ``__init__`` (the registry reads
them from there); per-dataset paper values belong in presets.

``reduction``: ``"mean"`` is that BC-mean, ``"sum"`` the sum of the ``[B, C]`` matrix and
``"none"`` the matrix itself (``none.sum() / (B*C) == mean``).
"""

from __future__ import annotations

from typing import Any, Mapping, Unpack

import torch
from torch import Tensor

from ..labeling.large_loss import large_loss_mask
from ..labeling.splc import splc_correction_mask
from .base import (
    LossContext,
    LossOptions,
    PseudoLabels,
    SPMLLoss,
    check_number,
    register,
)
from .terms import (
    Gaussian,
    Logistic,
    asl_neg,
    bce_neg,
    bce_pos,
    entropy,
    focal_neg,
    focal_pos,
    gce_neg,
    gce_pos,
    hill_neg,
    label_masks,
    neg_entropy,
    soft_bce,
    spine,
)

__all__ = [
    "BCE",
    "IUN",
    "AN",
    "ANLS",
    "NLS",
    "WAN",
    "DW",
    "EntMin",
    "Focal",
    "ASL",
    "Hill",
    "SPLC",
    "EM",
    "EMAPL",
    "GR",
    "LLR",
    "LLCt",
    "LLCp",
    "HILL_LAMBDA",
    "GR_CODE_SCHEDULE",
]

#: Hill's lambda (default of ``hill``; also SPLC's negative term when ``negative="hill"``)
HILL_LAMBDA = 1.5

#: GR code defaults: (start, end) of w, b, mu, sigma over training (docs/methods.md, "gr")
GR_CODE_SCHEDULE: dict[str, tuple[float, float]] = {
    "w": (0.0, 2.0),
    "b": (-2.0, -2.0),
    "mu": (0.5, 0.8),
    "sigma": (2.0, 0.5),
}


# --------------------------------------------------------------------------- validation helpers
def _check_epoch(loss: str, epoch: int) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ValueError(f"loss {loss!r}: set_epoch expects a 1-indexed epoch (int >= 1), got {epoch!r}")
    return epoch


# --------------------------------------------------------------------------- plain BCE family
@register("bce", "Full-label BCE: -log p on positives, -log(1-p) on every other entry (Cole et al. 2021, oracle)")
class BCE(SPMLLoss):
    """``-[y log p + (1 - y) log(1 - p)]`` with ``y = 1`` on label 1 and 0 elsewhere.

    See docs/methods.md, "bce".

    Meant for full labels (``2Y* - 1``); every non-positive entry is a negative, so on
    single-positive labels it coincides with ``an``. The two names say which labels the
    run feeds it.
    """

    batchable = True

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, None, bce_neg))


@register("iun", "1 positive + all negatives: BCE on observed labels, unobserved ignored (Cole et al. 2021)")
class IUN(SPMLLoss):
    """``-log p`` on label 1, ``-log(1 - p)`` on label -1, 0 on unobserved entries.

    See docs/methods.md, "iun".

    The unobserved true positives get no loss but still count in the ``B*C`` denominator.
    The base code's version never selected negatives (docs/protocol.md, "IUN baseline that
    applies no negatives"); this one does.
    """

    batchable = True

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, None, bce_neg, k=0.0, v=0.0))


@register("an", "Assume negative: unobserved labels treated as negatives (Cole et al. 2021)")
class AN(SPMLLoss):
    """``-log p`` on label 1, ``-log(1 - p)`` on labels 0 and -1 (docs/methods.md, "an").

    The simplest SPML baseline; it fits the false negatives it creates, which every other
    method here tries to soften.
    """

    batchable = True

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, None, bce_neg))


@register("an_ls", "AN with label smoothing on all labels, targets 1-eps and eps (Cole et al. 2021)")
class ANLS(SPMLLoss):
    """Label 1: ``-(1-e) log p - e log(1-p)``; labels 0 and -1: ``-(1-e) log(1-p) - e log p``.

    See docs/methods.md, "an_ls".

    Smoothing stops the model from being pushed to extreme logits on labels that may be
    wrong. Targets are ``1 - e`` and ``e`` (not ``e/2``). Observed negatives are smoothed
    too ("all labels") [ours].
    """

    batchable = True

    def __init__(self, ls_coef: float = 0.1, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.ls_coef = check_number("an_ls", "ls_coef", ls_coef, low=0.0, high=1.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        e = self.ls_coef
        return self.reduce(spine(logits, labels, lambda z: soft_bce(z, 1.0 - e), None, lambda z: soft_bce(z, e)))


@register("n_ls", "AN with label smoothing only on the assumed negatives (Zhou et al. ECCV 2022 baseline)")
class NLS(SPMLLoss):
    """Label 1: ``-log p``; label 0: ``-(1-e) log(1-p) - e log p``; label -1: ``-log(1-p)``.

    See docs/methods.md, "n_ls".

    Only the assumed (possibly false) negatives are softened: on the spine, ``k = e`` on
    unobserved entries. Observed negatives are known, so they stay hard [ours].
    """

    batchable = True

    def __init__(self, ls_coef: float = 0.1, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.ls_coef = check_number("n_ls", "ls_coef", ls_coef, low=0.0, high=1.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, bce_pos, bce_neg, k=self.ls_coef))


@register("wan", "Weighted AN: assumed negatives weighted 1/(C-1) (Cole et al. 2021)")
class WAN(SPMLLoss):
    """AN with the unobserved terms multiplied by ``1/(C-1)``, C from the batch (docs/methods.md, "wan").

    Balances one positive against ``C-1`` assumed negatives per row. Observed negatives
    (label -1) keep weight 1 [ours].
    """

    batchable = True

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        c = logits.shape[-1]
        if c < 2:
            raise ValueError(f"loss 'wan' needs at least 2 classes for its weight 1/(C-1), got C={c}")
        return self.reduce(spine(logits, labels, bce_pos, None, bce_neg, v=1.0 / (c - 1)))


@register("dw", "Down-weighted AN: assumed negatives weighted by w (Zhou et al. ECCV 2022 baseline)")
class DW(SPMLLoss):
    """AN with the unobserved terms multiplied by ``weight`` (docs/methods.md, "dw"; EM: 0.1, CUB 0.02).

    Observed negatives (label -1) keep weight 1 [ours].
    """

    batchable = True

    def __init__(self, weight: float = 0.1, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.weight = check_number("dw", "weight", weight, low=0.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, None, bce_neg, v=self.weight))


# --------------------------------------------------------------------------- entropy family
@register("entmin", "Entropy minimisation on unobserved labels, no assumed negatives (Zhou et al. ECCV 2022 baseline)")
class EntMin(SPMLLoss):
    """Label 1: ``-log p``; label 0: ``+weight * H(p)``; label -1: ``-log(1-p)`` [ours].

    See docs/methods.md, "entmin".

    The opposite of EM: it drives unannotated predictions to 0 *or* 1, and with no
    negative term the model collapses to predicting everything positive, as EM reports.
    Default ``weight = 0.01`` is EM's VOC value (COCO 0.9, NUS 0.4, CUB 0.4).
    """

    batchable = True

    def __init__(self, weight: float = 0.01, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.weight = check_number("entmin", "weight", weight, low=0.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, entropy, bce_neg, k=1.0, v=self.weight))


@register("em", "Entropy maximisation on unobserved labels (Zhou et al., ECCV 2022)")
class EM(SPMLLoss):
    """Label 1: ``-log p``; label 0: ``-alpha * H(p)``; label -1: ``-log(1-p)`` (docs/methods.md, "em").

    Rather than assuming missing labels are negative, keep their predictions uncertain.
    The gradient ``alpha * p(1-p) * log(p/(1-p))`` vanishes for confident predictions, so
    confident missing positives are not suppressed. Default ``alpha = 0.1`` is EM's COCO
    and NUS value (VOC 0.2, CUB 0.01).
    """

    batchable = True

    def __init__(self, alpha: float = 0.1, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.alpha = check_number(self.name, "alpha", alpha, low=0.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(logits, labels, bce_pos, neg_entropy, bce_neg, k=1.0, v=self.alpha))


@register("em_apl", "EM plus soft asymmetric pseudo-negatives from APL (Zhou et al., ECCV 2022)")
class EMAPL(EM):
    """EM with APL's pseudo-negatives (docs/methods.md, "em_apl"; docs/protocol.md, "APL soft
    negatives stored inside the label matrix").

    * label 1: ``-log p``;
    * label 0 without pseudo-label: ``-alpha * H(p)``;
    * label 0 with pseudo-label (``pseudo.mask``, soft target ``S = pseudo.target``):
      ``beta * [-S log p - (1 - S) log(1 - p)]``, a down-weighted soft BCE toward the frozen
      prediction (spine: ``k = S``, ``v = beta``);
    * label -1: ``-log(1-p)``, a hard negative even if a pseudo-label was recorded there.

    Without ``pseudo`` this is ``em``. Defaults ``alpha = 0.1, beta = 0.9`` are EM's COCO
    pair (VOC 0.2 / 0.02, NUS 0.1 / 0.2, CUB 0.01 / 0.4).
    """

    reads = ("pseudo",)

    def __init__(self, alpha: float = 0.1, beta: float = 0.9, **options: Unpack[LossOptions]) -> None:
        super().__init__(alpha, **options)
        self.beta = check_number("em_apl", "beta", beta, low=0.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        if ctx.pseudo is None:
            return super().loss(logits, labels, ctx)
        mask, target = _check_pseudo(ctx.pseudo, logits, values=self.validate_args)
        l2 = torch.where(mask, bce_pos(logits), neg_entropy(logits))
        k = torch.where(mask, target, torch.ones_like(target))
        v = torch.where(mask, torch.full_like(target, self.beta), torch.full_like(target, self.alpha))
        return self.reduce(spine(logits, labels, bce_pos, l2, bce_neg, k=k, v=v))


def _check_pseudo(
    pseudo: PseudoLabels, logits: Tensor, *, values: bool = True
) -> tuple[Tensor, Tensor]:
    """Pseudo-label mask and targets on the logits' device; ``values`` adds the range check (a host sync)."""
    if not isinstance(pseudo, PseudoLabels):
        raise TypeError(f"loss 'em_apl': pseudo must be a PseudoLabels, got {type(pseudo).__name__}")
    shape = tuple(logits.shape)
    for what, t in (("mask", pseudo.mask), ("target", pseudo.target)):
        if tuple(t.shape) != shape:
            raise ValueError(
                f"loss 'em_apl': pseudo.{what} shape {tuple(t.shape)} does not match logits shape {shape}"
            )
    mask = pseudo.mask.to(device=logits.device, dtype=torch.bool)
    target = pseudo.target.to(device=logits.device, dtype=logits.dtype)
    target = torch.where(mask, target, torch.zeros_like(target))
    if values and bool(((target < 0) | (target > 1)).any()):
        raise ValueError("loss 'em_apl': pseudo.target must lie in [0, 1] where pseudo.mask is set")
    return mask, target


# --------------------------------------------------------------------------- focusing family
@register("focal", "Focal loss under the AN assumption, alpha weighting positives (Lin et al. 2017; EM baseline)")
class Focal(SPMLLoss):
    """Label 1: ``-alpha (1-p)**gamma log p``; labels 0, -1: ``-(1-alpha) p**gamma log(1-p)``.

    See docs/methods.md, "focal".

    The focusing factor shrinks the loss of easy entries, so the many easy assumed
    negatives do not drown the single positive. EM's choice ``gamma = 2, alpha = 0.75``.
    """

    batchable = True

    def __init__(self, gamma: float = 2.0, alpha: float = 0.75, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.gamma = check_number("focal", "gamma", gamma, low=0.0)
        self.alpha = check_number("focal", "alpha", alpha, low=0.0, high=1.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        a, g = self.alpha, self.gamma
        return self.reduce(spine(
            logits, labels, lambda z: a * focal_pos(z, g), None, lambda z: (1.0 - a) * focal_neg(z, g)
        ))


@register("asl", "Asymmetric loss: focusing plus probability shift on negatives (Ridnik et al., ICCV 2021)")
class ASL(SPMLLoss):
    """Label 1: ``-(1-p)**gamma_pos log p``; labels 0, -1: ``-p_m**gamma_neg log(1 - p_m)``.

    See docs/methods.md, "asl".

    ``p_m = max(p - clip, 0)``: easy negatives are discarded outright and the harder ones
    focused, which also tolerates missing positives among the negatives. Defaults are
    ASL's own (``gamma_neg = 4, gamma_pos = 1, clip = 0.05``); EM used ``gamma_pos = 0,
    gamma_neg = 2, clip = 0.2``. ``detach_focal`` stops the gradient through the focusing
    weights (ASL's reference class; docs/protocol.md, "ASL focusing weight detached in one
    implementation"); by default it flows, as in the paper.
    """

    batchable = True

    def __init__(
        self, gamma_neg: float = 4.0, gamma_pos: float = 1.0, clip: float = 0.05, detach_focal: bool = False,
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        self.gamma_neg = check_number("asl", "gamma_neg", gamma_neg, low=0.0)
        self.gamma_pos = check_number("asl", "gamma_pos", gamma_pos, low=0.0)
        self.clip = check_number("asl", "clip", clip, low=0.0, high=1.0)
        if not isinstance(detach_focal, bool):
            raise ValueError(f"loss 'asl': detach_focal must be True or False, got {detach_focal!r}")
        self.detach_focal = detach_focal

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        d = self.detach_focal
        return self.reduce(spine(
            logits, labels,
            lambda z: focal_pos(z, self.gamma_pos, detach_weight=d),
            None,
            lambda z: asl_neg(z, self.gamma_neg, self.clip, detach_weight=d),
        ))


@register("hill", "Hill loss: focal margin on positives, (lambda-p)p^2 on negatives (Zhang et al.)")
class Hill(SPMLLoss):
    """Label 1: ``-(1-p_m)**gamma log p_m``, ``p_m = sigmoid(z - margin)``; labels 0, -1: ``(lamb-p) p**2``.

    See docs/methods.md, "hill".

    The hill-shaped negative term has a small gradient at high ``p``, so likely missing
    positives are barely pushed down, while the margin keeps positives learning.
    """

    batchable = True

    def __init__(
        self, lamb: float = HILL_LAMBDA, margin: float = 1.0, gamma: float = 2.0, **options: Unpack[LossOptions]
    ) -> None:
        super().__init__(**options)
        self.lamb = check_number("hill", "lamb", lamb)
        self.margin = check_number("hill", "margin", margin)
        self.gamma = check_number("hill", "gamma", gamma, low=0.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(spine(
            logits, labels, lambda z: focal_pos(z, self.gamma, self.margin), None, lambda z: hill_neg(z, self.lamb)
        ))


@register("splc", "Self-paced loss correction with focal margin (Zhang et al.)")
class SPLC(SPMLLoss):
    """Focal-margin loss whose confident unobserved entries count as positives.

    See docs/methods.md, "splc", and docs/protocol.md, "SPLC negative term and epoch indexing".

    * label 1: ``-(1-p_m)**gamma log p_m`` with ``p_m = sigmoid(z - margin)``;
    * label 0 once active, ``sigmoid(z) > tau`` (strict, unshifted): ``-(1-p)**gamma log p``
      for this step only (no margin; :func:`~spmlkit.labeling.splc.splc_correction_mask`);
    * other labels 0 and labels -1: ``-p**gamma log(1-p)`` (``negative="focal"``, as in the
      SPLC code) or Hill's ``(1.5 - p) p**2`` (``negative="hill"``, GR's table).

    On the spine: ``k`` is the step ``1[p > tau]``. Epochs: :meth:`set_epoch` receives the
    1-indexed epoch ``e``; SPLC's code counts from 0, so the correction is active when
    ``e - 1 >= change_epoch`` (with the default 1: from the 2nd epoch on). Corrections are
    transient and never written to the label state.
    """

    batchable = True

    def __init__(
        self, tau: float = 0.6, gamma: float = 2.0, margin: float = 1.0, change_epoch: int = 1,
        negative: str = "focal", **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        self.tau = check_number("splc", "tau", tau, low=0.0, high=1.0)
        self.gamma = check_number("splc", "gamma", gamma, low=0.0)
        self.margin = check_number("splc", "margin", margin)
        if isinstance(change_epoch, bool) or not isinstance(change_epoch, int) or change_epoch < 0:
            raise ValueError(f"loss 'splc': change_epoch must be an int >= 0 (0-indexed), got {change_epoch!r}")
        self.change_epoch = change_epoch
        if negative not in ("focal", "hill"):
            raise ValueError(f"loss 'splc': negative must be 'focal' or 'hill', got {negative!r}")
        self.negative = negative
        self.epoch = 1

    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        self.epoch = _check_epoch("splc", epoch)

    @property
    def correcting(self) -> bool:
        """Whether the correction is active at the current (1-indexed) epoch."""
        return self.epoch - 1 >= self.change_epoch

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        g = self.gamma
        k = splc_correction_mask(logits, labels, self.tau).to(logits.dtype) if self.correcting else 0.0
        if self.negative == "hill":
            l3 = hill_neg(logits, HILL_LAMBDA)
        else:
            l3 = focal_neg(logits, g)
        return self.reduce(spine(
            logits, labels, lambda z: focal_pos(z, g, self.margin), lambda z: focal_pos(z, g), l3, k=k
        ))


# --------------------------------------------------------------------------- GR
@register("gr", "Generalised robust loss: GCE terms, soft pseudo-label k and Gaussian weight v (Chen et al., IJCAI 2024)")
class GR(SPMLLoss):
    """GR loss (docs/methods.md, "gr"): ``s*L1 + n*L3 + u*v*(k*L2 + (1-k)*L3)``, BC-mean, with

    ``L1 = -log p`` (the code's form; ``(1-p**q1)/q1`` when ``q1`` is given; docs/protocol.md,
    "GR positive term differs from the paper"),
    ``L2 = (1-p**q2)/q2``, ``L3 = (1-(1-p)**q3)/q3``, ``k = sigmoid(w*sg(p) + b)`` and
    ``v = exp(-(sg(p)-mu)**2/(2 sigma**2))`` on unobserved entries only.

    ``k`` estimates that a missing label is positive; ``v`` trusts entries near ``mu`` and
    discounts the rest; the bounded GCE terms resist the wrong targets that remain.

    Constants by default (``w=2, b=-2, mu=0.8, sigma=0.5``, the end values of the code's
    VOC schedule). ``schedule`` switches on the linear schedule: ``True`` for the code
    defaults :data:`GR_CODE_SCHEDULE`, or a mapping ``{"w": (start, end), ...}`` for any of
    ``w, b, mu, sigma`` (names left out stay at their constant). With ``n =
    linear_init_epochs`` and ``D = T - n``, :meth:`set_epoch` sets, under
    ``schedule_indexing="code"`` (docs/protocol.md, "GR schedule indexing"), ``w, b`` at
    fraction ``max(e-n-1, 0)/D`` and ``mu, sigma`` at ``max(e-n, 0)/D`` (k lags v by one epoch and never reaches its end);
    under ``"paper"`` [ours] all four at ``max(e-n, 0)/D``, reaching the end values at
    ``e = T``. Before the first :meth:`set_epoch` the start values apply.
    """

    batchable = True

    def __init__(
        self,
        w: float = 2.0,
        b: float = -2.0,
        mu: float = 0.8,
        sigma: float = 0.5,
        q1: float | None = None,
        q2: float = 0.01,
        q3: float = 1.0,
        schedule: bool | Mapping[str, tuple[float, float]] | None = None,
        linear_init_epochs: int = 0,
        schedule_indexing: str = "code",
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        self.w = check_number("gr", "w", w)
        self.b = check_number("gr", "b", b)
        self.mu = check_number("gr", "mu", mu)
        self.sigma = check_number("gr", "sigma", sigma, low=0.0, low_open=True)
        self.q1 = None if q1 is None else check_number("gr", "q1", q1, low=0.0, low_open=True)
        self.q2 = check_number("gr", "q2", q2, low=0.0, low_open=True)
        self.q3 = check_number("gr", "q3", q3, low=0.0, low_open=True)
        if isinstance(linear_init_epochs, bool) or not isinstance(linear_init_epochs, int) or linear_init_epochs < 0:
            raise ValueError(f"loss 'gr': linear_init_epochs must be an int >= 0, got {linear_init_epochs!r}")
        self.linear_init_epochs = linear_init_epochs
        if schedule_indexing not in ("code", "paper"):
            raise ValueError(f"loss 'gr': schedule_indexing must be 'code' or 'paper', got {schedule_indexing!r}")
        self.schedule_indexing = schedule_indexing
        self.schedule = schedule
        self._ranges = self._resolve_schedule(schedule)
        self.values: dict[str, float] = {name: start for name, (start, _) in self._ranges.items()}

    def _resolve_schedule(self, schedule: Any) -> dict[str, tuple[float, float]]:
        constants = {"w": self.w, "b": self.b, "mu": self.mu, "sigma": self.sigma}
        ranges = {name: (value, value) for name, value in constants.items()}
        if schedule is None or schedule is False:
            return ranges
        if schedule is True:
            return dict(GR_CODE_SCHEDULE)
        if not isinstance(schedule, Mapping):
            raise ValueError(
                "loss 'gr': schedule must be None, True (code defaults) or a mapping like "
                f"{{'w': (0, 2), 'mu': (0.5, 0.8)}}, got {schedule!r}"
            )
        unknown = sorted(set(schedule) - set(ranges))
        if unknown:
            raise ValueError(
                f"loss 'gr': unknown schedule key(s) {', '.join(map(str, unknown))}; valid keys are: b, mu, sigma, w"
            )
        for name, pair in schedule.items():
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"loss 'gr': schedule[{name!r}] must be a (start, end) pair, got {pair!r}")
            start, end = (check_number("gr", f"schedule[{name!r}]", x) for x in pair)
            if name == "sigma" and min(start, end) <= 0:
                raise ValueError(f"loss 'gr': schedule['sigma'] values must be > 0, got {pair!r}")
            ranges[name] = (start, end)
        return ranges

    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        e = _check_epoch("gr", epoch)
        if all(start == end for start, end in self._ranges.values()):
            return  # constants: nothing to schedule
        span = num_epochs - self.linear_init_epochs
        if span < 1:
            raise ValueError(
                f"loss 'gr': num_epochs ({num_epochs}) must exceed linear_init_epochs "
                f"({self.linear_init_epochs}) for the schedule"
            )
        n = self.linear_init_epochs
        late = min(max(e - n, 0) / span, 1.0)
        early = min(max(e - n - 1, 0) / span, 1.0) if self.schedule_indexing == "code" else late
        for name, (start, end) in self._ranges.items():
            frac = early if name in ("w", "b") else late
            self.values[name] = start + (end - start) * frac

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        val = self.values
        return self.reduce(spine(
            logits, labels,
            lambda z: gce_pos(z, self.q1),
            lambda z: gce_pos(z, self.q2),
            lambda z: gce_neg(z, self.q3),
            k=Logistic(val["w"], val["b"]),
            v=Gaussian(val["mu"], val["sigma"]),
        ))


# --------------------------------------------------------------------------- large-loss family
class _LargeLoss(SPMLLoss):
    """AN (BCE-with-logits, BC-mean) whose largest unobserved losses are modified.

    See docs/methods.md, "ll_r", and docs/protocol.md, "LL-Cp that silently runs as LL-Ct".

    Per batch, ``L = -log(1-p)`` on unobserved entries; the ``k = ceil(B*C*delta)`` largest
    (:func:`~spmlkit.labeling.large_loss.large_loss_mask`, ties at lambda included) are the
    likely missing positives. ``delta_rel`` is the per-epoch rate in **percent** (README
    grid 0.1-0.5; default 0.2 [ours], per-dataset values are not published). Epoch 1 is plain
    AN. Observed negatives (label -1) are plain negatives and never selected.
    """

    batchable = True

    #: "reject" or "correct"
    action: str = "reject"

    def __init__(self, delta_rel: float = 0.2, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.delta_rel = check_number(self.name, "delta_rel", delta_rel, low=0.0)
        self.epoch = 1

    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        self.epoch = _check_epoch(self.name, epoch)

    @property
    def rate(self) -> float:
        """Fraction of the batch's entries selected at the current epoch."""
        return max(self.epoch - 1, 0) * self.delta_rel / 100.0

    def _select(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _, _, unobserved = label_masks(labels)
        neg = bce_neg(logits)
        mask_ge, threshold = large_loss_mask(neg, unobserved, self.rate)
        return neg, mask_ge, threshold

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        neg, selected, _ = self._select(logits, labels)
        sel = selected.to(logits.dtype)
        if self.action == "reject":
            return self.reduce(spine(logits, labels, bce_pos, None, neg, v=1.0 - sel))
        return self.reduce(spine(logits, labels, bce_pos, bce_pos, neg, k=sel))


@register("ll_r", "Large-loss rejection: drop the largest assumed-negative losses (Kim et al., CVPR 2022)")
class LLR(_LargeLoss):
    """LL-R: the selected entries get loss 0; rate ``delta_e = (e-1) * delta_rel / 100``."""

    action = "reject"


@register("ll_ct", "Large-loss temporary correction: largest assumed negatives trained as positives (Kim et al., CVPR 2022)")
class LLCt(_LargeLoss):
    """LL-Ct: the selected entries get ``-log p`` for this step; rate ``(e-1) * delta_rel / 100``."""

    action = "correct"


@register("ll_cp", "Large-loss permanent correction: largest assumed negatives relabelled positive (Kim et al., CVPR 2022)")
class LLCp(_LargeLoss):
    """LL-Cp: as LL-Ct with the constant rate ``delta_rel / 100`` from epoch 2, and permanent.

    :meth:`corrections` (bool ``[B, C]``, detached) marks the unobserved entries whose loss is
    strictly above lambda (``record="gt"``); the trainer writes them to the label state as
    corrected positives (``corrects_labels``). The step's own loss uses ``>= lambda`` like LL-Ct,
    matching the LL code's two comparisons (docs/protocol.md, "LL-Cp that silently runs as
    LL-Ct"). ``record="ge"`` records the entries the step corrected, lambda's own included, as
    the BoostLU code does (docs/methods.md, "boostlu_ll_cp").
    """

    action = "correct"
    corrects_labels = True

    def __init__(self, delta_rel: float = 0.2, record: str = "gt", **options: Unpack[LossOptions]) -> None:
        super().__init__(delta_rel, **options)
        if record not in ("gt", "ge"):
            raise ValueError(f"loss 'll_cp': record must be 'gt' (loss > lambda, the LL code) or 'ge' "
                             f"(loss >= lambda, the BoostLU code), got {record!r}")
        self.record = record

    @property
    def rate(self) -> float:
        return self.delta_rel / 100.0 if self.epoch >= 2 else 0.0

    def corrections(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The detached bool ``[B, C]`` mask of the entries this step corrects for good."""
        neg, selected, threshold = self._select(logits, labels.to(logits.dtype))
        if self.record == "ge":
            return selected
        return selected & (neg.detach() > threshold[..., None, None])

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        neg, selected, _ = self._select(logits, labels)
        return self.reduce(spine(logits, labels, bce_pos, bce_pos, neg, k=selected.to(logits.dtype)))
