"""The method family of the one registry: how a method is registered, found and described.

spmlkit's methods and a user's register the same way (docs/plugins.md): ``@register(name,
description, paper=...)`` on a :class:`~spmlkit.methods.Method` subclass, or on a class made by
:func:`~spmlkit.methods.loss_method`. The declarations are checked when the class is registered,
so a typo fails at import, not in the middle of a run. A loss registered with
:func:`spmlkit.losses.register` is also a method of its name (the loss on the observed labels,
nothing around it) unless it says ``method=False``; a plug-in may replace that method with one of
its own making (same origin).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..models.output import OUTPUTS
from ..names import BUILTIN, REGISTRY, NameTaken, Registry, origin_of
from .base import GROUP_SETTINGS, LABEL_SETTINGS, Meaning, Method
from .loss_method import loss_method

__all__ = ["METHODS", "check_hparams", "follow_losses", "get_method", "hyperparameters", "register"]

M = TypeVar("M", bound=type[Method])

#: every method by name: the method family of the one registry (spmlkit.names); each entry is a class
METHODS: Registry[type[Method]] = REGISTRY.method
#: methods made from a loss of the same name (:func:`_method_of_loss`), which that loss's author may
#: replace with a method of their own
_DERIVED: set[str] = set()


def register(name: str, description: str | None = None, *, paper: str = "") -> Callable[[M], M]:
    """Class decorator adding a :class:`~spmlkit.methods.Method` subclass to the catalogue under ``name``,
    spmlkit's own and a user's alike, with its one-line ``description`` and ``paper``. Its declarations
    are checked here; the class gets its name, description and paper."""
    if not isinstance(name, str) or not isinstance(description, str):
        raise TypeError("methods.register is a class decorator: @register(name, description) on a Method subclass, "
                        "or register(name, description)(loss_method(...)) (docs/plugins.md, \"A whole method\"); "
                        f"got register({name!r}, {description!r})")

    def decorate(cls: M) -> M:
        if not (isinstance(cls, type) and issubclass(cls, Method)):
            raise TypeError(f"method {name!r}: register a subclass of spmlkit.methods.Method, got {cls!r}")
        if cls.name and cls.name != name and cls.name in METHODS and METHODS[cls.name] is cls:
            raise TypeError(f"method {name!r}: the class {cls.__name__} is already the method {cls.name!r}; "
                            "register a subclass of it instead")
        _check_declarations(name, cls)
        cls.name, cls.description, cls.paper = name, description, paper
        # a reference: labels beyond the observation, or (declared by the class) the truth's statistics
        cls.sees_more_labels = cls.labels != "observed" or bool(cls.__dict__.get("sees_more_labels", False))
        origin = origin_of(cls.__module__)
        if name in _DERIVED and METHODS.origin(name) == origin:
            _DERIVED.discard(name)
            return METHODS.replace(name, cls)  # type: ignore[return-value]
        return METHODS.register(name, cls, origin=origin)  # type: ignore[return-value]

    return decorate


def _check_declarations(name: str, cls: type[Method]) -> None:
    """Every declaration a run reads, checked once when the method is registered."""
    if cls.labels not in LABEL_SETTINGS:
        raise ValueError(f"method {name!r}: labels must be one of {', '.join(LABEL_SETTINGS)}, got {cls.labels!r}")
    if not set(cls.requires) <= set(OUTPUTS):
        raise ValueError(f"method {name!r}: requires {sorted(cls.requires)}; a method may require "
                         f"{', '.join(OUTPUTS)} beyond the logits")
    if not (cls.group_varies and set(cls.group_varies) <= set(GROUP_SETTINGS)):
        raise ValueError(f"method {name!r}: group_varies must name some of {', '.join(GROUP_SETTINGS)}, "
                         f"got {cls.group_varies!r}")
    if cls.batch_statistics not in ("global", "process"):
        raise ValueError(f"method {name!r}: batch_statistics must be 'global' or 'process', got {cls.batch_statistics!r}")
    if not isinstance(cls.on_features, Meaning):
        raise ValueError(f"method {name!r}: on_features must be a spmlkit.methods.Meaning, got {cls.on_features!r}")
    threshold = cls.threshold
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise ValueError(f"method {name!r}: threshold must be a probability strictly between 0 and 1, got {threshold!r}")


def get_method(name: str) -> type[Method]:
    """The method ``name``; an unknown name is one line with the closest name and every valid one."""
    return METHODS.get(name)


def hyperparameters(name: str) -> dict[str, Any]:
    """What a user tunes on method ``name``, with defaults (None: the part's own, or required)."""
    return get_method(name).hyperparameters()


def check_hparams(name: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``overrides`` for method ``name``, after refusing names it does not have (one line)."""
    return get_method(name).check_hparams(overrides)


def _method_of_loss(name: str, entry: Any, origin: str) -> None:
    """A loss registered without ``method=False`` is also a method of its name: the loss on the
    observed labels, nothing around it. A method of that name that trains this loss (spmlkit's
    ``an`` for the loss ``an``) already is that method; a method of that name that trains another
    loss makes the loss's name a mistake, said when the loss is registered."""
    if not entry.method:
        return
    if name in METHODS:
        parts = METHODS[name].parts()
        if parts[:1] == (("loss", name),):
            return
        held = METHODS.origin(name)
        who = "spmlkit's method" if held == BUILTIN else f"the method of {held}"
        trains = f"trains the loss {parts[0][1]!r}" if parts else "is a method of its own"
        raise NameTaken(f"loss {name!r} would also be the method {name!r}, but {who} of that name {trains}; give the "
                        "loss another name, or register it with method=False")
    cls = loss_method(name)
    cls.__module__ = entry.cls.__module__  # the loss's author is the method's origin
    paper = "" if origin == BUILTIN else f"plug-in {origin}"
    _check_declarations(name, cls)
    cls.name, cls.description, cls.paper = name, entry.description, paper
    cls.sees_more_labels = False
    METHODS.register(name, cls, origin=origin)
    _DERIVED.add(name)


def follow_losses() -> None:
    """Make every loss registered so far, and from now on, a method of its name where it asks to be
    (:func:`_method_of_loss`). Called once the catalogue is registered, so that spmlkit's own
    methods keep the catalogue's order."""
    REGISTRY.loss.subscribe(_method_of_loss)
