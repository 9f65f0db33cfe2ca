"""The example-based metrics as the SMILE and CRISP papers compute them (docs/protocol.md, "Metric conventions").

SMILE (Xu et al., NeurIPS 2022) evaluates its tables with its own code (``metrics.py`` of its
public repository), and CRISP (arXiv 2309.13886) reports the same five metrics citing SMILE. Their
numbers differ from spmlkit's (:mod:`spmlkit.metrics.example_based`) in four ways, and a
comparison with their tables has to use their conventions, so spmlkit computes both and says which
is which (spmlkit's stay the default everywhere; every run records these beside them as
``smile.<name>``):

- **coverage is divided by the number of labels** C, and rows without a positive stay in the
  mean: the code sums each labelled row's depth, divides by all N rows and subtracts 1, so such a
  row counts as a depth of -1 (spmlkit leaves it out; the unscaled value is spmlkit's ``coverage``);
- **one-error averages over every row**, a row without a positive counting as an error
  (spmlkit leaves it out);
- **ties are broken by position**, the earlier column ranking higher (the code sorts with
  ``torch.sort``, whose order among equal scores is not specified; spmlkit counts a tie against
  the model). On scores without ties the two agree;
- **the Hamming loss decides** ``p > 0.5``, strictly (spmlkit: ``p >= t``).

The ranking loss and the average precision average over the same rows as spmlkit's (rows with a
positive and a negative; rows with a positive).
"""

from __future__ import annotations

import numpy as np

from ._inputs import ArrayLike, _binary_targets, _finite_scores, _same_shape

__all__ = ["SMILE_METRICS", "convention_columns", "smile_metrics"]

#: the names :func:`smile_metrics` returns, in the order of the papers' tables
SMILE_METRICS = ("ranking_loss", "example_ap", "coverage", "hamming_loss", "one_error")


def smile_metrics(scores: ArrayLike, targets: ArrayLike, *, threshold: float = 0.5) -> dict[str, float]:
    """Ranking loss, average precision, coverage / C, Hamming loss and one-error, SMILE's way.

    ``scores`` are probabilities (the Hamming loss compares them with ``threshold``, strictly);
    the ranking metrics depend on their order only. ``targets`` are 0/1. Every row's labels are
    ranked by a stable sort of decreasing score, so tied labels keep their column order.
    """
    s = _finite_scores(scores, "scores")
    y = _binary_targets(targets, "targets").astype(bool)
    _same_shape(s, y, "scores", "targets")
    n, c = s.shape
    order = np.argsort(-s, axis=1, kind="stable")
    position = np.empty_like(order)  # 0-based place of each label in its row's ranking
    np.put_along_axis(position, order, np.arange(c)[None, :].repeat(n, axis=0), axis=1)
    m = y.sum(axis=1)
    labelled = m > 0
    # ranking loss: the negatives placed above each positive, over (#pos x #neg), rows with both
    pos_place_sum = np.where(y, position, 0).sum(axis=1)
    both = labelled & (m < c)
    wrong_pairs = pos_place_sum - m * (m - 1) / 2.0
    ranking_loss = float((wrong_pairs[both] / (m[both] * (c - m[both]))).mean()) if both.any() else float("nan")
    # average precision: at the j-th highest positive (1-based), j / (its place + 1)
    places = np.sort(np.where(y, position, c), axis=1)  # positives first, in ranking order
    j = np.arange(1, c + 1)[None, :]
    hits = np.where(places < c, j / (places + 1.0), 0.0).sum(axis=1)
    example_ap = float((hits[labelled] / m[labelled]).mean()) if labelled.any() else float("nan")
    # coverage: depth of the lowest positive, summed over labelled rows, over all rows, minus 1, over C
    deepest = np.where(y, position, -1).max(axis=1) + 1
    coverage = float((deepest[labelled].sum() / n - 1.0) / c)
    one_error = float((~y[np.arange(n), np.argmax(s, axis=1)]).mean())
    hamming = float(((s > threshold) != y).mean())
    return {"ranking_loss": ranking_loss, "example_ap": example_ap, "coverage": coverage, "hamming_loss": hamming,
            "one_error": one_error}


def convention_columns(scores: ArrayLike, targets: ArrayLike) -> dict[str, float]:
    """:func:`smile_metrics` under the names a run's record gives them (``smile.coverage``, ...,
    ``smile.hamming_loss@0.5``): the columns of the papers' tables on MULAN's sets, beside spmlkit's
    own. The Hamming loss decides ``p > 0.5`` whatever the method's threshold, as that code does."""
    values = smile_metrics(scores, targets)
    return {f"smile.{k}" + ("@0.5" if k == "hamming_loss" else ""): v for k, v in values.items()}
