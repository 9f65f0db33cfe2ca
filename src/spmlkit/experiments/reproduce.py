"""A published table regenerated under its own protocol, beside the published numbers, in two readings.

``spmlkit reproduce crisp-tabular`` reruns CRISP's tabular experiment (Liu, Xu, Wang, Geng, "Can
Class-Priors Help Single-Positive Multi-Label Learning?", arXiv 2309.13886, Tables 2, 8, 9, 10 and
11) on the four of its six data sets that spmlkit can read, for every method of those tables that
spmlkit has (a method registered later gets its row by being registered; one that trains on images
only is left out, and named): the papers' protocol (docs/protocol.md, "The tabular protocol") as
sweeps into one results store, so an interrupted reproduction resumes and a finished run is never
trained twice. A method whose network on features is its own (MIME's Gaussian bottleneck) trains
it in a sweep of its own.

Every row is read in one or two ways (docs/reproductions.md, "Two readings"):

* **fair grid**, every method: the papers' grid (lr x weight decay x batch size, and the
  hyperparameters a paper leaves open, :attr:`Reproduction.grid_hparams`), the configuration chosen
  on validation by a named selection rule (:mod:`~spmlkit.experiments.selection`; ``val_map`` unless
  ``select`` says otherwise), with the hyperparameters published for the set where a preset holds
  them (SMILE's README values), else the recipe's defaults;
* **as published**, the methods whose code fixes every setting and the rule that reports an epoch
  (:attr:`Reproduction.as_published`: SMILE's README command per set, lr, batch and epochs of its
  code, ``Best.select``): that setting, as the code ran it, over the same trials.

Each reading's test metrics, mean and population std over the trials, stand beside the published
mean and std with the difference in units of the published std::

    z = (ours - published) / max(published std, 0.0005)

(0.0005 is half the last printed digit) -- but only where the protocol run is the paper's (its
trials, its epochs, every row): a quick check with fewer prints no z. The compared values use the
papers' metric code (SMILE's conventions, :mod:`spmlkit.metrics.smile_convention`); spmlkit's own
are kept beside them. A method whose runs failed keeps its row, with the failure named; methods
that recorded class priors (CRISP) also show the priors' error at the selected epoch. The tables
themselves are :mod:`~spmlkit.experiments.reproduce_tables`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from .benchmark_hold import WAIT_SECONDS, grid_digest, sweep_until_none_held
from .presets import PRESETS, RECIPE_DEFAULTS
from .published import display_name, published_rows
from .report import select_and_aggregate
from .reproductions import REPRODUCTIONS, PublishedRun, Reproduction, get_reproduction
from .selection import check_rule, needs_epoch_metrics, read_at
from .store import ResultsStore
from .sweep import SweepResult, SweepSpec, expand, run_sweep

__all__ = ["Reproduction", "REPRODUCTIONS", "ReproducedCell", "ReproductionPlan", "Protocol", "FAIR", "PUBLISHED",
           "METRICS", "get_reproduction", "reproduction_methods", "images_only_methods", "images_only_note",
           "check_methods", "plan_reproduction", "reproduction_sweeps", "published_hparams", "published_value",
           "row_label", "run_reproduction", "summarize_reproduction", "STD_FLOOR"]

STORE_NAME = "results.db"
#: the smallest published std a difference is divided by: half the last printed digit (0.001)
STD_FLOOR = 0.0005
#: the two readings of a row (docs/reproductions.md, "Two readings")
FAIR, PUBLISHED = "fair grid", "as published"
#: metric -> (its name in tables, whether larger is better, the run record's key in spmlkit's convention)
METRICS: dict[str, tuple[str, bool, str]] = {
    "ranking_loss": ("Ranking loss", False, "ranking_loss"),
    "example_ap": ("Average precision", True, "example_ap"),
    "coverage": ("Coverage", False, "coverage"),
    "hamming_loss": ("Hamming loss", False, "hamming_loss@0.5"),
    "one_error": ("One-error", False, "one_error"),
}
#: the configuration of a grid point, as the fair grid selects among them
_CONFIG_KEYS = ("lr", "batch_size", "weight_decay", "hparams")


# --------------------------------------------------------------------------- which methods


def reproduction_methods(rep: Reproduction) -> tuple[str, ...]:
    """Every method of the published tables that spmlkit has registered, in the tables' row order, then
    the reproduction's references (:attr:`Reproduction.references`) that spmlkit has."""
    from ..methods import METHODS

    published = {r.method for table in rep.tables for r in published_rows(source=table)}
    papers = [m for m in dict.fromkeys(rep.method_labels.values()) if m in published]
    return tuple(m for m in [*papers, *rep.references] if m in METHODS and METHODS[m].on_features.trains)


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


