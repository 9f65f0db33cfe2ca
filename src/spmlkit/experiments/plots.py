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
"""

from __future__ import annotations

import colorsys
import hashlib
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .published import DATASET_LABELS, METHOD_LABELS, display_name
from .report import select_and_aggregate

__all__ = [
    "METHOD_COLORS",
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

#: fixed colours of the spmlkit methods (references dark/grey, families share a hue)
METHOD_COLORS: dict[str, str] = {
    "bce": "#000000",  # full labels: black
    "iun": "#525252",
    "an": "#969696",  # AN: grey
    "wan": "#bdbdbd",
    "dw": "#8c6d31",
    "l1r": "#bd9e39",
    "l2r": "#e7ba52",
    "an_ls": "#9e9ac8",
    "n_ls": "#6a51a3",
    "epr": "#e7969c",
    "entmin": "#17becf",
    "focal": "#ff7f0e",
    "asl": "#ffbb78",
    "hill": "#8c564b",
    "splc": "#c49c94",
    "role": "#2ca02c",  # ROLE: greens
    "role_li": "#98df8a",
    "ll_r": "#e6550d",  # large loss: oranges
    "ll_ct": "#fd8d3c",
    "ll_cp": "#a63603",
    "em": "#1f77b4",  # EM: blue
    "em_apl": "#08306b",  # EM+APL: dark blue
    "zlpr": "#bcbd22",
    "opml": "#9467bd",  # OPML: purples
    "opml_sp": "#54278f",
    "gr": "#d62728",  # GR: red
    "pu_mlc": "#e377c2",
}

_POS_STYLE = {"alpha": 0.45}
_NEG_COLOR = "#636363"


def method_color(name: str) -> str:
    """The colour of a method in every figure: fixed for spmlkit's methods, otherwise
    derived from an MD5 of the name (Python's ``hash`` is salted per process, MD5 is the
    same everywhere), with saturation and value kept in a readable range."""
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    h = hashlib.md5(name.encode("utf-8")).digest()
    r, g, b = colorsys.hsv_to_rgb(h[0] / 255.0, 0.55 + 0.35 * h[1] / 255.0, 0.55 + 0.35 * h[2] / 255.0)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def save(fig: Figure, path_without_ext: str | os.PathLike, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write ``fig`` as ``<path>.<fmt>`` for each format (parent folders are created)."""
    base = Path(path_without_ext)
    base.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")
        fig.savefig(path, format=fmt, dpi=150)  # constrained layout already fits the labels
        out.append(path)
    return out


# --------------------------------------------------------------------------- helpers


def _new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.8) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


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
    label = DATASET_LABELS.get(ds, str(ds)) if ds else ""
    return ", ".join([label] + obs) if label else ", ".join(obs)


def _require(records: Sequence[Record], what: str, hint: str) -> None:
    if not records:
        raise ValueError(f"no run record has {what}; {hint}")


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


def _class_names(records: Sequence[Record], num_classes: int) -> list[str]:
    for r in records:
        names = r.get("class_names")
        if names and len(names) == num_classes:
            return [str(n) for n in names]
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


def _plot_band(ax: Any, frame: pd.DataFrame, method: str, scale: float = 1.0, **kw: Any) -> None:
    """Mean over runs per epoch as a line, ± std (ddof = 0) as a band."""
    sub = frame[frame["method"] == method]
    if sub.empty:
        return
    grouped = sub.groupby("epoch")["value"]
    stats = pd.DataFrame({"mean": grouped.mean(), "std": grouped.std(ddof=0), "count": grouped.count()}).sort_index()
    x = stats.index.to_numpy(dtype=float)
    m = stats["mean"].to_numpy() * scale
    s = stats["std"].fillna(0.0).to_numpy() * scale
    color = method_color(method)
    ax.plot(x, m, color=color, label=display_name(method), marker="o" if len(x) < 15 else None, ms=3, **kw)
    if (stats["count"] > 1).any():
        ax.fill_between(x, m - s, m + s, color=color, alpha=0.18, linewidth=0)


class _EpochPanel(NamedTuple):
    """One panel of a per-epoch figure: a long table from :func:`_epoch_frame`, the factor
    applied to its values (100: fractions shown as percent), the title and the y label."""

    frame: pd.DataFrame
    scale: float
    title: str
    ylabel: str


