"""Tests for spmlkit.experiments.plots: every figure renders from a small fabricated store."""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from spmlkit.experiments import plots
from spmlkit.experiments.published import METHOD_LABELS
from spmlkit.experiments.store import ResultsStore

C = 4
BINS = np.linspace(0.0, 1.0, 51)
NAMES = ["aeroplane", "bicycle", "bird", "boat"]


def fake_record(method: str, seed: int, *, lr: float = 1e-3, hparams: dict[str, Any] | None = None,
                quality: float = 0.0) -> dict[str, Any]:
    """A plausible run: `quality` shifts the hidden positives' predictions upwards."""
    rng = np.random.default_rng(zlib.crc32(repr((method, seed, lr, hparams)).encode()))
    pos_centre = int(10 + 25 * quality)
    hist_pos = np.zeros((C, 50), dtype=int)
    hist_neg = np.zeros((C, 50), dtype=int)
    for c in range(C):
        hist_pos[c] = np.bincount(np.clip(rng.normal(pos_centre + c, 4, 40).astype(int), 0, 49), minlength=50)
        hist_neg[c] = np.bincount(np.clip(rng.normal(3, 3, 300).astype(int), 0, 49), minlength=50)
    history = []
    for e in range(1, 5):
        h: dict[str, Any] = {"epoch": e, "train_loss": 1.0 / e, "observed_pos_loss": 0.9 / e + 0.01 * seed,
                             "val_map": 0.5 + 0.05 * e + 0.1 * quality + 0.01 * seed, "epoch_seconds": 0.1}
        if method == "em_apl":
            h.update(pseudo_negatives=100 * e, pseudo_label_accuracy=0.99 - 0.01 * e + 0.002 * seed,
                     pseudo_negative_accuracy=0.99)
        else:
            h.update(pseudo_negatives=float("nan"), pseudo_label_accuracy=float("nan"))
        history.append(h)
    val = 0.7 + 0.1 * quality + 0.01 * seed
    return {
        "run_id": f"{method}-{seed}-{lr}-{sorted((hparams or {}).items())}",
        "status": "ok", "sweep": "t", "dataset": "voc2012", "method": method, "observation": "single_positive",
        "seed": seed, "lr": lr, "batch_size": 8, "hparams": hparams or {}, "config": {},
        "history": history, "best_epoch": 4, "val_map": val, "test_map": val - 0.02,
        "test_metrics": {"map": val - 0.02}, "test_ap": list(np.clip(val - 0.02 + 0.05 * rng.standard_normal(C), 0, 1)),
        "class_names": NAMES,
        "analysis": {"bins": BINS.tolist(), "hist_pos": hist_pos.tolist(), "hist_neg": hist_neg.tolist(),
                     "wasserstein": 0.1 + 0.4 * quality,
                     "wasserstein_per_class": list(0.1 + 0.4 * quality + 0.02 * np.arange(C))},
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    s = ResultsStore(tmp_path_factory.mktemp("plots") / "runs.sqlite")
    recs = []
    for seed in (0, 1):
        for lr in (1e-4, 1e-3, 1e-2):
            recs.append(fake_record("an", seed, lr=lr, quality=0.0 if lr == 1e-3 else -0.1))
        recs.append(fake_record("em", seed, quality=0.6))
        recs.append(fake_record("gr", seed, quality=0.8))
        for alpha in (0.01, 0.1, 1.0):
            recs.append(fake_record("em_apl", seed, hparams={"alpha": alpha}, quality=0.7 if alpha == 0.1 else 0.5))
    recs.append({**fake_record("em", 9), "run_id": "boom", "status": "failed", "error": "RuntimeError: x",
                 "val_map": None, "test_map": None})
    s.add_many(recs)
    return s


def chosen(store: ResultsStore, method: str) -> list[dict[str, Any]]:
    """The selected configuration of the fabricated sweep: lr 1e-3 and (EM+APL) alpha 0.1."""
    return [r for r in store.records(method=method, status="ok", lr=1e-3) if r["hparams"].get("alpha") in (None, 0.1)]


def legend_texts(ax: Any) -> list[str]:
    leg = ax.get_legend()
    assert leg is not None, "axes without legend"
    return [t.get_text() for t in leg.get_texts()]


def check_labelled(fig: Figure) -> None:
    """A figure says what it shows: a title (its own or the figure's) and axis labels
    (the panel's or the figure's shared ones)."""
    assert fig.get_suptitle() or all(ax.get_title() for ax in fig.axes), "a figure has a title"
    shared = fig.get_supxlabel() or fig.get_supylabel()
    for ax in fig.axes:
        assert ax.get_xlabel() or ax.get_ylabel() or shared, "every panel's axes are labelled"


def test_method_color() -> None:
    assert plots.method_color("an") == "#969696"
    assert plots.method_color("em") == "#1f77b4" and plots.method_color("em_apl") == "#08306b"
    assert plots.method_color("gr") == "#d62728"
    assert set(plots.METHOD_COLORS) == set(METHOD_LABELS)
    assert len(set(plots.METHOD_COLORS.values())) == len(plots.METHOD_COLORS)  # all distinct
    a = plots.method_color("my_new_method")
    assert re.fullmatch(r"#[0-9a-f]{6}", a) and a == plots.method_color("my_new_method")
    assert a != plots.method_color("my_other_method")


def test_densities(store: ResultsStore, tmp_path: Path) -> None:
    recs = chosen(store, "an") + chosen(store, "em") + chosen(store, "gr")
    fig = plots.plot_unobserved_densities(recs)
    check_labelled(fig)
    assert [ax.get_title().split("\n")[0] for ax in fig.axes] == ["AN", "EM", "GR"]
    # the pooled W1 (mean over the two seeds) under the name: 0.1 + 0.4 quality, EM's quality is 0.6
    assert fig.axes[1].get_title() == "EM\nW1 = 0.340"
    assert "all classes pooled" in fig.get_suptitle()
    assert fig.get_supylabel() == "density"
    assert [ax.get_xlabel() for ax in fig.axes] == ["predicted probability p"] * 3
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "unobserved positives (filled, in the method's colour)", "unobserved negatives"]
    # the filled steps are densities: area under the positive histogram is 1, in the method's colour
    positives, negatives = fig.axes[1].patches  # two StepPatches: filled positives, dashed negatives
    values, edges = positives.get_data().values, positives.get_data().edges
    assert np.sum(values * np.diff(edges)) == pytest.approx(1.0)
    np.testing.assert_allclose(edges, BINS)
    assert to_hex(positives.get_facecolor()) == plots.method_color("em") and positives.get_fill()
    assert not negatives.get_fill() and negatives.get_linestyle() == "--"
    one = plots.plot_unobserved_densities(recs, class_index=2)
    assert "class 'bird'" in one.get_suptitle()
    files = plots.save(fig, tmp_path / "a" / "densities")
    assert [f.name for f in files] == ["densities.png", "densities.svg"]
    assert files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in files[1].read_text()
    with pytest.raises(ValueError, match="class_index"):
        plots.plot_unobserved_densities(recs, class_index=7)


