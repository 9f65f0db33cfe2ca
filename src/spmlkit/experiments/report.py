"""Paper-style result tables: configuration selection on validation, mean ± std over seeds.

The protocol of the SPML papers (Cole et al. CVPR 2021; Zhou et al. ECCV 2022 "EM"; Chen
et al. IJCAI 2024 "GR"): for every (dataset, observation, method) the hyperparameter
configuration (learning rate, batch size, method hyperparameters) is chosen on the *clean
validation* mAP, averaged over seeds, and the *test* mAP of that configuration is reported
as mean ± std over the seeds. Choosing on the mean rather than per seed keeps one lucky
seed from picking the configuration, and never looking at test numbers during selection
keeps the reported number honest.

Tables follow the papers' layout: methods as rows, datasets as columns, cells
"mean ± std" in percent, the best method per column in bold, optionally the published
number beside ours with the difference, and the share of the AN -> full-label gap a method
closes (as in :mod:`spmlkit.benchmark`). Writers produce Markdown, LaTeX (a plain
``tabular``, no extra LaTeX packages) and CSV.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .published import DATASET_LABELS, METHOD_LABELS, display_name, published_rows

__all__ = ["paper_table", "select_and_aggregate", "to_csv", "to_latex", "to_markdown", "gap_denominator",
           "format_gap", "GAP_FORMULA", "GAP_NOISE_SE"]

_MISSING = "–"  # en dash for cells without a number, as in the papers


# --------------------------------------------------------------------------- selection


def _canon(value: Any) -> Any:
    """A JSON-able, order-independent form of a config value (NaN and None become None)."""
    if isinstance(value, dict):
        return {str(k): _canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if hasattr(value, "item") and np.ndim(value) == 0:  # numpy scalar
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _number(value: Any) -> float:
    """A metric of a record as a float: a number that does not exist (a run without a labelled test
    list; the store keeps NaN as null) is NaN, shown as a missing cell."""
    return math.nan if value is None else float(value)


def _order_key(column: str, value: Any) -> tuple:
    """Canonical sort key: datasets and methods in the papers' order, others alphabetical."""
    table = {"dataset": DATASET_LABELS, "method": METHOD_LABELS}.get(column)
    if table is not None and value in table:
        return (0, list(table).index(value), "")
    return (1, 0, str(value))


def _require_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: column(s) {missing} not found; available columns: {', '.join(map(str, df.columns))}")


