"""Datasets: named feature datasets (Yeast), feature folders written by ``spmlkit extract``,
the digits mosaic, images as the model sees them, and the image datasets' official layouts
read into spmlkit's prepared form (:mod:`spmlkit.data.formats`).

:func:`load_dataset` is the public way in for a feature dataset: a name (``"yeast"``) or a
folder written by ``spmlkit extract``, returned with its official train and test lists.
"""

from __future__ import annotations

from .tabular import TabularDataset

__all__ = ["TabularDataset", "load_dataset"]


def load_dataset(name_or_path: str) -> TabularDataset:
    """A feature dataset by name or folder: ``ds.X_train, ds.Y_train, ds.X_test, ds.Y_test, ds.class_names``.

    The rows are in the official order of the official train and test lists; the reference
    protocol (``spmlkit.protocol``) splits the train list into train/val and observes its labels.
    """
    from .registry import load_features

    return load_features(str(name_or_path))
