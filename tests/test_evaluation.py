import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from spmlkit import metrics
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
    rng = np.random.RandomState(0)
    y = (rng.rand(200, 5) < 0.3).astype(np.uint8)
    p = np.clip(0.35 * y + 0.65 * rng.rand(200, 5), 0, 1)
    out = evaluate_test(p[100:], y[100:], threshold=0.75, val_probs=p[:100], val_targets=y[:100])
    assert out["map"] == pytest.approx(metrics.mean_average_precision(p[100:], y[100:]))
    assert out["CF1@0.75"] == pytest.approx(metrics.threshold_metrics(p[100:], y[100:], 0.75)["CF1"])
    assert out["OF1@0.5"] == pytest.approx(metrics.threshold_metrics(p[100:], y[100:], 0.5)["OF1"])
    t = out["threshold_val_global"]
    assert out["OF1@val_global"] == pytest.approx(metrics.threshold_metrics(p[100:], y[100:], t)["OF1"])
    assert len(out["thresholds_val_class"]) == 5 and "CF1@val_class" in out
