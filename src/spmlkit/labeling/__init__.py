"""Between-epoch label-state algorithms (APL, LL-Cp, OPML correction, SPLC, MIME's confident positives) and CRISP's
class-prior estimation (not registered: it writes no labels, and the ``crisp`` method uses it itself)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..names import REGISTRY, Registry, origin_of
from ..signatures import init_defaults
from .apl import APL
from .base import LabelingAlgorithm
from .class_prior import ClassPriorEstimation
from .confident_positives import ConfidentPositives
from .opml_correction import OPMLCorrection

__all__ = ["ALGORITHMS", "APL", "ClassPriorEstimation", "ConfidentPositives", "LabelingAlgorithm", "OPMLCorrection",
           "create", "hyperparameters", "register"]

#: between-epoch algorithms by the name method recipes use (spmlkit.methods); the labeling family
#: of the one registry (spmlkit.names)
ALGORITHMS: Registry[type[LabelingAlgorithm]] = REGISTRY.labeling


def register(name: str) -> Callable[[type[LabelingAlgorithm]], type[LabelingAlgorithm]]:
    """Class decorator adding a :class:`LabelingAlgorithm` under ``name``, for spmlkit's algorithms
    and a user's alike (docs/plugins.md); a recipe names it as its ``labeling``."""

    def decorate(cls: type[LabelingAlgorithm]) -> type[LabelingAlgorithm]:
        if not (isinstance(cls, type) and issubclass(cls, LabelingAlgorithm)):
            raise TypeError(f"labeling algorithm {name!r} must be a subclass of spmlkit.labeling.LabelingAlgorithm, "
                            f"got {cls!r}")
        return ALGORITHMS.register(name, cls, origin=origin_of(cls.__module__))

    return decorate


register("apl")(APL)
register("opml_correction")(OPMLCorrection)
register("confident_positives")(ConfidentPositives)


def hyperparameters(name: str) -> dict[str, Any]:
    """What a user tunes on algorithm ``name``, with defaults (None where required).

    Read from ``__init__`` minus the run arguments, which the trainer fills from the run.
    """
    cls = _lookup(name)
    return {k: v for k, v in init_defaults(cls).items() if k not in cls.run_arguments}


def create(name: str, **kwargs: Any) -> LabelingAlgorithm:
    """Build algorithm ``name`` from hyperparameters and run arguments.

    Unknown names and missing required arguments raise ``ValueError`` naming the valid
    ones, so a typo in a recipe fails at build time, not as a ``TypeError`` deep inside.
    """
    cls = _lookup(name)
    params = init_defaults(cls)
    hparams = sorted(k for k in params if k not in cls.run_arguments)
    run = ", ".join(cls.run_arguments) or "(none)"
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise ValueError(
            f"labeling algorithm {name!r} got unknown argument(s) {', '.join(unknown)}; valid "
            f"hyperparameters are: {', '.join(hparams) or '(none)'}; run arguments: {run}"
        )
    signature = inspect.signature(cls.__init__).parameters
    missing = [k for k in params if k not in kwargs and signature[k].default is inspect.Parameter.empty]
    if missing:
        raise ValueError(f"labeling algorithm {name!r} needs {', '.join(missing)} (no default)")
    return cls(**kwargs)


def _lookup(name: str) -> type[LabelingAlgorithm]:
    return ALGORITHMS.get(name)
