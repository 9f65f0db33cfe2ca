"""Every figure from stores of any size and mix: every benchmark method (28 or more), 3 methods, two datasets, methods
without a label state, a single AN run (docs/figures.md, "Sizes and layouts").

The figures are rendered with every warning raised as an error (matplotlib says
"constrained_layout not applied" when a legend crowds the axes out), and each one is checked
as a reader would see it: the PNG's size and aspect within the bounds, no text cut off at the
figure's edge, no legend over an axes, no two titles or axis labels on top of each other,
no two tick labels of one axis on top of each other. The stores are written through the
store API with records shaped like real ones (Yeast: 14 classes, 20 epochs), so the whole
file runs in seconds.
"""

from __future__ import annotations

import itertools
import struct
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from spmlkit.cli import main
from spmlkit.experiments.benchmark import default_methods
from spmlkit.experiments import plots
from spmlkit.experiments.figure_layout import (
    DPI,
    MAX_ASPECT,
    MAX_SIDE_PX,
    MIN_SIDE_PX,
    bounded_size,
    grid_shape,
    method_groups,
)
from spmlkit.experiments.store import ResultsStore

C, EPOCHS = 14, 20
BINS = np.linspace(0.0, 1.0, 51)
#: the Yeast benchmark's methods (every registered method with a meaning on features), in its order
BENCHMARK_METHODS = list(default_methods(["yeast"]))
N = len(BENCHMARK_METHODS)
#: how many panels of at most 6 methods they need, and how many methods each holds (near-equal, in order)
GROUPS = -(-N // 6)
SIZES = [N // GROUPS + (i < N % GROUPS) for i in range(GROUPS)]
#: the methods that keep a label state and report pseudo-labels (as the trainer writes them)
LABEL_STATE = {"em_apl": "pseudo_negatives", "ll_cp": "corrections", "opml_sp": "corrections"}


def real_like(method: str, seed: int = 0, lr: float = 1e-3, dataset: str = "yeast") -> dict[str, Any]:
    """A finished run shaped like the trainer's: methods without a label state report
    ``pseudo_negatives = corrections = 0.0`` and NaN accuracies at every epoch (the shape
    that crashed the report)."""
    rng = np.random.default_rng(zlib.crc32(repr((method, seed, lr, dataset)).encode()))
    q = rng.uniform(0, 1)
    hist_pos = np.stack([np.bincount(np.clip(rng.normal(15 + 20 * q, 6, 60).astype(int), 0, 49), minlength=50)
                         for _ in range(C)])
    hist_neg = np.stack([np.bincount(np.clip(rng.normal(12, 5, 500).astype(int), 0, 49), minlength=50)
                         for _ in range(C)])
    history = []
    for e in range(1, EPOCHS + 1):
        h: dict[str, Any] = {"epoch": e, "train_loss": 0.7 / e, "observed_pos_loss": 0.7 * (1 + q * (e / EPOCHS - 0.5)),
                             "val_map": 0.3 + 0.1 * q * (1 - np.exp(-e / 4)), "pseudo_negatives": 0.0,
                             "corrections": 0.0, "pseudo_label_accuracy": float("nan"),
                             "correction_accuracy": float("nan")}
        key = LABEL_STATE.get(method)
        if key:
            h[key] = float(100 * e)
            h["pseudo_label_accuracy"] = 0.9 - 0.01 * e
        history.append(h)
    val = 0.35 + 0.1 * q
    return {
        "run_id": f"{dataset}-{method}-{seed}-{lr}", "status": "ok", "sweep": "t", "dataset": dataset,
        "method": method, "observation": "single_positive", "seed": seed, "lr": lr, "batch_size": 64, "hparams": {},
        "config": {}, "history": history, "best_epoch": EPOCHS, "val_map": val, "test_map": val - 0.01,
        "test_metrics": {"map": val - 0.01}, "test_ap": list(np.clip(val + 0.05 * rng.standard_normal(C), 0, 1)),
        "class_names": [f"Class{i + 1}" for i in range(C)],
        "analysis": {"bins": BINS.tolist(), "hist_pos": hist_pos.tolist(), "hist_neg": hist_neg.tolist(),
                     "wasserstein": 0.05 + 0.1 * q, "wasserstein_per_class": list(0.02 + 0.2 * rng.uniform(0, 1, C))},
    }


def make_store(path: Path, methods: list[str], *, lrs: tuple[float, ...] = (1e-3, 1e-2),
               datasets: tuple[str, ...] = ("yeast",)) -> ResultsStore:
    store = ResultsStore(path)
    store.add_many(real_like(m, 0, lr, ds) for ds in datasets for m in methods for lr in lrs)
    return store


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def layout_problems(fig: Figure, *, drawn: bool = False) -> list[str]:
    """What a reader would see wrong in ``fig``: text past the edge, a legend over an axes,
    overlapping titles / axis labels / legends, overlapping tick labels of one axis.

    ``drawn``: the figure was just saved at its own dpi, so its layout is done and is read as
    the PNG shows it, without drawing it again."""
    if not drawn:
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    edge = fig.bbox
    out = []
    parts = [(f"panel {ax.get_title()!r}", ax.get_tightbbox(renderer)) for ax in fig.axes]  # with its ticks
    parts += [(repr(t.get_text()), t.get_window_extent(renderer)) for t in (fig._suptitle, fig._supxlabel,
                                                                            fig._supylabel) if t is not None]
    parts += [("a figure legend", leg.get_window_extent(renderer)) for leg in fig.legends]
    for what, b in parts:
        if b.x0 < edge.x0 - 1 or b.y0 < edge.y0 - 1 or b.x1 > edge.x1 + 1 or b.y1 > edge.y1 + 1:
            out.append(f"{what} is cut off at the figure's edge")
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    for leg, ax in itertools.product(legends, fig.axes):
        if leg.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)):
            out.append(f"a legend ({leg.get_texts()[0].get_text()!r}, ...) covers an axes")
    labels = [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
    labels += [t for t in (fig._suptitle, fig._supxlabel, fig._supylabel) if t is not None]
    boxes = [(repr(t.get_text()), t.get_window_extent(renderer)) for t in labels
             if t.get_visible() and t.get_text().strip()]
    boxes += [(f"legend {leg.get_texts()[0].get_text()!r}", leg.get_window_extent(renderer)) for leg in legends]
    for (a, ba), (b, bb) in itertools.combinations(boxes, 2):
        if ba.overlaps(bb):
            out.append(f"{a} overlaps {b}")
    for ax in fig.axes:  # tick labels outside the view are never drawn: only the ones along the axes count
        frame = ax.get_window_extent(renderer)
        for ticks, i in ((ax.get_xticklabels(), 0), (ax.get_yticklabels(), 1)):
            lo, hi = (frame.x0, frame.x1) if i == 0 else (frame.y0, frame.y1)
            boxes = [t.get_window_extent(renderer) for t in ticks if t.get_visible() and t.get_text()]
            centre = [(b.x0 + b.x1 if i == 0 else b.y0 + b.y1) / 2 for b in boxes]
            shown = sorted((b for b, c in zip(boxes, centre) if lo - 1 <= c <= hi + 1), key=lambda b: b.get_points()[0][i])
            out += [f"tick labels overlap in {ax.get_title()!r}" for a, b in zip(shown, shown[1:]) if a.overlaps(b)]
    return out


def render_all(store: ResultsStore | str, out: Path,
               monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Figure], list[str]]:
    """``make_all_figures`` with warnings as errors; its figures by file stem and its notes.
    Each file must be a PNG within the size and aspect bounds."""
    figures: dict[str, Figure] = {}
    real_save = plots.save

    def keep(fig: Figure, path: Any, formats: Any = ("png",)) -> list[Path]:
        figures[Path(path).name] = fig
        fig.set_dpi(DPI)  # the save then lays the figure out at the dpi the checks read it at
        return real_save(fig, path, formats)

    monkeypatch.setattr(plots, "save", keep)
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        files = plots.make_all_figures(store, out, formats=("png",), on_skip=notes.append)
        problems = {name: layout_problems(fig, drawn=True) for name, fig in figures.items()}
    assert {name: p for name, p in problems.items() if p} == {}
    for f in files:
        w, h = png_size(f)
        assert MIN_SIDE_PX <= w <= MAX_SIDE_PX and MIN_SIDE_PX <= h <= MAX_SIDE_PX, (f.name, w, h)
        assert max(w, h) / min(w, h) <= MAX_ASPECT, (f.name, w, h)
    assert sorted(f.stem for f in files) == sorted(figures)
    return figures, notes


