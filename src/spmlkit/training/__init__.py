"""Training: one configuration, one :func:`train`, one :class:`RunResult` for feature and image runs.

``from spmlkit.training import RunConfig, train``. The layers below (protocol, losses,
labeling, data, models) never import this package; the experiments layer and the command
line build on it (docs/architecture.md, "Layers").
"""

from .config import RunConfig, config_from_dict, load_config_file
from .result import RunResult
from .trainer import train

__all__ = ["RunConfig", "RunResult", "config_from_dict", "load_config_file", "train"]
