"""``train(config)`` and ``train_group(configs)``: every run goes through them.

The command line (``spmlkit train``), the estimator (:class:`~spmlkit.estimator.SPMLClassifier`),
sweeps and the benchmark all call :func:`train` (one run) or :func:`train_group` (runs that
differ only in seed and learning rate, trained at once), so the same settings give the same
numbers whatever the entry point. A run is:

1. its plan (:func:`~spmlkit.training.plan.plan_run`): the data under the shared protocol --
   observed labels drawn over the official train list, the reference train/val split
   (docs/protocol.md, "Observed labels" and "Train/val split") --, the label matrix its method
   trains on, its device;
2. its model (a head on features, or backbone + head on images, with its method's parts), seeded by
   ``config.optimisation.seed``, its method object (:class:`~spmlkit.methods.Method`: losses, label
   algorithm, networks of its own) and label state;
3. :func:`~spmlkit.training.loop.run_loop` with the stopping rule of the config, selecting the
   best validation epoch (docs/protocol.md, "Training protocols");
4. the final evaluation of the selected epoch on the official test list.

``seed`` seeds only the model initialisation and the batch order (as the EM code's torch
seeds): every method sees the same split and the same observed labels.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch

from ..errors import InputError, user_input
from ..labels import LabelState
from .config import RunConfig
from .device import autocast_factory, deterministic_cuda, num_threads, peak_memory, reset_peak_memory
from .distributed import Distributed
from .divergence import RunDiverged, divergence_message
from .evaluation import evaluate_test, unobserved_analysis
from .linear_init import linear_init
from .loggers import LoggerGroup, check_loggers, open_loggers
from .loop import Group, LoopHooks, Run, StoppingRule, run_loop
from .plan import RunPlan, plan_run, requested_device, unbatchable_reason
from .provenance import run_provenance, utc_now
from .recipe import Recipe, global_batch_size, prepare_parts, steps_per_epoch
from .result import RunResult
from .run_data import RunData, as_tensor, is_feature_run, standardize
from .run_dir import RunDirectory
from .sources import DataSource, FeatureSource, ImageSource

__all__ = ["train", "train_group"]


def train(
    config: RunConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    on_step: Callable[[int], None] | None = None,
    data: RunData | None = None,
    on_epoch_start: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Train ``config`` and evaluate its selected epoch on the test list.

    ``config.output.out`` names the run folder (:mod:`~spmlkit.training.run_dir`); None keeps the run
    in memory. ``resume=True`` continues from ``<out>/last.pt`` (a killed run loses at most
    the epoch in progress); ``overwrite=True`` replaces a run already in ``out``.
    ``stop_after=N`` ends this call after N more epochs (time-sliced jobs; resume later).
    ``data`` replaces loading ``config.data.dataset`` (the estimator's in-memory arrays).
    ``on_epoch_start(epoch, examples)`` and ``on_step(examples)`` report progress within an epoch
    (the command line's progress bar). A run that fails or is interrupted before its first epoch
    is saved leaves no run folder behind (:meth:`~spmlkit.training.run_dir.RunDirectory.discard_unstarted`).
    """
    if config.output.out is None and (resume or stop_after is not None):
        raise ValueError("resume and stop_after need a run folder: set out (--out)")
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"stop_after must be a positive number of epochs, got {stop_after!r}")
    t0, started_at = time.perf_counter(), utc_now()
    kind = data.kind if data is not None else ("features" if is_feature_run(config) else "images")
    dist = Distributed.from_environment(requested_device(config, kind))
    try:
        with user_input():  # an unknown logger or a missing package, before any work
            check_loggers(config.output.loggers)
        plan = plan_run(config, data=data, dist=dist)  # every refusal here leaves no run folder behind
        reset_peak_memory(plan.device)
        run_dir = RunDirectory(config.output.out) if config.output.out else None
        with user_input():
            # rank 0 alone touches the folder; every process gets its answer (or its refusal)
            ckpt = dist.on_main(lambda: run_dir.start(config, resume=resume, overwrite=overwrite, kind=plan.kind)
                                ) if run_dir else None
        if not dist.is_main:
            on_epoch = on_epoch_start = on_step = None  # one process reports
        rows = len(plan.split.train_idx)
        hooks = LoopHooks(on_epoch=on_epoch, on_step=on_step,
                          on_epoch_start=None if on_epoch_start is None else lambda epoch: on_epoch_start(epoch, rows))
        try:
            with num_threads(config.machine.num_threads), deterministic_cuda(config.machine.deterministic):
                result = _train_one(plan, run_dir, ckpt, stop_after, hooks, dist)
        except BaseException:
            if run_dir is not None and dist.is_main:
                run_dir.discard_unstarted()
            raise
        result.seconds, result.processes = time.perf_counter() - t0, dist.world_size
        result.provenance = run_provenance(plan.device, started_at, utc_now())
        result.peak_host_memory_bytes, result.peak_gpu_memory_bytes = peak_memory(plan.device)
        if run_dir is not None and result.finished and dist.is_main:
            run_dir.write_result(result.to_record())
        dist.barrier()
        return result
    finally:
        dist.close()


