"""Named groups of data sets that ``spmlkit benchmark --suite NAME`` runs as one leaderboard.

One place lists them, so the CLI's choices, the suite benchmark script and the docs read the
same names (docs/leaderboard.md, "Suites").
"""

from __future__ import annotations

__all__ = ["SUITES", "suite_datasets"]

#: the twelve MULAN sets with their official train/test splits, in alphabetical order
SUITES: dict[str, tuple[str, ...]] = {
    "mulan": ("bibtex", "birds", "corel5k", "delicious", "emotions", "enron", "flags", "genbase", "medical",
              "scene", "tmc2007", "yeast"),
}


def suite_datasets(name: str) -> tuple[str, ...]:
    """The data sets of suite ``name``; an unknown name is the user's error (ValueError)."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    return SUITES[name]