def select_and_aggregate(
    df: pd.DataFrame,
    *,
    by: Sequence[str] = ("dataset", "observation", "method"),
    config_keys: Sequence[str] = ("lr", "batch_size", "weight_decay", "hparams", "hparams_from", "plugin_code"),
    metric: str = "test_map",
    select_on: str = "val_map",
    scale: float = 100.0,
    status: str | None = "ok",
    rule: str = "val_map",
) -> pd.DataFrame:
    """Choose one configuration per group on mean validation score; aggregate over seeds.

    ``rule`` names the selection rule (:mod:`~spmlkit.experiments.selection`, docs/protocol.md,
    "Selection rules"): ``val_map`` is what this docstring describes; under ``smile_votes`` each
    run is read at the epoch SMILE's vote selects (:func:`~spmlkit.experiments.selection.read_at`),
    and the configuration is the one the same vote chooses across the grid
    (:func:`~spmlkit.experiments.selection.choose_by_votes`); ``select_mean`` is then the mean
    validation mAP at the voted epochs, for the reader, not what chose. A frame that
    :func:`~spmlkit.experiments.selection.read_at` has read already (it has ``selected_epoch``) is
    used as it is.

    Within each group of ``by``, runs are split into configurations (distinct values of the
    ``config_keys`` present in ``df``; a dict such as ``hparams`` is compared by content). The
    chosen configuration maximises the mean of ``select_on`` over its seeds; a configuration
    with a NaN validation score in any seed is only chosen if every configuration has one.
    Ties go to the configuration with more seeds, then to the first in sorted order of its
    JSON form, so the choice never depends on the order of the rows.

    For the chosen configuration, with ``x_s = scale * metric`` of seed s over n seeds::

        mean = (1/n) sum_s x_s        std = sqrt((1/n) sum_s (x_s - mean)^2)

    i.e. the population std (ddof = 0, as numpy's default and the benchmark module); a
    single seed has std 0. The papers do not say which they use; with 3 seeds the sample std
    (ddof = 1) would be sqrt(3/2) = 1.22 times larger.

    Args:
        df: one row per run (``ResultsStore.to_dataframe()``).
        by: grouping columns; one output row per group.
        config_keys: columns that define a configuration (absent ones are ignored). ``hparams_from``
            tells a run that took its data set's preset from one of equal ``hparams`` that did not
            (docs/leaderboard.md, "One source of hyperparameters"); ``plugin_code`` (a plug-in
            method's code, docs/plugins.md) keeps runs of two versions of a user's file apart: they
            are two configurations, never averaged together.
        metric: reported column (``test_map`` or e.g. ``test.CF1@0.5``), a fraction.
        select_on: selection column, a fraction; larger is better.
        scale: factor applied to ``metric`` and ``select_on`` (100: percent).
        status: keep only runs with this status (None: keep all rows).

    Returns:
        one row per group, in the papers' order of datasets and methods, with the ``by``
        columns, the chosen config's ``config_keys`` values, ``config`` (its JSON form),
        ``n_configs``, ``n_seeds``, ``seeds``, ``mean``, ``std``, ``select_mean``,
        ``select_std``, ``metric`` and ``run_ids`` (of the chosen runs).
    """
    from .selection import choose_by_votes, check_rule, read_at

    by = list(by)
    if status is not None and "status" in df.columns:
        df = df[df["status"] == status]
    if check_rule(rule) != "val_map" and "selected_epoch" not in df.columns:  # a frame read_at read is used as it is
        df = read_at(df, rule)
    _require_columns(df, by + [metric, select_on], "select_and_aggregate")
    keys = [k for k in config_keys if k in df.columns]
    groups: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for rec in df.to_dict("records"):
        gkey = tuple(rec[c] for c in by)
        ckey = json.dumps({k: _canon(rec[k]) for k in keys}, sort_keys=True)
        groups.setdefault(gkey, {}).setdefault(ckey, []).append(rec)

    out = []
    for gkey, configs in groups.items():

        def score(item: tuple[str, list[dict[str, Any]]]) -> tuple:
            ckey, runs = item
            vals = np.array([_number(r[select_on]) for r in runs])
            mean = -math.inf if np.isnan(vals).any() else float(vals.mean())
            return (-mean, -len(runs), ckey)

        if rule == "val_map":
            ckey, runs = min(configs.items(), key=score)
        else:
            ckey = choose_by_votes(configs)
            runs = configs[ckey]
        x = np.array([_number(r[metric]) for r in runs]) * scale
        v = np.array([_number(r[select_on]) for r in runs]) * scale
        row: dict[str, Any] = dict(zip(by, gkey))
        for k in keys:
            row[k] = runs[0][k]
        row.update(
            config=ckey,
            n_configs=len(configs),
            n_seeds=len(runs),
            seeds=sorted(r["seed"] for r in runs) if "seed" in df.columns else [],
            mean=float(x.mean()),
            std=float(x.std(ddof=0)),
            select_mean=float(v.mean()),
            select_std=float(v.std(ddof=0)),
            metric=metric,
            run_ids=[r["run_id"] for r in runs] if "run_id" in df.columns else [],
        )
        out.append(row)
    out.sort(key=lambda r: tuple(_order_key(c, r[c]) for c in by))
    columns = by + keys + ["config", "n_configs", "n_seeds", "seeds", "mean", "std",
                           "select_mean", "select_std", "metric", "run_ids"]
    return pd.DataFrame(out, columns=columns)


# --------------------------------------------------------------------------- table


#: the gap-closed formula, as tables print it under themselves
GAP_FORMULA = "gap closed = (method − AN) / (full BCE − AN), in percent"
#: BCE − AN must exceed this many standard errors of the difference before a share of it is printed
GAP_NOISE_SE = 2.0


