"""The tables of a reproduction (:mod:`~spmlkit.experiments.reproduce`): each published table per method
and reading, the class priors of the methods that estimate them, the failed runs, and a heading that
says what was run and where each part of each reading comes from (docs/reproductions.md, "Honest
tables"); written as ``<name>.md``, ``<name>.csv`` and ``<name>.json``, and printed by the command line."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import atomic_write_json, atomic_write_text
from .reproduce import (FAIR, METRICS, PUBLISHED, ReproducedCell, ReproductionPlan, images_only_note,
                        published_value, row_label)
from .selection import RULES

__all__ = ["table_rows", "table_markdown", "prior_rows", "heading", "failure_lines", "write_reproduction"]


def _fmt(mean: float | None, std: float | None) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def _z(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:+.1f}"


def _ours(cell: ReproducedCell, trials: int) -> str:
    """A cell of ours: mean ± std, with the trials where fewer than asked; "failed" or "not run"."""
    if cell.ours is None:
        return f"failed ({cell.failed} of {cell.runs} runs)" if cell.failed else "not run"
    text = _fmt(cell.ours, cell.ours_std)
    return text if cell.trials == trials else f"{text} ({cell.trials} of {trials} trials)"


def table_rows(plan: ReproductionPlan, cells: list[ReproducedCell], table: str
               ) -> tuple[list[str], list[list[str]]]:
    """One published table as a header and rows: per method and reading, per data set ours, the
    published number and (where the protocol is the paper's) z. A method left out before any run keeps
    its row ("not run"); so does one whose runs all failed ("failed")."""
    mine = [c for c in cells if c.table == table]
    datasets = [d for d in plan.rep.datasets if d in plan.datasets]
    per = ("ours", "published", "z") if plan.comparable else ("ours", "published")
    header = ["method", "reading"] + [f"{d}: {what}" for d in datasets for what in per]
    rows = []
    for method in _row_order(plan):
        for reading in (FAIR, PUBLISHED):
            row = {c.dataset: c for c in mine if c.method == method and c.reading == reading}
            if not row and not (reading == FAIR and method in plan.left_out):
                continue
            values: list[str] = []
            for d in datasets:
                c = row.get(d)
                if c is None:
                    theirs = published_value(method, d, table)
                    values += ["not run" if method in plan.left_out else "–", _fmt(*theirs)] + \
                        (["–"] if plan.comparable else [])
                else:
                    values += [_ours(c, plan.protocol.trials), _fmt(c.published, c.published_std)] + \
                        ([_z(c.z)] if plan.comparable else [])
            rows.append([row_label(plan.rep, method), reading, *values])
    return header, rows


def _row_order(plan: ReproductionPlan) -> list[str]:
    """The rows' methods: the paper's order (a method left out keeps its place), then any other method."""
    shown = [*plan.methods, *plan.left_out]
    paper = [m for m in dict.fromkeys(plan.rep.method_labels.values()) if m in shown]
    return paper + [m for m in shown if m not in paper]


def table_markdown(plan: ReproductionPlan, cells: list[ReproducedCell], table: str) -> str:
    """One published table as markdown (:func:`table_rows`)."""
    header, rows = table_rows(plan, cells, table)
    if not rows:
        return ""
    name, larger_better, _ = METRICS[plan.rep.tables[table]]
    z = "; z = (ours − published) / published std" if plan.comparable else ""
    lines = [f"**{table}: {name} ({'larger' if larger_better else 'smaller'} is better), mean ± std over "
             f"{plan.protocol.trials} trial{'s' if plan.protocol.trials != 1 else ''}{z}**", "",
             "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def prior_rows(plan: ReproductionPlan, cells: list[ReproducedCell]) -> tuple[list[str], list[list[str]]]:
    """The class priors of the methods that estimate them (CRISP), at the selected epoch, per data set:
    the mean over classes of |estimated − true prior|, the mean estimate against the set's mean true
    prior, and the selected epoch against the warm-up (an epoch within it reports the AN warm-up's model)."""
    first = list(plan.rep.tables)[0]
    mine = [c for c in cells if c.table == first and c.prior_error is not None]
    datasets = [d for d in plan.rep.datasets if any(c.dataset == d for c in mine)]
    header = ["method", "reading"] + [f"{d}: {what}" for d in datasets
                                      for what in ("prior error", "mean prior (true)", "epoch (warm-up)")]
    rows = []
    for method in dict.fromkeys(c.method for c in mine):
        for reading in (FAIR, PUBLISHED):
            row = {c.dataset: c for c in mine if c.method == method and c.reading == reading}
            if not row:
                continue
            values: list[str] = []
            for d in datasets:
                c = row.get(d)
                if c is None:
                    values += ["–"] * 3
                    continue
                warm = c.config.get("hp.warmup_epochs")
                values += [f"{c.prior_error:.3f}", f"{c.prior_mean:.2f} ({_fmt(c.true_prior, None)[:4]})",
                           f"{c.selected_epoch:.1f}" + (f" ({warm})" if warm is not None else "")]
            rows.append([next(iter(row.values())).label, reading, *values])
    return header, rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2),
                      *("| " + " | ".join(row) + " |" for row in rows)])


