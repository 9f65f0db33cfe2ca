"""A learning rate selected on the edge of its grid, and the step that widens the grid.

A benchmark selects each method's learning rate on validation mAP among the lrs it tried. When
the best is the smallest or the largest of them, the grid has not shown that it holds the best
lr: validation mAP may still rise beyond it (on a small table of one's own, 27 of 28 methods
chose the top of the default grid). The table says so (a column of ``table.csv`` and a note
under every table), and ``--extend-lrs`` widens such a method's grid one lr at a time, by the
grid's own ratio, until its selection is inside or the most steps are taken
(docs/benchmark.md, "Learning rates on the edge").

Pure functions of numbers: the benchmark decides which runs to train.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["INSIDE", "LOWEST", "HIGHEST", "ONLY", "EDGES", "lr_position", "step_beyond", "marked_lr", "edge_note"]

#: where a selected lr lies among the lrs a method tried (the ``lr_position`` of a table row)
INSIDE, LOWEST, HIGHEST, ONLY = "inside", "lowest", "highest", "only"
#: the positions that mean "the best lr may lie beyond the grid"
EDGES = (LOWEST, HIGHEST)


def lr_position(lr: float, tried: Sequence[float]) -> str:
    """Where ``lr`` lies among ``tried``: :data:`LOWEST` or :data:`HIGHEST` on an edge,
    :data:`INSIDE` between two lrs tried, :data:`ONLY` when one lr was tried (nothing was
    selected, so nothing is on an edge)."""
    values = sorted(set(float(v) for v in tried))
    if len(values) < 2:
        return ONLY
    if float(lr) == values[0]:
        return LOWEST
    if float(lr) == values[-1]:
        return HIGHEST
    return INSIDE


def step_beyond(grid: Sequence[float], tried: Sequence[float], side: str) -> float:
    """The next lr beyond ``tried``'s edge on ``side`` (:data:`LOWEST` or :data:`HIGHEST`).

    The step is ``grid``'s own ratio between its two outermost lrs on that side (10/3 at the top of
    the default 1e-3, 3e-3, 1e-2, 3 at its bottom), so the widened grid keeps the spacing the user
    chose. The value is rounded to one significant digit (0.0333 is 0.03, then 0.1, 0.3; below
    1e-3: 3e-4, 1e-4, 3e-5), or to the fewest digits that still leave a step of at least the
    square root of the ratio, so that a fine grid is not rounded back onto its own edge.
    """
    base = sorted(set(float(v) for v in grid))
    if len(base) < 2 or base[0] <= 0:
        raise ValueError(f"an lr grid widens by the ratio of two positive lrs; got {', '.join(map(str, base))}")
    ratio = base[-1] / base[-2] if side == HIGHEST else base[1] / base[0]
    values = sorted(set(float(v) for v in tried))
    edge = values[-1] if side == HIGHEST else values[0]
    exact = edge * ratio if side == HIGHEST else edge / ratio
    for digits in range(3):
        rounded = float(f"{exact:.{digits}e}")
        step = rounded / edge if side == HIGHEST else edge / rounded
        if step >= math.sqrt(ratio):
            return rounded
    return exact


def marked_lr(lr: float, position: str) -> str:
    """An lr as a table prints it: ``0.01 (highest)`` on an edge of the lrs tried, ``0.003`` otherwise."""
    return f"{lr:g} ({position})" if position in EDGES else f"{lr:g}"


def edge_note(rows: Sequence[Mapping[str, Any]], *, widened: int = 0) -> str | None:
    """The sentence under a table whose rows (``method``, ``lr``, ``lr_position``) selected an lr on
    an edge of the lrs they tried; None when none did. ``widened``: the most steps
    ``--extend-lrs`` took (0 when it was not given), which changes the advice."""
    at = {side: [r for r in rows if r.get("lr_position") == side] for side in EDGES}
    if not any(at.values()):
        return None
    parts = []
    for side, chosen in at.items():
        by_lr: dict[float, list[str]] = {}
        for r in chosen:
            by_lr.setdefault(float(r["lr"]), []).append(str(r["method"]))
        parts += [f"{', '.join(methods)} chose {lr:g}, the {side} lr tried" for lr, methods in by_lr.items()]
    advice = (f"--extend-lrs took its {widened} steps and they are still there: give --lrs further out"
              if widened else "--extend-lrs tries further lrs until each is inside")
    return (f"Learning rate on the edge of the grid: {'; '.join(parts)}. Their best lr may lie beyond it; {advice} "
            "(docs/benchmark.md, \"Learning rates on the edge\").")