def gap_denominator(bce: tuple[float, float, int], an: tuple[float, float, int]) -> tuple[float | None, str]:
    """BCE − AN in points when a share of it means something, else None, and the sentence that says why not.

    ``bce`` and ``an`` are (mean, population std, seeds) of the two references' test mAP in
    points. "Gap closed" divides by BCE − AN; where that difference is no larger than the noise
    of the two means, the quotient is noise: on scene the two differ by 0.74 points with a
    standard error of 0.55, and a method 10 points below AN read −1440 %. So the share is given
    only where BCE − AN exceeds :data:`GAP_NOISE_SE` standard errors of the difference,
    ``sqrt(s_bce² / n_bce + s_an² / n_an)`` with ``s`` the sample standard deviation over seeds
    (docs/leaderboard.md, "Gap closed").
    """
    (b, b_std, b_n), (a, a_std, a_n) = bce, an
    diff = b - a
    if not (math.isfinite(b) and math.isfinite(a)):
        return None, "BCE or AN has no test mAP"
    if min(b_n, a_n) < 2:
        return None, (f"BCE − AN = {diff:+.2f} points from a single seed, with no spread over seeds to tell it from "
                      "noise (the default seeds 0,1,2 give one)")
    sample = [std * math.sqrt(n / (n - 1)) for std, n in ((b_std, b_n), (a_std, a_n))]
    noise = GAP_NOISE_SE * math.sqrt(sample[0] ** 2 / b_n + sample[1] ** 2 / a_n)
    if diff < -noise:
        return None, f"BCE − AN = {diff:+.2f} points: full labels score below AN here, so there is no gap to close"
    if diff <= noise:
        return None, (f"BCE − AN = {diff:+.2f} points is within noise ({GAP_NOISE_SE:g} standard errors of the "
                      f"difference over the seeds: {noise:.2f} points), so a share of it would be noise")
    return diff, ""


def _fmt(mean: float, std: float | None, decimals: int) -> str:
    if mean is None or not math.isfinite(mean):
        return _MISSING
    if std is None or not math.isfinite(std):
        return f"{mean:.{decimals}f}"
    return f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def paper_table(
    agg: pd.DataFrame,
    *,
    rows: str = "method",
    cols: str = "dataset",
    reference: str | None = None,
    decimals: int = 2,
    gap_closed: bool = True,
    exclude_from_best: Sequence[str] | None = None,
    pretty: bool = True,
) -> pd.DataFrame:
    """A papers'-style table of :func:`select_and_aggregate` output.

    Cells are ``"mean ± std"`` with ``decimals`` decimals (``–`` where a combination is
    missing). The best mean of every column (after rounding, so ties are all marked) is
    recorded in ``table.attrs["bold"]`` as (row label, column label) pairs; the writers
    :func:`to_markdown` and :func:`to_latex` print those in bold. Rows in
    ``exclude_from_best`` (default: the references, the methods that see more than single
    positives, :attr:`~spmlkit.methods.Method.sees_more_labels`) are never marked, as in the papers.

    Args:
        agg: output of :func:`select_and_aggregate`; each (rows, cols) pair must occur once
            (filter other grouping columns such as ``observation`` first).
        rows, cols: the agg columns that become the row and column labels.
        reference: a paper (``"EM"``, ``"OPML"``, ``"GR"``, ``"PU-MLC"``) or table name; adds
            after each column the published number ``"<col> (<reference>)"`` and the
            difference ``"<col> Δ"`` = ours − published, looked up with the agg row's
            ``method``, ``dataset`` and (if present) ``observation``.
        gap_closed: when rows are methods, add after every column that has both a ``bce``
            (full labels) and an ``an`` cell the column ``"<col> gap closed"`` =
            (method − AN) / (BCE − AN) in percent: the share of the accuracy lost to missing
            labels that a method recovers; not where BCE − AN is within noise
            (:func:`gap_denominator`), which ``attrs["notes"]`` then says.
        exclude_from_best: row keys that are never marked best.
        pretty: show the papers' labels (``EM+APL``, ``VOC``) instead of spmlkit names.

    Returns:
        a DataFrame of strings; ``attrs["bold"]`` lists the best cells, ``attrs["means"]``
        maps (row, column) labels to the unrounded means, ``attrs["notes"]`` holds the
        sentences a reader needs under the table (the gap formula, a gap left out and why,
        cells from one seed).
    """
    if exclude_from_best is None:
        from ..methods import METHODS

        exclude_from_best = tuple(m for m in METHODS if METHODS[m].sees_more_labels)
    _check_table_input(agg, rows, cols, decimals)
    row_keys = _ordered_keys(agg, rows)
    col_keys = _ordered_keys(agg, cols)
    row_labels = {rk: _row_label(rows, rk, pretty) for rk in row_keys}
    cell = {(r[rows], r[cols]): r for r in agg.to_dict("records")}
    with_gap = gap_closed and rows == "method"

    data: dict[str, list[str]] = {}
    bold: list[tuple[str, str]] = []
    means: dict[tuple[str, str], float] = {}
    notes: list[str] = []
    gap_shown = False
    for ck in col_keys:
        cl = _col_label(cols, ck, pretty)
        present = {rk: cell[(rk, ck)] for rk in row_keys if (rk, ck) in cell}
        data[cl] = _mean_std_column(present, row_keys, decimals)
        means.update(((row_labels[rk], cl), float(r["mean"])) for rk, r in present.items())
        bold += [(row_labels[rk], cl) for rk in _best_rows(present, row_keys, exclude_from_best, decimals)]
        if reference is not None:
            data[f"{cl} ({reference})"], data[f"{cl} Δ"] = _reference_columns(present, row_keys, reference, decimals)
        if with_gap and "bce" in present and "an" in present:
            denominator, why = gap_denominator(*(_summary(present[k]) for k in ("bce", "an")))
            if denominator is None:
                notes.append(f"{cl}: no gap-closed column: {why}.")
            else:
                data[f"{cl} gap closed"] = [_gap(present, rk, denominator) for rk in row_keys]
                gap_shown = True
    if gap_shown:
        notes.insert(0, GAP_FORMULA + ".")
    if any(int(r.get("n_seeds", 2)) < 2 for r in cell.values()):
        notes.append("Cells without ± come from one seed, which gives no standard deviation.")
    notes += [f"Warning: {dataset} holds {warning}." for dataset, warning in _feature_warnings(agg)]
    table = pd.DataFrame(data, index=pd.Index([row_labels[rk] for rk in row_keys], name=rows))
    table.attrs["bold"] = bold
    table.attrs["means"] = means
    table.attrs["notes"] = notes
    return table


