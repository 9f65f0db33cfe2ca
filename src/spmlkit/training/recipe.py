"""A run's recipe around its loss: the learning-rate schedule, the weight EMA, frozen parts.

The official code of a paper trains in ways the loss alone does not say: one trains only some
parts of its network with every BatchNorm frozen, follows a one-cycle schedule that it stops
early, and evaluates an exponential moving average (EMA) of the weights beside the plain ones
(docs/protocol.md, "Recipes", says whose code does what). These are general tools, configured by the ``recipe``
section (:class:`~spmlkit.training.config.RecipeConfig`), and built from PyTorch's own:

* schedules are ``torch.optim.lr_scheduler``'s (OneCycleLR, CosineAnnealingLR, StepLR),
  stepped after every optimiser step, over ``schedule_epochs`` x steps-per-epoch steps, so a
  run that trains fewer epochs stops inside its schedule, as the official code does;
* the EMA is ``torch.optim.swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn(decay)``
  over parameters and buffers. Why PyTorch's rather than timm's ModelEmaV3, whose arithmetic is
  the same: it needs no optional dependency, its ``state_dict`` is everything a resume needs
  (the averaged copy and its update count), and its foreach update costs one kernel per dtype.
  AveragedModel *copies* the model at its first update; the official ModelEma averages from the
  first step on, so the count starts at 1 and step one is already ``decay * start + (1 - decay)
  * weights``, as there;
* frozen parts and frozen BatchNorm are :mod:`spmlkit.models.parts`.

:class:`Recipe` is what the loop calls (docs/architecture.md, "One run"): the hooks
:meth:`Recipe.train_mode` (after ``model.train()``), :meth:`Recipe.after_step` (after each
optimiser step), :meth:`Recipe.validate` (after each epoch's validation) and
:meth:`Recipe.selected_state` (what the best-epoch snapshot keeps); its state is saved in
``last.pt`` and restored exactly.

Selection with an EMA: every epoch both weights are validated; the epoch's ``val_map`` is the
better of the two (``val_map_plain``, ``val_map_ema`` are recorded, and ``ema_selected`` says
which won, 1 for the EMA), and a new best epoch keeps the winner's weights. Without validation
data (``val_frac: 0``) there is nothing to compare on, so the EMA weights are kept: they are what
averaging is for. The official code instead reports the better of the two on the test set,
which spmlkit does not imitate (docs/protocol.md, "Recipes").
"""

from __future__ import annotations

import functools
import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.optim import lr_scheduler
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from .. import metrics
from ..models.parts import freeze_batchnorm, part_parameters, train_only
from .config import RecipeConfig, RunConfig, check_min_lr

if TYPE_CHECKING:
    from .distributed import Distributed
    from .loop import Group, Run
    from .run_data import RunData

__all__ = ["Recipe", "build_scheduler", "check_parts", "check_recipe", "global_batch_size", "prepare_parts",
           "steps_per_epoch"]


def global_batch_size(config: RunConfig, dist: Distributed) -> int:
    """The batch all processes of one step take together: ``batch_size`` itself when it counts the
    global batch (``batch_per: global``), ``batch_size`` x processes when it counts each one's."""
    per = config.recipe.batch_per
    return config.optimisation.batch_size * (dist.world_size if per == "process" else 1)


def steps_per_epoch(rows: int, batch: int, drop_last: bool = False) -> int:
    """Optimiser steps of one epoch over ``rows`` training rows: the last batch may be short, or is
    dropped (``drop_last``)."""
    return rows // batch if drop_last else max(1, math.ceil(rows / batch))


def check_recipe(config: RunConfig, data: RunData, train_rows: int, dist: Distributed) -> None:
    """The recipe's checks against the run's data and model, made when the run is planned (before its
    folder exists): ValueError with what is wrong and what to do.

    ``train_only`` names are checked on the model built on the meta device (no memory, no weights
    read), so a typo is refused in a second, not after the backbone has loaded."""
    recipe = config.recipe
    batch = global_batch_size(config, dist)
    if recipe.drop_last and train_rows < batch:
        raise ValueError(f"drop_last drops every batch shorter than {batch}, and the {train_rows} training rows make "
                         "only such a batch: nothing would train; lower batch_size or set drop_last: false")
    if recipe.augment == "multiscale_crop" and config.machine.decode == "gpu":
        raise ValueError("augment multiscale_crop reads the training images with PIL in the loader workers; use "
                         "--decode cpu (decode: cpu)")
    if recipe.augment == "multiscale_crop" and data.images is not None and not data.images.paths \
            and recipe.crop_scale != config.data.image_size:
        raise ValueError(f"crop_scale {recipe.crop_scale} differs from this dataset's image size "
                         f"{config.data.image_size}; it is generated in memory and has no files to read at another "
                         f"size: set crop_scale to {config.data.image_size}")
    check_min_lr(config)
    check_parts(config, data.kind)


def check_parts(config: RunConfig, kind: str) -> None:
    """Refuse (ValueError naming the valid names) a ``train_only`` name the run's model does not have.

    Needs no data: which parts a model has depends on its kind and its settings (``"features"``: a
    head; ``"images"``: the backbone, LgConv, the image head), never on the feature width or the
    class count, so a stand-in is built on the meta device (no memory, no weights read) with one
    input and one class (:func:`~spmlkit.training.network.build_run_model`, as the run builds its
    own). A sweep's dry run and its start check every run's names this way before any run trains,
    as a run's plan does; the same model settings are built once per process."""
    if config.recipe.train_only is None:
        return
    from .config import config_from_dict

    plain = config_from_dict({"pretrained": False}, base=config) if kind == "images" else config
    key = json.dumps({"kind": kind, "method": plain.method.name, **plain.to_dict(kind)["model"],
                      **plain.to_dict(kind)["recipe"]}, sort_keys=True, default=str)
    _check_part_names(key, plain, kind)


