"""Evaluation metrics of the single-positive multi-label protocol (docs/protocol.md, "Metrics").

- **Average precision / mAP** as in Cole et al., "Multi-Label Learning from Single Positive
  Labels" (CVPR 2021) and its forks (EM, LL, GR): per class, the step-wise average precision
  of scikit-learn's ``average_precision_score`` with tied scores grouped; a class without
  positives scores 0 and stays in the mean.
- **Threshold metrics** CP, CR, CF1, OP, OR, OF1 as in the ML-GCN / PU-MLC evaluation code
  (Yuan et al., "Positive Label Is All You Need for Multi-Label Classification", ICME 2024),
  plus the top-k variant of the same counts and PU-MLC's "oracle threshold" sweep.
- **Metrics of the field** reported on MULAN-style data: Hamming loss, ranking loss, one-error,
  coverage, example-based average precision, and example-based, micro and macro F1
  (:mod:`spmlkit.metrics.example_based`; docs/protocol.md, "Metrics of the field"), and the
  same five as SMILE's and CRISP's code computes them (:func:`smile_metrics`; docs/protocol.md,
  "Metric conventions").
- **Pseudo-label accuracy** and the **Wasserstein distance** between the predictions on
  unobserved true positives and unobserved true negatives, as used by Zhou et al.,
  "Acknowledging the Unknown for Multi-label Learning with Single Positive Labels" (ECCV 2022)
  and Chen et al., "Boosting Single Positive Multi-label Classification with Generalized
  Robust Loss" (IJCAI 2024).

Every function accepts numpy arrays or torch tensors of shape ``[N, C]`` (examples x
classes; 1-D inputs are read as one class) and returns numpy arrays or Python numbers. All
results are fractions in [0, 1]; reports multiply by 100. Targets are ground truth in {0, 1}.

Rank-based metrics (AP, mAP, top-k) accept probabilities or logits alike, since the sigmoid
is monotone. Metrics that compare with a threshold need probabilities; pass
``from_logits=True`` to apply the sigmoid first.
"""

from .accumulator import MetricAccumulator
from .example_based import (
    coverage,
    decision_metrics,
    example_average_precision,
    example_f1,
    hamming_loss,
    macro_f1,
    micro_f1,
    one_error,
    ranking_loss,
    ranking_metrics,
)
from .label_quality import pseudo_label_accuracy, unobserved_wasserstein
from .ranking import average_precision, empty_classes, mean_average_precision
from .smile_convention import SMILE_METRICS, convention_columns, smile_metrics
from .thresholded import oracle_threshold_metrics, threshold_metrics, topk_metrics

__all__ = [
    "MetricAccumulator",
    "average_precision",
    "coverage",
    "decision_metrics",
    "empty_classes",
    "example_average_precision",
    "example_f1",
    "hamming_loss",
    "macro_f1",
    "mean_average_precision",
    "micro_f1",
    "one_error",
    "oracle_threshold_metrics",
    "pseudo_label_accuracy",
    "ranking_loss",
    "ranking_metrics",
    "SMILE_METRICS",
    "convention_columns",
    "smile_metrics",
    "threshold_metrics",
    "topk_metrics",
    "unobserved_wasserstein",
]
