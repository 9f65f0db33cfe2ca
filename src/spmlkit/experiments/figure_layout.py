"""How the analysis figures are laid out so they stay readable from 1 to 30 methods.

A figure that put every method in one axes (or one panel per method in a single row) was
fine with 3 methods and unreadable with the Yeast benchmark's 26: a legend taller than the
page, a 16380 x 510 strip, a 900 x 13500 column. The rules here (docs/figures.md, "Sizes
and layouts") keep every figure within fixed bounds whatever the store holds:

- **Size.** Each side between :data:`MIN_SIDE_PX` and :data:`MAX_SIDE_PX` pixels at
  :data:`DPI`, and the longer side at most :data:`MAX_ASPECT` times the shorter one, so a
  figure opens on a screen and prints on a page. Figures are designed to fit; the clamp in
  :func:`bounded_size` is the last guard, not the layout.
- **Groups.** Lines are drawn at most :data:`GROUP_SIZE` methods to an axes (in the papers'
  order, so related methods share a panel); more methods make more panels (small
  multiples), each with its own legend beside it.
- **Grids.** One panel per method is wrapped into a near-square grid instead of a row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "GROUP_SIZE",
    "LINE_STYLES",
    "MAX_ASPECT",
    "MAX_SIDE_PX",
    "MIN_SIDE_PX",
    "bottom_panels",
    "bounded_size",
    "grid_shape",
    "method_groups",
    "new_figure",
    "panel_grid",
]

#: dots per inch of the saved PNG
DPI = 150
#: bounds of each side of a saved PNG, in pixels
MIN_SIDE_PX = 400
MAX_SIDE_PX = 4000
#: the longer side is at most this many times the shorter one
MAX_ASPECT = 4.0
#: the most methods drawn as lines in one axes
GROUP_SIZE = 6
#: line styles that tell apart the methods of one group whose colours are close (a family
#: shares a hue: the large-loss methods are three oranges)
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1)))


def bounded_size(width: float, height: float) -> tuple[float, float]:
    """(width, height) in inches moved into the bounds: each side within
    [MIN_SIDE_PX, MAX_SIDE_PX] / DPI, then the shorter side raised (or, where that would
    pass the maximum, the longer one lowered) until the aspect is at most MAX_ASPECT."""
    lo, hi = MIN_SIDE_PX / DPI, MAX_SIDE_PX / DPI
    w, h = (min(max(float(v), lo), hi) for v in (width, height))
    if w > MAX_ASPECT * h:
        h = w / MAX_ASPECT
    elif h > MAX_ASPECT * w:
        w = h / MAX_ASPECT
    return w, h


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of about ``width`` x ``height`` inches (see :func:`bounded_size`) on
    the Agg canvas, with constrained layout: no pyplot, so no window and no global registry
    of figures that fills up in a long sweep."""
    fig = Figure(figsize=bounded_size(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def grid_shape(n: int, *, single_row: int = 4, ratio: float = 1.6) -> tuple[int, int]:
    """(rows, columns) for ``n`` similar panels: one row up to ``single_row`` panels, then
    about ``ratio`` times as many columns as rows, so 26 panels make 4 x 7, not 1 x 26."""
    if n <= 0:
        raise ValueError(f"a grid needs at least one panel, got {n}")
    ncols = n if n <= single_row else math.ceil(math.sqrt(n * ratio))
    return math.ceil(n / ncols), ncols


def panel_grid(fig: Figure, n: int, ncols: int, *, sharex: bool | str = False,
               sharey: bool | str = False) -> list[Axes]:
    """``n`` axes in rows of ``ncols``, in reading order; the cells the last row leaves
    empty are removed, so ``fig.axes`` holds only panels that show something."""
    nrows = math.ceil(n / ncols)
    grid = np.asarray(fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey))
    cells = list(grid.ravel())
    for ax in cells[n:]:
        fig.delaxes(ax)
    kept = cells[:n]
    if sharex:  # a panel with no panel below it shows the x tick labels the removed cell held
        for ax in bottom_panels(kept, ncols):
            ax.xaxis.set_tick_params(labelbottom=True)
    return kept


def bottom_panels(panels: Sequence[Axes], ncols: int) -> list[Axes]:
    """The panels of a :func:`panel_grid` with no panel below them: the ones that carry
    the x label (a figure-wide ``supxlabel`` would collide with a legend under the grid)."""
    return list(panels[max(0, len(panels) - ncols):])


def method_groups(methods: Sequence[str], size: int = GROUP_SIZE) -> list[list[str]]:
    """``methods`` (already in display order) split into the fewest groups of at most
    ``size``, as even as possible: 26 methods make 6 + 5 + 5 + 5 + 5, not 6 + 6 + 6 + 6 + 2."""
    methods = list(methods)
    if not methods:
        return []
    k = math.ceil(len(methods) / size)
    return [list(map(str, part)) for part in np.array_split(np.array(methods, dtype=object), k)]
