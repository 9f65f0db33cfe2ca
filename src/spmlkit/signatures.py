"""A component's settings read from its constructor: what losses and label algorithms share.

A loss (:mod:`spmlkit.losses`) and a label algorithm (:mod:`spmlkit.labeling`) each declare
their hyperparameters as keyword arguments of ``__init__`` with defaults, and both registries
list and check them from that one signature, so there is no second list to keep in sync
(docs/losses-api.md, "Constructor arguments: hyperparameters, data arguments, options"). The reader lives here,
below both packages, so that neither imports the other for it (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["init_defaults"]


def init_defaults(cls: type) -> dict[str, Any]:
    """Keyword arguments of ``cls.__init__`` with their defaults (None where required)."""
    sig = inspect.signature(cls.__init__)
    return {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in sig.parameters.values()
        if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
