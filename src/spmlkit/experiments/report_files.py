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
                 formats: Sequence[str] = ("md", "tex", "csv"), rule: str = "val_map"
                 ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Write the tables of the finished runs ``ok`` into ``out``, each run read at the epoch and each row at
    the configuration selection rule ``rule`` chooses (:mod:`~spmlkit.experiments.selection`); returns
    (files, [(title, markdown)]). Runs that estimated class priors (CRISP) add ``class_priors.csv``."""
    from .selection import RULES, read_at

    if rule != "val_map" and "selected_epoch" not in ok.columns:
        ok = read_at(ok, rule)
    agg = report.select_and_aggregate(ok, metric=metric, rule=rule)
    written: list[Path] = []
    shown: list[tuple[str, str]] = []
    several = agg["observation"].nunique() > 1
    for observation, part in agg.groupby("observation", sort=True):
        table = report.paper_table(part, reference=reference)
        stem = out / (file_stem("table", observation) if several else "table")
        runs = ok[ok["observation"] == observation]
        chosen_by = ("validation mAP" if rule == "val_map" else f"{rule} ({RULES[rule]})")
        title = (f"{metric} (%){_test_labels(runs, metric)}, mean ± std over seeds, configuration and epoch selected on "
                 f"{chosen_by} ({_val_labels(runs)}); {observation}")
        markdown = report.to_markdown(table) + "".join(f"\n{note}\n" for note in table.attrs["notes"])
        writers = {"md": lambda t: f"**{title}**\n\n" + markdown,
                   "tex": lambda t: report.to_latex(t, caption=title),
                   "csv": report.to_csv}
        for fmt in formats:
            written.append(atomic_write_text(stem.with_suffix(f".{fmt}"), writers[fmt](table)))
        shown.append((title, markdown))
    selected = agg.drop(columns=["run_ids"], errors="ignore").to_csv(index=False)
    written.append(atomic_write_text(out / "selected_configs.csv", selected))
    priors = prior_table(ok, agg, rule)
    if not priors.empty:
        written.append(atomic_write_text(out / "class_priors.csv", priors.to_csv(index=False)))
        shown.append(("class priors at the selected epoch (methods that estimate them): mean over classes of "
                      "|estimated - true prior|, mean estimate, mean over seeds", _markdown(priors)))
    # F1 at thresholds chosen on validation exists at the best validation-mAP epoch only (the run's final evaluation)
    thresholds = report.threshold_table(ok) if rule == "val_map" else pd.DataFrame()
    if not thresholds.empty:
        written.append(atomic_write_text(out / "thresholds.csv", thresholds.to_csv(index=False)))
        md = "| " + " | ".join(thresholds.columns) + " |\n|" + "---|" * len(thresholds.columns) + "\n"
        md += "".join("| " + " | ".join(map(str, row)) + " |\n" for row in thresholds.itertuples(index=False))
        written.append(atomic_write_text(
            out / "thresholds.md", "**F1 (%) at fixed thresholds and at thresholds selected on validation**\n\n" + md))
    return written, shown


def prior_table(ok: pd.DataFrame, agg: pd.DataFrame, rule: str) -> pd.DataFrame:
    """For each selected row of ``agg`` whose runs estimated class priors (their history has
    ``class_prior_error``, CRISP's): at each run's selected epoch, the priors' error (mean over classes of
    |estimated − the training split's true prior|) and the mean estimated prior, mean over the seeds."""
    from .selection import read_at

    read = ok if "selected_epoch" in ok.columns else read_at(ok, rule)
    by_id = read.set_index("run_id")
    rows = []
    for rec in agg.to_dict("records"):
        errors, means = [], []
        for run_id in rec["run_ids"]:
            run = by_id.loc[run_id]
            at = next((e for e in run["history"] or [] if e.get("epoch") == run["selected_epoch"]), {})
            if "class_prior_error" in at:
                errors.append(float(at["class_prior_error"]))
                means.append(float(at.get("labeling_prior_mean", float("nan"))))
        if errors:
            rows.append({"dataset": rec["dataset"], "observation": rec.get("observation"), "method": rec["method"],
                         "prior_error": sum(errors) / len(errors), "prior_mean": sum(means) / len(means),
                         "seeds": len(errors)})
    return pd.DataFrame(rows)


def _markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "".join("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |\n"
                          for row in frame.itertuples(index=False))


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
