"""Between-epoch label-state algorithms (APL, LL-Cp, OPML correction, SPLC) and CRISP's class-prior estimation."""

from __future__ import annotations

import inspect
from typing import Any

from ..names import Registry
from ..signatures import init_defaults
from .apl import APL
from .base import LabelingAlgorithm
from .class_prior import ClassPriorEstimation
from .opml_correction import OPMLCorrection

__all__ = ["ALGORITHMS", "APL", "ClassPriorEstimation", "LabelingAlgorithm", "OPMLCorrection", "create", "hyperparameters"]

#: between-epoch algorithms by the name method recipes use (spmlkit.methods); the same kind of
#: registry as the losses' and the datasets' (spmlkit.names)
ALGORITHMS: Registry[type[LabelingAlgorithm]] = Registry("labeling algorithm")
ALGORITHMS.register("apl", APL)
ALGORITHMS.register("opml_correction", OPMLCorrection)
ALGORITHMS.register("class_prior", ClassPriorEstimation)


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
