"""Average precision and mAP, equal to scikit-learn's per-class loop (docs/protocol.md, Metrics)."""

from __future__ import annotations


import numpy as np

from ._inputs import ArrayLike, _MAX_HISTOGRAM_BINS, _as_matrix, _binary_targets, _check_threshold, _finite_scores, _probabilities, _same_shape, _sigmoid, _to_numpy  # noqa: F401


def _ap_columns(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Sum over each column's positives of the precision at that positive's score.

    With ``P(v) = #{positives with score >= v} / #{examples with score >= v}`` the step-wise
    AP of scikit-learn is ``AP = (1/Npos) * sum_{positives i} P(s_i)``: its thresholds are the
    distinct scores, recall rises by ``(#positives at that score)/Npos`` at each of them and
    precision is taken with the whole tie group included. So AP needs, for every positive,
    two counts of entries at or above its score, not a full ranking.

    The counts are found without sorting the ``N x C`` matrix (sorting it costs more than
    the rest put together). Each column is cut into ``B`` equal-width buckets by
    ``floor((s - min) / (max - min) * B)``; every step of that formula is a correctly
    rounded, monotone float operation, so bucket order never contradicts score order and
    tied scores share a bucket. Entries in higher buckets are counted from a histogram (one
    ``bincount``). Inside a bucket only two cases remain: it holds a single distinct score
    (common with rounded or saturated scores), then its counts are exact already; or it is
    mixed, then its entries are among the few that get sorted exactly. Returns ``[C]`` sums
    (divide by ``Npos``).
    """
    n, c = scores.shape
    n_buckets = max(1, min(n, _MAX_HISTOGRAM_BINS // c))

    # class-major copies ([C, N]): the histogram below is then filled class by class
    s_cm = np.ascontiguousarray(scores.T)
    y_cm = np.ascontiguousarray(targets.T).ravel()
    lo = s_cm.min(axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        span = s_cm.max(axis=1, keepdims=True) - lo
    if np.isfinite(span).all():
        frac = s_cm - lo
    else:  # max - min overflowed (scores near +-1.8e308): halve first, still monotone
        frac = s_cm * 0.5
        lo = lo * 0.5
        span = frac.max(axis=1, keepdims=True) - lo
        frac -= lo
    frac /= np.where(span > 0, span, 1.0)
    frac *= n_buckets
    key = frac.astype(np.int64)
    del frac
    np.minimum(key, n_buckets - 1, out=key)
    key += (np.arange(c, dtype=np.int64) * n_buckets)[:, None]  # (class, bucket) -> one bin id
    key = key.ravel()
    s_cm = s_cm.ravel()

    hist_pos = np.bincount(key[y_cm], minlength=c * n_buckets)
    pos_bin = hist_pos > 0
    cum_pos = np.cumsum(hist_pos, out=hist_pos)
    cum_all = np.bincount(key, minlength=c * n_buckets)
    cum_all = np.cumsum(cum_all, out=cum_all)

    def at_or_above(cum: np.ndarray, bins: np.ndarray, strictly: bool = False) -> np.ndarray:
        """Entries of each bin's class in that bucket (unless ``strictly``) or a higher one.

        ``cum`` is the flat cumulative count over (class, bucket) bins, so the class's
        count minus everything up to the bucket (earlier classes included) is what remains.
        """
        class_end = cum[(bins // n_buckets + 1) * n_buckets - 1]
        if strictly:
            return class_end - cum[bins]
        return class_end - np.where(bins > 0, cum[bins - 1], 0)

    mixed = pos_bin  # buckets whose members get ranked exactly
    in_mixed = pos_bin[key]
    if np.count_nonzero(in_mixed) > key.size // 16:
        # Many entries share buckets with positives: heavy ties (e.g. rounded scores). Find
        # the buckets holding more than one distinct score; only those need sorting.
        representative = np.empty(c * n_buckets)
        representative[key] = s_cm  # some member's score, per bucket
        mixed = np.zeros(c * n_buckets, dtype=bool)
        mixed[key[s_cm != representative[key]]] = True
        mixed &= pos_bin
        in_mixed = mixed[key]

    # single-score buckets: all members tie, so each positive there counts the whole bucket
    pure = np.flatnonzero(pos_bin & ~mixed)
    pos_ge = at_or_above(cum_pos, pure)
    pos_in = pos_ge - at_or_above(cum_pos, pure, strictly=True)
    weights = pos_in * (pos_ge / at_or_above(cum_all, pure))
    sums = np.bincount(pure // n_buckets, weights=weights, minlength=c).astype(np.float64)

    # mixed buckets: rank their members by (class, score), which orders buckets too
    flat = np.flatnonzero(in_mixed)
    if flat.size:
        order = np.argsort(s_cm[flat])  # by score; then stably by class (radix sort on int16)
        cls_dtype = np.int16 if c <= np.iinfo(np.int16).max else np.int64
        flat = flat[order]
        flat = flat[np.argsort((flat // n).astype(cls_dtype), kind="stable")]
        ck, cv, ct = key[flat], s_cm[flat], y_cm[flat]
        m = ck.size
        new_bin = np.ones(m, dtype=bool)
        new_bin[1:] = ck[1:] != ck[:-1]
        new_tie = new_bin.copy()
        new_tie[1:] |= cv[1:] != cv[:-1]
        tie_start = np.maximum.accumulate(np.where(new_tie, np.arange(m), 0))
        bin_end = np.append(np.flatnonzero(new_bin)[1:], m)[np.cumsum(new_bin) - 1]
        cum_t = np.concatenate(([0], np.cumsum(ct)))
        k = ck[ct]  # evaluate at the positives
        n_ge = at_or_above(cum_all, k, strictly=True) + (bin_end - tie_start)[ct]
        p_ge = at_or_above(cum_pos, k, strictly=True) + (cum_t[bin_end] - cum_t[tie_start])[ct]
        sums += np.bincount(k // n_buckets, weights=p_ge / n_ge, minlength=c)
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