PER_DATASET = ["densities", "wasserstein_vs_an", "ap_gain_vs_an", "pseudo_labels", "training_curves"]


# --------------------------------------------------------------------------- layout rules


def test_bounded_size_keeps_sides_and_aspect_in_bounds() -> None:
    lo, hi = MIN_SIDE_PX / DPI, MAX_SIDE_PX / DPI
    assert bounded_size(6.0, 4.0) == (6.0, 4.0)  # inside the bounds: untouched
    assert bounded_size(109.2, 3.4) == (hi, hi / 4)  # the old 26-panel strip: capped, then the aspect
    assert bounded_size(6.0, 90.0) == (hi / 4, hi)  # the old 26-panel column
    assert bounded_size(1.0, 1.0) == (lo, lo)
    assert bounded_size(20.0, 3.0) == (20.0, 5.0)  # aspect 6.7 -> 4 by raising the short side


def test_grid_shape_and_method_groups() -> None:
    assert [grid_shape(n) for n in (1, 3, 4, 5, 26, 30)] == [(1, 1), (1, 3), (1, 4), (2, 3), (4, 7), (5, 7)]
    names = [f"m{i}" for i in range(30)]
    assert [len(g) for g in method_groups(names[:28])] == [6, 6, 6, 5, 5]  # near-equal panels, at most 6
    assert [len(g) for g in method_groups(names)] == [6, 6, 6, 6, 6]
    assert [len(g) for g in method_groups(names[:7])] == [4, 3]
    groups = method_groups(BENCHMARK_METHODS)
    assert [len(g) for g in groups] == SIZES
    assert [m for g in groups for m in g] == BENCHMARK_METHODS  # order kept, nothing lost
    assert method_groups(["an", "em", "gr"]) == [["an", "em", "gr"]]
    with pytest.raises(ValueError, match="at least one panel"):
        grid_shape(0)


