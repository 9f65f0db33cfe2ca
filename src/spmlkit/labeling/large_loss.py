"""Large-loss selection of LL-R / LL-Ct / LL-Cp.

"Large Loss Matters in Weakly Supervised Multi-Label Classification", Kim et al., CVPR 2022
(docs/methods.md, "ll_r"; docs/protocol.md, "LL-Cp that silently runs as LL-Ct"). Early in
training a network fits clean labels first, so among the assumed negatives, those with the *largest* loss are the likeliest missing positives.
Per mini-batch the ``k = ceil(B*C*rate)`` largest losses of unobserved entries are selected
(``B*C`` counts every entry of the batch, observed ones included) and then rejected (LL-R),
corrected for the step (LL-Ct) or corrected permanently (LL-Cp).
"""

from __future__ import annotations

import math

import torch

__all__ = ["rejection_count", "large_loss_mask"]


def rejection_count(num_entries: int, rate: float) -> int:
    """``k = ceil(num_entries * rate)``, capped at ``num_entries``.

    The product is rounded to 9 decimals before the ceiling, so a rate such as
    ``3 * 0.002`` (= 0.006000000000000001 in floating point) does not select one entry too
    many through representation noise.
    """
    if rate < 0 or not math.isfinite(rate):
        raise ValueError(f"large-loss rate must be a finite number >= 0, got {rate!r}")
    return min(num_entries, math.ceil(round(num_entries * rate, 9)))


def large_loss_mask(
    loss_matrix: torch.Tensor, unobserved_mask: torch.Tensor, rate: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select the unobserved entries whose loss is among the ``k`` largest of the batch.

    ``loss_matrix`` is ``[B, C]`` or ``[..., B, C]`` (independent batches: each selects its own
    ``k``, and ``threshold`` then has the leading shape).

    Observed entries count as a loss of 0 in the ranking (as in the LL code), ``k`` as in
    :func:`rejection_count` and ``threshold`` (lambda) is the k-th largest masked loss.
    Returns ``(mask_ge, threshold)``: ``mask_ge`` (bool, detached) marks unobserved entries
    with ``loss >= threshold``. Ties at lambda are all selected, and when ``k`` exceeds the
    number of unobserved entries lambda is 0, so every unobserved entry is selected while
    observed entries never are. For ``k = 0`` nothing is selected and lambda is ``+inf``.
    """
    if loss_matrix.shape != unobserved_mask.shape:
        raise ValueError(
            f"large_loss_mask: loss matrix shape {tuple(loss_matrix.shape)} does not match "
            f"unobserved mask shape {tuple(unobserved_mask.shape)}"
        )
    unobserved = unobserved_mask.bool()
    losses = loss_matrix.detach()
    k = rejection_count(losses.shape[-2] * losses.shape[-1], rate)
    if k == 0:
        inf = torch.full(losses.shape[:-2], float("inf"), dtype=losses.dtype, device=losses.device)
        return torch.zeros_like(unobserved), inf
    masked = torch.where(unobserved, losses, torch.zeros((), dtype=losses.dtype, device=losses.device))
    threshold = masked.flatten(-2).topk(k, dim=-1).values[..., -1]
    return unobserved & (masked >= threshold[..., None, None]), threshold