def test_wasserstein_and_ap_gain(store: ResultsStore) -> None:
    an = chosen(store, "an")
    methods = chosen(store, "em") + chosen(store, "em_apl")
    fig = plots.plot_wasserstein_vs_an(methods, an)
    check_labelled(fig)
    ax = fig.axes[0]
    texts = legend_texts(ax)
    assert [t.split(" (")[0] for t in texts] == ["EM", "EM+APL", "equal distance"]
    assert texts[0] == "EM (4/4 classes above)"
    # the scatter of EM: x = AN's distance, y = EM's, per class (mean over 2 seeds)
    pts = ax.collections[0].get_offsets()
    np.testing.assert_allclose(pts[:, 0], 0.1 + 0.02 * np.arange(C))
    np.testing.assert_allclose(pts[:, 1], 0.1 + 0.4 * 0.6 + 0.02 * np.arange(C))
    assert to_hex(ax.collections[0].get_facecolor()[0]) == plots.method_color("em")

    fig = plots.plot_classwise_ap_gain(chosen(store, "gr"), an)
    check_labelled(fig)
    ax = fig.axes[0]
    heights = np.array([p.get_height() for p in ax.patches])
    ap_gr = np.mean([r["test_ap"] for r in chosen(store, "gr")], axis=0)
    ap_an = np.mean([r["test_ap"] for r in an], axis=0)
    np.testing.assert_allclose(heights, np.sort(100 * (ap_gr - ap_an))[::-1])
    assert [t.get_text() for t in ax.get_xticklabels()] == [NAMES[i] for i in np.argsort(-(ap_gr - ap_an))]
    assert ax.get_ylabel() == "AP gain (AP points)"
    assert ax.get_title() == f"GR vs AN (mean gain {np.mean(100 * (ap_gr - ap_an)):+.2f})"


