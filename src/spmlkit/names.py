"""The one registry of every named thing: losses, label-state algorithms, methods, datasets.

:data:`REGISTRY` holds one :class:`Registry` per family (a loss and a dataset may share a name,
and the loss ``an`` and the method ``an`` do), and every family behaves alike: a name is
registered once, the names list in the order they were registered, and an unknown name is
answered in one line with the closest known name and all valid ones, which is what the command
line's choices and errors print.

Each name remembers its *origin*: ``"spmlkit"`` for the built-in ones, or the module of the
user's code that registered it (a plug-in, docs/plugins.md). A user registers exactly as
spmlkit's own modules do (``@losses.register``, ``labeling.register``, ``methods.register``,
``data.registry.register_dataset``); the origin is read from the registered class's or
function's module, so it is right however the user's code was imported. Registering a name
that is taken is our bug when both sides are spmlkit's (raised at import), and the user's
mistake (:class:`NameTaken`, one line naming who holds the name) when a plug-in does it.

Every name is a *safe name* (:func:`check_name`), checked when it is registered: names become
folder and file names (a run's default folder is ``runs/<dataset>/<method>/seed<seed>``, a
report's figures carry method names), so a plug-in's method called ``../../../elsewhere/x`` would
write outside the folder the user chose. A safe name is 1 to 64 of the characters ``A-Z a-z 0-9 _
- .``, starts with a letter, a digit or ``_`` (never ``.`` or ``-``: no hidden file, no option)
and holds no ``..``. A data set's name may also have one namespace before a ``/``, each part a safe
name (``mulan/emotions``); where it becomes a folder only its last part is used
(docs/plugins.md, "Names").

It sits in the lowest layer so that losses, label algorithms, methods and data sets can all use
it without importing one another.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ItemsView, Iterator, TypeVar

__all__ = ["BUILTIN", "BadName", "NameTaken", "REGISTRY", "Registries", "Registry", "RegistrationError",
           "check_name", "origin_of"]

T = TypeVar("T")

#: the origin of every name spmlkit itself registers
BUILTIN = "spmlkit"


def origin_of(module: str) -> str:
    """The origin a name registered from ``module`` gets: :data:`BUILTIN` for spmlkit's own
    modules, the module's name for anyone else's (a plug-in)."""
    return BUILTIN if module.partition(".")[0] == BUILTIN else module


class RegistrationError(ValueError):
    """A name a plug-in may not register: the user's mistake, said in one line naming the plug-in."""


class NameTaken(RegistrationError):
    """A plug-in registered a name its family already holds (spmlkit's, or another plug-in's)."""


class BadName(RegistrationError):
    """A name that is not a safe name (:func:`check_name`)."""


#: the longest name: it becomes part of file names, beside seeds, data sets and digests
MAX_NAME = 64
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_name(name: object, what: str, *, namespaced: bool = False) -> str:
    """``name`` when it is a safe name (module docstring), else :class:`BadName` in one line saying
    the rule; ``namespaced``: ``<namespace>/<name>`` is allowed too (data sets)."""
    if not isinstance(name, str):
        raise BadName(f"a {what} name must be a string, got {type(name).__name__} {name!r}")
    parts = name.split("/", 1) if namespaced else [name]
    bad = not name or len(name) > MAX_NAME or any(_SAFE.fullmatch(part) is None or ".." in part for part in parts)
    if bad:
        slash = "; a namespace may come before one '/'" if namespaced else ""
        raise BadName(f"{what} name {name!r} is not a safe name: 1 to {MAX_NAME} of the characters A-Z a-z 0-9 _ - ., "
                      f"starting with a letter, a digit or _, without '..' (names become file and folder names{slash}); "
                      "register it under such a name")
    return name


