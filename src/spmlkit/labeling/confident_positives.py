"""MIME's pseudo-labels: every confident prediction becomes a positive, for good.

Liu, Xu, Lv, Geng, "Revisiting Pseudo-Label for Single-Positive Multi-Label Learning", ICML 2023
(docs/methods.md, "mime"). After the training phase of every epoch from ``start_epoch`` on, each
entry of the training split whose predicted probability exceeds ``threshold`` is labelled positive
from then on; earlier pseudo-labels are never withdrawn, so the set only grows. The loss then treats
them as it treats the observed positives (the label state keeps them apart, as corrections).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..labels import LabelState
from .apl import as_probabilities
from .base import LabelingAlgorithm, Probabilities, check_epoch, round_record

__all__ = ["ConfidentPositives"]


class ConfidentPositives(LabelingAlgorithm):
    """After epoch ``e >= start_epoch`` (1-indexed): every unobserved entry with ``p > threshold``
    becomes a permanent positive (``Kind.CORRECTED``, target 1).

    The comparison is strict, as the code's ``preds > theta``. Entries that already carry a label
    (observed, or made positive by an earlier round) are left as they are: the code adds 1 to every
    confident entry and clips at 1, which leaves a positive positive. The code makes no
    pseudo-labels for the rows of its last, shorter batch of the pass, which its loader drops, and
    reads predictions made with flips and sampled codes; spmlkit labels every row from the
    predictions of the between-epoch pass (eval mode, no augmentation) [ours].

    Args:
        threshold: probability above which an entry becomes positive (the code's θ: 0.95), in [0, 1).
        start_epoch: the first epoch after which pseudo-labels are made (the code's warm-up: 2 on VOC,
            COCO and NUS-WIDE, 5 on CUB).
    """

    def __init__(self, threshold: float = 0.95, start_epoch: int = 2) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or not 0.0 <= float(threshold) < 1.0:
            raise ValueError(f"ConfidentPositives threshold must be a probability in [0, 1), got {threshold!r}")
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, (int, np.integer)) or start_epoch < 1:
            raise ValueError(f"ConfidentPositives start_epoch must be a 1-indexed epoch (integer >= 1), "
                             f"got {start_epoch!r}")
        self.threshold = float(threshold)
        self.start_epoch = int(start_epoch)

    def is_active(self, epoch: int) -> bool:
        return epoch >= self.start_epoch

    def step(self, probs: Probabilities, state: LabelState, epoch: int) -> dict[str, Any]:
        """The round after ``epoch``: ``{"epoch", "active", "positives", "positives_per_class"}``,
        ``positives`` counting the entries this round made positive."""
        epoch = check_epoch("ConfidentPositives.step", epoch)
        if not self.is_active(epoch):
            return round_record(epoch, "positives", None, state.num_classes)
        p = as_probabilities(probs, state, where="ConfidentPositives.step")
        rows, cols = torch.nonzero((p > self.threshold) & state.unobserved(), as_tuple=True)
        if rows.numel():
            state.add_corrections(rows, cols, epoch)
        return round_record(epoch, "positives", cols, state.num_classes)

    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters only: the pseudo-labels live in the label state."""
        return {"threshold": self.threshold, "start_epoch": self.start_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state != self.state_dict():
            raise ValueError(f"ConfidentPositives checkpoint settings {state} differ from this object's "
                             f"{self.state_dict()}; resume with the original settings")

    def __repr__(self) -> str:
        return f"ConfidentPositives(threshold={self.threshold}, start_epoch={self.start_epoch})"
