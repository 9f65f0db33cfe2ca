"""``spmlkit methods`` and ``spmlkit losses``: what is there to train with."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import console

__all__ = ["add_parsers"]


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("methods", help="list the methods (recipes) and their papers")
    p.set_defaults(func=run_methods)
    p = sub.add_parser("losses", help="list the losses with their hyperparameters")
    p.set_defaults(func=run_losses)


def run_methods(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..methods import METHODS

    table = Table(title="spmlkit methods")
    for col in ("method", "loss", "labels", "label-state algorithm", "description", "paper"):
        table.add_column(col)
    for m in METHODS.values():
        table.add_row(m.name, m.loss, m.labels, m.labeling or "", m.description, m.paper)
    console().print(table)
    return 0


def run_losses(args: argparse.Namespace) -> int:
    from rich.table import Table

    from .. import losses

    table = Table(title="spmlkit losses  (losses.create(name, **hparams))")
    table.add_column("name")
    table.add_column("hyperparameters (defaults)")
    table.add_column("description")
    for name, desc in losses.available().items():
        hp = ", ".join(f"{k}={v!r}" for k, v in losses.hyperparameters(name).items())
        table.add_row(name, hp, desc)
    console().print(table)
    return 0