#: the source of spmlkit's own tuned presets, which are not a paper's published hyperparameters
_OWN_TUNING = "spmlkit (chosen on validation)"


def published_hparams(method: str, dataset: str) -> dict[str, Any]:
    """The hyperparameters published for ``method`` on ``dataset``: those of its (method, dataset)
    preset when a paper's values fill it, else none (the recipe's defaults)."""
    preset = PRESETS.get(f"{method}/{dataset}")
    if preset is None or preset.source == _OWN_TUNING:
        return {}
    return dict(preset.config.get("hparams", {}))


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Protocol:
    """What a reproduction runs: trials, epochs and rows, the paper's unless a quick check changed them."""

    trials: int
    epochs: int
    subset: int | None = None

    def differences(self, rep: Reproduction) -> list[str]:
        """How this protocol differs from the paper's, in words ([] when it is the paper's)."""
        out = []
        if self.trials != rep.trials:
            out.append(f"{self.trials} trial{'s' if self.trials != 1 else ''} instead of {rep.trials}")
        if self.epochs != rep.epochs:
            out.append(f"{self.epochs} epoch{'s' if self.epochs != 1 else ''} instead of {rep.epochs}")
        if self.subset is not None:
            out.append(f"the first {self.subset} rows of each set instead of every row")
        return out

    def words(self) -> str:
        """The protocol in a few words, for a table's heading."""
        seeds = "seed 0" if self.trials == 1 else f"seeds 0-{self.trials - 1}"
        rows = "every row of each set" if self.subset is None else f"the first {self.subset} rows of each set"
        return f"{self.trials} trial{'s' if self.trials != 1 else ''} ({seeds}), {self.epochs} epochs, {rows}"


@dataclass
class ReproductionPlan:
    """Everything a reproduction runs and reports: its data sets (the published name -> the dataset
    argument: a registered set, or a paper's ``.mat`` file standing for it), its methods, the protocol,
    the fair grid's rule, the sweeps of each reading, and what was left out and why."""

    rep: Reproduction
    datasets: dict[str, str]
    methods: tuple[str, ...]
    protocol: Protocol
    rule: str
    fair: list[SweepSpec]
    published: list[tuple[PublishedRun, SweepSpec]]
    left_out: dict[str, str] = field(default_factory=dict)  # method -> why it was not run
    notes: list[str] = field(default_factory=list)

    @property
    def specs(self) -> list[SweepSpec]:
        """Every sweep, fair grid first."""
        return [*self.fair, *(spec for _, spec in self.published)]

    @property
    def comparable(self) -> bool:
        """Whether the protocol run is the paper's, so that a difference in published stds means something."""
        return not self.protocol.differences(self.rep)


