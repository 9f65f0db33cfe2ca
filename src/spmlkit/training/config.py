"""The one run configuration: a data source, a model, a method recipe, optimisation, a stopping rule.

Feature runs and image runs differ only in the data source (a feature dataset such as
``yeast`` or a folder written by ``spmlkit extract``, versus an image dataset) and therefore
the model (a linear/MLP head versus backbone + head). Everything else (the method, the
optimiser, the stopping rule, the seed, the run folder) means the same on both, so there is
one :class:`RunConfig`, one :func:`~spmlkit.training.trainer.train` and one result type.

Options that only make sense for one kind of source are listed in :data:`IMAGE_ONLY` and
:data:`FEATURE_ONLY`; giving one of them a non-default value on the other kind is an error
(:meth:`RunConfig.check_source`), never silently ignored.

Where the values come from (later wins) is decided above this layer, by
:func:`spmlkit.experiments.presets.resolve_config`: the dataclass defaults < the dataset's
defaults < the (method, dataset) preset < a config file < explicit options. The resolved
config is saved with every run (``config.yaml``), so a run can be repeated from its folder.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunConfig", "IMAGE_ONLY", "FEATURE_ONLY", "config_from_dict", "load_config_file", "save_config"]


@dataclass
class RunConfig:
    # ---- data source
    #: a feature dataset (yeast, an `extract` folder) or an image dataset (voc2012 | voc2007 |
    #: coco2014 | nuswide | cub | digits-mosaic | prepared)
    dataset: str = "digits-mosaic"
    root: str | None = None  # dataset root (as downloaded) for benchmark image datasets
    prepared: str | None = None  # folder written by `spmlkit prepare` (default: <root>/spmlkit-prepared/...)
    dataset_variant: str | None = None  # e.g. coco2014: None (the SPML list) or "pu_mlc"
    subset: int | None = None  # only the first N rows of the official train list (quick checks)
    observation: str = "single_positive"
    #: fraction of the official train list held out for validation; 0 trains on all of it and
    #: keeps the last epoch (there is nothing to select on)
    val_frac: float = 0.2
    val_variant: str = "clean"  # model selection on clean val labels or on the observed positives
    # ---- method
    method: str = "an"
    hparams: dict[str, Any] = field(default_factory=dict)
    # ---- model
    backbone: str = "torchvision:resnet50"  # image runs
    pretrained: bool = True
    lgconv: bool = False
    image_size: int = 448
    hflip: bool = True
    head: str = "linear"  # feature runs: linear | mlp
    hidden: int = 256
    dropout: float = 0.0
    standardize: bool = True  # feature runs: z-score features with the train split's mean/std
    # ---- optimisation
    optimizer: str = "adam"  # adam | sgd
    lr: float = 1e-5
    head_lr_mult: float = 1.0
    weight_decay: float = 0.0
    momentum: float = 0.9
    batch_size: int = 8
    epochs: int = 10
    linear_init_epochs: int = 0  # LinearInit: train the head on frozen features first
    linear_init_lr: float | None = None
    # ---- stopping rule (docs/protocol.md, "Training protocols")
    #: stop after this many epochs without a val-mAP gain larger than min_delta; 0 is EM's
    #: rule (stop at the first epoch that is not strictly better); None trains every epoch
    patience: int | None = None
    min_delta: float = 0.0
    stop_drop: float | None = None  # stop when val mAP < best - stop_drop (LL: 0.03, GR: 0.02)
    seed: int = 0
    # ---- machinery
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: str = "auto"  # auto (bf16 on GPU, none on CPU) | none | bf16 | fp16
    channels_last: bool = True  # GPU only
    #: DataLoader worker processes of image runs. None: automatic (the CPUs this process may
    #: use, shared among the processes torchrun started on the node, minus one, at most 8;
    #: spmlkit.data.images.loader_workers); 0: load in the main process. The (index, flip)
    #: order is drawn in the main process, so results do not depend on this number
    num_workers: int | None = None
    #: where the training JPEGs are decoded: "cpu" (PIL in the loader workers) or "gpu"
    #: (nvJPEG via torchvision.io.decode_jpeg, resized on the GPU; CUDA only)
    decode: str = "cpu"
    #: torch.compile the model's training forward (the first steps compile for a while)
    compile: bool = False
    eval_batch_size: int | None = None
    num_threads: int | None = None  # torch CPU threads for this run (None: leave as is)
    #: under torch.distributed: "global" (the loss sees the whole global batch, equal to one
    #: process), "process" (each process's own slice, as PU-MLC's code) or None (the method's
    #: default); docs/architecture.md, "Distributed training"
    batch_statistics: str | None = None
    out: str | None = None  # run folder; None keeps everything in memory (sweeps of feature runs)
    #: where each epoch's metrics go besides metrics.csv: tensorboard | mlflow | wandb | a name
    #: registered with training.loggers.register_logger (or an entry point "spmlkit.loggers")
    loggers: list[str] = field(default_factory=list)
    # ---- digits-mosaic generator
    mosaic_train: int = 2000
    mosaic_test: int = 1000

    def __post_init__(self) -> None:
        from ..methods import get_method

        get_method(self.method)
        _choice("val_variant", self.val_variant, ("clean", "observed"))
        _choice("optimizer", self.optimizer, ("adam", "sgd"))
        _choice("amp", self.amp, ("auto", "none", "bf16", "fp16"))
        _choice("head", self.head, ("linear", "mlp"))
        _choice("decode", self.decode, ("cpu", "gpu"))
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be true or false, got {self.compile!r}")
        if self.batch_statistics is not None:
            _choice("batch_statistics", self.batch_statistics, ("global", "process"))
        for name in ("image_size", "batch_size", "epochs", "hidden"):
            _positive_int(name, getattr(self, name))
        for name in ("subset", "eval_batch_size", "num_threads"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        for name in ("linear_init_epochs", "num_workers"):
            value = getattr(self, name)
            if name == "num_workers" and value is None:  # automatic
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                also = " or null (automatic)" if name == "num_workers" else ""
                raise ValueError(f"{name} must be an integer >= 0{also}, got {value!r}")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 0):
            raise ValueError(f"patience must be an integer >= 0 or null, got {self.patience!r}")
        _positive_number("lr", self.lr)
        if self.linear_init_lr is not None:
            _positive_number("linear_init_lr", self.linear_init_lr)
        for name in ("weight_decay", "min_delta", "dropout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.stop_drop is not None and not (math.isfinite(self.stop_drop) and self.stop_drop >= 0):
            raise ValueError(f"stop_drop must be a number >= 0 or null, got {self.stop_drop!r}")
        if not (isinstance(self.val_frac, (int, float)) and 0 <= self.val_frac < 1):
            raise ValueError(f"val_frac must be in [0, 1), got {self.val_frac!r}")
        if self.val_frac == 0 and (self.patience is not None or self.stop_drop is not None):
            raise ValueError("early stopping (patience / stop_drop) needs validation data; val_frac is 0")
        if not isinstance(self.hparams, dict):
            raise ValueError(f"hparams must be a mapping of NAME: VALUE, got {self.hparams!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check_source(self, kind: str) -> None:
        """Reject options that do not apply to a ``kind`` ("features" or "images") run."""
        other = IMAGE_ONLY if kind == "features" else FEATURE_ONLY
        defaults = RunConfig.__dataclass_fields__
        given = sorted(k for k in other if getattr(self, k) != _default(defaults[k]))
        if given:
            what = "image" if kind == "features" else "feature"
            raise ValueError(
                f"{', '.join(given)} only apply to {what} runs, but {self.dataset!r} is a "
                f"{'feature' if kind == 'features' else 'image'} dataset; remove them"
            )


#: options that only mean something for image runs
IMAGE_ONLY = ("root", "prepared", "dataset_variant", "backbone", "pretrained", "lgconv", "image_size", "hflip",
              "head_lr_mult", "linear_init_epochs", "linear_init_lr", "amp", "channels_last", "num_workers",
              "decode", "eval_batch_size", "mosaic_train", "mosaic_test")
#: options that only mean something for feature runs
FEATURE_ONLY = ("head", "hidden", "dropout", "standardize")


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _positive_number(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def config_from_dict(values: dict[str, Any], *, base: RunConfig | None = None, where: str = "config") -> RunConfig:
    """A config from ``base`` (or the defaults) with ``values`` applied; unknown keys are errors.

    ``hparams`` merge key by key, so a later layer can change one hyperparameter of a preset
    without restating the others.
    """
    known = RunConfig.__dataclass_fields__
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}; valid settings: {', '.join(known)}")
    current = (base or RunConfig()).to_dict()
    for key, value in values.items():
        if key == "hparams":
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{where}: hparams must be a mapping of NAME: VALUE, got {value!r}")
            current["hparams"] = {**current["hparams"], **(value or {})}
        else:
            current[key] = value
    try:
        return RunConfig(**current)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


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


def save_config(config: RunConfig, path: str | Path) -> None:
    import yaml

    from ..io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
