"""Average precision and mAP, equal to scikit-learn's per-class loop (docs/protocol.md, Metrics)."""

from __future__ import annotations


import numpy as np

from ._inputs import ArrayLike, _binary_targets, _finite_scores, _same_shape


#: Entries (examples x classes) that ``average_precision`` sorts at once, in whole columns
#: (at least one). Its working arrays take about 30 bytes per entry, so ~30 MB whatever C is
#: (30 bytes per example once N alone is larger); chunks of about 1M entries also sort as
#: fast per entry as the whole COCO test matrix does (measured).
_SORT_CHUNK_ENTRIES = 1 << 20

_MAGNITUDE = np.int64(0x7FFF_FFFF_FFFF_FFFF)  # all bits of a float64 but its sign
_TOP_BIT = np.uint64(1 << 63)
_ONE = np.uint64(1)


def _sorted_keys(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row of ``s`` ascending; return integer keys in that order and the positives.

    ``s`` is a ``[w, N]`` float64 array owned by the caller (overwritten: its memory becomes
    the keys) without ``-0.0``; ``y`` the ``[w, N]`` bool labels. Returns the flat sorted
    keys, equal exactly where the scores tie, and the flat positions of the positives in
    that order. A float64's bits read as an integer are ordered like the float once negative
    numbers have their magnitude negated; minus the row minimum they are offsets in
    ``[0, 2**64)``. When every row's offsets stay below ``2**63`` (any row of one sign, or
    all ``|s| < 2``: probabilities) or are all even (scores that came from float32), the
    label fits into bit 0, and one plain integer sort of ``offset << 1 | label`` (or
    ``offset | label``) orders scores and labels together: about twice as fast as an
    argsort followed by two gathers, which remains the general case.
    """
    keys = s.view(np.int64)
    low = keys.min(axis=1, keepdims=True)
    if low.min() < 0:  # negative scores: sign-magnitude bits -> two's complement order
        negative = keys < 0
        keys &= _MAGNITUDE
        np.negative(keys, out=keys, where=negative)
        low = keys.min(axis=1, keepdims=True)
    offsets = keys.view(np.uint64)
    offsets -= low.view(np.uint64)  # wraps modulo 2**64 onto the exact difference
    if (offsets.max(axis=1) < _TOP_BIT).all():
        offsets <<= _ONE
    elif (offsets & _ONE).any():  # both signs, |s| >= 2 and full float64 precision
        order = np.argsort(offsets, axis=1)  # ties may come in any order: groups are summed
        order += np.arange(0, offsets.size, offsets.shape[1])[:, None]
        order = order.ravel()
        return np.take(offsets.ravel(), order), np.flatnonzero(np.take(y.ravel(), order))
    offsets |= y
    offsets.sort(axis=1)
    offsets = offsets.ravel()
    positives = np.flatnonzero(offsets & _ONE)
    offsets >>= _ONE
    return offsets, positives


def _positive_ranks(keys: np.ndarray, positives: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per positive: its row, how many entries of its row score at or above it, how many positives do.

    ``keys`` holds ``w`` rows of ``n`` ascending sort keys back to back, ``positives`` the
    flat positions of the positives among them (ascending). A positive's tie group begins at
    the first entry with its key; everything from there to the row's end scores at or above
    it, and so do the positives from the group's first positive to the row's last one. The
    per-class AP (:func:`_tie_group_sums`) and the per-example ranking metrics
    (:mod:`~spmlkit.metrics.example_based`, rows = examples) are both built from these counts.
    """
    w = keys.size // n
    new_group = np.empty(keys.size, dtype=bool)
    new_group[0] = True
    np.not_equal(keys[1:], keys[:-1], out=new_group[1:])
    new_group[::n] = True  # every row starts a group
    group = np.cumsum(new_group, dtype=np.int32 if keys.size < 2**31 else np.int64)
    start = np.flatnonzero(new_group)[group[positives] - 1]
    row = positives // n
    at_or_above = (row + 1) * n - start
    rank = np.arange(positives.size)  # index among the chunk's positives
    leads = np.ones(positives.size, dtype=bool)  # first positive of its tie group
    leads[1:] = start[1:] != start[:-1]
    first_of_group = np.maximum.accumulate(np.where(leads, rank, 0))
    row_end = np.cumsum(np.bincount(row, minlength=w))  # one past each row's last positive
    positives_at_or_above = row_end[row] - first_of_group
    return row, at_or_above, positives_at_or_above


