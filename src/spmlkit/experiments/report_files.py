"""The files of ``spmlkit report``: one table per observation setting, the selected configurations,
and F1 at fixed and validation-selected thresholds. Every file is written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from ..file_names import file_stem
from ..io import atomic_write_text
from . import report

__all__ = ["write_tables"]


def write_tables(ok: pd.DataFrame, out: Path, *, metric: str = "test_map", reference: str | None = None,
                 formats: Sequence[str] = ("md", "tex", "csv")) -> tuple[list[Path], list[tuple[str, str]]]:
    """Write the tables of the finished runs ``ok`` into ``out``; returns (files, [(title, markdown)])."""
    agg = report.select_and_aggregate(ok, metric=metric)
    written: list[Path] = []
    shown: list[tuple[str, str]] = []
    several = agg["observation"].nunique() > 1
    for observation, part in agg.groupby("observation", sort=True):
        table = report.paper_table(part, reference=reference)
        stem = out / (file_stem("table", observation) if several else "table")
        runs = ok[ok["observation"] == observation]
        title = (f"{metric} (%){_test_labels(runs, metric)}, mean ± std over seeds, configuration selected on "
                 f"validation mAP ({_val_labels(runs)}); {observation}")
        markdown = report.to_markdown(table) + "".join(f"\n{note}\n" for note in table.attrs["notes"])
        writers = {"md": lambda t: f"**{title}**\n\n" + markdown,
                   "tex": lambda t: report.to_latex(t, caption=title),
                   "csv": report.to_csv}
        for fmt in formats:
            written.append(atomic_write_text(stem.with_suffix(f".{fmt}"), writers[fmt](table)))
        shown.append((title, markdown))
    selected = agg.drop(columns=["run_ids"], errors="ignore").to_csv(index=False)
    written.append(atomic_write_text(out / "selected_configs.csv", selected))
    thresholds = report.threshold_table(ok)
    if not thresholds.empty:
        written.append(atomic_write_text(out / "thresholds.csv", thresholds.to_csv(index=False)))
        md = "| " + " | ".join(thresholds.columns) + " |\n|" + "---|" * len(thresholds.columns) + "\n"
        md += "".join("| " + " | ".join(map(str, row)) + " |\n" for row in thresholds.itertuples(index=False))
        written.append(atomic_write_text(
            out / "thresholds.md", "**F1 (%) at fixed thresholds and at thresholds selected on validation**\n\n" + md))
    return written, shown


def _val_labels(runs: pd.DataFrame) -> str:
    """Which labels the runs' validation mAP is on (their records say; older records, their config)."""
    if "val_map_labels" in runs.columns and runs["val_map_labels"].notna().any():
        held = set(runs["val_map_labels"].dropna())
    else:
        held = {"full" if (c or {}).get("val_variant", "clean") == "clean" else "observed" for c in runs["config"]}
    return " and ".join(f"{labels} labels" for labels in sorted(held))


def _test_labels(runs: pd.DataFrame, metric: str) -> str:
    """Where the tabulated test numbers come from: the test lists' full labels, or none at all."""
    if not metric.startswith("test"):
        return ""
    if not runs[metric].notna().any():
        return " (no labelled test list: no number on full labels)"
    return " on the test lists' full labels"
