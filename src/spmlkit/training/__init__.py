"""Training: one configuration, one :func:`train` (and :func:`train_group` for runs that differ only in
seed and learning rate, trained at once), one :class:`RunResult` for feature and image runs.

``from spmlkit.training import RunConfig, train``. The layers below (protocol, losses,
labeling, data, models) never import this package; the experiments layer and the command
line build on it (docs/architecture.md, "Layers").

The names load on first use: the command line reads :mod:`~spmlkit.training.config` (torch-free)
for the defaults its help prints, and ``spmlkit --help`` should not wait for torch to import
(docs/architecture.md, "Start-up time").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import RunConfig, config_from_dict, load_config_file
    from .result import RunResult
    from .trainer import train, train_group

__all__ = ["RunConfig", "RunResult", "config_from_dict", "load_config_file", "train", "train_group"]

#: where each public name lives
_HOME = {"RunConfig": "config", "config_from_dict": "config", "load_config_file": "config", "RunResult": "result",
         "train": "trainer", "train_group": "trainer"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