def _dataset_arguments(rep: Reproduction, given: Sequence[str] | None) -> dict[str, str]:
    """``--datasets``: each a set of the paper (``yeast``), or a paper's data file standing for one
    (``yeast=FILE.mat``, or ``FILE.mat`` whose name is the set's). None: every set it has; an empty list
    is refused, as is a set named twice."""
    from ..data.mat_file import is_mat_file
    from .sweep.spec import first_repeated, repeat_words

    if given is None:
        return dict(rep.datasets)
    if not given:
        raise ValueError(f"--datasets is empty; name data sets of {rep.name} ({', '.join(rep.datasets)}), or leave "
                         "the option out for all of them")
    out: list[tuple[str, str]] = []
    for item in given:
        name, _, path = item.partition("=") if "=" in item else ("", "", item)
        if not name and is_mat_file(item):
            stem = Path(item).stem.lower()
            name = next((n for n in rep.datasets if n.lower() == stem), "")
            if not name:
                raise ValueError(f"--datasets {item}: a .mat file stands for one of {rep.name}'s sets "
                                 f"({', '.join(rep.datasets)}); name it as SET=FILE.mat")
        elif not name:
            name, path = item, ""
        if name not in rep.datasets:
            raise ValueError(f"{rep.name} has no data set {name!r}; choose from {', '.join(rep.datasets)}")
        if path and not is_mat_file(path):
            raise ValueError(f"--datasets {item}: SET=FILE names a paper's .mat data file; {path} is not one")
        out.append((name, path or rep.datasets[name]))
    pair = first_repeated([name for name, _ in out])
    if pair is not None:
        raise ValueError(f"--datasets {repeat_words(*pair)}; give each value once")
    return dict(out)


def _check_methods_given(methods: Sequence[str] | None) -> None:
    from .sweep.spec import first_repeated, repeat_words

    if methods is not None and not methods:
        raise ValueError("--methods is empty; name methods, or leave the option out for every method of the tables")
    pair = first_repeated(methods or ())
    if pair is not None:
        raise ValueError(f"--methods {repeat_words(*pair)}; give each value once")


def plan_reproduction(rep: Reproduction, store: str | Path, *, datasets: Sequence[str] | None = None,
                      methods: Sequence[str] | None = None, trials: int | None = None, epochs: int | None = None,
                      subset: int | None = None, plugins: Sequence[str] = (), select: str = "val_map"
                      ) -> ReproductionPlan:
    """The reproduction's sweeps, with every input checked before any run (ValueError, one line): an
    empty or repeated ``datasets`` or ``methods``, a method that trains on images only, a ``subset``
    the data cannot give (more rows than a set has, too few to partition), a method named in
    ``methods`` that cannot run in ``epochs``. Of the default methods, one that cannot run in
    ``epochs`` (EM+APL's warm-up of 5 in 2 epochs) is left out and said (:attr:`ReproductionPlan.left_out`);
    values of a grid axis that cannot run are dropped and said (CRISP's warm-up as long as the run,
    which would train AN throughout)."""
    from .sweep.execute import methods_that_cannot_run

    check_rule(select)
    named = _dataset_arguments(rep, datasets)
    _check_methods_given(methods)
    chosen = tuple(methods) if methods is not None else reproduction_methods(rep)
    check_methods(rep, chosen)
    protocol = Protocol(rep.trials if trials is None else trials, rep.epochs if epochs is None else epochs, subset)
    if subset is not None:
        files = [argument for name, argument in named.items() if argument != rep.datasets[name]]
        if files:
            raise ValueError(f"--subset cuts a whole set before its random partition; {files[0]} brings its own "
                             "partition: leave --subset out")
    notes: list[str] = []
    grid, left_out = _grid_hparams(rep, chosen, protocol.epochs, notes, named_methods=methods is not None)
    chosen = tuple(m for m in chosen if m not in left_out)
    probe = _fair_specs(rep, named, chosen, protocol, store, plugins, grid, select)
    cannot = {}
    for spec in probe:  # every grid point's settings, as a sweep checks them: a bad subset is refused here
        cannot.update(methods_that_cannot_run(spec))
    if cannot and methods is not None:
        raise ValueError(f"{next(iter(cannot.values()))}; leave it out of --methods or give more --epochs")
    left_out.update({m: f"{row_label(rep, m)}, which cannot run in {exc.epochs} epoch(s): {exc.reason}"
                     for m, exc in cannot.items()})
    chosen = tuple(m for m in chosen if m not in cannot)
    if not chosen:
        raise ValueError(f"no method of {rep.name} can run in {protocol.epochs} epoch(s): not "
                         + "; ".join(left_out.values()))
    fair = _fair_specs(rep, named, chosen, protocol, store, plugins, grid, select)
    published = _published_specs(rep, named, chosen, protocol, store, plugins)
    for _, spec in published:  # their settings checked too, before any run of the fair grid
        methods_that_cannot_run(spec)
    return ReproductionPlan(rep, named, chosen, protocol, select, fair, published, left_out, notes)


