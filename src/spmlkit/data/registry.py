"""Named feature datasets available without any download."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from .feature_dir import is_feature_dir, load_feature_dir
from .tabular import TabularDataset
from .yeast import load_yeast

__all__ = ["FEATURE_DATASETS", "is_feature_dataset", "load_features"]

FEATURE_DATASETS: dict[str, Callable[[], TabularDataset]] = {
    "yeast": load_yeast,
}


def is_feature_dataset(name: str) -> bool:
    """A named tabular dataset, or a folder written by ``spmlkit extract``."""
    return name in FEATURE_DATASETS or is_feature_dir(name)


def load_features(name: str) -> TabularDataset:
    """A named feature dataset (``yeast``) or a feature folder written by ``spmlkit extract``."""
    if name in FEATURE_DATASETS:
        return _load_named(name)
    if is_feature_dir(name):
        return load_feature_dir(name)
    raise ValueError(
        f"unknown feature dataset {name!r}; available: {', '.join(FEATURE_DATASETS)}, or a folder "
        "written by `spmlkit extract`"
    )


@lru_cache(maxsize=4)
def _load_named(name: str) -> TabularDataset:
    """Named datasets are read once per process (a sweep runs hundreds of runs on one)."""
    ds = FEATURE_DATASETS[name]()
    for array in (ds.X_train, ds.Y_train, ds.X_test, ds.Y_test):
        array.setflags(write=False)  # shared between runs: nobody may change them
    return ds
