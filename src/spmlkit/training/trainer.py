"""``train(config)``: the one entry point every run goes through.

The command line (``spmlkit train``), the estimator (:class:`~spmlkit.estimator.SPMLClassifier`),
sweeps and the benchmark all call :func:`train`, so the same settings give the same numbers
whatever the entry point. A run is:

1. the data (:func:`~spmlkit.training.run_data.load_run_data`) under the shared protocol:
   observed labels drawn over the official train list, the reference train/val split
   (docs/protocol.md, "Observed labels" and "Train/val split");
2. the model (a head on features, or backbone + head on images), seeded by ``config.seed``;
3. the method's components (loss, regularisers, label algorithm) from its recipe;
4. :func:`~spmlkit.training.loop.run_loop` with the stopping rule of the config, selecting the
   best validation epoch (docs/protocol.md, "Training protocols");
5. the final evaluation of the selected epoch on the official test list.

``seed`` seeds only the model initialisation and the batch order (as the EM code's torch
seeds): every method sees the same split and the same observed labels.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from ..errors import InputError, user_input
from ..labels import LabelState, validate_observed
from ..methods import resolve_hparams
from .components import build_components, expected_positives, method_label_matrix
from .config import RunConfig
from .device import autocast_factory, num_threads, resolve_device
from .distributed import Distributed
from .evaluation import evaluate_test, unobserved_analysis
from .linear_init import linear_init
from .loggers import LoggerGroup, check_loggers, open_loggers
from .loop import LoopHooks, LoopParts, LoopState, StoppingRule, run_loop
from .result import RunResult
from .run_data import RunData, RunSplit, as_tensor, load_run_data, split_and_observe, standardize
from .run_dir import RunDirectory, feature_spec
from .sources import FeatureSource, ImageSource

__all__ = ["train"]


def train(
    config: RunConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    on_step: Callable[[int], None] | None = None,
    data: RunData | None = None,
) -> RunResult:
    """Train ``config`` and evaluate its selected epoch on the test list.

    ``config.out`` names the run folder (:mod:`~spmlkit.training.run_dir`); None keeps the run
    in memory. ``resume=True`` continues from ``<out>/last.pt`` (a killed run loses at most
    the epoch in progress); ``overwrite=True`` replaces a run already in ``out``.
    ``stop_after=N`` ends this call after N more epochs (time-sliced jobs; resume later).
    ``data`` replaces loading ``config.dataset`` (the estimator's in-memory arrays).
    """
    if config.out is None and (resume or stop_after is not None):
        raise ValueError("resume and stop_after need a run folder: set out (--out)")
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"stop_after must be a positive number of epochs, got {stop_after!r}")
    t0 = time.perf_counter()
    dist = Distributed.from_environment(config.device)
    try:
        with user_input():  # everything read from the user's options and files is checked before any work
            resolve_hparams(config.method, config.hparams)
            check_loggers(config.loggers)  # an unknown logger or a missing package, before any work
            data = load_run_data(config) if data is None else data
            split, train_labels = _protocol(config, data)  # refusals here leave no run folder behind
            run_dir = RunDirectory(config.out) if config.out else None
            # rank 0 alone touches the folder; every process gets its answer (or its refusal)
            ckpt = dist.on_main(lambda: run_dir.start(config, resume=resume, overwrite=overwrite)) if run_dir else None
        if not dist.is_main:
            on_epoch = None  # one process reports
        with num_threads(config.num_threads):
            result = _run(config, data, split, train_labels, run_dir, ckpt, stop_after,
                          LoopHooks(on_epoch=on_epoch, on_step=on_step), dist)
        result.seconds = time.perf_counter() - t0
        if run_dir is not None and result.finished and dist.is_main:
            run_dir.write_result(result.to_record())
        dist.barrier()
        return result
    finally:
        dist.close()


def _device(config: RunConfig, data: RunData, dist: Distributed) -> torch.device:
    # feature runs are a few matrix products per step: the CPU unless a device is named
    if data.kind == "features" and config.device == "auto":
        return torch.device("cpu")
    return dist.device(resolve_device(config.device))


def _protocol(config: RunConfig, data: RunData) -> tuple[RunSplit, np.ndarray]:
    """The protocol's split and the label matrix the method trains on, checked once per run."""
    method = resolve_hparams(config.method, config.hparams).method
    split = split_and_observe(config, data)
    train_labels = method_label_matrix(method, split.observed, split.truth_train)
    validate_observed(train_labels, where=f"the training labels of {data.name}")
    if not (train_labels != 0).any():
        raise ValueError(f"the training rows of {data.name} carry no observed label at all under observation "
                         f"{config.observation!r}; there is nothing to learn from")
    return split, train_labels


def _run(config: RunConfig, data: RunData, split: RunSplit, train_labels: np.ndarray, run_dir: RunDirectory | None,
         ckpt: dict | None, stop_after: int | None, hooks: LoopHooks, dist: Distributed) -> RunResult:
    resolved = resolve_hparams(config.method, config.hparams)
    method = resolved.method
    global_batch = (config.batch_statistics or method.batch_statistics) == "global"
    with user_input():
        device = _device(config, data, dist)
    tr, va, truth_train, val_targets = split.train_idx, split.val_idx, split.truth_train, split.val_targets

    torch.manual_seed(config.seed)  # the model's initial weights
    np.random.seed(config.seed % 2**32)
    with user_input():  # an unknown backbone, weights that cannot be loaded offline
        model = data.build_model(config)
    model = model.to(device)
    if device.type == "cuda" and config.channels_last and data.kind == "images":
        model = model.to(memory_format=torch.channels_last)
    state = LabelState(train_labels)
    with user_input():  # hyperparameter values out of range, APL's warm-up beyond the epochs
        comp = build_components(resolved, num_train=len(tr), num_classes=data.num_classes, observed=train_labels,
                                expected_num_pos=expected_positives(train_labels, truth_train),
                                epochs=config.epochs, seed=config.seed).to(device)
    if dist.enabled and not global_batch and comp.loss.corrects_labels:
        raise InputError(f"{method.name} corrects labels during each step; with per-process batch statistics the "
                         "processes' label states would drift apart: use --batch-statistics global")
    source = _source(config, data, tr, va, device, dist)
    autocast, scaler = autocast_factory(config.amp, device) if data.kind == "images" else (None, None)
    if isinstance(source, ImageSource):
        source.autocast = autocast
    generator = torch.Generator().manual_seed(config.seed)
    if ckpt is None and config.linear_init_epochs > 0:
        linear_init(config, resolved, model, comp, source, state, val_targets, truth_train, device)
    train_model = dist.wrap(model)  # synchronised batch norms replace the plain ones in ``model``
    if config.compile:  # the training forward only: checkpoints keep the plain module's parameter names
        train_model = torch.compile(train_model)
    groups = model.param_groups(config.lr, config.head_lr_mult) + comp.param_groups(config.lr)
    parts = LoopParts(model, source, state, comp, _optimizer(config, groups), generator, device, autocast, scaler,
                      dist=dist, train_model=train_model, global_batch=global_batch)
    with user_input():  # a last.pt written for another number of classes or another model
        ls = run_dir.restore(ckpt, parts) if ckpt is not None else LoopState()
    resumed_from = ls.epoch
    rule = StoppingRule(config.patience, config.min_delta, config.stop_drop)
    stop_epoch = None if stop_after is None else ls.epoch + stop_after
    with user_input():  # rank 0 alone logs, as it alone writes the run folder
        loggers = open_loggers(config.loggers, _out(run_dir)) if dist.is_main else LoggerGroup()
    loggers.log_config(config.to_dict())
    # a feature run records its inputs' standardisation, so that its exported model can be fed new rows
    extra_best = {"class_names": list(data.class_names), "threshold": method.threshold,
                  "transform": data.images.transform_spec if data.images else
                  feature_spec(data.X_train[tr], config.standardize) if run_dir else {"kind": "features"}}

    def on_epoch_end(loop_state: LoopState) -> None:
        if run_dir is not None and dist.is_main:
            run_dir.save_epoch(loop_state, parts, config, extra_best)
        dist.barrier()  # nobody runs ahead of the checkpoint a resume would start from
        loggers.log_metrics(loop_state.history[-1], loop_state.epoch)
        if stop_epoch is not None and stop_epoch <= loop_state.epoch < config.epochs and not loop_state.stopped_early:
            raise _StopNow()

    hooks = LoopHooks(on_epoch=hooks.on_epoch, on_epoch_end=on_epoch_end, on_step=hooks.on_step)
    try:
        loop = run_loop(parts, epochs=config.epochs, val_targets=val_targets, rule=rule, truth_train=truth_train,
                        loop_state=ls, hooks=hooks)
    except _StopNow:
        return RunResult(config, ls.best_epoch, ls.best_val_map, float("nan"), ls.history, finished=False,
                         resumed_from=resumed_from, images_per_second=_throughput(ls.history), out=_out(run_dir),
                         class_names=list(data.class_names))
    finally:
        loggers.close()
    return _evaluate(config, method, data, source, parts, loop, val_targets, truth_train, split.observed,
                     resumed_from, run_dir)


def _evaluate(config, method, data, source, parts, loop, val_targets, truth_train, observed_train, resumed_from,
              run_dir) -> RunResult:
    """Test metrics of the selected epoch, thresholds chosen on validation, the unobserved-entry analysis."""
    model = parts.model
    ap: list[float] = []
    evaluation: dict = {}
    if data.Y_test is not None:  # users' data may have no labelled test set
        test_probs = source.predict_test(model).cpu().numpy()
        val_probs = source.predict_val(model).cpu().numpy() if len(val_targets) else None
        evaluation = evaluate_test(test_probs, data.Y_test, threshold=method.threshold, val_probs=val_probs,
                                   val_targets=val_targets if len(val_targets) else None)
        ap = [float(a) for a in evaluation.pop("ap")]
    analysis = {}
    if truth_train is not None:
        analysis = unobserved_analysis(source.predict_train(model).cpu().numpy(), truth_train, observed_train)
    return RunResult(
        config=config, best_epoch=loop.best_epoch, val_map=loop.best_val_map,
        test_map=float(np.mean(ap)) if ap else float("nan"),
        history=loop.history, test_metrics={k: v for k, v in evaluation.items() if isinstance(v, float)},
        test_ap=ap, analysis=analysis, class_names=list(data.class_names),
        images_per_second=_throughput(loop.history), stopped_early=loop.stopped_early, resumed_from=resumed_from,
        out=_out(run_dir), model=model, label_state=parts.state,
    )


def _source(config: RunConfig, data: RunData, tr: np.ndarray, va: np.ndarray, device: torch.device,
            dist: Distributed):
    if data.kind == "features":
        X_val = data.X_train[va] if data.X_val is None else data.X_val
        X_test = data.X_test if data.X_test is not None else data.X_train[:0]
        mats = (data.X_train[tr], X_val, X_test)
        mats = standardize(*mats) if config.standardize else tuple(np.asarray(X, dtype=np.float32) for X in mats)
        Xtr, Xva, Xte = (as_tensor(X).to(device) for X in mats)
        return FeatureSource(Xtr, Xva, Xte, config.batch_size, dist)
    images = data.images
    return ImageSource(images.train_dataset(), images.test_dataset(), tr, va, batch_size=config.batch_size,
                       eval_batch_size=config.eval_batch_size, hflip=config.hflip, num_workers=config.num_workers,
                       device=device, channels_last=config.channels_last, num_classes=data.num_classes, dist=dist,
                       decode=config.decode)


def _optimizer(config: RunConfig, groups: list[dict]) -> torch.optim.Optimizer:
    """SGD or Adam over ``groups``; Adam is fused (one kernel for all parameters) when they all
    live on CUDA, which spares ResNet-50 some 160 small kernel launches per step. On the CPU
    Adam keeps its default implementation, so CPU results stay bit-identical across versions."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    params = [p for g in groups for p in g["params"]]
    fused = {"fused": True} if params and all(p.is_cuda and p.is_floating_point() for p in params) else {}
    return torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay, **fused)


def _out(run_dir: RunDirectory | None):
    return None if run_dir is None else run_dir.path


def _throughput(history: list[dict[str, float]]) -> float:
    vals = [h["images_per_second"] for h in history if np.isfinite(h.get("images_per_second", float("nan")))]
    return float(np.mean(vals)) if vals else float("nan")


class _StopNow(Exception):
    """Raised after the epoch ``stop_after`` asked for; the run folder holds everything to resume."""
