"""CP, CR, CF1, OP, OR, OF1 at a threshold, their top-k variant and PU-MLC's oracle sweep."""

from __future__ import annotations


import numpy as np

from ._inputs import ArrayLike, _binary_targets, _check_threshold, _finite_scores, _probabilities, _same_shape, _to_numpy


def _f1(p: float, r: float) -> float:
    """Harmonic mean; 0 when both are 0 (no correct positive), NaN if either is NaN."""
    if np.isnan(p) or np.isnan(r):
        return float("nan")
    return 0.0 if p + r == 0 else 2.0 * p * r / (p + r)


def _metrics_from_counts(nc: np.ndarray, np_: np.ndarray, ng: np.ndarray) -> dict[str, float | int]:
    """CP/CR/CF1/OP/OR/OF1 from per-class counts (docs/protocol.md, "Metrics").

    ``np_`` is clamped to at least 1 (as in the ML-GCN / PU-MLC code) *before* both CP and
    OP use it, so a class with no predicted positive adds 0 to CP and 1 to OP's denominator.
    CP averages over all classes (an empty class adds 0); CR averages over classes with
    ``Ng > 0`` only [ours], whose count is reported.
    """
    np_ = np.maximum(np_, 1)
    has_pos = ng > 0
    cp = float(np.mean(nc / np_))
    cr = float(np.mean(nc[has_pos] / ng[has_pos])) if has_pos.any() else float("nan")
    op = float(nc.sum() / np_.sum())
    orec = float(nc.sum() / ng.sum()) if ng.sum() > 0 else float("nan")
    return {
        "CP": cp,
        "CR": cr,
        "CF1": _f1(cp, cr),
        "OP": op,
        "OR": orec,
        "OF1": _f1(op, orec),
        "num_classes_without_positives": int((~has_pos).sum()),
    }


def threshold_metrics(
    probs: ArrayLike, targets: ArrayLike, threshold: float = 0.5, *, from_logits: bool = False
) -> dict[str, float | int]:
    """Per-class and overall precision, recall and F1 at a fixed threshold.

    An entry is predicted positive iff ``p >= threshold``. Per class: ``Nc`` correct
    positives, ``Np`` predicted positives (set to 1 when 0), ``Ng`` true positives. Then::

        CP = mean_c Nc/Np          CR = mean_{c: Ng>0} Nc/Ng     CF1 = 2 CP CR / (CP + CR)
        OP = sum Nc / sum Np       OR = sum Nc / sum Ng          OF1 = 2 OP OR / (OP + OR)

    CF1 is the F1 of the averaged precision and recall, not the average of per-class F1s
    (as in the reference code). An F1 with precision + recall = 0 is 0. Classes without
    positives are left out of CR [ours] and counted in ``num_classes_without_positives``;
    if there are none at all, CR/OR and their F1s are NaN.

    Args:
        probs: ``[N, C]`` probabilities in [0, 1] (logits with ``from_logits=True``).
        targets: ground truth 0/1 of the same shape.
        threshold: decision threshold in [0, 1]; 0.5 by default, 0.75 for EM-trained models
            (EM authors' advice, docs/protocol.md, "Metrics").
        from_logits: apply a sigmoid to ``probs`` first.

    Returns:
        dict with float ``CP, CR, CF1, OP, OR, OF1`` (fractions) and int
        ``num_classes_without_positives``.
    """
    t = _check_threshold(threshold)
    p = _probabilities(probs, "probs", from_logits)
    y = _binary_targets(targets, "targets")
    _same_shape(p, y, "probs", "targets")
    pred = p >= t
    return _metrics_from_counts((pred & y).sum(axis=0), pred.sum(axis=0), y.sum(axis=0))


