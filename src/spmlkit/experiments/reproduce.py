"""A published table regenerated under its own protocol, beside the published numbers.

``spmlkit reproduce crisp-tabular`` reruns CRISP's tabular experiment (Liu, Xu, Wang, Geng, "Can
Class-Priors Help Single-Positive Multi-Label Learning?", arXiv 2309.13886, Tables 2, 8, 9, 10 and
11) on the four of its six data sets that spmlkit can read, for every method of those tables that
spmlkit has (a method registered later, such as ``smile`` or ``crisp``, gets its row by being
registered; one that trains on images only is left out, and named): the papers' protocol
(docs/protocol.md, "The tabular protocol") as one sweep per data set of methods x trials x lr x
weight decay x batch size into one results store, so an interrupted reproduction resumes and a
finished run is never trained twice. A method whose network on features is its own (MIME's
Gaussian bottleneck, when ``--methods`` names it) trains that network instead of SMILE's MLP, in a
sweep of its own. Each method trains with the
hyperparameters published for that set where a preset holds them (SMILE's README values), else
with its recipe's defaults: spmlkit's own tuned presets (``em/yeast``, ...) belong to its own
protocol and are not applied.

For each (data set, method) the configuration (lr, weight decay, batch size) with the best mean
validation mAP over the trials is chosen, as everywhere in spmlkit (docs/protocol.md, "Model
selection"); its test metrics, mean and population std over the trials, stand beside the
published mean and std with the difference in units of the published std::

    z = (ours - published) / max(published std, 0.0005)

(0.0005 is half the last printed digit: a printed std of 0.000 means a std below it). The
compared values use the papers' metric code (SMILE's conventions, :mod:`spmlkit.metrics.smile_convention`);
spmlkit's own conventions are shown beside them. The partitions are random and the papers'
were never published, so agreement means ``|z|`` within the spread of trials, not equality.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..io import atomic_write_json, atomic_write_text
from .benchmark_hold import WAIT_SECONDS, grid_digest, sweep_until_none_held
from .presets import PRESETS, RECIPE_DEFAULTS
from .published import display_name, published_rows
from .reproductions import REPRODUCTIONS, Reproduction, get_reproduction
from .report import select_and_aggregate
from .store import ResultsStore
from .sweep import SweepResult, SweepSpec, expand, run_sweep

__all__ = ["Reproduction", "REPRODUCTIONS", "ReproducedCell", "get_reproduction", "reproduction_methods",
           "images_only_methods", "images_only_note", "check_methods", "reproduction_sweeps", "published_hparams", "run_reproduction", "summarize_reproduction",
           "write_reproduction", "STD_FLOOR"]

STORE_NAME = "results.db"
#: the smallest published std a difference is divided by: half the last printed digit (0.001)
STD_FLOOR = 0.0005
#: metric -> (its name in tables, whether larger is better, the run record's key in spmlkit's convention)
METRICS: dict[str, tuple[str, bool, str]] = {
    "ranking_loss": ("Ranking loss", False, "ranking_loss"),
    "example_ap": ("Average precision", True, "example_ap"),
    "coverage": ("Coverage", False, "coverage"),
    "hamming_loss": ("Hamming loss", False, "hamming_loss@0.5"),
    "one_error": ("One-error", False, "one_error"),
}


def reproduction_methods(rep: Reproduction) -> tuple[str, ...]:
    """Every method of the published tables that spmlkit has registered, in the tables' row order."""
    from ..methods import METHODS

    published = {r.method for table in rep.tables for r in published_rows(source=table)}
    return tuple(m for m in dict.fromkeys(rep.method_labels.values())
                 if m in published and m in METHODS and METHODS[m].on_features.trains)


def images_only_methods(rep: Reproduction) -> tuple[str, ...]:
    """Methods the paper compares (on its image sets) that spmlkit has but that train on images only,
    so a reproduction on features leaves them out (``Method.on_features`` says why)."""
    from ..methods import METHODS

    return tuple(m for m in dict.fromkeys(rep.method_labels.values())
                 if m in METHODS and not METHODS[m].on_features.trains)


