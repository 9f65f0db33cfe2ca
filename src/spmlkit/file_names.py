"""File and folder names made from names a user chose: injective, bounded, inside their folder.

A report names its figures after the data set and the observation (``densities_yeast_
single_positive.png``) and a benchmark of several data sets gives each its folder under
``--out``. Those names come from the user: a data set may be called ``a b``, ``a-b``, ``..``,
a 240-character folder, or hold characters a file system refuses. Written as they are, two
data sets share one file (the second silently replaces the first), a name leaves its folder
(``..``), or the operating system refuses the name ("File name too long").
The rule (docs/figures.md, "File names"):

- A *plain* name is kept as it is: letters, digits, ``.``, ``_`` and ``-``, not starting with a
  dot (no hidden files, never ``.`` or ``..``), at most :data:`MAX_STEM` characters. Every
  name spmlkit itself gives (``yeast``, ``single_positive``, ``emotions``) is plain.
- Any other name is written as its readable part (every run of other characters becomes one
  ``-``, cut to fit) followed by ``~`` and :data:`DIGEST_CHARS` hexadecimal digits of the
  SHA-256 of the exact name. ``~`` never occurs in a plain name, so such a name never equals
  a plain one, and two of them are equal only if 40 bits of SHA-256 agree (about one pair in
  a million million): ``a b`` becomes ``a-b~...``, which ``a-b`` never is.
- :class:`UniqueNames` keeps names unique within one folder: a plain name that another set of
  parts already took is written in the digest form instead.

Every name is ASCII, so its length in bytes is its length in characters, far below the 255
bytes a file name may have on common file systems.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable

__all__ = ["DIGEST_CHARS", "MAX_STEM", "UniqueNames", "file_stem", "identified_stem", "is_plain"]

#: the longest name kept as it is, and the longest name made: room for an extension and the
#: temporary prefix and suffix of an atomic write within 255 bytes
MAX_STEM = 120
#: hexadecimal digits of the SHA-256 digest that tell two non-plain names apart
DIGEST_CHARS = 10
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_OTHER = re.compile(r"[^A-Za-z0-9._-]+")


def is_plain(text: str) -> bool:
    """Whether ``text`` may stand as a name as it is (module docstring)."""
    return bool(_PLAIN.fullmatch(text)) and len(text) <= MAX_STEM


def file_stem(*parts: object) -> str:
    """The name of ``parts`` joined by ``_`` (parts None or empty left out): as it is when the
    result is plain, else its readable part and the digest of the exact parts."""
    texts = [str(p) for p in parts if p is not None and str(p) != ""]
    joined = "_".join(texts)
    if is_plain(joined):
        return joined
    return _digest_form(texts)


def identified_stem(readable: str, identity: str) -> str:
    """``readable`` (its other characters written as ``-``, cut to fit) with ``~`` and the digest
    of ``identity``: a name unique to ``identity`` that still says what it is."""
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:DIGEST_CHARS]
    text = _OTHER.sub("-", readable).lstrip(".")
    return f"{text[:MAX_STEM - DIGEST_CHARS - 1]}~{digest}"


def _digest_form(texts: list[str]) -> str:
    readable = "_".join(_OTHER.sub("-", t).strip("-") for t in texts)
    return identified_stem(readable, json.dumps(texts, ensure_ascii=False))


class UniqueNames:
    """Names given within one folder, each to one set of parts only.

    :meth:`name` gives :func:`file_stem`'s name, or, when a different set of parts already has
    that name (``("a_b", "c")`` and ``("a", "b_c")`` both join to ``a_b_c``) or it is one of
    ``reserved``, the digest form, which is unique to the parts. The same parts always get the
    same name."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._owner: dict[str, tuple[str, ...]] = {name: () for name in reserved}
        self._given: dict[tuple[str, ...], str] = {}

    def name(self, *parts: object) -> str:
        key = tuple(str(p) for p in parts if p is not None and str(p) != "")
        if key in self._given:
            return self._given[key]
        name = file_stem(*key)
        if name in self._owner and self._owner[name] != key:
            name = _digest_form(list(key))
        self._owner[name] = key
        self._given[key] = name
        return name
