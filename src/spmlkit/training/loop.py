"""The one training loop: epochs of mini-batches, label-state updates, validation, selection,
for R >= 1 runs at once.

A *run* (:class:`Run`) is one model with its own method object, label state, generator and
stopping rule. A :class:`Group` is R runs that share their data source and one optimiser (each
run's parameters in groups of its own, with its own learning rate). A solo run is a group of
one, and trains through exactly this code; R > 1 runs (feature runs that differ only in seed or
learning rate, :func:`~spmlkit.training.plan.batch_key`) take each step together through
:class:`~spmlkit.training.batched.BatchedSteps`. Every per-run decision (the label algorithm,
the stopping rule, the best-epoch snapshot) stays the run's own, so a run that stops early
simply leaves the group (docs/architecture.md, "Many runs at once").

Feature runs and image runs differ only in where batches and predictions come from (a
:class:`~spmlkit.training.sources.DataSource`), and the loop knows no method: it calls every
method through the hooks of :class:`~spmlkit.methods.Method` (its step's draws, its loss through
:class:`~spmlkit.training.step.RunStep`, its step between epochs with the arguments it asks for)
and the network through :class:`~spmlkit.models.SPMLModel` (its draws).

Selection (docs/protocol.md, "Training protocols"): the epoch with the best validation mAP is
kept (a snapshot of model, loss state and label state) and restored at the end. The
:class:`StoppingRule` decides when to stop early: ``patience`` epochs without a gain larger
than ``min_delta`` (``patience=0`` is EM's rule: stop at the first epoch that is not strictly
better), and/or ``stop_drop`` (LL / GR: stop once validation mAP falls more than
``stop_drop`` below the best). Without validation data (``val_frac=0``) every epoch counts as
the best so far, so the last epoch is kept.

The training step does no device-to-host synchronisation: the running loss is summed on the
device (in float64, which equals summing Python floats) and read once per epoch.

A run that diverges leaves the group at the end of the epoch it happened in
(docs/protocol.md, "Runs that diverge"): its epoch's training loss is not finite (the first
step whose loss was not is found from the epoch's step losses, kept on the device without a
synchronisation), its weights are not, or its predictions on the rows it is evaluated on are
not. Its ``LoopState.diverged`` says where and what; the epoch is not recorded, and no other
run of a batched group is touched (each run's weights and loss are its own). What a diverged
run then becomes (a refusal, a failed sweep record) is the trainer's to decide.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from .. import metrics
from ..labels import LabelBatch, LabelState, PseudoLabels, RunLabels, pseudo_label_stats
from ..transfer import to_device
from ..methods import Method
from .batched import BatchedSteps
from .batched import probabilities as batched_probabilities
from .distributed import Distributed
from .evaluation import epoch_measures
from .sources import DataSource
from .step import RunStep

__all__ = ["Group", "LoopHooks", "LoopState", "Run", "StoppingRule", "restore", "run_loop", "snapshot"]


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
    #: where the run diverged, when it did: epoch, step (None: not from a step's loss), steps of the
    #: epoch, what became non-finite ("training loss", "weights", "predictions") and its value
    diverged: dict[str, Any] | None = None

    def progress(self) -> dict[str, Any]:
        """The JSON-able part (everything but the snapshot)."""
        return {"epoch": self.epoch, "history": self.history, "best_val_map": self.best_val_map,
                "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs, "stopped_early": self.stopped_early}


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


@dataclass
class Run:
    """One run's own objects: what a solo run has, and what each run of a batched group keeps.

    ``model`` is the plain module (its state is what checkpoints hold); ``train_model`` is what
    the training step calls (the same module, or its DistributedDataParallel / compiled wrapper).
    """

    model: nn.Module
    method: Method
    state: LabelState
    generator: torch.Generator
    rule: StoppingRule = field(default_factory=StoppingRule)
    loop: LoopState = field(default_factory=LoopState)
    train_model: nn.Module | None = None
    step: RunStep | None = None
    #: the run's schedule, EMA and BatchNorm freeze (:class:`~spmlkit.training.recipe.Recipe`), or None
    recipe: Any = None


@dataclass
class LoopHooks:
    """Optional callbacks: a finished epoch's record (of each run), the loop state after it, a
    finished step (its number of examples), an epoch about to start (its number)."""

    on_epoch: Callable[[dict[str, float]], None] | None = None
    on_epoch_end: Callable[[Run], None] | None = None
    on_step: Callable[[int], None] | None = None
    on_epoch_start: Callable[[int], None] | None = None


@dataclass
class Group:
    """R >= 1 runs trained together: one data source, one optimiser, one device.

    ``global_batch``: the loss sees the whole global batch (gathered logits) rather than this
    process's slice (:mod:`spmlkit.training.distributed`); in one process the two coincide.
    """

    runs: list[Run]
    source: DataSource
    optimizer: torch.optim.Optimizer
    device: torch.device | str = "cpu"
    autocast: Callable[[], Any] | None = None
    scaler: Any = None
    dist: Distributed = field(default_factory=Distributed)
    global_batch: bool = True

    def __post_init__(self) -> None:
        for run in self.runs:
            if run.step is None:
                run.step = RunStep(run.model, run.method, train_model=run.train_model, dist=self.dist,
                                   global_batch=self.global_batch, autocast=self.autocast)
        if len(self.runs) > 1 and (self.dist.enabled or self.scaler is not None or self.autocast is not None):
            raise ValueError("batched runs train in one process, in float32")

    def active(self) -> list[Run]:
        return [run for run in self.runs if not run.loop.stopped_early and run.loop.diverged is None]

    def probabilities(self, runs: list[Run], split: str) -> torch.Tensor:
        """``[R, N, C]``: each run's probabilities on ``split`` (train | val | test) in eval mode,
        index order."""
        if len(runs) == 1:
            return getattr(self.source, f"predict_{split}")(runs[0].model)[None]
        return batched_probabilities([run.model for run in runs], self.source.rows(split))


def snapshot(run: Run) -> dict[str, Any]:
    """A copy of what the best epoch restores: the model, the method's state and the label state."""
    weights = run.model.state_dict() if run.recipe is None else run.recipe.selected_state(run.model)
    return {"model": _copied(weights), "method": _copied(run.method.state_dict()),
            "label_state": run.state.state_dict()}


