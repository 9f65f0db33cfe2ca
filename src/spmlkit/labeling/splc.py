"""SPLC's self-paced correction of missing labels.

"Simple and Robust Loss Design for Multi-Label Learning with Missing Labels", Zhang et al.
(docs/methods.md, "splc"; docs/protocol.md, "SPLC negative term and epoch indexing"). Once
training has warmed up, an unobserved entry the model already scores above ``tau`` is treated as positive for that step only: confident
predictions on missing labels are mostly right, and correcting them stops the assumed
negative term from fighting the model. The correction is transient; nothing is written to
the label state.
"""

from __future__ import annotations

import torch

__all__ = ["splc_correction_mask"]


def splc_correction_mask(logits: torch.Tensor, labels: torch.Tensor, tau: float) -> torch.Tensor:
    """Bool ``[B, C]`` mask of unobserved entries (label 0) with ``sigmoid(z) > tau`` (strict).

    Uses the unshifted, detached logits: the focal margin applies to observed positives
    only, and the selection is a decision, not something to differentiate.
    """
    if logits.shape != labels.shape:
        raise ValueError(
            f"splc_correction_mask: logits shape {tuple(logits.shape)} does not match labels "
            f"shape {tuple(labels.shape)}"
        )
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"splc_correction_mask: tau must lie in [0, 1], got {tau!r}")
    return (labels == 0) & (torch.sigmoid(logits.detach()) > tau)
