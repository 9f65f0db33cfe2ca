"""The one training loop: epochs of mini-batches, label-state updates, validation, selection.

Feature runs and image runs differ only in where batches and predictions come from (a
:class:`~spmlkit.training.sources.DataSource`), so the loop is method-agnostic: a method's
behaviour lives in :class:`~spmlkit.training.components.MethodComponents`.

Selection (docs/protocol.md, "Training protocols"): the epoch with the best validation mAP is
kept (a snapshot of model, loss state and label state) and restored at the end. The
:class:`StoppingRule` decides when to stop early: ``patience`` epochs without a gain larger
than ``min_delta`` (``patience=0`` is EM's rule: stop at the first epoch that is not strictly
better), and/or ``stop_drop`` (LL / GR: stop once validation mAP falls more than
``stop_drop`` below the best). Without validation data (``val_frac=0``) every epoch counts as
the best so far, so the last epoch is kept.

The training step does no device-to-host synchronisation: the running loss is summed on the
device (in float64, which equals summing Python floats) and read once per epoch.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from .. import metrics
from ..labels import LabelState
from .components import MethodComponents
from .distributed import Distributed
from .sources import DataSource

__all__ = ["LoopParts", "LoopHooks", "LoopState", "LoopResult", "StoppingRule", "run_loop"]


@dataclass
class LoopParts:
    """Everything one epoch touches.

    ``model`` is the plain module (its state is what checkpoints hold); ``train_model`` is what
    the training step calls (the same module, or its DistributedDataParallel wrapper).
    ``global_batch``: the loss sees the whole global batch (gathered logits) rather than this
    process's slice (:mod:`spmlkit.training.distributed`); in one process the two coincide.
    ``optimizer`` is None for the runs of a stacked group (:mod:`spmlkit.training.stacked`),
    whose steps are taken together; they use these parts for evaluation and snapshots only.
    """

    model: nn.Module
    source: DataSource
    state: LabelState
    components: MethodComponents
    optimizer: torch.optim.Optimizer | None
    generator: torch.Generator
    device: torch.device | str = "cpu"
    autocast: Callable[[], Any] | None = None
    scaler: Any = None
    dist: Distributed = field(default_factory=Distributed)
    train_model: nn.Module | None = None
    global_batch: bool = True

    def __post_init__(self) -> None:
        if self.train_model is None:
            self.train_model = self.model

    def mixup_forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The extra forward pass of PU-MLC's mixup term over ``inputs`` (the whole global batch's
        mixed inputs in global mode: each process forwards its slice, the logits are gathered)."""
        if not (self.dist.enabled and self.global_batch):
            return self.model(inputs)
        return self.dist.gather_rows(self.model(inputs[self.dist.shard(len(inputs))]).float(), len(inputs))


@dataclass
class LoopHooks:
    """Optional callbacks: a finished epoch's record, the loop state after it, a finished step."""

    on_epoch: Callable[[dict[str, float]], None] | None = None
    on_epoch_end: Callable[["LoopState"], None] | None = None
    on_step: Callable[[int], None] | None = None


