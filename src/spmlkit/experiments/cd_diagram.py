"""The critical-difference diagram of a leaderboard (docs/leaderboard.md, "The diagram").

The rank axis runs from 1 (best) to k; every method hangs from its average rank in its colour of
every figure (:func:`~spmlkit.experiments.method_colors.method_color`), its name and rank
written on the side its rank is nearer to; a thick bar joins methods that the Nemenyi test
cannot tell apart at the leaderboard's alpha, and the critical difference is drawn to scale
above the axis, from rank 1: a CD longer than the axis (few data sets: with two, no two
methods can ever differ) runs past the axis's end, which is drawn to scale beside it, and its
label says what that means. Methods with the same average rank would hang from one dot, the last
one drawn hiding the others: their dot is split into one slice per method, in each one's
colour, and each label says "tied". The drawing is ``scikit_posthocs.critical_difference_diagram``'s; this
module sizes the figure from the number of methods (so 2 and 30 methods both read at the
same type size) and places the axes so that no label leaves the figure. It knows nothing of
leaderboards: :func:`spmlkit.experiments.leaderboard.diagram` hands it the numbers and the title.

The figure is built on the Agg canvas directly, never through ``pyplot``, as every figure of
spmlkit is: no window opens and no global figure list grows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.path import Path as MarkerPath

from ..io import atomic_write_bytes
from .figure_text import finish, short_labels
from .method_colors import method_color
from .published import display_name

__all__ = ["critical_difference_figure", "save_png", "tie_groups", "DPI", "WIDTH_INCHES"]

DPI = 150
WIDTH_INCHES = 8.0
#: vertical space of one row of labels (each side holds half the methods)
_ROW_INCHES = 0.24
_FONT_SIZE = 9


def critical_difference_figure(average_rank: pd.Series, p_values: pd.DataFrame, critical_difference: float,
                               *, alpha: float, title: str) -> Figure:
    """Draw average ranks (methods -> rank, 1 = best), the groups that the pairwise ``p_values``
    cannot separate at ``alpha``, and the critical difference; return the figure.

    Methods are labelled with the papers' names (:func:`~spmlkit.experiments.published.display_name`).
    """
    import scikit_posthocs as sp

    k = len(average_rank)
    if k < 2:
        raise ValueError(f"a critical-difference diagram needs at least 2 methods, got {k}")
    # scikit-posthocs groups the methods in Python sets and draws each group's bar by iterating
    # one: with names (strings, whose hashes change with every process) the bars' order and
    # stacking changed between two renders of one store. It draws numbers here (an int hashes to
    # itself), and the labels get their names afterwards: the same store, the same bytes.
    names = dict(enumerate(short_labels([display_name(str(m)) for m in average_rank.index])))
    number = {m: i for i, m in enumerate(average_rank.index)}
    ranks = average_rank.rename(index=number)
    p_values = p_values.rename(index=number, columns=number)
    fig = Figure(figsize=(WIDTH_INCHES, 3.0))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.2, 0.05, 0.6, 0.8))  # placed by _fit once everything is drawn
    colours = {number[m]: method_color(str(m)) for m in average_rank.index}
    drawn = sp.critical_difference_diagram(
        ranks, p_values, alpha=alpha, ax=ax, label_fmt_left="L{label}", label_fmt_right="R{label}",
        label_props={"fontsize": _FONT_SIZE}, elbow_props={"linewidth": 1},
        crossbar_props={"linewidth": 3, "alpha": 0.7}, color_palette=colours, text_h_margin=0.02 * max(k - 1, 1))
    for text in drawn["labels"]:
        side, i = text.get_text()[0], int(text.get_text()[1:])
        rank = f"({ranks[i]:.2f})"
        text.set_text(f"{names[i]} {rank}" if side == "L" else f"{rank} {names[i]}")
    _split_tied_dots(ax, ranks.rename(index=names), drawn)
    # scikit-posthocs stacks crossbars one unit apart below the axis, then one label per unit below
    # them; the figure gets a fixed height per unit, so 2 and 30 methods read at the same type size
    bottom = min(text.get_position()[1] for text in drawn["labels"]) - 0.8
    cd_y = 1.6  # above the tick labels, which sit just over the axis line at y = 0
    top = cd_y + 1.2  # the CD label above its bar
    fig.set_size_inches(WIDTH_INCHES, 1.0 + _ROW_INCHES * (top - bottom))
    # the rank axis spans every possible rank, so diagrams of the same methods compare by eye; the
    # view reaches further where the CD bar does, with room for the dots at either end
    cd = critical_difference
    end = max(k, 1 + cd) if cd is not None else k
    margin = 0.02 * (end - 1)
    ax.set_xlim(1 - margin, end + margin)
    ax.spines["top"].set_bounds(1, k)
    ax.set_xticks(range(1, k + 1))
    ax.tick_params(axis="x", labelsize=_FONT_SIZE - 1)
    ax.set_ylim(bottom, top)
    if cd is not None:
        _cd_bar(ax, cd, k, cd_y)
    ax.set_title(title, fontsize=_FONT_SIZE + 1)
    finish(fig)  # right-to-left names in reading order before the texts are measured
    _fit(fig, ax)
    return fig


def _cd_bar(ax: Any, cd: float, k: int, y: float) -> None:
    """The critical difference to scale, from rank 1 to rank 1 + ``cd`` at height ``y``, with end
    ticks and its value; where it is longer than the rank axis (1 to ``k``), the label says that
    no two methods can differ, since no two average ranks are further apart than k - 1."""
    ax.plot([1, 1 + cd], [y, y], color="k", linewidth=1.5)
    for x in (1, 1 + cd):
        ax.plot([x, x], [y - 0.15, y + 0.15], color="k", linewidth=1.5)
    text = f"CD = {cd:.2f}"
    if cd > k - 1:
        text += f", longer than the rank axis (1 to {k}): no two methods can differ"
    ax.text(1, y + 0.35, text, va="bottom", ha="left", fontsize=_FONT_SIZE)


#: average ranks closer than this are one rank (means of half-integers over a few data sets are
#: exact in floating point, but a mean over many data sets may differ in its last bit)
_TIE_TOLERANCE = 1e-9


def tie_groups(ranks: pd.Series) -> list[list[str]]:
    """The methods (index of ``ranks``) that share an average rank, in groups of two or more,
    each group in the order of ``ranks``."""
    groups: dict[float, list[str]] = {}
    for name, rank in ranks.items():
        key = next((r for r in groups if abs(r - float(rank)) <= _TIE_TOLERANCE), float(rank))
        groups.setdefault(key, []).append(str(name))
    return [members for members in groups.values() if len(members) > 1]


def _split_tied_dots(ax: Any, ranks: pd.Series, drawn: dict[str, list]) -> None:
    """Where methods tie, replace their overlapping dots by one dot cut into equal slices, one
    per method in its colour, and add "tied" to each of their labels."""
    tied = {name: group for group in tie_groups(ranks) for name in group}
    if not tied:
        return
    # scikit-posthocs appends a marker and its label together, so the i-th marker is the i-th label's
    by_method = {}
    for marker, label in zip(drawn["markers"], drawn["labels"]):
        name = next(n for n in ranks.index if label.get_text() in (f"{n} ({ranks[n]:.2f})", f"({ranks[n]:.2f}) {n}"))
        by_method[name] = (marker, label)
    for group in sorted({tuple(g) for g in tied.values()}):  # a fixed order: the same bytes every time
        size = by_method[group[0]][0].get_sizes()[0]
        for i, name in enumerate(group):
            marker, label = by_method[name]
            colour = marker.get_facecolor()[0]
            marker.remove()
            start = 90 + 360 * i / len(group)
            ax.scatter(ranks[name], 0, marker=MarkerPath.wedge(start, start + 360 / len(group)), s=size * 3.0,
                       color=colour, edgecolors="white", linewidths=0.6, zorder=3)
            rank = f"{ranks[name]:.2f}"
            label.set_text(label.get_text().replace(f"({rank})", f"({rank}, tied)"))


def _fit(fig: Figure, ax: Any, pad_inches: float = 0.08) -> None:
    """Place the axes so that every text lies inside the figure.

    The method labels hang from their ranks, in data coordinates, and stick out of the axes
    to the left and right by their own length; a layout engine sizes the axes from texts
    that move whenever it resizes the axes, and left a long label a few pixels outside. Here
    each pass measures how far the texts overshoot each edge and shrinks the axes by that
    much, until nothing does by a pixel (a label moves by at most the shrink, so this settles
    in a few passes)."""
    width, height = fig.get_size_inches()
    pad = pad_inches * fig.dpi
    ax.set_position((0.02, 0.02, 0.96, 1 - 0.7 / height))  # room above for the two-line title
    for _ in range(8):
        renderer = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in [*ax.texts, ax.title]]
        x0, x1 = min(b.x0 for b in boxes), max(b.x1 for b in boxes)
        y0, y1 = min(b.y0 for b in boxes), max(b.y1 for b in boxes)
        over = (max(0.0, pad - x0), max(0.0, x1 - (fig.bbox.x1 - pad)),
                max(0.0, pad - y0), max(0.0, y1 - (fig.bbox.y1 - pad)))
        if max(over) < 1.0:  # within a pixel of the padding: inside the figure
            return
        pos = ax.get_position()
        ax.set_position((pos.x0 + over[0] / fig.bbox.width, pos.y0 + over[2] / fig.bbox.height,
                         pos.width - (over[0] + over[1]) / fig.bbox.width,
                         pos.height - (over[2] + over[3]) / fig.bbox.height))
    raise AssertionError("the diagram's labels did not fit the figure in 8 passes")  # our bug, not the user's


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at :data:`DPI`, atomically (a half-written figure never replaces a whole one)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})  # no version: the same bytes anywhere
    return atomic_write_bytes(path, buffer.getvalue())