def train_group(configs: list[RunConfig], *, data: RunData | None = None) -> list[RunResult]:
    """Train ``configs`` -- runs that differ only in seed, learning rate and weight decay -- at once, as R
    copies of one model in one loop (docs/architecture.md, "Many runs at once"); result ``i`` is
    ``train(configs[i])``'s within the stated tolerance. A run that cannot be batched
    (:func:`~spmlkit.training.plan.unbatchable_reason`) is refused with the reason. ``seconds``
    of each result, and the times in its history, are the group's divided among its runs; its peak
    memory is the whole group's, which does not divide among runs that share one loop."""
    if not configs:
        return []
    for config in configs:
        why = unbatchable_reason(config)
        if why is not None:
            raise ValueError(f"run {config.method.name} seed {config.optimisation.seed} lr {config.optimisation.lr:g} cannot train in a group: {why}")
    t0, started_at = time.perf_counter(), utc_now()
    first = plan_run(configs[0], data=data)
    reset_peak_memory(first.device)
    plans = [first, *(first.for_config(config) for config in configs[1:])]
    source = _source(first, Distributed())
    runs = [_build_run(plan, source) for plan in plans]
    groups = _merged([g for plan, run in zip(plans, runs) for g in _param_groups(plan.config, run)])
    group = Group(runs, source, _optimizer(first.config, groups), first.device)
    machine = first.config.machine  # one for the group: the machine settings are part of batch_key
    with num_threads(machine.num_threads), deterministic_cuda(machine.deterministic):
        run_loop(group, epochs=first.config.schedule.epochs, val_targets=first.split.val_targets,
                 truth_train=first.split.truth_train, test_targets=first.data.Y_test,
                 epoch_metrics=first.config.schedule.epoch_metrics)
        results = _evaluate(plans, group, resumed_from=0, run_dir=None)
    seconds = (time.perf_counter() - t0) / len(configs)
    peaks = peak_memory(first.device)  # the group's: its runs share one model stack and one process
    provenance = run_provenance(first.device, started_at, utc_now())
    for result in results:
        result.seconds, result.provenance = seconds, dict(provenance)
        result.peak_host_memory_bytes, result.peak_gpu_memory_bytes = peaks
    return results


def _build_run(plan: RunPlan, source: DataSource) -> Run:
    """A run's own objects, in the order that fixes its random draws: the model first (its initial
    weights are the seeded global stream's), then the method, then its generator. A method that
    reads the training rows' features gets them from ``source`` and the model as built: an image
    run's pooled features of its initial backbone."""
    config = plan.config
    model = plan.build_model()
    if config.recipe.init_weights is not None:  # e.g. a method's second stage from its first stage's run
        from .checkpoint import load_initial_weights

        with user_input():
            load_initial_weights(model, config.recipe.init_weights)
    state = LabelState(plan.train_labels)
    method = plan.build_method(features=lambda: source.train_features(model))
    return Run(model, method, state, torch.Generator().manual_seed(config.optimisation.seed),
               StoppingRule(config.schedule.patience, config.schedule.min_delta, config.schedule.stop_drop))