def _feature_warnings(agg: pd.DataFrame) -> list[tuple[str, str]]:
    """(data set, warning) for each data set of a table that is a feature folder of random weights
    (:func:`~spmlkit.data.feature_dir.random_weights_warning`): said under every table of it."""
    from ..data.feature_dir import feature_dir_warning

    datasets = _ordered_keys(agg, "dataset") if "dataset" in agg.columns else []
    return [(str(ds), warning) for ds in datasets for warning in [feature_dir_warning(str(ds))] if warning]


def _summary(row: dict[str, Any]) -> tuple[float, float, int]:
    """(mean, population std, seeds) of an agg row, for :func:`gap_denominator`."""
    return float(row["mean"]), float(row["std"]), int(row.get("n_seeds", 1))


def _check_table_input(agg: pd.DataFrame, rows: str, cols: str, decimals: int) -> None:
    """Refuse an ``agg`` that cannot make one table: a missing column, negative decimals,
    or a (rows, cols) pair on several agg rows, which happens when a grouping column that
    is neither rows nor cols (typically ``observation``) still holds several values."""
    _require_columns(agg, [rows, cols, "mean", "std"], "paper_table")
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    dup = agg.duplicated(subset=[rows, cols], keep=False)
    if dup.any():
        other = [c for c in ("dataset", "observation", "method") if c in agg.columns and c not in (rows, cols)]
        first = agg[dup].iloc[0]
        raise ValueError(
            f"paper_table: several agg rows for {rows}={first[rows]!r}, {cols}={first[cols]!r}; "
            f"filter the other grouping column(s) {other} to one value first, e.g. agg[agg.observation == ...]"
        )


def _ordered_keys(agg: pd.DataFrame, column: str) -> list[Any]:
    """The distinct values of ``column`` in the papers' order (see :func:`_order_key`)."""
    return sorted(agg[column].unique(), key=lambda v: _order_key(column, v))


def _row_label(rows: str, key: Any, pretty: bool) -> str:
    """A row's label: the papers' method name when ``pretty`` and rows are methods."""
    return display_name(key) if pretty and rows == "method" else str(key)


