"""Batch-wise losses: terms that look at a whole batch (or a class column) at once.

* EPR, the expected positive regulariser: Cole et al., "Multi-Label Learning from Single
  Positive Labels", CVPR 2021 (docs/methods.md, "epr").
* High-rank regulariser: Li, Wang, Chen, "Pushing One Pair of Labels Apart Each Time in
  Multi-Label Learning: From Single Positive to Full Labels" (docs/methods.md, "highrank";
  the exact form is our definition).
* Variational PU loss and its mixup regulariser: Yuan, Zhang, Huang, "Positive Label Is
  All You Need for Multi-Label Classification", ICME 2024 (docs/methods.md, "pu_mlc").

None of these decomposes into independent per-entry terms: EPR constrains the batch's
average number of predicted positives, the high-rank term the spread of the batch
prediction matrix, and the PU loss compares each class column with its own positives, so
they live apart from the element-wise spine.

Stop-gradient quantities (PU-MLC's temperature and re-balance factor) are explicit inputs
of the pure functions; the modules compute them from the detached batch. That keeps the
pure functions honest for ``torch.autograd.gradcheck``.
"""

from __future__ import annotations

import math
from typing import Callable, Unpack

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .base import (
    LossContext,
    LossOptions,
    SPMLLoss,
    bc_mean,
    check_number,
    check_reduction,
    register,
)

__all__ = [
    "elements_plus_batch_term",
    "expected_positive_regularizer",
    "high_rank_regularizer",
    "pu_temperature",
    "pu_variational_loss",
    "pu_mixup_consistency",
    "draw_pu_mixing",
    "EPRLoss",
    "HighRankRegularizer",
    "PUMLCLoss",
]

_NORMS = ("l2", "l1")
_NUMERICS = ("stable", "reference")
#: epsilon inside the logs of the PU-MLC code (docs/methods.md, "The element-wise view")
PU_EPS = 1e-10


def expected_positive_regularizer(
    probs: torch.Tensor, expected_num_pos: float, norm: str = "l2"
) -> torch.Tensor:
    """EPR's ``R(p)``: how far the batch's mean number of predicted positives is from k.

    ``l2``: ``R = ((1/B) Σ_n Σ_c p_nc - k)² / C²`` (Cole et al.'s code);
    ``l1``: ``R = |(1/B) Σ_n Σ_c p_nc - k| / C`` ([ours]: the same per-class units).

    Under single positives this is the only signal the unobserved entries get: it keeps
    the classifier from predicting everything positive without assuming any entry negative.
    """
    if norm not in _NORMS:
        raise ValueError(
            f"expected_positive_regularizer: norm must be one of {_NORMS}, got {norm!r}"
        )
    num_classes = probs.shape[-1]
    gap = probs.sum(dim=-1).mean(dim=-1) - expected_num_pos
    if norm == "l2":
        return gap.square() / num_classes**2
    return gap.abs() / num_classes


