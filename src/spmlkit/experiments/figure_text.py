"""Names in figures: what users named (methods, data sets, classes) drawn so every reader sees it.

Matplotlib draws a string's characters left to right, in the order they are stored, with one
font. A name from a user's data can hold what that cannot show: a class named in Chinese
(empty boxes: the figure font has no such glyphs), in Hebrew or Arabic (drawn backwards),
with a control character such as U+202E RIGHT-TO-LEFT OVERRIDE (invisible, or reordering
what follows in a viewer that honours it), with ``$`` (matplotlib's mathematics), or 240
characters long (clipped, or overlapping its neighbours). The rules (docs/figures.md,
"Names in figures"):

- **Control and format characters** (Unicode categories Cc, Cf, Co, Cs, Cn, Zl, Zp: line
  breaks, tabs, the bidirectional embeddings, overrides and isolates, zero-width joiners)
  are written as their code point, ``<U+202E>``, so they are visible and act on nothing.
- **Characters the figure font lacks** are written the same way, ``<U+4E2D>``: the figures
  use matplotlib's own DejaVu Sans on every machine (so a store gives the same bytes
  everywhere), which has Latin, Greek, Cyrillic, Hebrew and Arabic letters but no Chinese,
  Japanese or Korean ones and no emoji.
- **Right-to-left text** (Hebrew, Arabic, ...) is drawn in reading order: each run of it
  (right-to-left letters with the spaces, punctuation and numbers between them) is reversed
  for drawing, its numbers kept left to right and its brackets mirrored, within a
  left-to-right line. Arabic letters are not joined (matplotlib does not shape text): they
  read as their isolated forms.
- **Long names** keep their first :data:`HEAD` and last :data:`TAIL` characters with ``…``
  between, :data:`MAX_NAME` characters in all, so a tick label or legend entry never runs
  into its neighbours; the end is kept because names that share a long prefix differ there.
  :func:`short_labels` keeps a set of names apart when shortening makes two alike.

:func:`name` applies the escapes, ``$`` and the shortening to a name as it is put into a
figure; :func:`finish` reorders right-to-left runs in every text of a finished figure (once)
and escapes anything that arrived without :func:`name`.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Sequence

from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FuncFormatter

__all__ = ["HEAD", "MAX_NAME", "TAIL", "finish", "name", "short_labels", "visible"]

#: the longest name drawn whole, and what a longer one keeps: HEAD + "…" + TAIL characters
MAX_NAME = 32
HEAD = 20
TAIL = MAX_NAME - HEAD - 1
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}
_RTL = {"R", "AL"}
_NUMBER = {"EN", "AN"}
_NEUTRAL = {"WS", "ON", "CS", "ES", "ET", "BN", "S"}
_MIRROR = {"(": ")", ")": "(", "[": "]", "]": "[", "{": "}", "}": "{", "<": ">", ">": "<"}


@functools.cache
def _font_has() -> frozenset[int]:
    """The code points the figure font (matplotlib's default sans-serif, DejaVu Sans) draws."""
    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(findfont(FontProperties())).get_charmap())


def _escape(char: str) -> str:
    return f"<U+{ord(char):04X}>"


def _tokens(text: str) -> list[str]:
    """``text`` as drawable pieces: a character the font draws, or the escape of one it must not
    or cannot draw (module docstring)."""
    has = _font_has()
    out = []
    for char in str(text):
        hidden = unicodedata.category(char) in _HIDDEN_CATEGORIES or (ord(char) not in has and char != " ")
        out.append(_escape(char) if hidden else char)
    return out


def visible(text: str) -> str:
    """``text`` with its control and format characters, and those the font lacks, as ``<U+XXXX>``."""
    return "".join(_tokens(text))


def name(text: object) -> str:
    """A user's name as a figure shows it: :func:`visible`, ``$`` taken literally (not as the start
    of mathematics), and cut to :data:`MAX_NAME` characters as ``head…tail`` (never inside an
    escape)."""
    tokens = _tokens(str(text))
    if sum(map(len, tokens)) > MAX_NAME:
        head, tail, used = [], [], 0
        for token in tokens:
            if used + len(token) > HEAD:
                break
            head.append(token)
            used += len(token)
        used = 0
        for token in reversed(tokens[len(head):]):
            if used + len(token) > TAIL:
                break
            tail.insert(0, token)
            used += len(token)
        tokens = head + ["…"] + tail
    return "".join(tokens).replace("$", r"\$")


