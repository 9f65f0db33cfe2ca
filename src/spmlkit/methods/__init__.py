"""Every method, one object each, behind one registry.

    >>> from spmlkit import methods
    >>> methods.get_method("em_apl")                # the class: its declarations, its hyperparameters
    >>> methods.hyperparameters("em_apl")           # {"alpha": 0.1, "beta": 0.9, "theta": ..., ...}
    >>> list(methods.METHODS)                       # every name, in the catalogue's order

A *loss* (:mod:`spmlkit.losses`) is a formula; a *method* is what a paper trains: EM+APL is the
``em_apl`` loss plus the APL algorithm between epochs, SMILE a classifier trained beside networks
of its own, the "full labels" reference BCE on the complete label matrix. :class:`Method` is the
protocol every method follows (docs/architecture.md, "Methods"): spmlkit's, in
:mod:`~spmlkit.methods.catalogue` and one module per method with parts of its own, and a user's
(docs/plugins.md), registered the same way with :func:`register`.
"""

from __future__ import annotations

from .base import EPOCH_ARGUMENTS, GROUP_SETTINGS, LABEL_SETTINGS, STEP_ARGUMENTS, Meaning, Method, RunInfo
from .loss_method import LossMethod, Parts, loss_method
from .registry import METHODS, check_hparams, follow_losses, get_method, hyperparameters, register
from . import catalogue  # noqa: F401,E402  (registers spmlkit's methods, in the catalogue's order)

follow_losses()

__all__ = ["EPOCH_ARGUMENTS", "GROUP_SETTINGS", "LABEL_SETTINGS", "LossMethod", "METHODS", "Meaning", "Method",
           "Parts", "RunInfo", "STEP_ARGUMENTS", "check_hparams", "get_method", "hyperparameters", "loss_method",
           "register"]