@register(
    "epr", "EPR: -log p on observed positives + squared gap to the expected number of positives"
)
class EPRLoss(SPMLLoss):
    """Expected positive regulariser (docs/methods.md, "epr").

    ``L = BC-mean(-log p on Y=+1) + R(p)``, ``R`` from :func:`expected_positive_regularizer`.
    Unobserved and observed-negative entries contribute 0 to the first term but count in
    its ``B·C`` denominator. ``expected_num_pos`` defaults to the VOC value 1.5 (COCO 2.9,
    NUS 1.9, CUB 31.4; presets carry them).

    ``reduction``: ``"mean"`` is the form above; ``"sum"`` is ``B·C`` times it (the element
    sum plus ``B·C·R``), so sums over micro-batches divided by the total entry count give the
    mean again. ``"none"`` is rejected: ``R`` is one number for the whole batch, with no
    honest share per entry.
    """

    batchable = True

    reductions = ("mean", "sum")

    def __init__(self, expected_num_pos: float = 1.5, norm: str = "l2", **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.expected_num_pos = check_number("epr", "expected_num_pos", expected_num_pos, low=0.0)
        if norm not in _NORMS:
            raise ValueError(f"loss 'epr': norm must be one of {', '.join(_NORMS)}, got {norm!r}")
        self.norm = norm

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        positive_term = torch.where(labels > 0, -F.logsigmoid(logits), 0.0)
        reg = expected_positive_regularizer(torch.sigmoid(logits), self.expected_num_pos, self.norm)
        return elements_plus_batch_term(positive_term, reg, self.reduction)


def elements_plus_batch_term(elements: Tensor, batch_term: Tensor, reduction: str = "mean") -> Tensor:
    """``BC-mean(elements) + batch_term`` (``"mean"``) or ``B·C`` times it (``"sum"``).

    The shape of EPR and ROLE: an element matrix plus a regulariser of the whole batch. The
    "sum" keeps their ratio, so switching reduction rescales the loss without reweighting it.
    """
    check_reduction("elements_plus_batch_term", reduction, ("mean", "sum"))
    if reduction == "sum":
        return elements.sum(dim=(-2, -1)) + (elements.shape[-2] * elements.shape[-1]) * batch_term
    return bc_mean(elements) + batch_term


def high_rank_regularizer(
    logits: Tensor, lam: float = 0.01, delta: float = 1e-4, reduction: str = "mean"
) -> Tensor:
    """``R_HR = -(λ/C)·log det(PᵀP/B + δ·I_C)`` with ``P = σ(Z)`` (docs/methods.md, "highrank"; [ours]).

    Equivalently ``-(λ/C)·Σ_k log(s_k²/B + δ)`` over the singular values of P: rewarding a
    large log-determinant spreads the batch predictions over many directions, the smooth
    stand-in for "high rank" (differentiable, unlike the trace norm). When ``B < C`` the
    ``C - B`` missing directions contribute the constant ``log δ`` and no gradient.
    The Gram matrix is formed and factorised in float64 (it is SPD with eigenvalues ≥ δ, so
    Cholesky always succeeds); the result is returned in the logits' dtype.

    The value is a mean over the C eigen-directions of ``PᵀP/B + δ·I``, which gives the
    reductions: ``"none"`` returns the ``[C]`` terms ``-λ·log(μ_k)`` over its eigenvalues
    ``μ_k`` (ascending; ``eigvalsh`` has stable gradients even for the repeated δ's),
    ``"sum"`` their sum ``-λ·log det`` and ``"mean"`` the value above.
    """
    check_reduction("high_rank_regularizer", reduction)
    batch, num_classes = logits.shape[-2:]
    probs = torch.sigmoid(logits.to(torch.float64))
    if reduction == "none":
        gram = probs.mT @ probs / batch
        gram = gram + delta * torch.eye(num_classes, dtype=torch.float64, device=logits.device)
        return (-lam * torch.log(torch.linalg.eigvalsh(gram))).to(logits.dtype)
    # PᵀP and PPᵀ share their nonzero eigenvalues, so log det(PᵀP/B + δI_C) = (C - n)·log δ +
    # log det(G/B + δI_n) with G the smaller of the two Gram matrices (n = min(B, C)): the same
    # value and gradient, from a factorisation of n x n instead of C x C (docs/methods.md,
    # "highrank": OPML-SP's group of 9 runs on corel5k, batches of 64 on 374 labels, 237 s -> 65 s)
    side = min(batch, num_classes)
    gram = (probs @ probs.mT if batch < num_classes else probs.mT @ probs) / batch
    gram = gram + delta * torch.eye(side, dtype=torch.float64, device=logits.device)
    # SPD by construction, so the factorisation needs no error check; cholesky() would make one,
    # and on a GPU that check waits for the device on every step
    chol = torch.linalg.cholesky_ex(gram).L
    logdet = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(dim=-1) + (num_classes - side) * math.log(delta)
    scale = lam / num_classes if reduction == "mean" else lam
    return (-scale * logdet).to(logits.dtype)


@register("highrank", "high-rank regulariser -(λ/C)·logdet(PᵀP/B + δI); add it to another loss",
          method=False)  # a part of opml_sp, never trained on its own
class HighRankRegularizer(SPMLLoss):
    """The high-rank regulariser of OPML-SP as a registered term (docs/methods.md, "highrank").

    It ignores the labels and is meant to be **added** to a main loss (OPML-SP = soft OPML
    + high-rank + correction), e.g. ``opml_soft(z, y) + highrank(z, y)``. The paper's λ is
    lost; the default ``lam = 0.01`` [ours] keeps the term at most ``λ·|log δ| ≈ 0.09``,
    small next to an OPML loss of order ``log C`` (the paper reports mAP is stable for small
    λ and drops above some value).

    ``reduction``: ``"none"`` gives one term per eigen-direction (``[C]``), ``"sum"`` their
    sum and ``"mean"`` (the form above) their mean; see :func:`high_rank_regularizer`.
    """

    batchable = True

    def __init__(self, lam: float = 0.01, delta: float = 1e-4, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.lam = check_number("highrank", "lam", lam, low=0.0)
        # δ > 0 is the ridge that keeps the log-determinant finite
        self.delta = check_number("highrank", "delta", delta, low=0.0, low_open=True)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return high_rank_regularizer(logits, self.lam, self.delta, self.reduction)


def pu_temperature(logits: torch.Tensor, alpha: float = 1.0, floor: float = 1e-6) -> torch.Tensor:
    """PU-MLC's per-class temperature ``τ_c = max(min(α·std_n(s_nc), 1), floor)``, detached ``[C]``.

    Population std over the batch (``unbiased=False``), as in the code. Dividing by it
    rescales each class column to unit spread, so the sigmoid neither saturates nor stays
    flat whatever the logit scale. Depends on the per-device batch.

    A column with no spread (std exactly 0: a constant column, or any column of a one-row
    batch) has no scale to normalise, so it gets the cap ``τ = 1`` (no tempering). Flooring it
    instead, as this function once did, divided the logits by ``floor`` and blew the loss up
    (a one-row last batch took a training loss from about -3 to several thousand). ``floor``
    (docs/protocol.md, "PU-MLC temperature without a lower bound") still bounds columns whose spread is tiny but not zero. The std is
    taken in at least float32, because float16 squares of logits overflow or underflow.
    """
    work = logits.detach()
    spread = work.to(torch.promote_types(work.dtype, torch.float32)).std(dim=-2, correction=0)
    tempered = (alpha * spread).clamp(max=1.0).clamp(min=floor)
    return torch.where(spread > 0, tempered, torch.ones_like(tempered))


def pu_variational_loss(
    logits: Tensor,
    labels: Tensor,
    tau: Tensor,
    prior: Tensor,
    gamma: float = 0.55,
    numerics: str = "stable",
    reduction: str = "mean",
) -> Tensor:
    """Variational PU loss of PU-MLC with explicit temperature and re-balance factor.

    ``L = Σ_c [ p̄_c^γ · log(mean_n q_nc) - 1(|P_c|>0) · mean_{n∈P_c} log q_nc ]``,
    ``q = σ(s / τ_c)``, ``P_c`` the observed positives of class c. All batch rows are the
    unlabelled sample (positives included); observed negatives are ignored.

    ``tau`` ``[C]`` and ``prior`` (``p̄_c``, ``[C]``) are inputs; :class:`PUMLCLoss` passes
    their detached batch values. ``numerics="stable"`` evaluates the logs from logits
    (``log mean q = logsumexp_n logσ(s/τ) - log B``); ``"reference"`` adds the code's 1e-10
    inside the logs of probabilities. The two agree to ~1e-10 unless q underflows.

    ``reduction``: ``"none"`` returns the per-class terms ``[C]``; ``"mean"`` (the paper's
    form) and ``"sum"`` both return their sum, because the paper sums over classes.
    """
    check_reduction("pu_variational_loss", reduction)
    if numerics not in _NUMERICS:
        raise ValueError(
            f"pu_variational_loss: numerics must be one of {_NUMERICS}, got {numerics!r}"
        )
    scaled = logits / tau.to(logits.dtype).unsqueeze(-2)
    positive = labels > 0
    count = positive.sum(dim=-2)
    if numerics == "stable":
        log_q = F.logsigmoid(scaled)
        log_mean_q = log_q.logsumexp(dim=-2) - math.log(logits.shape[-2])
    else:
        q = torch.sigmoid(scaled)
        log_q = torch.log(q + PU_EPS)
        log_mean_q = torch.log(q.mean(dim=-2) + PU_EPS)
    positive_mean = torch.where(positive, log_q, 0.0).sum(dim=-2) / count.clamp(min=1)
    weight = prior.to(logits.dtype).pow(gamma)
    per_class = weight * log_mean_q - torch.where(count > 0, positive_mean, 0.0)
    return per_class if reduction == "none" else per_class.sum(dim=-1)


@register(
    "pu_mlc",
    "PU-MLC variational PU loss with tempered logits and prior re-balancing (summed over classes)",
)
class PUMLCLoss(SPMLLoss):
    """PU-MLC's variational PU loss (docs/methods.md, "pu_mlc"), summed over classes.

    ``L = Σ_c [ p̄_c^γ · log(mean_n q_nc) - 1(|P_c|>0) · mean_{n∈P_c} log q_nc ]``

    with ``q = σ(s/τ_c)``, ``τ`` from :func:`pu_temperature` and ``p̄_c = sg(mean_n q_nc)``.
    The first term pushes the mean prediction of every class down (the unlabelled sample);
    the second pulls the positives up; ``p̄_c^γ`` weakens the push for rare classes so they
    are not collapsed (γ larger for fewer known labels). Defaults: COCO values
    ``gamma = 0.55``, ``alpha = 1.0`` (VOC 2007: 0.85, 2.0).

    ``numerics="stable"`` (default) uses log-sigmoid/logsumexp forms without the code's
    1e-10; ``"reference"`` reproduces it (bounded loss when q underflows). The paper's
    mixup regulariser needs the model and is the separate :func:`pu_mixup_consistency`,
    which the training loop adds with weight 1.

    A class column with no spread in the batch (constant logits, or a one-row batch) is not
    tempered (``τ_c = 1``), so such a batch gives a finite loss of ordinary size; see
    :func:`pu_temperature`.

    ``reduction``: ``"none"`` gives the per-class terms ``[C]``; ``"mean"`` (the paper's form)
    and ``"sum"`` both give their sum.
    """

    batchable = True

    def __init__(
        self,
        gamma: float = 0.55,
        alpha: float = 1.0,
        tau_floor: float = 1e-6,
        numerics: str = "stable",
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        # gamma: power of the re-balance factor; alpha: temperature scale
        self.gamma = check_number("pu_mlc", "gamma", gamma, low=0.0)
        self.alpha = check_number("pu_mlc", "alpha", alpha, low=0.0, low_open=True)
        self.tau_floor = check_number("pu_mlc", "tau_floor", tau_floor, low=0.0, low_open=True)
        if numerics not in _NUMERICS:
            raise ValueError(
                f"loss 'pu_mlc': numerics must be one of {', '.join(_NUMERICS)}, got {numerics!r}"
            )
        self.numerics = numerics

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        tau = pu_temperature(logits, self.alpha, self.tau_floor)
        prior = torch.sigmoid(logits.detach() / tau.unsqueeze(-2)).mean(dim=-2)
        return pu_variational_loss(logits, labels, tau, prior, self.gamma, self.numerics, self.reduction)


def _draw_beta(beta: float, generator: torch.Generator | None) -> float:
    """One ``Beta(beta, beta)`` draw, reproducible from a torch generator.

    torch's Beta/Gamma samplers take no generator, so a 63-bit seed is drawn from
    ``generator`` (or torch's global RNG when None, so ``torch.manual_seed`` still makes
    runs repeatable) and seeds a numpy ``Generator`` that draws the Beta variate.
    """
    device = generator.device if generator is not None else torch.device("cpu")
    seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=device).item())
    return float(np.random.default_rng(seed).beta(beta, beta))


def draw_pu_mixing(batch: int, generator: torch.Generator | None = None, beta: float = 0.3) -> tuple[Tensor, float]:
    """The random part of :func:`pu_mixup_consistency` for a batch of ``batch`` rows:
    ``(perm, lam)``, the permutation of the first half (on the generator's device) and
    ``λ ~ Beta(beta, beta)``, drawn in that order from ``generator``.

    Drawn apart from the loss so that the loss of R runs can be computed at once
    (:attr:`~spmlkit.losses.SPMLLoss.batchable`): each run draws from its own generator, exactly
    what :func:`pu_mixup_consistency` draws when it is given no ``perm``/``lam``.
    """
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"pu_mixup_consistency: beta must be a finite number > 0, got {beta!r}")
    gen_device = generator.device if generator is not None else torch.device("cpu")
    perm = torch.randperm(batch // 2, generator=generator, device=gen_device)
    return perm, _draw_beta(beta, generator)


def pu_mixup_consistency(
    model: Callable[[torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    beta: float = 0.3,
    detach_targets: bool = False,
    lam: float | Tensor | None = None,
    perm: Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """PU-MLC's mixup regulariser (from vPU; docs/methods.md, "pu_mlc"), weight 1 in the paper.

    The batch is split into A (rows ``0 … ⌊B/2⌋-1``) and A' (rows ``⌈B/2⌉ … B-1``; an odd
    middle row is dropped). Targets are ``t = 1`` on observed positives and ``σ(z)``
    elsewhere (observed negatives included, as in the code), not detached unless
    ``detach_targets``. With ``perm`` a random permutation of A and
    ``λ ~ Beta(beta, beta)`` (one per batch),
    ``x̃ = λ·x_{A,perm} + (1-λ)·x_{A'}``, ``t̃ = λ·t_{A,perm} + (1-λ)·t_{A'}`` and

    ``L_reg = Σ_c mean_n (log(t̃ + 1e-10) - log(σ(f(x̃)) + 1e-10))²``.

    The 1e-10 is part of the definition here (both sides are floored at ``log 1e-10``, so
    two vanishing probabilities agree); ``log(σ(f)+1e-10)`` is evaluated stably as
    ``logaddexp(logσ(f), log 1e-10)``. Randomness: ``perm`` then ``λ`` are drawn from
    ``generator`` (global torch RNG when None; see :func:`_draw_beta`); passing ``lam``
    fixes λ and draws no λ, passing ``perm`` (a permutation of ``range(⌊B/2⌋)``) draws no
    permutation (:func:`draw_pu_mixing` draws both ahead, as the trainer does). ``lam`` may be a
    float64 tensor: it is then not range-checked here (the caller drew it). Returns 0 for ``B < 2``. ``model`` maps inputs ``[h, ...]`` to
    logits ``[h, C]`` (one extra forward pass).

    ``reduction``: ``"none"`` returns the squared differences ``[h, C]`` (``h = ⌊B/2⌋``;
    ``[0, C]`` for ``B < 2``), ``"sum"`` their sum and ``"mean"`` the form above
    (``sum / h``: a mean over mixed rows, summed over classes).
    """
    check_reduction("pu_mixup_consistency", reduction)
    lead = logits.dim() - 2  # leading problem dimensions; the batch is dimension ``lead`` of every input
    if (lead < 0 or inputs.dim() <= lead or tuple(inputs.shape[: lead + 1]) != tuple(logits.shape[: lead + 1])
            or labels.shape != logits.shape):
        raise ValueError(
            f"pu_mixup_consistency: inputs {tuple(inputs.shape)}, logits {tuple(logits.shape)} and "
            f"labels {tuple(labels.shape)} must share the batch size (labels the logits' shape)"
        )
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"pu_mixup_consistency: beta must be a finite number > 0, got {beta!r}")
    if isinstance(lam, (int, float)) and not 0.0 <= lam <= 1.0:
        raise ValueError(f"pu_mixup_consistency: lam must lie in [0, 1], got {lam!r}")
    if lead and (perm is None or lam is None):
        raise ValueError("pu_mixup_consistency: with leading problem dimensions pass each problem's perm and lam "
                         "(draw_pu_mixing draws them from each problem's generator)")
    problems, (batch, classes) = tuple(logits.shape[:-2]), tuple(logits.shape[-2:])
    if batch < 2:
        return logits.new_zeros((*problems, 0, classes) if reduction == "none" else problems)
    half = batch // 2
    if perm is None:
        gen_device = generator.device if generator is not None else torch.device("cpu")
        perm = torch.randperm(half, generator=generator, device=gen_device)
    perm = perm.to(inputs.device)
    if lead and tuple(perm.shape) != (*problems, half):
        raise ValueError(f"pu_mixup_consistency: perm must hold one permutation of range({half}) per problem, "
                         f"shape {(*problems, half)}; got {tuple(perm.shape)}")
    if lam is None:
        lam = _draw_beta(beta, generator)

    probs = torch.sigmoid(logits.detach() if detach_targets else logits)
    targets = torch.where(labels > 0, torch.ones_like(probs), probs)
    mixed_inputs = _mix(inputs, perm, lam, lead, half)
    mixed_targets = _mix(targets, perm, lam, lead, half)

    out = model(mixed_inputs)
    if tuple(out.shape) != (*problems, half, classes):
        raise ValueError(
            f"pu_mixup_consistency: model returned shape {tuple(out.shape)} for {half} mixed inputs; "
            f"expected {(*problems, half, classes)}"
        )
    log_eps = math.log(PU_EPS)
    log_pred = torch.logaddexp(F.logsigmoid(out), torch.full_like(out, log_eps))
    log_target = torch.log(mixed_targets.to(out.dtype) + PU_EPS)
    squared = (log_target - log_pred).square()
    if reduction == "mean":
        return squared.mean(dim=-2).sum(dim=-1)
    return squared if reduction == "none" else squared.sum(dim=(-2, -1))


def _mix(values: Tensor, perm: Tensor, lam: float | Tensor, lead: int, half: int) -> Tensor:
    """``λ·values[A][perm] + (1-λ)·values[A']`` along the batch dimension ``lead`` (A the first
    ``half`` rows, A' the last ``half``), per problem when there are leading dimensions.

    λ and 1-λ are taken in float64 and rounded once to the values' dtype, the rounding a Python
    float scalar gets, so that a problem's mixture is the same whether λ came as a float or as
    one entry of a tensor of λs.

    With one permutation per problem (``perm`` ``[..., half]``), the problems' first halves are
    read as one ``[problems * half, ...]`` matrix and gathered in one ``index_select``, each
    permutation offset to its problem's rows: the rows ``take_along_dim`` would pick (a gather
    moves values, it rounds nothing), about 8 times faster on PU-MLC's Yeast batches of 9 runs,
    where ``take_along_dim`` first broadcasts the index over every feature."""
    batch = values.shape[lead]
    first, second = values.narrow(lead, 0, half), values.narrow(lead, batch - half, half)
    if perm.dim() == 1:
        shuffled = first.index_select(lead, perm)
    else:
        problems = math.prod(perm.shape[:-1])
        offsets = torch.arange(0, problems * half, half, device=perm.device).reshape(*perm.shape[:-1], 1)
        rows = first.reshape(problems * half, *first.shape[lead + 1:])
        shuffled = rows.index_select(0, (perm + offsets).reshape(-1)).view(first.shape)
    if not isinstance(lam, Tensor):
        return lam * shuffled + (1.0 - lam) * second
    shape = (*lam.shape, *([1] * (values.dim() - lam.dim())))
    weight, rest = lam.to(values.dtype).reshape(shape), (1.0 - lam).to(values.dtype).reshape(shape)
    return weight * shuffled + rest * second
