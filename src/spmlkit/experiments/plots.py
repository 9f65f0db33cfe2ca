"""The analysis figures of the SPML papers, drawn from stored run records.

- Prediction densities on unobserved positives vs negatives: Zhou et al., "Acknowledging
  the Unknown for Multi-label Learning with Single Positive Labels" (ECCV 2022, "EM"),
  Fig. 2c / 4b; Chen et al., "Boosting Single Positive Multi-label Classification with
  Generalized Robust Loss" (IJCAI 2024, "GR"), Fig. 3.
- Per-class Wasserstein distance between those two distributions, method vs AN (EM Fig. 4a).
- Class-wise AP gain over AN (EM Fig. 4c).
- Pseudo-label accuracy and count per epoch (EM Table 4, as curves).
- Training curves: loss on observed positives and validation mAP per epoch.
- Hyperparameter sensitivity: mAP against a swept hyperparameter (EM Fig. 3a, GR Fig. 2).

Every function takes records (dicts of :class:`~spmlkit.experiments.store.ResultsStore`)
or a runs DataFrame, returns a :class:`matplotlib.figure.Figure` and leaves saving to
:func:`save`. Figures are built on the Agg canvas directly, never through ``pyplot``: no
window opens, no global figure registry fills up in a long sweep. A method has the same
colour in every figure (:func:`method_color`), so figures can be read side by side.

A figure holds 1 to 30 methods readably (:mod:`.figure_layout`: lines in groups of at most
six per panel, one panel per method wrapped into a grid, sizes within fixed bounds), and a
figure the records cannot feed raises :class:`NothingToPlot`, which
:func:`make_all_figures` turns into a one-line note instead of stopping the report
(docs/figures.md, "What each figure needs").
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..file_names import UniqueNames
from ..io import atomic_write_bytes
from .figure_layout import DPI, LINE_STYLES, bottom_panels, grid_shape, method_groups, new_figure, panel_grid
from . import figure_text
from .method_colors import METHOD_COLORS, method_color
from .published import DATASET_LABELS, METHOD_LABELS, display_name
from .report import select_and_aggregate

__all__ = [
    "METHOD_COLORS",
    "NothingToPlot",
    "make_all_figures",
    "method_color",
    "plot_classwise_ap_gain",
    "plot_pseudo_labels",
    "plot_sensitivity",
    "plot_training_curves",
    "plot_unobserved_densities",
    "plot_wasserstein_vs_an",
    "save",
]

Record = dict[str, Any]

_POS_STYLE = {"alpha": 0.45}
_NEG_COLOR = "#636363"
#: above this many methods the Wasserstein scatter and the AP gain get one panel / one row
#: per method instead of sharing one axes (their points and bars hide each other)
_SHARED_AXES_MAX = 4
#: class names are written along an axis up to this many classes; beyond, they overlap
_MAX_CLASS_TICKS = 60


#: why a run has no analysis of its unobserved training labels: it is measured against their truth
_NEEDS_TRUTH = ("the analysis of unobserved training labels needs the training rows' full labels, which every named "
                "data set and extracted feature folder has, and data of your own (observed labels only) does not")


class NothingToPlot(ValueError):
    """The records hold nothing this figure shows: no method with a label state for the
    pseudo-label curves, no AN runs for a comparison with AN, no analysis (runs without the
    training rows' full labels), no swept
    hyperparameter. :func:`make_all_figures` skips the figure with a one-line note; a direct
    call gets the error, whose message says what the figure needs."""


def _shown(method: str) -> str:
    """A method's name as figures show it: the papers' name, drawable and bounded (:mod:`.figure_text`)."""
    return figure_text.name(display_name(method))


#: what a saved figure records about itself: nothing that changes between two renders of one store
#: (matplotlib writes its version as the PNG's and SVG's "Software" and the SVG's creation date)
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}, "pdf": {"CreationDate": None,
                                                                                      "Creator": None,
                                                                                      "Producer": None}}


def save(fig: Figure, path_without_ext: str | os.PathLike, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write ``fig`` as ``<path>.<fmt>`` for each format (parent folders are created), each
    file atomically (:func:`~spmlkit.io.atomic_write_bytes`): a report stopped half-way
    leaves whole figures, never a truncated PNG. The same store gives the same bytes: no date
    or version is written into the file, and the SVG's ids come from a fixed seed
    (docs/figures.md, "The same bytes")."""
    figure_text.finish(fig)
    base = Path(path_without_ext)
    out = []
    for fmt in formats:
        buffer = io.BytesIO()
        with matplotlib.rc_context({"svg.hashsalt": "spmlkit"}):
            # constrained layout already fits the labels
            fig.savefig(buffer, format=fmt, dpi=DPI, metadata=_METADATA.get(fmt))
        out.append(atomic_write_bytes(base.with_name(f"{base.name}.{fmt}"), buffer.getvalue()))
    return out


# --------------------------------------------------------------------------- helpers


def _ordered_methods(methods: Iterable[str]) -> list[str]:
    known = list(METHOD_LABELS)
    return sorted(set(methods), key=lambda m: (known.index(m), "") if m in known else (len(known), m))


def _by_method(records: Iterable[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        if r.get("status", "ok") == "ok":
            out.setdefault(r["method"], []).append(r)
    return {m: out[m] for m in _ordered_methods(out)}


def _context(records: Sequence[Record]) -> str:
    """"voc2012, single_positive" for the title; errors if records mix datasets."""
    datasets = {r.get("dataset") for r in records}
    if len(datasets) > 1:
        raise ValueError(
            f"records mix datasets {sorted(map(str, datasets))}; plot one dataset at a time "
            "(e.g. store.records(dataset=...))"
        )
    ds = next(iter(datasets), None)
    obs = sorted({str(r.get("observation")) for r in records if r.get("observation")})
    label = figure_text.name(DATASET_LABELS.get(ds, str(ds))) if ds else ""
    obs = [figure_text.name(o) for o in obs]
    return ", ".join([label] + obs) if label else ", ".join(obs)


def _require(records: Sequence[Record], what: str, hint: str) -> None:
    if not records:
        raise NothingToPlot(f"no run record has {what}; {hint}")


def _method_and_an_runs(
    records_method: Sequence[Record],
    records_an: Sequence[Record],
    has: Callable[[Record], Any],
    what: str,
    hint: str,
) -> tuple[list[Record], list[Record], str]:
    """The method runs and the AN runs for which ``has`` is true, and the figure's context.

    Either side may be empty for its own reason, so the error names the side: ``hint``
    says how to get usable records ("pass finished records") and is said of AN records
    ("pass finished AN records") for the AN side.
    """
    an = [r for r in records_an if has(r)]
    _require(an, f"{what} among the AN runs", hint.replace("records", "AN records", 1))
    recs = [r for r in records_method if has(r)]
    _require(recs, f"{what} among the method runs", hint)
    return recs, an, _context(recs + an)


def _class_vector_like_an(method: str, runs: Sequence[Record], get: Any, an_vector: np.ndarray) -> np.ndarray:
    """:func:`_mean_vector` of one method's runs; a class count other than AN's means runs
    of different datasets were mixed, which a per-class comparison cannot pair up."""
    vector = _mean_vector(runs, get)
    if vector.shape != an_vector.shape:
        raise ValueError(
            f"{method} has {vector.size} classes but AN has {an_vector.size}; compare runs of one dataset"
        )
    return vector


def _histograms(records: Sequence[Record], class_index: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Summed positive/negative counts over seeds (one class or all pooled) and bin edges."""
    bins = np.asarray(records[0]["analysis"]["bins"], dtype=float)
    pos = np.zeros(bins.size - 1)
    neg = np.zeros(bins.size - 1)
    for r in records:
        a = r["analysis"]
        hp, hn = np.asarray(a["hist_pos"], dtype=float), np.asarray(a["hist_neg"], dtype=float)
        if hp.ndim != 2 or hp.shape != hn.shape or hp.shape[1] != bins.size - 1:
            raise ValueError(
                f"run {r.get('run_id')!r}: analysis.hist_pos/hist_neg must be [C, {bins.size - 1}] "
                f"(one row per class, one count per bin), got {hp.shape} and {hn.shape}"
            )
        if class_index is None:
            pos += hp.sum(axis=0)
            neg += hn.sum(axis=0)
        else:
            if not -hp.shape[0] <= class_index < hp.shape[0]:
                raise ValueError(f"class_index {class_index} out of range for {hp.shape[0]} classes")
            pos += hp[class_index]
            neg += hn[class_index]
    return bins, pos, neg


def _density(counts: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Counts -> density (integrates to 1 over [0, 1]); zeros when there are no counts."""
    total = counts.sum()
    return counts / (total * np.diff(bins)) if total > 0 else np.zeros_like(counts)


def _mean_vector(records: Sequence[Record], get: Any) -> np.ndarray:
    """Mean over seeds of a per-class vector (NaN-aware)."""
    arrays = [np.asarray(get(r), dtype=float) for r in records]
    sizes = {a.shape for a in arrays}
    if len(sizes) != 1:
        raise ValueError(f"per-class vectors of different lengths across runs: {sorted(sizes)}")
    stack = np.stack(arrays)
    with np.errstate(invalid="ignore"):
        return np.array([np.nanmean(col) if np.isfinite(col).any() else np.nan for col in stack.T])


def _finite_mean(values: np.ndarray) -> float:
    """Mean of the finite values; NaN without numpy's "mean of empty slice" warning when
    there are none (a method whose every per-class AP is missing)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def _class_names(records: Sequence[Record], num_classes: int) -> list[str]:
    """The classes' names as figures show them (:mod:`.figure_text`), or ``class i``."""
    for r in records:
        names = r.get("class_names")
        if names and len(names) == num_classes:
            return figure_text.short_labels([str(n) for n in names])
    return [f"class {i}" for i in range(num_classes)]


def _finite(value: Any) -> bool:
    """True for a finite number (history values may be missing, None or NaN)."""
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and math.isfinite(value)


def _epoch_frame(records: Sequence[Record], value: Callable[[dict[str, Any]], float | None]) -> pd.DataFrame:
    """Long table (method, run, epoch, value) of ``value(history entry)``; None is dropped.

    An entry without an ``epoch`` gets its 1-based position in the history.
    """
    rows = []
    for r in records:
        for i, h in enumerate(r.get("history") or []):
            v = value(h)
            if v is None:
                continue
            rows.append({"method": r["method"], "run": r.get("run_id", id(r)), "epoch": h.get("epoch", i + 1),
                         "value": v})
    return pd.DataFrame(rows, columns=["method", "run", "epoch", "value"])


def _history_frame(records: Sequence[Record], key: str) -> pd.DataFrame:
    """Long table (method, run, epoch, value) of one history key; NaN/missing dropped."""
    return _epoch_frame(records, lambda h: float(h[key]) if _finite(h.get(key)) else None)


#: history keys that count pseudo-labels (APL's pseudo-negatives, label corrections)
_PSEUDO_COUNT_KEYS = ("pseudo_negatives", "corrections")


def _pseudo_label_count(entry: dict[str, Any]) -> float | None:
    """Pseudo-labels in the label state at one epoch: the sum of whichever of
    :data:`_PSEUDO_COUNT_KEYS` the method reports (None when it reports neither)."""
    vals = [float(entry[k]) for k in _PSEUDO_COUNT_KEYS if _finite(entry.get(k))]
    return sum(vals) if vals else None


def _plot_band(ax: Axes, frame: pd.DataFrame, method: str, scale: float = 1.0, **kw: Any) -> None:
    """Mean over runs per epoch as a line, ± std (ddof = 0) as a band."""
    sub = frame[frame["method"] == method]
    if sub.empty:
        return
    grouped = sub.groupby("epoch")["value"]
    stats = pd.DataFrame({"mean": grouped.mean(), "std": grouped.std(ddof=0), "count": grouped.count()}).sort_index()
    x = stats.index.to_numpy(dtype=float)
    m = stats["mean"].to_numpy() * scale
    s = stats["std"].fillna(0.0).to_numpy() * scale
    color = kw.pop("color", method_color(method))
    label = kw.pop("label", _shown(method))
    ax.plot(x, m, color=color, label=label, marker="o" if len(x) < 15 else None, ms=3, **kw)
    if (stats["count"] > 1).any():
        ax.fill_between(x, m - s, m + s, color=color, alpha=0.18, linewidth=0)


#: inches one character of a title takes at most, on average (DejaVu Sans at the title's 12 points)
_TITLE_CHAR_INCHES = 0.11


def _suptitle(fig: Figure, title: str) -> None:
    """The figure's title, its lines broken between words to fit the figure's width: a data set's
    name in the title of a narrow figure was cut off at both edges."""
    import textwrap

    width = max(20, int(fig.get_figwidth() / _TITLE_CHAR_INCHES))
    fig.suptitle("\n".join(textwrap.fill(line, width, break_long_words=True) for line in title.split("\n")))


def _legend_beside(ax: Axes, **kw: Any) -> None:
    """A legend to the right of ``ax``, outside it, so it never covers a line or a point
    (constrained layout makes room for it); nothing when ``ax`` drew no labelled artist."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize="small", borderaxespad=0.0, **kw)


class _EpochPanel(NamedTuple):
    """One column of a per-epoch figure: a long table from :func:`_epoch_frame`, the factor
    applied to its values (100: fractions shown as percent), the title and the y label."""

    frame: pd.DataFrame
    scale: float
    title: str
    ylabel: str


#: the reference drawn in every group of a grouped per-epoch or sensitivity figure
_REFERENCE = "an"


def _epoch_figure(methods: Sequence[str], panels: Sequence[_EpochPanel], title: str) -> Figure:
    """One column per panel, one row per group of at most six methods (small multiples:
    26 lines in one axes are unreadable), one band per method (:func:`_plot_band`) against
    the epoch, a legend beside each row.

    Columns share their y axis, so rows compare at a glance; with several rows, AN is drawn
    thin and dotted in each row that does not hold it, as the common reference. The epoch
    axis gets integer ticks; a row gets a legend only when some method drew in it.
    """
    groups = method_groups(methods)
    several = len(groups) > 1
    fig = new_figure(width=4.4 * len(panels) + 1.9, height=2.6 * len(groups) + 0.8)
    axes = np.asarray(fig.subplots(len(groups), len(panels), squeeze=False, sharex=True, sharey="col"))
    for row, group in zip(axes, groups):
        for ax, panel in zip(row, panels):
            for i, m in enumerate(group):
                _plot_band(ax, panel.frame, m, scale=panel.scale, linestyle=LINE_STYLES[i % len(LINE_STYLES)])
            if several and _REFERENCE not in group and _REFERENCE in methods:
                _plot_band(ax, panel.frame, _REFERENCE, scale=panel.scale, linestyle=":", linewidth=1.0,
                           label=f"{_shown(_REFERENCE)} (reference)")
            ax.set_ylabel(panel.ylabel, fontsize="small")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _legend_beside(row[-1])
    for ax, panel in zip(axes[0], panels):
        ax.set_title(panel.title)
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    _suptitle(fig, title)
    return fig


# --------------------------------------------------------------------------- figures


def plot_unobserved_densities(
    records: Sequence[Record], class_index: int | None = None, *, log_y: bool = False
) -> Figure:
    """Densities of predicted probabilities on unobserved training labels, positives vs
    negatives, one panel per method (EM Fig. 2c/4b, GR Fig. 3), wrapped into a grid.

    Uses ``analysis.hist_pos`` / ``hist_neg`` (counts per class and bin, at the best epoch),
    summed over seeds, for one class or all classes pooled; each histogram is normalised to
    a density (area 1), so the two groups compare despite their very different sizes. A
    method that separates hidden positives from hidden negatives shows two distant humps;
    AN squeezes both towards 0. The panel title gives the pooled Wasserstein distance
    (mean over seeds) when stored. One legend above the grid explains the two marks.
    """
    recs = [r for r in records if r.get("analysis") and r["analysis"].get("hist_pos") is not None]
    _require(recs, "analysis histograms", _NEEDS_TRUTH)
    groups = _by_method(recs)
    _require(list(groups), "a finished run with analysis histograms", "pass finished records")
    context = _context(recs)
    nrows, ncols = grid_shape(len(groups))
    fig = new_figure(width=max(2.9 * ncols + 0.5, 6.6), height=2.3 * nrows + 1.3)
    axes = panel_grid(fig, len(groups), ncols, sharex=True)
    for ax, (method, runs) in zip(axes, groups.items()):
        bins, pos, neg = _histograms(runs, class_index)
        # filled steps, not bars: one artist per histogram instead of one per bin, which
        # made a 26-panel figure slow to lay out
        ax.stairs(_density(pos, bins), bins, fill=True, color=method_color(method), **_POS_STYLE)
        ax.stairs(_density(neg, bins), bins, color=_NEG_COLOR, linestyle="--", linewidth=1.2)
        w = [float(r["analysis"]["wasserstein"]) for r in runs if _finite(r["analysis"].get("wasserstein"))]
        ax.set_title(_shown(method) + (f"\nW1 = {np.mean(w):.3f}" if w and class_index is None else ""),
                     fontsize="medium")
        ax.set_xlim(0.0, 1.0)
        if log_y:
            ax.set_yscale("log")
    for ax in bottom_panels(axes, ncols):
        ax.set_xlabel("predicted probability p")
    fig.supylabel("density")
    handles = [Patch(color="#808080", **_POS_STYLE, label="unobserved positives (filled, in the method's colour)"),
               Line2D([], [], color=_NEG_COLOR, linestyle="--", label="unobserved negatives")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize="small")
    which = "all classes pooled"
    if class_index is not None:
        names = _class_names(recs, len(recs[0]["analysis"]["hist_pos"]))
        which = f"class '{names[class_index]}'"
    _suptitle(fig, f"Predictions on unobserved training labels{' ' if ncols > 2 else chr(10)}({which}; {context})")
    return fig


def plot_wasserstein_vs_an(records_method: Sequence[Record], records_an: Sequence[Record]) -> Figure:
    """Per-class Wasserstein distance between predictions on unobserved positives and
    negatives: each method against AN, one point per class, with the diagonal (EM Fig. 4a).

    Points above the diagonal are classes the method separates better than AN. Distances
    come from ``analysis.wasserstein_per_class``, averaged over seeds. Up to four methods
    share one axes with the legend beside it; more get one panel each (same limits), since
    a few hundred overlapping points of 26 colours cannot be told apart.
    """
    key = "wasserstein_per_class"
    recs, an, context = _method_and_an_runs(
        records_method, records_an, lambda r: r.get("analysis") and r["analysis"].get(key) is not None,
        f"analysis.{key}", _NEEDS_TRUTH,
    )
    w_an = _mean_vector(an, lambda r: r["analysis"][key])
    series = []
    for method, runs in _by_method(recs).items():
        w = _class_vector_like_an(method, runs, lambda r: r["analysis"][key], w_an)
        ok = np.isfinite(w) & np.isfinite(w_an)
        series.append((method, w, ok, int(np.sum(w[ok] > w_an[ok]))))
    _require(series, "a finished method run", "pass finished records")
    finite = [float(np.nanmax(v[ok])) for _, v, ok, _ in series if ok.any()]
    top = max([float(np.nanmax(w_an)) if np.isfinite(w_an).any() else 0.0] + finite)
    lim = 1.05 * top if top > 0 else 1.0
    title = f"Per-class W1, unobserved positives vs negatives ({context})"

    def frame(ax: Axes) -> None:
        ax.plot([0, lim], [0, lim], color="black", linewidth=0.8, linestyle=":", label="equal distance (y = x)")
        ax.set_xlim(0, lim)
        ax.set_ylim(0, lim)
        ax.set_aspect("equal")

    if len(series) <= _SHARED_AXES_MAX:
        fig = new_figure(width=7.6, height=4.6)
        ax = fig.subplots()
        for method, w, ok, above in series:
            ax.scatter(w_an[ok], w[ok], s=18, color=method_color(method), alpha=0.85,
                       label=f"{_shown(method)} ({above}/{int(ok.sum())} classes above)")
        frame(ax)
        ax.set_xlabel("Wasserstein distance, AN")
        ax.set_ylabel("Wasserstein distance, method")
        ax.set_title(title.replace(" (", "\n(", 1))
        _legend_beside(ax)
        return fig
    nrows, ncols = grid_shape(len(series))
    fig = new_figure(width=2.5 * ncols + 0.6, height=2.6 * nrows + 0.9)
    for ax, (method, w, ok, above) in zip(panel_grid(fig, len(series), ncols, sharex=True, sharey=True), series):
        ax.scatter(w_an[ok], w[ok], s=10, color=method_color(method), alpha=0.85)
        frame(ax)
        ax.set_title(f"{_shown(method)}\n{above}/{int(ok.sum())} classes above", fontsize="medium")
    fig.supxlabel("Wasserstein distance, AN")
    fig.supylabel("Wasserstein distance, method (dotted: equal distance)")
    _suptitle(fig, title)
    return fig


def plot_classwise_ap_gain(records_method: Sequence[Record], records_an: Sequence[Record]) -> Figure:
    """Class-wise test AP improvement over AN, in AP points (EM Fig. 4c).

    ``gain_c = 100 * (AP_c(method) - AP_c(AN))`` with APs averaged over seeds. Up to four
    methods: one panel each, bars sorted from the largest gain down, as in the paper. More
    methods: one heat-map row per method, classes in one order for all rows (by the mean
    gain over the methods, largest first), so a column reads as one class across methods.
    Classes a method hurts show as negative bars or red cells, which a mean over classes
    (the mAP) hides. Class names are written up to 60 classes.
    """
    recs, an, context = _method_and_an_runs(
        records_method, records_an, lambda r: r.get("test_ap"), "test_ap", "pass finished records"
    )
    ap_an = _mean_vector(an, lambda r: r["test_ap"])
    names = _class_names(an, ap_an.size)
    gains = {method: 100.0 * (_class_vector_like_an(method, runs, lambda r: r["test_ap"], ap_an) - ap_an)
             for method, runs in _by_method(recs).items()}
    _require(list(gains), "a finished method run", "pass finished records")
    with_names = ap_an.size <= _MAX_CLASS_TICKS
    if len(gains) > _SHARED_AXES_MAX:
        fig = _ap_gain_heatmap(gains, names, with_names)
    else:  # room under each panel for its longest class name, written downwards at 6 or 8 points
        names_inches = max(3.2, 2.4 + 0.075 * max(map(len, names))) if with_names else 2.4
        fig = new_figure(width=0.16 * ap_an.size + 3.0, height=names_inches * len(gains) + 0.6)
        axes = panel_grid(fig, len(gains), 1)
        for ax, (method, gain) in zip(axes, gains.items()):
            order = np.argsort(-np.nan_to_num(gain, nan=-np.inf), kind="stable")
            ax.bar(np.arange(gain.size), gain[order], color=method_color(method))
            ax.axhline(0.0, color="black", linewidth=0.8)
            if with_names:
                ax.set_xticks(np.arange(gain.size))
                ax.set_xticklabels([names[i] for i in order], rotation=90, fontsize=6 if gain.size > 30 else 8)
            ax.set_ylabel("AP gain (AP points)", fontsize="small")
            ax.set_title(f"{_shown(method)} vs AN (mean gain {_finite_mean(gain):+.2f})", fontsize="medium")
        axes[-1].set_xlabel(f"class (sorted by gain; {ap_an.size} classes)")
    _suptitle(fig, f"Class-wise test AP gain over AN ({context})")
    return fig


#: the share of the compared methods' |gains| inside the heat map's colour range; the rest (a
#: method's few outlying classes) saturate at its ends, which the colour bar's arrows mark
_HEATMAP_QUANTILE = 0.9


def _is_reference(method: str) -> bool:
    """A method that trains on more labels than the others (full labels, 1P + all N)."""
    from ..methods import METHODS

    return method in METHODS and METHODS[method].sees_more_labels


def _ap_gain_heatmap(gains: dict[str, np.ndarray], names: Sequence[str], with_names: bool) -> Figure:
    """The AP gains of many methods as a heat map: methods down, classes across (see
    :func:`plot_classwise_ap_gain`); a diverging colour scale centred on 0, so a gain is
    blue and a loss red whatever their sizes, and missing APs are left blank.

    The colour range is set by the methods compared, not by the references (``bce``, ``iun``):
    they see more labels and gain several times more, and a range wide enough for them left
    every single-positive row a pale wash. The range holds :data:`_HEATMAP_QUANTILE` of the
    compared methods' |gains|; larger gains (a reference's, a method's outlying class) saturate
    at the ends, marked by the colour bar's arrows. The references are drawn last, below a line,
    and the classes are sorted by the compared methods' mean gain."""
    from matplotlib.colors import Normalize

    order_rows = [m for m in gains if not _is_reference(m)] + [m for m in gains if _is_reference(m)]
    compared = [m for m in order_rows if not _is_reference(m)] or order_rows
    matrix = np.vstack([gains[m] for m in order_rows])
    basis = np.vstack([gains[m] for m in compared])
    finite = np.isfinite(basis)
    counts = finite.sum(axis=0)
    sums = np.where(finite, basis, 0.0).sum(axis=0)
    col_mean = np.full(basis.shape[1], np.nan)  # a class without any finite gain stays NaN, sorted last
    np.divide(sums, counts, out=col_mean, where=counts > 0)
    order = np.argsort(-np.nan_to_num(col_mean, nan=-np.inf), kind="stable")
    span = float(np.quantile(np.abs(basis[finite]), _HEATMAP_QUANTILE)) if finite.any() else 1.0
    span = span if span > 0 else 1.0
    beyond = np.isfinite(matrix) & (np.abs(matrix) > span)
    extend = {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[
        (bool((beyond & (matrix < 0)).any()), bool((beyond & (matrix > 0)).any()))]
    n_cls = matrix.shape[1]
    # at least the width the title and the method labels need, however few the classes
    fig = new_figure(width=min(max(3.4 + 0.24 * n_cls, 7.6), 24.0),
                     height=0.28 * len(gains) + (2.4 if with_names else 1.6))
    ax = fig.subplots()
    image = ax.imshow(matrix[:, order], aspect="auto", cmap="RdBu", norm=Normalize(-span, span),
                      interpolation="nearest")
    ax.set_yticks(np.arange(len(order_rows)))
    ax.set_yticklabels([f"{_shown(m)}{' (reference)' if _is_reference(m) else ''} ({_finite_mean(gains[m]):+.2f})"
                        for m in order_rows], fontsize=7)
    if len(compared) < len(order_rows):
        ax.axhline(len(compared) - 0.5, color="black", linewidth=1.2)
    if with_names:
        ax.set_xticks(np.arange(n_cls))
        ax.set_xticklabels([names[i] for i in order], rotation=90, fontsize=6 if n_cls > 30 else 8)
    else:
        ax.set_xticks([])
    ax.set_xlabel(f"class ({n_cls}, sorted by the compared methods' mean gain)")
    ax.set_ylabel("method (mean gain)")
    # the arrows of ``extend`` mark the colours that also hold every larger gain
    fig.colorbar(image, ax=ax, label="AP gain over AN (AP points)", shrink=0.9, extend=extend)
    return fig


def _keeps_label_state(method: str) -> bool:
    """Whether a method makes pseudo-labels (:attr:`~spmlkit.methods.Method.writes_labels`: APL's
    pseudo-negatives, OPML's corrections, LL-Cp's; CRISP's class-prior estimate leaves the label state
    as it is)."""
    from ..methods import METHODS

    # a method this installation does not know (another version's, a plug-in not loaded) is not asked
    return method in METHODS and METHODS[method].writes_labels


def plot_pseudo_labels(records: Sequence[Record]) -> Figure:
    """Pseudo-label accuracy (%) and number of pseudo-labels per epoch, one line per method
    (mean over seeds, ± std band), for methods with a label state (EM Table 4 as curves).

    Accuracy is the history's ``pseudo_label_accuracy`` (fraction of pseudo-labels whose
    hard value equals the truth); the count is ``pseudo_negatives + corrections`` (whichever
    the method reports). Methods without a label state report no accuracy and a count of
    zero at every epoch and are left out; when no method is left, :class:`NothingToPlot`.
    """
    ok = [r for r in records if r.get("status", "ok") == "ok"]
    acc = _history_frame(ok, "pseudo_label_accuracy")
    count = _epoch_frame(ok, _pseudo_label_count)
    makers = set(count.loc[count["value"] > 0, "method"]) | set(acc["method"])
    count = count[count["method"].isin(makers)]
    acc = acc[acc["method"].isin(makers)]
    if acc.empty and count.empty:
        keepers = _ordered_methods({r["method"] for r in ok if _keeps_label_state(r["method"])})
        if keepers:  # runs of an spmlkit that counted pseudo-labels only where the training rows' truth was known
            one = len(keepers) == 1
            raise NothingToPlot(
                f"{', '.join(keepers)} {'keeps' if one else 'keep'} a label state, but {'its' if one else 'their'} "
                "runs recorded no pseudo-label counts (spmlkit once counted them only on data with full training "
                "labels); train them again to plot their pseudo-labels")
        every = [m for m in METHOD_LABELS if _keeps_label_state(m)]
        every = ", ".join(every[:-1]) + f" and {every[-1]}" if len(every) > 1 else "".join(every)
        raise NothingToPlot(f"no method here keeps a label state (no pseudo-label accuracy, no pseudo-negative or "
                            f"correction counts); {every} do")
    context = _context(ok)
    methods = _ordered_methods(set(acc["method"]) | set(count["method"]))
    panels = [
        *([_EpochPanel(acc, 100.0, "Pseudo-label accuracy", "accuracy of pseudo-labels (%)")] if not acc.empty else []),
        *([_EpochPanel(count, 1.0, "Pseudo-labels in the label state", "number of pseudo-labels")]
          if not count.empty else []),
    ]
    title = f"Pseudo-labels during training ({context})"
    if acc.empty:  # an empty panel on a 0-1 axis labelled % would read as a measurement
        title += "\n" + _NO_ACCURACY[all(not r.get("analysis") for r in ok)]
    return _epoch_figure(methods, panels, title)


#: why a pseudo-label figure has no accuracy panel: [whether the runs have no full training labels]
_NO_ACCURACY = {True: "no accuracy shown: it is measured against the training rows' full labels, which data of your "
                      "own does not have",
                False: "no accuracy shown: no run recorded one"}


def plot_training_curves(records: Sequence[Record]) -> Figure:
    """Loss on observed positives (mean ``-log p`` on the training set's observed positives)
    and validation mAP (%) per epoch, one line per method, mean over seeds with a ± std band;
    at most six methods to a row of panels (:func:`_epoch_figure`).

    The positive loss shows how fast a method fits the one label it trusts; a method that
    keeps it high while val mAP rises is regularising, one whose val mAP drops while the
    loss keeps falling is memorising its assumed negatives.
    """
    ok = [r for r in records if r.get("status", "ok") == "ok" and r.get("history")]
    _require(ok, "a history", "pass finished records")
    context = _context(ok)
    labels = _val_labels(ok)
    panels = [
        _EpochPanel(_history_frame(ok, "observed_pos_loss"), 1.0, "Loss on observed positives (training set)",
                    "-log p on observed positives (nats)"),
        _EpochPanel(_history_frame(ok, "val_map"), 100.0, f"Validation mAP{f' ({labels})' if labels else ''}",
                    f"validation mAP{f' on {labels}' if labels else ''} (%)"),
    ]
    if all(p.frame.empty for p in panels):
        raise NothingToPlot("no run history has observed_pos_loss or val_map")
    return _epoch_figure(_ordered_methods(r["method"] for r in ok), panels, f"Training curves ({context})")


def _val_labels(records: Sequence[Record]) -> str:
    """Which labels the runs' validation mAP is measured on, in a title's words: ``observed labels``
    (a user's own data, or ``--val observed``: every unobserved positive counts as a negative, so
    the numbers are lower than on full labels and not comparable with them), ``full labels``, both
    when runs differ, or nothing for records that do not say."""
    kinds = sorted({str(r["val_map_labels"]) for r in records if r.get("val_map_labels") in ("full", "observed")})
    return " or ".join(kinds) + " labels" if kinds else ""


def _param_column(df: pd.DataFrame, param: str) -> str:
    for name in (param, f"hp.{param}"):
        if name in df.columns:
            return name
    hp = [c for c in df.columns if str(c).startswith("hp.")]
    raise ValueError(f"no column {param!r} (or 'hp.{param}'); sweepable columns: lr, batch_size, {', '.join(hp)}")


#: the most panels of one sensitivity figure (facets x method groups); more: plot per dataset
_MAX_SENSITIVITY_PANELS = 12


def plot_sensitivity(df: pd.DataFrame, param: str, *, metric: str = "test_map") -> Figure:
    """Test mAP (%) against one swept hyperparameter, mean ± std over seeds, one line per
    method, at most six methods to a panel, one set of panels per dataset/observation when
    several are present (EM Fig. 3a, GR Fig. 2). Methods for which ``param`` takes a single
    value are left out.

    ``param`` is a runs-DataFrame column (``lr``, ``batch_size``) or a method hyperparameter
    (``alpha`` or ``hp.alpha``). When other hyperparameters were swept too, each point uses
    the configuration with the best mean validation mAP at that value of ``param``
    (:func:`~spmlkit.experiments.report.select_and_aggregate`), so the curve shows what
    tuning the rest can reach. The x-axis is logarithmic for learning rates (their grids
    are geometric) and for any positive values spanning a decade or more. Panels share
    their axes, and each legend sits beside its panel.
    """
    col = _param_column(df, param)
    d = df[df["status"] == "ok"] if "status" in df.columns else df
    d = d[d[col].notna()]
    if d.empty:
        raise NothingToPlot(f"no finished run sets {col!r}")
    by = [c for c in ("dataset", "observation", "method") if c in d.columns]
    config = [c for c in ("lr", "batch_size", "hparams") if c in d.columns and c != col]
    agg = select_and_aggregate(d, by=by + [col], config_keys=config, metric=metric)
    facet_cols = [c for c in by if c != "method"]
    swept = agg.groupby(facet_cols + ["method"], sort=False, dropna=False)[col].transform("nunique") > 1
    agg = agg[swept]  # not swept for a method: a lone point is no sensitivity
    if agg.empty:
        raise NothingToPlot(f"{col!r} takes a single value within every method; sweep it to plot a sensitivity")
    facets = [c for c in facet_cols if agg[c].nunique() > 1]
    panels: list[tuple[str, pd.DataFrame, list[str]]] = []
    for key, part in agg.groupby(facets, sort=False) if facets else [((), agg)]:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(figure_text.name(DATASET_LABELS.get(v, v)) for v in key)
        ordered = _ordered_methods(part["method"])
        groups = method_groups(ordered)
        first = 1
        for group in groups:
            span = f"methods {first}-{first + len(group) - 1} of {len(ordered)}" if len(groups) > 1 else ""
            panels.append((", ".join(t for t in (label, span) if t), part, group))
            first += len(group)
    if len(panels) > _MAX_SENSITIVITY_PANELS:
        raise ValueError(f"{len(panels)} panels (datasets x groups of six methods) are too many for one figure; "
                         "plot one dataset at a time (df[df.dataset == ...])")
    ncols = 1 if len(panels) == 1 else 2
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(width=6.4 * ncols, height=3.1 * nrows + 0.8)
    axes = panel_grid(fig, len(panels), ncols, sharex=True, sharey=True)
    positive = bool((agg[col] > 0).all())
    pretty = col[3:] if col.startswith("hp.") else col
    log_x = positive and (pretty == "lr" or agg[col].max() / agg[col].min() >= 10.0)
    for ax, (label, part, group) in zip(axes, panels):
        for i, method in enumerate(group):
            sub = part[part["method"] == method].sort_values(col)
            ax.errorbar(sub[col].to_numpy(dtype=float), sub["mean"].to_numpy(dtype=float),
                        yerr=sub["std"].to_numpy(dtype=float), color=method_color(method), capsize=3, marker="o",
                        ms=4, linestyle=LINE_STYLES[i % len(LINE_STYLES)], label=_shown(method))
        if log_x:
            ax.set_xscale("log")
        ax.set_title(label, fontsize="medium")
        _legend_beside(ax)
    unit = {"lr": "learning rate", "batch_size": "batch size (examples)"}.get(pretty, f"hyperparameter {pretty}")
    what = "test mAP" if metric == "test_map" else metric
    if len(axes) == 1:
        axes[0].set_xlabel(unit + (" (log scale)" if log_x else ""))
        axes[0].set_ylabel(f"{what} (%)")
    else:
        fig.supxlabel(unit + (" (log scale)" if log_x else ""))
        fig.supylabel(f"{what} (%)")
    context = ", ".join(
        figure_text.name(DATASET_LABELS.get(agg[c].iloc[0], agg[c].iloc[0])) for c in facet_cols if c not in facets
    )
    _suptitle(fig, f"Sensitivity to {pretty}" + (f" ({context})" if context else ""))
    return fig


# --------------------------------------------------------------------------- everything


def _analysis(record: Record, key: str) -> Any:
    """``record["analysis"][key]``, or None when the run has no analysis."""
    a = record.get("analysis")
    return a.get(key) if isinstance(a, dict) else None


def _as_frame(source: Any) -> pd.DataFrame:
    from .store import ResultsStore

    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, (str, os.PathLike)):
        if not Path(source).is_file():
            raise ValueError(f"results store {str(source)!r} does not exist")
        source = ResultsStore(source)
    if isinstance(source, ResultsStore):
        return source.to_dataframe()
    raise ValueError(f"expected a runs DataFrame, a ResultsStore or a store path, got {type(source).__name__}")


def _versus_an(plot: Callable[[Sequence[Record], Sequence[Record]], Figure]) -> Callable[[list[Record]], Figure]:
    """A per-group drawer of a comparison with AN: the group's AN runs against the others."""

    def draw(recs: list[Record]) -> Figure:
        an = [r for r in recs if r["method"] == "an"]
        others = [r for r in recs if r["method"] != "an"]
        if not an:
            raise NothingToPlot("it compares with AN and no AN run is here; add `an` to the sweep's methods")
        if not others:
            raise NothingToPlot("it compares other methods with AN and only AN ran here")
        return plot(others, an)

    return draw


#: the figures drawn per (dataset, observation), by file-name stem
_PER_DATASET: tuple[tuple[str, Callable[[list[Record]], Figure]], ...] = (
    ("densities", plot_unobserved_densities),
    ("wasserstein_vs_an", _versus_an(plot_wasserstein_vs_an)),
    ("ap_gain_vs_an", _versus_an(plot_classwise_ap_gain)),
    ("pseudo_labels", plot_pseudo_labels),
    ("training_curves", plot_training_curves),
)


def make_all_figures(
    df_or_store: Any,
    out_dir: str | os.PathLike,
    *,
    formats: Sequence[str] = ("png", "svg"),
    on_skip: Callable[[str], None] | None = None,
) -> list[Path]:
    """Render every figure the stored runs support into ``out_dir``; return the files.

    Per (dataset, observation), with the configuration of each method selected on mean
    validation mAP (:func:`~spmlkit.experiments.report.select_and_aggregate`): densities,
    Wasserstein vs AN and AP gain over AN, pseudo-labels and training curves, each file
    named after the figure, the dataset and the observation. Across configurations: a
    sensitivity figure for every hyperparameter that takes several values within a
    (dataset, observation, method), one per dataset and observation when the store holds
    several. A figure the runs cannot feed (:class:`NothingToPlot`: no method with a label
    state, no AN run, no analysis of unobserved labels, ...) is skipped and ``on_skip`` gets one line saying
    which and why; any other error is a bug and propagates.
    """
    df = _as_frame(df_or_store)
    out = Path(out_dir)
    files: list[Path] = []
    note = on_skip or (lambda _line: None)
    if df.empty:
        return files
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    if ok.empty:
        return files
    agg = select_and_aggregate(ok)
    chosen = {rid for ids in agg["run_ids"] for rid in ids}
    records = [r for r in ok.to_dict("records") if r["run_id"] in chosen]

    names = UniqueNames()  # one file per figure: user-chosen names never share a file (spmlkit/file_names.py)

    def emit(fig: Figure, *name: Any) -> None:
        files.extend(save(fig, out / names.name(*name), formats))

    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["observation"]), []).append(r)
    for (ds, obs), recs in groups.items():
        for stem, draw in _PER_DATASET:
            try:
                fig = draw(recs)
            except NothingToPlot as exc:
                note(f"figure {stem} ({ds}, {obs}) skipped: {exc}")
                continue
            emit(fig, stem, ds, obs)
    _sensitivity_figures(ok, emit, note)
    return files


def _sensitivity_figures(ok: pd.DataFrame, emit: Callable[..., None], note: Callable[[str], None]) -> None:
    """A sensitivity figure per swept hyperparameter, and per (dataset, observation) when
    the runs hold several (their file names then say which); a note when nothing is swept."""
    params = [p for p in ["lr", "batch_size"] + sorted(c for c in ok.columns if str(c).startswith("hp."))
              if p in ok.columns]
    by = [c for c in ("dataset", "observation", "method") if c in ok.columns]
    facet_cols = [c for c in by if c != "method"]
    facets = list(ok.groupby(facet_cols, sort=False)) if facet_cols else [((), ok)]
    drawn = False
    for p in params:
        name = p[3:] if p.startswith("hp.") else p
        for key, part in facets:
            if not (part[part[p].notna()].groupby(by)[p].nunique() > 1).any():
                continue
            key = key if isinstance(key, tuple) else (key,)
            emit(plot_sensitivity(part, p), "sensitivity", name, *(key if len(facets) > 1 else ()))
            drawn = True
    if not drawn:
        note("figure sensitivity skipped: no learning rate, batch size or method hyperparameter takes several "
             "values within a method; sweep one (e.g. lrs: [0.001, 0.01]) to get it")
