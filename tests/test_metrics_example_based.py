"""The metrics of the field (spmlkit.metrics.example_based) against independent references.

scikit-learn where it has the metric (on the rows our convention keeps: docs/protocol.md,
"Metrics of the field"), plain Python loops written here where it has not, MULAN's ordinal
ranking on scores without ties, and small examples computed by hand. The random inputs hold
ties, rows without a positive and rows whose labels are all positive.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import (
    coverage_error,
    f1_score,
    label_ranking_average_precision_score,
    label_ranking_loss,
)
from sklearn.metrics import hamming_loss as sk_hamming_loss

from spmlkit import metrics as M


def _random(seed: int, n: int = 60, c: int = 7, decimals: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    """Scores (rounded: many ties) and 0/1 targets with empty rows and all-positive rows."""
    rng = np.random.default_rng(seed)
    s = rng.random((n, c))
    if decimals is not None:
        s = np.round(s, decimals)
    y = (rng.random((n, c)) < 0.35).astype(np.int64)
    y[: n // 6] = 0          # rows without a positive
    y[n // 6: n // 6 + 3] = 1  # rows whose labels are all positive
    s[n // 6 + 3: n // 6 + 6] = 0.5  # rows whose scores are all tied
    return s, y


# --------------------------------------------------------------------------- plain references


def _rank_pessimistic(row: np.ndarray, label: int) -> int:
    """Rank of ``label`` (1 = top) when every label scoring at least as high is ranked above it."""
    return sum(1 for v in row if v >= row[label])


def _loop_one_error(s: np.ndarray, y: np.ndarray) -> float:
    errors = []
    for row, truth in zip(s, y):
        if truth.sum() == 0:
            continue
        top = max(row)
        errors.append(1.0 if any(v == top and not t for v, t in zip(row, truth)) else 0.0)
    return sum(errors) / len(errors) if errors else math.nan


def _mulan_ranks(row: np.ndarray) -> list[int]:
    """MULAN's ranking of a row: a stable ascending sort, the last one ranked 1 (no ties here)."""
    order = sorted(range(len(row)), key=lambda k: row[k])
    ranks = [0] * len(row)
    for i, k in enumerate(order):
        ranks[k] = len(row) - i
    return ranks