def _epoch_figure(methods: Sequence[str], panels: Sequence[_EpochPanel], title: str) -> Figure:
    """Panels side by side, one band per method (:func:`_plot_band`) against the epoch.

    The epoch axis gets integer ticks; a panel gets a legend only when some method drew in
    it, so an empty panel carries no empty legend box.
    """
    fig, axes = _new_figure(ncols=len(panels), width=5.0, height=3.8)
    for m in methods:
        for ax, panel in zip(axes[0], panels):
            _plot_band(ax, panel.frame, m, scale=panel.scale)
    for ax, panel in zip(axes[0], panels):
        ax.set_title(panel.title)
        ax.set_ylabel(panel.ylabel)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- figures


def plot_unobserved_densities(
    records: Sequence[Record], class_index: int | None = None, *, log_y: bool = False
) -> Figure:
    """Densities of predicted probabilities on unobserved training labels, positives vs
    negatives, one panel per method (EM Fig. 2c/4b, GR Fig. 3).

    Uses ``analysis.hist_pos`` / ``hist_neg`` (counts per class and bin, at the best epoch),
    summed over seeds, for one class or all classes pooled; each histogram is normalised to
    a density (area 1), so the two groups compare despite their very different sizes. A
    method that separates hidden positives from hidden negatives shows two distant humps;
    AN squeezes both towards 0. The panel title gives the pooled Wasserstein distance
    (mean over seeds) when stored.
    """
    recs = [r for r in records if r.get("analysis") and r["analysis"].get("hist_pos") is not None]
    _require(recs, "analysis histograms", "train with the analysis pass enabled")
    groups = _by_method(recs)
    context = _context(recs)
    fig, axes = _new_figure(ncols=len(groups), width=4.2, height=3.4)
    for ax, (method, runs) in zip(axes[0], groups.items()):
        bins, pos, neg = _histograms(runs, class_index)
        width = np.diff(bins)
        bars = ax.bar(bins[:-1], _density(pos, bins), width=width, align="edge", color=method_color(method),
                      label="unobserved positives", **_POS_STYLE)
        steps = ax.stairs(_density(neg, bins), bins, color=_NEG_COLOR, linestyle="--", linewidth=1.4,
                          label="unobserved negatives")
        w = [float(r["analysis"]["wasserstein"]) for r in runs if _finite(r["analysis"].get("wasserstein"))]
        ax.set_title(display_name(method) + (f" (W1 = {np.mean(w):.3f})" if w and class_index is None else ""))
        ax.set_xlabel("predicted probability p")
        ax.set_xlim(0.0, 1.0)
        if log_y:
            ax.set_yscale("log")
        ax.legend(handles=[bars, steps], fontsize="small")
    axes[0][0].set_ylabel("density")
    which = "all classes pooled"
    if class_index is not None:
        names = _class_names(recs, len(recs[0]["analysis"]["hist_pos"]))
        which = f"class '{names[class_index]}'"
    fig.suptitle(f"Predictions on unobserved training labels ({which}; {context})")
    return fig


def plot_wasserstein_vs_an(records_method: Sequence[Record], records_an: Sequence[Record]) -> Figure:
    """Per-class Wasserstein distance between predictions on unobserved positives and
    negatives: each method against AN, one point per class, with the diagonal (EM Fig. 4a).

    Points above the diagonal are classes the method separates better than AN. Distances
    come from ``analysis.wasserstein_per_class``, averaged over seeds.
    """
    key = "wasserstein_per_class"
    recs, an, context = _method_and_an_runs(
        records_method, records_an, lambda r: r.get("analysis") and r["analysis"].get(key) is not None,
        f"analysis.{key}", "pass records trained with the analysis pass",
    )
    w_an = _mean_vector(an, lambda r: r["analysis"][key])
    fig, axes = _new_figure(width=5.0, height=4.6)
    ax = axes[0][0]
    top = np.nanmax(w_an) if np.isfinite(w_an).any() else 1.0
    for method, runs in _by_method(recs).items():
        w = _class_vector_like_an(method, runs, lambda r: r["analysis"][key], w_an)
        ok = np.isfinite(w) & np.isfinite(w_an)
        above = int(np.sum(w[ok] > w_an[ok]))
        ax.scatter(w_an[ok], w[ok], s=18, color=method_color(method), alpha=0.85,
                   label=f"{display_name(method)} ({above}/{int(ok.sum())} classes above)")
        if ok.any():
            top = max(top, float(np.nanmax(w[ok])))
    lim = 1.05 * top if top > 0 else 1.0
    ax.plot([0, lim], [0, lim], color="black", linewidth=0.8, linestyle=":", label="equal distance (y = x)")
    ax.set_xlim(0, lim)
    ax.set_ylim(0, lim)
    ax.set_aspect("equal")
    ax.set_xlabel("Wasserstein distance, AN")
    ax.set_ylabel("Wasserstein distance, method")
    ax.set_title(f"Per-class W1, unobserved positives vs negatives\n({context})")
    ax.legend(fontsize="small")
    return fig


