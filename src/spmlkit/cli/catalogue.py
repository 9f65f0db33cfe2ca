"""``spmlkit methods``, ``spmlkit losses`` and ``spmlkit datasets``: what is there to train with."""

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
    p = sub.add_parser("datasets", help="list the named datasets: kind, size, and whether they are on this machine")
    p.set_defaults(func=run_datasets)


def run_methods(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..methods import METHODS

    table = Table(title="spmlkit methods")
    for col in ("method", "loss", "labels", "label-state algorithm", "description", "paper", "on features"):
        table.add_column(col)
    for m in METHODS.values():
        meaning = m.on_features
        on_features = ("yes" if not meaning.note else f"yes, without {meaning.note}") if meaning.trains \
            else f"no: {meaning.note}"
        parts = m.parts()  # (family, name), its main loss first
        loss = parts[0][1] if parts else "(its own)"
        labeling = next((name for family, name in parts if family == "labeling"), "")
        table.add_row(m.name, loss, m.labels, labeling, m.description, m.paper, on_features)
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


def run_datasets(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..data.download import DATA_ENV, data_home
    from ..data.registry import DATASETS

    home = data_home()
    table = Table(title=f"spmlkit datasets  (data folder: {home}; set {DATA_ENV} to move it)")
    for col in ("name", "kind", "train rows", "test rows", "labels", "source", "status"):
        table.add_column(col, justify="right" if col in ("train rows", "test rows", "labels") else "left")
    number = lambda n: "" if n is None else f"{n}"  # noqa: E731
    for name, entry in DATASETS.items():
        if entry.listed:
            table.add_row(name, entry.kind, number(entry.train_rows), number(entry.test_rows), number(entry.labels),
                          entry.source, entry.status())
    screen = console()
    screen.print(table)
    screen.print("Also accepted as a dataset: a folder written by `spmlkit extract` (features) or by `spmlkit "
                 "prepare` (images); every MULAN set also answers to mulan/<set>.")
    return 0