@functools.lru_cache(maxsize=64)
def _checked(key: str) -> list[Any]:
    return []


def _check_part_names(key: str, config: RunConfig, kind: str) -> None:
    done = _checked(key)
    if done:
        return
    from .network import build_run_model

    try:
        with torch.device("meta"):
            stand_in = build_run_model(config, kind, 1, 1)
    except (NotImplementedError, RuntimeError):  # a network whose construction reads values: build it for real
        stand_in = build_run_model(config, kind, 1, 1)
    for name in config.recipe.train_only or ():
        part_parameters(stand_in, name)
    done.append(True)  # checked: the next run of these settings builds nothing


def prepare_parts(config: RunConfig, model: nn.Module) -> None:
    """Apply ``train_only`` to ``model`` before its optimiser is built (the optimiser then holds the
    trainable parameters only) and before a distributed wrapper registers their gradients."""
    if config.recipe.train_only is not None:
        train_only(model, config.recipe.train_only)


def build_scheduler(recipe: RecipeConfig, optimizer: torch.optim.Optimizer, *, epochs: int,
                    steps: int) -> lr_scheduler.LRScheduler | None:
    """The torch scheduler of ``recipe`` over ``optimizer``, stepped ``steps`` times per epoch for
    ``schedule_epochs`` (or ``epochs``) epochs; None for ``lr_schedule: none``. Each parameter
    group's current lr is its peak (one-cycle) or starting lr (cosine, step)."""
    kind = recipe.lr_schedule
    if kind == "none":
        return None
    total = (recipe.schedule_epochs or epochs) * steps
    if kind == "onecycle":
        return lr_scheduler.OneCycleLR(optimizer, max_lr=[g["lr"] for g in optimizer.param_groups], total_steps=total,
                                       pct_start=recipe.warmup_frac, anneal_strategy=recipe.anneal,
                                       cycle_momentum=recipe.cycle_momentum, div_factor=recipe.div_factor,
                                       final_div_factor=recipe.final_div_factor)
    if kind == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=total, eta_min=recipe.min_lr)
    return lr_scheduler.StepLR(optimizer, step_size=recipe.step_epochs * steps, gamma=recipe.step_gamma)


class Recipe:
    """One run's scheduler, EMA and BatchNorm freeze, with the hooks the loop calls."""

    def __init__(self, config: RecipeConfig, model: nn.Module, optimizer: torch.optim.Optimizer, *, epochs: int,
                 steps: int):
        self.config = config
        self.scheduler = build_scheduler(config, optimizer, epochs=epochs, steps=steps)
        self.optimizer = optimizer
        self.ema: AveragedModel | None = None
        if config.ema_decay is not None:
            self.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema_decay), use_buffers=True)
            self.ema.n_averaged.fill_(1)  # average from the first step on (module docstring)
            self.ema.eval()
        #: whether the EMA weights won this epoch's validation (what :meth:`selected_state` keeps)
        self.ema_won = False

    @staticmethod
    def has_hooks(config: RecipeConfig) -> bool:
        """Whether the loop must call a recipe at all: a schedule, an EMA or frozen BatchNorm (the
        other recipe settings act before training: on the model, the batch, the crops)."""
        return config.lr_schedule != "none" or config.ema_decay is not None or config.freeze_bn

    # ---------------------------------------------------------------- hooks
    def train_mode(self, model: nn.Module) -> None:
        """After ``model.train()``: every BatchNorm back in eval mode when the recipe freezes them."""
        if self.config.freeze_bn:
            freeze_batchnorm(model)

    def after_step(self, model: nn.Module) -> None:
        """After an optimiser step: the schedule's next lr, the EMA's update."""
        if self.scheduler is not None:
            self.scheduler.step()
        if self.ema is not None:
            self.ema.update_parameters(model)

    def validate(self, group: Group, run: Run, val_targets: np.ndarray, val_map: float) -> dict[str, float]:
        """The epoch record's additions: the lr the next step uses and, with an EMA, both weights'
        validation mAP, the better one as ``val_map`` and which won (module docstring)."""
        record: dict[str, float] = {}
        if self.scheduler is not None:
            record["lr"] = float(self.optimizer.param_groups[0]["lr"])
        if self.ema is None:
            return record
        ema_map = float("nan")
        if len(val_targets):
            probs = group.source.predict_val(self.ema.module).cpu().numpy()
            ema_map = float(np.mean(metrics.average_precision(probs, val_targets)))
        self.ema_won = math.isnan(val_map) or ema_map > val_map
        record.update({"val_map_plain": val_map, "val_map_ema": ema_map, "ema_selected": float(self.ema_won),
                       "val_map": ema_map if self.ema_won else val_map})
        return record

    def selected_state(self, model: nn.Module) -> dict[str, Any]:
        """The weights a best-epoch snapshot keeps: the EMA's when they won, else the model's."""
        return self.ema.module.state_dict() if self.ema is not None and self.ema_won else model.state_dict()

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                "ema": None if self.ema is None else self.ema.state_dict(), "ema_won": self.ema_won}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, target in (("scheduler", self.scheduler), ("ema", self.ema)):
            if (state.get(key) is None) != (target is None):
                raise ValueError(f"the checkpoint's recipe {'has' if target is None else 'lacks'} a {key}")
            if target is not None:
                target.load_state_dict(state[key])
        self.ema_won = bool(state.get("ema_won", False))
