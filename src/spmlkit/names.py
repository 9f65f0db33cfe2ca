"""One kind of registry for every named thing: datasets, losses, label-state algorithms.

Each family keeps its own :class:`Registry` (a loss and a dataset may share a name), and every
one of them behaves alike: a name is registered once (twice is our bug, raised at import), the
names list in the order they were registered, and an unknown name is answered in one line
with the closest known name and all valid ones, which is what the command line's choices and
errors print. It sits in the lowest layer so that losses, label algorithms and data sets can
all use it without importing one another.
"""

from __future__ import annotations

import difflib
from typing import Generic, ItemsView, Iterator, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named items of one family (``what``: "loss", "dataset", ...), in registration order."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise RuntimeError(f"{self.what} name {name!r} registered twice")
        self._items[name] = item
        return item

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

    def items(self) -> ItemsView[str, T]:
        return self._items.items()

    def values(self):
        return self._items.values()

    def get(self, name: object) -> T:
        """The item, or a one-line ``ValueError`` naming the closest name and every valid one."""
        if name not in self:
            close = difflib.get_close_matches(name, list(self._items), n=1) if isinstance(name, str) else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown {self.what} {name!r}{hint}; valid names are: {', '.join(sorted(self._items))}")
        return self._items[name]  # type: ignore[index]
