"""Feature folders written by ``spmlkit extract``: the on-disk format and its reader.

A feature folder is the feature-side counterpart of a prepared image dataset::

    <dir>/meta.json              kind "spmlkit-features", format version, classes; dataset, backbone
                                 and image size are recorded by ``extract`` but not needed to train
    <dir>/train_features.npy     [N_train, D] of the official train list (split later by the protocol)
    <dir>/test_features.npy      [N_test, D]
    <dir>/train_labels.npy, test_labels.npy   0/1, [N, C] with C = len(class_names)

Users also write such folders by hand (features from another tool), so the reader checks
everything a run relies on and names the file and the fix in one line: a missing or unreadable
file, features that are not real numbers (text, complex values: their imaginary part would be
dropped with only a library warning), shapes that do not agree, labels that are not 0/1, class
names that are not a list of names. The reader lives in the data layer so that naming a feature
folder as a dataset needs nothing from the layers above (the writer, :mod:`spmlkit.extract`,
needs models).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .tabular import TabularDataset

__all__ = ["FEATURES_KIND", "FORMAT_VERSION", "is_feature_dir", "load_feature_dir"]

FEATURES_KIND = "spmlkit-features"
FORMAT_VERSION = 1
_META = "meta.json"
_REDO = "write it again (spmlkit extract ... --features-out DIR, or your own tool)"


def is_feature_dir(path: str | Path) -> bool:
    """A folder whose ``meta.json`` says it holds features (its contents are checked on loading)."""
    meta = Path(path) / _META
    if not meta.is_file():
        return False
    try:
        recorded = json.loads(meta.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(recorded, dict) and recorded.get("kind") == FEATURES_KIND


def load_feature_dir(path: str | Path) -> TabularDataset:
    p = Path(path)
    if not is_feature_dir(p):
        raise FileNotFoundError(f"{p} is not a feature folder written by `spmlkit extract` (no meta.json with kind "
                                f"{FEATURES_KIND!r}); extract features into it first")
    meta = json.loads((p / _META).read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{p / _META}: feature format version {meta.get('format_version')!r} is not supported "
                         f"(this spmlkit reads version {FORMAT_VERSION}); extract again")
    class_names = _class_names(p / _META, meta.get("class_names"))
    X_train, X_test = _features(p / "train_features.npy"), _features(p / "test_features.npy")
    Y_train = _labels(p / "train_labels.npy", len(X_train), len(class_names))
    Y_test = _labels(p / "test_labels.npy", len(X_test), len(class_names))
    if X_train.shape[1] != X_test.shape[1]:
        raise ValueError(f"{p}: train_features.npy has {X_train.shape[1]} columns but test_features.npy "
                         f"{X_test.shape[1]}; both lists need the same features, {_REDO}")
    name = meta.get("dataset")
    try:
        return TabularDataset(
            name=f"{name if isinstance(name, str) and name else p.name}-features",
            X_train=X_train, Y_train=Y_train, X_test=X_test, Y_test=Y_test,
            class_names=class_names, source=str(p),
            notes={"backbone": meta.get("backbone"), "image_size": meta.get("image_size")},
        )
    except ValueError as exc:  # the remaining checks (finite values): say which folder
        raise ValueError(f"{p}: {exc}; {_REDO}") from None


def _class_names(meta_path: Path, names: Any) -> tuple[str, ...]:
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{meta_path}: \"class_names\" must be a non-empty list of label names (one per label "
                         f"column), found {json.dumps(names)[:60]}; write the names of the label columns there")
    if len(set(names)) != len(names):
        raise ValueError(f"{meta_path}: \"class_names\" lists a name twice; each label column needs its own name")
    return tuple(names)


def _load(path: Path, mmap: bool) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a feature folder holds train_features.npy, test_features.npy, "
                                f"train_labels.npy and test_labels.npy beside meta.json; {_REDO}")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array of numbers ({exc}); {_REDO}") from None


def _features(path: Path) -> np.ndarray:
    X = _load(path, mmap=True)  # memory-mapped: a large folder is read as the rows are used
    kind = X.dtype.kind
    if kind == "c":
        raise ValueError(f"{path}: the features are complex numbers ({X.dtype}); spmlkit trains on real features and "
                         "will not drop the imaginary parts silently: save the real part, the magnitude, or both as "
                         "separate columns")
    if kind not in "fiub":
        raise ValueError(f"{path}: the features are of type {X.dtype} ({'text' if kind in 'US' else 'not numbers'}); "
                         f"they must be numbers, {_REDO}")
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{path}: features must be a 2-D [rows, features] array with at least one of each, found "
                         f"shape {X.shape}; {_REDO}")
    return X


def _labels(path: Path, rows: int, classes: int) -> np.ndarray:
    Y = _load(path, mmap=False)
    if Y.dtype.kind not in "fiub":
        raise ValueError(f"{path}: labels are of type {Y.dtype}; they must be 0/1 numbers, {_REDO}")
    if Y.shape != (rows, classes):
        raise ValueError(f"{path}: labels have shape {Y.shape}, expected ({rows}, {classes}): one row per feature row "
                         f"and one column per class name in meta.json; {_REDO}")
    if not np.isin(Y, (0, 1)).all():
        raise ValueError(f"{path}: labels must be 0 or 1, found {np.unique(Y[~np.isin(Y, (0, 1))])[:3].tolist()}; "
                         f"{_REDO}")
    return Y.astype(np.uint8)
