"""Final evaluation of a trained model, shared by the feature and image trainers.

* test mAP and per-class AP (the reported numbers);
* CP/CR/CF1/OP/OR/OF1 at the fixed conventions (0.5, and 0.75 for EM-trained models) and at
  thresholds selected on validation (one global threshold maximising OF1, and one per class
  maximising that class's F1), so reports can show both side by side;
* the metrics of the field (docs/protocol.md, "Metrics of the field"): the ranking metrics
  once (they need no threshold), Hamming loss and example/micro/macro F1 at every threshold
  above. Every decision metric's key names its threshold (``micro_f1@0.5``,
  ``OF1@val_global``), so no number is read at a threshold it was not computed at; and the
  same five as the papers on MULAN's sets compute them (:func:`spmlkit.metrics.convention_columns`;
  docs/protocol.md, "Metric conventions");
* at every threshold, the share of the test entries it predicts positive
  (``predicted_positive@0.5``, ...): 1 or 0 is a degenerate threshold (every label on, or none),
  whose F1 says nothing about the model and is named as such where it is printed;
* the analysis of the training split's *unobserved* entries that the papers plot: per-class
  histograms of predicted probabilities for unobserved true positives and negatives and the
  Wasserstein distance between them (EM Fig. 2c/4a/4b, GR Fig. 3);
* every epoch's measures, when a run records them (``epoch_metrics``): the five measures of the
  papers' tables on the validation rows, which a selection rule by their votes reads, and the test
  values of the same epoch, so that a run can be reported at whichever epoch a selection rule
  chooses (docs/protocol.md, "Selection rules"). The loop keeps only the epoch with the best
  validation mAP; these records keep the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import metrics
from ..metrics import threshold_selection as thresholds

__all__ = ["evaluate_test", "unobserved_analysis", "epoch_measures", "split_measures", "ANALYSIS_BINS"]

ANALYSIS_BINS = 50
#: the two fixed conventions of the papers (docs/protocol.md, "Metrics"): 0.5, and 0.75 for EM models
FIXED_THRESHOLDS = (0.5, 0.75)


def evaluate_test(
    test_probs: np.ndarray,
    test_targets: np.ndarray,
    *,
    threshold: float = 0.5,
    val_probs: np.ndarray | None = None,
    val_targets: np.ndarray | None = None,
) -> dict[str, Any]:
    ap = metrics.average_precision(test_probs, test_targets)
    out: dict[str, Any] = {"map": float(ap.mean()), "ap": [float(a) for a in ap]}
    out.update(metrics.ranking_metrics(test_probs, test_targets))
    # the field's metrics as the papers on MULAN's sets compute them, to compare with their tables
    # (docs/protocol.md, "Metric conventions"); their Hamming loss decides p > 0.5
    out.update(metrics.convention_columns(test_probs, test_targets))
    for t in sorted({*FIXED_THRESHOLDS, float(threshold)}):  # the same columns for every method
        for k, v in metrics.threshold_metrics(test_probs, test_targets, t).items():
            out[f"{k}@{t:g}"] = v
        for k, v in metrics.decision_metrics(test_probs, test_targets, t).items():
            out[f"{k}@{t:g}"] = v
        out[f"predicted_positive@{t:g}"] = _predicted_positive(test_probs, t)
    if val_probs is not None and val_targets is not None and np.asarray(val_targets).sum() > 0:
        t_global = thresholds.select_thresholds(val_probs, val_targets, per_class=False)
        t_class = thresholds.select_thresholds(val_probs, val_targets, per_class=True)
        for name, t in (("val_global", t_global), ("val_class", t_class)):
            for k, v in thresholds.f1_metrics_at(test_probs, test_targets, t).items():
                if k != "num_classes_without_positives":
                    out[f"{k}@{name}"] = v
            for k, v in metrics.decision_metrics(test_probs, test_targets, t).items():
                out[f"{k}@{name}"] = v
            out[f"predicted_positive@{name}"] = _predicted_positive(test_probs, t)
        out["threshold_val_global"] = float(t_global)
        out["thresholds_val_class"] = [float(x) for x in np.atleast_1d(t_class)]
    return out


def unobserved_analysis(probs: np.ndarray, truth: np.ndarray, observed: np.ndarray, bins: int = ANALYSIS_BINS) -> dict[str, Any]:
    """Histograms and Wasserstein distances of predictions on unobserved training entries."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(truth).astype(bool)
    unobs = np.asarray(observed) == 0
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = _bin_index(p, edges)
    num_classes = p.shape[1]
    # one count per (class, bin) cell: bincount of the flat cell numbers (np.add.at counts the
    # same, several times slower; every run of a sweep pays this once)
    cells = np.arange(num_classes) * bins + idx
    hist_pos = np.bincount(cells[unobs & y], minlength=num_classes * bins).reshape(num_classes, bins)
    hist_neg = np.bincount(cells[unobs & ~y], minlength=num_classes * bins).reshape(num_classes, bins)
    per_class = metrics.unobserved_wasserstein(p, y.astype(np.uint8), observed, per_class=True)
    pooled = metrics.unobserved_wasserstein(p, y.astype(np.uint8), observed)
    return {
        "bins": edges.tolist(),
        "hist_pos": hist_pos.tolist(),
        "hist_neg": hist_neg.tolist(),
        "wasserstein": float(pooled),
        "wasserstein_per_class": [float(v) for v in np.asarray(per_class)],
    }


