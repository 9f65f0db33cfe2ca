"""CRISP's risk: the single positives' absolute loss plus each class's mean prediction held to its prior.

Liu, Xu, Wang, Geng, "Can Class-Priors Help Single-Positive Multi-Label Learning?"
(docs/methods.md, "crisp", which derives the formula and says which parts of it we rebuilt).
With the absolute loss ``|f - y|`` the fully supervised risk of class j splits into a part on
the class's positives and a part on all data, and the absolute value keeps the second part from
going negative on a finite sample (their Eqs. 5-7):

``R_j = 2 π_j E_{x ~ p(x | y_j = 1)}[1 - f_j(x)] + | E_{x ~ p(x)}[f_j(x)] - π_j |``

where π_j is the class's prior, estimated between epochs (:mod:`spmlkit.labeling.class_prior`).
The annotated positives of j are a sample of the class's positives, so on a batch of B rows

``R̂_j = (π̂_j / r_j) · (1/B) Σ_b l_bj [2 (1 - f_bj) + λ log(1 + e^{-z_bj})]  +  | (1/B) Σ_b f_bj - π̂_j |``

with ``l`` the observed positives, ``r_j = n_p/n`` the share of training rows annotated with j
(``(1/B) Σ_b l_bj / r_j`` averages over the batch what the paper averages over the n_p annotated
rows, so the batch terms add up to its whole-set Eq. 7) and λ the weight of the logistic term of
the paper's Eq. 8 (λ = 0 is Eq. 7, which its Algorithm 1 trains) [ours: the form of Eq. 8 is not
legible in our copy]. The first ``warmup_epochs`` epochs train AN, as the paper's implementation
details say, which also gives the estimator a trained model to score with.
"""

from __future__ import annotations

from typing import Any, Unpack

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..labels import validate_observed
from .base import LossContext, LossOptions, SPMLLoss, check_number, make_room, register
from .terms import bce_neg, bce_pos, spine

__all__ = ["CRISPLoss", "crisp_risk"]


def crisp_risk(logits: Tensor, labels: Tensor, prior: Tensor, weight: Tensor, lam: float = 0.0) -> Tensor:
    """CRISP's risk per class, ``[..., C]``, of a batch of logits ``[..., B, C]``.

    ``prior``: π̂ ``[..., C]``; ``weight``: π̂_j / r_j ``[..., C]`` (0 for a class no training row is
    annotated with); ``lam``: λ of the logistic term. Observed negatives (-1) and unobserved entries
    (0) enter only through the batch mean: CRISP uses every row as a sample of p(x).
    """
    positive = (labels == 1).to(logits.dtype)
    absolute = 2.0 * torch.sigmoid(-logits)  # 2 (1 - f), without the cancellation of 1 - sigmoid(z)
    if lam:
        absolute = absolute + lam * F.softplus(-logits)
    w = weight.to(dtype=logits.dtype, device=logits.device).unsqueeze(-2)
    labelled = (w * positive * absolute).mean(dim=-2)
    p = prior.to(dtype=logits.dtype, device=logits.device)
    aligned = (torch.sigmoid(logits).mean(dim=-2) - p).abs()
    return labelled + aligned


def _class_mean(terms: Tensor) -> Tensor:
    return terms.mean(dim=-1)


@register("crisp", "CRISP: the single positives' absolute loss weighted by the estimated class prior, plus "
                   "|mean prediction - prior| per class (Liu et al.)")
