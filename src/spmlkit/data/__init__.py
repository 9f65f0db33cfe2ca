"""Datasets: named feature datasets (Yeast, the MULAN sets), feature folders written by
``spmlkit extract``, the digits mosaic, images as the model sees them, and the image datasets'
official layouts read into spmlkit's prepared form (:mod:`spmlkit.data.formats`).

:func:`load_dataset` is the public way in: a name (``"yeast"``, ``"emotions"``), a folder written by
``spmlkit extract`` or one written by ``spmlkit prepare``; :mod:`spmlkit.data.registry` decides
which it is, once (``spmlkit datasets`` lists the names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .formats import PreparedDataset
    from .tabular import TabularDataset

__all__ = ["TabularDataset", "load_dataset"]


def __getattr__(name: str) -> Any:
    """``TabularDataset`` on first use: the command line imports the dataset registry below this
    package to build its choices, and should not pay for numpy to print its help."""
    if name == "TabularDataset":
        from .tabular import TabularDataset

        return TabularDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_dataset(name_or_path: str) -> TabularDataset | PreparedDataset:
    """A dataset by name or folder, with its official train and test lists in their official order.

    A feature dataset (Yeast, a MULAN set, a feature folder) comes as a
    :class:`TabularDataset`: ``ds.X_train, ds.Y_train, ds.X_test, ds.Y_test, ds.class_names`` (a
    user's own feature folder holds ``ds.observed`` in place of ``ds.Y_train``, and may have no
    test list: docs/protocol.md, "Your own data"). A
    folder written by ``spmlkit prepare`` comes as its :class:`~spmlkit.data.formats.PreparedDataset`
    (image paths and labels). The rows are the official lists as published: the reference protocol
    (``spmlkit.protocol``) splits the train list into train/val and observes its labels, and a
    training run leaves out the train rows a set marks (docs/protocol.md, "MULAN data sets").
    """
    from .registry import load_features, resolve_dataset

    ref = resolve_dataset(str(name_or_path))
    if ref.kind == "features":
        return load_features(ref.argument)
    if ref.form == "prepared-folder":
        from .formats import load_prepared

        return load_prepared(ref.path)
    raise ValueError(f"{name_or_path!r} is an image dataset, read from its files: prepare it first (spmlkit prepare "
                     f"{ref.name} --root DIR --out FOLDER) and load the prepared FOLDER")