def _col_label(cols: str, key: Any, pretty: bool) -> str:
    """A column's label: the papers' dataset name when ``pretty`` and columns are datasets."""
    return DATASET_LABELS.get(key, str(key)) if pretty and cols == "dataset" else str(key)


def _mean_std_column(present: dict[Any, dict[str, Any]], row_keys: Sequence[Any], decimals: int) -> list[str]:
    """One table column: ``"mean ± std"`` for the rows present in it, ``–`` for the others; the
    mean alone where one seed gave it (a spread of one value is no standard deviation)."""
    return [_fmt(present[rk]["mean"], present[rk]["std"] if int(present[rk].get("n_seeds", 2)) > 1 else None,
                 decimals) if rk in present else _MISSING
            for rk in row_keys]


def _best_rows(
    present: dict[Any, dict[str, Any]], row_keys: Sequence[Any], exclude: Sequence[Any], decimals: int
) -> list[Any]:
    """The rows of one column with the best mean, in table order.

    Means are compared as printed (rounded to ``decimals``), so rows that read the same are
    all best; rows in ``exclude`` and non-finite means never are.
    """
    candidates = {rk: round(float(r["mean"]), decimals) for rk, r in present.items()
                  if rk not in exclude and math.isfinite(float(r["mean"]))}
    if not candidates:
        return []
    best = max(candidates.values())
    return [rk for rk in row_keys if candidates.get(rk) == best]


def _reference_columns(
    present: dict[Any, dict[str, Any]], row_keys: Sequence[Any], reference: str, decimals: int
) -> tuple[list[str], list[str]]:
    """For one column: the published number of each row and ours − published (``–`` where
    either is missing)."""
    ref_col, diff_col = [], []
    for rk in row_keys:
        r = present.get(rk)
        hit = _reference(r, reference) if r is not None else None
        ref_col.append(_MISSING if hit is None else _fmt(hit.mean, hit.std, decimals))
        diff_col.append(_MISSING if hit is None else f"{float(r['mean']) - hit.mean:+.{decimals}f}")
    return ref_col, diff_col


def _reference(row: dict[str, Any], reference: str) -> Any:
    """The first published row matching an agg row's method/dataset/observation, or None."""
    if "method" not in row or "dataset" not in row:
        return None
    hits = published_rows(row["method"], row["dataset"], source=reference, observation=row.get("observation"),
                          metric="map")
    return hits[0] if hits else None


def _gap(present: dict[Any, dict[str, Any]], rk: Any, denominator: float) -> str:
    """(method − AN) / (BCE − AN) in percent, formatted; ``–`` for a row without a number.
    ``denominator`` is BCE − AN as :func:`gap_denominator` accepted it."""
    if rk not in present:
        return _MISSING
    m, an = float(present[rk]["mean"]), float(present["an"]["mean"])
    if not math.isfinite(m):
        return _MISSING
    return format_gap((m - an) / denominator)


def format_gap(fraction: float) -> str:
    """A gap closed as a signed whole percentage; a share that rounds to zero reads +0%, never -0%."""
    return f"{round(100.0 * fraction) + 0:+d}%"


# --------------------------------------------------------------------------- writers


def _bold_set(table: pd.DataFrame) -> set[tuple[str, str]]:
    return {tuple(b) for b in table.attrs.get("bold", [])}


