"""Training: one configuration, one :func:`train` (and :func:`train_group` for runs that differ only in
seed and learning rate, trained at once), one :class:`RunResult` for feature and image runs.

``from spmlkit.training import RunConfig, train``. The layers below (protocol, losses,
labeling, data, models) never import this package; the experiments layer and the command
line build on it (docs/architecture.md, "Layers").
"""

from .config import RunConfig, config_from_dict, load_config_file
from .result import RunResult
from .trainer import train, train_group

__all__ = ["RunConfig", "RunResult", "config_from_dict", "load_config_file", "train", "train_group"]
