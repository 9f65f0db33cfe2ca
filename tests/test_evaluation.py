import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from spmlkit import metrics
from spmlkit.metrics import threshold_selection as thresholds
from spmlkit.training.evaluation import evaluate_test, unobserved_analysis


def test_unobserved_analysis_histograms_by_hand():
    probs = np.array([[0.05, 0.99], [0.5, 0.10], [0.97, 1.0], [0.2, 0.3]])
    truth = np.array([[1, 1], [0, 1], [1, 0], [0, 0]])
    obs = np.array([[1, 0], [0, 0], [0, 1], [0, -1]])   # observed entries are excluded
    a = unobserved_analysis(probs, truth, obs, bins=10)
    # class 0 unobserved: (0.5, neg), (0.97, pos), (0.2, neg); class 1: (0.99, pos), (0.10, pos)
    assert a["hist_pos"][0] == [0] * 9 + [1]
    assert a["hist_neg"][0] == [0, 0, 1, 0, 0, 1, 0, 0, 0, 0]
    assert a["hist_pos"][1] == [0, 1] + [0] * 7 + [1]
    assert a["hist_neg"][1] == [0] * 10
    assert a["wasserstein_per_class"][0] == pytest.approx(wasserstein_distance([0.97], [0.5, 0.2]))
    assert np.isnan(a["wasserstein_per_class"][1])
    assert a["wasserstein"] == pytest.approx(wasserstein_distance([0.97, 0.99, 0.10], [0.5, 0.2]))


def test_evaluate_test_reports_fixed_and_validation_thresholds():
    """The "validation" thresholds come from the validation split, never the test set: here every
    cut in (0.1, 0.3] separates validation's classes perfectly and every cut in (0.6, 0.9] the test
    set's, so a threshold chosen on the test set would land in the second interval."""
    rng = np.random.RandomState(0)
    y = (rng.rand(200, 5) < 0.3).astype(np.uint8)
    y[[0, 100], :], y[[1, 101], :] = 1, 0  # every class has positives and negatives on both sides
    noise = 0.01 * rng.rand(200, 5)
    p = np.where(np.arange(200)[:, None] < 100, 0.1 + 0.2 * y, 0.6 + 0.3 * y) + noise * (y == 0) - noise * y
    val_p, val_y, test_p, test_y = p[:100], y[:100], p[100:], y[100:]
    assert val_p[val_y == 0].max() < 0.12 and val_p[val_y == 1].min() > 0.28 and test_p.min() > 0.58
    out = evaluate_test(test_p, test_y, threshold=0.75, val_probs=val_p, val_targets=val_y)
    assert out["map"] == pytest.approx(metrics.mean_average_precision(test_p, test_y))
    assert out["CF1@0.75"] == pytest.approx(metrics.threshold_metrics(test_p, test_y, 0.75)["CF1"])
    assert out["OF1@0.5"] == pytest.approx(metrics.threshold_metrics(test_p, test_y, 0.5)["OF1"])
    t, per_class = out["threshold_val_global"], np.array(out["thresholds_val_class"])
    assert 0.12 < t <= 0.28 and per_class.shape == (5,) and ((0.12 < per_class) & (per_class <= 0.28)).all()
    # on the test set those cuts call every entry positive: precision is the share of positives
    assert out["OF1@val_global"] == pytest.approx(metrics.threshold_metrics(test_p, test_y, t)["OF1"])
    share = test_y.mean()
    assert out["OF1@val_global"] == pytest.approx(2 * share / (share + 1)) and out["OF1@0.75"] == 1.0
    assert out["CF1@val_class"] == pytest.approx(
        thresholds.f1_metrics_at(test_p, test_y, per_class)["CF1"]) and out["CF1@val_class"] < 1


#: the keys the metrics of the field add to a run's test metrics (docs/protocol.md, "Metrics of the field")
RANKING_KEYS = ("ranking_loss", "one_error", "coverage", "example_ap")
DECISION_KEYS = ("hamming_loss", "example_f1", "micro_f1", "macro_f1")


def test_evaluate_test_records_the_metrics_of_the_field_at_each_named_threshold():
    import warnings

    from sklearn.metrics import coverage_error, f1_score, hamming_loss, label_ranking_loss

    rng = np.random.RandomState(1)
    y = (rng.rand(300, 6) < 0.3).astype(np.uint8)
    y[:5] = 0  # test rows without a positive: left out of the ranking metrics
    p = np.round(np.clip(0.35 * y + 0.65 * rng.rand(300, 6), 0, 1), 2)  # rounded: ties
    test_p, test_y = p[100:], y[100:]
    out = evaluate_test(test_p, test_y, threshold=0.75, val_probs=p[:100], val_targets=y[:100])
    kept = test_y.sum(axis=1) > 0
    pair = kept & (test_y.sum(axis=1) < test_y.shape[1])
    assert out["ranking_loss"] == pytest.approx(label_ranking_loss(test_y[pair], test_p[pair]), abs=1e-12)
    assert out["coverage"] == pytest.approx(coverage_error(test_y[kept], test_p[kept]) - 1, abs=1e-12)
    assert set(RANKING_KEYS) <= set(out)
    t_val, t_class = out["threshold_val_global"], np.array(out["thresholds_val_class"])
    for name, t in (("0.5", 0.5), ("0.75", 0.75), ("val_global", t_val), ("val_class", t_class)):
        pred = (test_p >= np.broadcast_to(t, (6,))[None, :]).astype(int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert out[f"hamming_loss@{name}"] == pytest.approx(hamming_loss(test_y, pred), abs=1e-15)
            for avg, key in (("samples", "example_f1"), ("micro", "micro_f1"), ("macro", "macro_f1")):
                want = f1_score(test_y, pred, average=avg, zero_division=1.0)
                assert out[f"{key}@{name}"] == pytest.approx(want, abs=1e-12), (key, name)
    # every value a plain float: the trainer keeps the float entries in result.json and sweep records
    assert all(isinstance(out[f"{k}@{n}"], float) for k in DECISION_KEYS for n in ("0.5", "val_global"))
    assert all(isinstance(out[k], float) for k in RANKING_KEYS)


@pytest.mark.parametrize("bins", [10, 50, 7])
def test_unobserved_analysis_bins_every_edge_as_a_binary_search_would(bins):
    # values exactly at every edge and one ulp either side of it, where floor(p * bins) can miss
    edges = np.linspace(0.0, 1.0, bins + 1)
    values = np.clip(np.concatenate([edges, np.nextafter(edges, -1.0), np.nextafter(edges, 2.0)]), 0.0, 1.0)
    probs = values[:, None]
    truth = np.ones_like(probs, dtype=int)
    a = unobserved_analysis(probs, truth, np.zeros_like(truth), bins=bins)
    expected = np.bincount(np.clip(np.searchsorted(edges, values, side="right") - 1, 0, bins - 1), minlength=bins)
    assert a["hist_pos"][0] == expected.tolist()
    # by hand: an edge opens its bin, so a middle bin holds its edge, the ulp above it and the ulp below
    # the next edge; bin 0 also holds 0 twice more (the ulp below 0, clipped, and the ulp above it);
    # the last bin is closed on the right: its edge, the ulp above, 1 - ulp, 1 and 1 + ulp clipped to 1
    assert a["hist_pos"][0] == [4] + [3] * (bins - 2) + [5]
