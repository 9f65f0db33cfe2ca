"""The metrics that papers on MULAN-style data report: ranking metrics per example, and F1 three ways.

docs/protocol.md, "Metrics of the field", states every definition and the two conventions that
differ between scikit-learn and MULAN; in short:

- **Ranking metrics** judge where each example's positive labels land when its labels are
  sorted by score: ``ranking_loss``, ``one_error``, ``coverage`` and
  ``example_average_precision``. A row without a positive label has nothing to rank, so it is
  left out of the mean (and ``ranking_loss`` also leaves out a row whose labels are all
  positive: it has no pair to order). scikit-learn and MULAN instead give such rows a fixed
  value that does not depend on the model and average it in, which moves every method's number
  by the same amount on data sets with many such rows. When no row qualifies the result is NaN.
- **Tied scores count against the model**, as in scikit-learn: a label scoring the same as
  another is taken to be ranked below it. MULAN breaks ties by the order of the columns, so its
  value on tied scores depends on how the labels happen to be ordered; on scores without ties
  the two agree.
- **Decisions** (``hamming_loss`` and the F1s) use ``p >= t`` with one threshold or one per
  class, like :func:`spmlkit.metrics.threshold_metrics`. Where an F1 has nothing to find and
  nothing was predicted (an empty row for ``example_f1``, an empty class for ``macro_f1``), it
  is 1: the answer was exactly right (MULAN's rule; scikit-learn's ``zero_division=1.0``).

``micro_f1`` differs from the ``OF1`` of :func:`~spmlkit.metrics.threshold_metrics` only where a
class has no predicted positive (OF1's ML-GCN counts raise its ``Np`` to 1), and ``macro_f1``
(the mean of per-class F1s) is not ``CF1`` (the F1 of the mean precision and mean recall).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import ArrayLike, _binary_targets, _check_threshold, _finite_scores, _probabilities, _same_shape
from .ranking import _positive_ranks, _sorted_keys
from .threshold_selection import _f1_from, _thresholds_vector

__all__ = [
    "coverage",
    "decision_metrics",
    "example_average_precision",
    "example_f1",
    "hamming_loss",
    "macro_f1",
    "micro_f1",
    "one_error",
    "ranking_loss",
    "ranking_metrics",
]


# --------------------------------------------------------------------------- ranking metrics


#: rows x labels that one chunk of :func:`ranking_metrics` sorts at once (at least one row): its
#: working arrays take about 30 bytes per entry, so ~30 MB however large the test set is
_CHUNK_ENTRIES = 1 << 20


def _row_values(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[4, n]``: per row, its ranking loss, one-error, coverage and average precision; and
    ``[n]``: each row's number of positives (rows without one get 0 everywhere; the caller
    leaves them out).

    Each row is sorted by score once, with its labels carried along, by the integer-key sort
    behind mAP (:func:`~spmlkit.metrics.ranking._sorted_keys`); then, per positive, the labels
    and the positives scoring at or above it (:func:`~spmlkit.metrics.ranking._positive_ranks`:
    a whole tie group counts as above, so a tie is never resolved in the model's favour). All
    that follows is arithmetic on the positives alone: no Python loop over rows.
    """
    n, c = s.shape
    keys, positives = _sorted_keys(np.add(s, 0.0), np.ascontiguousarray(y))  # +0.0: a fresh copy, -0.0 -> 0.0
    row, above, pos_above = _positive_ranks(keys, positives, c)
    n_pos = np.bincount(row, minlength=n)
    out = np.zeros((4, n))
    if not positives.size:
        return out, n_pos
    neg_above = above - pos_above
    out[0] = np.bincount(row, weights=neg_above, minlength=n) / np.maximum(n_pos * (c - n_pos), 1)
    out[3] = np.bincount(row, weights=pos_above / above, minlength=n) / np.maximum(n_pos, 1)
    # positives come in ascending score order within a row: its first is the lowest-scoring one
    # (coverage), its last the highest, which a negative outranks exactly when the top is negative
    first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    last = np.r_[first[1:] - 1, row.size - 1]
    out[1, row[last]] = neg_above[last] > 0
    out[2, row[first]] = above[first] - 1.0
    return out, n_pos


