"""Asymmetric pseudo-labelling (APL), the label-state half of "EM + APL".

Zhou et al., "Acknowledging the Unknown for Multi-label Learning with Single Positive
Labels", ECCV 2022 (docs/methods.md, "em_apl"; how it differs from the EM code:
docs/protocol.md, "APL soft negatives stored inside the label matrix" and "APL inference pass
with augmentation, shuffling and unstable sorting").

After the training phase of each epoch from the warm-up epoch on, every class turns a fixed
quota of its lowest-scoring unobserved entries into *soft pseudo-negatives* whose target is
the prediction at selection time, frozen from then on. Only negatives are pseudo-labelled:
under single positive labels almost every unknown label is negative, so the lowest scores
are the safest guesses, while a wrong positive pseudo-label would be costly.

The selection is fully vectorised over examples *and* classes (one partition for the
per-class thresholds, then masks), so one step on a COCO-sized matrix (65,665 x 80) takes a
fraction of a second instead of a Python loop over classes and selected entries.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..labels import LabelState
from .base import LabelingAlgorithm, Probabilities, check_epoch, round_record

__all__ = ["APL", "as_probabilities", "select_smallest_per_class"]

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def as_probabilities(probs: torch.Tensor | np.ndarray, state: LabelState, *, where: str) -> torch.Tensor:
    """Return ``probs`` as a detached CPU float tensor after checking it against ``state``.

    The predictions must cover the whole training split in dataset-index order (row n is
    example n of the label state) and be probabilities: finite and inside ``[0, 1]``.
    float32 and float64 inputs keep their precision for ranking; other dtypes become float32.
    """
    p = probs.detach().cpu() if isinstance(probs, torch.Tensor) else torch.as_tensor(np.asarray(probs))
    if p.dtype not in (torch.float32, torch.float64):
        if p.dtype == torch.bool or not (p.is_floating_point() or p.dtype in _INT_DTYPES):
            raise TypeError(
                f"{where}: predictions must be a numeric array of probabilities, got dtype {p.dtype}"
            )
        p = p.to(torch.float32)
    if tuple(p.shape) != state.shape:
        raise ValueError(
            f"{where}: predictions have shape {tuple(p.shape)} but the label state is {state.shape} "
            "(examples x classes); pass sigmoid outputs for the whole training split in index order"
        )
    low, high = torch.aminmax(p)
    if not (float(low) >= 0.0 and float(high) <= 1.0):  # also catches NaN (comparisons are False)
        bad = ~torch.isfinite(p) | (p < 0) | (p > 1)
        r, c = (int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(
            f"{where}: predictions must be probabilities in [0, 1]; found {float(p[r, c])!r} at row "
            f"{r}, column {c} ({int(bad.sum())} bad entries). Pass sigmoid(logits), not logits"
        )
    return p


def select_smallest_per_class(keys: torch.Tensor, quota: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the ``quota[c]`` smallest entries of every column of ``keys``, stably.

    ``keys`` is ``[N, C]`` (entries that must never be chosen set to ``+inf``), ``quota`` a
    long ``[C]`` with ``quota[c] <=`` the number of finite keys of column c. Equal keys are
    taken in increasing row order, exactly as a stable ascending sort would take them.

    Why not sort: a stable sort of every column costs O(N log N) per class and dominates
    the time at COCO size. Only the threshold ``v_c`` (the ``quota[c]``-th smallest key) is
    needed: every key ``< v_c`` is chosen, and among keys ``== v_c`` the first
    ``quota[c] - #{key < v_c}`` in row order (a running count gives that rank). A single
    ``np.partition`` over all classes, with the distinct quotas as pivots, puts every
    ``v_c`` in place in O(N log #distinct quotas) per class.

    Returns ``(rows, cols)`` long tensors, ordered by class then row.
    """
    quota = quota.to(torch.long)
    active = quota > 0
    if not bool(active.any()):
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty
    kt = keys.t().contiguous()  # [C, N]: each class's keys contiguous
    pivots = np.unique(quota[active].numpy() - 1)
    placed = torch.from_numpy(np.partition(kt.numpy(), pivots, axis=1))
    threshold = placed.gather(1, (quota - 1).clamp(min=0).unsqueeze(1))  # [C, 1]
    below = kt < threshold
    at = kt == threshold
    room = (quota - torch.count_nonzero(below, dim=1)).unsqueeze(1)  # how many ties to take
    take_tie = at & (torch.cumsum(at, dim=1, dtype=torch.int32) <= room)
    chosen = (below | take_tie) & active.unsqueeze(1)
    cols, rows = torch.nonzero(chosen, as_tuple=True)
    return rows, cols


