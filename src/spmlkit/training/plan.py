"""The run plan: everything a run derives before its first step, built once by :func:`plan_run`.

Why one object. A run's setup -- its data, the protocol's split and observation, the label
matrix its method trains on (and the checks on it), its device, the statistics its method
needs from the data -- used to be derived in the trainer, again in a second trainer for
batched runs, and in part again by the sweep to decide which runs can train together. Now
:func:`plan_run` derives it once into a :class:`RunPlan`, and everything downstream reads it:
the loop (:mod:`spmlkit.training.loop`), the trainer (a group of runs shares one plan's data),
resume (the checkpoint is checked against the plan's model), and the sweep's grouping
(:func:`batch_key`).

Which runs train together (docs/architecture.md, "Many runs at once"). Runs that share their
data, model architecture and method, and differ only in :data:`VARYING` (seed, learning rate),
can train as R parallel copies of one model in one loop. Whether a run may join such a group
is decided by what its parts *declare* -- the losses' ``batchable``, the model's
``batchable`` -- and by its machinery (a run folder, loggers, several processes,
``--compile``, LinearInit: each of these is one run's own). :func:`unbatchable_reason` says
why not, from the configuration alone, so the sweep can group runs without loading any data.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..labels import validate_observed
from ..methods import Method, ResolvedMethod, bottleneck_width, resolve_hparams
from .components import MethodComponents, build_components, expected_positives, method_label_matrix
from .config import RecipeConfig, RunConfig
from .device import resolve_device
from .distributed import Distributed
from .model_check import check_model
from .recipe import check_recipe
from .run_data import RunData, RunSplit, is_feature_run, load_run_data, split_and_observe

__all__ = ["VARYING", "RunPlan", "batch_key", "varying", "plan_run", "requested_device", "unbatchable_reason"]

#: the settings in which runs of one batched group may differ; everything else they share
VARYING = ("seed", "lr", "weight_decay")


def varying(config: RunConfig) -> tuple[str, ...]:
    """:data:`VARYING` for ``config``: without the seed when the seed also draws the run's rows
    (partition 'random', docs/protocol.md, "The tabular protocol"), since a group shares its data,
    and when the method's loss groups only runs that share their batches
    (:attr:`~spmlkit.losses.SPMLLoss.groups_across_seeds`: SMILE)."""
    if config.data.partition == "random" or not _groups_across_seeds(config):
        return tuple(k for k in VARYING if k != "seed")
    return VARYING


def _groups_across_seeds(config: RunConfig) -> bool:
    try:
        classes = _loss_classes(config)
    except (ValueError, OSError):  # unbatchable_reason reports it
        return True
    return all(cls.groups_across_seeds for cls in classes.values())


def _loss_classes(config: RunConfig) -> dict[str, type]:
    """The method's loss and regularisers, by name: the classes whose declarations decide grouping."""
    from .. import losses

    method = resolve_hparams(config.method.name, config.method.hparams).method
    return {name: losses.loss_class(name) for name in (method.loss, *(reg for reg, _ in method.regularizers))}