def plot_classwise_ap_gain(records_method: Sequence[Record], records_an: Sequence[Record]) -> Figure:
    """Class-wise test AP improvement over AN, sorted, in AP points (EM Fig. 4c).

    ``gain_c = 100 * (AP_c(method) - AP_c(AN))`` with APs averaged over seeds; bars sorted
    from the largest gain down, one panel per method. Classes the method hurts show as
    negative bars, which a mean over classes (the mAP) hides.
    """
    recs, an, context = _method_and_an_runs(
        records_method, records_an, lambda r: r.get("test_ap"), "test_ap", "pass finished records"
    )
    ap_an = _mean_vector(an, lambda r: r["test_ap"])
    names = _class_names(an, ap_an.size)
    groups = _by_method(recs)
    fig, axes = _new_figure(nrows=len(groups), width=max(6.0, 0.16 * ap_an.size + 2), height=3.6)
    for ax, (method, runs) in zip(axes[:, 0], groups.items()):
        ap = _class_vector_like_an(method, runs, lambda r: r["test_ap"], ap_an)
        gain = 100.0 * (ap - ap_an)
        order = np.argsort(-np.nan_to_num(gain, nan=-np.inf), kind="stable")
        color = method_color(method)
        ax.bar(np.arange(gain.size), gain[order], color=color,
               label=f"{display_name(method)} (mean gain {np.nanmean(gain):+.2f})")
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(gain.size))
        ax.set_xticklabels([names[i] for i in order], rotation=90, fontsize=6 if gain.size > 30 else 8)
        ax.set_ylabel("AP gain over AN (AP points)")
        ax.set_title(f"{display_name(method)} vs AN")
        ax.legend(fontsize="small")
    axes[-1, 0].set_xlabel("class (sorted by gain)")
    fig.suptitle(f"Class-wise test AP gain over AN ({context})")
    return fig


def plot_pseudo_labels(records: Sequence[Record]) -> Figure:
    """Pseudo-label accuracy (%) and number of pseudo-labels per epoch, one line per method
    (mean over seeds, ± std band), for methods with a label state (EM Table 4 as curves).

    Accuracy is the history's ``pseudo_label_accuracy`` (fraction of pseudo-labels whose
    hard value equals the truth); the count is ``pseudo_negatives + corrections`` (whichever
    the method reports). Methods without these keys are left out.
    """
    acc = _history_frame(records, "pseudo_label_accuracy")
    count = _epoch_frame(records, _pseudo_label_count)
    # methods without a label state report zero pseudo-labels at every epoch: leave them out
    makers = set(count.loc[count["value"] > 0, "method"]) | set(acc.dropna(subset=["value"])["method"] if not acc.empty else [])
    count = count[count["method"].isin(makers)]
    acc = acc[acc["method"].isin(makers)] if not acc.empty else acc
    if acc.empty and count.empty:
        raise ValueError(
            "no run history has pseudo_label_accuracy, pseudo_negatives or corrections; only methods "
            "with a label state (em_apl, ll_cp, opml_sp, splc, ...) produce them"
        )
    ok = [r for r in records if r.get("status", "ok") == "ok"]
    context = _context(ok)
    methods = _ordered_methods(set(acc["method"]) | set(count["method"]))
    panels = [
        _EpochPanel(acc, 100.0, "Pseudo-label accuracy", "accuracy of pseudo-labels (%)"),
        _EpochPanel(count, 1.0, "Pseudo-labels in the label state", "number of pseudo-labels"),
    ]
    return _epoch_figure(methods, panels, f"Pseudo-labels during training ({context})")