def test_pseudo_labels_and_training_curves(store: ResultsStore) -> None:
    recs = chosen(store, "an") + chosen(store, "em") + chosen(store, "em_apl")
    fig = plots.plot_pseudo_labels(recs)
    check_labelled(fig)
    acc_ax, count_ax = fig.axes
    assert acc_ax.get_legend() is None  # the legend sits beside the row, right of the last panel
    assert legend_texts(count_ax) == ["EM+APL"]  # AN and EM have no label state
    assert acc_ax.get_ylabel() == "accuracy of pseudo-labels (%)" and acc_ax.get_xlabel() == "epoch"
    line = acc_ax.get_lines()[0]
    # mean over seeds 0 and 1 of (0.99 - 0.01 e + 0.002 s), in percent
    np.testing.assert_allclose(line.get_ydata(), [100 * (0.99 - 0.01 * e + 0.001) for e in range(1, 5)])
    np.testing.assert_allclose(count_ax.get_lines()[0].get_ydata(), [100, 200, 300, 400])
    with pytest.raises(ValueError, match="label state"):
        plots.plot_pseudo_labels(chosen(store, "an"))

    fig2 = plots.plot_training_curves(recs)
    check_labelled(fig2)
    loss_ax, val_ax = fig2.axes
    assert legend_texts(val_ax) == ["AN", "EM", "EM+APL"] and loss_ax.get_legend() is None
    assert val_ax.get_ylabel() == "validation mAP (%)"
    # colours agree across figures
    assert loss_ax.get_lines()[2].get_color() == line.get_color() == plots.method_color("em_apl")
    # the band is mean +- population std over seeds: loss 0.9/e + 0.01 s, s in {0, 1} -> std 0.005
    np.testing.assert_allclose(loss_ax.get_lines()[0].get_ydata(), [0.9 / e + 0.005 for e in range(1, 5)])
    with pytest.raises(ValueError, match="mix datasets"):
        plots.plot_training_curves(recs + [{**recs[0], "dataset": "cub"}])