def _loop_mulan(s: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """MULAN's four ranking measures, written as its loops, over the rows our convention keeps."""
    out: dict[str, list[float]] = {"ranking_loss": [], "one_error": [], "coverage": [], "example_ap": []}
    for row, truth in zip(s, y):
        ranks = _mulan_ranks(row)
        rel = [k for k in range(len(row)) if truth[k]]
        irr = [k for k in range(len(row)) if not truth[k]]
        if not rel:
            continue
        if irr:
            out["ranking_loss"].append(sum(ranks[k] > ranks[j] for k in rel for j in irr) / (len(rel) * len(irr)))
        out["one_error"].append(0.0 if truth[ranks.index(1)] else 1.0)
        out["coverage"].append(max(ranks[k] for k in rel) - 1.0)
        out["example_ap"].append(sum(sum(ranks[q] <= ranks[k] for q in rel) / ranks[k] for k in rel) / len(rel))
    return {k: sum(v) / len(v) for k, v in out.items()}


# --------------------------------------------------------------------------- ranking metrics


def test_ranking_metrics_hand_example() -> None:
    # row 0: scores .9 .8 .8 .1, positives {1, 3}; ties count against the model, so label 1
    #   (tied with negative 2) has rank 3 and label 3 rank 4:
    #   ranking loss: pairs (1,0) wrong, (1,2) wrong (tie), (3,0) wrong, (3,2) wrong -> 4/4 = 1
    #   one-error: top is label 0, negative -> 1;  coverage: rank 4 - 1 = 3
    #   AP: label 1: 1 positive of 3 at/above -> 1/3; label 3: 2 of 4 -> 1/2; mean 5/12
    # row 1: scores .2 .7 .4 .3, positives {1, 2}: both on top -> loss 0, one-error 0,
    #   coverage 2 - 1 = 1, AP 1
    # row 2: no positive -> left out of all four
    # row 3: all positive -> left out of the ranking loss only; one-error 0, coverage 3, AP 1
    s = np.array([[0.9, 0.8, 0.8, 0.1], [0.2, 0.7, 0.4, 0.3], [0.5, 0.1, 0.2, 0.3], [0.1, 0.2, 0.3, 0.4]])
    y = np.array([[0, 1, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    got = M.ranking_metrics(s, y)
    assert got["ranking_loss"] == pytest.approx((1 + 0) / 2, abs=1e-15)
    assert got["one_error"] == pytest.approx((1 + 0 + 0) / 3, abs=1e-15)
    assert got["coverage"] == pytest.approx((3 + 1 + 3) / 3, abs=1e-15)
    assert got["example_ap"] == pytest.approx((5 / 12 + 1 + 1) / 3, abs=1e-15)
    assert M.ranking_loss(s, y) == got["ranking_loss"] and M.one_error(s, y) == got["one_error"]
    assert M.coverage(s, y) == got["coverage"] and M.example_average_precision(s, y) == got["example_ap"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("decimals", [1, 2, None])
def test_ranking_metrics_equal_sklearn_and_a_loop_on_kept_rows(seed: int, decimals: int | None) -> None:
    s, y = _random(seed, decimals=decimals)
    got = M.ranking_metrics(s, y)
    has_pos = y.sum(axis=1) > 0
    has_pair = has_pos & (y.sum(axis=1) < y.shape[1])
    assert got["ranking_loss"] == pytest.approx(label_ranking_loss(y[has_pair], s[has_pair]), abs=1e-12)
    assert got["coverage"] == pytest.approx(coverage_error(y[has_pos], s[has_pos]) - 1, abs=1e-12)
    assert got["example_ap"] == pytest.approx(label_ranking_average_precision_score(y[has_pos], s[has_pos]),
                                              abs=1e-12)
    assert got["one_error"] == pytest.approx(_loop_one_error(s, y), abs=1e-15)
    # scikit-learn's own handling of the rows we leave out differs (it averages in 0, 0, 1)
    if decimals == 1:
        assert got["example_ap"] != pytest.approx(label_ranking_average_precision_score(y, s), abs=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_ranking_metrics_equal_mulan_on_scores_without_ties(seed: int) -> None:
    s, y = _random(seed, decimals=None)
    s[s == 0.5] = np.random.default_rng(1000 + seed).random(np.count_nonzero(s == 0.5))  # untie the tied rows
    assert len(np.unique(s)) == s.size
    got, mulan = M.ranking_metrics(s, y), _loop_mulan(s, y)
    for name in got:
        assert got[name] == pytest.approx(mulan[name], abs=1e-12), name


def test_ties_count_against_the_model() -> None:
    # all labels tied: every pair wrong, the top may be a negative, the positive is ranked last
    s, y = np.full((1, 4), 0.3), np.array([[0, 1, 0, 0]])
    assert M.ranking_metrics(s, y) == {"ranking_loss": 1.0, "one_error": 1.0, "coverage": 3.0, "example_ap": 0.25}
    # the same in any column order (MULAN's tie-break by column would give other values)
    assert M.ranking_metrics(s, y[:, ::-1]) == M.ranking_metrics(s, y)


def test_ranking_metrics_without_a_qualifying_row_are_nan() -> None:
    s = np.array([[0.1, 0.9], [0.4, 0.6]])
    assert all(math.isnan(v) for v in M.ranking_metrics(s, np.zeros((2, 2), int)).values())
    only_full = M.ranking_metrics(s, np.ones((2, 2), int))
    assert math.isnan(only_full["ranking_loss"]) and only_full["example_ap"] == 1.0 and only_full["coverage"] == 1.0


def test_ranking_metrics_accept_logits_torch_and_bool() -> None:
    s, y = _random(3, decimals=2)
    logits = np.log(np.clip(s, 1e-6, 1 - 1e-6) / (1 - np.clip(s, 1e-6, 1 - 1e-6)))
    want = M.ranking_metrics(s, y)
    for got in (M.ranking_metrics(torch.tensor(s, dtype=torch.float64), torch.tensor(y).bool()),
                M.ranking_metrics(logits, y.astype(bool))):
        for k in want:
            assert got[k] == pytest.approx(want[k], abs=1e-12)
    # float32 logits of both signs (the sort's third key layout) against sklearn directly
    x32 = (logits * 3).astype(np.float32)
    kept = y.sum(axis=1) > 0
    assert M.example_average_precision(x32, y) == pytest.approx(
        label_ranking_average_precision_score(y[kept], x32[kept].astype(np.float64)), abs=1e-12)
    assert M.coverage(x32, y) == pytest.approx(coverage_error(y[kept], x32[kept].astype(np.float64)) - 1, abs=1e-12)


# --------------------------------------------------------------------------- decisions


def test_decision_metrics_hand_example() -> None:
    # at t = 0.5: predictions [1 0 1], [0 0 0], [1 1 0]; truth [1 1 0], [0 0 0], [1 0 0]
    # wrong entries: row 0 labels 1 and 2, row 2 label 1 -> Hamming 3/9
    # example F1: row 0 2*1/(2+2) = 1/2, row 1 nothing to find, nothing predicted -> 1, row 2 2/3
    # micro: Nc 2, Np 4, Ng 3 -> 4/7; macro: class 0 2*2/(2+2) = 1, class 1 0, class 2 0 -> 1/3
    p = np.array([[0.9, 0.2, 0.6], [0.1, 0.3, 0.4], [0.7, 0.5, 0.0]])
    y = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    got = M.decision_metrics(p, y, 0.5)
    assert got == pytest.approx({"hamming_loss": 3 / 9, "example_f1": (1 / 2 + 1 + 2 / 3) / 3,
                                 "micro_f1": 4 / 7, "macro_f1": 1 / 3}, abs=1e-15)
    assert M.hamming_loss(p, y) == got["hamming_loss"] and M.example_f1(p, y) == got["example_f1"]
    assert M.micro_f1(p, y) == got["micro_f1"] and M.macro_f1(p, y) == got["macro_f1"]
    # micro F1 is not OF1 where a class predicts nothing: at t = 0.65 only class 0 is predicted
    # (Nc 2, Np 2), Ng = 2 + 1 + 0 -> micro 2*2/(2+3) = 4/5; OF1 raises classes 1 and 2's Np
    # to 1: OP = 2/4, OR = 2/3 -> 4/7
    assert M.micro_f1(p, y, 0.65) == pytest.approx(4 / 5, abs=1e-15)
    assert M.threshold_metrics(p, y, 0.65)["OF1"] == pytest.approx(4 / 7, abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.75, 1.0])
def test_decision_metrics_equal_sklearn(seed: int, threshold: float) -> None:
    p, y = _random(seed, decimals=1)
    pred = (p >= threshold).astype(int)
    got = M.decision_metrics(p, y, threshold)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert got["hamming_loss"] == pytest.approx(sk_hamming_loss(y, pred), abs=1e-15)
        assert got["example_f1"] == pytest.approx(f1_score(y, pred, average="samples", zero_division=1.0), abs=1e-12)
        assert got["micro_f1"] == pytest.approx(f1_score(y, pred, average="micro", zero_division=1.0), abs=1e-12)
        assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro", zero_division=1.0), abs=1e-12)


def test_decision_metrics_with_one_threshold_per_class_equal_sklearn() -> None:
    p, y = _random(11, decimals=2)
    t = np.linspace(0.1, 0.9, p.shape[1])
    pred = (p >= t[None, :]).astype(int)
    got = M.decision_metrics(torch.tensor(p), y, t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro", zero_division=1.0), abs=1e-12)
        assert got["example_f1"] == pytest.approx(f1_score(y, pred, average="samples", zero_division=1.0), abs=1e-12)
    assert got["hamming_loss"] == pytest.approx(sk_hamming_loss(y, pred), abs=1e-15)


def test_decision_metrics_from_logits() -> None:
    p, y = _random(5, decimals=None)
    logits = np.log(p / (1 - p))
    want, got = M.decision_metrics(p, y, 0.6), M.decision_metrics(logits, y, 0.6, from_logits=True)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-12)


def test_bad_inputs_fail_with_one_clear_message() -> None:
    p, y = np.full((2, 3), 0.5), np.zeros((2, 3), int)
    with pytest.raises(ValueError, match=r"same \[examples, classes\] shape"):
        M.ranking_metrics(p, y[:, :2])
    with pytest.raises(ValueError, match=r"ground truth in \{0, 1\}, found -1"):
        M.one_error(p, np.array([[1, -1, 0], [0, 0, 1]]))
    with pytest.raises(ValueError, match="must be finite"):
        M.coverage(np.array([[0.1, np.nan, 0.2], [0.1, 0.2, 0.3]]), y)
    with pytest.raises(ValueError, match=r"threshold must be a probability in \[0, 1\], got 1.5"):
        M.hamming_loss(p, y, 1.5)
    with pytest.raises(ValueError, match=r"one per class \(shape \(3,\)\)"):
        M.macro_f1(p, y, [0.5, 0.5])
    with pytest.raises(ValueError, match="pass from_logits=True"):
        M.example_f1(np.full((2, 3), 2.0), y)


def test_ranking_metrics_in_row_chunks_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from spmlkit.metrics import example_based

    s, y = _random(8, n=90, decimals=1)
    whole = M.ranking_metrics(s, y)
    for entries in (1, 7 * 4, 7 * 89):  # one row per chunk, 4 rows, a last chunk of one row
        monkeypatch.setattr(example_based, "_CHUNK_ENTRIES", entries)
        assert M.ranking_metrics(s, y) == pytest.approx(whole, abs=1e-15)
