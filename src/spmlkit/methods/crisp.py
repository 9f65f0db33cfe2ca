"""CRISP: class priors estimated after every epoch, and the risk that reads them.

Liu, Xu, Wang, Geng (docs/methods.md, "crisp"). After each epoch the method estimates every
class's prior from the whole training split's predictions and the observed positives
(:class:`~spmlkit.labeling.ClassPriorEstimation`, the paper's Algorithm 1) and hands the estimate
to its loss (``crisp``, :mod:`spmlkit.losses.crisp`), which trains AN until its warm-up ends and
the prior-weighted risk afterwards. Where the data has full labels the epoch's record also says
how far the estimate is from the training split's true priors (``class_prior_error``, the curve of
the paper's Figure 4); the estimate never sees them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from ..labeling import ClassPriorEstimation
from ..labels import LabelState
from .base import RunInfo
from .loss_method import LossMethod, Parts

__all__ = ["CRISP", "CRISPTruePrior"]


def _check_warmup(method: str, warmup: int, epochs: int) -> None:
    """A warm-up as long as the run: every epoch would train AN, and the run be recorded as CRISP's."""
    if warmup >= epochs:
        raise ValueError(f"method {method!r}: warmup_epochs={warmup} is not below the {epochs} "
                         f"epoch{'s' if epochs != 1 else ''} it trains, so every epoch would train AN and "
                         "none CRISP's risk; set warmup_epochs below the epochs (--hparam warmup_epochs=N) or "
                         "train longer (--epochs)")


class CRISP(LossMethod):
    """The ``crisp`` loss with priors re-estimated after every epoch (``delta``, ``tau``: the
    estimator's confidence bound, the paper's 0.01 each)."""

    made_of = Parts("crisp")

    def __init__(self, run: RunInfo, *, delta: float = 0.01, tau: float = 0.01, **hparams: Any) -> None:
        super().__init__(run, **hparams)
        _check_warmup(self.name, self.criterion.warmup_epochs, run.epochs)
        self.estimator = ClassPriorEstimation(delta, tau)

    @classmethod
    def check_run(cls, hparams: Mapping[str, Any], epochs: int) -> None:
        """Its warm-up must end before the run does."""
        _check_warmup(cls.name, hparams.get("warmup_epochs", cls.hyperparameters()["warmup_epochs"]), epochs)

    def after_epoch(self, epoch: int, *, probs: Tensor, state: LabelState, truth: np.ndarray | None
                    ) -> dict[str, float]:
        stats = self.estimator.step(probs, state, epoch)
        record = {f"labeling_{k}": float(v) for k, v in stats.items() if np.isscalar(v)}
        prior = self.estimator.class_prior()
        self.criterion.set_class_prior(prior)
        record["class_prior"] = [float(p) for p in prior.tolist()]  # every class's, kept in the history
        if truth is not None:
            true_prior = np.asarray(truth, dtype=np.float64).mean(axis=0)
            record["class_prior_error"] = float(np.abs(prior.detach().cpu().numpy() - true_prior).mean())
        return record

    def get_extra_state(self) -> dict[str, Any]:
        return {**super().get_extra_state(), "labeling": self.estimator.state_dict()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        super().set_extra_state({**state, "labeling": None})
        if state.get("labeling") is not None:
            self.estimator.load_state_dict(state["labeling"])


class CRISPTruePrior(CRISP):
    """CRISP's risk with each class's true prior on the training rows in place of the estimate: a
    reference that separates the estimator from the risk (docs/methods.md, "crisp_true_prior"). The
    same warm-up, the same risk, the priors handed over after every epoch as CRISP's are; only their
    source differs, and that source is the training rows' full labels, which a single-positive method
    never sees: so it is shown beside a leaderboard's ranks, not in them, and refused on data without
    full labels."""

    sees_more_labels = True

    def after_epoch(self, epoch: int, *, probs: Tensor, state: LabelState, truth: np.ndarray | None
                    ) -> dict[str, float]:
        if truth is None:  # the plan refuses such a run (it needs the training rows' full labels)
            raise RuntimeError("method 'crisp_true_prior' needs the training rows' full labels")
        prior = torch.as_tensor(np.asarray(truth, dtype=np.float64).mean(axis=0))
        self.criterion.set_class_prior(prior)
        return {"labeling_prior_mean": float(prior.mean()), "class_prior_error": 0.0,
                "class_prior": [float(p) for p in prior.tolist()]}