def _tie_group_sums(keys: np.ndarray, positives: np.ndarray, n: int) -> np.ndarray:
    """Per row, the sum over its positives of the precision at that positive's score
    (counts from :func:`_positive_ranks`)."""
    row, at_or_above, positives_at_or_above = _positive_ranks(keys, positives, n)
    return np.bincount(row, weights=positives_at_or_above / at_or_above, minlength=keys.size // n)


def _ap_columns(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Sum over each column's positives of the precision at that positive's score.

    With ``P(v) = #{positives with score >= v} / #{examples with score >= v}`` the step-wise
    AP of scikit-learn is ``AP = (1/Npos) * sum_{positives i} P(s_i)``: its thresholds are the
    distinct scores, recall rises by ``(#positives at that score)/Npos`` at each of them and
    precision is taken with the whole tie group included. Vectorised over classes: chunks of
    whole columns are transposed to ``[classes, N]`` rows and every row is sorted ascending
    in one call, with its labels carried along (:func:`_sorted_keys`). In sorted order a
    tie group is a run of equal keys, found by one comparison of neighbours; the examples at
    or above a positive's score are those from its group's first entry to the row's end,
    the positives at or above it those from the group's first positive on, so the
    precision at every positive comes from two index differences and one ``bincount`` sums
    it per class (:func:`_tie_group_sums`). All counts are exact integers and each
    precision one float64 division, so only the order of the final sum differs from
    scikit-learn (~1e-16). No Python loop over classes; memory is bounded by the chunk size
    (``_SORT_CHUNK_ENTRIES``). Returns ``[C]`` sums (divide by ``Npos``).
    """
    n, c = scores.shape
    width = max(1, _SORT_CHUNK_ENTRIES // n)
    sums = np.empty(c)
    for lo in range(0, c, width):
        hi = min(c, lo + width)
        # a fresh C-ordered copy, rows = classes; adding +0.0 turns -0.0 into +0.0, which
        # ties with it as a score but not as a bit pattern
        s = np.add(scores[:, lo:hi].T, 0.0, order="C")
        y = np.ascontiguousarray(targets[:, lo:hi].T)
        keys, positives = _sorted_keys(s, y)
        sums[lo:hi] = _tie_group_sums(keys, positives, n)
    return sums


def average_precision(scores: ArrayLike, targets: ArrayLike, *, empty: str = "zero") -> np.ndarray:
    """Per-class average precision, equal to scikit-learn's ``average_precision_score``.

    For class ``c`` with thresholds at the distinct scores ``v_1 > v_2 > ...``::

        AP_c = sum_k (R_k - R_{k-1}) * P_k,   P_k = TP(s >= v_k) / #(s >= v_k),
                                             R_k = TP(s >= v_k) / Npos_c,   R_0 = 0

    i.e. the step-wise area under the precision-recall curve with tied scores grouped
    (docs/protocol.md, "Metrics"; base protocol). Rank-based, so probabilities or logits give the same
    result. Fully vectorised over classes (see ``_ap_columns``); at COCO test size it is
    many times faster than a per-class scikit-learn loop.

    Args:
        scores: ``[N, C]`` (or ``[N]``) finite probabilities or logits.
        targets: ground truth of the same shape, values 0/1 or bool.
        empty: what a class without positives gets. ``"zero"`` (reference convention,
            docs/protocol.md, "AP with ties and classes without positives"): AP = 0, and it
            stays in the mean. ``"nan"``: NaN, so a ``nanmean`` skips it; see also :func:`mean_average_precision` ``exclude_empty``.

    Returns:
        float64 array ``[C]`` of fractions in [0, 1].
    """
    if empty not in ("zero", "nan"):
        hint = " (to leave empty classes out of the mean use mean_average_precision(..., exclude_empty=True))"
        raise ValueError(f"empty must be 'zero' or 'nan', got {empty!r}" + (hint if empty == "exclude" else ""))
    s = _finite_scores(scores, "scores")
    y = _binary_targets(targets, "targets")
    _same_shape(s, y, "scores", "targets")
    n_pos = y.sum(axis=0)
    sums = _ap_columns(s, y)
    ap = sums / np.maximum(n_pos, 1)
    ap[n_pos == 0] = 0.0 if empty == "zero" else np.nan
    return ap


def mean_average_precision(scores: ArrayLike, targets: ArrayLike, *, exclude_empty: bool = False) -> float:
    """Mean over classes of :func:`average_precision`, a fraction in [0, 1].

    ``exclude_empty=False`` is the reference protocol: classes without positives count as 0
    (this can lower mAP on small validation subsets; log them with :func:`empty_classes`).
    ``exclude_empty=True`` averages over classes with at least one positive only, and
    returns NaN when there is none.
    """
    ap = average_precision(scores, targets, empty="nan" if exclude_empty else "zero")
    if exclude_empty:
        kept = ap[~np.isnan(ap)]
        return float(kept.mean()) if kept.size else float("nan")
    return float(ap.mean())


def empty_classes(targets: ArrayLike) -> np.ndarray:
    """Indices of the classes with no positive in ``targets`` (int64 array), to log them."""
    y = _binary_targets(targets, "targets")
    return np.flatnonzero(~y.any(axis=0))


# --------------------------------------------------------------------------- threshold metrics


