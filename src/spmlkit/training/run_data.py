"""The data of a run: the official train and test lists of a feature or image dataset.

:func:`load_run_data` turns ``config.data.dataset`` into a :class:`RunData`: full labels of the
official train list (which the protocol splits into train/val and observes) and of the
test list, the class names, and how to build the run's model. A
feature dataset and an image dataset differ only here; the trainer above is the same. Reading
them is the data layer's (``data/registry.py`` for features, ``data/image_sets.py`` for images,
docs/architecture.md, "Who owns what"): this module passes a run's values down and cuts,
checks and splits what comes back.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.image_sets import ImageData, load_image_set
from .config import RunConfig

__all__ = ["RunData", "RunSplit", "ImageData", "SubsetMismatch", "check_dataset", "check_labels", "load_run_data",
           "load_image_data", "is_feature_run", "split_and_observe", "standardize"]

log = logging.getLogger(__name__)


class SubsetMismatch(ValueError):
    """A ``subset`` the data cannot give: more rows than the set has, or too few to partition. A sweep
    refuses it once, before any run (:func:`~spmlkit.training.run_check.check_subset`)."""


@dataclass
class RunData:
    """What the trainer needs from a dataset, whatever its kind.

    Benchmarks bring full labels (``Y_train``, ``Y_test``) from which the protocol simulates
    the observed labels; users' data brings its own observed labels (``observed``, with
    ``observation: given``), may lack full labels and a test set, and may bring an explicit
    validation set (``X_val``/``Y_val``) instead of a split of the training rows.
    """

    kind: str  # "features" | "images"
    name: str
    class_names: tuple[str, ...]
    Y_train: np.ndarray | None  # full 0/1 labels of the official train list (None: unknown)
    Y_test: np.ndarray | None = None
    #: features: the raw matrices (standardised per run on its train split); images: None
    X_train: np.ndarray | None = None
    X_test: np.ndarray | None = None
    images: ImageData | None = None
    observed: np.ndarray | None = None  # the data's own {-1, 0, 1} labels of the train list
    X_val: np.ndarray | None = None  # an explicit validation set (features), clean 0/1 labels
    Y_val: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Checks at the boundary, for data handed in by code (the estimator, users' scripts)."""
        if self.Y_train is None and self.observed is None:
            raise ValueError(f"{self.name}: neither full labels nor observed labels were given")
        n, c = self.num_train, self.num_classes
        for what, Y in (("full labels", self.Y_train), ("observed labels", self.observed)):
            if Y is not None and np.shape(Y) != (n, c):
                raise ValueError(f"{self.name}: {what} have shape {np.shape(Y)}, expected ({n}, {c}) "
                                 f"({n} training rows, {c} classes)")
        if self.kind == "features":
            _check_features(self.name, "training", self.X_train, n)
            if self.X_test is not None:
                _check_features(self.name, "test", self.X_test, len(self.Y_test), self.X_train.shape[1])
            if self.X_val is not None:
                _check_features(self.name, "validation", self.X_val, None, self.X_train.shape[1])
                if np.shape(self.Y_val) != (len(self.X_val), c):
                    raise ValueError(f"{self.name}: validation labels have shape {np.shape(self.Y_val)}, expected "
                                     f"({len(self.X_val)}, {c})")

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_train(self) -> int:
        return len(self.observed if self.observed is not None else self.Y_train)

    def build_model(self, config: RunConfig) -> nn.Module:
        """A fresh model (:func:`~spmlkit.training.network.build_run_model`); call after seeding the
        global torch RNG (its initial weights)."""
        from .network import build_run_model

        width = int(self.X_train.shape[1]) if self.kind == "features" else 0
        return build_run_model(config, self.kind, self.num_classes, width)