def heading(plan: ReproductionPlan) -> str:
    """What was run, in a few sentences: the protocol actually run (and whether it is the paper's), the
    readings and where each of their parts comes from, what was left out."""
    rep = plan.rep
    differs = plan.protocol.differences(rep)
    lines = [f"Protocol run: {plan.protocol.words()}"
             + (f" -- the paper's." if not differs else
                f" -- NOT the paper's ({'; '.join(differs)}): the values cannot be compared with the published ones, "
                "and no z is printed.")]
    files = {n: a for n, a in plan.datasets.items() if a != rep.datasets[n]}
    ours = [n for n in plan.datasets if n not in files]
    rows = ([f"{', '.join(ours)}: spmlkit's random 80/10/10 partitions of the rows run (seed = trial), one observed "
             "positive drawn per training row"] if ours else [])
    rows += [f"{n}: the partition and the observed positives of {a}, the seed varying only the initial weights and "
             "the batch order" for n, a in files.items()]
    lines.append("Rows: " + "; ".join(rows) + ".")
    lines.append(f"Reading \"{FAIR}\": the papers' grid (lr x weight decay x batch size"
                 + "".join(f", {row_label(rep, m)}'s {', '.join(hp)}" for m, hp in rep.grid_hparams.items()
                           if m in plan.methods)
                 + f"), the configuration and its epoch chosen by {plan.rule} ({RULES[plan.rule]}); each method's "
                 "hyperparameters: those its paper published for the set (SMILE's README), else its recipe's defaults.")
    for run, _ in plan.published[:1] if plan.published else []:
        parts = "; ".join(f"{part}: {where}" for part, where in run.parts)
        lines.append(f"Reading \"{PUBLISHED}\" ({row_label(rep, run.method)}): {run.source}. {parts}.")
    others = [row_label(rep, m) for m in plan.methods if m not in {r.method for r, _ in plan.published}]
    if plan.published and others:
        lines.append(f"No code or README fixes the setting of {', '.join(others)}: their rows have the fair grid only.")
    lines += [f"Reference, not a method of the paper: {row_label(rep, m)}, {why}; no published number."
              for m, why in rep.references.items() if m in plan.methods]
    lines.append("Values in the papers' metric convention (SMILE's code: coverage divided by the number of labels, "
                 "Hamming loss at p > 0.5; docs/protocol.md, \"Metric conventions\").")
    lines += [f"Not run: {why}." for why in plan.left_out.values()] + [f"{note}." for note in plan.notes]
    if note := images_only_note(rep):
        lines.append(note)
    return "\n".join(f"- {line}" for line in lines)


def failure_lines(cells: list[ReproducedCell]) -> list[str]:
    """One line per (reading, method, data set) with failed runs: how many, and the first error."""
    first = {}
    for c in cells:
        if c.failed:
            first.setdefault((c.reading, c.method, c.dataset), c)
    return [f"{c.label} ({c.reading}) on {c.dataset}: {c.failed} of {c.runs} runs failed"
            + (", so the row has no value" if c.ours is None else ", the rest are shown") + f": {c.error}"
            for c in first.values()]


def write_reproduction(out_dir: str | Path, plan: ReproductionPlan, cells: list[ReproducedCell]) -> dict[str, Path]:
    """``<rep>.md`` (every table), ``<rep>.csv`` (one row per cell) and ``<rep>.json``, atomically."""
    rep = plan.rep
    out = Path(out_dir)
    paths = {"markdown": out / f"{rep.name}.md", "csv": out / f"{rep.name}.csv", "json": out / f"{rep.name}.json"}
    intro = f"# {rep.name}\n\n{rep.description}.\n\n{heading(plan)}\n"
    body = [t for t in (table_markdown(plan, cells, table) for table in rep.tables) if t]
    header, rows = prior_rows(plan, cells)
    if rows:
        body.append("**Class priors at the selected epoch (mean over trials): the mean over classes of |estimated − "
                    "true prior|, the mean estimated prior (the set's mean true prior), the selected epoch (the "
                    "warm-up: an epoch within it reports the AN warm-up's model)**\n\n" + _markdown_table(header, rows))
    failures = failure_lines(cells)
    if failures:
        body.append("**Failed runs**\n\n" + "\n".join(f"- {line}" for line in failures))
    atomic_write_text(paths["markdown"], intro + "\n" + "\n\n".join(body) + "\n")
    frame = pd.DataFrame([{**{k: v for k, v in asdict(c).items() if k != "config"}, **c.config, "z": c.z}
                          for c in cells])
    atomic_write_text(paths["csv"], frame.to_csv(index=False))
    sweeps = [{"reading": reading, "dataset": s.datasets[0], "methods": s.methods, "hparams": s.hparams,
               "trials": len(s.seeds), "settings": s.settings}
              for reading, specs in ((FAIR, plan.fair), (PUBLISHED, [s for _, s in plan.published])) for s in specs]
    atomic_write_json(paths["json"], {
        "reproduction": rep.name, "protocol": asdict(plan.protocol), "comparable": plan.comparable, "rule": plan.rule,
        "left_out": plan.left_out, "notes": plan.notes, "sweeps": sweeps,
        "cells": [{**asdict(c), "z": None if np.isnan(c.z) else c.z} for c in cells]})
    return paths
