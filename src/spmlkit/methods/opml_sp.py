"""OPML-SP: soft OPML, the high-rank regulariser, and AP-based label correction.

Li, Wang, Chen (docs/methods.md, "opml_sp"). After every epoch the method measures each class's
average precision on the training split against the observed positives: the soft loss
(``opml_soft``) trusts a class's unobserved predictions by that AP, and the label correction
(:class:`~spmlkit.labeling.OPMLCorrection`) turns fewer of a well-ranked class's entries into
positives. One AP serves both, computed once per epoch; its mean is the epoch's
``train_observed_map``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from .. import metrics
from ..labels import LabelState
from .base import RunInfo
from .loss_method import LossMethod, Parts

__all__ = ["OPMLSP"]


class OPMLSP(LossMethod):
    """``opml_soft`` + the high-rank regulariser (weight ``highrank_lam``; None: the regulariser's
    own) + OPML's AP-based correction after ``start_epoch``."""

    made_of = Parts("opml_soft", regularizers=(("highrank", {}),), labeling="opml_correction",
                    labeling_kwargs={"rho": 0.02, "start_epoch": 5})

    def __init__(self, run: RunInfo, *, highrank_lam: float | None = None, **hparams: Any) -> None:
        # read by regularizer_kwargs while the parts are built
        self._highrank_lam = None if highrank_lam is None else highrank_lam
        super().__init__(run, **hparams)

    def regularizer_kwargs(self, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if name == "highrank" and self._highrank_lam is not None:
            kwargs["lam"] = self._highrank_lam
        return kwargs

    def after_epoch(self, epoch: int, *, probs: Tensor, state: LabelState) -> dict[str, float]:
        observed_pos = (state.observed == 1).numpy().astype(np.int8)
        class_ap = metrics.average_precision(probs.detach().cpu().numpy(), observed_pos)
        self.criterion.set_class_ap(torch.as_tensor(class_ap, dtype=torch.float32))
        record = {"train_observed_map": float(np.mean(class_ap))}
        stats = self.algorithm.step(probs, state, epoch, class_ap=class_ap) or {}
        record.update({f"labeling_{k}": float(v) for k, v in stats.items() if np.isscalar(v)})
        return record