@dataclass
class LoopState:
    """Everything needed to continue a run exactly where it stopped (see the run folder)."""

    epoch: int = 0  # last completed epoch
    history: list[dict[str, float]] = field(default_factory=list)
    best_val_map: float = -math.inf
    best_epoch: int = 0
    best_snapshot: dict[str, Any] | None = None
    bad_epochs: int = 0
    stopped_early: bool = False

    def progress(self) -> dict[str, Any]:
        """The JSON-able part (everything but the snapshot)."""
        return {"epoch": self.epoch, "history": self.history, "best_val_map": self.best_val_map,
                "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs, "stopped_early": self.stopped_early}


@dataclass
class LoopResult:
    best_epoch: int
    best_val_map: float
    history: list[dict[str, float]]
    stopped_early: bool


@dataclass(frozen=True)
class StoppingRule:
    patience: int | None = None
    min_delta: float = 0.0
    stop_drop: float | None = None

    def update(self, ls: LoopState, val_map: float) -> bool:
        """Record ``val_map`` of the epoch just finished; True if it is the new best.

        A NaN ``val_map`` (no validation data) counts as a new best: the last epoch is kept.
        """
        no_validation = math.isnan(val_map)
        improved = no_validation or ls.best_snapshot is None or val_map > ls.best_val_map + self.min_delta
        if improved:
            ls.best_val_map, ls.bad_epochs = val_map, 0
        else:
            ls.bad_epochs += 1
            if self.patience is not None and ls.bad_epochs > self.patience:
                ls.stopped_early = True
        if self.stop_drop is not None and val_map < ls.best_val_map - self.stop_drop:
            ls.stopped_early = True
        return improved


def snapshot(parts: LoopParts) -> dict[str, Any]:
    return {
        "model": copy.deepcopy(parts.model.state_dict()),
        "components": copy.deepcopy(parts.components.state_dict()),
        "label_state": parts.state.state_dict(),
    }


def restore(parts: LoopParts, snap: dict[str, Any]) -> None:
    parts.model.load_state_dict(snap["model"])
    parts.components.load_state_dict(snap["components"])
    parts.state.load_state_dict(snap["label_state"])


def train_epoch(parts: LoopParts, epoch: int, on_step: Callable[[int], None] | None = None) -> dict[str, float]:
    """One pass over the shuffled training rows; returns the epoch's loss and throughput."""
    t0 = time.perf_counter()
    model, comp, state = parts.model, parts.components, parts.state
    model.train()
    total = torch.zeros((), dtype=torch.float64, device=parts.device)
    steps = seen = 0
    for x, idx in parts.source.train_batches(parts.generator):
        x = x.to(parts.device, non_blocking=True)
        with parts.autocast() if parts.autocast else _null():
            logits = parts.train_model(x).float()
        if parts.global_batch:  # the loss of the whole global batch (identity in one process)
            logits = parts.dist.gather_rows(logits, len(idx))
            if comp.method.mixup:
                x = parts.dist.gather_rows(x, len(idx))
            batch = state.batch(idx)
        else:  # the loss of this process's slice, averaged over processes by DDP
            batch = state.batch(idx[parts.dist.shard(len(idx))])
        loss = comp.training_loss(parts.mixup_forward, x, logits, batch, parts.generator, model.parameters)
        _step(parts, loss)
        comp.after_step(state, batch, epoch)
        total += loss.detach().double()
        steps += 1
        seen += len(idx)
        if on_step is not None:
            on_step(len(idx))
    seconds = time.perf_counter() - t0
    return {"train_loss": float(total) / max(steps, 1), "train_seconds": seconds,
            "images_per_second": seen / seconds if seconds > 0 else float("nan")}


def _step(parts: LoopParts, loss: torch.Tensor) -> None:
    parts.optimizer.zero_grad(set_to_none=True)
    if parts.scaler is not None:
        parts.scaler.scale(loss).backward()
        parts.scaler.step(parts.optimizer)
        parts.scaler.update()
    else:
        loss.backward()
        parts.optimizer.step()


def end_of_epoch(parts: LoopParts, epoch: int, val_targets: np.ndarray, truth_train: np.ndarray | None) -> dict[str, float]:
    """Label-state algorithm on the whole training set, then validation mAP."""
    record: dict[str, float] = {}
    comp = parts.components
    if comp.needs_train_predictions or parts.source.track_train:
        train_probs = parts.source.predict_train(parts.model)
        record["observed_pos_loss"] = _observed_positive_loss(train_probs, parts.state)
        record.update(comp.after_epoch(train_probs, parts.state, epoch))
    if len(val_targets):
        val_probs = parts.source.predict_val(parts.model)
        record["val_map"] = metrics.mean_average_precision(val_probs.cpu().numpy(), val_targets)
    else:
        record["val_map"] = float("nan")
    if truth_train is not None:
        record.update(parts.state.pseudo_label_stats(truth_train))
    return record


def run_loop(
    parts: LoopParts,
    *,
    epochs: int,
    val_targets: np.ndarray,
    rule: StoppingRule = StoppingRule(),
    truth_train: np.ndarray | None = None,
    loop_state: LoopState | None = None,
    hooks: LoopHooks = LoopHooks(),
) -> LoopResult:
    """Train for ``epochs`` epochs (continuing from ``loop_state`` when resuming)."""
    ls = loop_state or LoopState()
    for epoch in range(ls.epoch + 1, epochs + 1):
        if ls.stopped_early:
            break
        t0 = time.perf_counter()
        parts.components.set_epoch(epoch, epochs)
        trained = train_epoch(parts, epoch, hooks.on_step)
        record = {"epoch": epoch, "train_loss": trained["train_loss"],
                  **end_of_epoch(parts, epoch, val_targets, truth_train),
                  "train_seconds": trained["train_seconds"], "epoch_seconds": time.perf_counter() - t0,
                  "images_per_second": trained["images_per_second"]}
        ls.history.append(record)
        if rule.update(ls, record["val_map"]):
            ls.best_epoch = epoch
            ls.best_snapshot = snapshot(parts)
        ls.epoch = epoch
        if hooks.on_epoch is not None:
            hooks.on_epoch(record)
        if hooks.on_epoch_end is not None:
            hooks.on_epoch_end(ls)
    if ls.best_snapshot is not None:
        restore(parts, ls.best_snapshot)
    return LoopResult(ls.best_epoch, ls.best_val_map, ls.history, ls.stopped_early)


def _observed_positive_loss(probs: torch.Tensor, state: LabelState) -> float:
    """Mean ``-log p`` over the annotated positives of the training set (a training curve the
    papers plot: it shows how well a method still fits what it was told)."""
    pos = state.observed == 1
    if not bool(pos.any()):
        return float("nan")
    p = probs.detach().cpu().double()[pos].clamp_min(1e-12)
    return float(-p.log().mean())


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
