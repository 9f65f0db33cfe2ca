"""Feature folders written by ``spmlkit extract``: the on-disk format and its reader.

A feature folder is the feature-side counterpart of a prepared image dataset::

    <dir>/meta.json              kind "spmlkit-features", format version, dataset, backbone, classes
    <dir>/train_features.npy     [N_train, D] of the official train list (split later by the protocol)
    <dir>/test_features.npy      [N_test, D]
    <dir>/train_labels.npy, test_labels.npy   uint8 0/1

The reader lives in the data layer so that naming a feature folder as a dataset needs
nothing from the layers above (the writer, :mod:`spmlkit.extract`, needs models).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .tabular import TabularDataset

__all__ = ["FEATURES_KIND", "FORMAT_VERSION", "is_feature_dir", "load_feature_dir"]

FEATURES_KIND = "spmlkit-features"
FORMAT_VERSION = 1


def is_feature_dir(path: str | Path) -> bool:
    meta = Path(path) / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("kind") == FEATURES_KIND
    except json.JSONDecodeError:
        return False


def load_feature_dir(path: str | Path) -> TabularDataset:
    p = Path(path)
    if not is_feature_dir(p):
        raise FileNotFoundError(f"{p} is not a feature folder written by `spmlkit extract` (no valid meta.json)")
    meta = json.loads((p / "meta.json").read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{p}: feature format version {meta.get('format_version')} is not supported "
                         f"(this spmlkit reads version {FORMAT_VERSION}); extract again")
    load = lambda name: np.load(p / name, mmap_mode="r")  # noqa: E731
    return TabularDataset(
        name=f"{meta['dataset']}-features",
        X_train=load("train_features.npy"),
        Y_train=np.load(p / "train_labels.npy"),
        X_test=load("test_features.npy"),
        Y_test=np.load(p / "test_labels.npy"),
        class_names=tuple(meta["class_names"]),
        source=str(p),
        notes={"backbone": meta["backbone"], "image_size": meta["image_size"]},
    )