def split_measures(probs: np.ndarray, targets: np.ndarray, split: str) -> dict[str, float]:
    """The measures of one epoch on one split (``"val"`` or ``"test"``), keyed as a run's history
    keeps them: ``<split>.`` before each of :func:`spmlkit.metrics.convention_columns` (the five
    measures of the papers' tables on MULAN's sets, in their code's conventions) and, on the test
    split, what the final evaluation reports in spmlkit's conventions (``test.map``, ``test.ranking_loss``, ``test.example_ap``,
    ``test.coverage``, ``test.one_error``, ``test.hamming_loss@0.5``), computed by the same functions
    as :func:`evaluate_test`, so that a run's selected epoch reads the same numbers either way."""
    out = {f"{split}.{k}": v for k, v in metrics.convention_columns(probs, targets).items()}
    if split == "test":
        out["test.map"] = float(metrics.average_precision(probs, targets).mean())
        out.update({f"test.{k}": v for k, v in metrics.ranking_metrics(probs, targets).items()})
        out["test.hamming_loss@0.5"] = metrics.decision_metrics(probs, targets, 0.5)["hamming_loss"]
    return out


def epoch_measures(group: Any, runs: list[Any], val_targets: np.ndarray, test_targets: np.ndarray | None,
                   val_probs: Any = None) -> list[dict[str, float]]:
    """Each run's :func:`split_measures` on the validation rows and, given ``test_targets``, the test
    rows, after an epoch: what a run records every epoch when its configuration asks for it
    (``epoch_metrics``), for the loop to add to the epoch's record. ``group`` is the runs'
    :class:`~spmlkit.training.loop.Group` (its ``probabilities``); ``val_probs`` the runs' validation
    predictions where the loop has them already (a ``[R, rows, classes]`` CPU tensor); a run
    marked diverged gets an empty record (its predictions are not finite, and its epoch is not
    recorded anyway)."""
    out: list[dict[str, float]] = [{} for _ in runs]
    live = [i for i, run in enumerate(runs) if run.loop.diverged is None]
    if not live:
        return out
    chosen = [runs[i] for i in live]
    splits = [("val", val_targets)] if len(val_targets) else []
    if test_targets is not None and len(test_targets):
        splits.append(("test", test_targets))
    for split, targets in splits:
        if split == "val" and val_probs is not None:
            probs = val_probs[live].numpy()
        else:
            probs = group.probabilities(chosen, split).cpu().numpy()
        for i, run_probs in zip(live, probs):
            out[i].update(split_measures(run_probs, targets, split))
    return out


def _bin_index(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of every entry among the equal-width ``edges`` over [0, 1], the last bin closed on the right.

    The same bins as ``clip(searchsorted(edges, p, 'right') - 1, 0, bins - 1)``, found by
    arithmetic: ``floor(p * bins)`` can only miss by one where a value lies within rounding of
    an edge (the edges are ``linspace``'s roundings of ``i / bins``), and one comparison with
    each neighbouring edge puts those back. A binary search per entry costs about twice as much,
    and a 983-label set has ten million entries.
    """
    bins = edges.size - 1
    idx = (p * bins).astype(np.intp)
    np.clip(idx, 0, bins - 1, out=idx)
    idx -= (p < edges[idx]) & (idx > 0)
    idx += (p >= edges[idx + 1]) & (idx < bins - 1)
    return idx


def _predicted_positive(probs: np.ndarray, thresholds: Any) -> float:
    """The share of all (example, label) entries decided positive at ``p >= t`` (``t`` one value or
    one per class), as the F1 metrics decide them."""
    return float(np.mean(np.asarray(probs) >= np.asarray(thresholds)))