def _own_data(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as a run on data of one's own records it: no analysis and no pseudo-label accuracy
    (no truth for the training rows), validation mAP on observed labels."""
    history = [{**h, "pseudo_label_accuracy": float("nan")} for h in record["history"]]
    return {**record, "analysis": {}, "history": history, "observation": "given", "val_map_labels": "observed",
            "test_map_labels": "full"}


def test_pseudo_labels_on_data_of_ones_own_leave_the_accuracy_out_and_say_why(store: ResultsStore) -> None:
    """The accuracy panel was an empty 0-1 axis labelled %; now it is left out and the title says why."""
    recs = [_own_data(r) for r in chosen(store, "an") + chosen(store, "em_apl")]
    fig = plots.plot_pseudo_labels(recs)
    check_labelled(fig)
    (count_ax,) = fig.axes
    assert count_ax.get_ylabel() == "number of pseudo-labels" and legend_texts(count_ax) == ["EM+APL"]
    assert not any("%" in ax.get_ylabel() or "accuracy" in ax.get_title().lower() for ax in fig.axes)
    assert fig.get_suptitle().replace("\n", " ") == (
        "Pseudo-labels during training (VOC, given) no accuracy shown: it is measured against the training "
        "rows' full labels, which data of your own does not have")


def test_training_curves_say_which_labels_validation_mAP_is_measured_on(store: ResultsStore) -> None:
    recs = chosen(store, "an") + chosen(store, "em")
    own = plots.plot_training_curves([_own_data(r) for r in recs])
    val_ax = own.axes[1]
    assert val_ax.get_title() == "Validation mAP (observed labels)"
    assert val_ax.get_ylabel() == "validation mAP on observed labels (%)"
    full = plots.plot_training_curves([{**r, "val_map_labels": "full"} for r in recs])
    assert full.axes[1].get_title() == "Validation mAP (full labels)"
    mixed = plots.plot_training_curves([_own_data(recs[0]), *({**r, "val_map_labels": "full"} for r in recs[1:])])
    assert mixed.axes[1].get_title() == "Validation mAP (full or observed labels)"
    assert plots.plot_training_curves(recs).axes[1].get_title() == "Validation mAP"  # records that do not say


def test_sensitivity(store: ResultsStore) -> None:
    df = store.to_dataframe()
    fig = plots.plot_sensitivity(df, "alpha")
    check_labelled(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "hyperparameter alpha (log scale)"
    assert ax.get_ylabel() == "test mAP (%)"
    assert legend_texts(ax) == ["EM+APL"]
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [0.01, 0.1, 1.0])
    # test = 0.68 + 0.1 q + 0.01 s; mean over s in {0, 1}: q = 0.5 / 0.7 / 0.5
    np.testing.assert_allclose(line.get_ydata(), [100 * (0.68 + 0.1 * q + 0.005) for q in (0.5, 0.7, 0.5)])
    assert line.get_color() == plots.method_color("em_apl")
    fig = plots.plot_sensitivity(df, "lr")
    assert legend_texts(fig.axes[0]) == ["AN"] and fig.axes[0].get_xscale() == "log"  # only AN swept lr
    with pytest.raises(ValueError, match="single value"):
        plots.plot_sensitivity(df, "batch_size")
    with pytest.raises(ValueError, match="sweepable columns"):
        plots.plot_sensitivity(df, "nope")


def test_make_all_figures(store: ResultsStore, tmp_path: Path) -> None:
    files = plots.make_all_figures(store, tmp_path / "figs")
    names = sorted(f.name for f in files)
    stems = sorted({n.rsplit(".", 1)[0] for n in names})
    assert stems == sorted([
        "densities_voc2012_single_positive", "wasserstein_vs_an_voc2012_single_positive",
        "ap_gain_vs_an_voc2012_single_positive", "pseudo_labels_voc2012_single_positive",
        "training_curves_voc2012_single_positive", "sensitivity_lr", "sensitivity_alpha",
    ])
    assert len(names) == 2 * len(stems)
    for f in files:
        assert f.is_file() and f.stat().st_size > 1000
        head = f.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if f.suffix == ".png" else b"<svg" in f.read_bytes()
    # a store path works too (here: only the data of AN, so no comparison with AN and no
    # pseudo-labels); an empty frame gives nothing
    only_an = ResultsStore(tmp_path / "an.sqlite")
    only_an.add_many(store.records(method="an"))
    files = plots.make_all_figures(str(only_an.path), tmp_path / "f2", formats=("png",))
    assert sorted(f.name for f in files) == [
        "densities_voc2012_single_positive.png", "sensitivity_lr.png", "training_curves_voc2012_single_positive.png",
    ]
    assert plots.make_all_figures(pd.DataFrame(), tmp_path / "f3") == []


def test_the_ap_gain_heat_maps_colours_serve_the_compared_methods_not_the_references() -> None:
    """The references gain several times more (they see more labels); a colour range wide enough
    for them washed the single-positive rows out. The range holds 90 % of the compared methods'
    |gains|; larger ones saturate, the colour bar's arrows say so, and the references come last."""
    classes = 10
    gains = {"bce": np.linspace(-5.0, 30.0, classes), "em": np.linspace(-2.0, 2.5, classes),
             "role": np.linspace(-1.0, 1.5, classes), "epr": np.r_[np.linspace(-1.5, 1.0, classes - 1), -12.0],
             "iun": np.linspace(0.0, 25.0, classes), "an_ls": np.linspace(-0.5, 0.5, classes)}
    fig = plots._ap_gain_heatmap(gains, [f"c{i}" for i in range(classes)], True)
    ax = fig.axes[0]
    compared = np.abs(np.concatenate([gains[m] for m in ("em", "role", "epr", "an_ls")]))
    span = float(np.quantile(compared, 0.9))
    assert span == pytest.approx(1.55)  # 36 of the 40 compared gains lie within 1.55 points; bce reaches 30
    assert ax.images[0].norm.vmin == -span and ax.images[0].norm.vmax == span
    assert ax.images[0].colorbar.extend == "both"  # epr's -12 and the references' gains saturate
    labels = [re.sub(r"( \(reference\))? \([+-][0-9.]+\)$", "", t.get_text()) for t in ax.get_yticklabels()]
    assert labels == ["EM", "ROLE", "EPR", "LS", "All P. & All N. (BCE)", "1 P. & All N. (BCE)"]
    assert [t.get_text() for t in ax.get_yticklabels()][-1].endswith("(reference) (+12.50)")
    # the classes are ordered by the compared methods' mean gain, not by the references'
    shown = np.asarray(ax.images[0].get_array())
    means = shown[:4].mean(axis=0)
    assert np.all(np.diff(means) <= 1e-12)


def test_figures_of_a_data_set_given_as_a_folder_are_named_as_docs_figures_says(store: ResultsStore,
                                                                                tmp_path: Path) -> None:
    """docs/figures.md named every figure `<figure>_<dataset>_<observation>.png`; a data set given as a
    folder (its path holds a `/`) gets the digest form, which the page now shows with its real names."""
    recs = [{**_own_data(r), "dataset": "prepared/mytable"} for r in chosen(store, "an") + chosen(store, "em_apl")]
    own = ResultsStore(tmp_path / "own.sqlite")
    own.add_many(recs)
    names = sorted(f.name for f in plots.make_all_figures(own, tmp_path / "figs", formats=("png",)))
    assert "training_curves_prepared-mytable_given~40e2083407.png" in names
    assert "pseudo_labels_prepared-mytable_given~4fadb0e10b.png" in names
    assert all(re.fullmatch(r"[a-z_]+_prepared-mytable_given~[0-9a-f]{10}\.png", n) for n in names), names
    doc = " ".join((Path(__file__).parents[1] / "docs" / "figures.md").read_text().split())
    assert "`training_curves_prepared-mytable_given~40e2083407.png`" in doc
    assert "`pseudo_labels_prepared-mytable_given~4fadb0e10b.png`" in doc
