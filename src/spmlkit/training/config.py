"""The one run configuration, in sections: data, model, method, optimisation, schedule, recipe, machine, output.

Why sections. A run's settings answer eight different questions -- which data and protocol
(``data``), which network (``model``), which method (``method``), how it is optimised
(``optimisation``), for how long and when to stop (``schedule``), what a paper's code does around
its loss (``recipe``: schedules, weight averaging, frozen parts, crops), on what hardware and how
it is fed (``machine``), and where it is written (``output``). Kept apart, a reader finds a
setting by its concern and each section checks its own values.

Every setting has a unique name across sections, so a *flat* mapping (``{"dataset": "yeast",
"lr": 0.003}``) names settings as unambiguously as a nested one (``{"data": {"dataset": "yeast"},
"optimisation": {"lr": 0.003}}``). Presets, sweep files, command-line options and config files
may use either; :func:`config_from_dict` reads both, and so do run folders written by earlier
versions of spmlkit (their ``config.yaml`` was flat). ``config.yaml`` is written nested.

Where the values come from (later wins) is decided above this layer, by
:func:`spmlkit.experiments.presets.resolve_config`: defaults < the dataset's defaults < the
(method, dataset) preset < a config file < the command line < the saved run when resuming.

A setting that applies to only one kind of run (image runs or feature runs) says so in its
field metadata (``applies``); giving it a non-default value on the other kind is an error
(:meth:`RunConfig.check_source`), never silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunConfig", "DataConfig", "ModelConfig", "MethodConfig", "OptimisationConfig", "ScheduleConfig",
           "RecipeConfig", "MachineConfig", "OutputConfig", "RESUME_FREE", "SECTIONS", "applies_to", "config_from_dict",
           "default_setting", "flat_settings", "load_config_file", "merged_plugins", "saved_settings", "save_config"]


def _images(default: Any = None, *, factory: Any = None) -> Any:
    """A field that only image runs use."""
    if factory is not None:
        return field(default_factory=factory, metadata={"applies": "images"})
    return field(default=default, metadata={"applies": "images"})


def _features(default: Any) -> Any:
    """A field that only feature runs use."""
    return field(default=default, metadata={"applies": "features"})


@dataclass
class DataConfig:
    """Which data, and the protocol applied to it (docs/protocol.md)."""

    #: a feature dataset (yeast, an `extract` folder) or an image dataset (voc2012 | voc2007 |
    #: coco2014 | nuswide | cub | digits-mosaic | prepared). The default is Yeast, the data set the
    #: benchmark defaults to too: it ships with the installation and trains in seconds on a CPU
    dataset: str = "yeast"
    root: str | None = _images()  # dataset root (as downloaded) for benchmark image datasets
    prepared: str | None = _images()  # folder written by `spmlkit prepare` (default: <root>/spmlkit-prepared/...)
    dataset_variant: str | None = _images()  # another list of a data set (docs/protocol.md, "MS-COCO 2014")
    subset: int | None = None  # only the first N rows of the official train list (quick checks)
    observation: str = "single_positive"
    #: fraction of the official train list held out for validation; 0 trains on all of it and
    #: keeps the last epoch (there is nothing to select on)
    val_frac: float = 0.2
    val_variant: str = "clean"  # model selection on clean val labels or on the observed positives
    #: which rows train, validate and test (feature data sets): "official" (the set's own train and
    #: test lists, validation split off the train list as the reference does) or "random" (every row
    #: of the set, partitioned 80 / 10 / 10 afresh by the run's seed: the protocol of the papers on
    #: MULAN's sets; docs/protocol.md, "The tabular protocol")
    partition: str = _features("official")
    image_size: int = _images(448)  # images are resized to image_size x image_size
    hflip: bool = _images(True)  # random horizontal flips of training images
    standardize: bool = _features(True)  # z-score features with the train split's mean/std
    mosaic_train: int = _images(2000)  # digits-mosaic generator: training images
    mosaic_test: int = _images(1000)  # and test images

    def __post_init__(self) -> None:
        _choice("val_variant", self.val_variant, ("clean", "observed"))
        _choice("partition", self.partition, ("official", "random"))
        if self.partition == "random":
            if self.val_frac != DataConfig.val_frac:
                raise ValueError(f"val_frac {self.val_frac!r} splits the official train list; partition 'random' holds "
                                 "out 10 % of the whole set for validation and 10 % for test: remove val_frac")
            if self.val_variant != "clean":
                raise ValueError("partition 'random' validates on fully labelled rows, as the papers do; "
                                 "val_variant 'observed' does not apply: use val_variant 'clean'")
        _positive_int("image_size", self.image_size)
        if self.subset is not None:
            _positive_int("subset", self.subset)
        if not (isinstance(self.val_frac, (int, float)) and 0 <= self.val_frac < 1):
            raise ValueError(f"val_frac must be in [0, 1), got {self.val_frac!r}")


@dataclass
class ModelConfig:
    """Which network: a backbone and head for images, a head on fixed features."""

    backbone: str = _images("torchvision:resnet50")
    pretrained: bool = _images(True)
    lgconv: bool = _images(False)  # local-global convolutions in the backbone (spmlkit.models.lgconv)
    #: image runs' classifier: linear (global average pooling + one linear layer, the SPML papers') |
    #: label_query (a label-query transformer, one embedding per class; with a bottleneck, the
    #: bottleneck classifies each class's embedding) | None: the method's own, else linear
    #: (Method.model_parts; training/network.py)
    image_head: str | None = _images(None)
    head: str = _features("linear")  # feature runs: linear | mlp
    #: the MLP's hidden width: a number, or "classes" for as many units as the data set has labels
    #: (the MLP the tabular protocol trains; docs/protocol.md, "The tabular protocol")
    hidden: int | str = _features(256)
    dropout: float = _features(0.0)
    #: width of a Gaussian bottleneck before the classifier: None takes the method's own (none for most
    #: methods; Method.model_parts), 0 none
    bottleneck: int | None = None
    bottleneck_samples: int = 10  # the bottleneck's draws averaged per step (docs/methods.md has whose 10)

    def __post_init__(self) -> None:
        _choice("head", self.head, ("linear", "mlp"))
        if self.image_head is not None:
            _choice("image_head", self.image_head, ("linear", "label_query"))
        if self.hidden != "classes":
            try:
                _positive_int("hidden", self.hidden)
            except ValueError:
                raise ValueError(f"hidden must be a positive integer or 'classes' (one unit per label), "
                                 f"got {self.hidden!r}") from None
        _non_negative("dropout", self.dropout)
        if self.bottleneck is not None and (isinstance(self.bottleneck, bool) or not isinstance(self.bottleneck, int)
                                            or self.bottleneck < 0):
            raise ValueError(f"bottleneck must be an integer >= 0 (0: none) or null (the method's own), "
                             f"got {self.bottleneck!r}")
        _positive_int("bottleneck_samples", self.bottleneck_samples)


@dataclass
class MethodConfig:
    """Which method (docs/methods.md) and its hyperparameters."""

    name: str = "an"  # the setting "method" (docs/methods.md; `spmlkit methods` lists them)
    hparams: dict[str, Any] = field(default_factory=dict)
    #: under torch.distributed: "global" (the loss sees the whole global batch, equal to one
    #: process), "process" (each process's own slice) or None (the method's default,
    #: Method.batch_statistics); docs/architecture.md, "Distributed training"
    batch_statistics: str | None = None
    #: the plug-ins (a .py file or a module name, docs/plugins.md) whose methods, losses or datasets the
    #: run may name; loaded by whoever builds the configuration (experiments.presets.resolve_config), so a
    #: resumed run, a sweep's worker and a Ray task load them again from here
    plugins: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from ..methods import get_method

        if not (isinstance(self.plugins, list) and all(isinstance(p, str) and p for p in self.plugins)):
            raise ValueError(f"plugins must be a list of .py files or module names, got {self.plugins!r}")
        get_method(self.name)
        if not isinstance(self.hparams, dict):
            raise ValueError(f"hparams must be a mapping of NAME: VALUE, got {self.hparams!r}")
        if self.batch_statistics is not None:
            _choice("batch_statistics", self.batch_statistics, ("global", "process"))


@dataclass
class OptimisationConfig:
    """How the model is optimised: the optimiser, its step, the batch, the seed."""

    optimizer: str = "adam"  # adam | adamw (decoupled weight decay) | adamax | sgd (docs/protocol.md, "Recipes")
    lr: float = 1e-5
    head_lr_mult: float = _images(1.0)
    weight_decay: float = 0.0
    momentum: float = 0.9
    batch_size: int = 8
    #: seeds the model's initial weights and the batch order (every method sees the same split
    #: and observed labels whatever the seed)
    seed: int = 0

    def __post_init__(self) -> None:
        _choice("optimizer", self.optimizer, ("adam", "adamw", "adamax", "sgd"))
        _positive_number("lr", self.lr)
        _positive_int("batch_size", self.batch_size)
        _non_negative("weight_decay", self.weight_decay)
        for name in ("lr", "weight_decay"):
            _within_float32(name, getattr(self, name))


@dataclass
class ScheduleConfig:
    """How long a run trains and when it stops (docs/protocol.md, "Training protocols")."""

    epochs: int = 10
    linear_init_epochs: int = _images(0)  # LinearInit: train the head on frozen features first
    linear_init_lr: float | None = _images()
    #: stop after this many epochs without a val-mAP gain larger than min_delta; 0 is EM's rule
    #: (stop at the first epoch that is not strictly better); None trains every epoch
    patience: int | None = None
    min_delta: float = 0.0
    stop_drop: float | None = None  # stop when val mAP < best - stop_drop (LL: 0.03, GR: 0.02)
    #: record every epoch's measures (the papers' five on the validation rows, the test metrics) in the run's
    #: history, so that the run can be reported at the epoch any selection rule chooses, not only at its
    #: best validation mAP (docs/protocol.md, "Selection rules"); costs one pass over the test rows per epoch
    epoch_metrics: bool = False

    def __post_init__(self) -> None:
        _positive_int("epochs", self.epochs)
        if not isinstance(self.epoch_metrics, bool):
            raise ValueError(f"epoch_metrics must be true or false, got {self.epoch_metrics!r}")
        if not isinstance(self.linear_init_epochs, int) or isinstance(self.linear_init_epochs, bool) \
                or self.linear_init_epochs < 0:
            raise ValueError(f"linear_init_epochs must be an integer >= 0, got {self.linear_init_epochs!r}")
        if self.linear_init_lr is not None:
            _positive_number("linear_init_lr", self.linear_init_lr)
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 0):
            raise ValueError(f"patience must be an integer >= 0 or null, got {self.patience!r}")
        _non_negative("min_delta", self.min_delta)
        if self.stop_drop is not None and not (math.isfinite(self.stop_drop) and self.stop_drop >= 0):
            raise ValueError(f"stop_drop must be a number >= 0 or null, got {self.stop_drop!r}")


# ----------------------------------------------------------------------------- recipe (docs/protocol.md, "Recipes")
@dataclass
class RecipeConfig:
    """How the official code around a loss trains: a learning-rate schedule, weight averaging,
    crops, which parts train, and what the batch size counts (docs/protocol.md, "Recipes").

    Every default is spmlkit's behaviour before recipes existed (no schedule, no EMA, resize
    without crops, everything trains, ``batch_size`` is the global batch), so a config that
    names none of these trains exactly as before. The checks that involve ``epochs`` or the
    model live in :class:`RunConfig`.
    """

    #: none | onecycle | cosine | step (torch.optim.lr_scheduler's OneCycleLR, CosineAnnealingLR,
    #: StepLR), stepped after every optimiser step
    lr_schedule: str = "none"
    #: the schedule's length in epochs, independent of ``epochs``: a run may stop before its
    #: schedule ends (an 80-epoch one-cycle stopped after 56 epochs, docs/protocol.md, "Recipes");
    #: None: ``epochs``
    schedule_epochs: int | None = None
    warmup_frac: float = 0.3  # onecycle: share of the schedule spent warming up (OneCycleLR's pct_start)
    anneal: str = "cos"  # onecycle: cos | linear (OneCycleLR's anneal_strategy)
    div_factor: float = 25.0  # onecycle: the first lr is lr / div_factor
    final_div_factor: float = 1e4  # onecycle: the last lr is lr / div_factor / final_div_factor
    cycle_momentum: bool = True  # onecycle: cycle momentum / Adam's beta1 between 0.85 and 0.95
    min_lr: float = 0.0  # cosine: the lr the schedule ends at (eta_min)
    step_epochs: int | None = None  # step: multiply the lr by step_gamma every this many epochs
    step_gamma: float = 0.1
    #: weight EMA (decay per step), evaluated beside the plain weights every epoch; None: off
    ema_decay: float | None = None
    #: the only parts that train (named parts such as head, backbone, lgconv_global, or module
    #: paths such as layer4 / backbone.layer4); None: every weight trains
    train_only: list[str] | None = None
    #: every BatchNorm stays in eval mode: running statistics never change, batch statistics unused
    freeze_bn: bool = False
    #: every BatchNorm becomes a constant affine map: statistics, scale and shift all fixed (docs/protocol.md,
    #: "Recipes")
    constant_bn: bool = _images(False)
    #: start from the weights of an earlier run's checkpoint (its best.pt), e.g. a second stage from its
    #: first stage's run; parts the checkpoint lacks (a projector) keep their fresh initialisation
    init_weights: str | None = None
    #: what batch_size counts under torch.distributed: "global" (split across the processes) or
    #: "process" (each process's own batch; the global batch is batch_size x processes)
    batch_per: str = "global"
    #: drop each epoch's last batch when it is shorter than the rest (as some official code's loader does)
    drop_last: bool = False
    #: training images: "resize" (to image_size, the base protocol) or "multiscale_crop" (resize
    #: to crop_scale, a random square crop of a side drawn from crop_sizes, resize to image_size)
    augment: str = _images("resize")
    crop_scale: int = _images(512)
    crop_sizes: list[int] = _images(factory=lambda: [512, 448, 384, 320, 256])
    lgconv_bias: bool = _images(False)  # LgConv's projection has a bias (the official code)
    lgconv_gamma_init: str = _images("constant")  # constant (the paper's 1e-4) | normal (N(0, 1e-4), the code)

    def __post_init__(self) -> None:
        _choice("lr_schedule", self.lr_schedule, ("none", "onecycle", "cosine", "step"))
        _choice("anneal", self.anneal, ("cos", "linear"))
        _choice("batch_per", self.batch_per, ("global", "process"))
        _choice("augment", self.augment, ("resize", "multiscale_crop"))
        _choice("lgconv_gamma_init", self.lgconv_gamma_init, ("constant", "normal"))
        for name in ("schedule_epochs", "step_epochs"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if not (isinstance(self.warmup_frac, (int, float)) and 0 < self.warmup_frac < 1):
            raise ValueError(f"warmup_frac must be in (0, 1), got {self.warmup_frac!r}")
        for name in ("div_factor", "final_div_factor", "step_gamma"):
            _positive_number(name, getattr(self, name))
        _schedule_stays_at_or_below_lr(self)
        _non_negative("min_lr", self.min_lr)
        for name in ("cycle_momentum", "freeze_bn", "constant_bn", "drop_last", "lgconv_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.ema_decay is not None and not (isinstance(self.ema_decay, (int, float))
                                               and not isinstance(self.ema_decay, bool) and 0 < self.ema_decay < 1):
            raise ValueError(f"ema_decay must be in (0, 1) or null (no EMA), got {self.ema_decay!r}")
        if self.init_weights is not None and not (isinstance(self.init_weights, str) and self.init_weights):
            raise ValueError(f"init_weights must be the path of a checkpoint (a run's best.pt) or null, got "
                             f"{self.init_weights!r}")
        if self.train_only is not None and (not isinstance(self.train_only, list) or not self.train_only
                                            or not all(isinstance(n, str) and n for n in self.train_only)):
            raise ValueError(f"train_only must be a non-empty list of part names or null, got {self.train_only!r}")
        _positive_int("crop_scale", self.crop_scale)
        if not (isinstance(self.crop_sizes, list) and self.crop_sizes):
            raise ValueError(f"crop_sizes must be a non-empty list of crop sides, got {self.crop_sizes!r}")
        for side in self.crop_sizes:
            _positive_int("each of crop_sizes", side)
            if side > self.crop_scale:
                raise ValueError(f"crop_sizes holds {side}, larger than crop_scale {self.crop_scale}; a crop must "
                                 "fit the resized image")
        unused = {"schedule_epochs": self.lr_schedule == "none",
                  "step_epochs": self.lr_schedule != "step"}
        given = [name for name, idle in unused.items() if idle and getattr(self, name) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} given but lr_schedule is {self.lr_schedule!r}, which does not use "
                             "it; choose the schedule that uses it or remove it")
        if self.lr_schedule == "step" and self.step_epochs is None:
            raise ValueError("lr_schedule 'step' needs step_epochs (lower the lr every this many epochs)")


@dataclass
class MachineConfig:
    """On what hardware, and how the run is fed. The device, the precision and compilation change
    only the rounding of what the run computes; the workers, threads and evaluation batch change
    nothing at all (a resumed run may change those, :data:`RESUME_FREE`)."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: str = _images("auto")  # auto (bf16 on GPU, none on CPU) | none | bf16 | fp16
    channels_last: bool = _images(True)  # GPU only
    #: DataLoader worker processes of image runs. None: automatic (the CPUs this process may
    #: use, shared among the processes torchrun started on the node, minus one, at most 8;
    #: spmlkit.data.images.loader_workers); 0: load in the main process. The (index, flip)
    #: order is drawn in the main process, so results do not depend on this number
    num_workers: int | None = _images()
    #: where the training JPEGs are decoded: "cpu" (PIL in the loader workers) or "gpu"
    #: (nvJPEG via torchvision.io.decode_jpeg, resized on the GPU; CUDA only)
    decode: str = _images("cpu")
    #: torch.compile the model's training forward (the first steps compile for a while)
    compile: bool = False
    #: deterministic algorithms and no TF32 on CUDA: two runs with one seed are bit-identical on
    #: one GPU, at some speed (docs/architecture.md, "Numbers across devices"); CPU runs always are
    deterministic: bool = False
    eval_batch_size: int | None = _images()
    num_threads: int | None = None  # torch CPU threads for this run (None: leave as is)

    def __post_init__(self) -> None:
        _choice("amp", self.amp, ("auto", "none", "bf16", "fp16"))
        _choice("decode", self.decode, ("cpu", "gpu"))
        for name in ("compile", "deterministic"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("eval_batch_size", "num_threads"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if self.num_workers is not None and (not isinstance(self.num_workers, int)
                                             or isinstance(self.num_workers, bool) or self.num_workers < 0):
            raise ValueError(f"num_workers must be an integer >= 0 or null (automatic), got {self.num_workers!r}")


@dataclass
class OutputConfig:
    """Where the run is written; changes no number."""

    out: str | None = None  # run folder; None keeps everything in memory (sweeps of feature runs)
    #: where each epoch's metrics go besides metrics.csv: tensorboard | mlflow | wandb | a name
    #: registered with training.loggers.register_logger (or an entry point "spmlkit.loggers")
    loggers: list[str] = field(default_factory=list)


#: section name -> its dataclass, in the order config.yaml lists them
SECTIONS: dict[str, type] = {"data": DataConfig, "model": ModelConfig, "method": MethodConfig,
                             "optimisation": OptimisationConfig, "schedule": ScheduleConfig,
                             "recipe": RecipeConfig, "machine": MachineConfig, "output": OutputConfig}
#: a setting's flat name where it differs from its field's (``config.method.name`` is "method")
_FLAT_NAMES = {("method", "name"): "method"}
#: every setting's flat name -> (section, field); flat names are unique across sections
_FIELD_OF: dict[str, tuple[str, str]] = {_FLAT_NAMES.get((section, f.name), f.name): (section, f.name)
                                         for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
#: a setting's flat name by (section, field)
_FLAT_OF = {where: flat for flat, where in _FIELD_OF.items()}


@dataclass(init=False)
class RunConfig:
    """A run's settings, in sections (``config.data.dataset``, ``config.optimisation.lr``, ...).

    Built from sections (``RunConfig(data=DataConfig(...))``) or, since every setting's name is
    unique, from flat keywords (``RunConfig(dataset="yeast", lr=0.003)``); :func:`config_from_dict`
    applies the same rules to mappings. The checks that involve more than one section live here.
    """

    data: DataConfig
    model: ModelConfig
    method: MethodConfig
    optimisation: OptimisationConfig
    schedule: ScheduleConfig
    recipe: RecipeConfig
    machine: MachineConfig
    output: OutputConfig

    def __init__(self, **settings: Any) -> None:
        sections = {name: settings.pop(name) for name in list(settings)
                    if name in SECTIONS and not (name == "method" and isinstance(settings[name], str))}
        unknown = sorted(set(settings) - set(_FIELD_OF))
        if unknown:
            raise TypeError(f"unknown setting(s) {', '.join(unknown)}; valid settings: {', '.join(_FIELD_OF)}")
        for name, cls in SECTIONS.items():
            given = sections.get(name)
            flat = {_FIELD_OF[k][1]: v for k, v in settings.items() if _FIELD_OF[k][0] == name}
            if given is not None and not isinstance(given, cls):
                raise TypeError(f"section {name!r} must be a {cls.__name__}, got {type(given).__name__}")
            section = dataclasses.replace(given, **flat) if given is not None else cls(**flat)
            setattr(self, name, section)
        if self.data.val_frac == 0 and (self.schedule.patience is not None or self.schedule.stop_drop is not None):
            raise ValueError("early stopping (patience / stop_drop) needs validation data; val_frac is 0")
        _check_recipe(self)

    def to_dict(self, kind: str | None = None) -> dict[str, dict[str, Any]]:
        """The nested form ``config.yaml`` holds: one mapping per section.

        ``kind`` ("features" or "images") leaves out the settings that do not apply to that kind
        of run (a Yeast run has no ``backbone`` or ``image_size``): what a reader of the run's
        ``config.yaml`` sees is what the run used. Reading it back gives the same config, since
        a setting left out is at its default (:meth:`check_source` refuses anything else)."""
        out = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        if kind is None:
            return out
        other = _other_kind(kind)
        for name, cls in SECTIONS.items():
            for f in dataclasses.fields(cls):
                if f.metadata.get("applies") == other:
                    del out[name][f.name]
        return out

    def flat(self) -> dict[str, Any]:
        """Every setting by its own name (the form presets, sweeps and options use)."""
        return {_FLAT_OF[(name, k)]: v for name, section in self.to_dict().items() for k, v in section.items()}

    def check_source(self, kind: str) -> None:
        """Reject settings that do not apply to a ``kind`` ("features" or "images") run."""
        other = _other_kind(kind)
        given = []
        for name, cls in SECTIONS.items():
            section = getattr(self, name)
            for f in dataclasses.fields(cls):
                if f.metadata.get("applies") == other and getattr(section, f.name) != _default(f):
                    given.append(f.name)
        if given:
            what = "image" if kind == "features" else "feature"
            raise ValueError(
                f"{', '.join(sorted(given))} only apply to {what} runs, but {self.data.dataset!r} is a "
                f"{'feature' if kind == 'features' else 'image'} dataset; remove them"
            )


def _schedule_stays_at_or_below_lr(recipe: RecipeConfig) -> None:
    """The lr a run sets is the highest its schedule reaches (docs/protocol.md, "Runs that
    diverge"): factors that would take it above (``div_factor: 1e-300`` starts a one-cycle at
    lr x 1e300) cannot train and are refused before the run, not found after it diverged."""
    if recipe.div_factor < 1:
        raise ValueError(f"div_factor must be at least 1, got {recipe.div_factor!r}: the one-cycle schedule starts at "
                         "lr / div_factor and rises to lr, the highest lr it reaches")
    if recipe.div_factor * recipe.final_div_factor < 1:
        raise ValueError(f"final_div_factor {recipe.final_div_factor!r} with div_factor {recipe.div_factor!r} would end "
                         "the one-cycle schedule at lr / div_factor / final_div_factor, above lr, the highest lr it "
                         "reaches; make their product at least 1")
    if recipe.step_gamma > 1:
        raise ValueError(f"step_gamma must be at most 1, got {recipe.step_gamma!r}: the step schedule multiplies the lr "
                         "by it every step_epochs epochs, and lr is the highest lr it reaches")


def check_min_lr(config: RunConfig) -> None:
    """The cosine schedule ends at ``min_lr``: above the lr it would climb, and the lr set is the
    highest a schedule reaches (docs/protocol.md, "Runs that diverge"). Checked on a whole
    configuration (the lr and ``min_lr`` may come from different layers: a config file's
    ``min_lr`` beside a typed ``--lr``), by :func:`spmlkit.experiments.presets.resolve_config` and
    when a run is planned; ValueError saying why."""
    recipe, opt = config.recipe, config.optimisation
    lowest = opt.lr * min(1.0, opt.head_lr_mult)  # a head may train at a lower lr than the backbone
    if recipe.lr_schedule == "cosine" and recipe.min_lr > lowest:
        raise ValueError(f"min_lr {recipe.min_lr:g} is above the lr {lowest:g}"
                         + (" (lr x head_lr_mult)" if lowest < opt.lr else "")
                         + ": the cosine schedule would climb from the lr to min_lr, and the lr set is the highest "
                         "a schedule reaches; make min_lr at most the lr (0 by default)")


def _check_recipe(config: RunConfig) -> None:
    """The recipe's checks that involve other sections (docs/protocol.md, "Recipes")."""
    recipe = config.recipe
    if recipe.schedule_epochs is not None and recipe.schedule_epochs < config.schedule.epochs:
        raise ValueError(f"schedule_epochs {recipe.schedule_epochs} is shorter than epochs {config.schedule.epochs}: "
                         "a run may stop before its schedule ends, not after; raise schedule_epochs or lower epochs")
    if (recipe.lgconv_bias or recipe.lgconv_gamma_init != "constant") and not config.model.lgconv:
        raise ValueError("lgconv_bias / lgconv_gamma_init change LgConv layers, but lgconv is off; set lgconv: true "
                         "(--lgconv) or remove them")


def _other_kind(kind: str) -> str:
    if kind not in ("features", "images"):
        raise ValueError(f"a run's kind is 'features' or 'images', got {kind!r}")
    return "images" if kind == "features" else "features"


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def default_setting(name: str) -> Any:
    """A setting's default, by its flat name, read from its field: the value ``RunConfig().flat()[name]``
    has, without building (and checking) a whole configuration, which imports the methods and so
    torch. The command line's help prints these (docs/architecture.md, "Start-up time")."""
    section, field_name = _FIELD_OF[name]
    return _default(next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == field_name))


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _positive_number(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _non_negative(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


#: the largest float32: the weights are float32, and torch's optimisers multiply them by the lr and
#: the weight decay as float32 numbers (SGD raised "value cannot be converted to type float without
#: overflow" with a traceback on a weight decay of 1e300)
_FLOAT32_MAX = 3.4028234663852886e38


def _within_float32(name: str, value: float) -> None:
    if value > _FLOAT32_MAX:
        raise ValueError(f"{name} {value:g} is beyond the largest float32 number ({_FLOAT32_MAX:.3g}), the precision "
                         "the weights are updated in; no run could use it: give a smaller value")


#: settings that change no number: a resumed run may change them (where it is written, how it is
#: logged, how the machine feeds it; workers draw no randomness, the order and flips come from the
#: run's own generator; where its plug-ins are loaded from: a resumed run loads its own and any the
#: user adds, experiments.presets.resolve_config)
RESUME_FREE = ("out", "loggers", "num_workers", "eval_batch_size", "num_threads", "plugins")


def saved_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The flat settings of a configuration saved by any version of spmlkit (a checkpoint's or a
    run folder's): nested or flat, with settings this version does not know kept as they are
    (a reader takes what it needs from them)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict):
            flat.update({_FLAT_OF.get((key, name), name): v for name, v in value.items()})
        else:
            flat[key] = value
    return flat


def flat_settings(values: dict[str, Any], *, where: str = "config") -> dict[str, Any]:
    """``values`` with its sections (``{"data": {...}}``) opened into flat settings; flat settings
    pass through. Unknown names, unknown sections and a setting given twice are errors."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        nested = key in SECTIONS and isinstance(value, dict)  # "method: an" is the flat setting
        if key in SECTIONS and not nested and key != "method":
            raise ValueError(f"{where}: section {key!r} must be a mapping of settings, got {value!r}")
        for name, setting in (value.items() if nested else [(key, value)]):
            if nested:
                flat_name = _FLAT_OF.get((key, name))
                if flat_name is None:
                    owner = _FIELD_OF.get(name, (None,))[0]
                    hint = f" (it belongs to section {owner!r})" if owner else ""
                    raise ValueError(f"{where}: unknown setting {name!r} in section {key!r}{hint}; its settings: "
                                     f"{', '.join(f.name for f in dataclasses.fields(SECTIONS[key]))}")
            elif name not in _FIELD_OF:
                raise ValueError(f"{where}: unknown setting(s) {name}; valid settings: {', '.join(_FIELD_OF)} "
                                 f"(flat, or under their sections {', '.join(SECTIONS)})")
            else:
                flat_name = name
            if flat_name in flat:
                raise ValueError(f"{where}: {flat_name!r} is given twice")
            flat[flat_name] = setting
    return flat


def applies_to(setting: str) -> str | None:
    """The one kind of run a flat setting applies to, ``"images"`` (``backbone``, ``image_size``, ...)
    or ``"features"`` (``head``, ``standardize``, ...); None for a setting of every run."""
    section, name = _FIELD_OF[setting]
    return next(f.metadata.get("applies") for f in dataclasses.fields(SECTIONS[section]) if f.name == name)


def config_from_dict(values: dict[str, Any], *, base: RunConfig | None = None, where: str = "config") -> RunConfig:
    """A config from ``base`` (or the defaults) with ``values`` applied (nested or flat, see the
    module docstring); unknown keys are errors naming the valid ones.

    ``hparams`` merge key by key, so a later layer can change one hyperparameter of a preset
    without restating the others.
    """
    flat = flat_settings(values, where=where)
    current = (base or RunConfig()).flat()
    for key, value in flat.items():
        if key == "hparams":
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{where}: hparams must be a mapping of NAME: VALUE, got {value!r}")
            current["hparams"] = {**current["hparams"], **(value or {})}
        elif key == "plugins":  # every layer's plug-ins load: a later layer adds to them
            current["plugins"] = merged_plugins(current["plugins"], value, where=where)
        else:
            current[key] = value
    try:
        return RunConfig(**current)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def merged_plugins(earlier: list[str], later: Any, *, where: str = "config") -> list[str]:
    """``earlier`` followed by the plug-ins of ``later`` that it does not hold yet (a list, or one
    reference), so layers (a config file, the options, a resumed run) add plug-ins and never drop one."""
    if later is None:
        return list(earlier)
    items = [later] if isinstance(later, str) else later
    if not (isinstance(items, list) and all(isinstance(p, str) and p for p in items)):
        raise ValueError(f"{where}: plugins must be a list of .py files or module names, got {later!r}")
    return list(dict.fromkeys([*earlier, *items]))


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (.yaml/.yml), TOML (.toml) or JSON config file into a dict."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} not found")
    if p.suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ValueError(f"config file {p}: use a .yaml, .yml, .toml or .json file")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except Exception as exc:  # every parser's own error type: report it as the user's file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"config file {p} does not parse: {first}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping of settings, got {type(data).__name__}")
    return data


def save_config(config: RunConfig, path: str | Path, kind: str | None = None) -> None:
    """``config.yaml``: the nested form, one block per section; with ``kind``, only the settings
    that apply to that kind of run (:meth:`RunConfig.to_dict`)."""
    import yaml

    from ..io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(config.to_dict(kind), sort_keys=False))
