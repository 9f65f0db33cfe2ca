"""AP-based label correction of OPML (OPML-SP's permanent positive corrections).

Li, Wang, Chen, "Pushing One Pair of Labels Apart Each Time in Multi-Label Learning: From
Single Positive to Full Labels" (docs/methods.md, "opml_sp"). The paper's formulas are lost
from our copy; this is the library's definition [ours] rebuilt from its prose: the number
of labels corrected per class falls with the class's training AP against the observed
labels, scales with the number of training examples and a correction ratio, and is capped
by the class's number of observed labels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..labels import LabelState
from .apl import as_probabilities, select_smallest_per_class
from .base import ClassAP, LabelingAlgorithm, Probabilities, check_epoch, round_record

__all__ = ["OPMLCorrection"]


class OPMLCorrection(LabelingAlgorithm):
    """Turn the highest-scoring unobserved entries of each class into permanent positives.

    At the end of epoch ``start_epoch`` (1-indexed; every epoch from then on if
    ``every_epoch``), with that epoch's predictions ``p`` over the whole training split:

    * ``AP_c`` = average precision of ``p[:, c]`` against the **observed positives**
      (``observed == 1``; everything else, earlier corrections included, counts as
      negative). Why observed positives only: corrections are the model's own guesses and
      sit at the top of the ranking by construction, so counting them would inflate AP and
      let earlier corrections throttle later ones; the paper measures AP "against the
      observed labels".
    * ``n_c = min(floor(rho * N * (1 - AP_c)), floor(kappa * N_c_obs), #unobserved_c)`` with
      N the number of training examples, ``N_c_obs`` the observed positives of c and
      ``#unobserved_c`` the entries still without any label or pseudo-label. A class the
      model already ranks well (high AP) gets few corrections; the ``kappa`` cap ties the
      number of added positives to the evidence the class actually has.
    * the ``n_c`` unobserved entries with the **highest** ``p`` (stable: ties go to the lower
      example index) become ``Kind.CORRECTED``, target 1, for the rest of training.

    Args:
        rho: correction ratio (>= 0), a fraction of N.
        start_epoch: ``T_c``, epoch after which the correction runs (>= 1). Default 5 [ours]:
            the paper's value is lost, and five epochs give the classifier time to rank its
            classes before its guesses become labels; a fixed default means a recipe never
            needs the trainer to invent one from the run length.
        kappa: cap as a multiple of the observed positives of the class (>= 0, default 1).
        every_epoch: also run after every later epoch, not only after ``start_epoch``.

    :meth:`step` takes the AP when its caller has computed it for the epoch anyway (the
    ``opml_sp`` method, whose soft loss reads it too) and computes it otherwise.
    """

    def __init__(
        self, rho: float, *, start_epoch: int = 5, kappa: float = 1.0, every_epoch: bool = False
    ) -> None:
        for name, value in (("rho", rho), ("kappa", kappa)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.integer))
                or not (0.0 <= float(value) < math.inf)
            ):
                raise ValueError(f"OPMLCorrection {name} must be a finite number >= 0, got {value!r}")
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, (int, np.integer)) or start_epoch < 1:
            raise ValueError(
                f"OPMLCorrection start_epoch must be a 1-indexed epoch (integer >= 1), got {start_epoch!r}"
            )
        self.rho = float(rho)
        self.kappa = float(kappa)
        self.start_epoch = int(start_epoch)
        self.every_epoch = bool(every_epoch)

    def is_active(self, epoch: int) -> bool:
        """Whether the correction runs after ``epoch`` (1-indexed)."""
        return epoch == self.start_epoch or (self.every_epoch and epoch > self.start_epoch)

    def class_ap(self, probs: torch.Tensor | np.ndarray, state: LabelState) -> np.ndarray:
        """``AP_c`` of ``probs`` against the observed positives of ``state`` (float64 ``[C]``).

        Classes without an observed positive get AP 0; their correction count is 0 anyway
        through the ``kappa * N_c_obs`` cap.
        """
        from ..metrics import average_precision  # imported late: metrics is optional here

        p = as_probabilities(probs, state, where="OPMLCorrection.class_ap")
        positives = (state.observed == 1).numpy().astype(np.int8)
        return np.asarray(average_precision(p.numpy(), positives, empty="zero"), dtype=np.float64)

    def num_corrections(self, class_ap: np.ndarray, state: LabelState) -> torch.Tensor:
        """``n_c`` per class (long ``[C]``), computed in float64 in the order of the formula."""
        n = state.num_examples
        observed_pos = (state.observed == 1).sum(dim=0).tolist()
        unobserved = torch.count_nonzero(state.unobserved(), dim=0).tolist()
        return torch.tensor(
            [
                min(math.floor(self.rho * n * (1.0 - float(ap))), math.floor(self.kappa * k), u)
                for ap, k, u in zip(class_ap, observed_pos, unobserved)
            ],
            dtype=torch.long,
        )

    def step(self, probs: Probabilities, state: LabelState, epoch: int, *, class_ap: ClassAP = None) -> dict[str, Any]:
        """Run the correction after ``epoch`` if it is due.

        ``probs``: ``sigmoid(z)`` over the whole training split, row n = example n of
        ``state``. ``class_ap``: per-class AP if already computed (e.g. by the trainer's
        training-set evaluation; classes without observed positives must carry 0, not NaN);
        computed with :func:`spmlkit.metrics.average_precision` otherwise. Returns
        ``{"epoch", "active", "corrected", "corrected_per_class", "class_ap"}``.
        """
        epoch = check_epoch("OPMLCorrection.step", epoch)
        if not self.is_active(epoch):
            return {**round_record(epoch, "corrected", None, state.num_classes), "class_ap": None}
        p = as_probabilities(probs, state, where="OPMLCorrection.step")
        ap = self.class_ap(p, state) if class_ap is None else self._check_ap(class_ap, state)
        quota = self.num_corrections(ap, state)
        candidates = state.unobserved()
        # highest p first == smallest -p first; non-candidates can never be reached
        keys = torch.where(candidates, -p, torch.full((), math.inf, dtype=p.dtype))
        rows, cols = select_smallest_per_class(keys, quota)
        if rows.numel():
            state.add_corrections(rows, cols, epoch)
        return {**round_record(epoch, "corrected", cols, state.num_classes), "class_ap": ap}

    @staticmethod
    def _check_ap(class_ap: np.ndarray | torch.Tensor, state: LabelState) -> np.ndarray:
        ap = class_ap.detach().cpu().numpy() if isinstance(class_ap, torch.Tensor) else np.asarray(class_ap)
        ap = ap.astype(np.float64)
        if ap.shape != (state.num_classes,):
            raise ValueError(
                f"OPMLCorrection: class_ap must hold one AP per class, shape ({state.num_classes},), "
                f"got {ap.shape}"
            )
        bad = ~np.isfinite(ap) | (ap < 0) | (ap > 1)
        if bad.any():
            c = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"OPMLCorrection: class_ap must be finite and in [0, 1]; class {c} has {ap[c]!r}"
            )
        return ap

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters only: the corrections themselves live in the label state."""
        return {
            "rho": self.rho,
            "kappa": self.kappa,
            "start_epoch": self.start_epoch,
            "every_epoch": self.every_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that a checkpoint was made with the same settings."""
        if state != self.state_dict():
            raise ValueError(
                f"OPMLCorrection checkpoint settings {state} differ from this object's {self.state_dict()}; "
                "resume with the original settings"
            )

    def __repr__(self) -> str:
        return (
            f"OPMLCorrection(rho={self.rho}, start_epoch={self.start_epoch}, kappa={self.kappa}, "
            f"every_epoch={self.every_epoch})"
        )