def _param_groups(config: RunConfig, run: Run) -> list[dict[str, Any]]:
    """A run's parameter groups, each carrying the run's own weight decay, so that the runs of a
    batched group may differ in it as they do in learning rate (a solo run's optimiser applies
    its one weight decay to every group: the same numbers)."""
    groups = run.model.param_groups(config.optimisation.lr, config.optimisation.head_lr_mult) \
        + run.method.param_groups(config.optimisation.lr)
    return [{**g, "weight_decay": config.optimisation.weight_decay} for g in groups]


def _merged(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parameter groups with the same options (learning rate, ...) merged into one: the runs of a
    batched group that share a learning rate then cost the optimiser one call, not one each. Adam
    and SGD update every parameter from its own state, so merging changes no number."""
    merged: dict[str, dict[str, Any]] = {}
    for g in groups:
        key = repr(sorted((k, v) for k, v in g.items() if k != "params"))
        if key in merged:
            merged[key]["params"] = [*merged[key]["params"], *g["params"]]
        else:
            merged[key] = {**g, "params": list(g["params"])}
    return list(merged.values())


def _train_one(plan: RunPlan, run_dir: RunDirectory | None, ckpt: dict | None, stop_after: int | None,
               hooks: LoopHooks, dist: Distributed) -> RunResult:
    config = plan.config
    source = _source(plan, dist)
    run = _build_run(plan, source)
    if dist.enabled and not plan.global_batch and run.method.corrects_labels:
        raise InputError(f"{plan.method.name} corrects labels during each step; with per-process batch statistics "
                         "the processes' label states would drift apart: use --batch-statistics global")
    autocast, scaler = autocast_factory(config.machine.amp, plan.device) if plan.kind == "images" else (None, None)
    if isinstance(source, ImageSource):
        source.autocast = autocast
    if ckpt is None and config.schedule.linear_init_epochs > 0:
        linear_init(plan, run, source)
    with user_input():  # a part name the model does not have
        prepare_parts(config, run.model)  # before the optimiser and the distributed wrapper see the weights
    run.train_model = dist.wrap(run.model)  # synchronised batch norms replace the plain ones in ``model``
    if config.machine.compile:  # the training forward only: checkpoints keep the plain module's parameter names
        run.train_model = torch.compile(run.train_model)
    optimizer = _optimizer(config, _param_groups(config, run))
    if Recipe.has_hooks(config.recipe):  # the schedule (on the optimiser's lr), the EMA (a copy of the weights now)
        steps = steps_per_epoch(len(plan.split.train_idx), global_batch_size(config, dist), config.recipe.drop_last)
        run.recipe = Recipe(config.recipe, run.model, optimizer, epochs=config.schedule.epochs, steps=steps)
    group = Group([run], source, optimizer, plan.device, autocast, scaler, dist=dist, global_batch=plan.global_batch)
    with user_input():  # a last.pt written for another number of classes or another model
        if ckpt is not None:
            run.loop = run_dir.restore(ckpt, run, optimizer)
    resumed_from = run.loop.epoch
    stop_epoch = None if stop_after is None else run.loop.epoch + stop_after
    with user_input():  # rank 0 alone logs, as it alone writes the run folder
        loggers = open_loggers(config.output.loggers, _out(run_dir)) if dist.is_main else LoggerGroup()
    loggers.log_config(config.to_dict())
    extra_best = plan.checkpoint_extras(with_run_folder=run_dir is not None)

    def on_epoch_end(done: Run) -> None:
        if run_dir is not None and dist.is_main:
            run_dir.save_epoch(done, optimizer, config, extra_best)
        dist.barrier()  # nobody runs ahead of the checkpoint a resume would start from
        loggers.log_metrics(done.loop.history[-1], done.loop.epoch)
        if stop_epoch is not None and stop_epoch <= done.loop.epoch < config.schedule.epochs and not done.loop.stopped_early:
            raise _StopNow()

    hooks = LoopHooks(on_epoch=hooks.on_epoch, on_epoch_end=on_epoch_end, on_step=hooks.on_step,
                      on_epoch_start=hooks.on_epoch_start)
    try:
        run_loop(group, epochs=config.schedule.epochs, val_targets=plan.split.val_targets, truth_train=plan.split.truth_train,
                 hooks=hooks, test_targets=plan.data.Y_test, epoch_metrics=config.schedule.epoch_metrics)
        if run.loop.diverged is not None:
            message = divergence_message(config, run.loop.diverged, _lr_now(run))
            if run_dir is not None and dist.is_main:
                run_dir.write_diverged(message, run.loop, config)
            raise RunDiverged(message)
    except _StopNow:
        ls = run.loop
        return RunResult(config, ls.best_epoch, ls.best_val_map, float("nan"), ls.history, finished=False,
                         resumed_from=resumed_from, images_per_second=_throughput(ls.history), out=_out(run_dir),
                         class_names=list(plan.data.class_names), **_how_trained(group, run))
    finally:
        loggers.close()
    return _evaluate([plan], group, resumed_from=resumed_from, run_dir=run_dir)[0]


def _evaluate(plans: list[RunPlan], group: Group, *, resumed_from: int, run_dir: RunDirectory | None
              ) -> list[RunResult]:
    """Test metrics of each run's selected epoch, thresholds chosen on validation, the
    unobserved-entry analysis."""
    plan, runs = plans[0], group.runs
    data, split = plan.data, plan.split
    val_targets = split.val_targets
    n = len(runs)
    test_probs = list(group.probabilities(runs, "test").cpu().numpy()) if data.Y_test is not None else [None] * n
    val_probs = list(group.probabilities(runs, "val").cpu().numpy()) if len(val_targets) else [None] * n
    train_probs = (list(group.probabilities(runs, "train").cpu().numpy()) if split.truth_train is not None
                   else [None] * n)
    results = []
    for run_plan, run, test, val, train_p in zip(plans, runs, test_probs, val_probs, train_probs):
        if run.loop.diverged is not None:  # a failed run: no test numbers (training/divergence.py)
            results.append(RunResult(run_plan.config, run.loop.best_epoch, run.loop.best_val_map, float("nan"),
                                     run.loop.history, finished=False, class_names=list(data.class_names),
                                     diverged=divergence_message(run_plan.config, run.loop.diverged, _lr_now(run)),
                                     **_how_trained(group, run)))
            continue
        ap: list[float] = []
        evaluation: dict = {}
        if test is not None:  # users' data may have no labelled test set
            evaluation = evaluate_test(test, data.Y_test, threshold=plan.method.threshold, val_probs=val,
                                       val_targets=val_targets if len(val_targets) else None)
            ap = [float(a) for a in evaluation.pop("ap")]
        analysis = {} if train_p is None else unobserved_analysis(train_p, split.truth_train, split.observed)
        ls = run.loop
        results.append(RunResult(
            config=run_plan.config, best_epoch=ls.best_epoch, val_map=ls.best_val_map,
            test_map=float(np.mean(ap)) if ap else float("nan"), history=ls.history,
            test_metrics={k: v for k, v in evaluation.items() if isinstance(v, float)}, test_ap=ap, analysis=analysis,
            class_names=list(data.class_names), images_per_second=_throughput(ls.history),
            stopped_early=ls.stopped_early, resumed_from=resumed_from, out=_out(run_dir), model=run.model,
            label_state=run.state, **_how_trained(group, run)))
    return results


def _how_trained(group: Group, run: Run) -> dict[str, Any]:
    """What the run's training step saw of its training (docs/architecture.md, "How a run
    trained"): the runs it stepped with, whether it was compiled, the dtype of its logits. A
    batched group's forward is its first run's step (:mod:`~spmlkit.training.batched`), so the
    other runs take their dtype from it."""
    dtypes = [r.step.forward_dtype for r in (run, *group.runs) if r.step.forward_dtype is not None]
    dtype = str(dtypes[0]).removeprefix("torch.") if dtypes else None
    return {"group_size": run.step.group_size, "compiled": run.step.compiled, "forward_dtype": dtype}


def _source(plan: RunPlan, dist: Distributed) -> DataSource:
    config, data, split, device = plan.config, plan.data, plan.split, plan.device
    tr, va = split.train_idx, split.val_idx
    batch, drop_last = global_batch_size(config, dist), config.recipe.drop_last
    if data.kind == "features":
        X_val = data.X_train[va] if data.X_val is None else data.X_val
        X_test = data.X_test if data.X_test is not None else data.X_train[:0]
        mats = (data.X_train[tr], X_val, X_test)
        mats = standardize(*mats) if config.data.standardize else tuple(np.asarray(X, dtype=np.float32) for X in mats)
        Xtr, Xva, Xte = (as_tensor(X).to(device) for X in mats)
        return FeatureSource(Xtr, Xva, Xte, batch, dist, drop_last=drop_last)
    images = data.images
    recipe = config.recipe
    crop = None
    if recipe.augment == "multiscale_crop":  # docs/protocol.md, "Recipes"
        from ..data.crops import CropPolicy

        crop = CropPolicy(recipe.crop_scale, tuple(recipe.crop_sizes), config.data.image_size)
    with user_input():  # crops of a generated dataset at a scale it does not have, crops with --decode gpu
        return ImageSource(images.train_dataset(), images.test_dataset(), tr, va,
                           batch_size=batch, eval_batch_size=config.machine.eval_batch_size,
                           hflip=config.data.hflip, num_workers=config.machine.num_workers, device=device,
                           channels_last=config.machine.channels_last, num_classes=data.num_classes, dist=dist,
                           decode=config.machine.decode, crop=crop, drop_last=drop_last,
                           strong=plan.two_views)


def _optimizer(config: RunConfig, groups: list[dict]) -> torch.optim.Optimizer:
    """SGD, Adam, AdamW or Adamax over ``groups`` (each run's own groups, with its own learning rate). Adam is
    PyTorch's fused implementation (one kernel for all parameters of a group), on the GPU and the
    CPU alike: on a GPU it spares ResNet-50 some 160 small kernel launches per step, on the CPU a
    group of R feature runs pays one call per learning rate instead of one per tensor."""
    if config.optimisation.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.optimisation.lr, momentum=config.optimisation.momentum, weight_decay=config.optimisation.weight_decay)
    if config.optimisation.optimizer == "adamax":  # torch's Adamax, its defaults (no fused kernel)
        return torch.optim.Adamax(groups, lr=config.optimisation.lr, weight_decay=config.optimisation.weight_decay)
    params = [p for g in groups for p in g["params"]]
    fused = {"fused": True} if params and all(p.is_floating_point() for p in params) else {}
    kind = torch.optim.AdamW if config.optimisation.optimizer == "adamw" else torch.optim.Adam
    return kind(groups, lr=config.optimisation.lr, weight_decay=config.optimisation.weight_decay, **fused)


def _lr_now(run: Run) -> float | None:
    """The lr a run's schedule had reached (None without a schedule)."""
    recipe = run.recipe
    if recipe is None or recipe.scheduler is None:
        return None
    return float(recipe.optimizer.param_groups[0]["lr"])


def _out(run_dir: RunDirectory | None):
    return None if run_dir is None else run_dir.path


def _throughput(history: list[dict[str, float]]) -> float:
    vals = [h["images_per_second"] for h in history if np.isfinite(h.get("images_per_second", float("nan")))]
    return float(np.mean(vals)) if vals else float("nan")


class _StopNow(Exception):
    """Raised after the epoch ``stop_after`` asked for; the run folder holds everything to resume."""
