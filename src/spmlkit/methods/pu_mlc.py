"""PU-MLC: the variational PU loss plus a mixup consistency term.

Yuan, Zhang, Huang, ICME 2024 (docs/methods.md, "pu_mlc"). Beside its loss (``pu_mlc``,
:mod:`spmlkit.losses.batchwise`), every step mixes the first half of the batch, permuted, with the
second half and holds the model's predictions on the mixed inputs to the mixed targets
(:func:`~spmlkit.losses.pu_mixup_consistency`): an extra forward pass on inputs of the method's
making. The permutation and the mixing weight are the step's draws, drawn from the run's own
generator before the forward, so that a run in a batched group draws what it draws alone. Its
code computes its statistics on each GPU's own slice of the batch (``batch_statistics``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..labels import LabelBatch
from ..losses.batchwise import draw_pu_mixing, pu_mixup_consistency
from .base import RunInfo
from .loss_method import LossMethod, Parts

__all__ = ["PUMLC"]


class PUMLC(LossMethod):
    """``pu_mlc`` + ``mixup_weight`` x the mixup consistency of the step's mixed inputs."""

    made_of = Parts("pu_mlc")
    batch_statistics = "process"

    def __init__(self, run: RunInfo, *, mixup_weight: float = 1.0, **hparams: Any) -> None:
        super().__init__(run, **hparams)
        self.mixup_weight = self.check_number("mixup_weight", mixup_weight, low=0.0)

    def draw(self, generator: torch.Generator, rows: int) -> tuple[Tensor, Tensor] | None:
        """The permutation of the first half of the batch and the mixing weight (a float64 0-dim
        tensor); none for a batch of one row, which has nothing to mix."""
        if rows < 2:
            return None
        perm, lam = draw_pu_mixing(rows, generator)
        return perm, torch.tensor(lam, dtype=torch.float64)

    def loss(self, out: Any, batch: LabelBatch, *, draws: tuple[Tensor, Tensor] | None, inputs: Tensor,
             forward: Callable[[Tensor], Tensor]) -> Tensor:
        value = super().loss(out, batch)
        if draws is None:
            return value
        perm, lam = draws
        return value + self.mixup_weight * pu_mixup_consistency(forward, inputs, out.logits, batch.labels, perm=perm,
                                                                lam=lam)
