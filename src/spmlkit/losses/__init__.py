"""Every SPML loss behind one registry.

    >>> from spmlkit import losses
    >>> fn = losses.create("em", alpha=0.2)
    >>> value = fn(logits, labels)          # labels: 1 observed positive, 0 unobserved, -1 negative
    >>> losses.available()                  # {name: one-line description}

Families (one module each): ``elementwise`` (the L1/L2/L3, k(p), v(p) spine of docs/methods.md,
"The element-wise view": AN, LS, EM, GR, Hill, SPLC, LL, ...), ``setwise`` (ZLPR, OPML over a row's labels),
``batchwise`` (EPR, high-rank, PU-MLC over a batch), ``role`` (ROLE's label estimator), ``crisp``
(CRISP's risk with estimated class priors), ``smile`` (SMILE's label-enhancement networks over the
k-NN graph of ``graph``), ``consistency`` (LAC's two views: PLC and the label-aware contrast) and ``mime``
(AN plus the KL term of MIME's Gaussian bottleneck).
"""

from .base import (
    LossContext,
    PseudoLabels,
    SPMLLoss,
    available,
    bc_mean,
    create,
    data_arguments,
    hyperparameters,
    loss_class,
    register,
)
from . import elementwise, setwise, batchwise, role, crisp, smile, consistency, mime  # noqa: F401  (modules register their losses)
from .batchwise import high_rank_regularizer, pu_mixup_consistency
from .role import RoleEstimator

__all__ = [
    "LossContext",
    "PseudoLabels",
    "SPMLLoss",
    "available",
    "bc_mean",
    "create",
    "data_arguments",
    "hyperparameters",
    "loss_class",
    "register",
    "high_rank_regularizer",
    "pu_mixup_consistency",
    "RoleEstimator",
]