def restore(run: Run, snap: dict[str, Any]) -> None:
    run.model.load_state_dict(snap["model"])
    run.method.load_state_dict(snap["method"])
    run.state.load_state_dict(snap["label_state"])


def _copied(value: Any) -> Any:
    """A deep copy of a state dict with every tensor cloned on its own (a view into a larger
    tensor would make ``copy.deepcopy`` copy the whole of it)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        out = type(value)((k, _copied(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):  # a module state dict's versions, read by load_state_dict
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return copy.deepcopy(value)


# --------------------------------------------------------------------------- one epoch
def train_epoch(group: Group, runs: list[Run], epoch: int, on_step: Callable[[int], None] | None = None
                ) -> dict[str, Any]:
    """One pass of each of ``runs`` over its own shuffled training rows, the steps taken together.

    Returns each run's mean training loss (``losses``), the pass's seconds and images per second
    (the group's time; a batched group's runs share it), and every step's losses (``step_losses``,
    ``[R]`` tensors left on the device: read only when a run diverged).
    """
    t0 = time.perf_counter()
    for run in runs:
        run.model.train()
        if run.recipe is not None:
            run.recipe.train_mode(run.model)  # frozen BatchNorm stays in eval mode
    batched = None if len(runs) == 1 else BatchedSteps([run.step for run in runs])
    # the runs' label states, and a group's weights, stacked for the epoch
    with RunLabels([run.state for run in runs]) as labels, batched or contextlib.nullcontext():
        total, steps, seen, step_losses = _train_steps(group, runs, labels, batched, epoch, on_step)
    losses = (total / max(steps, 1)).tolist()  # reading them waits for the device: the pass is timed to its end
    seconds = time.perf_counter() - t0
    return {"losses": losses, "seconds": seconds, "step_losses": step_losses,
            "images_per_second": seen / seconds if seconds > 0 else float("nan")}


def _train_steps(group: Group, runs: list[Run], labels: RunLabels, batched: BatchedSteps | None, epoch: int,
                 on_step: Callable[[int], None] | None) -> tuple[torch.Tensor, int, int, list[torch.Tensor]]:
    """The steps of one epoch: ``(summed loss of each run [R], steps, examples, each step's losses)``."""
    total = torch.zeros(len(runs), dtype=torch.float64, device=group.device)
    step_losses: list[torch.Tensor] = []
    steps = seen = 0
    dist = group.dist
    for x, idx in group.source.train_batches([run.generator for run in runs]):
        x = x.to(group.device, non_blocking=True)
        size = idx.shape[1]
        # the rows the loss sees: the whole global batch, or this process's slice of it
        rows = idx if (group.global_batch or not dist.enabled) else idx[:, dist.shard(size)]
        batch = labels.batch(rows, group.device)
        draws = _draws([run.method.draw(run.generator, size) for run in runs], group.device)
        noise = _noise(runs, size, dist, group.device)
        if batched is None:
            loss, corrections = runs[0].step(x[0], *_on(group.device, rows[0], batch.labels[0], batch.pseudo.mask[0],
                                                       batch.pseudo.target[0]),
                                             None if draws is None else tuple(d[0] for d in draws),
                                             None if noise is None else noise[0])
            losses, corrections = loss[None], None if corrections is None else corrections[None]
        else:
            losses, corrections = batched.losses(x, _batch_on(batch, group.device), draws, noise)
        _backward_and_step(group, losses.sum())
        for run in runs:
            if run.recipe is not None:  # the schedule's next lr, the EMA's update
                run.recipe.after_step(run.model)
        if corrections is not None:  # LL-Cp's permanent corrections of this step, every run's at once
            labels.correct(rows, corrections, epoch)
        total += losses.detach().double()
        step_losses.append(losses.detach())
        steps += 1
        seen += size
        if on_step is not None:
            on_step(size)
    return total, steps, seen, step_losses


def _on(device: torch.device | str, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(to_device(t, device) for t in tensors)


def _draws(draws: list[tuple[torch.Tensor, ...] | None], device: torch.device | str
           ) -> tuple[torch.Tensor, ...] | None:
    """The runs' method draws (:meth:`~spmlkit.methods.Method.draw`), each stacked over the runs (a
    leading ``[R]``) and sent to ``device`` together: one copy per kind of draw, whatever R."""
    if draws[0] is None:
        return None
    return _on(device, *(torch.stack(kind) for kind in zip(*draws)))


def _noise(runs: list[Run], size: int, dist: Distributed, device: torch.device | str) -> torch.Tensor | None:
    """The runs' network draws for a step of ``size`` rows (``[R, B, ...]``,
    :meth:`~spmlkit.models.SPMLModel.draw_noise`), each from its own generator after its method's
    draws, sent to ``device`` in one copy; under torch.distributed this process's rows of them. None
    for networks that draw nothing."""
    first = runs[0].model.draw_noise(runs[0].generator, size)
    if first is None:
        return None
    draws = torch.stack([first, *(run.model.draw_noise(run.generator, size) for run in runs[1:])])
    if dist.enabled:
        draws = draws[:, dist.shard(size)]
    return to_device(draws, device)


def _batch_on(batch: LabelBatch, device: torch.device | str) -> LabelBatch:
    labels, mask, target, index = _on(device, batch.labels, batch.pseudo.mask, batch.pseudo.target, batch.index)
    return LabelBatch(labels, PseudoLabels(mask, target), index)


def _backward_and_step(group: Group, loss: torch.Tensor) -> None:
    _clear_grads(group.optimizer)
    if group.scaler is not None:
        group.scaler.scale(loss).backward()
        group.scaler.step(group.optimizer)
        group.scaler.update()
    else:
        loss.backward()
        group.optimizer.step()


def _clear_grads(optimizer: torch.optim.Optimizer) -> None:
    """What ``optimizer.zero_grad(set_to_none=True)`` does -- every parameter's gradient becomes
    None -- as a plain loop. The method wraps each call in a profiler range and a
    ``torch._dynamo`` guard; on a batched feature group, whose steps take a few milliseconds,
    those wrappers cost more than the assignments (docs/architecture.md, "Many runs at once")."""
    for param_group in optimizer.param_groups:
        for p in param_group["params"]:
            p.grad = None


def end_of_epoch(group: Group, runs: list[Run], epoch: int, val_targets: np.ndarray,
                 truth_train: np.ndarray | None, test_targets: np.ndarray | None = None,
                 measures: bool = False) -> list[dict[str, Any]]:
    """Each run's method's step between epochs (:meth:`~spmlkit.methods.Method.after_epoch`, given
    what it asks for: the whole training split's predictions, the label state, the truth), then
    validation mAP; with ``measures``, every measure on the validation and test rows too (what a
    selection rule other than validation mAP reads, docs/protocol.md, "Selection rules")."""
    records: list[dict[str, float]] = [{} for _ in runs]
    probs: torch.Tensor | None = None
    if group.source.track_train or any("probs" in run.method.epoch_arguments for run in runs):
        probs = group.probabilities(runs, "train")
        _mark_non_finite(runs, probs, epoch, "training rows")
        losses = _observed_positive_losses(probs, [run.state for run in runs])
        for run, record, loss in zip(runs, records, losses):
            if run.loop.diverged is None:
                record["observed_pos_loss"] = loss
    for r, (run, record) in enumerate(zip(runs, records)):
        if run.loop.diverged is None:
            given = {"probs": None if probs is None else probs[r], "state": run.state, "truth": truth_train}
            record.update(run.method.after_epoch(epoch, **{name: given[name] for name in run.method.epoch_arguments}))
    # the validation predictions once, where the measures read them too
    val_probs = group.probabilities(runs, "val").cpu() if measures and len(val_targets) else None
    for record, val_map in zip(records, _val_maps(group, runs, val_targets, epoch, val_probs)):
        record["val_map"] = val_map
    if measures:
        for record, extra in zip(records, epoch_measures(group, runs, val_targets, test_targets, val_probs)):
            record.update(extra)
    # counted with or without the training rows' full labels (a user's data has none): the
    # console's pseudo-label column and metrics.csv read these; only the accuracies need a truth
    for record, stats in zip(records, pseudo_label_stats([run.state for run in runs], truth_train)):
        record.update(stats)
    return records


def _val_maps(group: Group, runs: list[Run], val_targets: np.ndarray, epoch: int,
              probs: torch.Tensor | None = None) -> list[float]:
    """Each run's validation mAP, from one :func:`~spmlkit.metrics.average_precision` call over
    every run's classes side by side (a per-column computation, so each run's APs are its own),
    averaged per run as :func:`~spmlkit.metrics.mean_average_precision` does. A run whose
    predictions are not finite is marked diverged (NaN). ``probs``: the runs' validation
    predictions (``[R, rows, classes]`` on the CPU), where the caller has them already."""
    if not len(val_targets):
        return [float("nan")] * len(runs)
    if probs is None:
        probs = group.probabilities(runs, "val").cpu()
    _mark_non_finite(runs, probs, epoch, "validation rows")
    if any(run.loop.diverged is not None for run in runs):
        probs = torch.nan_to_num(probs, nan=0.5, posinf=1.0, neginf=0.0)  # their mAP is not used
    classes = probs.shape[2]
    side_by_side = probs.transpose(0, 1).reshape(len(val_targets), len(runs) * classes).numpy()
    ap = metrics.average_precision(side_by_side, np.tile(val_targets, (1, len(runs))))
    return [float(ap[r * classes : (r + 1) * classes].mean()) for r in range(len(runs))]


def _mark_non_finite(runs: list[Run], probs: torch.Tensor, epoch: int, rows: str) -> None:
    """Mark diverged each run whose probabilities ``probs[r]`` on ``rows`` are not all finite."""
    finite = torch.isfinite(probs.reshape(len(runs), -1)).all(1).tolist()
    for run, ok, run_probs in zip(runs, finite, probs):
        if not ok and run.loop.diverged is None:
            bad = run_probs[~torch.isfinite(run_probs)][0].item()
            run.loop.diverged = {"epoch": epoch, "step": None, "steps": None, "what": f"predictions on its {rows}",
                                 "value": _shown(bad)}


def _mark_diverged(runs: list[Run], trained: dict[str, Any], epoch: int, *, by_loss: bool = True) -> None:
    """After an epoch's steps: each run whose training loss or weights are not finite is marked
    diverged, at the first step whose loss was not finite when there is one. ``by_loss=False``
    (several processes, whose losses of their own slices may differ) decides on the weights
    alone, which the processes share, so that they all agree."""
    losses = trained["losses"]
    weights = _finite_weights(runs)
    for r, (run, loss, ok) in enumerate(zip(runs, losses, weights)):
        if (math.isfinite(loss) or not by_loss) and ok:
            continue
        steps = trained["step_losses"]
        per_step = torch.stack([s[r] for s in steps]).cpu() if steps else torch.zeros(0)
        bad = torch.nonzero(~torch.isfinite(per_step)).flatten()
        if len(bad):
            step = int(bad[0])
            run.loop.diverged = {"epoch": epoch, "step": step + 1, "steps": len(steps), "what": "training loss",
                                 "value": _shown(float(per_step[step]))}
        else:
            run.loop.diverged = {"epoch": epoch, "step": None, "steps": len(steps), "what": "weights",
                                 "value": "not finite"}


def _finite_weights(runs: list[Run]) -> list[bool]:
    """Whether each run's trainable weights are all finite, read in one synchronisation for all runs."""
    flags: list[torch.Tensor | None] = []
    for run in runs:
        params = [p for p in run.model.parameters() if p.requires_grad]
        flags.append(torch.stack([torch.isfinite(p).all() for p in params]).all() if params else None)
    device = next((f.device for f in flags if f is not None), torch.device("cpu"))
    return torch.stack([torch.ones((), dtype=torch.bool, device=device) if f is None else f for f in flags]).tolist()


def _shown(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else f"{value:g}"


def _observed_positive_losses(probs: torch.Tensor, states: list[LabelState]) -> list[float]:
    """Each run's mean ``-log p`` over the annotated positives of its training set (a training
    curve the papers plot: it shows how well a method still fits what it was told), from its
    probabilities ``probs[r]`` (``[R, N, C]``), NaN for a run without positives.

    The positives of all runs are read in one gather (each state's positions, computed once,
    offset to its run), run after run, and each run's mean is taken over its own segment: the
    values of one run's own selection and mean, with a few operations for R runs instead of a
    masked selection per run and epoch."""
    out = [float("nan")] * len(states)
    index = [(r, state.observed_positive_index()) for r, state in enumerate(states)]
    index = [(r, i) for r, i in index if i is not None]
    if not index:
        return out
    size = probs[0].numel()
    flat = torch.cat([i + r * size for r, i in index])
    selected = torch.index_select(probs.detach().reshape(-1).cpu(), 0, flat).double().clamp_min(1e-12)
    for (r, i), values in zip(index, torch.split(selected, [len(i) for _, i in index])):
        out[r] = float(-values.log().mean())
    return out


# --------------------------------------------------------------------------- the loop
def run_loop(group: Group, *, epochs: int, val_targets: np.ndarray, truth_train: np.ndarray | None = None,
             hooks: LoopHooks = LoopHooks(), test_targets: np.ndarray | None = None,
             epoch_metrics: bool = False) -> None:
    """Train every run of ``group`` for ``epochs`` epochs (each continuing from its loop state when
    resumed), then restore each run's best epoch. A run that stops early leaves the group.

    A batched group's times (``train_seconds``, ``epoch_seconds``) are the group's divided among
    the runs that trained that epoch, and ``images_per_second`` is a run's examples over its share.
    """
    first = min(run.loop.epoch for run in group.runs) + 1
    for epoch in range(first, epochs + 1):
        runs = [run for run in group.active() if run.loop.epoch < epoch]
        if not runs:
            break
        if hooks.on_epoch_start is not None:
            hooks.on_epoch_start(epoch)
        t0 = time.perf_counter()
        for run in runs:
            run.method.set_epoch(epoch, epochs)
        trained = train_epoch(group, runs, epoch, hooks.on_step)
        _mark_diverged(runs, trained, epoch, by_loss=not group.dist.enabled)
        kept = [i for i, run in enumerate(runs) if run.loop.diverged is None]
        runs, losses = [runs[i] for i in kept], [trained["losses"][i] for i in kept]
        ends = end_of_epoch(group, runs, epoch, val_targets, truth_train, test_targets, epoch_metrics) if runs else []
        kept = [i for i, run in enumerate(runs) if run.loop.diverged is None]  # predictions not finite
        runs, losses, ends = [runs[i] for i in kept], [losses[i] for i in kept], [ends[i] for i in kept]
        for run, end in zip(runs, ends):
            if run.recipe is not None:  # the lr, and the EMA weights validated beside the plain ones
                end.update(run.recipe.validate(group, run, val_targets, end["val_map"]))
        share = len(trained["losses"])  # every run that trained the epoch, a diverged one too
        epoch_seconds = (time.perf_counter() - t0) / share
        for run, loss, end in zip(runs, losses, ends):
            record = {"epoch": epoch, "train_loss": loss, **end, "train_seconds": trained["seconds"] / share,
                      "epoch_seconds": epoch_seconds, "images_per_second": trained["images_per_second"] * share}
            ls = run.loop
            ls.history.append(record)
            if run.rule.update(ls, record["val_map"]):
                ls.best_epoch = epoch
                ls.best_snapshot = snapshot(run)
            ls.epoch = epoch
            if hooks.on_epoch is not None:
                hooks.on_epoch(record)
            if hooks.on_epoch_end is not None:
                hooks.on_epoch_end(run)
    for run in group.runs:
        if run.loop.best_snapshot is not None:
            restore(run, run.loop.best_snapshot)
