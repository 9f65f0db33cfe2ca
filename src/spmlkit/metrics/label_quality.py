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


def _counts_up_to(x: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``counts[i] = #{members <= x[i]}`` wherever ``x[i]`` ends a run of tied values.

    ``x`` is sorted and holds every member. Each member is counted at the last position of
    its value's run (``searchsorted(..., 'right') - 1``) and the counts are accumulated, so
    at a run's end they are exact integers; inside a run they may fall short, which
    :func:`_w1_sorted` never reads (those intervals have width 0). A search of the few
    members in the many sorted values, instead of a cumulative sum over all of them carried
    through an argsort, is what makes the evaluation of a 983-label set cheap.
    """
    at = np.searchsorted(x, members, side="right") - 1
    return np.cumsum(np.bincount(at, minlength=x.size))


def _w1_sorted(x: np.ndarray, pos: np.ndarray, neither: np.ndarray) -> float:
    """W1 between the values ``pos`` and the other values of the sorted ``x`` less ``neither``.

    ``W1 = integral |F_pos(t) - F_neg(t)| dt`` with empirical CDFs. Between consecutive
    values ``x_i <= x_{i+1}`` the difference of CDFs is constant and equals
    ``cpos_i / npos - cneg_i / nneg`` (counts of values up to ``x_i``), so
    ``W1 = sum_i |...| * (x_{i+1} - x_i)``. The values in neither group (``neither``) only
    subdivide an interval; tied values give zero-width intervals, so only the counts at the
    end of each run of ties matter, and those are exact integers. The negatives are counted
    as what remains (``i + 1 - cpos_i - cneither_i``), since they are the many: only the
    positives and the values in neither group are searched. NaN when a group is empty.
    """
    cpos = _counts_up_to(x, pos)
    cneg = np.arange(1, x.size + 1)
    cneg -= cpos
    if neither.size:
        cneg -= _counts_up_to(x, neither)
    npos, nneg = cpos[-1], cneg[-1]
    if npos == 0 or nneg == 0:
        return float("nan")
    # in place: the pooled distance of a large set spans ten million values
    diff = cpos[:-1] / npos
    diff -= cneg[:-1] / nneg
    np.abs(diff, out=diff)
    diff *= np.diff(x)
    return float(diff.sum())


def _by_class(p: np.ndarray, flags: np.ndarray) -> list[np.ndarray]:
    """The values of ``p`` where ``flags`` is set, one array per column (class)."""
    classes, rows = np.nonzero(flags.T)  # class-major, so each class's values are one slice
    values = p[rows, classes]
    cuts = np.cumsum(np.bincount(classes, minlength=p.shape[1]))[:-1]
    return np.split(values, cuts)


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
        # one sort of every class's values (all rows: the observed ones only subdivide intervals)
        columns = np.sort(p.T, axis=1)
        pos, neither = _by_class(p, hidden & y), _by_class(p, ~hidden)
        return np.array([_w1_sorted(x, pos[c], neither[c]) for c, x in enumerate(columns)], dtype=np.float64)
    vals = p[hidden]
    if vals.size == 0:
        return float("nan")
    return _w1_sorted(np.sort(vals), vals[y[hidden]], vals[:0])


# --------------------------------------------------------------------------- accumulator