def images_only_note(rep: Reproduction) -> str:
    """One sentence naming the paper's methods that no feature reproduction can train ("" if none)."""
    left_out = images_only_methods(rep)
    if not left_out:
        return ""
    return (f"Not run: {', '.join(display_name(m) for m in left_out)}, which {rep.source} compares on its image sets; "
            "they train on images only (`spmlkit methods` says why).")


def check_methods(rep: Reproduction, methods: Sequence[str]) -> None:
    """ValueError (one line) for a method the reproduction cannot train: unknown, or images only."""
    from ..methods import get_method

    for name in methods:
        method = get_method(name)
        if not method.on_features.trains:
            raise ValueError(f"{rep.name} trains on the features of MULAN's sets, and method {name!r} trains on "
                             f"images only: {method.on_features.note}; leave it out of the methods")


def _own_network(method: str) -> bool:
    """Whether ``method``'s network on features is its own (MIME's Gaussian bottleneck over the row,
    docs/methods.md, "mime"): SMILE's MLP would be a second network before it, so such a method trains
    its own in the protocol's partitions, grid and epochs."""
    from ..training.network import own_part

    return int(own_part("bottleneck", None, method, {})) > 0


def _dataset_argument(rep: Reproduction, dataset: str) -> str:
    if dataset not in rep.datasets:
        raise ValueError(f"{rep.name} has no data set {dataset!r}; choose from {', '.join(rep.datasets)}")
    return rep.datasets[dataset]


#: the source of spmlkit's own tuned presets, which are not a paper's published hyperparameters
_OWN_TUNING = "spmlkit (chosen on validation)"


def published_hparams(method: str, dataset: str) -> dict[str, Any]:
    """The hyperparameters published for ``method`` on ``dataset``: those of its (method, dataset)
    preset when a paper's values fill it, else none (the recipe's defaults)."""
    preset = PRESETS.get(f"{method}/{dataset}")
    if preset is None or preset.source == _OWN_TUNING:
        return {}
    return dict(preset.config.get("hparams", {}))


def reproduction_sweeps(rep: Reproduction, store: str | Path, *, datasets: Sequence[str], methods: Sequence[str],
                        trials: int | None = None, epochs: int | None = None, subset: int | None = None,
                        plugins: Sequence[str] = ()) -> list[SweepSpec]:
    """The reproduction as one sweep per data set, all into ``store``: trial t is seed t (it draws
    the partition, the observed positives, the initial weights and the batch order); each method's
    hyperparameters are :func:`published_hparams` (one set per data set, hence a sweep each). The
    methods that train their own network on features (:func:`_own_network`) get a sweep of their own
    per data set, without the MLP's settings. ``epochs`` and ``subset`` (the first N rows of each
    whole set) change the paper's protocol, for quick checks; ``plugins`` are loaded by every run
    (a method of the user's beside the published ones, docs/plugins.md)."""
    check_methods(rep, methods)
    settings = dict(rep.settings)
    if epochs is not None:
        settings["epochs"] = epochs
    if subset is not None:
        settings["subset"] = subset
    own_settings = {k: v for k, v in settings.items() if k not in ("head", "hidden")}
    specs = []
    for name in datasets:
        dataset = _dataset_argument(rep, name)
        for group, group_settings in (([m for m in methods if not _own_network(m)], settings),
                                      ([m for m in methods if _own_network(m)], own_settings)):
            if not group:
                continue
            hparams = {m: hp for m in group if (hp := published_hparams(m, dataset))}
            specs.append(SweepSpec(
                name=f"reproduce-{rep.name}", datasets=[dataset], methods=group,
                seeds=list(range(rep.trials if trials is None else trials)), lrs=list(rep.lrs),
                batch_sizes=list(rep.batch_sizes), observations=["single_positive"], hparams=hparams,
                settings=dict(group_settings), val_variant="clean", store=str(store),
                weight_decays=list(rep.weight_decays), hparams_from=RECIPE_DEFAULTS, plugins=list(plugins)))
    return specs