def _name_of(named: dict[str, str], argument: str) -> str:
    return next(name for name, arg in named.items() if arg == argument)


def _grid_hparams(rep: Reproduction, methods: Sequence[str], epochs: int, notes: list[str], *,
                  named_methods: bool) -> tuple[dict[str, dict[str, list[Any]]], dict[str, str]]:
    """The open hyperparameters swept per method, without the warm-up lengths a run of ``epochs``
    cannot get past (a warm-up as long as the run trains AN throughout: it is not the method). A method
    left with none is left out (refused when the user named it)."""
    grid: dict[str, dict[str, list[Any]]] = {}
    left_out: dict[str, str] = {}
    for method in methods:
        for name, values in rep.grid_hparams.get(method, {}).items():
            kept = [v for v in values if not (name == "warmup_epochs" and v >= epochs)]
            dropped = [v for v in values if v not in kept]
            label = row_label(rep, method)
            if not kept:
                why = (f"{label}, every {name} of whose grid ({', '.join(map(str, values))}) is as long as the run "
                       f"({epochs} epochs) or longer, so it would train AN throughout")
                if named_methods:
                    raise ValueError(f"method {method!r} cannot run in {epochs} epoch(s): {why}; give more --epochs")
                left_out[method] = why
                break
            if dropped:
                notes.append(f"{label}: {name} {', '.join(map(str, dropped))} left out of its grid, as long as the run "
                             f"({epochs} epochs) or longer")
            grid.setdefault(method, {})[name] = kept
    return grid, left_out


def _settings(rep: Reproduction, protocol: Protocol, argument: str, *, epochs: int | None = None,
              epoch_metrics: bool = False) -> tuple[dict[str, Any], list[str] | None]:
    """The settings of a data set's runs and their observation: the paper's protocol with the quick
    check's changes; a paper's data file trains on its own partition and its authors' observed
    positives instead of a random partition of ours (docs/protocol.md, "A paper's own partition")."""
    from ..data.mat_file import is_mat_file

    settings = dict(rep.settings)
    settings["epochs"] = protocol.epochs if epochs is None else epochs
    if protocol.subset is not None:
        settings["subset"] = protocol.subset
    if epoch_metrics:
        settings["epoch_metrics"] = True
    if is_mat_file(argument):
        settings["partition"] = "official"
        return settings, ["given"]
    return settings, ["single_positive"]


def _fair_specs(rep: Reproduction, named: dict[str, str], methods: Sequence[str], protocol: Protocol,
                store: str | Path, plugins: Sequence[str], grid: dict[str, dict[str, list[Any]]], rule: str
                ) -> list[SweepSpec]:
    """The fair grid as one sweep per data set (a method with its own network on features: one more),
    each method with the hyperparameters published for the set and the open ones swept."""
    specs = []
    for name, argument in named.items():
        settings, observations = _settings(rep, protocol, argument, epoch_metrics=needs_epoch_metrics(rule))
        own_settings = {k: v for k, v in settings.items() if k not in ("head", "hidden")}
        for group, group_settings in (([m for m in methods if not _own_network(m)], settings),
                                      ([m for m in methods if _own_network(m)], own_settings)):
            if not group:
                continue
            hparams = {m: {**published_hparams(m, name), **grid.get(m, {})} for m in group}
            specs.append(SweepSpec(
                name=f"reproduce-{rep.name}", datasets=[argument], methods=list(group),
                seeds=list(range(protocol.trials)), lrs=list(rep.lrs), batch_sizes=list(rep.batch_sizes),
                observations=observations, hparams={m: hp for m, hp in hparams.items() if hp},
                settings=dict(group_settings), val_variant="clean", store=str(store),
                weight_decays=list(rep.weight_decays), hparams_from=RECIPE_DEFAULTS, plugins=list(plugins)))
    return specs


