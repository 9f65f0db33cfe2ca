"""Decision thresholds chosen on validation data, and F1 metrics with per-class thresholds.

mAP needs no threshold, but a deployed multi-label classifier has to say yes or no per
label. SPML models are badly calibrated in a method-specific way (AN pushes every
unobserved label towards 0, EM keeps them near 0.5; the EM authors advise t = 0.75 for EM
models, docs/protocol.md, "Metrics"), so a fixed 0.5 can be far from the best cut.
Choosing the threshold on the clean validation split fixes that without touching the test set (unlike PU-MLC's
oracle sweep on the test set, :func:`spmlkit.metrics.oracle_threshold_metrics`).

Definitions follow :func:`spmlkit.metrics.threshold_metrics` (docs/protocol.md, "Metrics";
the ML-GCN / PU-MLC evaluation code): an entry is positive iff ``p >= t``; per class ``Nc`` correct
positives, ``Np`` predicted positives (set to 1 when 0), ``Ng`` true positives;
``CP = mean_c Nc/Np``, ``CR = mean_{c: Ng>0} Nc/Ng``, ``CF1 = 2 CP CR/(CP + CR)``,
``OP = ΣNc/ΣNp``, ``OR = ΣNc/ΣNg``, ``OF1 = 2 OP OR/(OP + OR)``. Here ``t`` may differ per class.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import _binary_targets, _probabilities, _same_shape, _to_numpy
from .thresholded import _metrics_from_counts

__all__ = ["apply_thresholds", "f1_metrics_at", "select_thresholds", "DEFAULT_GRID"]

#: 0.01, 0.02, ..., 0.99
DEFAULT_GRID: np.ndarray = np.linspace(0.01, 0.99, 99)
DEFAULT_GRID.setflags(write=False)


def _check_grid(grid: Any) -> np.ndarray:
    g = _to_numpy(grid, "grid").astype(np.float64).ravel()
    if g.size == 0:
        raise ValueError("grid must hold at least one threshold")
    if not np.all((g >= 0.0) & (g <= 1.0)):
        raise ValueError(f"grid thresholds must lie in [0, 1], got values from {g.min()} to {g.max()}")
    return np.unique(g)  # sorted ascending, duplicates removed


def _thresholds_vector(thresholds: Any, num_classes: int) -> np.ndarray:
    """A scalar or ``[C]`` thresholds as a ``[C]`` float64 vector in [0, 1]."""
    t = _to_numpy(thresholds, "thresholds").astype(np.float64)
    if t.ndim == 0:
        t = np.full(num_classes, float(t))
    if t.shape != (num_classes,):
        raise ValueError(
            f"thresholds must be a scalar or one per class (shape ({num_classes},)), got shape {tuple(t.shape)}"
        )
    if not np.all((t >= 0.0) & (t <= 1.0)):  # also rejects NaN
        bad = int(np.flatnonzero(~((t >= 0.0) & (t <= 1.0)))[0])
        raise ValueError(f"thresholds must lie in [0, 1], got {t[bad]} for class {bad}")
    return t


def _counts_on_grid(p: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Np[c, k] = #{n: p_nc >= grid_k}`` and ``Nc[c, k]`` (the same among true positives).

    One pass for all thresholds: ``j = #{k: grid_k <= p}`` places each probability among the
    sorted thresholds, so ``p >= grid_k`` iff ``j > k``. A per-class histogram of ``j`` and a
    reversed cumulative sum then give the counts at every threshold: O(NC + CK) instead of
    O(NCK) for comparing every entry with every threshold.
    """
    k = grid.size
    c = p.shape[1]
    j = np.searchsorted(grid, p, side="right") + (np.arange(c) * (k + 1))[None, :]
    hist_all = np.bincount(j.ravel(), minlength=c * (k + 1)).reshape(c, k + 1)
    hist_pos = np.bincount(j[y], minlength=c * (k + 1)).reshape(c, k + 1)
    n_pred = np.cumsum(hist_all[:, ::-1], axis=1)[:, ::-1][:, 1:]
    n_correct = np.cumsum(hist_pos[:, ::-1], axis=1)[:, ::-1][:, 1:]
    return n_pred, n_correct


def _f1_from(nc: np.ndarray, n_pred: np.ndarray, ng: np.ndarray) -> np.ndarray:
    """Elementwise F1 = 2PR/(P+R) with P = Nc/max(Np,1), R = Nc/Ng; 0 where Nc = 0.

    With Nc > 0 (so Np, Ng > 0) this equals 2 Nc/(Np + Ng); written that way it needs no
    division by a zero precision or recall.
    """
    denom = n_pred + ng
    return np.where(nc > 0, 2.0 * nc / np.maximum(denom, 1), 0.0)