def grid_of(specs: Sequence[SweepSpec]) -> str:
    """The digest of a reproduction's runs (:func:`~spmlkit.experiments.benchmark_hold.grid_digest`):
    two reproductions of one grid share an output folder, two of different grids do not at once."""
    return grid_digest(r["run_id"] for spec in specs for r in expand(spec))


def run_reproduction(specs: Sequence[SweepSpec], *, jobs: int = 1,
                     on_result: Callable[[dict[str, Any]], None] | None = None,
                     on_start: Callable[[int, int], None] | None = None,
                     on_wait: Callable[[int], None] | None = None,
                     wait_seconds: float = WAIT_SECONDS) -> list[SweepResult]:
    """Train every unfinished run of ``specs`` (a reproduction's sweeps) into their store, one data set
    after the other; ``on_start(total, finished)`` is told the whole reproduction's counts, once.
    Runs another live sweep holds are waited for, as a benchmark waits
    (:func:`~spmlkit.experiments.benchmark_hold.sweep_until_none_held`), so the tables written next
    hold every run of the grid."""
    results: list[SweepResult] = []
    started = False

    def start(total: int, finished: int) -> None:
        nonlocal started
        if on_start is not None and not started:
            everything = sum(len(expand(s)) for s in specs)
            on_start(everything, everything - sum(_unfinished(s) for s in specs))
        started = True

    for spec in specs:
        results.append(sweep_until_none_held(
            lambda first, spec=spec: run_sweep(spec, jobs=jobs, on_result=on_result, on_start=start if first else None),
            on_wait, wait_seconds))
    return results


def _unfinished(spec: SweepSpec) -> int:
    """Runs of ``spec`` its store does not hold as finished."""
    ids = {r["run_id"] for r in expand(spec)}
    if not Path(spec.store).is_file():
        return len(ids)
    done = ResultsStore(spec.store).to_dataframe()
    return len(ids) if done.empty else len(ids - set(done.loc[done["status"] == "ok", "run_id"]))


@dataclass(frozen=True)
class ReproducedCell:
    """One (table, method, data set): ours over the trials beside the published number."""

    table: str
    metric: str
    method: str
    label: str  # the paper's row label
    dataset: str
    ours: float  # mean over trials, the papers' convention (SMILE's metric code)
    ours_std: float  # population std over trials
    trials: int
    ours_spmlkit: float  # the same runs in spmlkit's convention
    published: float | None
    published_std: float | None
    config: dict[str, Any]  # the selected lr, weight decay, batch size

    @property
    def z(self) -> float:
        """(ours - published) in units of the published std (floored at :data:`STD_FLOOR`)."""
        if self.published is None or self.published_std is None:
            return math.nan
        return (self.ours - self.published) / max(self.published_std, STD_FLOOR)


def _runs(store: str | Path, specs: Sequence[SweepSpec]) -> pd.DataFrame:
    ids = {r["run_id"] for spec in specs for r in expand(spec)}
    df = ResultsStore(store).to_dataframe()
    if df.empty:
        return df
    return df[df["run_id"].isin(ids) & (df["status"] == "ok")]


