"""L1R and L2R: assume negative plus a penalty on the norm of the model's weights.

Zhou et al., ECCV 2022 (the EM paper) compare against AN with an L1 or an L2 penalty on every
trainable parameter (docs/methods.md, "l1r"): a regulariser of the classifier itself, not of its
predictions, so it reads the model's parameters rather than the logits. The penalty is
``lam * sum |w|`` (L1) or ``lam * sum w^2`` (squared L2) over the trainable weights; with R runs'
stacked weights (a batched group) one norm per run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from torch import Tensor

from ..labels import LabelBatch
from .base import RunInfo
from .loss_method import LossMethod, Parts

__all__ = ["L1R", "L2R", "WeightPenalty", "weight_penalty"]


def weight_penalty(parameters: Iterable[Tensor], norm: str, lead: int = 0) -> Tensor:
    """The L1 norm (``norm`` "l1") or the squared L2 norm ("l2") of ``parameters``; with ``lead``
    leading run dimensions on each (R runs' stacked weights) one norm per run."""
    params = list(parameters)

    def total(t: Tensor) -> Tensor:
        return t.sum(dim=tuple(range(lead, t.dim())))

    return sum(total(p.abs()) for p in params) if norm == "l1" else sum(total(p * p) for p in params)


class WeightPenalty(LossMethod):
    """AN plus ``penalty`` times the norm (:attr:`norm`) of the trainable weights (module docstring)."""

    made_of = None
    #: "l1" or "l2" (squared)
    norm: ClassVar[str] = "l2"

    def __init__(self, run: RunInfo, *, penalty: float = 1e-6, **hparams: Any) -> None:
        super().__init__(run, **hparams)
        self.penalty = self.check_number("penalty", penalty, low=0.0)

    def loss(self, out: Any, batch: LabelBatch, *, parameters: Callable[[], Iterable[Tensor]]) -> Tensor:
        value = super().loss(out, batch)
        return value + self.penalty * weight_penalty(parameters(), self.norm, lead=out.logits.dim() - 2)


class L1R(WeightPenalty):
    """AN + L1 penalty on all trainable parameters."""

    made_of = Parts("an")
    norm = "l1"


class L2R(WeightPenalty):
    """AN + squared L2 penalty on all trainable parameters."""

    made_of = Parts("an")
    norm = "l2"
