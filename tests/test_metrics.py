"""Tests for spmlkit.metrics: values against hand computations, scikit-learn and scipy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance
from sklearn.metrics import average_precision_score

from spmlkit import metrics as M


def sklearn_ap(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-class scikit-learn AP; a class without positives is 0 (sklearn warns, recall := 1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([average_precision_score(targets[:, c], scores[:, c]) for c in range(scores.shape[1])])


# --------------------------------------------------------------------------- average precision


def test_ap_hand_example_with_tie() -> None:
    # scores 0.9 0.8 0.8 0.3 0.1, labels 1 0 1 0 1 (3 positives). Thresholds at distinct scores:
    #   s >= 0.9: TP 1 of 1 -> P = 1,   R = 1/3
    #   s >= 0.8: TP 2 of 3 -> P = 2/3, R = 2/3   (the tie group 0.8 counts as one step)
    #   s >= 0.3: TP 2 of 4 -> R unchanged, no contribution
    #   s >= 0.1: TP 3 of 5 -> P = 3/5, R = 1
    # AP = 1/3 * 1 + 1/3 * 2/3 + 1/3 * 3/5 = 34/45
    scores = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
    targets = np.array([1, 0, 1, 0, 1])
    ap = M.average_precision(scores, targets)
    assert ap.shape == (1,)
    assert ap[0] == pytest.approx(34 / 45, abs=1e-15)


def test_ap_ties_are_grouped_not_ranked() -> None:
    # one positive tied with one negative: precision at the tie is 1/2 whatever the order
    # (a rank-based AP that happened to put the positive first would give 1)
    ap = M.average_precision(np.array([[0.8], [0.8]]), np.array([[1], [0]]))
    assert ap[0] == pytest.approx(0.5, abs=1e-15)
    # the same tie in reversed row order gives the same value
    ap = M.average_precision(np.array([[0.8], [0.8]]), np.array([[0], [1]]))
    assert ap[0] == pytest.approx(0.5, abs=1e-15)


def test_ap_special_columns_hand_values() -> None:
    n = 6
    scores = np.column_stack(
        [
            np.full(n, 0.3),  # all scores equal, 2 positives of 6 -> one step, P = 2/6
            np.linspace(0, 1, n),  # no positive -> 0 by convention
            np.linspace(1, 0, n),  # all positive -> precision 1 everywhere
        ]
    )
    targets = np.column_stack([[1, 0, 0, 1, 0, 0], np.zeros(n, int), np.ones(n, int)])
    ap = M.average_precision(scores, targets)
    np.testing.assert_allclose(ap, [2 / 6, 0.0, 1.0], atol=1e-15)
    ap_nan = M.average_precision(scores, targets, empty="nan")
    assert np.isnan(ap_nan[1]) and ap_nan[0] == pytest.approx(1 / 3) and ap_nan[2] == 1.0


def _random_case(rng: np.random.Generator, n: int, c: int, decimals: int | None, pos_rate: float):
    scores = rng.random((n, c))
    if decimals is not None:
        scores = np.round(scores, decimals)
    targets = (rng.random((n, c)) < pos_rate).astype(np.int64)
    return scores, targets


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("decimals", [None, 3, 2, 1])
def test_ap_matches_sklearn_random(seed: int, decimals: int | None) -> None:
    rng = np.random.default_rng(seed)
    scores, targets = _random_case(rng, 1500, 7, decimals, pos_rate=[0.03, 0.1, 0.4, 0.7][seed])
    scores[:, 0] = 0.25  # all-equal column
    targets[:, 1] = 0  # no positive
    targets[:, 2] = 1  # all positive
    scores[:5, 3] = 1e6  # an outlier squeezes the rest of the column into one bucket
    scores[:, 4] = np.round(rng.normal(size=1500) * 20)  # logits-like integers, heavy ties
    ref = sklearn_ap(scores, targets)
    ap = M.average_precision(scores, targets)
    np.testing.assert_allclose(ap, ref, rtol=0, atol=1e-9)
    assert ap[1] == 0.0 and ap[2] == 1.0


@pytest.mark.parametrize("seed", range(40))
def test_ap_matches_sklearn_small_and_extreme(seed: int) -> None:
    # small shapes, few distinct values, huge and subnormal ranges (the bucket arithmetic
    # must stay monotone there too)
    rng = np.random.default_rng(100 + seed)
    n, c = int(rng.integers(1, 60)), int(rng.integers(1, 5))
    scale = [1.0, 1e-310, 1e300, 1e308][seed % 4]  # +-1.5e308: max - min overflows
    scores = np.clip(np.round(rng.normal(size=(n, c)), int(rng.integers(0, 3))), -1.5, 1.5) * scale
    targets = (rng.random((n, c)) < rng.random()).astype(np.int64)
    np.testing.assert_allclose(M.average_precision(scores, targets), sklearn_ap(scores, targets), rtol=0, atol=1e-9)


def test_ap_full_range_of_doubles() -> None:
    # max - min overflows to inf here; the halved bucket formula must still be exact
    scores = np.array([[-1.7e308], [1.7e308], [0.0], [1.0], [-1.0], [1.7e308]])
    targets = np.array([[1], [0], [1], [0], [1], [1]])
    np.testing.assert_allclose(M.average_precision(scores, targets), sklearn_ap(scores, targets), atol=1e-12)


def test_ap_accepts_torch_and_float32_and_bool() -> None:
    rng = np.random.default_rng(7)
    scores = rng.normal(size=(300, 4)).astype(np.float32)
    targets = rng.random((300, 4)) < 0.2
    ref = sklearn_ap(scores, targets.astype(int))
    np.testing.assert_allclose(M.average_precision(torch.from_numpy(scores), torch.from_numpy(targets)), ref, atol=1e-9)
    np.testing.assert_allclose(M.average_precision(scores, targets.astype(np.float32)), ref, atol=1e-9)
    # rank-based: logits and their sigmoid give the same AP (float64 keeps the order strict)
    z = scores.astype(np.float64)
    from_probs = M.average_precision(1 / (1 + np.exp(-z)), targets)
    np.testing.assert_allclose(from_probs, M.average_precision(z, targets), atol=1e-12)


def _heavy_ties_case(rng: np.random.Generator, n: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The benchmark's heavy-ties data: 2-decimal scores, 4% positives, one empty class."""
    scores = np.round(rng.random((n, c)), 2)
    targets = rng.random((n, c)) < 0.04
    targets[:, 1] = False  # no positive
    return scores, targets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ap_heavy_ties_matches_sklearn(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    scores, targets = _heavy_ties_case(rng, 4000, 9)
    scores[:, 2] = 0.5  # all tied
    targets[:, 3] = True  # all positive
    ref = sklearn_ap(scores, targets.astype(int))
    ap = M.average_precision(scores, targets)
    np.testing.assert_allclose(ap, ref, rtol=0, atol=1e-9)
    assert ap[1] == 0.0 and ap[3] == 1.0
    assert ap[2] == pytest.approx(targets[:, 2].mean(), abs=1e-15)  # one step: P = Npos / N
    # float32 copies of the same scores, and the same data as a torch tensor
    np.testing.assert_allclose(M.average_precision(scores.astype(np.float32), targets), ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(M.average_precision(torch.from_numpy(scores), targets), ref, rtol=0, atol=1e-9)


def test_ap_heavy_ties_across_column_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # columns are sorted a few at a time to bound memory; chunks of 1, 2 and 3 columns must
    # give the same values as one chunk (and as scikit-learn)
    from spmlkit.metrics import ranking

    scores, targets = _heavy_ties_case(np.random.default_rng(210), 500, 7)
    ref = sklearn_ap(scores, targets.astype(int))
    for columns in (1, 2, 3, 100):
        monkeypatch.setattr(ranking, "_SORT_CHUNK_ENTRIES", 500 * columns)
        np.testing.assert_allclose(M.average_precision(scores, targets), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ap_heavy_ties_logits_and_probabilities(dtype: type) -> None:
    # logits of both signs beyond +-2 (in float64 the general argsort path, in float32 the
    # packed one), rounded to 1 decimal for heavy ties; their sigmoid ranks alike wherever
    # float64 keeps distinct logits distinct, so AP must agree with scikit-learn on both
    rng = np.random.default_rng(220)
    logits = np.round(rng.normal(size=(3000, 6)) * 4, 1).astype(dtype)
    logits[:, 0] = rng.normal(size=3000).astype(dtype) * 3  # continuous; sigmoid still strict
    targets = rng.random((3000, 6)) < 0.04
    targets[:, 1] = False
    ref = sklearn_ap(logits, targets.astype(int))
    ap = M.average_precision(logits, targets)
    np.testing.assert_allclose(ap, ref, rtol=0, atol=1e-9)
    probs = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    np.testing.assert_allclose(M.average_precision(probs, targets), sklearn_ap(probs, targets.astype(int)), atol=1e-9)
    np.testing.assert_allclose(M.average_precision(probs, targets), ap, atol=1e-9)


def test_ap_signed_zero_ties_and_single_row() -> None:
    # -0.0 and +0.0 are the same score: one tie group, precision 1/2 for the positive
    np.testing.assert_allclose(M.average_precision(np.array([[-0.0], [0.0]]), np.array([[1], [0]])), [0.5])
    np.testing.assert_allclose(M.average_precision(np.array([[0.0], [-0.0]]), np.array([[1], [0]])), [0.5])
    # one example: AP 1 where it is positive, 0 where the class has no positive
    np.testing.assert_array_equal(M.average_precision(np.array([[0.3, -7.0, 0.3]]), np.array([[1, 0, 1]])), [1.0, 0.0, 1.0])
    # no example at all is refused, as before
    with pytest.raises(ValueError, match="is empty"):
        M.average_precision(np.zeros((0, 2)), np.zeros((0, 2)))


def test_mean_average_precision_and_empty_classes() -> None:
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.4], [0.6, 0.7, 0.3]])
    targets = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0]])
    # class 0: positives at 0.9 and 0.6, ranked 1st and 2nd -> AP 1
    # class 1: positive 0.8 ranked 1st -> AP 1
    # class 2: no positive -> AP 0 (reference) or left out
    assert M.mean_average_precision(scores, targets) == pytest.approx(2 / 3, abs=1e-15)
    assert M.mean_average_precision(scores, targets, exclude_empty=True) == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_array_equal(M.empty_classes(targets), [2])
    assert math.isnan(M.mean_average_precision(scores, np.zeros((3, 3)), exclude_empty=True))


