"""MIME's loss: assume negative on the labels plus its pseudo-positives, and the bottleneck's KL term.

Liu, Xu, Lv, Geng, "Revisiting Pseudo-Label for Single-Positive Multi-Label Learning", ICML 2023
(docs/methods.md, "mime"). MIME's model classifies a Gaussian code per row and class
(:class:`~spmlkit.models.GaussianBottleneck`); its label algorithm turns confident predictions into
positive pseudo-labels between epochs (:class:`~spmlkit.labeling.ConfidentPositives`), which reach
this loss as label 1. For an entry with logit ``z``, ``p = σ(z)``, label ``y`` and code
``N(μ, diag σ²)`` of width ``w``:

``ℓ = −log p`` (y = 1) or ``−log(1 − p)`` (y = 0 or −1), plus
``β · KL_bc``, ``KL_bc = (1/w) Σ_k −½ (1 + 2 log σ_k − μ_k² − σ_k²)``,

the KL divergence of the code from N(0, I), averaged over the code's width (one code per row, from
features shared by every class: each class of the row carries that code's KL). ``"mean"`` is the
BC-mean of ``ℓ``, which is the code's ``Σ ℓ / (B·C) + β · mean(KL)``.
"""

from __future__ import annotations

from typing import Unpack

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import LossContext, LossOptions, SPMLLoss, check_number, register

__all__ = ["MIME", "gaussian_kl"]

#: the MIME code's epsilon inside the logarithm of a probability (``numerics="reference"``)
LOG_EPSILON = 1e-5


def gaussian_kl(mu: Tensor, std: Tensor) -> Tensor:
    """``KL(N(μ, σ²) ‖ N(0, 1))`` per coordinate, written as the code writes it:
    ``−½ (1 + 2 log σ − μ² − σ²)``."""
    return -0.5 * (1 + 2 * std.log() - mu.pow(2) - std.pow(2))


@register("mime", "Assume negative on observed and pseudo positives + the Gaussian bottleneck's KL term "
                  "(Liu, Xu, Lv, Geng, ICML 2023)")
class MIME(SPMLLoss):
    """AN on the effective labels plus ``beta`` times the KL divergence of the model's codes (module
    docstring; docs/methods.md, "mime").

    Label 1 (observed positives, and MIME's pseudo-positives, which the label state hands over as
    corrections) gets ``−log p``; labels 0 and −1 get ``−log(1 − p)`` [ours for −1: the code has no
    observed negatives and gives such an entry no loss]. The loss needs the model's codes
    (``reads`` ``latent``): its model must have a bottleneck (``bottleneck`` > 0).

    Args:
        beta: weight of the KL term (the code's 1e-4 on every image set).
        numerics: "stable" computes the logarithms as log-sigmoids; "reference" as the code does,
            ``−log(σ(z) + 1e-5)`` and ``−log(1 − σ(z) + 1e-5)`` (docs/methods.md, "mime").
    """

    reads = ("latent",)
    batchable = True

    def __init__(self, beta: float = 1e-4, numerics: str = "stable", **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.beta = check_number("mime", "beta", beta, low=0.0)
        if numerics not in ("stable", "reference"):
            raise ValueError(f"loss 'mime': numerics must be 'stable' or 'reference', got {numerics!r}")
        self.numerics = numerics

    def _bce(self, logits: Tensor, labels: Tensor) -> Tensor:
        positive = labels == 1
        if self.numerics == "reference":
            p = torch.sigmoid(logits)
            return torch.where(positive, -torch.log(p + LOG_EPSILON), -torch.log(1.0 - p + LOG_EPSILON))
        return torch.where(positive, -F.logsigmoid(logits), -F.logsigmoid(-logits))

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        if ctx.latent is None:
            raise ValueError("loss 'mime' needs the model's latent codes (latent=(mu, std)): its model must have a "
                             "Gaussian bottleneck (set bottleneck > 0, or leave it unset for the method's own)")
        mu, std = ctx.latent
        per_class = mu.shape[:-1] == logits.shape
        if std.shape != mu.shape or not (per_class or mu.shape[:-1] == logits.shape[:-1]):
            raise ValueError(f"loss 'mime': latent codes of shape {tuple(mu.shape)} / {tuple(std.shape)} do not "
                             f"fit logits of shape {tuple(logits.shape)} (expected [..., B, C, width] or, one code "
                             "per row, [..., B, width])")
        bce = self._bce(logits, labels)
        kl = gaussian_kl(mu, std)
        if self.reduction == "mean":  # the code's order: the BC-mean of the BCE, plus beta times the mean KL
            dims = (-3, -2, -1) if per_class else (-2, -1)
            return bce.sum(dim=(-2, -1)) / (bce.shape[-2] * bce.shape[-1]) + self.beta * kl.mean(dim=dims)
        entry = kl.mean(dim=-1) if per_class else kl.mean(dim=-1).unsqueeze(-1)  # a row's code: each class's KL
        return self.reduce(bce + self.beta * entry)
