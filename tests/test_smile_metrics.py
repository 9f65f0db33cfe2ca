"""The five metrics of SMILE's and CRISP's tables in their code's conventions (spmlkit.metrics.smile_metrics;
docs/protocol.md, "Metric conventions"), against values worked out by hand and against a literal loop over
rows written from the conventions; and every run records them beside spmlkit's own."""

from __future__ import annotations

import numpy as np
import pytest

from spmlkit.metrics import ranking_metrics, smile_metrics

# three rows, four labels: row A has a tie between a positive and a negative (0.6), row B a score of
# exactly 0.5, row C no positive at all
SCORES = np.array([[0.9, 0.2, 0.6, 0.6], [0.1, 0.8, 0.3, 0.5], [0.7, 0.7, 0.1, 0.2]])
TARGETS = np.array([[0, 1, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])


def test_values_worked_out_by_hand():
    got = smile_metrics(SCORES, TARGETS)
    # A ranks 0, 2, 3, 1 (the tie keeps column order): 1 and 2 negatives above its positives -> 3/4; B 0
    assert got["ranking_loss"] == pytest.approx((3 / 4 + 0) / 2, abs=1e-15)
    # A: positives at places 2 and 4 -> (1/2 + 2/4) / 2; B: 1
    assert got["example_ap"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)
    # depths 4 (A), 1 (B), nothing for C, over all 3 rows, minus 1, over 4 labels
    assert got["coverage"] == pytest.approx(((4 + 1) / 3 - 1) / 4, abs=1e-15)
    # A's top label is negative, B's positive, C has none: counted as an error over all rows
    assert got["one_error"] == pytest.approx(2 / 3, abs=1e-15)
    # p > 0.5 strictly: B's 0.5 is a negative decision; A wrong 3 times, C twice
    assert got["hamming_loss"] == pytest.approx(5 / 12, abs=1e-15)


def test_spmlkits_conventions_differ_exactly_where_the_docs_say():
    ours = ranking_metrics(SCORES, TARGETS)
    assert ours["ranking_loss"] == pytest.approx((4 / 4 + 0) / 2)  # the tie counts against the model
    assert ours["one_error"] == pytest.approx(1 / 2)  # row C is left out
    assert ours["coverage"] == pytest.approx((3 + 0) / 2)  # depth - 1 over labelled rows, not scaled by 4


def _loops(scores: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """Row by row, from the conventions' text: places from a stable sort of decreasing score."""
    n, c = scores.shape
    rl, ap, depth, one, wrong = [], [], 0.0, 0, 0
    for s, y in zip(scores, targets):
        place = {label: k for k, label in enumerate(sorted(range(c), key=lambda j: -s[j]))}
        pos = [j for j in range(c) if y[j]]
        neg = [j for j in range(c) if not y[j]]
        if pos and neg:
            rl.append(sum(place[q] < place[p] for p in pos for q in neg) / (len(pos) * len(neg)))
        if pos:
            ranked = sorted(place[p] for p in pos)
            ap.append(sum((k + 1) / (r + 1) for k, r in enumerate(ranked)) / len(pos))
            depth += max(ranked) + 1
        one += not y[int(np.argmax(s))]
        wrong += sum((s[j] > 0.5) != bool(y[j]) for j in range(c))
    return {"ranking_loss": np.mean(rl), "example_ap": np.mean(ap), "coverage": (depth / n - 1) / c,
            "hamming_loss": wrong / (n * c), "one_error": one / n}


def test_equal_to_a_row_by_row_loop_on_random_scores_with_ties():
    rng = np.random.default_rng(5)
    scores = np.round(rng.random((60, 9)), 1)  # rounded: many ties
    targets = (rng.random((60, 9)) < 0.3).astype(int)
    targets[:3] = 0
    targets[3] = 1
    got, want = smile_metrics(scores, targets), _loops(scores, targets)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-12), name


@pytest.mark.usefixtures("one_thread")
def test_every_run_records_them_beside_spmlkits_own():
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training import train

    result = train(resolve_config({"dataset": "yeast", "subset": 200, "epochs": 1, "device": "cpu"}))
    m = result.test_metrics
    assert {"smile.ranking_loss", "smile.example_ap", "smile.coverage", "smile.hamming_loss@0.5",
            "smile.one_error"} <= m.keys()
    assert m["smile.coverage"] == pytest.approx(m["coverage"] / 14, abs=1e-12)  # Yeast's test rows all have a label
    assert m["smile.example_ap"] == pytest.approx(m["example_ap"], abs=1e-12)  # float scores: no ties


def test_the_hamming_loss_is_at_one_half_whatever_the_methods_threshold():
    """SMILE's and CRISP's tables decide ``p > 0.5`` for every method; EM's own threshold is 0.75. Computed at
    the method's threshold, EM's Hamming loss on Yeast read 0.317 instead of 0.489, and no test trained a
    method whose threshold is not 0.5."""
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.methods import get_method
    from spmlkit.training import train
    from spmlkit.training.evaluation import evaluate_test

    # by hand: at 0.5 every entry is right; at 0.75 the 0.6 is a missed positive (1 of 4 entries)
    out = evaluate_test(np.array([[0.6, 0.2], [0.8, 0.3]]), np.array([[1, 0], [1, 0]]), threshold=0.75)
    assert (out["smile.hamming_loss@0.5"], out["hamming_loss@0.75"]) == (0.0, 0.25), \
        "SMILE's Hamming loss was computed at the method's threshold, not at 0.5"
    assert get_method("em").threshold == 0.75
    m = train(resolve_config({"dataset": "yeast", "method": "em", "subset": 200, "epochs": 2, "device": "cpu"})
              ).test_metrics
    assert m["smile.hamming_loss@0.5"] == m["hamming_loss@0.5"] != m["hamming_loss@0.75"], \
        "SMILE's Hamming loss was computed at the method's threshold, not at 0.5"