# --------------------------------------------------------------------------- every figure


def test_every_figure_from_every_benchmark_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert N >= 28 and {"an", "em_apl", "crisp", "smile"} <= set(BENCHMARK_METHODS)
    figures, notes = render_all(make_store(tmp_path / "r.db", BENCHMARK_METHODS), tmp_path / "f", monkeypatch)
    assert sorted(figures) == sorted([f"{s}_yeast_single_positive" for s in PER_DATASET] + ["sensitivity_lr"])
    assert notes == []
    # training curves: a row per group of at most 6 methods, 2 columns, a legend beside each row, AN as
    # the reference in the rows that do not hold it (AN is in the first group)
    curves = figures["training_curves_yeast_single_positive"]
    assert len(curves.axes) == 2 * GROUPS
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in curves.axes if ax.get_legend()]
    assert [len(texts) for texts in legends] == [SIZES[0]] + [k + 1 for k in SIZES[1:]]
    assert sum("AN (reference)" in texts for texts in legends) == GROUPS - 1
    # densities: one panel per method; Wasserstein: one panel per method but AN
    assert len(figures["densities_yeast_single_positive"].axes) == N
    assert len(figures["wasserstein_vs_an_yeast_single_positive"].axes) == N - 1
    # AP gain: a heat map of every method but AN x 14 classes (and its colour bar)
    heat = figures["ap_gain_vs_an_yeast_single_positive"].axes[0]
    assert heat.images[0].get_array().shape == (N - 1, C)
    # sensitivity: a panel per group of methods, log x for the learning rate
    sens = figures["sensitivity_lr"].axes
    assert len(sens) == GROUPS and all(ax.get_xscale() == "log" for ax in sens)
    assert sens[0].get_title() == f"methods 1-{SIZES[0]} of {N}"
    # pseudo-labels: only the three methods with a label state
    pseudo = figures["pseudo_labels_yeast_single_positive"].axes[-1]
    assert [t.get_text() for t in pseudo.get_legend().get_texts()] == ["LL-Cp", "EM+APL", "OPML-SP"]