@dataclass(frozen=True)
class RunPlan:
    """What a run is, before its first step: read by the loop, the trainer, resume and the sweep.

    ``data`` and ``split`` may be shared by the plans of a group (:meth:`for_config`): they are
    never modified after planning.
    """

    config: RunConfig
    resolved: ResolvedMethod
    data: RunData
    split: RunSplit
    #: the {-1, 0, 1} matrix the method trains on (observed labels, or the truth for the oracle
    #: references), checked once here so that the losses skip their per-step checks
    train_labels: np.ndarray
    #: the mean number of positives per training example (EPR's and ROLE's prior)
    expected_num_pos: float
    device: torch.device
    #: under torch.distributed, whether the loss sees the whole global batch (docs/architecture.md,
    #: "Distributed training"); in one process the two coincide
    global_batch: bool

    @property
    def method(self) -> Method:
        return self.resolved.method

    @property
    def kind(self) -> str:
        """"features" or "images"."""
        return self.data.kind

    @property
    def bottleneck(self) -> int:
        """The width of the model's Gaussian bottleneck (MIME's), 0 for none: the run's ``bottleneck``
        setting, or the method's own."""
        return bottleneck_width(self.method, self.config.model.bottleneck)

    @property
    def components_needs_views(self) -> bool:
        """Whether the method's loss trains on a weak and a strong view of each image (LAC/PLC)."""
        from .. import losses

        return losses.loss_class(self.method.loss).needs_views

    @functools.cached_property
    def group_key(self) -> str | None:
        """:func:`batch_key` of this run's configuration, derived once (a group's runs are each
        checked against it)."""
        return batch_key(self.config)

    def for_config(self, config: RunConfig) -> RunPlan:
        """The plan of another run of this run's group (same :func:`batch_key`): only the
        seed, the learning rate and the weight decay differ, so everything derived from the data
        is shared."""
        key = batch_key(config)
        if key is None or key != self.group_key:
            raise ValueError(f"run {config.method.name} seed {config.optimisation.seed} lr {config.optimisation.lr:g} cannot train in the group of "
                             f"seed {self.config.optimisation.seed} lr {self.config.optimisation.lr:g}: "
                             f"{unbatchable_reason(config) or 'the runs differ in more than ' + ', '.join(varying(config))}")
        return dataclasses.replace(self, config=config)

    def build_model(self) -> nn.Module:
        """The run's fresh model, on its device: the global torch and numpy RNGs are seeded with the
        run's seed first (the initial weights are its draws, as in the EM code)."""
        from ..errors import user_input

        torch.manual_seed(self.config.optimisation.seed)
        np.random.seed(self.config.optimisation.seed % 2**32)
        with user_input():  # an unknown backbone, weights that cannot be loaded offline
            model = self.data.build_model(self.config)
        model = model.to(self.device)
        if self.device.type == "cuda" and self.config.machine.channels_last and self.kind == "images":
            model = model.to(memory_format=torch.channels_last)
        return model

    def build_components(self, *, epochs: int | None = None, device: torch.device | str | None = None,
                         features: Callable[[], torch.Tensor] | None = None) -> MethodComponents:
        """The method's loss, regularisers and label algorithm for this run (seeded by its seed), on
        ``device`` (the run's by default); ``epochs`` for a phase shorter than the run (LinearInit).
        ``features``: the training rows' features in index order, for a loss that asks for them
        (``DataSource.train_features``)."""
        from ..errors import user_input

        with user_input():  # hyperparameter values out of range, APL's warm-up beyond the epochs
            comp = build_components(self.resolved, num_train=len(self.split.train_idx),
                                    num_classes=self.data.num_classes, observed=self.train_labels,
                                    expected_num_pos=self.expected_num_pos,
                                    epochs=self.config.schedule.epochs if epochs is None else epochs,
                                    seed=self.config.optimisation.seed, features=features)
        return comp.to(self.device if device is None else device)

    def checkpoint_extras(self, with_run_folder: bool) -> dict[str, Any]:
        """What ``best.pt`` records beside the weights, for ``spmlkit predict`` and ``export``: the
        class names, the method's decision threshold and how inputs are prepared (an image
        transform, or a feature run's standardisation, so its exported model can be fed new rows)."""
        from .run_dir import feature_spec

        data = self.data
        if data.images is not None:
            transform = data.images.transform_spec
        elif with_run_folder:
            transform = feature_spec(data.X_train[self.split.train_idx], self.config.data.standardize)
        else:
            transform = {"kind": "features"}
        return {"class_names": list(data.class_names), "threshold": self.method.threshold, "transform": transform}


def plan_run(config: RunConfig, *, data: RunData | None = None, dist: Distributed | None = None) -> RunPlan:
    """Derive everything ``config`` needs before its first step (the one place that does).

    ``data`` replaces loading ``config.data.dataset`` (the estimator's arrays, a group's shared data).
    Every check of the user's settings and data happens here, before any run folder exists, so a
    refused run leaves nothing behind; the errors are :class:`~spmlkit.errors.InputError`.
    """
    from ..errors import user_input

    dist = dist or Distributed()
    with user_input():
        resolved = resolve_hparams(config.method.name, config.method.hparams)
        data = load_run_data(config) if data is None else data
        _check_method_fits(config, resolved.method, data.kind, dist)
        split = split_and_observe(config, data)
        train_labels = method_label_matrix(resolved.method, split.observed, split.truth_train)
        validate_observed(train_labels, where=f"the training labels of {data.name}")
        if not (train_labels != 0).any():
            raise ValueError(f"the training rows of {data.name} carry no observed label at all under observation "
                             f"{config.data.observation!r}; there is nothing to learn from")
        device = _device(config, data, dist)
        check_recipe(config, data, len(split.train_idx), dist)  # docs/protocol.md, "Recipes"
    global_batch = (config.method.batch_statistics or resolved.method.batch_statistics) == "global"
    return RunPlan(config=config, resolved=resolved, data=data, split=split, train_labels=train_labels,
                   expected_num_pos=expected_positives(train_labels, split.truth_train), device=device,
                   global_batch=global_batch)