def short_labels(names: Sequence[str]) -> list[str]:
    """:func:`name` of each of ``names``, kept apart: where two come out alike (two long names that
    differ only in their middle), each gets its place in ``names`` after it, ``#3``."""
    shown = [name(n) for n in names]
    alike = {s for s in shown if shown.count(s) > 1}
    return [f"{s} #{i + 1}" if s in alike else s for i, s in enumerate(shown)]


def _direction(token: str) -> str:
    if len(token) != 1:
        return "L"  # an escape is ASCII
    kind = unicodedata.bidirectional(token)
    if kind in _RTL:
        return "R"
    if kind in _NUMBER:
        return "D"
    if kind == "NSM":
        return "M"
    return "N" if kind in _NEUTRAL else "L"


def reading_order(text: str) -> str:
    """``text`` (one or more lines) in the order to draw it left to right: every run of right-to-left
    letters, with the spaces, punctuation and numbers between them, reversed; a number inside such
    a run keeps its digits' order, a mark stays on its letter, brackets are mirrored."""
    return "\n".join(_line_order(line) for line in text.split("\n"))


def _line_order(line: str) -> str:
    # units: a character with the marks that follow it (they must stay on it when a run reverses)
    units: list[list[str]] = []
    for char in line:
        if units and _direction(char) == "M":
            units[-1].append(char)
        else:
            units.append([char])
    kinds = [_direction(u[0]) for u in units]
    out: list[str] = []
    i = 0
    while i < len(units):
        if kinds[i] != "R":
            out.append("".join(units[i]))
            i += 1
            continue
        end = i  # the run: from this letter to the last right-to-left letter before a left-to-right one,
        j = i    # and to the closing bracket of a bracket it opens
        opened = 0
        while j < len(units) and kinds[j] != "L":
            char = units[j][0]
            opened += char in "([{" and j > i
            if kinds[j] == "R" or (char in ")]}" and opened > 0):
                end = j
                opened -= char in ")]}" and opened > 0
            j += 1
        pieces: list[str] = []
        k = i
        while k <= end:
            if kinds[k] == "D":  # a number reads left to right inside right-to-left text
                start = k
                while k <= end and kinds[k] == "D":
                    k += 1
                pieces.append("".join("".join(u) for u in units[start:k]))
                continue
            unit = units[k]
            pieces.append(_MIRROR.get(unit[0], unit[0]) + "".join(unit[1:]))
            k += 1
        out.extend(reversed(pieces))
        i = end + 1
    return "".join(out)


def _drawn_label(label: Callable[..., str], drawn: Callable[[str], str], *args: object) -> str:
    return drawn(str(label(*args)))


def finish(fig: Figure) -> Figure:
    """Make every text of ``fig`` drawable (:func:`visible`) and put right-to-left runs in reading
    order (:func:`reading_order`), once: a second call (a figure saved as PNG, then SVG) changes
    nothing. Call after the figure is complete and before it is measured or saved."""
    if getattr(fig, "_spmlkit_text_finished", False):
        return fig

    def drawn(content: str) -> str:
        return reading_order("\n".join(visible(line) for line in content.split("\n")))  # our line breaks stay

    for text in fig.findobj(Text):
        content = text.get_text()
        if content and drawn(content) != content:
            text.set_text(drawn(content))
    for ax in fig.axes:  # tick labels are made again from their formatter at every draw: change it there
        for axis in (ax.xaxis, ax.yaxis):
            for formatter in (axis.get_major_formatter(), axis.get_minor_formatter()):
                if isinstance(formatter, FixedFormatter):
                    formatter.seq = [drawn(str(label)) for label in formatter.seq]
                elif isinstance(formatter, FuncFormatter):  # what set_ticklabels makes of a list of labels
                    formatter.func = functools.partial(_drawn_label, formatter.func, drawn)
    fig._spmlkit_text_finished = True  # type: ignore[attr-defined]
    return fig
