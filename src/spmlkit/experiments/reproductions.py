"""The published experiments ``spmlkit reproduce`` reruns, by name (docs/reproductions.md).

Apart from :mod:`~spmlkit.experiments.reproduce`, which runs them, so that the command line can
list them in its help without importing NumPy, pandas or torch (docs/architecture.md, "Start-up
time").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .presets import TABULAR_PROTOCOL
from .published import CRISP_METHODS

__all__ = ["Reproduction", "REPRODUCTIONS", "get_reproduction"]


@dataclass(frozen=True)
class Reproduction:
    """A published experiment as spmlkit reruns it: its tables, data sets, protocol and grid."""

    name: str
    source: str  # the paper's short name in :mod:`~spmlkit.experiments.published`
    tables: dict[str, str]  # published table -> metric
    datasets: dict[str, str]  # the published data set name -> spmlkit's dataset argument
    method_labels: dict[str, str]  # the paper's row label -> spmlkit method name
    lrs: tuple[float, ...]
    weight_decays: tuple[float, ...]
    batch_sizes: tuple[int, ...]
    trials: int
    settings: dict[str, Any] = field(default_factory=dict)  # every run's settings (the protocol)
    description: str = ""


REPRODUCTIONS: dict[str, Reproduction] = {
    "crisp-tabular": Reproduction(
        name="crisp-tabular", source="CRISP",
        tables={"CRISP Table 2": "ranking_loss", "CRISP Table 8": "example_ap", "CRISP Table 9": "coverage",
                "CRISP Table 10": "hamming_loss", "CRISP Table 11": "one_error"},
        datasets={"yeast": "yeast", "scene": "scene", "corel5k": "corel5k", "delicious": "delicious"},
        method_labels=CRISP_METHODS, lrs=(1e-2, 1e-3, 1e-4, 1e-5), weight_decays=(1e-2, 1e-3, 1e-4, 1e-5),
        batch_sizes=(8, 16), trials=5, settings=dict(TABULAR_PROTOCOL),
        description="CRISP (arXiv 2309.13886) Tables 2, 8-11: five example-based metrics on the MULAN sets under "
                    "random 80/10/10 partitions, 5 trials, SMILE's MLP, the papers' lr x weight decay x batch grid"),
}


def get_reproduction(name: str) -> Reproduction:
    if name not in REPRODUCTIONS:
        raise ValueError(f"unknown reproduction {name!r}; choose one of {', '.join(REPRODUCTIONS)}")
    return REPRODUCTIONS[name]