def _check_method_fits(config: RunConfig, method: Method, kind: str, dist: Distributed) -> None:
    """Refuse, in one line, a method on data or a model it cannot train with (docs/methods.md, "plc")."""
    from .. import losses

    check_model(config, kind)  # images only (LAC's views, BoostLU's maps); BoostLU's spatial map; MIME's bottleneck
    loss = losses.loss_class(method.loss)
    if loss.needs_embeddings and config.model.image_head != "label_query":
        raise ValueError(f"method {method.name!r} contrasts label-wise embeddings, which the {config.model.image_head} "
                         "head has not; set image_head: label_query (--image-head label_query)")
    if loss.needs_views:
        why = ("crops (augment multiscale_crop)" if config.recipe.augment != "resize" else
               "--decode gpu" if config.machine.decode == "gpu" else
               "several processes" if dist.enabled else None)
        if why:
            raise ValueError(f"method {method.name!r} trains on two views of each image, which spmlkit does not "
                             f"combine with {why}; remove it")


def requested_device(config: RunConfig, kind: str) -> str:
    """The device a ``kind`` ("features" or "images") run asks for: ``config.machine.device``, but
    ``auto`` keeps feature runs on the CPU -- a step is a few small matrix products, which a GPU
    would only wait for -- so that under torchrun too such a run joins a gloo group, not NCCL."""
    if kind == "features" and config.machine.device == "auto":
        return "cpu"
    return config.machine.device


def _device(config: RunConfig, data: RunData, dist: Distributed) -> torch.device:
    return dist.device(resolve_device(requested_device(config, data.kind)))


def unbatchable_reason(config: RunConfig) -> str | None:
    """Why ``config`` trains one run at a time (None: it may join a batched group).

    Read from the configuration and from what the parts declare, never from a trial run: the
    losses' :attr:`~spmlkit.losses.SPMLLoss.batchable`, the model's ``batchable`` (a backbone
    with batch normalisation and an image pipeline is one run's; a feature head with dropout
    draws its masks from the global RNG, which R runs cannot share as R solo runs would), and the
    machinery that belongs to one run.
    """
    from ..models import FeatureHead

    try:
        feature = is_feature_run(config)
        classes = _loss_classes(config)
    except (ValueError, OSError) as exc:  # an unknown dataset or method, a missing folder: planning reports it
        return f"the run's settings cannot be checked here ({exc})"
    for name, cls in classes.items():
        if not cls.batchable:
            return f"loss {name!r} declares that it cannot be batched"
    checks = (
        (not feature, "image runs train one at a time (their backbones and input pipelines are one run's)"),
        (feature and not FeatureHead.batchable_with(config.model.head, config.model.dropout),
         "a feature head with dropout draws from the global random stream, which batched runs cannot share"),
        (config.schedule.linear_init_epochs != 0, "LinearInit trains a phase of its own"),
        (config.recipe != RecipeConfig(), "a recipe (schedule, EMA, frozen parts, crops) is one run's own"),
        (config.output.out is not None, "a run with a run folder checkpoints on its own"),
        (bool(config.output.loggers), "a run with loggers logs on its own"),
        (bool(config.machine.compile), "a compiled run trains on its own"),
        (int(os.environ.get("WORLD_SIZE", "1")) > 1, "distributed runs train on their own"),
    )
    return next((why for bad, why in checks if bad), None)


def batch_key(config: RunConfig) -> str | None:
    """What runs must share to train as one batched group (None when ``config`` cannot): its
    settings without :data:`VARYING`, as text, so configs with equal keys form one group."""
    if unbatchable_reason(config) is not None:
        return None
    values = {k: v for k, v in config.flat().items() if k not in varying(config)}
    return json.dumps(values, sort_keys=True, default=str)