class CRISPLoss(SPMLLoss):
    """CRISP's risk with the class priors estimated between epochs (docs/methods.md, "crisp").

    Epochs up to ``warmup_epochs`` train AN (BCE, unobserved labels as negatives); later epochs
    train :func:`crisp_risk` with the priors last passed to :meth:`set_class_prior` (the ``crisp``
    method estimates them after every epoch and passes them, :mod:`spmlkit.methods.crisp`). The priors live in a buffer, so checkpoints carry them, and R runs
    trained as one group stack their own (docs/architecture.md, "Many runs at once").

    Args:
        lam: λ, the weight of the logistic term on the annotated positives (Eq. 8 as we rebuilt it;
            0, the default, is the paper's Eq. 7).
        warmup_epochs: epochs of AN before the risk (>= 1: the priors come from a trained model).
        observed: the training split's observed label matrix (a data argument, filled by the
            trainer): ``r_j``, the share of rows annotated with each class, weighs the batch.

    ``reduction``: "mean" averages the per-class terms over the classes (the AN of the warm-up is
    then its BC-mean, so the scale does not jump when the risk takes over), "sum" adds them (the
    paper's sum over classes), "none" returns them ``[..., C]``.
    """

    batchable = True
    data_arguments = ("observed",)
    class_prior: Tensor | None
    weight: Tensor | None

    def __init__(self, lam: float = 0.0, warmup_epochs: int = 1, observed: Tensor | np.ndarray | None = None,
                 **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.lam = check_number("crisp", "lam", lam, low=0.0)
        if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, (int, np.integer)) or warmup_epochs < 1:
            raise ValueError(f"loss 'crisp': warmup_epochs must be an integer >= 1 (the class priors are estimated "
                             f"from a model trained for at least one epoch), got {warmup_epochs!r}")
        self.warmup_epochs = int(warmup_epochs)
        if observed is None:
            raise ValueError("loss 'crisp' needs observed=<[num_train, classes] observed label matrix of the "
                             "training split>: the share of rows annotated with each class weighs its positives")
        obs = validate_observed(observed, where="loss 'crisp': observed")
        self.register_buffer("positive_rate", torch.as_tensor((obs == 1).mean(axis=0), dtype=torch.float64))
        self.register_buffer("class_prior", None)
        self.register_buffer("weight", None, persistent=False)
        self.warming = True

    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        """AN up to ``warmup_epochs``, the risk afterwards (a warm-up as long as the run is refused by
        the ``crisp`` method when it is built, :class:`~spmlkit.methods.crisp.CRISP`)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise ValueError(f"loss 'crisp': set_epoch expects a 1-indexed epoch (int >= 1), got {epoch!r}")
        self.warming = epoch <= self.warmup_epochs

    def set_class_prior(self, prior: Tensor | np.ndarray | Any) -> None:
        """Store the estimated prior of every class (``[C]``, values in [0, 1]) used from now on."""
        value = prior.detach().to(device="cpu", dtype=torch.float64) if isinstance(prior, torch.Tensor) \
            else torch.as_tensor(np.asarray(prior, dtype=np.float64))
        classes = self.positive_rate.shape[-1]
        if value.shape != (classes,):
            raise ValueError(f"loss 'crisp': class prior must be a vector of {classes} values (one per class of the "
                             f"observed matrix), got shape {tuple(value.shape)}")
        if not bool(torch.isfinite(value).all()) or bool((value < 0).any()) or bool((value > 1).any()):
            raise ValueError(f"loss 'crisp': class priors must be finite and in [0, 1], got {value.tolist()}")
        self.class_prior = value.to(self.positive_rate.device)
        self._set_weight()

    def _set_weight(self) -> None:
        """π̂_j / r_j, once per estimate (a class no row is annotated with weighs nothing)."""
        if self.class_prior is None:
            self.weight = None
            return
        rate = self.positive_rate
        self.weight = torch.where(rate > 0, self.class_prior / rate.clamp_min(1e-300), torch.zeros_like(rate))

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        if logits.shape[-1] != self.positive_rate.shape[-1]:
            raise ValueError(f"loss 'crisp': logits have {logits.shape[-1]} classes but the observed matrix it was "
                             f"built with has {self.positive_rate.shape[-1]}")
        if self.warming:
            terms = spine(logits, labels, bce_pos, None, bce_neg).mean(dim=-2)
        elif self.class_prior is None:
            raise ValueError("loss 'crisp': the warm-up is over but no class prior was set; call "
                             "set_class_prior(<[classes] estimated priors>) after each epoch (the crisp method's "
                             "class_prior algorithm estimates them for the trainer)")
        else:
            terms = crisp_risk(logits, labels, self.class_prior, self.weight, self.lam)
        return self.reduce(terms, _class_mean, event_dims=1)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        make_room(self, state_dict, prefix, "class_prior")  # a checkpoint taken after set_class_prior: same priors
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._set_weight()

    def extra_repr(self) -> str:
        return f"lam={self.lam!r}, warmup_epochs={self.warmup_epochs!r}"