def _check_features(name: str, split: str, X: np.ndarray | None, rows: int | None, dim: int | None = None) -> None:
    if X is None or np.ndim(X) != 2:
        raise ValueError(f"{name}: {split} features must be a 2-D [rows, features] matrix, got shape {np.shape(X)}")
    if rows is not None and len(X) != rows:
        raise ValueError(f"{name}: {len(X)} {split} feature rows but {rows} label rows")
    if dim is not None and X.shape[1] != dim:
        raise ValueError(f"{name}: {split} features have {X.shape[1]} columns, training features {dim}")
    if not np.isfinite(X).all():
        raise ValueError(f"{name}: {split} features contain NaN or infinite values")


def is_feature_run(config: RunConfig) -> bool:
    """Decided once per process and dataset argument, by the data layer (data/registry.py)."""
    from ..data import registry

    return registry.is_feature_dataset(config.data.dataset)


def load_run_data(config: RunConfig) -> RunData:
    """Read ``config.data.dataset`` and apply ``config.data.subset`` (the first N official-train rows)."""
    if is_feature_run(config):
        from ..data import registry

        config.check_source("features")
        ds = registry.load_features(config.data.dataset)
        if config.data.partition == "random":
            return _randomly_partitioned(ds, config)
        if getattr(ds, "X_val", None) is not None:  # a paper's data file: its own partition, its authors' positives
            data = RunData("features", ds.name, tuple(ds.class_names), np.asarray(ds.Y_train), np.asarray(ds.Y_test),
                           X_train=ds.X_train, X_test=ds.X_test, X_val=ds.X_val, Y_val=np.asarray(ds.Y_val),
                           observed=None if ds.observed is None else np.asarray(ds.observed))
        elif ds.Y_train is None:  # a user's own table or extracted folder: its observed labels, a test list or none
            data = RunData("features", ds.name, tuple(ds.class_names), None,
                           None if ds.Y_test is None else np.asarray(ds.Y_test), X_train=ds.X_train,
                           X_test=ds.X_test, observed=np.asarray(ds.observed))
        else:
            X_train, Y_train = _train_rows_with_a_positive(ds)
            data = RunData("features", ds.name, tuple(ds.class_names), Y_train,
                           None if ds.Y_test is None else np.asarray(ds.Y_test), X_train=X_train, X_test=ds.X_test)
    else:
        config.check_source("images")
        images = load_image_data(config)
        data = RunData("images", images.name, images.class_names, images.Y_train, images.Y_test, images=images,
                       observed=images.observed)
    if config.data.subset is not None:
        if config.data.subset > data.num_train:
            raise SubsetMismatch(f"subset {config.data.subset} is larger than the {data.num_train} training rows of "
                                 f"{data.name}")
        for name in ("Y_train", "X_train", "observed"):
            if getattr(data, name) is not None:
                setattr(data, name, getattr(data, name)[: config.data.subset])
    return data


def _randomly_partitioned(ds: Any, config: RunConfig) -> RunData:
    """The tabular protocol's data (docs/protocol.md, "The tabular protocol"): every row of the set
    (the official train list, then the test list, if any), less the rows without a positive label, cut to
    ``subset`` rows when asked, then partitioned 80 / 10 / 10 by the run's seed. The validation and
    test rows keep their full labels; the observation is drawn on the training rows alone."""
    from ..protocol import random_partition

    if ds.Y_train is None:
        raise ValueError(f"{ds.name} has no full labels to pool; partition 'random' draws the papers' partitions and "
                         "single positives from a whole labelled set (use partition 'official')")
    # every fully labelled row: a set of one file (cal500) has no test list, a paper's data file its own validation rows
    own_val = getattr(ds, "X_val", None)  # a data set of the TabularDataset's shape; the field is newer
    parts = [(ds.X_train, ds.Y_train), *([] if own_val is None else [(own_val, ds.Y_val)]),
             *([] if ds.X_test is None else [(ds.X_test, ds.Y_test)])]
    X = np.concatenate([np.asarray(x) for x, _ in parts])
    Y = np.concatenate([np.asarray(y) for _, y in parts])
    keep = Y.any(axis=1)
    if not keep.all():
        _log_dropped_whole(ds.name, int((~keep).sum()), len(Y))
        X, Y = X[keep], Y[keep]
    if config.data.subset is not None:
        if config.data.subset > len(Y):
            raise SubsetMismatch(f"subset {config.data.subset} is larger than the {len(Y)} rows of {ds.name}")
        X, Y = X[: config.data.subset], Y[: config.data.subset]
    try:  # a part left empty is refused by the partition itself, with the fewest rows that fill every part
        tr, va, te = random_partition(len(Y), config.optimisation.seed)
    except ValueError as exc:
        if config.data.subset is None:
            raise
        raise SubsetMismatch(f"subset {config.data.subset} of {ds.name}: {exc}") from None
    return RunData("features", ds.name, tuple(ds.class_names), Y[tr], Y[te], X_train=X[tr], X_test=X[te],
                   X_val=X[va], Y_val=Y[va])