def ranking_metrics(scores: ArrayLike, targets: ArrayLike) -> dict[str, float]:
    """``ranking_loss``, ``one_error``, ``coverage`` and ``example_ap`` from one sort of the rows.

    The four functions below each sort the rows again; a caller that wants all four (the
    trainer's test evaluation) sorts once here. Rank-based: probabilities or logits alike.
    """
    s = _finite_scores(scores, "scores")
    y = _binary_targets(targets, "targets")
    _same_shape(s, y, "scores", "targets")
    n, c = s.shape
    rows = max(1, _CHUNK_ENTRIES // c)
    parts = [_row_values(s[lo:lo + rows], y[lo:lo + rows]) for lo in range(0, n, rows)]
    values = np.concatenate([v for v, _ in parts], axis=1)
    n_pos = np.concatenate([k for _, k in parts])
    has_pos = n_pos > 0
    kept = (has_pos & (n_pos < c), has_pos, has_pos, has_pos)  # the ranking loss also needs a negative
    names = ("ranking_loss", "one_error", "coverage", "example_ap")
    return {name: float(v[m].mean()) if m.any() else float("nan") for name, v, m in zip(names, values, kept)}


def ranking_loss(scores: ArrayLike, targets: ArrayLike) -> float:
    """Mean over rows of the share of (positive, negative) label pairs ordered wrongly.

    A pair is wrong when the positive scores at most the negative (a tie is wrong), divided by
    ``#positives x #negatives`` of the row. Rows with no positive or no negative are left out.
    Equals scikit-learn's ``label_ranking_loss`` on the rows kept (lower is better).
    """
    return ranking_metrics(scores, targets)["ranking_loss"]


def one_error(scores: ArrayLike, targets: ArrayLike) -> float:
    """Share of rows whose top-scoring label is not positive (lower is better).

    Ties count against the model: a row is an error when any label sharing the top score is
    negative. Rows without a positive are left out.
    """
    return ranking_metrics(scores, targets)["one_error"]


def coverage(scores: ArrayLike, targets: ArrayLike) -> float:
    """How far down each row's ranking one must go to reach all its positives, minus 1.

    MULAN's coverage: the rank of the lowest-ranked positive (1 = top; a tie takes the lowest
    rank of its group), minus 1, averaged over rows with a positive. This is scikit-learn's
    ``coverage_error`` minus 1 on those rows (lower is better; 0 when every positive is on top).
    """
    return ranking_metrics(scores, targets)["coverage"]


def example_average_precision(scores: ArrayLike, targets: ArrayLike) -> float:
    """Mean over rows of the average, over the row's positives, of the precision at each one.

    For a positive label l: ``#{positives scoring >= s_l} / #{labels scoring >= s_l}``. This is
    MULAN's "Average Precision" and scikit-learn's ``label_ranking_average_precision_score``
    on the rows with a positive (the only rows kept). Not the per-class AP behind mAP.
    """
    return ranking_metrics(scores, targets)["example_ap"]


# --------------------------------------------------------------------------- decisions


def _decisions(probs: ArrayLike, targets: ArrayLike, thresholds: Any, from_logits: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    p = _probabilities(probs, "probs", from_logits)
    y = _binary_targets(targets, "targets")
    _same_shape(p, y, "probs", "targets")
    if np.ndim(thresholds) == 0:  # a scalar: its own message, without a class number
        thresholds = _check_threshold(thresholds)
    return p >= _thresholds_vector(thresholds, p.shape[1])[None, :], y


def _f1_or_one(correct: np.ndarray, predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
    """F1 = 2 Nc / (Np + Ng); 1 where nothing was to be found and nothing was predicted."""
    return np.where(predicted + true == 0, 1.0, _f1_from(correct, predicted, true))


def decision_metrics(probs: ArrayLike, targets: ArrayLike, thresholds: Any = 0.5, *,
                     from_logits: bool = False) -> dict[str, float]:
    """``hamming_loss``, ``example_f1``, ``micro_f1`` and ``macro_f1`` at one decision.

    An entry is predicted positive iff ``p >= t``; ``thresholds`` is one value in [0, 1] or one
    per class (``[C]``, e.g. the per-class thresholds selected on validation).
    """
    pred, y = _decisions(probs, targets, thresholds, from_logits)
    hit = pred & y
    row_c, row_p, row_g = hit.sum(axis=1), pred.sum(axis=1), y.sum(axis=1)
    col_c, col_p, col_g = hit.sum(axis=0), pred.sum(axis=0), y.sum(axis=0)
    return {
        "hamming_loss": float(np.count_nonzero(pred != y) / y.size),
        "example_f1": float(_f1_or_one(row_c, row_p, row_g).mean()),
        "micro_f1": float(_f1_or_one(col_c.sum(), col_p.sum(), col_g.sum())),
        "macro_f1": float(_f1_or_one(col_c, col_p, col_g).mean()),
    }


def hamming_loss(probs: ArrayLike, targets: ArrayLike, thresholds: Any = 0.5, *, from_logits: bool = False) -> float:
    """Share of all (example, label) entries decided wrongly at ``p >= t`` (lower is better).

    Equals scikit-learn's ``hamming_loss`` on the thresholded predictions, and MULAN's.
    """
    return decision_metrics(probs, targets, thresholds, from_logits=from_logits)["hamming_loss"]


def example_f1(probs: ArrayLike, targets: ArrayLike, thresholds: Any = 0.5, *, from_logits: bool = False) -> float:
    """Mean over rows of the row's F1 between its predicted and its true label sets.

    A row with no positive and no prediction scores 1. Equals scikit-learn's
    ``f1_score(average="samples", zero_division=1.0)``.
    """
    return decision_metrics(probs, targets, thresholds, from_logits=from_logits)["example_f1"]


def micro_f1(probs: ArrayLike, targets: ArrayLike, thresholds: Any = 0.5, *, from_logits: bool = False) -> float:
    """F1 of all entries pooled: ``2 sum Nc / (sum Np + sum Ng)``.

    Equals scikit-learn's ``f1_score(average="micro")`` (1 when there is nothing to find and
    nothing is predicted).
    """
    return decision_metrics(probs, targets, thresholds, from_logits=from_logits)["micro_f1"]


def macro_f1(probs: ArrayLike, targets: ArrayLike, thresholds: Any = 0.5, *, from_logits: bool = False) -> float:
    """Mean over classes of each class's F1; a class with no positive and no prediction scores 1.

    Equals scikit-learn's ``f1_score(average="macro", zero_division=1.0)``.
    """
    return decision_metrics(probs, targets, thresholds, from_logits=from_logits)["macro_f1"]
