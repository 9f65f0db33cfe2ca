"""Set-wise losses over a row's labels: ZLPR, OPML and soft (AP-adaptive) OPML.

* ZLPR: Su et al., "ZLPR: A novel loss for multi-label classification", 2022
  (docs/methods.md, "zlpr").
* OPML: Li, Wang, Chen, "Pushing One Pair of Labels Apart Each Time in Multi-Label
  Learning: From Single Positive to Full Labels" (docs/methods.md, "opml" and "opml_soft"). The paper's
  equations are lost from our copy; the forms here are the library's reconstruction [ours].

Unlike the element-wise family these losses couple all classes of a row: the negatives
enter through one log-sum-exp and the positives through another, so the loss pushes the
highest-scoring negative below the lowest-scoring positive ("one pair at a time") instead
of pushing every label to its own target.

Label encoding (docs/protocol.md, "Label encoding"): ``1`` observed positive (Pos), ``0`` unobserved and ``-1``
observed negative. Under the AN assumption both ``0`` and ``-1`` form Neg.
"""

from __future__ import annotations

import math
from typing import Any, Unpack

import numpy as np
import torch
from torch import Tensor

from .base import LossContext, LossOptions, SPMLLoss, check_number, make_room, register

__all__ = ["opml_loss", "soft_opml_loss", "ZLPRLoss", "OPMLLoss", "SoftOPMLLoss"]

_NEG_INF = float("-inf")


def _log_const_plus_sum_exp(
    log_const: float, values: torch.Tensor, log_weight: torch.Tensor
) -> torch.Tensor:
    """Per row, ``log(e^{log_const} + Σ_j e^{log_weight_j + values_j})``, computed stably.

    Entries with ``log_weight = -inf`` are left out (their weight is 0). One extra column
    holding ``log_const`` joins the row and a single ``logsumexp`` does the rest, so no
    exponential of a large logit is ever formed. Rows run along the last dimension, so a
    stack of ``[B, C]`` matrices (``[R, B, C]``, stacked runs) gives ``[R, B]``.
    """
    kept = torch.isfinite(log_weight)
    # where() rather than values + (-inf): excluded entries get an exact zero gradient
    terms = torch.where(kept, values + torch.where(kept, log_weight, 0.0), _NEG_INF)
    const = values.new_full((*values.shape[:-1], 1), log_const)
    return torch.cat([const, terms], dim=-1).logsumexp(dim=-1)


def _row_mean(rows: torch.Tensor) -> torch.Tensor:
    """The mean over the examples of a per-example loss ``[..., B]`` (per leading index)."""
    return rows.mean(dim=-1)


def opml_loss(
    logits: torch.Tensor, labels: torch.Tensor, *, a: float = 1.0, b: float = 1.0
) -> torch.Tensor:
    """Per-example OPML loss ``[B]`` (docs/methods.md, "opml"; ZLPR for ``a = b = 1``).

    ``ℓ_n = log(a + Σ_{j∈Neg} e^{z_j}) + log(b + Σ_{i∈Pos} e^{-z_i})``

    with Pos the observed positives and Neg every other entry (unobserved and observed
    negatives). Its minimum is ``log(ab)``; ``ln a`` and ``-ln b`` act as logit margins.
    """
    positive = labels > 0
    zero = torch.zeros_like(logits)
    neg_w = torch.where(positive, _NEG_INF, zero)
    pos_w = torch.where(positive, zero, _NEG_INF)
    return _log_const_plus_sum_exp(math.log(a), logits, neg_w) + _log_const_plus_sum_exp(
        math.log(b), -logits, pos_w
    )


def soft_opml_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    eps: torch.Tensor,
    *,
    a: float = 1.0,
    b: float = 1.0,
) -> torch.Tensor:
    """Per-example soft OPML loss ``[B]`` with explicit smoothing weights (docs/methods.md, "opml_soft").

    ``ℓ_n = log(a + Σ_{c∈Neg} (1-ε_nc) e^{z_nc}) + log(b + Σ_{i∈Pos} e^{-z_ni} + Σ_{c∈U} ε_nc e^{-z_nc})``

    ``eps`` ``[B, C]`` in ``[0, 1]`` is the probability mass an unobserved entry moves from
    the negative to the positive side; it is read on unobserved entries only (observed
    negatives keep weight 1 on the negative side). It is an input, not computed here, so
    this function has no hidden stop-gradient and is differentiable end to end; the
    module :class:`SoftOPMLLoss` passes ``AP_c^r · sg(p_nc)``. Weights of exactly 0 are
    masked out of the log-sum-exp (log-weight ``-inf``), so ``eps = 0`` gives OPML.
    """
    if eps.shape != logits.shape:
        raise ValueError(
            f"soft_opml_loss: eps shape {tuple(eps.shape)} does not match logits shape "
            f"{tuple(logits.shape)}"
        )
    positive = labels > 0
    unobserved = labels == 0
    eps = torch.where(unobserved, eps.to(logits.dtype), 0.0)
    zero = torch.zeros_like(logits)
    keep_neg = ~positive & (eps < 1)
    neg_w = torch.where(keep_neg, torch.log1p(-torch.where(keep_neg, eps, 0.0)), _NEG_INF)
    soft_pos = unobserved & (eps > 0)
    log_eps = torch.log(torch.where(soft_pos, eps, 1.0))
    pos_w = torch.where(positive, zero, torch.where(soft_pos, log_eps, _NEG_INF))
    return _log_const_plus_sum_exp(math.log(a), logits, neg_w) + _log_const_plus_sum_exp(
        math.log(b), -logits, pos_w
    )


