"""The benchmark's default grid of seeds and learning rates, in a module of its own.

``spmlkit benchmark --help`` prints these defaults; keeping them apart from
:mod:`spmlkit.experiments.benchmark` (which needs the methods, hence torch, and pandas) lets the
help appear without importing either (docs/architecture.md, "Start-up time").
"""

from __future__ import annotations

__all__ = ["DEFAULT_SEEDS", "DEFAULT_LRS", "MAX_EXTEND_LRS"]

#: three seeds, so that every table has a standard deviation (docs/leaderboard.md, "What a reader may conclude")
DEFAULT_SEEDS = (0, 1, 2)
#: the learning rates each method chooses from on validation mAP
DEFAULT_LRS = (1e-3, 3e-3, 1e-2)
#: the lrs ``--extend-lrs`` adds at most beyond an edge of the grid, per method: three steps of the
#: default grid's ratio reach 0.3 above and 3e-5 below (docs/benchmark.md, "Learning rates on the edge")
MAX_EXTEND_LRS = 3