def oracle_threshold_metrics(
    probs: ArrayLike,
    targets: ArrayLike,
    thresholds: ArrayLike | None = None,
    *,
    from_logits: bool = False,
) -> dict[str, float]:
    """ORACLE-THRESHOLD mode: best OF1 and best CF1 over a threshold sweep, chosen separately.

    This is PU-MLC's reporting (docs/protocol.md, "Metrics" and "PU-MLC code differs from the
    paper"): the threshold is picked on the very data being evaluated and OF1 and CF1 may use different thresholds, so the numbers are
    optimistic upper bounds, not a fair test result. Use it only to compare with PU-MLC's
    tables; report :func:`threshold_metrics` at a fixed threshold otherwise.

    All thresholds are evaluated in one pass: each probability is placed among the sorted
    thresholds, a per-class histogram of those positions gives ``Np`` and ``Nc`` for every
    threshold at once by suffix sums.

    Args:
        thresholds: 1-D thresholds in [0, 1]; default ``0.01, 0.02, ..., 0.99``.

    Returns:
        dict with ``best_OF1``, ``best_OF1_threshold``, ``best_CF1``, ``best_CF1_threshold``
        (the smallest threshold on ties).
    """
    th = np.arange(1, 100) / 100.0 if thresholds is None else _to_numpy(thresholds, "thresholds").astype(np.float64)
    if th.ndim != 1 or th.size == 0:
        raise ValueError(f"thresholds must be a non-empty 1-D sequence, got shape {tuple(th.shape)}")
    if not np.all((th >= 0.0) & (th <= 1.0)):
        raise ValueError(f"thresholds must lie in [0, 1], got values from {th.min()} to {th.max()}")
    th = np.unique(th)  # sorted, duplicates removed
    p = _probabilities(probs, "probs", from_logits)
    y = _binary_targets(targets, "targets")
    _same_shape(p, y, "probs", "targets")
    n_th, c = th.size, p.shape[1]
    # position j(p) = #{thresholds <= p}; p >= th[k] iff j(p) >= k + 1
    j = np.searchsorted(th, p, side="right") + (np.arange(c) * (n_th + 1))[None, :]
    hist_all = np.bincount(j.ravel(), minlength=c * (n_th + 1)).reshape(c, n_th + 1)
    hist_pos = np.bincount(j[y], minlength=c * (n_th + 1)).reshape(c, n_th + 1)
    np_k = np.cumsum(hist_all[:, ::-1], axis=1)[:, ::-1][:, 1:]  # [C, K]: #{p >= th[k]}
    nc_k = np.cumsum(hist_pos[:, ::-1], axis=1)[:, ::-1][:, 1:]
    ng = y.sum(axis=0)
    rows = [_metrics_from_counts(nc_k[:, k], np_k[:, k], ng) for k in range(n_th)]
    of1 = np.array([r["OF1"] for r in rows])
    cf1 = np.array([r["CF1"] for r in rows])
    if np.isnan(of1).all():
        nan = float("nan")
        return {"best_OF1": nan, "best_OF1_threshold": nan, "best_CF1": nan, "best_CF1_threshold": nan}
    ko, kc = int(np.nanargmax(of1)), int(np.nanargmax(cf1))
    return {
        "best_OF1": float(of1[ko]),
        "best_OF1_threshold": float(th[ko]),
        "best_CF1": float(cf1[kc]),
        "best_CF1_threshold": float(th[kc]),
    }


def topk_metrics(
    scores: ArrayLike,
    targets: ArrayLike,
    k: int = 3,
    *,
    threshold: float | None = None,
    from_logits: bool = False,
) -> dict[str, float | int]:
    """CP/CR/CF1/OP/OR/OF1 when each example predicts its ``k`` highest-scoring classes.

    Our definition (the ML-GCN "top-3" convention): for every example the ``k`` classes
    with the largest scores are predicted positive (ties broken towards the lower class
    index), all others negative; the counts ``Nc, Np, Ng`` and the six metrics then follow
    :func:`threshold_metrics` exactly: OR = hits / #positives is the recall@k, and OP the
    precision@k ``hits / (k N)`` as long as every class is predicted somewhere (a class never
    predicted adds 1 to the clamped ``sum Np``, as in the ML-GCN code).

    Without ``threshold`` this is rank-based (logits or probabilities). ML-GCN's code also
    drops a top-k class whose probability is below 0.5; pass ``threshold=0.5`` (with
    probabilities, or logits and ``from_logits=True``) to reproduce that.
    """
    s = _finite_scores(scores, "scores")
    y = _binary_targets(targets, "targets")
    _same_shape(s, y, "scores", "targets")
    c = s.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= c:
        raise ValueError(f"k must be an integer between 1 and the number of classes ({c}), got {k!r}")
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    pred = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(pred, top, True, axis=1)
    if threshold is not None:
        pred &= _probabilities(s, "scores", from_logits) >= _check_threshold(threshold)
    return _metrics_from_counts((pred & y).sum(axis=0), pred.sum(axis=0), y.sum(axis=0))


# --------------------------------------------------------------------------- pseudo-labels