def to_markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table; best cells (``attrs["bold"]``) as ``**x**``."""
    bold = _bold_set(table)
    head = [str(table.index.name or "")] + [str(c) for c in table.columns]

    def esc(text: Any) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head)]
    for label, row in table.iterrows():
        cells = [f"**{esc(v)}**" if (label, c) in bold else esc(v) for c, v in row.items()]
        lines.append("| " + " | ".join([esc(label)] + cells) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}
_LATEX_SYMBOLS = {"±": r"$\pm$", "Δ": r"$\Delta$", "–": "--", "−": "$-$"}


def _latex_escape(text: Any) -> str:
    """Escape LaTeX's special characters, then spell the table's symbols in LaTeX."""
    out = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    for sym, tex in _LATEX_SYMBOLS.items():
        out = out.replace(sym, tex)
    return out


def to_latex(table: pd.DataFrame, *, caption: str | None = None, label: str | None = None) -> str:
    """A LaTeX ``tabular`` (wrapped in a ``table`` float if ``caption`` or ``label`` is given).

    Uses only core LaTeX (``\\hline``, ``$\\pm$``), so it compiles without extra packages;
    best cells are ``\\textbf{...}``.
    """
    bold = _bold_set(table)
    lines = []
    if caption is not None or label is not None:
        lines += [r"\begin{table}[t]", r"\centering"]
        if caption is not None:
            lines.append(rf"\caption{{{_latex_escape(caption)}}}")
        if label is not None:
            lines.append(rf"\label{{{label}}}")
    lines.append(r"\begin{tabular}{l" + "c" * len(table.columns) + "}")
    lines.append(r"\hline")
    head = [str(table.index.name or "")] + [str(c) for c in table.columns]
    lines.append(" & ".join(_latex_escape(h) for h in head) + r" \\")
    lines.append(r"\hline")
    for lab, row in table.iterrows():
        cells = [rf"\textbf{{{_latex_escape(v)}}}" if (lab, c) in bold else _latex_escape(v) for c, v in row.items()]
        lines.append(" & ".join([_latex_escape(lab)] + cells) + r" \\")
    lines.append(r"\hline")
    lines.append(r"\end{tabular}")
    if caption is not None or label is not None:
        lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def to_csv(table: pd.DataFrame, path: str | os.PathLike | None = None) -> str:
    """The table as CSV text (plain cells, no bold); also written to ``path`` if given."""
    buf = io.StringIO()
    table.to_csv(buf)
    text = buf.getvalue()
    if path is not None:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    return text


#: the F1 conventions reported side by side: fixed thresholds and thresholds chosen on validation
THRESHOLD_COLUMNS = (
    ("OF1@0.5", "OF1 @0.5"),
    ("CF1@0.5", "CF1 @0.5"),
    ("OF1@0.75", "OF1 @0.75"),
    ("CF1@0.75", "CF1 @0.75"),
    ("OF1@val_global", "OF1 @val (global t)"),
    ("CF1@val_global", "CF1 @val (global t)"),
    ("OF1@val_class", "OF1 @val (per-class t)"),
    ("CF1@val_class", "CF1 @val (per-class t)"),
)


def _degenerate_runs(rates: Sequence[float | None]) -> str:
    """What a threshold table's cell adds when some of its runs' thresholds were degenerate: each
    run's share of test entries decided positive (``predicted_positive@...``) was 1 or 0."""
    words = [f"{what} in {n} of {len(rates)} runs" for what, n in
             (("every label on", sum(r == 1 for r in rates)), ("no label on", sum(r == 0 for r in rates))) if n]
    return f" (degenerate: {'; '.join(words)})" if words else ""


def threshold_table(df: pd.DataFrame, *, decimals: int = 2) -> pd.DataFrame:
    """F1 metrics (percent, mean ± std over seeds) at the fixed conventions beside the
    thresholds selected on validation, for each (dataset, observation, method) and its
    configuration selected on validation mAP. The 0.75 columns exist for EM-trained models
    (the EM authors' advice); other cells show ``–``. A cell some of whose runs decided every test
    label positive at that threshold, or none, says so and in how many runs (a degenerate
    threshold: its F1 says nothing about the model)."""
    rows: dict[tuple, dict[str, str]] = {}
    for metric, label in THRESHOLD_COLUMNS:
        column = f"test.{metric}"
        if column not in df.columns:
            continue
        agg = select_and_aggregate(df, metric=column)
        rate_column = f"test.predicted_positive@{metric.split('@', 1)[1]}"
        rates = dict(zip(df["run_id"], df[rate_column])) if rate_column in df.columns and "run_id" in df else {}
        for rec in agg.to_dict("records"):
            key = (rec["dataset"], rec["observation"], rec["method"])
            value = "–" if not np.isfinite(rec["mean"]) else _fmt(rec["mean"], rec["std"], decimals)
            rows.setdefault(key, {})[label] = value + _degenerate_runs([rates.get(i) for i in rec.get("run_ids", [])])
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["dataset", "observation", "method"])
    return table.fillna("–").reset_index()
