"""The run plan: everything a run derives before its first step, built once by :func:`plan_run`.

Why one object. A run's setup -- its data, the protocol's split and observation, the label
matrix its method trains on (and the checks on it), its network, its device, the statistics its
method needs from the data -- is derived once into a :class:`RunPlan`, and everything downstream
reads it: the loop (:mod:`spmlkit.training.loop`), the trainer (a group of runs shares one plan's
data), resume (the checkpoint is checked against the plan's model), and the sweep's grouping
(:func:`batch_key`).

Which runs train together (docs/architecture.md, "Many runs at once"). Runs that share their
data, network and method, and differ only in the settings their method lets a group vary
(:attr:`~spmlkit.methods.Method.group_varies`: seed, learning rate, weight decay), can train as R
parallel copies of one model in one loop. Whether a run may join such a group is decided by what
its parts *declare* -- the method's ``batchable``, the network's ``batchable`` -- and by its
machinery (a run folder, loggers, several processes, ``--compile``, LinearInit: each of these is
one run's own). :func:`unbatchable_reason` says why not and :func:`group_settings` which settings
a group varies, from the configuration alone, so the sweep groups runs by the same decision
without loading any data.
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
from ..methods import GROUP_SETTINGS, Method, RunInfo, get_method
from .config import RecipeConfig, RunConfig
from .device import resolve_device
from .distributed import Distributed
from .network import NetworkSpec, check_network
from .recipe import check_recipe
from .run_data import RunData, RunSplit, is_feature_run, load_run_data, split_and_observe

__all__ = ["VARYING", "RunPlan", "batch_key", "expected_positives", "group_settings", "method_label_matrix",
           "plan_run", "requested_device", "unbatchable_reason", "varying"]

#: every setting in which runs of one batched group may differ; everything else they share
VARYING = GROUP_SETTINGS


def group_settings(method: str, partition: str) -> tuple[str, ...]:
    """The settings in which runs of ``method`` may differ within one batched group: the method's
    :attr:`~spmlkit.methods.Method.group_varies`, without the seed when the seed also draws the
    run's rows (partition 'random', docs/protocol.md, "The tabular protocol"), since a group shares
    its data. The one place that decides it: :func:`batch_key` and the sweep's grouping
    (:func:`spmlkit.experiments.sweep.spec.group_key`) both read it."""
    varies = get_method(method).group_varies
    return tuple(k for k in VARYING if k in varies and not (k == "seed" and partition == "random"))


def varying(config: RunConfig) -> tuple[str, ...]:
    """:func:`group_settings` of ``config``'s method and partition."""
    return group_settings(config.method.name, config.data.partition)


def method_label_matrix(method: type[Method], observed: np.ndarray, truth: np.ndarray | None) -> np.ndarray:
    """The {-1, 0, 1} matrix a method trains on (:attr:`~spmlkit.methods.Method.labels`).

    Most methods train on the observed partial labels; the oracle references need the truth:
    ``full`` = 2Y - 1 (every label known), ``1p_alln`` = the observed positives plus every
    true negative as -1 (docs/methods.md, "bce" and "iun").
    """
    if method.labels == "observed":
        return observed.astype(np.int8)
    if truth is None:
        raise ValueError(
            f"method {method.name!r} trains on {method.labels!r} labels and needs the full training labels; "
            "it is a reference that cannot run on partially labelled data alone"
        )
    truth = np.asarray(truth)
    if truth.shape != observed.shape:
        raise ValueError(f"truth shape {truth.shape} does not match observed labels {observed.shape}")
    if method.labels == "full":
        return (2 * truth.astype(np.int8) - 1).astype(np.int8)
    out = np.where(truth == 0, -1, 0).astype(np.int8)
    out[observed == 1] = 1
    return out


def expected_positives(train_labels: np.ndarray, truth_train: np.ndarray | None) -> float:
    """Mean number of positives per training example: the prior of EPR and ROLE.

    The papers set it from the dataset's true statistics (docs/methods.md, "epr"); without
    the truth we fall back to the observed positives, a lower bound.
    """
    source = train_labels == 1 if truth_train is None else np.asarray(truth_train)
    return float(np.asarray(source).sum(axis=1).mean())