# --------------------------------------------------------------------------- threshold metrics

P_HAND = np.array([[0.9, 0.2, 0.6], [0.4, 0.7, 0.1], [0.8, 0.5, 0.3], [0.1, 0.3, 0.2]])
Y_HAND = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [0, 1, 0]])


def test_threshold_metrics_hand_example() -> None:
    # t = 0.5 (p >= t is positive; 0.5 itself counts):
    #   class 0: predicted rows {0, 2} Np = 2, truth rows {0, 1} Ng = 2, correct {0} Nc = 1
    #   class 1: predicted rows {1, 2} Np = 2, truth rows {1, 3} Ng = 2, correct {1} Nc = 1
    #   class 2: predicted row {0}     Np = 1, Ng = 0 (excluded from CR),   Nc = 0
    # CP = (1/2 + 1/2 + 0/1) / 3 = 1/3      CR = (1/2 + 1/2) / 2 = 1/2
    # CF1 = 2 (1/3)(1/2) / (1/3 + 1/2) = 2/5
    # OP = 2 / 5, OR = 2 / 4, OF1 = 2 (2/5)(1/2) / (2/5 + 1/2) = 4/9
    out = M.threshold_metrics(P_HAND, Y_HAND, 0.5)
    expected = {"CP": 1 / 3, "CR": 1 / 2, "CF1": 2 / 5, "OP": 2 / 5, "OR": 1 / 2, "OF1": 4 / 9}
    for key, value in expected.items():
        assert out[key] == pytest.approx(value, abs=1e-15), key
    assert out["num_classes_without_positives"] == 1
    assert isinstance(out["num_classes_without_positives"], int)


