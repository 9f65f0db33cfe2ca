"""Tests for spmlkit.thresholds: hand-computed selections and metrics, scalar equivalence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmlkit import metrics as M
from spmlkit.metrics.threshold_selection import DEFAULT_GRID, apply_thresholds, f1_metrics_at, select_thresholds

GRID = [0.1, 0.3, 0.5, 0.7, 0.95]
# class 0: F1 over GRID = 2/3, 4/5, 1, 2/3, 0       -> best 0.5 (unique)
# class 1: F1 over GRID = 4/5, 1, 1, 2/3, 0         -> plateau {0.3, 0.5}, centre rounds down: 0.3
# class 2: no positives (F1 = 0 everywhere)         -> the global threshold
# global OF1 = 2 sum Nc / (sum max(Np, 1) + sum Ng):
#   t=0.1: 8/(11+4)   t=0.3: 8/(6+4)   t=0.5: 8/(5+4)   t=0.7: 4/(3+4)   t=0.95: 0   -> 0.5
PROBS = np.array([
    [0.9, 0.8, 0.5],
    [0.6, 0.6, 0.1],
    [0.4, 0.2, 0.1],
    [0.2, 0.05, 0.1],
])
TARGETS = np.array([
    [1, 1, 0],
    [1, 1, 0],
    [0, 0, 0],
    [0, 0, 0],
])


def brute_f1(p: np.ndarray, y: np.ndarray, t: float) -> float:
    """Per-class F1 by counting, element by element."""
    nc = sum(1 for a, b in zip(p, y) if a >= t and b == 1)
    np_ = sum(1 for a in p if a >= t)
    ng = sum(1 for b in y if b == 1)
    prec = nc / max(np_, 1)
    rec = nc / ng if ng else 0.0
    return 0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec)


def brute_of1(p: np.ndarray, y: np.ndarray, t: float) -> float:
    nc = np_ = ng = 0
    for c in range(p.shape[1]):
        nc += int(np.sum((p[:, c] >= t) & (y[:, c] == 1)))
        np_ += max(int(np.sum(p[:, c] >= t)), 1)
        ng += int(np.sum(y[:, c] == 1))
    op, orec = nc / np_, nc / ng
    return 0.0 if op + orec == 0 else 2 * op * orec / (op + orec)


def test_hand_example() -> None:
    assert [round(brute_f1(PROBS[:, 0], TARGETS[:, 0], t), 4) for t in GRID] == [0.6667, 0.8, 1.0, 0.6667, 0.0]
    assert [round(brute_f1(PROBS[:, 1], TARGETS[:, 1], t), 4) for t in GRID] == [0.8, 1.0, 1.0, 0.6667, 0.0]
    assert [round(brute_of1(PROBS, TARGETS, t), 4) for t in GRID] == [0.5333, 0.8, 0.8889, 0.5714, 0.0]
    assert select_thresholds(PROBS, TARGETS, per_class=False, grid=GRID) == 0.5
    t = select_thresholds(PROBS, TARGETS, per_class=True, grid=GRID)
    assert isinstance(t, np.ndarray) and t.dtype == np.float64
    np.testing.assert_array_equal(t, [0.5, 0.3, 0.5])


def test_plateau_centre() -> None:
    # one class, positives at 0.9 and 0.8, negatives at 0.1: F1 = 1 for every t in (0.1, 0.8]
    p = np.array([0.9, 0.8, 0.1])
    y = np.array([1, 1, 0])
    grid = [0.05, 0.2, 0.4, 0.6, 0.8, 0.85]  # F1: 0.8, 1, 1, 1, 1, 2/3 -> plateau indices 1..4
    assert select_thresholds(p, y, per_class=True, grid=grid)[0] == 0.4
    assert select_thresholds(p, y, per_class=False, grid=grid) == 0.4
    # the default grid 0.01 .. 0.99: with scores 0.9, 0.805 | 0.095 the plateau is 0.10 .. 0.80
    # (indices 9 .. 79), its centre index 44 is t = 0.45
    p = np.array([0.9, 0.805, 0.095])
    assert select_thresholds(p, y, per_class=False) == pytest.approx(0.45)
    assert DEFAULT_GRID[44] == pytest.approx(0.45)


def test_random_selection_reaches_the_best_score() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random((60, 5)) < 0.3).astype(int)
    p = np.clip(0.35 * y + 0.65 * rng.random((60, 5)), 0, 1)
    grid = np.linspace(0.01, 0.99, 99)
    t = select_thresholds(p, y, per_class=True)
    for c in range(5):
        best = max(brute_f1(p[:, c], y[:, c], g) for g in grid)
        assert brute_f1(p[:, c], y[:, c], t[c]) == pytest.approx(best, abs=1e-12)
    tg = select_thresholds(p, y, per_class=False)
    assert brute_of1(p, y, tg) == pytest.approx(max(brute_of1(p, y, g) for g in grid), abs=1e-12)
    # logits and tensors give the same choice
    logits = torch.logit(torch.tensor(p, dtype=torch.float64), eps=1e-12)
    t2 = select_thresholds(logits, torch.tensor(y), per_class=True, from_logits=True)
    np.testing.assert_allclose(t2, t)


def test_f1_metrics_at_per_class_hand_example() -> None:
    p = np.array([[0.9, 0.6, 0.1], [0.4, 0.7, 0.8], [0.3, 0.2, 0.2]])
    y = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0]])
    # thresholds 0.35 / 0.5 / 0.9:
    #   c0: pred {0, 1}, Nc 2, Np 2, Ng 2 -> P 1,   R 1
    #   c1: pred {0, 1}, Nc 1, Np 2, Ng 1 -> P 1/2, R 1
    #   c2: pred {},     Nc 0, Np 0 -> 1, Ng 0 -> P 0, excluded from CR
    # CP = 1.5/3 = 0.5, CR = 1, CF1 = 2/3; OP = 3/5, OR = 3/3, OF1 = 2*0.6/1.6 = 0.75
    out = f1_metrics_at(p, y, [0.35, 0.5, 0.9])
    assert out["CP"] == pytest.approx(0.5)
    assert out["CR"] == pytest.approx(1.0)
    assert out["CF1"] == pytest.approx(2 / 3)
    assert out["OP"] == pytest.approx(0.6)
    assert out["OR"] == pytest.approx(1.0)
    assert out["OF1"] == pytest.approx(0.75)
    assert out["num_classes_without_positives"] == 1
    np.testing.assert_array_equal(
        apply_thresholds(p, [0.35, 0.5, 0.9]), [[True, True, False], [True, True, False], [False, False, False]]
    )
    np.testing.assert_array_equal(apply_thresholds(p, 0.5), p >= 0.5)


@pytest.mark.parametrize("t", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_scalar_threshold_matches_metrics_module(t: float) -> None:
    rng = np.random.default_rng(1)
    p = np.round(rng.random((40, 6)), 2)  # rounded: many probabilities equal a threshold
    y = (rng.random((40, 6)) < 0.25).astype(int)
    y[:, 5] = 0  # an empty class
    ours = f1_metrics_at(p, y, t)
    ref = M.threshold_metrics(p, y, t)
    assert ours.keys() == ref.keys()
    for k in ref:
        assert ours[k] == pytest.approx(ref[k], abs=0, nan_ok=True), k
    same = f1_metrics_at(p, y, np.full(6, t))
    assert same == ours


def test_errors() -> None:
    with pytest.raises(ValueError, match="one per class"):
        f1_metrics_at(PROBS, TARGETS, [0.5, 0.5])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        apply_thresholds(PROBS, [0.5, 1.5, 0.5])
    with pytest.raises(ValueError, match="metric must be 'f1'"):
        select_thresholds(PROBS, TARGETS, per_class=True, metric="accuracy")
    with pytest.raises(ValueError, match="grid thresholds"):
        select_thresholds(PROBS, TARGETS, per_class=True, grid=[0.5, 2.0])
    with pytest.raises(ValueError, match="same"):
        select_thresholds(PROBS, TARGETS[:, :2], per_class=False)
    with pytest.raises(ValueError, match="probabilities"):
        select_thresholds(PROBS * 3, TARGETS, per_class=False)