@dataclass(frozen=True)
class RunPlan:
    """What a run is, before its first step: read by the loop, the trainer, resume and the sweep.

    ``data`` and ``split`` may be shared by the plans of a group (:meth:`for_config`): they are
    never modified after planning.
    """

    config: RunConfig
    #: the method's class (its declarations) and the hyperparameters the run gives it
    method: type[Method]
    hparams: dict[str, Any]
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
    #: the run's network, with its method's parts (:mod:`spmlkit.training.network`)
    network: NetworkSpec

    @property
    def kind(self) -> str:
        """"features" or "images"."""
        return self.data.kind

    @property
    def two_views(self) -> bool:
        """Whether the method reads a strong view of every row beside the weak one (the data source
        then makes both, and the step forwards them as one batch)."""
        return "strong" in self.method.requires

    @functools.cached_property
    def group_key(self) -> str | None:
        """:func:`batch_key` of this run's configuration, derived once (a group's runs are each
        checked against it)."""
        return batch_key(self.config)

    def for_config(self, config: RunConfig) -> RunPlan:
        """The plan of another run of this run's group (same :func:`batch_key`): only the settings
        the method lets a group vary differ, so everything derived from the data is shared. A
        configuration of another group is refused (a ``ValueError``, not an
        :class:`~spmlkit.errors.InputError`: the sweep groups by this same decision, so there it is a
        bug of ours and is not taken for a run's bad setting)."""
        key = batch_key(config)
        if key is None or key != self.group_key:
            raise ValueError(f"run {config.method.name} seed {config.optimisation.seed} lr "
                               f"{config.optimisation.lr:g} cannot train in the group of seed "
                               f"{self.config.optimisation.seed} lr {self.config.optimisation.lr:g}: "
                               f"{unbatchable_reason(config) or 'the runs differ in more than ' + ', '.join(varying(config))}")
        return dataclasses.replace(self, config=config, hparams=self.method.check_hparams(config.method.hparams))

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

    def build_method(self, *, epochs: int | None = None, device: torch.device | str | None = None,
                     features: Callable[[], torch.Tensor] | None = None) -> Method:
        """The run's method object (its losses, label algorithm, networks), seeded by the run's seed,
        on ``device`` (the run's by default); ``epochs`` for a phase shorter than the run
        (LinearInit). ``features``: the training rows' features in index order, for a method that
        asks for them (``DataSource.train_features``; for an image run a pass over its images)."""
        from ..errors import user_input

        def training_features() -> torch.Tensor:
            if features is None:
                raise ValueError(f"method {self.method.name!r} needs the training rows' features, and this run "
                                 "gives none")
            return features()

        info = RunInfo(num_train=len(self.split.train_idx), num_classes=self.data.num_classes,
                       observed=self.train_labels, expected_num_pos=self.expected_num_pos,
                       epochs=self.config.schedule.epochs if epochs is None else epochs,
                       seed=self.config.optimisation.seed, features=training_features)
        with user_input():  # hyperparameter values out of range, a warm-up beyond the epochs
            method = self.method(info, **self.hparams)
        return method.to(self.device if device is None else device)

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
        method = get_method(config.method.name)
        hparams = method.check_hparams(config.method.hparams)
        data = load_run_data(config) if data is None else data
        network = _check_method_fits(config, method, data.kind, dist)
        if "strong" in method.requires and data.images is not None and data.images.transform_spec.get("kind") == "grey":
            from ..data.strong_augment import grey_images_refusal

            raise ValueError(grey_images_refusal(method.name, data.name))  # its strong view's operations need colour
        split = split_and_observe(config, data)
        train_labels = method_label_matrix(method, split.observed, split.truth_train)
        if method.sees_more_labels and split.truth_train is None:
            raise ValueError(f"method {method.name!r} is a reference that trains on what the training rows' full labels "
                             f"tell it, and {data.name} has none; leave {method.name} out")
        validate_observed(train_labels, where=f"the training labels of {data.name}")
        if not (train_labels != 0).any():
            raise ValueError(f"the training rows of {data.name} carry no observed label at all under observation "
                             f"{config.data.observation!r}; there is nothing to learn from")
        device = _device(config, data, dist)
        check_recipe(config, data, len(split.train_idx), dist)  # docs/protocol.md, "Recipes"
    global_batch = (config.method.batch_statistics or method.batch_statistics) == "global"
    return RunPlan(config=config, method=method, hparams=hparams, data=data, split=split, train_labels=train_labels,
                   expected_num_pos=expected_positives(train_labels, split.truth_train), device=device,
                   global_batch=global_batch, network=network)


def _check_method_fits(config: RunConfig, method: type[Method], kind: str, dist: Distributed) -> NetworkSpec:
    """Refuse, in one line, a method on data or a network it cannot train with
    (:func:`~spmlkit.training.network.check_network`), and two views of each image where spmlkit
    does not combine them; returns the run's network."""
    network = check_network(config, kind)
    if "strong" in method.requires:
        why = ("crops (augment multiscale_crop)" if config.recipe.augment != "resize" else
               "--decode gpu" if config.machine.decode == "gpu" else
               "several processes" if dist.enabled else None)
        if why:
            raise ValueError(f"method {method.name!r} trains on two views of each image, which spmlkit does not "
                             f"combine with {why}; remove it")
    return network


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
    method's :attr:`~spmlkit.methods.Method.batchable`, the network's (a backbone with batch
    normalisation and an image pipeline is one run's; a feature head with dropout draws its masks
    from the global RNG, which R runs cannot share as R solo runs would), and the machinery that
    belongs to one run.
    """
    from ..models import FeatureHead

    try:
        feature = is_feature_run(config)
        method = get_method(config.method.name)
    except (ValueError, OSError) as exc:  # an unknown dataset or method, a missing folder: planning reports it
        return f"the run's settings cannot be checked here ({exc})"
    checks = (
        (not method.batchable, f"method {method.name!r} declares that it cannot be batched"),
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
    settings without those its method lets a group vary (:func:`varying`), as text, so configs with
    equal keys form one group."""
    if unbatchable_reason(config) is not None:
        return None
    values = {k: v for k, v in config.flat().items() if k not in varying(config)}
    return json.dumps(values, sort_keys=True, default=str)