def test_threshold_metrics_np_zero_is_clamped() -> None:
    # t = 0.75: class 0 predicted rows {0, 2} (Nc = 1, Np = 2); classes 1 and 2 predict
    # nothing, Np clamped to 1 (ML-GCN / PU-MLC convention), also inside OP's sum.
    # CP = (1/2 + 0 + 0) / 3 = 1/6, CR = (1/2 + 0) / 2 = 1/4, CF1 = 2 (1/6)(1/4) / (5/12) = 1/5
    # OP = 1 / (2 + 1 + 1) = 1/4, OR = 1 / 4, OF1 = 1/4
    out = M.threshold_metrics(P_HAND, Y_HAND, 0.75)
    expected = {"CP": 1 / 6, "CR": 1 / 4, "CF1": 1 / 5, "OP": 1 / 4, "OR": 1 / 4, "OF1": 1 / 4}
    for key, value in expected.items():
        assert out[key] == pytest.approx(value, abs=1e-15), key
    # nothing predicted at all: every ratio is 0 and F1 = 0/0 is defined as 0
    out = M.threshold_metrics(P_HAND, Y_HAND, 0.95)
    assert all(out[k] == 0.0 for k in ("CP", "CR", "CF1", "OP", "OR", "OF1"))


def test_threshold_metrics_without_any_positive() -> None:
    out = M.threshold_metrics(P_HAND, np.zeros_like(Y_HAND), 0.5)
    assert out["num_classes_without_positives"] == 3
    assert out["CP"] == 0.0 and out["OP"] == 0.0
    assert math.isnan(out["CR"]) and math.isnan(out["OR"]) and math.isnan(out["CF1"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_threshold_metrics_from_logits(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(3)
    z = torch.tensor(rng.uniform(-50, 50, size=(200, 5)), dtype=dtype)
    y = rng.random((200, 5)) < 0.3
    z[0, 0], z[1, 1] = -50.0, 50.0
    # reference per element with plain math
    p = np.array([[1.0 / (1.0 + math.exp(-float(v))) for v in row] for row in z])
    for t in (0.5, 0.75):
        a = M.threshold_metrics(z, y, t, from_logits=True)
        b = M.threshold_metrics(p, y, t)
        assert a == b
        assert all(math.isfinite(a[k]) for k in ("CP", "CR", "CF1", "OP", "OR", "OF1"))


def test_oracle_threshold_matches_a_plain_sweep() -> None:
    rng = np.random.default_rng(5)
    p = np.round(rng.random((120, 4)), 2)
    y = rng.random((120, 4)) < 0.3
    th = np.arange(1, 100) / 100
    of1 = [M.threshold_metrics(p, y, t)["OF1"] for t in th]
    cf1 = [M.threshold_metrics(p, y, t)["CF1"] for t in th]
    out = M.oracle_threshold_metrics(p, y)
    assert out["best_OF1"] == pytest.approx(max(of1), abs=1e-12)
    assert out["best_CF1"] == pytest.approx(max(cf1), abs=1e-12)
    assert out["best_OF1_threshold"] == pytest.approx(th[int(np.argmax(of1))])
    assert out["best_CF1_threshold"] == pytest.approx(th[int(np.argmax(cf1))])


def test_topk_hand_example() -> None:
    # k = 1: row tops are class 0 (0.9), 1 (0.7), 0 (0.8), 1 (0.3)
    #   class 0: Np = 2, Nc = 1 (row 0);  class 1: Np = 2, Nc = 2 (rows 1, 3);  class 2: Np = 0 -> 1
    # CP = (1/2 + 1 + 0) / 3 = 1/2, CR = (1/2 + 1) / 2 = 3/4, CF1 = 2 (1/2)(3/4) / (5/4) = 3/5
    # OP = 3 / (2 + 2 + 1) = 3/5, OR = 3/4, OF1 = 2 (3/5)(3/4) / (27/20) = 2/3
    out = M.topk_metrics(P_HAND, Y_HAND, k=1)
    expected = {"CP": 1 / 2, "CR": 3 / 4, "CF1": 3 / 5, "OP": 3 / 5, "OR": 3 / 4, "OF1": 2 / 3}
    for key, value in expected.items():
        assert out[key] == pytest.approx(value, abs=1e-15), key
    # ML-GCN variant: a top-1 class below 0.5 is dropped (row 3's class 1 at 0.3)
    # class 1: Np = 1, Nc = 1 -> CP = (1/2 + 1 + 0)/3 = 1/2, CR = (1/2 + 1/2)/2 = 1/2
    out = M.topk_metrics(P_HAND, Y_HAND, k=1, threshold=0.5)
    assert out["CP"] == pytest.approx(1 / 2) and out["CR"] == pytest.approx(1 / 2)
    assert out["OP"] == pytest.approx(2 / 4) and out["OR"] == pytest.approx(2 / 4)


def test_topk_ties_go_to_lower_class_index() -> None:
    scores = np.array([[0.5, 0.5, 0.5]])
    # k = 2 picks classes 0 and 1; class 1 is the only positive -> one hit
    out = M.topk_metrics(scores, np.array([[0, 1, 0]]), k=2)
    assert out["OR"] == 1.0
    out = M.topk_metrics(scores, np.array([[0, 0, 1]]), k=2)
    assert out["OR"] == 0.0


# --------------------------------------------------------------------------- pseudo-labels


def test_pseudo_label_accuracy_hand_example() -> None:
    mask = np.array([[True, False], [True, True]])
    values = np.array([[0.2, np.nan], [0.7, 1.0]])  # outside the mask anything goes
    truth = np.array([[0, 1], [0, 1]])
    # (0,0): 0.2 -> 0 == 0 yes; (1,0): 0.7 -> 1 != 0 no; (1,1): 1 == 1 yes -> 2/3
    assert M.pseudo_label_accuracy(mask, values, truth) == pytest.approx(2 / 3, abs=1e-15)
    # APL-style soft negatives: accuracy = #{M=1, y*=0} / #{M=1}
    soft_neg = np.full((2, 2), 0.1)
    assert M.pseudo_label_accuracy(mask.astype(int), soft_neg, truth) == pytest.approx(2 / 3, abs=1e-15)
    assert math.isnan(M.pseudo_label_accuracy(np.zeros((2, 2), bool), values, truth))


# --------------------------------------------------------------------------- Wasserstein


def test_wasserstein_hand_example() -> None:
    # unobserved positives {0.2, 0.6}, unobserved negative {0.4}; the observed entries
    # (0.99 positive, 0.0 negative) are ignored.
    # F_pos - F_neg: 1/2 on [0.2, 0.4), 1/2 - 1 on [0.4, 0.6) -> W1 = 0.5*0.2 + 0.5*0.2 = 0.2
    probs = np.array([[0.2], [0.6], [0.4], [0.99], [0.0]])
    truth = np.array([[1], [1], [0], [1], [0]])
    observed = np.array([[0], [0], [0], [1], [-1]])
    assert M.unobserved_wasserstein(probs, truth, observed) == pytest.approx(0.2, abs=1e-15)
    np.testing.assert_allclose(M.unobserved_wasserstein(probs, truth, observed, per_class=True), [0.2], atol=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_wasserstein_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, c = 80, 5
    probs = rng.random((n, c))
    if seed % 2:
        probs = np.round(probs, 1)  # ties
    truth = rng.random((n, c)) < 0.3
    observed = rng.choice([-1, 0, 1], size=(n, c), p=[0.2, 0.6, 0.2])
    truth[:, 4] = False  # no unobserved positive in the last class -> NaN there
    hidden = observed == 0
    pos, neg = hidden & truth, hidden & ~truth
    ref_pooled = wasserstein_distance(probs[pos], probs[neg])
    assert M.unobserved_wasserstein(probs, truth, observed) == pytest.approx(ref_pooled, abs=1e-12)
    ref = [wasserstein_distance(probs[pos[:, j], j], probs[neg[:, j], j]) for j in range(c - 1)]
    got = M.unobserved_wasserstein(torch.from_numpy(probs), truth, observed, per_class=True)
    np.testing.assert_allclose(got[:-1], ref, rtol=0, atol=1e-12)
    assert np.isnan(got[-1])


def test_wasserstein_from_logits_finite() -> None:
    z = np.linspace(-50, 50, 40).reshape(20, 2)
    truth = np.tile([[1, 0], [0, 1]], (10, 1))
    w = M.unobserved_wasserstein(z.astype(np.float32), truth, np.zeros((20, 2)), from_logits=True)
    p = np.array([[1 / (1 + math.exp(-v)) for v in row] for row in z])
    pos, neg = p[truth == 1], p[truth == 0]
    assert math.isfinite(w) and w == pytest.approx(wasserstein_distance(pos, neg), abs=1e-6)


# --------------------------------------------------------------------------- accumulator


def test_accumulator_equals_functions_on_concatenation() -> None:
    rng = np.random.default_rng(11)
    z = rng.normal(size=(90, 4)) * 3
    y = rng.random((90, 4)) < 0.25
    y[:, 3] = False
    acc = M.MetricAccumulator(threshold=0.6, from_logits=True)
    for start in range(0, 90, 32):
        acc.update(torch.from_numpy(z[start : start + 32]), torch.from_numpy(y[start : start + 32]))
    out = acc.compute()
    assert acc.num_examples == 90
    np.testing.assert_allclose(out["AP"], sklearn_ap(z, y.astype(int)), atol=1e-9)
    assert out["mAP"] == pytest.approx(float(np.mean(sklearn_ap(z, y.astype(int)))), abs=1e-9)
    np.testing.assert_array_equal(out["empty_classes"], [3])
    p = 1 / (1 + np.exp(-z))
    ref = M.threshold_metrics(p, y, 0.6)
    for key in ("CP", "CR", "CF1", "OP", "OR", "OF1"):
        assert out[key] == pytest.approx(ref[key], abs=1e-12)
    with pytest.raises(ValueError, match="earlier batches had 4"):
        acc.update(z[:3, :2], y[:3, :2])
    acc.reset()
    with pytest.raises(ValueError, match="before any update"):
        acc.compute()


# --------------------------------------------------------------------------- validation


def test_input_validation_messages() -> None:
    s = np.random.default_rng(0).random((4, 3))
    y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]])
    with pytest.raises(ValueError, match=r"same \[examples, classes\] shape, got \(4, 3\) and \(4, 2\)"):
        M.average_precision(s, y[:, :2])
    bad = s.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"scores must be finite, found nan at \[2, 1\]"):
        M.average_precision(bad, y)
    with pytest.raises(ValueError, match=r"ground truth in \{0, 1\}, found -1 at \[0, 1\]"):
        M.average_precision(s, np.where(y == 1, 1, -1))
    with pytest.raises(ValueError, match="must be 1-D .* or 2-D"):
        M.average_precision(s[None], y[None])
    with pytest.raises(ValueError, match="is empty"):
        M.average_precision(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="exclude_empty=True"):
        M.average_precision(s, y, empty="exclude")
    with pytest.raises(ValueError, match="pass from_logits=True"):
        M.threshold_metrics(s * 4 - 2, y)
    with pytest.raises(ValueError, match=r"threshold must be a probability in \[0, 1\], got 1.5"):
        M.threshold_metrics(s, y, 1.5)
    with pytest.raises(ValueError, match=r"k must be an integer between 1 and the number of classes \(3\)"):
        M.topk_metrics(s, y, k=4)
    with pytest.raises(ValueError, match=r"observed must hold -1, 0 or 1, found 2"):
        M.unobserved_wasserstein(s, y, np.full((4, 3), 2))
    with pytest.raises(ValueError, match=r"pseudo_values must lie in \[0, 1\] where mask is set"):
        M.pseudo_label_accuracy(np.ones((4, 3), bool), s + 1, y)
    with pytest.raises(TypeError, match="real numeric"):
        M.average_precision(np.array([["a"]]), np.array([[1]]))