def test_every_figure_from_3_methods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures, notes = render_all(make_store(tmp_path / "r.db", ["an", "em_apl", "gr"]), tmp_path / "f", monkeypatch)
    assert sorted(figures) == sorted([f"{s}_yeast_single_positive" for s in PER_DATASET] + ["sensitivity_lr"])
    assert notes == []
    w1 = figures["wasserstein_vs_an_yeast_single_positive"].axes
    assert len(w1) == 1 and [t.get_text().split(" (")[0] for t in w1[0].get_legend().get_texts()] == [
        "EM+APL", "GR", "equal distance"]
    gain = figures["ap_gain_vs_an_yeast_single_positive"].axes
    assert len(gain) == 2 and [len(ax.patches) for ax in gain] == [C, C]  # sorted bars, as in the paper
    assert len(figures["training_curves_yeast_single_positive"].axes) == 2


def test_two_datasets_get_their_own_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store(tmp_path / "r.db", ["an", "em", "gr", "ll_cp"], datasets=("yeast", "scene"))
    figures, notes = render_all(store, tmp_path / "f", monkeypatch)
    expected = [f"{s}_{ds}_single_positive" for ds in ("yeast", "scene") for s in PER_DATASET]
    expected += [f"sensitivity_lr_{ds}_single_positive" for ds in ("yeast", "scene")]
    assert sorted(figures) == sorted(expected)
    assert "scene" in figures["densities_scene_single_positive"].get_suptitle()
    assert "(scene, single_positive)" in figures["sensitivity_lr_scene_single_positive"].get_suptitle()