def _published_specs(rep: Reproduction, named: dict[str, str], methods: Sequence[str], protocol: Protocol,
                     store: str | Path, plugins: Sequence[str]) -> list[tuple[PublishedRun, SweepSpec]]:
    """Each method's setting as its code ran it, on every data set its README runs: one grid point per
    trial, the code's lr, batch, weight decay and epochs (a quick check's ``--epochs`` changes them too)."""
    out = []
    for run in rep.as_published:
        if run.method not in methods:
            continue
        for name, argument in named.items():
            if name not in run.hparams:
                continue
            epochs = run.epochs if protocol.epochs == rep.epochs else protocol.epochs
            settings, observations = _settings(rep, protocol, argument, epochs=epochs, epoch_metrics=True)
            out.append((run, SweepSpec(
                name=f"reproduce-{rep.name}-as-published", datasets=[argument], methods=[run.method],
                seeds=list(range(protocol.trials)), lrs=[run.lr], batch_sizes=[run.batch_size],
                observations=observations, hparams={run.method: dict(run.hparams[name])} if run.hparams[name] else {},
                settings=settings, val_variant="clean", store=str(store), weight_decays=[run.weight_decay],
                hparams_from=RECIPE_DEFAULTS, plugins=list(plugins))))
    return out


def reproduction_sweeps(rep: Reproduction, store: str | Path, *, datasets: Sequence[str], methods: Sequence[str],
                        trials: int | None = None, epochs: int | None = None, subset: int | None = None,
                        plugins: Sequence[str] = ()) -> list[SweepSpec]:
    """The fair grid's sweeps of a reproduction (:func:`plan_reproduction` has both readings and the checks)."""
    return plan_reproduction(rep, store, datasets=datasets, methods=methods, trials=trials, epochs=epochs,
                             subset=subset, plugins=plugins).fair


# --------------------------------------------------------------------------- running


def grid_of(specs: Sequence[SweepSpec]) -> str:
    """The digest of a reproduction's runs (:func:`~spmlkit.experiments.benchmark_hold.grid_digest`):
    two reproductions of one grid share an output folder, two of different grids do not at once."""
    return grid_digest(r["run_id"] for spec in specs for r in expand(spec))


def run_reproduction(plan: ReproductionPlan | Sequence[SweepSpec], *, jobs: int | None = 1,
                     on_result: Callable[[dict[str, Any]], None] | None = None,
                     on_start: Callable[[int, int], None] | None = None, backend: str = "process",
                     ray_options: Any = None, on_wait: Callable[[int], None] | None = None,
                     wait_seconds: float = WAIT_SECONDS) -> list[SweepResult]:
    """Train every unfinished run of a reproduction's sweeps into their store, one sweep after the other,
    here (``backend="process"``, ``jobs`` workers) or on Ray (``backend="ray"``, this machine or a
    cluster, :mod:`~spmlkit.experiments.sweep.ray_backend`); ``on_start(total, finished)`` is told the
    whole reproduction's counts, once. Runs another live sweep holds are waited for, as a benchmark
    waits (:func:`~spmlkit.experiments.benchmark_hold.sweep_until_none_held`), so the tables written
    next hold every run of the grid."""
    specs = plan.specs if isinstance(plan, ReproductionPlan) else list(plan)
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
            lambda first, spec=spec: run_sweep(spec, jobs=jobs, on_result=on_result, on_start=start if first else None,
                                               backend=backend, ray_options=ray_options),
            on_wait, wait_seconds))
    return results