def plot_training_curves(records: Sequence[Record]) -> Figure:
    """Loss on observed positives (mean ``-log p`` on the training set's observed positives)
    and validation mAP (%) per epoch, one line per method, mean over seeds with a ± std band.

    The positive loss shows how fast a method fits the one label it trusts; a method that
    keeps it high while val mAP rises is regularising, one whose val mAP drops while the
    loss keeps falling is memorising its assumed negatives.
    """
    ok = [r for r in records if r.get("status", "ok") == "ok" and r.get("history")]
    _require(ok, "a history", "pass finished records")
    context = _context(ok)
    panels = [
        _EpochPanel(_history_frame(ok, "observed_pos_loss"), 1.0, "Loss on observed positives (training set)",
                    "mean -log p on observed positives (nats)"),
        _EpochPanel(_history_frame(ok, "val_map"), 100.0, "Validation mAP", "validation mAP (%)"),
    ]
    return _epoch_figure(_ordered_methods(r["method"] for r in ok), panels, f"Training curves ({context})")


def _param_column(df: pd.DataFrame, param: str) -> str:
    for name in (param, f"hp.{param}"):
        if name in df.columns:
            return name
    hp = [c for c in df.columns if str(c).startswith("hp.")]
    raise ValueError(f"no column {param!r} (or 'hp.{param}'); sweepable columns: lr, batch_size, {', '.join(hp)}")


def plot_sensitivity(df: pd.DataFrame, param: str, *, metric: str = "test_map") -> Figure:
    """Test mAP (%) against one swept hyperparameter, mean ± std over seeds, one line per
    method (and dataset/observation when several are present) (EM Fig. 3a, GR Fig. 2).
    Methods for which ``param`` takes a single value are left out.

    ``param`` is a runs-DataFrame column (``lr``, ``batch_size``) or a method hyperparameter
    (``alpha`` or ``hp.alpha``). When other hyperparameters were swept too, each point uses
    the configuration with the best mean validation mAP at that value of ``param``
    (:func:`~spmlkit.experiments.report.select_and_aggregate`), so the curve shows what
    tuning the rest can reach. The x-axis is logarithmic when the positive values span more
    than a decade.
    """
    col = _param_column(df, param)
    d = df[df["status"] == "ok"] if "status" in df.columns else df
    d = d[d[col].notna()]
    if d.empty:
        raise ValueError(f"no finished run sets {col!r}")
    by = [c for c in ("dataset", "observation", "method") if c in d.columns]
    config = [c for c in ("lr", "batch_size", "hparams") if c in d.columns and c != col]
    agg = select_and_aggregate(d, by=by + [col], config_keys=config, metric=metric)
    facets = [c for c in ("dataset", "observation") if c in agg.columns and agg[c].nunique() > 1]
    fig, axes = _new_figure(width=5.6, height=4.0)
    ax = axes[0][0]
    styles = ["-", "--", ":", "-."]
    facet_values = sorted({tuple(r[c] for c in facets) for r in agg.to_dict("records")}, key=str)
    drawn = 0
    for (key, sub) in agg.groupby([c for c in by if c != "method"] + ["method"], sort=False, dropna=False):
        rec = dict(zip([c for c in by if c != "method"] + ["method"], key if isinstance(key, tuple) else (key,)))
        if sub[col].nunique() < 2:
            continue  # not swept for this method: a lone point is no sensitivity
        drawn += 1
        sub = sub.sort_values(col)
        x = sub[col].to_numpy(dtype=float)
        fkey = tuple(rec[c] for c in facets)
        label = display_name(rec["method"]) + ("" if not facets else " — " + ", ".join(map(str, fkey)))
        ax.errorbar(x, sub["mean"].to_numpy(dtype=float), yerr=sub["std"].to_numpy(dtype=float),
                    color=method_color(rec["method"]), capsize=3, marker="o", ms=4,
                    linestyle=styles[facet_values.index(fkey) % len(styles)], label=label)
    if not drawn:
        raise ValueError(f"{col!r} takes a single value within every method; sweep it to plot a sensitivity")
    xs = agg[col].to_numpy(dtype=float)
    pos = xs[xs > 0]
    if pos.size and pos.size == xs.size and pos.max() / pos.min() > 10.0:
        ax.set_xscale("log")
    pretty = col[3:] if col.startswith("hp.") else col
    unit = {"lr": "learning rate", "batch_size": "batch size (examples)"}.get(pretty, f"hyperparameter {pretty}")
    ax.set_xlabel(unit)
    what = "test mAP" if metric == "test_map" else metric
    ax.set_ylabel(f"{what} (%)")
    context = ", ".join(
        str(DATASET_LABELS.get(agg[c].iloc[0], agg[c].iloc[0]))
        for c in ("dataset", "observation") if c in agg.columns and c not in facets
    )
    ax.set_title(f"Sensitivity to {pretty}" + (f"\n({context})" if context else ""))
    ax.legend(fontsize="small")
    return fig