def test_a_plain_sensitivity_call_facets_datasets() -> None:
    def runs(datasets: tuple[str, ...]) -> pd.DataFrame:  # only what the sensitivity reads: fast to build
        keep = ("run_id", "status", "dataset", "method", "observation", "seed", "lr", "batch_size", "hparams",
                "val_map", "test_map")
        return pd.DataFrame([{k: real_like(m, 0, lr, ds)[k] for k in keep}
                             for ds in datasets for m in BENCHMARK_METHODS for lr in (1e-3, 1e-2)])

    df = runs(("yeast", "scene"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.plot_sensitivity(df, "lr")  # 2 datasets x the groups, each panel named
        assert layout_problems(fig) == []
    assert len(fig.axes) == 2 * GROUPS  # datasets in name order
    assert fig.axes[GROUPS].get_title() == f"yeast, methods 1-{SIZES[0]} of {N}"
    with pytest.raises(ValueError, match="plot one dataset at a time"):
        plots.plot_sensitivity(runs(("yeast", "scene", "emotions")), "lr")


# --------------------------------------------------------------------------- stores that crashed the report


def test_methods_without_label_state_skip_the_pseudo_label_figure(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store(tmp_path / "r.db", ["an", "em", "gr"], lrs=(1e-3,))
    figures, notes = render_all(store, tmp_path / "f", monkeypatch)
    assert sorted(figures) == sorted(f"{s}_yeast_single_positive" for s in PER_DATASET if s != "pseudo_labels")
    assert notes == [
        "figure pseudo_labels (yeast, single_positive) skipped: no method here keeps a label state (no pseudo-label "
        "accuracy, no pseudo-negative or correction counts); ll_cp, em_apl, opml_sp, boostlu_ll_cp and mime do",
        "figure sensitivity skipped: no learning rate, batch size or method hyperparameter takes several values "
        "within a method; sweep one (e.g. lrs: [0.001, 0.01]) to get it",
    ]


def test_a_single_run_of_one_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures, notes = render_all(make_store(tmp_path / "r.db", ["an"], lrs=(1e-3,)), tmp_path / "f", monkeypatch)
    assert sorted(figures) == ["densities_yeast_single_positive", "training_curves_yeast_single_positive"]
    assert [n.split(" skipped")[0] for n in notes] == [
        "figure wasserstein_vs_an (yeast, single_positive)", "figure ap_gain_vs_an (yeast, single_positive)",
        "figure pseudo_labels (yeast, single_positive)", "figure sensitivity"]
    assert notes[0].endswith("only AN ran here")


def test_no_an_and_no_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs without an analysis of their unobserved labels (no histograms: data of a user's own has no
    truth to measure them against) and without AN: only the training curves and the sensitivity remain,
    and the notes say why the others are missing, naming no option that does not exist."""
    store = ResultsStore(tmp_path / "r.db")
    store.add_many({**real_like(m, 0, lr), "analysis": None} for m in ("em", "gr") for lr in (1e-3, 1e-2))
    figures, notes = render_all(store, tmp_path / "f", monkeypatch)
    assert sorted(figures) == ["sensitivity_lr", "training_curves_yeast_single_positive"]
    assert notes[0] == ("figure densities (yeast, single_positive) skipped: no run record has analysis histograms; "
                        "the analysis of unobserved training labels needs the training rows' full labels, which every "
                        "named data set and extracted feature folder has, and data of your own (observed labels only) "
                        "does not")
    assert notes[1].endswith("no AN run is here; add `an` to the sweep's methods")


def test_report_command_over_label_free_methods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduction of the crash: `spmlkit report` on an an/em/gr store ends with exit 0,
    its tables and figures written, and a note per figure it skipped."""
    make_store(tmp_path / "base.db", ["an", "em", "gr"], lrs=(1e-3,))
    assert main(["report", "--store", str(tmp_path / "base.db"), "--out", str(tmp_path / "rep")]) == 0
    printed = capsys.readouterr().out
    assert "note: figure pseudo_labels (yeast, single_positive) skipped: no method here keeps a label state" in printed
    assert (tmp_path / "rep" / "table.md").is_file()
    assert sorted(p.name for p in (tmp_path / "rep" / "figures").glob("*.png")) == sorted(
        f"{s}_yeast_single_positive.png" for s in PER_DATASET if s != "pseudo_labels")


@pytest.mark.parametrize("n_methods", [2, 26])
def test_ap_gain_with_many_classes_stays_in_bounds(tmp_path: Path, n_methods: int) -> None:
    """CUB's 312 classes: bars (2 methods) or a heat map (26) within the bounds, class names
    left out rather than written on top of each other."""
    rng = np.random.default_rng(0)

    def run(method: str) -> dict[str, Any]:
        return {"run_id": method, "status": "ok", "dataset": "cub", "observation": "single_positive",
                "method": method, "test_ap": list(rng.uniform(0, 1, 312))}

    an = [run("an")]
    others = [run(m) for m in BENCHMARK_METHODS if m != "an"][:n_methods]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.plot_classwise_ap_gain(others, an)
        fig.set_dpi(DPI)
        (png,) = plots.save(fig, tmp_path / "gain", ("png",))
        assert layout_problems(fig, drawn=True) == []
    w, h = png_size(png)
    assert MIN_SIDE_PX <= min(w, h) and max(w, h) <= MAX_SIDE_PX and max(w, h) / min(w, h) <= MAX_ASPECT, (w, h)
    assert not any(t.get_text().startswith("class ") for ax in fig.axes for t in ax.get_xticklabels())
    xlabel = fig.axes[1 if n_methods == 2 else 0].get_xlabel()
    assert xlabel == ("class (sorted by gain; 312 classes)" if n_methods == 2
                      else "class (312, sorted by the compared methods' mean gain)")


def test_missing_values_draw_without_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A method whose every per-class AP is NaN (no test positives), NaN per-class distances
    and NaN validation scores in the history: drawn as gaps and "nan", never a warning."""
    def holes(method: str, lr: float) -> dict[str, Any]:
        r = real_like(method, 0, lr)
        if method == "em":
            r["test_ap"] = [float("nan")] * C
            r["analysis"]["wasserstein_per_class"] = [float("nan")] * (C - 2) + [0.1, 0.2]
            for h in r["history"][::2]:
                h["val_map"] = float("nan")
        return r

    store = ResultsStore(tmp_path / "r.db")
    store.add_many(holes(m, lr) for m in ["an", "em", "gr", "hill", "focal", "asl"] for lr in (1e-3, 1e-2))
    figures, notes = render_all(store, tmp_path / "f", monkeypatch)
    assert notes[0].startswith("figure pseudo_labels") and len(figures) == 5
    heat = figures["ap_gain_vs_an_yeast_single_positive"].axes[0]  # 5 methods: a heat map
    rows = [t.get_text() for t in heat.get_yticklabels()]
    assert [r.split(" (")[0] for r in rows] == ["Focal", "ASL", "Hill", "EM", "GR"] and rows[3] == "EM (+nan)"
    assert np.ma.getmaskarray(heat.images[0].get_array())[3].all()  # EM's row is blank (masked NaN)