def _unfinished(spec: SweepSpec) -> int:
    """Runs of ``spec`` its store does not hold as finished."""
    ids = {r["run_id"] for r in expand(spec)}
    if not Path(spec.store).is_file():
        return len(ids)
    done = ResultsStore(spec.store).to_dataframe()
    return len(ids) if done.empty else len(ids - set(done.loc[done["status"].isin(("ok", "failed")), "run_id"]))


# --------------------------------------------------------------------------- summarising


@dataclass(frozen=True)
class ReproducedCell:
    """One (table, method, data set, reading): ours over the trials beside the published number.
    ``ours`` is None where no run of the row finished (``error`` says why)."""

    table: str
    metric: str
    method: str
    label: str  # the paper's row label
    dataset: str
    ours: float | None  # mean over trials, the papers' convention (SMILE's metric code)
    ours_std: float | None  # population std over trials
    trials: int
    ours_spmlkit: float | None  # the same runs in spmlkit's convention
    published: float | None
    published_std: float | None
    config: dict[str, Any]  # the selected lr, weight decay, batch size (and swept hyperparameters)
    reading: str = FAIR
    rule: str = "val_map"
    runs: int = 0  # runs of the row's sweep (every configuration and trial)
    failed: int = 0  # of them, failed
    error: str = ""  # the first line of the first failure
    selected_epoch: float | None = None  # mean over the trials
    prior_error: float | None = None  # mean |estimated - true prior| at the selected epoch (methods that estimate)
    prior_mean: float | None = None  # mean estimated prior at the selected epoch
    true_prior: float | None = None  # the set's mean true prior
    comparable: bool = True  # the protocol run is the paper's

    @property
    def z(self) -> float:
        """(ours - published) in units of the published std (floored at :data:`STD_FLOOR`); NaN where
        either is missing or the protocol is not the paper's."""
        if self.ours is None or self.published is None or self.published_std is None or not self.comparable:
            return math.nan
        return (self.ours - self.published) / max(self.published_std, STD_FLOOR)


def _records(store: str | Path, spec: SweepSpec) -> pd.DataFrame:
    ids = {r["run_id"] for r in expand(spec)}
    if not Path(store).is_file():
        return pd.DataFrame()
    df = ResultsStore(store).to_dataframe()
    return df if df.empty else df[df["run_id"].isin(ids)]


def summarize_reproduction(plan: ReproductionPlan, store: str | Path) -> list[ReproducedCell]:
    """Every (table, method, data set, reading) of the plan: the selected configuration's test metrics
    over the trials beside the published numbers, or the failure of its runs. Nothing run at all: []."""
    rep = plan.rep
    cells: list[ReproducedCell] = []
    readings = [(FAIR, plan.rule, spec) for spec in plan.fair] + [(PUBLISHED, run.rule, spec)
                                                                  for run, spec in plan.published]
    truths: dict[str, float | None] = {}
    for reading, rule, spec in readings:
        records = _records(store, spec)
        if records.empty:
            continue
        name = _name_of(plan.datasets, spec.datasets[0])
        for method in spec.methods:
            mine = records[records["method"] == method]
            if mine.empty:
                continue
            cells += _cells(plan, reading, rule, name, method, mine, truths)
    order = {m: i for i, m in enumerate(plan.methods)}
    names = list(rep.datasets)
    return sorted(cells, key=lambda c: (list(rep.tables).index(c.table), order.get(c.method, len(order)),
                                        (FAIR, PUBLISHED).index(c.reading), names.index(c.dataset)))


