"""Paths in a run's saved configuration: relative to the run folder, so ``--resume`` works from anywhere.

A run started as ``spmlkit train --prepared data/photos --out runs/a`` used to save
``prepared: data/photos`` in ``runs/a/config.yaml`` and its checkpoints: a path relative to
the folder the command ran in. ``spmlkit train --out /home/me/project/runs/a --resume`` from any
other folder then looked for ``data/photos`` there and failed. So the settings that name a file
or folder (:data:`PATH_SETTINGS`) are saved relative to the run folder
(``prepared: ../../data/photos``) and read back against it: the run resumes from any working
folder, and a project folder that holds both its data and its runs can be moved as a whole.
A path the user gave as absolute is saved as given (they named that exact place). Run folders
written before this (without the output marker of :mod:`spmlkit.output_dir`) saved paths
relative to the working folder, and are still read that way.

Settings the user types (options, a config file) keep their meaning, relative to the working
folder, and a resumed run's saved paths are read back in that form (relative to the working
folder of the resume), so retyping the same relative path on ``--resume`` agrees with the run
and saving the configuration again gives the same file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["PATH_SETTINGS", "absolute_paths", "paths_from_run_folder", "paths_relative_to", "typed_paths"]

PATH_SETTINGS = ("root", "prepared", "dataset", "plugins")
"""Flat settings that may name a file or folder. ``dataset`` names one only when it is a feature
folder written by ``spmlkit extract`` (otherwise it is a dataset's name, e.g. ``yeast``); ``plugins``
is a list, whose ``.py`` files are paths and whose module names are not (docs/plugins.md)."""


def _each_path(key: str, value: Any, base: str, change: Any) -> Any:
    """``value`` with ``change`` applied to each path it holds (seen from ``base``): the value itself
    for a path setting, each file of a ``plugins`` list."""
    if key == "plugins" and isinstance(value, list):
        from ..plugins import is_file_reference

        return [change(ref) if isinstance(ref, str) and ref and is_file_reference(ref) else ref for ref in value]
    return change(value) if _names_a_path(key, value, base) else value


def _names_a_path(key: str, value: Any, base: str) -> bool:
    """Whether setting ``key`` = ``value`` is a path (``dataset``: a feature folder seen from ``base``)."""
    if key not in PATH_SETTINGS or not isinstance(value, str) or not value:
        return False
    if key != "dataset":
        return True
    from ..data.feature_dir import is_feature_dir
    from ..data.registry import FEATURE_DATASETS

    return value not in FEATURE_DATASETS and is_feature_dir(os.path.join(base, value))


def absolute_paths(values: dict[str, Any], base: str | Path | None = None) -> dict[str, Any]:
    """Flat ``values`` with their relative paths made absolute against ``base`` (default: the working
    folder): the form two configurations' paths are compared in."""
    where = os.path.abspath(base if base is not None else os.curdir)

    def absolute(value: str) -> str:
        path = os.path.expanduser(value)
        return value if os.path.isabs(path) else os.path.normpath(os.path.join(where, path))

    return {key: _each_path(key, value, where, absolute) for key, value in values.items()}


def typed_paths(values: dict[str, Any]) -> dict[str, Any]:
    """Flat ``values`` as the user typed them, each path written in its normal form (``./data/x/`` ->
    ``data/x``), so that it compares equal to the same path read back from a run folder."""
    here = os.path.abspath(os.curdir)
    return {key: _each_path(key, value, here, os.path.normpath) for key, value in values.items()}


def paths_relative_to(values: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """Flat ``values`` as a run folder saves them: each relative path rewritten relative to ``folder``.

    Relative paths are taken from the working folder (where the user typed them); absolute ones
    stay as they are, and so does a path on another drive than ``folder`` (Windows), which has no
    relative form.
    """
    return _rebased(values, os.path.abspath(os.curdir), os.path.abspath(folder))


def paths_from_run_folder(values: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """Flat settings saved by a run folder (:func:`paths_relative_to`), each relative path rewritten
    relative to the working folder, wherever the process runs: the same places, in the form the
    user would type them here (and that the run folder saves back unchanged).

    A run folder written before paths were saved this way carries no output marker
    (:mod:`spmlkit.output_dir`); its relative paths were the working folder's, and are read so.
    """
    from ..output_dir import RUN, output_kind

    here = os.path.abspath(os.curdir)
    return _rebased(values, os.path.abspath(folder) if output_kind(folder) == RUN else here, here)


def _rebased(values: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``values`` with each relative path, relative to folder ``old``, rewritten relative to ``new``."""
    def rebase(value: str) -> str:
        if os.path.isabs(os.path.expanduser(value)):
            return value
        target = os.path.normpath(os.path.join(old, os.path.expanduser(value)))
        try:
            return Path(os.path.relpath(target, new)).as_posix()
        except ValueError:  # another drive (Windows): no relative form
            return target

    return {key: _each_path(key, value, old, rebase) for key, value in values.items()}
