"""The label state: observed labels plus everything label-state algorithms add to them.

One object, one owner (the training loop). The observed matrix is never modified; pseudo
negatives (APL), permanent positive corrections (LL-Cp, OPML's AP-based correction) and
their soft targets live beside it with a *kind* per entry (docs/protocol.md, "Label
encoding", and the quirks "APL soft negatives stored inside the label matrix" and "Corrected
labels indistinguishable from annotated ones"). This avoids the official EM code's encoding of soft negatives as ``-p`` inside the observed
matrix, where a prediction of exactly 0 turns back into "unobserved" and an observed
negative ``-1`` reads as a soft target of 1.

The whole state round-trips through :meth:`LabelState.state_dict` so checkpoints resume
exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch


__all__ = ["Kind", "LabelState", "LabelBatch", "PseudoLabels", "RunLabels", "pseudo_label_stats", "validate_observed"]


class Kind(IntEnum):
    """What an entry of the label state is. Stored as uint8 per entry."""

    UNOBSERVED = 0
    POSITIVE = 1  # annotated (observed) positive
    NEGATIVE = 2  # annotated (observed) negative
    CORRECTED = 3  # unobserved entry permanently corrected to positive
    PSEUDO_NEGATIVE = 4  # unobserved entry with a soft pseudo-negative target (APL)


@dataclass(frozen=True)
class PseudoLabels:
    """Pseudo-labels of a batch, kept apart from the observed labels (docs/protocol.md, "Label encoding").

    ``mask`` marks entries that carry a pseudo-label (bool ``[B, C]``) and ``target`` holds
    their soft target in ``[0, 1]`` (float ``[B, C]``; ignored where ``mask`` is False).
    """

    mask: torch.Tensor
    target: torch.Tensor


@dataclass(frozen=True)
class LabelBatch:
    """What the loss sees for a batch: effective labels and pseudo-labels."""

    labels: torch.Tensor  # float [B, C] in {-1, 0, 1}; corrected entries are 1
    pseudo: PseudoLabels  # soft pseudo-negatives
    index: torch.Tensor  # long [B]


def validate_observed(observed: np.ndarray | torch.Tensor, *, where: str = "observed labels") -> np.ndarray:
    """Check an observed label matrix and return it as an int8 ``[N, C]`` array.

    Accepts any integer or float array whose values are exactly -1, 0 or 1.
    """
    arr = observed.detach().cpu().numpy() if isinstance(observed, torch.Tensor) else np.asarray(observed)
    if arr.ndim != 2:
        raise ValueError(f"{where} must be a 2-D [examples, classes] matrix, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{where} is empty (shape {arr.shape})")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{where} must be numeric, got dtype {arr.dtype}")
    bad = ~np.isin(arr, (-1, 0, 1))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"{where} may only contain -1 (observed negative), 0 (unobserved) and 1 (observed "
            f"positive); found {arr[r, c].item()!r} at row {r}, column {c} ({int(bad.sum())} bad entries)"
        )
    return arr.astype(np.int8)


class LabelState:
    """Observed labels of the training examples plus pseudo-labels and corrections.

    Attributes (all CPU tensors, shape ``[N, C]``):
      * ``observed``: int8 in {-1, 0, 1}, never modified;
      * ``kind``: uint8 :class:`Kind` per entry;
      * ``target``: float32 soft target (1 for positives and corrections, the recorded
        probability for soft pseudo-negatives, 0 elsewhere);
      * ``epoch``: int16 epoch at which a pseudo-label or correction was made (-1 if none),
        so pseudo-label accuracy and counts can be reported per epoch.
    """

    def __init__(self, observed: np.ndarray | torch.Tensor):
        obs = torch.from_numpy(validate_observed(observed))
        self.observed = obs
        self.kind = torch.zeros(obs.shape, dtype=torch.uint8)
        self.kind[obs == 1] = Kind.POSITIVE
        self.kind[obs == -1] = Kind.NEGATIVE
        self.target = (obs == 1).to(torch.float32)
        self.epoch = torch.full(obs.shape, -1, dtype=torch.int16)

    # ------------------------------------------------------------------ queries
    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.observed.shape)  # type: ignore[return-value]

    @property
    def num_examples(self) -> int:
        return self.observed.shape[0]

    @property
    def num_classes(self) -> int:
        return self.observed.shape[1]

    def observed_positives(self) -> torch.Tensor | None:
        """Bool mask of the annotated positives (None when there are none); the observed labels
        never change, so it is computed once."""
        if not hasattr(self, "_observed_positives"):
            pos = self.observed == 1
            self._observed_positives = pos if bool(pos.any()) else None
        return self._observed_positives

    def observed_positive_index(self) -> torch.Tensor | None:
        """Flat (row-major) positions of the annotated positives in ``[N * C]``, in order (None
        when there are none): what :meth:`observed_positives` selects, as an index computed once,
        so that a gather replaces a masked selection every epoch."""
        if not hasattr(self, "_observed_positive_index"):
            pos = self.observed_positives()
            self._observed_positive_index = None if pos is None else pos.reshape(-1).nonzero().squeeze(1)
        return self._observed_positive_index

    def unobserved(self) -> torch.Tensor:
        """Bool mask of entries still carrying no label, pseudo or otherwise."""
        return self.kind == Kind.UNOBSERVED

    def effective_labels(self) -> torch.Tensor:
        """Float {-1, 0, 1} matrix the losses see: observed labels plus corrections."""
        labels = self.observed.to(torch.float32)
        labels[self.kind == Kind.CORRECTED] = 1.0
        return labels

    def batch(self, index: torch.Tensor | np.ndarray) -> LabelBatch:
        """Labels and pseudo-labels for the examples ``index`` (in that order).

        Three gathers from whole-set tables (:meth:`_tables`) rather than a gather and a
        selection per matrix on every step: the same values, a third of the operations."""
        idx = torch.as_tensor(index, dtype=torch.long)
        labels, pseudo_mask, target = self._tables()
        return LabelBatch(labels=labels[idx], pseudo=PseudoLabels(pseudo_mask[idx], target[idx]), index=idx)

    def _tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(effective labels, pseudo-label mask, pseudo targets)`` of every example, ``[N, C]``.

        Kept until the state changes: the cache remembers the tensors it was built from and
        their version counters, which torch bumps on every in-place write (an update method, a
        write through a view, :meth:`load_state_dict` replacing them), so it is never stale.
        Selecting then gathering gives exactly what gathering then selecting gives."""
        sources = (self.kind, self.target, self.observed)
        versions = tuple(t._version for t in sources)
        cached = getattr(self, "_cached_tables", None)
        if cached is None or cached[1] != versions or any(a is not b for a, b in zip(cached[0], sources)):
            cached = (sources, versions, _label_tables(self.observed, self.kind, self.target))
            self._cached_tables = cached
        return cached[2]

    def count(self, kind: Kind) -> int:
        return int((self.kind == kind).sum())

    # ------------------------------------------------------------------ updates
    def add_pseudo_negatives(
        self, rows: torch.Tensor, cols: torch.Tensor, targets: torch.Tensor, epoch: int
    ) -> None:
        """Record soft pseudo-negatives at ``(rows, cols)`` with frozen soft targets."""
        rows, cols = torch.as_tensor(rows, dtype=torch.long), torch.as_tensor(cols, dtype=torch.long)
        self._require_unobserved(rows, cols, "pseudo-negative")
        self.kind[rows, cols] = Kind.PSEUDO_NEGATIVE
        self.target[rows, cols] = torch.as_tensor(targets, dtype=torch.float32)
        self.epoch[rows, cols] = epoch

    def add_corrections(self, rows: torch.Tensor, cols: torch.Tensor, epoch: int) -> None:
        """Permanently turn unobserved entries ``(rows, cols)`` into positives."""
        rows, cols = torch.as_tensor(rows, dtype=torch.long), torch.as_tensor(cols, dtype=torch.long)
        self._require_unobserved(rows, cols, "correction")
        self.kind[rows, cols] = Kind.CORRECTED
        self.target[rows, cols] = 1.0
        self.epoch[rows, cols] = epoch

    def correct_mask(self, index: torch.Tensor, mask: torch.Tensor, epoch: int) -> int:
        """Apply a batch-level correction mask (``[B, C]`` bool, rows = ``index``).

        Entries that are not unobserved any more are skipped (a duplicate index in a batch
        or an entry already pseudo-labelled). Returns the number of new corrections.
        """
        run, rows, cols = _correct(self.kind[None], self.target[None], self.epoch[None],
                                   torch.as_tensor(index, dtype=torch.long)[None], mask[None], epoch)
        # an example twice in the batch counts once
        return int(torch.unique(rows * self.num_classes + cols).numel())

    def _require_unobserved(self, rows: torch.Tensor, cols: torch.Tensor, what: str) -> None:
        if rows.shape != cols.shape:
            raise ValueError(f"{what}: rows and cols must have the same shape")
        bad = self.kind[rows, cols] != Kind.UNOBSERVED
        if bad.any():
            i = int(torch.nonzero(bad)[0])
            raise ValueError(
                f"{what} at ({int(rows[i])}, {int(cols[i])}) targets an entry of kind "
                f"{Kind(int(self.kind[rows[i], cols[i]])).name}; only unobserved entries can "
                f"receive pseudo-labels or corrections"
            )

    # ------------------------------------------------------------------ reporting
    def pseudo_label_stats(self, truth: np.ndarray | torch.Tensor) -> dict[str, float]:
        """Counts and accuracy of every pseudo-label made so far against the truth (0/1).

        Accuracy is the fraction of pseudo-labels whose hard value matches the truth
        (docs/protocol.md, "Metrics"): pseudo-negatives are right where the truth is 0, corrections
        where it is 1. ``nan`` when there are none.
        """
        return pseudo_label_stats([self], truth)[0]

    def _cached_stats_for(self, truth: np.ndarray | torch.Tensor) -> dict[str, float] | None:
        # asked every epoch; the answer changes only when the kinds do (torch bumps the version
        # counter on every in-place write, and RunLabels gives a state back the tensors it had
        # when nothing wrote them), so it is kept until then
        cached = getattr(self, "_cached_stats", None)
        if cached is not None and cached[0] == (id(truth), self.kind._version) and cached[1] is self.kind:
            return cached[2]
        return None

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "observed": self.observed.clone(),
            "kind": self.kind.clone(),
            "target": self.target.clone(),
            "epoch": self.epoch.clone(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if tuple(state["observed"].shape) != self.shape or not torch.equal(state["observed"], self.observed):
            raise ValueError(
                "checkpoint label state was made for different observed labels "
                f"(shape {tuple(state['observed'].shape)} vs {self.shape}); was the dataset, "
                "split or observation setting changed since the checkpoint?"
            )
        self.kind = state["kind"].clone()
        self.target = state["target"].clone()
        self.epoch = state["epoch"].clone()


def pseudo_label_stats(states: list[LabelState], truth: np.ndarray | torch.Tensor | None
                       ) -> list[dict[str, float]]:
    """:meth:`LabelState.pseudo_label_stats` of each of ``states`` (label states of one shape),
    counted for all at once: a few operations on their stacked kinds instead of a few per state,
    and integer counts, so each state's numbers are its own. A state whose kinds did not change
    since it was last asked (with this ``truth``) answers from its cache.

    ``truth`` None (a user's data, whose training rows have only their observed labels): the
    counts of pseudo-negatives and corrections, which need no truth, and NaN accuracies."""
    out = [state._cached_stats_for(truth) for state in states]
    todo = [r for r, stats in enumerate(out) if stats is None]
    if todo:
        y = None if truth is None else torch.as_tensor(np.asarray(truth)).to(torch.int8)
        for r in todo:
            if y is not None and tuple(y.shape) != states[r].shape:
                raise ValueError(f"truth shape {tuple(y.shape)} does not match label state {states[r].shape}")
        kind = torch.stack([states[r].kind for r in todo])
        neg, cor = kind == Kind.PSEUDO_NEGATIVE, kind == Kind.CORRECTED
        right = ([(neg & (y == 0)).sum((1, 2)), (cor & (y == 1)).sum((1, 2))] if y is not None
                 else [torch.full((len(todo),), -1), torch.full((len(todo),), -1)])  # -1: unknown without a truth
        counts = torch.stack([neg.sum((1, 2)), cor.sum((1, 2)), *right], dim=1).tolist()
        for r, (n_neg, n_cor, right_neg, right_cor) in zip(todo, counts):
            total, known = n_neg + n_cor, y is not None
            out[r] = {
                "pseudo_negatives": float(n_neg),
                "pseudo_negative_accuracy": right_neg / n_neg if n_neg and known else float("nan"),
                "corrections": float(n_cor),
                "correction_accuracy": right_cor / n_cor if n_cor and known else float("nan"),
                "pseudo_label_accuracy": (right_neg + right_cor) / total if total and known else float("nan"),
            }
            # the truth held, so that its id stays its own
            states[r]._cached_stats = ((id(truth), states[r].kind._version), states[r].kind, out[r], truth)
    return [dict(stats) for stats in out]


def _label_tables(observed: torch.Tensor, kind: torch.Tensor, target: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(effective labels, pseudo-label mask, pseudo targets)`` of label matrices ``[..., N, C]``.

    Selecting then gathering gives exactly what gathering then selecting gives, so a batch is
    read from these whole-set tables in one gather each. ``torch.where`` rather than masked
    assignment: no data-dependent ``nonzero()``."""
    labels = torch.where(kind == Kind.CORRECTED, 1.0, observed.to(torch.float32))
    pseudo_mask = kind == Kind.PSEUDO_NEGATIVE
    return labels, pseudo_mask, torch.where(pseudo_mask, target, torch.zeros((), dtype=torch.float32))


def _correct(kind: torch.Tensor, target: torch.Tensor, epochs: torch.Tensor, index: torch.Tensor,
             mask: torch.Tensor, epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Turn the unobserved entries under ``mask`` (``[R, B, C]``, rows ``index`` ``[R, B]``) of R
    label states (``kind``, ``target``, ``epochs``: ``[R, N, C]``, written in place) into permanent
    positives; entries not unobserved any more are skipped. Returns the ``(run, row, class)``
    positions written (an example twice in a batch appears twice)."""
    run, b, c = torch.nonzero(mask.detach().cpu(), as_tuple=True)
    rows = index.cpu()[run, b]
    keep = kind[run, rows, c] == Kind.UNOBSERVED
    run, rows, c = run[keep], rows[keep], c[keep]
    if rows.numel():
        kind[run, rows, c] = Kind.CORRECTED
        target[run, rows, c] = 1.0
        epochs[run, rows, c] = epoch
    return run, rows, c


class RunLabels:
    """The label states of R runs, read and corrected as one, for the length of an epoch (a
    context manager): a step's labels in one to three gathers and its corrections in one write,
    whatever R.

    Each run keeps its own :class:`LabelState` (its label algorithm updates it as in a solo
    run). On entry the runs' ``kind``, ``target`` and ``epoch`` matrices are copied into
    ``[R, N, C]`` tensors and each state holds views of its row, so the state a run's code sees
    is always current; on exit each state gets its own tensors back, with what the epoch wrote. The loop
    (docs/architecture.md, "Many runs at once") reads ``[R, B, C]`` labels, pseudo-label masks
    and targets from whole-set tables of all runs (:func:`_label_tables`), rebuilt only when a
    state changed: a write through any run's view bumps the stacked tensor's version counter.
    A solo run is R = 1 of the same code. The states' tensors must not be replaced while the
    epoch lasts (``load_state_dict`` is for checkpoints and the best epoch, between epochs).
    A single state is read through views of its own tensors, without a copy.
    """

    def __init__(self, states: list[LabelState]) -> None:
        if not states:
            raise ValueError("RunLabels needs at least one label state")
        self.states = states
        self._key: tuple[int, int] | None = None
        self._tables_all: tuple[torch.Tensor, ...] = ()

    def __enter__(self) -> RunLabels:
        states = self.states
        if len(states) == 1:  # the state's own tensors, seen with a leading run dimension: no copy
            state = states[0]
            self.observed, self.kind, self.target, self.epoch = (
                t[None] for t in (state.observed, state.kind, state.target, state.epoch))
        else:
            self._own = [(state.kind, state.target, state.epoch) for state in states]
            self.observed = torch.stack([state.observed for state in states])
            self.kind, self.target, self.epoch = (torch.stack([getattr(state, name) for state in states])
                                                  for name in ("kind", "target", "epoch"))
            self._entry_versions = (self.kind._version, self.target._version, self.epoch._version)
            for r, state in enumerate(states):
                state.kind, state.target, state.epoch = self.kind[r], self.target[r], self.epoch[r]
        runs, n = self.kind.shape[:2]
        self._offsets = torch.arange(0, runs * n, n).unsqueeze(1)
        self._key = None
        return self

    def __exit__(self, *exc: object) -> None:
        if len(self.states) == 1:
            return
        stacked = (self.kind, self.target, self.epoch)
        for r, (state, own) in enumerate(zip(self.states, self._own)):
            # each state gets its own tensors back, updated where the epoch wrote (LL-Cp). A write
            # to one run's row moves the whole table's version, so a row is compared before it is
            # copied: a state nothing wrote keeps its tensors untouched, and what is cached on them
            # stays valid
            for name, tensor, table, version in zip(("kind", "target", "epoch"), own, stacked, self._entry_versions):
                if table._version != version and not torch.equal(tensor, table[r]):
                    tensor.copy_(table[r])
                setattr(state, name, tensor)

    def _tables(self) -> tuple[torch.Tensor, ...]:
        key = (self.kind._version, self.target._version)
        if key != self._key:
            self._tables_all = _label_tables(self.observed, self.kind, self.target)
            self._any_pseudo = bool(self._tables_all[1].any())
            self._key = key
        return self._tables_all

    def batch(self, index: torch.Tensor, device: torch.device | str = "cpu") -> LabelBatch:
        """Row ``r`` of ``index`` (``[R, B]``) read from run ``r``'s state: a :class:`LabelBatch`
        of ``[R, B, C]`` tensors (row r equal to ``states[r].batch(index[r])``). The tables live
        on the CPU, so the gathered tensors do; the pseudo-labels of a step without any are zeros
        made on ``device``, where the loss reads them, rather than copied there."""
        idx = torch.as_tensor(index, dtype=torch.long)
        runs, batch = idx.shape
        labels, mask, target = self._tables()
        n, c = labels.shape[1:]
        flat = (idx + self._offsets).reshape(-1)

        def gather(table: torch.Tensor) -> torch.Tensor:
            return torch.index_select(table.view(runs * n, c), 0, flat).view(runs, batch, c)

        if self._any_pseudo:
            pseudo = PseudoLabels(gather(mask), gather(target))
        else:  # no run has a pseudo-label (most methods, and APL before its first): zeros, not two gathers
            pseudo = PseudoLabels(torch.zeros((runs, batch, c), dtype=torch.bool, device=device),
                                  torch.zeros((runs, batch, c), device=device))
        return LabelBatch(labels=gather(labels), pseudo=pseudo, index=idx)

    def correct(self, index: torch.Tensor, mask: torch.Tensor, epoch: int) -> None:
        """Each run's :meth:`LabelState.correct_mask` of one step (``mask`` ``[R, B, C]``, rows
        ``index`` ``[R, B]``: LL-Cp's corrections), as one write into the stacked states.

        The whole-set tables, if they were current, are brought up to date in place rather than
        rebuilt (LL-Cp corrects on every step): a corrected entry was unobserved, so only its
        effective label changes, to 1; it carries no pseudo-label (:func:`_label_tables`)."""
        current = self._key == (self.kind._version, self.target._version)
        run, rows, cols = _correct(self.kind, self.target, self.epoch, torch.as_tensor(index, dtype=torch.long),
                                   mask, epoch)
        if current and rows.numel():
            self._tables_all[0][run, rows, cols] = 1.0
            self._key = (self.kind._version, self.target._version)