# --------------------------------------------------------------------------- everything


def _analysis(record: Record, key: str) -> Any:
    """``record["analysis"][key]``, or None when the run has no analysis."""
    a = record.get("analysis")
    return a.get(key) if isinstance(a, dict) else None


def _slug(*parts: Any) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9._]+", "-", str(p)).strip("-") for p in parts if p not in (None, ""))


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


def make_all_figures(
    df_or_store: Any, out_dir: str | os.PathLike, *, formats: Sequence[str] = ("png", "svg")
) -> list[Path]:
    """Render every figure the stored runs support into ``out_dir``; return the files.

    Per (dataset, observation), with the configuration of each method selected on mean
    validation mAP (:func:`~spmlkit.experiments.report.select_and_aggregate`): densities,
    Wasserstein vs AN and AP gain over AN (when AN runs exist), pseudo-labels (when a method
    reports them) and training curves. Across configurations: a sensitivity figure for
    every hyperparameter that takes several values within a (dataset, observation, method).
    """
    df = _as_frame(df_or_store)
    out = Path(out_dir)
    files: list[Path] = []
    if df.empty:
        return files
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    if ok.empty:
        return files
    agg = select_and_aggregate(ok)
    chosen = {rid for ids in agg["run_ids"] for rid in ids}
    records = [r for r in ok.to_dict("records") if r["run_id"] in chosen]

    def emit(fig: Figure, *name: Any) -> None:
        files.extend(save(fig, out / _slug(*name), formats))

    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["observation"]), []).append(r)
    for (ds, obs), recs in groups.items():
        with_hist = [r for r in recs if _analysis(r, "hist_pos") is not None]
        if with_hist:
            emit(plot_unobserved_densities(with_hist), "densities", ds, obs)
        an = [r for r in recs if r["method"] == "an"]
        others = [r for r in recs if r["method"] != "an"]
        if an and others:
            key = "wasserstein_per_class"
            if any(_analysis(r, key) is not None for r in an) and any(_analysis(r, key) is not None for r in others):
                emit(plot_wasserstein_vs_an(others, an), "wasserstein_vs_an", ds, obs)
            if any(r.get("test_ap") for r in an) and any(r.get("test_ap") for r in others):
                emit(plot_classwise_ap_gain(others, an), "ap_gain_vs_an", ds, obs)
        if any(_finite(h.get(k)) for r in recs for h in (r.get("history") or [])
               for k in ("pseudo_label_accuracy",) + _PSEUDO_COUNT_KEYS):
            emit(plot_pseudo_labels(recs), "pseudo_labels", ds, obs)
        if any(r.get("history") for r in recs):
            emit(plot_training_curves(recs), "training_curves", ds, obs)

    params = ["lr", "batch_size"] + sorted(c for c in ok.columns if str(c).startswith("hp."))
    by = [c for c in ("dataset", "observation", "method") if c in ok.columns]
    for p in params:
        if p not in ok.columns:
            continue
        counts = ok[ok[p].notna()].groupby(by)[p].nunique()
        if (counts > 1).any():
            emit(plot_sensitivity(ok, p), "sensitivity", p[3:] if p.startswith("hp.") else p)
    return files