@functools.lru_cache(maxsize=None)
def _log_dropped_whole(name: str, dropped: int, rows: int) -> None:
    log.warning("%s: %d of its %d rows have no positive label; partition 'random' leaves them out of every part, "
                "as the papers' data files do (docs/protocol.md, \"The tabular protocol\")", name, dropped, rows)


def _train_rows_with_a_positive(ds: Any) -> tuple[np.ndarray, np.ndarray]:
    """The train list a run uses: a set that asks for it (the MULAN sets) loses its train rows
    without any positive label, for every method and observation alike (docs/protocol.md, "MULAN
    data sets"); how many is logged once per process and set."""
    Y = np.asarray(ds.Y_train)
    if ds.notes.get("empty_train_rows") != "drop":
        return ds.X_train, Y
    keep = Y.any(axis=1)
    if keep.all():
        return ds.X_train, Y
    _log_dropped(ds.name, int((~keep).sum()), len(Y))
    return np.asarray(ds.X_train)[keep], Y[keep]


@functools.lru_cache(maxsize=None)
def _log_dropped(name: str, dropped: int, rows: int) -> None:
    log.warning("%s: %d of its %d train rows have no positive label and cannot show one; they are left out of "
                "training for every method (docs/protocol.md, \"MULAN data sets\")", name, dropped, rows)


@dataclass(frozen=True)
class RunSplit:
    """The protocol applied to a run's data: which rows train and validate, on which labels."""

    train_idx: np.ndarray
    val_idx: np.ndarray
    observed: np.ndarray  # observed labels of the train rows
    val_targets: np.ndarray  # 0/1 targets of the validation rows (clean, or observed positives)
    truth_train: np.ndarray | None  # full labels of the train rows, when known


def split_and_observe(config: RunConfig, data: RunData) -> RunSplit:
    """Observed labels over the whole train list, then the reference split (or the explicit val set).

    The order matters for bit-exactness: observation is drawn over the official train list
    before the split (docs/protocol.md, "Observed labels").
    """
    from ..protocol import Observation, split_train_val

    observation = Observation.parse(config.data.observation)
    if observation.kind == "given":
        if data.observed is None:
            raise ValueError(_no_own_labels(data.name))
        observed = np.asarray(data.observed)
    elif data.Y_train is None:
        raise ValueError(_nothing_to_simulate(data.name, config.data.observation))
    else:
        observed = observation.apply(data.Y_train)
    if data.X_val is not None:
        train_idx, val_idx = np.arange(data.num_train), np.arange(0)
        val_targets = np.asarray(data.Y_val)
    else:
        train_idx, val_idx = split_train_val(data.num_train, val_frac=config.data.val_frac)
        if len(val_idx) == 0 and config.data.val_frac > 0:
            raise ValueError(f"the validation split is empty ({data.num_train} training examples, val_frac="
                             f"{config.data.val_frac}); use a larger val_frac, more data, or val_frac 0 (keep the last epoch)")
        if config.data.val_variant == "clean":
            if data.Y_train is None:
                raise ValueError(_no_clean_validation(data.name))
            val_targets = np.asarray(data.Y_train)[val_idx]
        else:
            val_targets = (observed[val_idx] == 1).astype(np.uint8)
    truth = None if data.Y_train is None else np.asarray(data.Y_train)[train_idx]
    return RunSplit(train_idx, val_idx, observed[train_idx], val_targets, truth)


