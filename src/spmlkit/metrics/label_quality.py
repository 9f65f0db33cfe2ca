"""How good the labels a method made are: pseudo-label accuracy, and the Wasserstein
distance between predictions on unobserved true positives and true negatives."""

from __future__ import annotations


import numpy as np

from ._inputs import ArrayLike, _as_matrix, _binary_targets, _probabilities, _same_shape


def pseudo_label_accuracy(mask: ArrayLike, pseudo_values: ArrayLike, truth: ArrayLike) -> float:
    """Fraction of pseudo-labelled entries whose hard value matches the ground truth.

    ``accuracy = #{mask, [v >= 0.5] == y*} / #{mask}`` (EM Tables 4 and 7). Soft values are
    hardened at 0.5, hard 0/1 values pass through; for APL's soft negatives (targets below
    0.5) this is ``#{M = 1, y* = 0} / #{M = 1}``. Entries outside the mask are ignored,
    whatever they hold. NaN when nothing is pseudo-labelled.
    """
    m = _as_matrix(mask, "mask")
    if m.dtype != bool:
        bad = (m != 0) & (m != 1)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise ValueError(f"mask must be boolean (or 0/1), found {m[r, c]} at [{r}, {c}]")
        m = m == 1
    v = _as_matrix(pseudo_values, "pseudo_values").astype(np.float64, copy=False)
    y = _binary_targets(truth, "truth")
    _same_shape(m, v, "mask", "pseudo_values")
    _same_shape(m, y, "mask", "truth")
    vals = v[m]
    bad = ~((vals >= 0.0) & (vals <= 1.0))  # also catches NaN
    if bad.any():
        raise ValueError(
            f"pseudo_values must lie in [0, 1] where mask is set, found {vals[bad][0]} ({int(bad.sum())} such entries)"
        )
    if vals.size == 0:
        return float("nan")
    return float(np.mean((vals >= 0.5) == y[m]))


# --------------------------------------------------------------------------- Wasserstein


def _w1_columns(values: np.ndarray, is_pos: np.ndarray, is_neg: np.ndarray) -> np.ndarray:
    """Column-wise W1 between the values flagged ``is_pos`` and those flagged ``is_neg``.

    ``W1 = integral |F_pos(t) - F_neg(t)| dt`` with empirical CDFs. After sorting a column,
    between consecutive values ``x_i <= x_{i+1}`` the difference of CDFs is constant and
    equals ``cpos_i / npos - cneg_i / nneg`` (counts up to and including position i), so
    ``W1 = sum_i |...| * (x_{i+1} - x_i)``. Entries in neither group only subdivide an
    interval (their counts add 0), tied values give zero-width intervals, and integer counts
    keep the CDFs exact. NaN where a group is empty.

    The order within a run of tied values does not matter (the counts at its last position are
    the same, and its inner intervals have width 0), so the sort need not be stable: numpy's
    default sort is about twice as fast here, which the final evaluation of every run pays.
    """
    order = np.argsort(values, axis=0)
    x = np.take_along_axis(values, order, axis=0)
    cpos = np.cumsum(np.take_along_axis(is_pos, order, axis=0), axis=0)
    cneg = np.cumsum(np.take_along_axis(is_neg, order, axis=0), axis=0)
    npos, nneg = cpos[-1], cneg[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = cpos[:-1] / npos - cneg[:-1] / nneg
    w = np.sum(np.abs(diff) * np.diff(x, axis=0), axis=0)
    w[(npos == 0) | (nneg == 0)] = np.nan
    return w


def unobserved_wasserstein(
    probs: ArrayLike,
    truth: ArrayLike,
    observed: ArrayLike,
    *,
    per_class: bool = False,
    from_logits: bool = False,
) -> float | np.ndarray:
    """Wasserstein-1 distance between predictions on unobserved true positives and negatives.

    Over the entries with ``observed == 0``, compare the empirical distribution of the
    predicted probabilities where the truth is 1 with the one where it is 0::

        W1 = integral |F_pos(t) - F_neg(t)| dt

    (``scipy.stats.wasserstein_distance`` of the raw values, computed here without scipy).
    A large distance means the model separates the hidden positives from the hidden
    negatives (EM Fig. 4a per class on COCO train; GR Fig. 3a pooled on validation).

    Args:
        probs: ``[N, C]`` predicted probabilities (``from_logits=True`` maps logits first;
            logits themselves give a different, unbounded distance).
        truth: ground truth 0/1, same shape.
        observed: observed labels in {-1, 0, 1}, same shape; only 0 entries are used.
        per_class: False pools all classes into one pair of distributions (GR); True gives
            one distance per class (EM), NaN where a class lacks unobserved positives or
            unobserved negatives.

    Returns:
        a float (pooled; NaN if one side is empty) or a float64 array ``[C]``.
    """
    p = _probabilities(probs, "probs", from_logits)
    y = _binary_targets(truth, "truth")
    o = _as_matrix(observed, "observed")
    _same_shape(p, y, "probs", "truth")
    _same_shape(p, o, "probs", "observed")
    bad = (o != -1) & (o != 0) & (o != 1)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"observed must hold -1, 0 or 1, found {o[r, c]} at [{r}, {c}]")
    hidden = o == 0
    if per_class:
        return _w1_columns(p, hidden & y, hidden & ~y)
    vals = p[hidden][:, None]
    yh = y[hidden][:, None]
    if vals.size == 0:
        return float("nan")
    return float(_w1_columns(vals, yh, ~yh)[0])


# --------------------------------------------------------------------------- accumulator


