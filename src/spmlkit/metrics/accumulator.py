"""A torchmetrics-style accumulator: update per batch, compute once."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import ArrayLike, _binary_targets, _check_threshold, _finite_scores, _probabilities, _same_shape
from .ranking import average_precision, empty_classes
from .thresholded import threshold_metrics


class MetricAccumulator:
    """Collects batches of scores and targets and computes mAP plus threshold metrics.

    Like a torchmetrics metric: ``update`` per batch, ``compute`` at the end, ``reset`` to
    start over. AP is not decomposable over batches, so the batches are kept (as float64
    and bool numpy copies) and the metrics are computed once on their concatenation.

    Args:
        threshold: decision threshold of the threshold metrics.
        from_logits: the scores are logits (sigmoid applied for the threshold metrics;
            AP is rank-based and unaffected).
        exclude_empty: leave classes without positives out of mAP (default: they count 0).
    """

    def __init__(self, threshold: float = 0.5, *, from_logits: bool = False, exclude_empty: bool = False) -> None:
        self.threshold = _check_threshold(threshold)
        self.from_logits = from_logits
        self.exclude_empty = exclude_empty
        self._scores: list[np.ndarray] = []
        self._targets: list[np.ndarray] = []

    def reset(self) -> None:
        """Forget every batch."""
        self._scores.clear()
        self._targets.clear()

    @property
    def num_examples(self) -> int:
        return sum(s.shape[0] for s in self._scores)

    def update(self, scores: ArrayLike, targets: ArrayLike) -> None:
        """Add one batch (``[B, C]`` scores and 0/1 targets); checked here, at the boundary."""
        s = (_finite_scores(scores, "scores") if self.from_logits else _probabilities(scores, "scores", False)).copy()
        y = _binary_targets(targets, "targets").copy()
        _same_shape(s, y, "scores", "targets")
        if self._scores and s.shape[1] != self._scores[0].shape[1]:
            raise ValueError(
                f"batch has {s.shape[1]} classes but earlier batches had {self._scores[0].shape[1]}; "
                "call reset() before evaluating another label set"
            )
        self._scores.append(s)
        self._targets.append(y)

    def compute(self) -> dict[str, Any]:
        """``mAP`` (float), ``AP`` ([C] array), ``empty_classes`` (indices) and the metrics
        of :func:`threshold_metrics` over everything seen since the last reset."""
        if not self._scores:
            raise ValueError("MetricAccumulator.compute() called before any update()")
        s = np.concatenate(self._scores)
        y = np.concatenate(self._targets)
        ap = average_precision(s, y, empty="nan" if self.exclude_empty else "zero")
        kept = ap[~np.isnan(ap)]
        out: dict[str, Any] = {
            "mAP": float(kept.mean()) if kept.size else float("nan"),
            "AP": ap,
            "empty_classes": empty_classes(y),
        }
        out.update(threshold_metrics(s, y, self.threshold, from_logits=self.from_logits))
        return out