class APL(LabelingAlgorithm):
    """Asymmetric pseudo-labelling of the unobserved entries (EM + APL; docs/methods.md, "em_apl").

    Quota. Once, ``U_c0 = #{n : Y_nc = 0}`` on the observed training labels, and
    ``K_c = floor(theta * U_c0 / (T - T_w))``. Over the ``T - T_w`` useful rounds (after
    epochs ``T_w .. T-1``) at most a fraction ``theta`` of each class's unobserved entries
    become pseudo-negatives, an even share per round. ``U_c0`` is frozen at the start, as in
    the reference code, so the share does not shrink as entries get labelled; it is saved
    by :meth:`state_dict` so a resumed run keeps the same quotas.

    Round (:meth:`step`, after the training phase of epoch ``e``, 1-indexed): if
    ``T_w <= e < T``, per class c the candidates are the entries still ``UNOBSERVED`` in the
    label state (observed positives and negatives, earlier pseudo-negatives and corrections
    are never touched); they are ranked ascending by ``p_nc`` with a stable order (ties go
    to the lower example index) and the first ``min(K_c, #candidates_c)`` become
    pseudo-negatives with frozen soft target ``S_nc = p_nc`` (float32).

    The reference code also runs a round after epoch ``T``, which cannot influence training
    (there is no epoch after it). Here ``e == T`` is accepted and does nothing, so a trainer
    may call :meth:`step` after every epoch; ask :meth:`is_active` first to skip the
    inference pass when nothing would happen.

    Args:
        theta: fraction of each class's unobserved entries pseudo-labelled over the whole
            run, in ``(0, 1]`` (paper: 0.9).
        warmup_epochs: ``T_w``, the first epoch after which a round runs (>= 1).
        num_epochs: ``T``, the number of training epochs (> ``warmup_epochs``). A *run
            argument*: the trainer fills it with the run's length, so it is not a
            hyperparameter (the default only serves direct construction).
    """

    run_arguments = ("num_epochs",)

    def __init__(self, theta: float = 0.9, warmup_epochs: int = 5, num_epochs: int = 10) -> None:
        if not (isinstance(theta, (int, float)) and 0.0 < float(theta) <= 1.0):
            raise ValueError(f"APL theta must be a fraction in (0, 1], got {theta!r}")
        for name, value in (("warmup_epochs", warmup_epochs), ("num_epochs", num_epochs)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(
                    f"APL {name} must be a positive integer (epochs are 1-indexed), got {value!r}"
                )
        if warmup_epochs >= num_epochs:
            raise ValueError(
                f"APL needs warmup_epochs < num_epochs so that at least one useful round runs; got "
                f"warmup_epochs={warmup_epochs}, num_epochs={num_epochs}"
            )
        self.theta = float(theta)
        self.warmup_epochs = int(warmup_epochs)
        self.num_epochs = int(num_epochs)
        self.initial_unobserved: torch.Tensor | None = None  # U_c0, long [C]

    # ------------------------------------------------------------------ quotas
    @property
    def rounds(self) -> int:
        """Number of rounds that influence training, ``T - T_w``."""
        return self.num_epochs - self.warmup_epochs

    def initialize(self, state: LabelState) -> None:
        """Fix ``U_c0`` from the observed labels of ``state`` (idempotent after the first call)."""
        if self.initial_unobserved is None:
            self.initial_unobserved = (state.observed == 0).sum(dim=0).to(torch.long)
        elif self.initial_unobserved.numel() != state.num_classes:
            raise ValueError(
                f"APL was initialised for {self.initial_unobserved.numel()} classes but the label state "
                f"has {state.num_classes}; use one APL object per training run"
            )

    @property
    def quota(self) -> torch.Tensor:
        """``K_c = floor(theta * U_c0 / (T - T_w))`` per class (long ``[C]``).

        Evaluated in float64 in the reference's order (``theta * U`` first), so the integer
        quotas match the official code's ``int(...)`` exactly.
        """
        if self.initial_unobserved is None:
            raise RuntimeError("APL quotas are unknown until initialize(state) or the first step() call")
        u = self.initial_unobserved.tolist()
        return torch.tensor([math.floor(self.theta * n / self.rounds) for n in u], dtype=torch.long)

    def is_active(self, epoch: int) -> bool:
        """Whether the round after ``epoch`` (1-indexed) changes the label state."""
        return self.warmup_epochs <= epoch < self.num_epochs

    # ------------------------------------------------------------------ the round
    def step(self, probs: Probabilities, state: LabelState, epoch: int) -> dict[str, Any]:
        """Run the round after the training phase of ``epoch`` (1-indexed).

        ``probs`` are the predictions ``sigmoid(z)`` over the whole training split, row n =
        example n of ``state``.
        Returns ``{"epoch", "active", "selected", "selected_per_class"}`` (int, bool, int,
        long tensor ``[C]``).
        """
        epoch = check_epoch("APL.step", epoch)
        if epoch > self.num_epochs:
            raise ValueError(
                f"APL.step: epoch {epoch} is past num_epochs={self.num_epochs}; the quotas assume "
                f"{self.rounds} rounds, so set num_epochs to the real training length"
            )
        self.initialize(state)
        if not self.is_active(epoch):
            return round_record(epoch, "selected", None, state.num_classes)
        p = as_probabilities(probs, state, where="APL.step")
        candidates = state.unobserved()
        take = torch.minimum(self.quota, torch.count_nonzero(candidates, dim=0))
        keys = torch.where(candidates, p, torch.full((), math.inf, dtype=p.dtype))
        rows, cols = select_smallest_per_class(keys, take)
        if rows.numel():
            state.add_pseudo_negatives(rows, cols, p[rows, cols].to(torch.float32), epoch)
        return round_record(epoch, "selected", cols, state.num_classes)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters and the frozen ``U_c0`` (None before initialisation)."""
        u0 = None if self.initial_unobserved is None else self.initial_unobserved.clone()
        return {
            "theta": self.theta,
            "warmup_epochs": self.warmup_epochs,
            "num_epochs": self.num_epochs,
            "initial_unobserved": u0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``U_c0``; the hyperparameters must match the checkpoint's."""
        mine = (self.theta, self.warmup_epochs, self.num_epochs)
        theirs = (float(state["theta"]), int(state["warmup_epochs"]), int(state["num_epochs"]))
        if mine != theirs:
            raise ValueError(
                f"APL checkpoint was made with (theta, warmup_epochs, num_epochs) = {theirs} but this "
                f"APL has {mine}; the quotas would differ, so resume with the original settings"
            )
        u0 = state["initial_unobserved"]
        self.initial_unobserved = None if u0 is None else torch.as_tensor(u0, dtype=torch.long).clone()

    def __repr__(self) -> str:
        return f"APL(theta={self.theta}, warmup_epochs={self.warmup_epochs}, num_epochs={self.num_epochs})"