def summarize_reproduction(rep: Reproduction, specs: Sequence[SweepSpec], store: str | Path
                           ) -> list[ReproducedCell]:
    """Every (table, method, data set) with finished runs: the selected configuration's test
    metrics over the trials beside the published numbers. Nothing finished: an empty list."""
    runs = _runs(store, specs)
    if runs.empty:
        return []
    labels = {m: label for label, m in rep.method_labels.items()}  # else spmlkit's label (display_name)
    published_names = {arg: name for name, arg in rep.datasets.items()}
    cells = []
    agg = select_and_aggregate(runs, by=("dataset", "method"), config_keys=("lr", "batch_size", "weight_decay"),
                               metric="test_map", scale=1.0)
    by_id = runs.set_index("run_id")
    for row in agg.to_dict("records"):
        chosen = by_id.loc[list(row["run_ids"])]
        dataset = published_names.get(row["dataset"], row["dataset"])
        config = {"lr": float(row["lr"]), "weight_decay": float(row["weight_decay"]),
                  "batch_size": int(row["batch_size"])}
        for table, metric in rep.tables.items():
            ours = chosen[f"test.smile.{metric}" + ("@0.5" if metric == "hamming_loss" else "")].to_numpy(float)
            theirs = published_rows(row["method"], dataset, source=table)
            cells.append(ReproducedCell(
                table=table, metric=metric, method=row["method"], label=labels.get(row["method"], display_name(row["method"])),
                dataset=dataset, ours=float(ours.mean()), ours_std=float(ours.std()), trials=len(ours),
                ours_spmlkit=float(chosen[f"test.{METRICS[metric][2]}"].to_numpy(float).mean()),
                published=theirs[0].mean if theirs else None, published_std=theirs[0].std if theirs else None,
                config=config))
    order = {m: i for i, m in enumerate(rep.method_labels.values())}
    datasets = list(rep.datasets)
    return sorted(cells, key=lambda c: (list(rep.tables).index(c.table), order.get(c.method, len(order)),
                                        datasets.index(c.dataset) if c.dataset in datasets else len(datasets)))


def _fmt(mean: float | None, std: float | None) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def _z(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:+.1f}"


def table_markdown(rep: Reproduction, cells: list[ReproducedCell], table: str) -> str:
    """One published table as markdown: per data set, ours, the published number and z."""
    mine = [c for c in cells if c.table == table]
    if not mine:
        return ""
    metric = rep.tables[table]
    name, larger_better, _ = METRICS[metric]
    datasets = [d for d in rep.datasets if any(c.dataset == d for c in mine)]
    head = "| method | " + " | ".join(f"{d}: ours | {d}: published | {d}: z" for d in datasets) + " |"
    rule = "|---|" + "---:|---:|---:|" * len(datasets)
    lines = [f"**{table}: {name} ({'larger' if larger_better else 'smaller'} is better), mean ± std over trials; "
             "z = (ours − published) / published std**", "", head, rule]
    for method in dict.fromkeys(c.method for c in mine):
        row = {c.dataset: c for c in mine if c.method == method}
        label = next(iter(row.values())).label
        parts = []
        for d in datasets:
            c = row.get(d)
            parts += ["–", "–", "–"] if c is None else [_fmt(c.ours, c.ours_std), _fmt(c.published, c.published_std),
                                                       _z(c.z)]
        lines.append(f"| {label} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def write_reproduction(out_dir: str | Path, rep: Reproduction, specs: Sequence[SweepSpec],
                       cells: list[ReproducedCell]) -> dict[str, Path]:
    """``<rep>.md`` (every table), ``<rep>.csv`` (one row per cell) and ``<rep>.json``, atomically."""
    out = Path(out_dir)
    paths = {"markdown": out / f"{rep.name}.md", "csv": out / f"{rep.name}.csv", "json": out / f"{rep.name}.json"}
    intro = (f"# {rep.name}\n\n{rep.description}.\n\nValues in the papers' metric convention (SMILE's code: coverage "
             "divided by the number of labels, Hamming loss at p > 0.5; docs/protocol.md, \"Metric conventions\"); "
             f"configuration chosen per method and data set on mean validation mAP over {len(specs[0].seeds)} "
             "trials." + (f" {note}" if (note := images_only_note(rep)) else "") + "\n")
    body = "\n\n".join(t for t in (table_markdown(rep, cells, table) for table in rep.tables) if t)
    atomic_write_text(paths["markdown"], intro + "\n" + body + "\n")
    frame = pd.DataFrame([{**{k: v for k, v in asdict(c).items() if k != "config"}, **c.config, "z": c.z}
                          for c in cells])
    atomic_write_text(paths["csv"], frame.to_csv(index=False))
    sweeps = [{"dataset": s.datasets[0], "methods": s.methods, "hparams": s.hparams, "trials": len(s.seeds),
               "settings": s.settings} for s in specs]
    atomic_write_json(paths["json"], {"reproduction": rep.name, "sweeps": sweeps,
                                      "cells": [{**asdict(c), "z": None if np.isnan(c.z) else c.z} for c in cells]})
    return paths