def _cells(plan: ReproductionPlan, reading: str, rule: str, dataset: str, method: str, runs: pd.DataFrame,
           truths: dict[str, float | None]) -> list[ReproducedCell]:
    """The five tables' cells of one (reading, data set, method) from its runs."""
    rep = plan.rep
    failed = runs[runs["status"] == "failed"]
    error = "" if failed.empty else str(failed["error"].iloc[0]).strip().splitlines()[0]
    ok = runs[runs["status"] == "ok"]
    base = dict(method=method, label=row_label(rep, method), dataset=dataset, reading=reading,
                rule=rule, runs=len(runs), failed=len(failed), error=error, comparable=plan.comparable)
    try:
        read = None if ok.empty else read_at(ok, rule)
    except ValueError as exc:  # runs that cannot be read under the rule count as failed, with the reason
        read, base = None, {**base, "failed": len(runs), "error": str(exc)}
    if read is None:
        return [ReproducedCell(table=table, metric=metric, ours=None, ours_std=None, trials=0, ours_spmlkit=None,
                               published=published_value(method, dataset, table)[0],
                               published_std=published_value(method, dataset, table)[1], config={}, **base)
                for table, metric in rep.tables.items()]
    agg = select_and_aggregate(read, by=("dataset", "method"), config_keys=_CONFIG_KEYS, metric="test_map",
                               scale=1.0, rule=rule)
    row = agg.iloc[0]
    chosen = read.set_index("run_id").loc[list(row["run_ids"])]
    config = {"lr": float(row["lr"]), "weight_decay": float(row["weight_decay"]), "batch_size": int(row["batch_size"]),
              **{f"hp.{k}": v for k, v in (row.get("hparams") or {}).items()}}
    priors = _priors(chosen)
    if priors["prior_error"] is not None and dataset not in truths:
        truths[dataset] = _true_prior(plan.datasets[dataset], plan.protocol.subset)
    out = []
    for table, metric in rep.tables.items():
        ours = chosen[f"test.smile.{metric}" + ("@0.5" if metric == "hamming_loss" else "")].to_numpy(float)
        theirs, theirs_std = published_value(method, dataset, table)
        out.append(ReproducedCell(
            table=table, metric=metric, ours=float(ours.mean()), ours_std=float(ours.std()), trials=len(ours),
            ours_spmlkit=float(chosen[f"test.{METRICS[metric][2]}"].to_numpy(float).mean()), published=theirs,
            published_std=theirs_std, config=config, selected_epoch=float(chosen["selected_epoch"].mean()),
            true_prior=truths.get(dataset) if priors["prior_error"] is not None else None, **priors, **base))
    return out


def published_value(method: str, dataset: str, table: str) -> tuple[float | None, float | None]:
    """The published (mean, std) of a method on a set in a table, (None, None) where there is none."""
    rows = published_rows(method, dataset, source=table)
    return (rows[0].mean, rows[0].std) if rows else (None, None)


def _priors(chosen: pd.DataFrame) -> dict[str, float | None]:
    """The class priors of the selected runs at their selected epochs (methods that estimate them,
    CRISP): the mean over trials of the priors' error and of the mean estimated prior."""
    errors, means = [], []
    for history, epoch in zip(chosen["history"], chosen["selected_epoch"]):
        at = next((e for e in history or [] if e.get("epoch") == epoch), {})
        if "class_prior_error" in at:
            errors.append(float(at["class_prior_error"]))
            means.append(float(at.get("labeling_prior_mean", math.nan)))
    if not errors:
        return {"prior_error": None, "prior_mean": None}
    return {"prior_error": float(np.mean(errors)), "prior_mean": float(np.mean(means))}


def _true_prior(argument: str, subset: int | None) -> float | None:
    """The mean over classes of each class's share of positive rows, over the set's rows with a
    positive (the first ``subset`` of them): what the estimated priors are compared with, on average."""
    from ..data.registry import load_features

    ds = load_features(argument)
    parts = [y for y in (ds.Y_train, ds.Y_val, ds.Y_test) if y is not None]
    Y = np.concatenate([np.asarray(y) for y in parts])
    Y = Y[Y.any(axis=1)][:subset]
    return float(Y.mean()) if len(Y) else None


def row_label(rep: Reproduction, method: str) -> str:
    """A method's row label: the paper's, else spmlkit's (:func:`~spmlkit.experiments.published.display_name`)."""
    return next((label for label, m in rep.method_labels.items() if m == method), display_name(method))