def _no_own_labels(name: str) -> str:
    return (f"{name} brings no observed labels of its own; choose a simulated observation (single_positive, "
            "pos=K,neg=M, ratio=R, full)")


def _nothing_to_simulate(name: str, observation: str) -> str:
    return (f"{name} holds only the labels someone observed (your own data), no full labels to simulate observation "
            f"{observation!r} from; use observation 'given' (its own labels: the default for such data, so leaving "
            "the observation out does it)")


def _no_clean_validation(name: str) -> str:
    return (f"{name} has no clean labels to validate on; use val_variant 'observed' (select on the observed positives "
            "of the validation rows; the default for such data)")


def check_labels(config: RunConfig) -> None:
    """Refuse a run its data's labels cannot give, from the configuration and the data's
    ``meta.json`` alone (docs/protocol.md, "Your own data"): a simulated observation of data that
    holds observed labels only, its own labels ("given") of data that holds full ones, selection on
    clean validation labels that do not exist, a reference method (``bce``, ``iun``) that trains
    on full labels. The same refusals as :func:`split_and_observe` and the method's label matrix
    make after reading the data, made before any run, so a sweep says a mistake that fails every
    run of a grid once, before training (docs/sweep-files.md)."""
    from ..data.registry import labels_held
    from ..methods import get_method
    from ..protocol import Observation

    held = labels_held(config.data.dataset, config.data.prepared)
    name = config.data.prepared or config.data.dataset
    given = Observation.parse(config.data.observation).kind == "given"
    if held.labels == "full":
        if given and not held.observed:  # a paper's data file brings its authors' observed positives
            raise ValueError(_no_own_labels(name))
        return
    if not given:
        raise ValueError(_nothing_to_simulate(name, config.data.observation))
    if config.data.val_variant == "clean" and config.data.val_frac > 0:
        raise ValueError(_no_clean_validation(name))
    method = get_method(config.method.name)
    if method.sees_more_labels:
        what = f"{method.labels!r} labels" if method.labels != "observed" else "what the full labels tell it"
        raise ValueError(f"method {method.name!r} is a reference that trains on {what}, the truth behind the observed "
                         f"ones; {name} holds observed labels only, so leave {method.name} out")


def feature_scaling(X_fit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the training rows (constant features get std 1)."""
    with np.errstate(over="ignore", invalid="ignore"):  # reported below, as a clear error
        mean = np.asarray(X_fit).mean(axis=0)
        std = np.asarray(X_fit).std(axis=0)
    if not (np.isfinite(mean).all() and np.isfinite(std).all()):
        raise ValueError("the features are too large to standardise in their precision (the mean or std of a "
                         "column overflows); rescale the features before training")
    std[std == 0] = 1.0
    return mean, std


def standardize(X_fit: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Z-score every matrix with the mean/std of ``X_fit`` (the training rows only), float32."""
    mean, std = feature_scaling(X_fit)
    out = tuple(((X - mean) / std).astype(np.float32) for X in (X_fit, *others))
    for X in out:
        if not np.isfinite(X).all():
            raise ValueError("features are not finite after standardisation (values too large for float32?); "
                             "rescale the features before training")
    return out


def load_image_data(config: RunConfig) -> ImageData:
    """The run's image dataset, read by the data layer (:func:`spmlkit.data.image_sets.load_image_set`)
    from the run's values: which dataset, where it lies, its variant, size, subset and mosaic counts."""
    data = config.data
    return load_image_set(data.dataset, image_size=data.image_size, root=data.root, prepared=data.prepared,
                          variant=data.dataset_variant, subset=data.subset, mosaic_train=data.mosaic_train,
                          mosaic_test=data.mosaic_test)


def as_tensor(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def check_dataset(config: RunConfig) -> None:
    """Fail early, with the closest name, on a dataset spmlkit does not know."""
    from ..data.registry import resolve_dataset

    resolve_dataset(config.data.dataset)