class Registry(Generic[T]):
    """Named items of one family (``what``: "loss", "dataset", ...), in registration order.

    ``unknown_hint`` ends the message for an unknown name (where a name of one's own comes from)."""

    def __init__(self, what: str, unknown_hint: str = "", *, namespaced: bool = False) -> None:
        self.what = what
        self.unknown_hint = unknown_hint
        self.namespaced = namespaced
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._listeners: list[Callable[[str, T, str], None]] = []

    def register(self, name: str, item: T, *, origin: str = BUILTIN) -> T:
        """Add ``item`` as ``name``; ``origin``: :data:`BUILTIN` or the registering module's name
        (:func:`origin_of`). Listeners (:meth:`subscribe`) hear of it at once. A name that is not a
        safe name (:func:`check_name`) is refused before anything is registered."""
        check_name(name, self.what, namespaced=self.namespaced)
        if name in self._items:
            held = self._origins[name]
            if origin == BUILTIN and held == BUILTIN:
                raise RuntimeError(f"{self.what} name {name!r} registered twice")
            if held == origin:
                raise NameTaken(f"{self.what} {name!r} is registered twice by {origin}; register it once")
            owner = "a built-in name of spmlkit's" if held == BUILTIN else f"already registered by {held}"
            raise NameTaken(f"{self.what} {name!r} is {owner}; give yours another name")
        self._items[name] = item
        self._origins[name] = origin
        for listener in list(self._listeners):
            listener(name, item, origin)
        return item

    def replace(self, name: str, item: T) -> T:
        """Put ``item`` in place of the item ``name`` names, keeping its origin and place: for a
        family whose entries another family derives (a loss's method), when the one who registered
        the derived entry then registers its own."""
        if name not in self._items:
            raise KeyError(name)
        self._items[name] = item
        return item

    def subscribe(self, listener: Callable[[str, T, str], None]) -> None:
        """Call ``listener(name, item, origin)`` for every item registered so far and from now on."""
        self._listeners.append(listener)
        for name, item in list(self._items.items()):
            listener(name, item, self._origins[name])

    def origin(self, name: str) -> str:
        """Who registered ``name``: :data:`BUILTIN` or a plug-in's module (``KeyError`` for an unknown name)."""
        return self._origins[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def keys(self):
        return self._items.keys()

    def items(self) -> ItemsView[str, T]:
        return self._items.items()

    def values(self):
        return self._items.values()

    def get(self, name: object) -> T:
        """The item, or a one-line ``ValueError`` naming the closest name and every valid one."""
        if name not in self:
            close = difflib.get_close_matches(name, list(self._items), n=1) if isinstance(name, str) else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            tail = f"; {self.unknown_hint}" if self.unknown_hint else ""
            raise ValueError(f"unknown {self.what} {name!r}{hint}; valid names are: "
                             f"{', '.join(sorted(self._items))}{tail}")
        return self._items[name]  # type: ignore[index]


#: what an unknown name of a family that users extend says last
_YOURS = "one of your own comes from a plug-in: --plugin FILE.py (docs/plugins.md)"


@dataclass(frozen=True)
class Registries:
    """Every family of named things, one :class:`Registry` each."""

    loss: Registry[Any]
    labeling: Registry[Any]
    method: Registry[Any]
    dataset: Registry[Any]

    def families(self) -> tuple[Registry[Any], ...]:
        return (self.loss, self.labeling, self.method, self.dataset)

    def registered_by(self, origin: str) -> list[str]:
        """Every name ``origin`` registered, as ``"<family> <name>"``, family by family."""
        return [f"{family.what} {name}" for family in self.families() for name in family
                if family.origin(name) == origin]

    def origins(self) -> list[str]:
        """Every origin other than spmlkit that registered a name, in the order they first did."""
        seen: dict[str, None] = {}
        for family in self.families():
            for name in family:
                if family.origin(name) != BUILTIN:
                    seen.setdefault(family.origin(name))
        return list(seen)


REGISTRY = Registries(loss=Registry("loss", _YOURS), labeling=Registry("labeling algorithm", _YOURS),
                      method=Registry("method", _YOURS), dataset=Registry("dataset", namespaced=True))
"""The one registry: ``REGISTRY.loss``, ``.labeling``, ``.method``, ``.dataset`` (``losses``' registry,
``labeling.ALGORITHMS``, ``methods.METHODS`` and ``data.registry.DATASETS`` are these)."""
