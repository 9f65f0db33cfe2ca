"""The contract every between-epoch label algorithm (APL, OPML correction) follows.

A label algorithm runs after the training phase of an epoch, reads the predictions over the
whole training split and writes pseudo-labels or corrections into the
:class:`~spmlkit.labels.LabelState`. The trainer drives every algorithm with the same calls
(:meth:`LabelingAlgorithm.initialize`, :meth:`~LabelingAlgorithm.is_active`,
:meth:`~LabelingAlgorithm.step`, ``state_dict``/``load_state_dict``) and learns what an
algorithm needs from its class attributes (``run_arguments``), never by inspecting signatures.

Constructor arguments split in two: *run arguments* (``run_arguments``), which the trainer
fills from the run (APL's total number of epochs), and *hyperparameters*, everything else,
which recipes and users set. :func:`hyperparameters` and :func:`create` read both from
``__init__``, so there is no second list to keep in sync.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import torch

from ..labels import LabelState

__all__ = ["ClassAP", "LabelingAlgorithm", "Probabilities", "check_epoch", "round_record"]

#: predictions ``sigmoid(z)`` over the whole training split ``[N, C]``, tensor or array
Probabilities = torch.Tensor | np.ndarray
#: per-class AP ``[C]`` of those predictions against the observed positives, when known
ClassAP = np.ndarray | torch.Tensor | None


class LabelingAlgorithm(ABC):
    """Base class of the label-state algorithms run between epochs.

    Subclasses declare what they need from the trainer through the class attributes and
    implement :meth:`is_active`, :meth:`step`, :meth:`state_dict` and :meth:`load_state_dict`.
    """

    #: constructor arguments the trainer fills from the run (e.g. APL's ``num_epochs``);
    #: never hyperparameters
    run_arguments: ClassVar[tuple[str, ...]] = ()

    def initialize(self, state: LabelState) -> None:
        """Read what the algorithm needs from the label state before training. No-op by default."""

    @abstractmethod
    def is_active(self, epoch: int) -> bool:
        """Whether the round after ``epoch`` (1-indexed) would change the label state.

        The trainer asks first so it can skip the inference pass over the training split.
        """

    @abstractmethod
    def step(self, probs: Probabilities, state: LabelState, epoch: int) -> dict[str, Any]:
        """Run the round after ``epoch`` on ``probs`` (``sigmoid(z)``, whole training split).

        Returns a record of the round; its scalar entries are what the trainer logs.
        """

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Whatever a resumed run needs to continue exactly (labels live in the label state)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; raise if the checkpoint was made with other settings."""


def check_epoch(where: str, epoch: Any) -> int:
    """``epoch`` as an int after checking it is a 1-indexed epoch number."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 1:
        raise ValueError(f"{where}: epoch must be a 1-indexed integer, got {epoch!r}")
    return int(epoch)


def round_record(epoch: int, what: str, cols: torch.Tensor | None, num_classes: int) -> dict[str, Any]:
    """The record of one round: ``{"epoch", "active", what, what + "_per_class"}``.

    ``cols`` are the class indices of the entries the round changed, or None for a round
    that did not run (inactive). One builder keeps the records of all algorithms alike.
    """
    if cols is None:
        counts = torch.zeros(num_classes, dtype=torch.long)
        return {"epoch": int(epoch), "active": False, what: 0, f"{what}_per_class": counts}
    counts = torch.bincount(cols, minlength=num_classes)
    return {"epoch": int(epoch), "active": True, what: int(cols.numel()), f"{what}_per_class": counts}