def _check_margins(
    name: str, a: float, b: float, u: float | None, v: float | None
) -> tuple[float, float]:
    """Resolve ``(a, b)`` from the direct or the log parameterisation, validating both."""
    if u is not None:
        if a != 1.0:
            raise ValueError(
                f"loss {name!r}: give either a or u (a = e^u), not both (a={a}, u={u})"
            )
        a = math.exp(float(u))
    if v is not None:
        if b != 1.0:
            raise ValueError(
                f"loss {name!r}: give either b or v (b = e^v), not both (b={b}, v={v})"
            )
        b = math.exp(float(v))
    for key, value in (("a", a), ("b", b)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(
                f"loss {name!r}: {key} must be a finite number > 0 (it is added inside a log), "
                f"got {value!r}"
            )
    return float(a), float(b)


@register("zlpr", "ZLPR: log(1+Σ_Neg e^z) + log(1+Σ_Pos e^-z) per example (AN assumption)")
class ZLPRLoss(SPMLLoss):
    """ZLPR (docs/methods.md, "zlpr"), mean over examples.

    ``ℓ_n = log(1 + Σ_{j∈Neg} e^{z_j}) + log(1 + Σ_{i∈Pos} e^{-z_i})``

    Neg = unobserved and observed negatives (AN assumption), Pos = observed positives.
    Compared with BCE the negatives share one normaliser, so a single-positive row is not
    drowned by C-1 independent negative terms. Equal to ``opml`` with ``a = b = 1``.

    ``reduction``: ``"none"`` gives the per-example ``ℓ_n`` ``[B]``, ``"sum"`` their sum and
    ``"mean"`` (the paper's) their mean.
    """

    batchable = True

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self.reduce(opml_loss(logits, labels, a=1.0, b=1.0), _row_mean, event_dims=1)


@register(
    "opml", "OPML: log(a+Σ_Neg e^z) + log(b+Σ_Pos e^-z) per example, bounded below by log(ab)"
)
class OPMLLoss(SPMLLoss):
    """OPML (docs/methods.md, "opml": our reconstruction), mean over examples (no 1/C).

    ``ℓ_n = log(a + Σ_{j∈Neg} e^{z_j}) + log(b + Σ_{i∈Pos} e^{-z_i}) ≥ log(ab)``

    The log-sum-exp smooths "highest negative minus lowest positive"; the constants
    ``a, b > 0`` bound it below (without them it is unbounded). ``ln a`` and ``-ln b`` act
    as logit margins. ``u``/``v`` give the same constants in log form (``a = e^u``,
    ``b = e^v``; ``u = v = 0`` is ZLPR). ``subtract_min`` subtracts ``log(ab)`` so the
    minimum is 0 (gradients unchanged).

    ``reduction``: ``"none"`` gives the per-example ``ℓ_n`` ``[B]`` (each minus ``log(ab)``
    under ``subtract_min``), ``"sum"`` their sum and ``"mean"`` (the paper's) their mean.
    """

    batchable = True

    def __init__(
        self,
        a: float = 1.0,
        b: float = 1.0,
        subtract_min: bool = False,
        u: float | None = None,
        v: float | None = None,
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        self.a, self.b = _check_margins(self.name or "opml", a, b, u, v)
        self.u, self.v = u, v
        self.subtract_min = bool(subtract_min)

    @property
    def lower_bound(self) -> float:
        """``log(ab)``, the infimum of the per-example loss (0 with ``subtract_min``)."""
        return 0.0 if self.subtract_min else math.log(self.a * self.b)

    def _offset(self) -> float:
        return math.log(self.a * self.b) if self.subtract_min else 0.0

    def _reduce_rows(self, rows: Tensor) -> Tensor:
        # "mean" subtracts the offset after averaging, as it always has, so its value is unchanged
        if self.reduction == "mean":
            return _row_mean(rows) - self._offset()
        return self.reduce(rows - self._offset(), event_dims=1)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        return self._reduce_rows(opml_loss(logits, labels, a=self.a, b=self.b))


@register("opml_soft", "soft OPML: unobserved labels smoothed towards positive by AP_c^r * sg(p)",
          method=False)  # trained by the opml_sp recipe, with its correction
class SoftOPMLLoss(OPMLLoss):
    """Soft OPML with AP-adaptive label smoothing (docs/methods.md, "opml_soft": our definition).

    For an unobserved entry, ``ε_nc = AP_c^r · sg(p_nc)`` moves a share of its ``e^{z}``
    term from the negative log-sum-exp to the positive one (with ``e^{-z}``):

    ``ℓ_n = log(a + Σ_{c∈Neg} (1-ε_nc) e^{z_nc}) + log(b + Σ_{i∈Pos} e^{-z_ni} + Σ_{c∈U} ε_nc e^{-z_nc})``

    ``AP_c`` is class c's training AP against the observed labels, set by the training loop
    after each epoch with :meth:`set_class_ap`: a class whose predictions already rank the
    observed positives well is trusted more, and ``r`` sharpens or flattens that trust.
    Until the first AP is set ``ε = 0`` and the loss equals OPML. The ``opml_sp`` method makes that
    call after every epoch (:mod:`spmlkit.methods.opml_sp`); the AP lives in a buffer, so checkpoints carry it.
    ``reduction`` as for ``opml``.

    The trust ``AP_c^r`` is taken once, when the AP is set, on the run's own ``[C]`` vector,
    and kept in a second buffer (rebuilt from the AP on load) rather than on every step: R
    runs trained as one batched group (docs/architecture.md, "Many runs at once") then stack
    each run's exact trust. A power over the stacked ``[R, C]`` AP would take most entries
    through the CPU's vector code and a solo run's 14 through its scalar code, which round
    ``pow`` differently in the last bit.
    """

    class_ap: torch.Tensor | None
    trust: torch.Tensor | None

    def __init__(
        self,
        a: float = 1.0,
        b: float = 1.0,
        r: float = 1.0,
        subtract_min: bool = False,
        u: float | None = None,
        v: float | None = None,
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(a=a, b=b, subtract_min=subtract_min, u=u, v=v, **options)
        self.r = check_number("opml_soft", "r (power on the class AP)", r, low=0.0)
        self.register_buffer("class_ap", None)
        self.register_buffer("trust", None, persistent=False)

    def set_class_ap(self, ap: torch.Tensor | np.ndarray | Any) -> None:
        """Store the per-class training AP ``[C]`` (values in [0, 1]) used from now on.

        Classes without observed positives have no AP; pass 0 for them (docs/protocol.md, "AP with ties
        and classes without positives").
        """
        if isinstance(ap, torch.Tensor):
            value = ap.detach().to(device="cpu", dtype=torch.float64)
        else:
            value = torch.as_tensor(np.asarray(ap, dtype=np.float64))
        if value.dim() != 1 or value.numel() == 0:
            raise ValueError(
                f"loss 'opml_soft': class AP must be a non-empty 1-D vector [classes], got shape {tuple(value.shape)}"
            )
        if not torch.isfinite(value).all() or (value < 0).any() or (value > 1).any():
            raise ValueError(
                "loss 'opml_soft': class AP values must be finite and in [0, 1]; replace the AP of "
                "classes without observed positives (NaN) by 0"
            )
        device = self.class_ap.device if self.class_ap is not None else None
        self.class_ap = value.to(device) if device is not None else value
        self._set_trust()

    def _set_trust(self) -> None:
        """``AP^r`` from the stored AP, in its float64: rounded once to the logits' dtype where used."""
        self.trust = None if self.class_ap is None else self.class_ap.pow(self.r)

    def smoothing(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``ε = AP_c^r · sg(p)`` on unobserved entries, 0 elsewhere (all 0 before any AP)."""
        if self.trust is None:
            return torch.zeros_like(logits)
        if self.trust.shape[-1] != logits.shape[-1]:
            raise ValueError(
                f"loss 'opml_soft': class AP has {self.trust.shape[-1]} entries but logits have "
                f"{logits.shape[-1]} classes; call set_class_ap with one AP per class"
            )
        # [C] (or [..., C], one AP per problem) against the [..., B, C] logits
        trust = self.trust.to(device=logits.device, dtype=logits.dtype).unsqueeze(-2)
        eps = trust * torch.sigmoid(logits.detach())
        return torch.where(labels == 0, eps, 0.0)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        eps = self.smoothing(logits, labels)
        return self._reduce_rows(soft_opml_loss(logits, labels, eps, a=self.a, b=self.b))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        make_room(self, state_dict, prefix, "class_ap")  # a checkpoint taken after set_class_ap: same smoothing
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._set_trust()