def _plateau_centre(score: np.ndarray) -> np.ndarray:
    """Per row, the index at the centre of the first run of maximal scores.

    F1 is a step function of the threshold, so a whole range of grid points is often
    equally good on validation; the plateau's centre keeps the largest margin to both
    edges, which transfers better to unseen data than the edge itself.
    """
    best = score.max(axis=1, keepdims=True)
    at_best = np.isclose(score, best, rtol=0.0, atol=1e-12)
    k = np.arange(score.shape[1])[None, :]
    first = np.argmax(at_best, axis=1)[:, None]
    after = (~at_best) & (k > first)
    end = np.where(after.any(axis=1), np.argmax(after, axis=1), score.shape[1])  # exclusive
    return (first[:, 0] + end - 1) // 2


def select_thresholds(
    val_probs: Any,
    val_targets: Any,
    *,
    per_class: bool,
    metric: str = "f1",
    grid: Any = DEFAULT_GRID,
    from_logits: bool = False,
) -> float | np.ndarray:
    """Thresholds that maximise F1 on validation data, over a grid.

    - ``per_class=False``: one global threshold maximising the overall ``OF1``.
    - ``per_class=True``: for each class c the threshold maximising that class's
      ``F1_c = 2 P_c R_c/(P_c + R_c)`` with ``P_c = Nc/max(Np, 1)``, ``R_c = Nc/Ng``. A class
      without validation positives has F1 = 0 at every threshold; it gets the global
      threshold [ours], the best guess available without evidence about the class.

    Where several grid points reach the best score, the centre of the first such run of
    grid points is returned (see ``_plateau_centre``). All thresholds are evaluated in one
    vectorised pass (``_counts_on_grid``).

    Args:
        val_probs: ``[N, C]`` validation probabilities (logits with ``from_logits=True``).
        val_targets: ``[N, C]`` clean validation ground truth in {0, 1}.
        per_class: one threshold per class (True) or one for all (False).
        metric: the score maximised; ``"f1"`` is the one supported now.
        grid: candidate thresholds in [0, 1]; default 0.01, 0.02, ..., 0.99.

    Returns:
        a float (global) or a float64 array ``[C]`` (per class).
    """
    if metric != "f1":
        raise ValueError(f"metric must be 'f1' (OF1 globally, per-class F1 per class), got {metric!r}")
    g = _check_grid(grid)
    p = _probabilities(val_probs, "val_probs", from_logits)
    y = _binary_targets(val_targets, "val_targets")
    _same_shape(p, y, "val_probs", "val_targets")
    n_pred, n_correct = _counts_on_grid(p, y, g)  # [C, K]
    ng = y.sum(axis=0)
    # global: OF1 at every grid point from the summed counts
    tot_c, tot_p, tot_g = n_correct.sum(axis=0), np.maximum(n_pred, 1).sum(axis=0), ng.sum()
    of1 = np.where(tot_c > 0, 2.0 * tot_c / (tot_p + tot_g), 0.0)
    global_t = float(g[_plateau_centre(of1[None, :])[0]])
    if not per_class:
        return global_t
    f1 = _f1_from(n_correct, n_pred, ng[:, None])
    t = g[_plateau_centre(f1)]
    t[ng == 0] = global_t
    return t


def apply_thresholds(probs: Any, thresholds: Any, *, from_logits: bool = False) -> np.ndarray:
    """Hard ``[N, C]`` boolean predictions ``p >= t_c`` for a scalar or per-class ``t``."""
    p = _probabilities(probs, "probs", from_logits)
    t = _thresholds_vector(thresholds, p.shape[1])
    return p >= t[None, :]


def f1_metrics_at(probs: Any, targets: Any, thresholds: Any, *, from_logits: bool = False) -> dict[str, float | int]:
    """``CP, CR, CF1, OP, OR, OF1`` (fractions) and ``num_classes_without_positives`` with a
    scalar or per-class threshold; the definitions of :func:`spmlkit.metrics.threshold_metrics`
    (module docstring), which a scalar threshold reproduces exactly."""
    p = _probabilities(probs, "probs", from_logits)
    y = _binary_targets(targets, "targets")
    _same_shape(p, y, "probs", "targets")
    pred = p >= _thresholds_vector(thresholds, p.shape[1])[None, :]  # p is checked above
    return _metrics_from_counts((pred & y).sum(axis=0), pred.sum(axis=0), y.sum(axis=0))
