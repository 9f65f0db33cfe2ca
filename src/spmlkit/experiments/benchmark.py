"""Compare every method on a feature dataset: a preset over a sweep, a results store and a report.

``spmlkit benchmark --dataset yeast`` is a sweep of every method x lr x seed under the shared
protocol (the dataset's presets give each method its hyperparameters, or the one source that
``hparams_from`` names), written into a results
store inside the output folder, then reported with the same selection rule and table code as
``spmlkit report`` (docs/protocol.md, "Model selection"): per method, the lr with the best mean
validation mAP over seeds; the table shows that configuration's test mAP, mean ± std over
seeds, the references "full labels (BCE)" and "AN", and the share of the gap between them
that a method closes, where that gap is larger than noise (:func:`spmlkit.experiments.report.
gap_denominator`):

    gap closed = (method - AN) / (full BCE - AN)

Because it is a sweep, a benchmark that is interrupted resumes where it stopped, and
finished runs are never trained twice. The tables report exactly the runs of this
benchmark's grid, even when the store holds others.

Several data sets (``--dataset A --dataset B``, ``--suite mulan``) go into one store, one sweep
per list of methods (a user's own data runs without the references, which need full labels):
each data set's table is written as above into its own folder ``<out>/<name>/``, and the
leaderboard across them (:mod:`spmlkit.experiments.leaderboard`) into ``<out>/``, each data set
named with its own observation and validation labels. There, every method's hyperparameters come
from one source on every data set (the recipes' defaults unless ``hparams_from`` names a data
set's presets), and the references that see more labels than the methods compared are shown
beside the ranks, not ranked (docs/leaderboard.md).

A selection on the edge of its lr grid is marked in every table, and ``extend_lrs`` widens the
grid there (:func:`widen_lr_grids`; docs/benchmark.md, "Learning rates on the edge").
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..data.feature_dir import feature_dir_warning
from ..file_names import file_stem, identified_stem
from ..io import atomic_write_json, atomic_write_text
from ..methods import METHODS, get_method
from ..output_dir import MARKER
from ..protocol import Observation
from . import report
from .benchmark_defaults import DEFAULT_LRS, DEFAULT_SEEDS, MAX_EXTEND_LRS
from .benchmark_hold import WAIT_SECONDS, grid_digest, sweep_until_none_held
from .lr_grid import EDGES, edge_note, lr_position, step_beyond
from .leaderboard import Leaderboard, build_leaderboard, scores_from_tables, spread_from_tables, write_leaderboard
from .presets import PRESETS, RECIPE_DEFAULTS, check_hparams_from
from .selection import RULES, check_rule, needs_epoch_metrics, read_at
from .store import ResultsStore
from .sweep import SweepResult, SweepSpec, expand, run_sweep
from .sweep.run import finished_ids
from .sweep.spec import first_repeated, grid_size, repeat_words

__all__ = ["BenchmarkSpec", "run_benchmark", "run_benchmarks", "summarize", "write_outputs", "write_suite_outputs",
           "dataset_folders", "grid_of", "labels_measured", "measured_on", "one_source", "hyperparameter_source",
           "reference_methods", "default_methods", "gap_note", "table_title", "widen_lr_grids", "lr_edge_note",
           "labels_words", "selection_lines", "suite_sweeps", "combined", "DEFAULT_LRS", "DEFAULT_SEEDS",
           "MAX_EXTEND_LRS"]

STORE_NAME = "results.db"
#: what a benchmark of several data sets keeps in ``<out>`` itself beside the data sets' folders
OWN_FILES = (STORE_NAME, f"{STORE_NAME}-wal", f"{STORE_NAME}-shm", f"{STORE_NAME}-journal", "leaderboard.md",
             "leaderboard.csv", "leaderboard.json", "leaderboard.png", "leaderboard_nemenyi.csv", MARKER)


@dataclass
class BenchmarkSpec:
    """One data set's benchmark: every method x lr x seed under the shared protocol
    (docs/leaderboard.md, "From Python").

    ``observation``, ``batch_size`` and ``val_variant`` left at None take each data set's own, as
    ``spmlkit train`` does: a benchmark simulates single positives from full labels, a user's data
    (a prepared image folder, a feature folder or table of their own) trains on its own labels
    (``given``) and selects on the observed positives of its validation rows (docs/protocol.md,
    "Your own data"); the batch is 64 on feature sets, the data set's (or preset's) on images.
    ``settings`` are further run settings for every run (image settings such as ``backbone``, a
    ``--config`` file's), under the grid's own axes.
    """

    dataset: str = "yeast"
    #: None: spmlkit's methods and those of ``plugins`` that have a meaning on the data set
    #: (:func:`default_methods`, read when the spec is made)
    methods: tuple[str, ...] | None = None
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    lrs: tuple[float, ...] = DEFAULT_LRS
    observation: str | None = None  # None: the data set's own (presets.default_observation)
    epochs: int = 20
    batch_size: int | None = None  # None: the data set's own, as `spmlkit train` uses it
    head: str = "linear"
    val_variant: str | None = None  # None: the data set's own (presets.default_val_variant)
    subset: int | None = None  # first N official-train rows: for quick checks
    #: weight decays swept beside the lrs (selected on validation like them); None: no such axis
    weight_decays: tuple[float, ...] | None = None
    #: per-method hyperparameters on top of the dataset's presets (key by key), e.g. a
    #: candidate being tuned; lists are swept as in a sweep file
    hparams: dict[str, dict[str, Any]] | None = None
    #: where every method's hyperparameters come from: None, the data set's own presets where it
    #: has them (what ``train`` uses; a benchmark of several data sets turns None into
    #: "defaults", :func:`one_source`); "defaults", each method's recipe defaults; a data set's
    #: name (e.g. "yeast"), the hyperparameters of that data set's presets, whatever data set runs
    hparams_from: str | None = None
    settings: dict[str, Any] | None = None
    #: plug-ins (.py files relative to the working folder, module names) whose methods or datasets it
    #: names (docs/plugins.md); loaded here and in every worker
    plugins: tuple[str, ...] = ()
    #: whether :func:`widen_lr_grids` adds lrs beyond an edge of ``lrs`` where a method's selection
    #: lies on it, at most :data:`MAX_EXTEND_LRS` per method (docs/benchmark.md, "Learning rates on the edge")
    extend_lrs: bool = False
    #: the lrs beyond ``lrs`` that :func:`widen_lr_grids` added, per method (filled by it, not by hand)
    extra_lrs: dict[str, tuple[float, ...]] | None = None
    #: the selection rule of the table (experiments/selection.py): ``val_map``, or ``smile_votes``, whose
    #: runs then record every epoch's measures (``epoch_metrics``)
    select: str = "val_map"

    def __post_init__(self) -> None:
        from ..plugins import is_file_reference, load_plugins

        # absolute, so that a worker started elsewhere (a Ray node) finds the same files
        self.plugins = tuple(str(Path(ref).expanduser().absolute()) if is_file_reference(ref) else ref
                             for ref in self.plugins)
        load_plugins(self.plugins)
        if self.methods is None:
            self.methods = default_methods([self.dataset], self.plugins)
        if not self.seeds or not self.lrs or not self.methods:
            raise ValueError("a benchmark needs at least one method, one seed and one lr")
        for axis in ("methods", "seeds", "lrs"):  # one grid point twice: docs/sweep-files.md
            pair = first_repeated(getattr(self, axis))
            if pair is not None:
                raise ValueError(f"the benchmark's {axis} {repeat_words(*pair)}; give each value once")
        for m in self.methods:
            get_method(m)
        if self.observation is not None:
            Observation.parse(self.observation)
        check_hparams_from(self.hparams_from)
        check_rule(self.select)
        if self.extend_lrs and len(self.lrs) < 2:
            raise ValueError(f"--extend-lrs widens the lr grid by the ratio of its lrs; give at least two --lrs "
                             f"(got {', '.join(f'{lr:g}' for lr in self.lrs)})")

    def lr_grid(self, method: str) -> tuple[float, ...]:
        """The lrs ``method`` is trained with: ``lrs`` and those :func:`widen_lr_grids` added, ascending."""
        return tuple(sorted({*map(float, self.lrs), *(self.extra_lrs or {}).get(method, ())}))

    @property
    def observation_used(self) -> str:
        """The observation the runs train under (the given one, or the data set's own)."""
        from .presets import default_observation

        return self.observation or default_observation(self.dataset)

    @property
    def val_used(self) -> str:
        """The validation labels each run selects on (the given ones, or the data set's own)."""
        from .presets import default_val_variant

        return self.val_variant or default_val_variant(self.dataset)

    def sweep(self, store: str | Path) -> SweepSpec:
        """The grid as a sweep: hyperparameters come from the dataset's presets, as in ``train``,
        or from the source ``hparams_from`` names."""
        settings: dict[str, Any] = {"epochs": self.epochs, "head": self.head, **(self.settings or {})}
        if self.subset is not None:
            settings["subset"] = self.subset
        if needs_epoch_metrics(self.select):
            settings["epoch_metrics"] = True
        return SweepSpec(name=f"benchmark-{file_stem(self.dataset)}", datasets=[self.dataset], methods=list(self.methods),
                         seeds=list(self.seeds), lrs=list(self.lrs),
                         batch_sizes=None if self.batch_size is None else [self.batch_size],
                         observations=None if self.observation is None else [self.observation],
                         hparams=dict(self.hparams or {}), settings=settings, val_variant=self.val_variant,
                         store=str(store), plugins=list(self.plugins), hparams_from=self.hparams_from,
                         weight_decays=None if self.weight_decays is None else list(self.weight_decays))


    def sweeps(self, store: str | Path) -> list[SweepSpec]:
        """Every run of the benchmark as sweeps: :meth:`sweep`'s grid, then one sweep per lr that
        :func:`widen_lr_grids` added, of the methods it was added for. A run's id depends on its
        settings only, so these are the runs a grid naming that lr would train."""
        added: dict[float, list[str]] = {}
        for method in self.methods:
            for lr in (self.extra_lrs or {}).get(method, ()):
                added.setdefault(lr, []).append(method)
        return [self.sweep(store), *(self._extra_sweep(store, methods, lr) for lr, methods in added.items())]

    def _extra_sweep(self, store: str | Path, methods: Sequence[str], lr: float) -> SweepSpec:
        """The runs of ``methods`` at the added ``lr``: the grid's own settings, one lr, those methods."""
        base = self.sweep(store)
        return replace(base, methods=list(methods), lrs=[lr],
                       hparams={m: grid for m, grid in base.hparams.items() if m in methods})


def default_methods(datasets: list[str] | tuple[str, ...], plugins: Sequence[str] = (), *,
                    installed: bool = False) -> tuple[str, ...]:
    """The methods a benchmark of ``datasets`` runs when none are named: spmlkit's own, and the
    methods of the plug-ins the user named for it (``plugins``: ``--plugin``, a config file's,
    ``$SPMLKIT_PLUGINS``); with ``installed``, those of installed packages' plug-ins (entry
    points) too. An installed package's plug-in is loaded by every command, so without this rule
    it would join every benchmark of the machine without anyone asking (docs/plugins.md, "Which
    methods a benchmark runs").

    A method that learns from image augmentations or activation maps (``Method.on_features``) is
    left out when any of the data sets is a feature set, where every run of it would be refused
    (docs/methods.md, "Two views of each image"); a benchmark of images includes it."""
    from ..data.registry import is_feature_dataset
    from ..names import BUILTIN
    from ..plugins import load_plugins, loaded_plugins

    origins = {BUILTIN, *(plugin.module for plugin in load_plugins(plugins))}
    if installed:
        origins.update(plugin.module for plugin in loaded_plugins() if plugin.kind == "entry point")
    features = any(is_feature_dataset(d) for d in datasets)
    return tuple(m for m in METHODS if METHODS.origin(m) in origins and not (features and not METHODS[m].on_features.trains))


def labels_measured(spec: BenchmarkSpec) -> dict[str, str | None]:
    """Which labels the table's numbers are measured on (as each run's record says,
    :meth:`~spmlkit.training.RunResult.labels_measured`): validation on ``"full"`` or ``"observed"``
    labels, test on ``"full"`` ones, or None where the data set has no labelled test list."""
    from ..data.registry import resolve_dataset

    return {"val_map_labels": "full" if spec.val_used == "clean" else "observed",
            "test_map_labels": "full" if resolve_dataset(spec.dataset).test else None}


def measured_on(spec: BenchmarkSpec) -> str:
    """The words a table's title uses for :func:`labels_measured`."""
    labels = labels_measured(spec)
    test = ("test mAP (%) on the test list's full labels" if labels["test_map_labels"]
            else "no labelled test list, so no test mAP")
    val = ("the validation rows' full labels" if labels["val_map_labels"] == "full"
           else "the observed positives of the validation rows")
    return f"{test}; lr selected on {val}"


def run_benchmark(spec: BenchmarkSpec, out_dir: str | Path, *, jobs: int = 1, retry_failed: bool = False,
                  on_result: Callable[[dict[str, Any]], None] | None = None,
                  on_start: Callable[[int, int], None] | None = None,
                  on_wait: Callable[[int], None] | None = None, wait_seconds: float = WAIT_SECONDS) -> SweepResult:
    """Run every unfinished (method, lr, seed) of ``spec`` into ``<out_dir>/results.db``; a run
    recorded as failed counts as finished unless ``retry_failed`` (as in a sweep). Runs another
    live sweep holds are waited for (:func:`~spmlkit.experiments.benchmark_hold.sweep_until_none_held`),
    so the tables written next hold every run of the grid. The lrs ``extend_lrs`` may add are
    :func:`widen_lr_grids`'s, called next."""
    store = Path(out_dir) / STORE_NAME
    return _run_sweeps(spec.sweeps(store), jobs=jobs, retry_failed=retry_failed, on_result=on_result,
                       on_start=on_start, on_wait=on_wait, wait_seconds=wait_seconds)


def _run_sweeps(sweeps: Sequence[SweepSpec], *, jobs: int, retry_failed: bool,
                on_result: Callable[[dict[str, Any]], None] | None, on_start: Callable[[int, int], None] | None,
                on_wait: Callable[[int], None] | None, wait_seconds: float) -> SweepResult:
    """Run ``sweeps`` (of one store, disjoint grids) one after the other as one benchmark: ``on_start``
    hears once, as the first starts, of all their runs and how many of them the store holds finished."""
    def start(total: int, done: int) -> None:
        if on_start is None:
            return
        later = sweeps[1:]
        store = ResultsStore(sweeps[0].store) if later else None
        on_start(total + sum(grid_size(s) for s in later),
                 done + sum(len(finished_ids(s, store, retry_failed)) for s in later))

    results = [sweep_until_none_held(
        lambda first, sweep=sweep, i=i: run_sweep(sweep, jobs=jobs, retry_failed=retry_failed, on_result=on_result,
                                                  on_start=start if first and i == 0 else None),
        on_wait, wait_seconds) for i, sweep in enumerate(sweeps)]
    return combined(results)


def combined(results: Sequence[SweepResult]) -> SweepResult:
    """The runs of several sweeps (or benchmark steps) of one store, counted as one."""
    return replace(results[0], total=sum(r.total for r in results), skipped=sum(r.skipped for r in results),
                   ran=sum(r.ran for r in results), failed=sum(r.failed for r in results), held=0,
                   failed_before=sum(r.failed_before for r in results))


def widen_lr_grids(specs: Sequence[BenchmarkSpec], out_dir: str | Path, *, jobs: int = 1, retry_failed: bool = False,
                   on_result: Callable[[dict[str, Any]], None] | None = None,
                   on_extend: Callable[[str, dict[str, float], int, int], None] | None = None,
                   on_wait: Callable[[int], None] | None = None, wait_seconds: float = WAIT_SECONDS
                   ) -> tuple[list[BenchmarkSpec], SweepResult | None]:
    """Widen the lr grid of each method whose lr, selected on validation, lies on an edge of the lrs it
    tried, for every spec with ``extend_lrs``: the next lr beyond that edge
    (:func:`~spmlkit.experiments.lr_grid.step_beyond`), its runs trained into ``<out_dir>/results.db``,
    and the selection made again, until every selection is inside its grid or a method has
    :data:`MAX_EXTEND_LRS` lrs added (docs/benchmark.md, "Learning rates on the edge"). Runs the
    store holds are reused, so the same benchmark again trains nothing; the grids widen by the
    same steps, since the selections are those of the same runs.

    ``on_extend(dataset, {method: lr added}, runs, finished)`` hears of each step before its runs train
    (``finished``: how many of them the store holds already).
    Returns the specs with the lrs added (:attr:`BenchmarkSpec.extra_lrs`) and what the added runs
    did (None when no lr was added)."""
    store = Path(out_dir) / STORE_NAME
    specs = list(specs)
    results: list[SweepResult] = []
    for _ in range(MAX_EXTEND_LRS):
        widened = False
        for i, spec in enumerate(specs):
            steps = _steps_beyond(spec, store) if spec.extend_lrs else {}
            if not steps:
                continue
            extra = dict(spec.extra_lrs or {})
            for method, lr in steps.items():
                extra[method] = (*extra.get(method, ()), lr)
            specs[i] = spec = replace(spec, extra_lrs=extra)
            sweeps = [spec._extra_sweep(store, [m for m, added in steps.items() if added == lr], lr)
                      for lr in dict.fromkeys(steps.values())]
            if on_extend is not None:
                done = sum(len(finished_ids(s, ResultsStore(store), retry_failed)) for s in sweeps)
                on_extend(spec.dataset, steps, sum(grid_size(s) for s in sweeps), done)
            results.append(_run_sweeps(sweeps, jobs=jobs, retry_failed=retry_failed, on_result=on_result,
                                       on_start=None, on_wait=on_wait, wait_seconds=wait_seconds))
            widened = True
        if not widened:
            break
    return specs, combined(results) if results else None


def _steps_beyond(spec: BenchmarkSpec, store: Path) -> dict[str, float]:
    """The next lr of each method of ``spec`` whose selection lies on an edge of its grid; none for a
    method whose runs finished none."""
    runs = benchmark_runs(spec, store)
    if runs.empty or not (runs["status"] == "ok").any():
        return {}
    rows, _ = summarize(runs, spec.methods)
    return {r["method"]: step_beyond(spec.lrs, spec.lr_grid(r["method"]), r["lr_position"])
            for r in rows if r["lr_position"] in EDGES}


def grid_of(specs: Sequence[BenchmarkSpec], store: str | Path) -> str:
    """The digest of the runs of ``specs`` (:func:`~spmlkit.experiments.benchmark_hold.grid_digest`): two
    benchmarks of one grid share an output folder, two of different grids do not at once. A grid
    ``--extend-lrs`` may widen is another grid than the same one fixed: their tables differ."""
    widens = ["--extend-lrs"] if any(spec.extend_lrs for spec in specs) else []
    return grid_digest([*(r["run_id"] for spec in specs for sweep in spec.sweeps(store) for r in expand(sweep)),
                        *widens])


def benchmark_runs(spec: BenchmarkSpec, store: str | Path) -> pd.DataFrame:
    """The store's records of exactly this benchmark's grid (with the lrs :func:`widen_lr_grids` added)."""
    ids = {r["run_id"] for sweep in spec.sweeps(store) for r in expand(sweep)}
    df = ResultsStore(store).to_dataframe()
    return df[df["run_id"].isin(ids)] if not df.empty else df


def summarize(runs: pd.DataFrame, methods: tuple[str, ...] | None = None, rule: str = "val_map"
              ) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """Select each method's configuration on mean val mAP (:func:`report.select_and_aggregate`), or by
    selection rule ``rule`` (:mod:`~spmlkit.experiments.selection`), each run read at the epoch it selects.

    Returns the table rows (one per method, in ``methods`` order, mAP in percent, with
    ``gap_closed`` where both references bce and an are present and BCE − AN is larger than
    noise, :func:`gap_note` says why not otherwise; ``lr_position``, where the selected lr lies
    among the lrs the method's runs tried, failed ones too: :func:`~spmlkit.experiments.lr_grid.
    lr_position`) and the selection frame.
    """
    ok = runs[runs["status"] == "ok"] if not runs.empty else runs
    if ok.empty:
        raise ValueError("no run of the benchmark finished; nothing to report (see the failures above)")
    ok = read_at(ok, rule)
    agg = report.select_and_aggregate(ok, by=("dataset", "observation", "method"), rule=rule)
    epochs = dict(zip(ok["run_id"], ok["selected_epoch"]))
    tried = runs.groupby("method")["lr"].agg(lambda lrs: tuple(lrs)).to_dict()
    by_method = {r["method"]: r for r in agg.to_dict("records")}
    order = [m for m in (methods or by_method) if m in by_method]
    rows = []
    for m in order:
        r = by_method[m]
        rows.append({
            "method": m, "description": METHODS[m].description if m in METHODS else "", "lr": float(r["lr"]),
            "lr_position": lr_position(r["lr"], tried[m]), "seeds": int(r["n_seeds"]),
            "val_map": float(r["select_mean"]), "test_map": float(r["mean"]),
            "test_map_std": float(r["std"]), "best_epoch": float(np.mean([epochs[i] for i in r["run_ids"]])),
            **({"weight_decay": float(r["weight_decay"])} if "weight_decay" in r else {}),  # a --weight-decays grid's
        })
    denominator = _gap_denominator(rows)[0]
    an = next((r["test_map"] for r in rows if r["method"] == "an"), math.nan)
    for r in rows:
        r["gap_closed"] = (r["test_map"] - an) / denominator if denominator is not None else float("nan")
    return rows, agg


def _gap_denominator(rows: Sequence[dict[str, Any]]) -> tuple[float | None, str]:
    """BCE − AN of a table's rows where a share of it means something (:func:`report.gap_denominator`);
    (None, "") without both references."""
    ref = {r["method"]: (r["test_map"], r["test_map_std"], r["seeds"]) for r in rows if r["method"] in ("bce", "an")}
    if len(ref) < 2:
        return None, ""
    return report.gap_denominator(ref["bce"], ref["an"])


def gap_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """The line under a table about its "gap closed" column: the formula where the column has
    numbers, why it has none where both references ran but BCE − AN is within noise, and
    None where there are no references (no column, nothing to explain)."""
    denominator, why = _gap_denominator(rows)
    if denominator is not None:
        return report.GAP_FORMULA
    return f"no gap closed: {why}" if why else None


def hyperparameter_source(spec: BenchmarkSpec, datasets: Sequence[str] | None = None) -> str:
    """One sentence naming where every method's hyperparameters came from, on ``datasets``
    (default: the spec's own), for every table and leaderboard to print."""
    datasets = list(datasets or [spec.dataset])
    source = spec.hparams_from
    if source == RECIPE_DEFAULTS:
        where = "every data set" if len(datasets) > 1 else spec.dataset
        return f"Hyperparameters: each method's recipe defaults on {where} (`spmlkit methods`); no preset is used."
    owner = source or spec.dataset
    tuned = [m for m in spec.methods if f"{m}/{owner}" in PRESETS]
    if not tuned:
        return (f"Hyperparameters: each method's recipe defaults (`spmlkit methods`); no preset of {owner} applies to "
                "these methods.")
    names = ", ".join(f"{m}/{owner}" for m in tuned)
    sources = "; ".join(dict.fromkeys(PRESETS[f"{m}/{owner}"].source for m in tuned))
    where = f"on every data set ({', '.join(datasets)})" if len(datasets) > 1 or source not in (None, spec.dataset) \
        else f"on {spec.dataset}"
    others = "; recipe defaults for the other methods" if len(tuned) < len(spec.methods) else ""
    return (f"Hyperparameters: those of the presets {names} (tuned on {owner}: {sources}; `spmlkit presets --dataset "
            f"{owner}`) {where}{others}.")


def write_outputs(out_dir: str | Path, spec: BenchmarkSpec, runs: pd.DataFrame, rows: list[dict[str, Any]],
                  agg: pd.DataFrame, *, datasets: Sequence[str] | None = None) -> dict[str, Path]:
    """Write runs.csv, table.csv, table.md and results.json, each atomically; ``datasets``: every
    data set of the benchmark this table is part of, for the line on hyperparameters."""
    out = Path(out_dir)
    paths = {"runs": out / "runs.csv", "table": out / "table.csv", "markdown": out / "table.md",
             "json": out / "results.json"}
    # every row says which labels its numbers are on, and what its features are where they come from random weights
    warning = feature_dir_warning(spec.dataset)
    rows = [{**r, **labels_measured(spec), **({"warning": warning} if warning else {})} for r in rows]
    flat = runs.drop(columns=[c for c in ("history", "test_ap", "analysis", "config", "class_names", "error")
                              if c in runs.columns])
    atomic_write_text(paths["runs"], flat.to_csv(index=False))
    atomic_write_text(paths["table"], pd.DataFrame(rows).to_csv(index=False))
    table = report.paper_table(agg)
    hyper = hyperparameter_source(spec, datasets)
    below = [*table.attrs["notes"], *filter(None, [lr_edge_note(spec, rows)])]
    atomic_write_text(paths["markdown"], f"**{table_title(spec)}**\n\n" + report.to_markdown(table)
                      + "".join(f"\n{note}\n" for note in [hyper, *below]))
    atomic_write_json(paths["json"], {"spec": {**asdict(spec), "observation": spec.observation_used,
                                               "val_variant": spec.val_used},
                                      "hyperparameters": hyper, "notes": below, "table": rows})
    return paths


def lr_edge_note(spec: BenchmarkSpec, rows: Sequence[dict[str, Any]]) -> str | None:
    """The line under a table whose methods selected an lr on an edge of their grid
    (:func:`~spmlkit.experiments.lr_grid.edge_note`); None when none did."""
    return edge_note(rows, widened=MAX_EXTEND_LRS if spec.extend_lrs else 0)


def table_title(spec: BenchmarkSpec) -> str:
    """A data set's table title: what the numbers are, on which labels, and over how many seeds."""
    n = len(spec.seeds)
    spread = f"mean ± std over {n} seeds" if n > 1 else "one seed (no standard deviation)"
    rule = "" if spec.select == "val_map" else f"; epoch and lr selected by {spec.select} ({RULES[spec.select]})"
    return f"{spec.dataset} ({spec.observation_used}): {measured_on(spec)}, {spread}{rule}"


# --------------------------------------------------------------------------- several data sets


def dataset_folders(datasets: Sequence[str], out_dir: str | Path) -> dict[str, Path]:
    """Each data set's output folder: ``<out>/<name>``, always directly inside ``<out>``.

    ``<name>`` is a named data set's own name (``yeast``; ``emotions`` for ``mulan/emotions``) or
    the name of a feature folder as it resolves (``ff/myfeats/sub/..`` is ``myfeats``, ``.`` the
    working folder's name: never ``.`` or ``..``), written by :func:`~spmlkit.file_names.file_stem`
    (a name that is not plain gets its digest, so none leaves ``<out>`` or is too long). Two data
    sets whose names would share a folder (``a/feats`` and ``b/feats``) each get the digest form
    of the whole data set's identity, so neither replaces the other's tables, whichever comes
    first. A data set named twice (under one name or two: ``emotions`` and ``mulan/emotions``)
    or a folder named as a file the benchmark keeps in ``<out>`` (its ``results.db``, the
    leaderboard) is the user's to fix, and refused before any run (ValueError).
    """
    from ..data.registry import DATASETS, same_data

    named: dict[str, tuple[str, str]] = {}  # data set -> (its folder name's stem, its identity)
    for ds in datasets:
        if ds in named:
            raise ValueError(f"--dataset {ds} is given twice; name each data set once")
        same = next(((other, why) for other in named if (why := same_data(other, ds))), None)
        if same is not None:
            raise ValueError(f"--dataset {same[0]} and --dataset {ds} are the same data set ({same[1]}); name it once")
        if ds in DATASETS:
            stem, identity = Path(ds).name, f"named:{ds}"
        else:
            where = Path(ds).expanduser().resolve()
            stem, identity = where.name or "root", f"folder:{where}"
        if stem in OWN_FILES:
            raise ValueError(f"the tables of data set {ds} would go to {Path(out_dir) / stem}, which is the "
                             f"benchmark's own {stem}; give the feature folder another name (or a link to it)")
        named[ds] = (file_stem(stem), identity)
    shared = Counter(name for name, _ in named.values())
    return {ds: Path(out_dir) / (name if shared[name] == 1 else identified_stem(name, identity))
            for ds, (name, identity) in named.items()}


def one_source(specs: Sequence[BenchmarkSpec]) -> list[BenchmarkSpec]:
    """``specs`` with every method's hyperparameters from one source across the data sets: a
    benchmark of several data sets that names none uses each method's recipe defaults on all of
    them, not the presets some data sets happen to have (docs/leaderboard.md, "One source of
    hyperparameters"). One data set keeps its own presets, as ``train`` does."""
    if len(specs) < 2:
        return list(specs)
    return [s if s.hparams_from is not None else replace(s, hparams_from=RECIPE_DEFAULTS) for s in specs]


def reference_methods(spec: BenchmarkSpec) -> tuple[str, ...]:
    """The methods of ``spec`` that train on more labels than the observation gives the others:
    ``bce`` (every label) and ``iun`` (one positive and every negative). They bound what missing
    labels cost; ranked among the methods they would win by seeing more, not by a better method.
    Under ``observation="full"`` every method sees every label, and nothing is a reference."""
    if spec.observation_used == "full":
        return ()
    return tuple(m for m in spec.methods if m in METHODS and METHODS[m].sees_more_labels)


def _unfinished(method: str, runs: pd.DataFrame, datasets: list[str]) -> str:
    """Why ``method`` has no score on any of ``datasets``: how many of its runs failed there, with
    the first one's error (its first line), or that none was recorded."""
    mine = runs[runs["method"] == method] if not runs.empty else runs
    where = f"on {len(datasets)} data set{'s' if len(datasets) != 1 else ''}"
    if mine.empty:
        return f"method without a recorded run {where}"
    errors = [str(e).strip().splitlines()[0] for e in mine.get("error", pd.Series(dtype=object)).dropna()
              if str(e).strip()]
    first = f"; the first error: {errors[0]}" if errors else ""
    return f"method none of whose {len(mine)} runs {where} finished{first}"


def suite_sweeps(specs: Sequence[BenchmarkSpec], store: str | Path) -> list[SweepSpec]:
    """The sweeps of the data sets of ``specs``, which must differ in nothing but the data set and
    its methods (a user's own data runs without the references, which need full labels): one
    sweep over the data sets of each list of methods, so that workers move on to the next data
    set's runs without waiting; then the lrs :func:`widen_lr_grids` added, data set by data set.

    Run ids leave the sweep's name out, so a data set's runs here are the runs of its own
    one-data-set benchmark with the same ``hparams_from``: either finds the other's finished runs
    in a shared store.
    """
    first = specs[0]
    groups: dict[tuple[str, ...], list[BenchmarkSpec]] = {}
    for s in specs:
        if replace(s, dataset=first.dataset, methods=first.methods, extra_lrs=first.extra_lrs) != first:
            raise ValueError(f"the benchmarks of {first.dataset} and {s.dataset} differ in more than their data set")
        groups.setdefault(tuple(s.methods), []).append(s)
    together = [replace(group[0].sweep(store), name="benchmark-suite", datasets=[s.dataset for s in group])
                for group in groups.values()]
    return together + [sweep for s in specs for sweep in s.sweeps(store)[1:]]


def run_benchmarks(specs: Sequence[BenchmarkSpec], out_dir: str | Path, *, jobs: int = 1, retry_failed: bool = False,
                   on_result: Callable[[dict[str, Any]], None] | None = None,
                   on_start: Callable[[int, int], None] | None = None,
                   on_wait: Callable[[int], None] | None = None, wait_seconds: float = WAIT_SECONDS) -> SweepResult:
    """Run every unfinished (data set, method, lr, seed) of ``specs`` into ``<out_dir>/results.db``
    (:func:`suite_sweeps`). Hyperparameters come from one source across the data sets
    (:func:`one_source`)."""
    specs = one_source(specs)
    dataset_folders([s.dataset for s in specs], out_dir)  # a clash is refused before any run
    return _run_sweeps(suite_sweeps(specs, Path(out_dir) / STORE_NAME), jobs=jobs, retry_failed=retry_failed,
                       on_result=on_result, on_start=on_start, on_wait=on_wait, wait_seconds=wait_seconds)


def labels_words(specs: Sequence[BenchmarkSpec]) -> str:
    """The observation of the data sets of ``specs``, in the words of a leaderboard's title:
    ``yeast, emotions (single_positive)`` when they share one, else each data set with its own,
    ``yeast (single_positive), mytable (given)``."""
    if len({s.observation_used for s in specs}) == 1:
        return f"{', '.join(s.dataset for s in specs)} ({specs[0].observation_used})"
    return ", ".join(f"{s.dataset} ({s.observation_used})" for s in specs)


def selection_lines(specs: Sequence[BenchmarkSpec]) -> list[str]:
    """How each data set of a leaderboard was trained and selected (:func:`measured_on`), one sentence
    for the data sets that share it, and where the references ran when some data sets lack them
    (data of one's own, whose labels are observed ones only, cannot train them)."""
    from ..data.registry import labels_held

    by_words: dict[str, list[str]] = {}
    for s in specs:
        trained = ("its own labels (given)" if s.observation_used == "given"
                   else f"the {s.observation_used} observation of its full labels")
        by_words.setdefault(f"trained on {trained}, {measured_on(s)}", []).append(s.dataset)
    lines = [f"{', '.join(datasets)}: {words}." for words, datasets in by_words.items()]
    references = dict.fromkeys(m for s in specs for m in reference_methods(s))
    without = [s.dataset for s in specs if not set(references) <= set(s.methods)]
    if references and without:
        ran = ", ".join(s.dataset for s in specs if s.dataset not in without)
        own = [d for d in without if labels_held(d).labels == "observed"]
        why = (f"{', '.join(own)} {'has' if len(own) == 1 else 'have'} no full labels to train them on"
               if own == without else f"{', '.join(without)} did not name them")
        lines.append(f"The references {', '.join(references)} ran on {ran} only: {why}.")
    return lines


def write_suite_outputs(out_dir: str | Path, specs: Sequence[BenchmarkSpec], store: str | Path, *,
                        title: str | None = None, rank_references: bool = False
                        ) -> tuple[dict[str, list[dict[str, Any]]], Leaderboard, dict[str, Path]]:
    """Each data set's table into its folder (:func:`write_outputs`) and the leaderboard into
    ``out_dir``. A data set none of whose runs finished has no table and is named in the
    leaderboard as left out. The references (:func:`reference_methods`) are shown beside the
    ranks but not ranked, unless ``rank_references``. Returns the tables, the leaderboard and
    the leaderboard's files.
    """
    specs = one_source(specs)
    datasets = [s.dataset for s in specs]
    folders = dataset_folders(datasets, out_dir)
    tables: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    records: dict[str, pd.DataFrame] = {}
    for spec in specs:
        runs = records[spec.dataset] = benchmark_runs(spec, store)
        if runs.empty or not (runs["status"] == "ok").any():
            failed[spec.dataset] = f"data set where none of its {len(runs)} runs finished"
            continue
        rows, agg = summarize(runs, spec.methods, spec.select)
        folders[spec.dataset].mkdir(parents=True, exist_ok=True)
        write_outputs(folders[spec.dataset], spec, runs, rows, agg, datasets=datasets)
        tables[spec.dataset] = rows
        if labels_measured(spec)["test_map_labels"] is None:  # its table stands; it has no test mAP to rank
            failed[spec.dataset] = "data set without a labelled test list (no test mAP to rank)"
    ranked = {dataset: rows for dataset, rows in tables.items() if dataset not in failed}
    if not ranked:
        raise ValueError("no data set has finished runs with a test mAP; nothing to rank (see the failures above)")
    references = () if rank_references else tuple(dict.fromkeys(m for s in specs for m in reference_methods(s)))
    named = tuple(dict.fromkeys(m for s in specs for m in s.methods))  # every data set's methods
    board = build_leaderboard(scores_from_tables(ranked, named), references=references,
                              spread=spread_from_tables(ranked))
    every_run = pd.concat([records[d] for d in ranked if not records[d].empty] or [pd.DataFrame()])
    for method in [m for m in board.left_out if m in named]:  # none of its runs finished
        board.left_out[method] = _unfinished(method, every_run, list(ranked))
    board.left_out.update(failed)
    board.setup += [*selection_lines(specs), hyperparameter_source(specs[0], datasets)]
    board.notes += [f"warning: {dataset} holds {warning}" for dataset in datasets
                    for warning in [feature_dir_warning(dataset)] if warning]
    return tables, board, write_leaderboard(out_dir, board, title=title)