def test_wasserstein_observed_values_tied_with_hidden_ones() -> None:
    # class 0: hidden positives {0.5, 0.5}, hidden negatives {0.1, 0.9}; observed entries at 0.5 and
    # 0.9 (ties with hidden values) only subdivide intervals:
    # F_pos - F_neg = -1/2 on [0.1, 0.5), 1 - 1/2 on [0.5, 0.9) -> W1 = 0.5*0.4 + 0.5*0.4 = 0.4.
    # class 1: every hidden entry is positive -> NaN. Pooled: positives {0.5, 0.5, 0.2, 0.3},
    # negatives {0.1, 0.9}: F_pos - F_neg = -1/2 on [0.1, 0.2), -1/4 on [0.2, 0.3), 0 on [0.3, 0.5),
    # 1/2 on [0.5, 0.9) -> W1 = 0.05 + 0.025 + 0 + 0.2 = 0.275.
    probs = np.array([[0.5, 0.2], [0.5, 0.3], [0.1, 0.5], [0.9, 0.5], [0.5, 0.7], [0.9, 0.7]])
    truth = np.array([[1, 1], [1, 1], [0, 0], [0, 0], [1, 1], [0, 0]])
    observed = np.array([[0, 0], [0, 0], [0, -1], [0, -1], [1, 1], [-1, -1]])
    got = M.unobserved_wasserstein(probs, truth, observed, per_class=True)
    assert got[0] == pytest.approx(0.4, abs=1e-15) and np.isnan(got[1])
    assert M.unobserved_wasserstein(probs, truth, observed) == pytest.approx(0.275, abs=1e-15)
