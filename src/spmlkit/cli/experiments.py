"""``spmlkit benchmark``, ``sweep``, ``report`` and ``presets``: many runs, one store, paper-style tables."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import console, csv_list, plugin_refs, positive_int, print_whole_words

if TYPE_CHECKING:
    from ..experiments.sweep.ray_backend import RayOptions

__all__ = ["add_parsers"]

_FORMATS = ("md", "tex", "csv")
#: one meaning of --retry-failed for sweep and benchmark
_RETRY_HELP = ("run the grid's runs recorded as failed again, once their cause is fixed (a broken data set mended, "
               "a missing one copied in) (default: off: a recorded failure counts as finished and its error is "
               "printed again)")


def add_ray_options(p: argparse.ArgumentParser) -> None:
    """``--backend`` and the Ray options, one meaning for every command that runs a grid (sweep, reproduce)."""
    p.add_argument("--backend", choices=("process", "ray"), default="process",
                   help="process: worker processes on this machine (default); ray: Ray tasks (a run, or runs that "
                        "train as one group), on this machine or a Ray cluster (pip install \"spmlkit[ray]\")")
    p.add_argument("--address", help="--backend ray: the Ray cluster to use (HEAD:6379, or auto); default: start "
                                     "Ray on this machine")
    p.add_argument("--gpus-per-run", type=float, help="--backend ray: GPUs of an image run (default 1 when the "
                                                      "cluster has GPUs, else 0; feature runs use none)")
    p.add_argument("--cpus-per-run", type=float, help="--backend ray: CPUs of a task (default 1)")
    p.add_argument("--max-retries", type=int, help="--backend ray: times a task whose worker died is run again "
                                                   "(default 2)")


def add_select_option(p: argparse.ArgumentParser, chooses: str, more: str = "") -> None:
    """``--select``, one meaning for every command that tabulates runs (report, benchmark, sweep, reproduce)."""
    from ..experiments.selection import RULES

    p.add_argument("--select", choices=tuple(RULES), default="val_map",
                   help=f"the rule that chooses {chooses}: val_map (best mean validation mAP) or smile_votes (SMILE's "
                        f"Best.select: five validation measures vote{more}) (default val_map; "
                        'docs/protocol.md, "Selection rules")')


def add_parsers(sub: Any) -> None:
    from ..experiments.benchmark_defaults import DEFAULT_LRS, DEFAULT_SEEDS, MAX_EXTEND_LRS
    from ..experiments.suites import SUITES

    p = sub.add_parser("benchmark", help="compare every method on a data set (paper-style table), or on several "
                                         "with a leaderboard across them",
                       description="Every method x lr x seed on one data set, or several: a named feature set, a "
                                   "feature folder (spmlkit extract, spmlkit prepare table), or images (a benchmark, "
                                   "a folder written by spmlkit prepare). A user's own data trains on its own labels "
                                   "(observation given) and selects on its observed labels, as spmlkit train does.")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--dataset", action="append", dest="datasets", metavar="DATASET",
                       help="a named data set (`spmlkit datasets`), a feature folder, or a folder written by `spmlkit "
                            "prepare` (default: yeast, shipped with the river package); repeat it for a table per "
                            "data set and a leaderboard across them")
    which.add_argument("--suite", choices=tuple(SUITES), help="every data set of a suite (mulan: the 12 MULAN sets)")
    p.add_argument("--methods", type=csv_list(str),
                   help="comma-separated methods (default: all of spmlkit's, and those of the plug-ins named with "
                        "--plugin, a --config file or $SPMLKIT_PLUGINS; on data with observed labels only, all but the "
                        "references bce and iun, which train on full labels; see `spmlkit methods`)")
    p.add_argument("--seeds", type=csv_list(int), default=DEFAULT_SEEDS, help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--lrs", type=csv_list(float), default=DEFAULT_LRS,
                   help="lr grid, selected on val (default 1e-3,3e-3,1e-2); a method whose best lr is the lowest "
                        "or highest is marked (lowest)/(highest) in the table")
    p.add_argument("--extend-lrs", action="store_true",
                   help="where a method's best lr is the lowest or highest of --lrs, try the next lr beyond it (the "
                        "grid's own ratio at that end, e.g. 0.03, 0.1, 0.3 above the default grid), again until "
                        f"the best lr is inside the grid, at most {MAX_EXTEND_LRS} lrs per method; finished runs "
                        "in results.db are reused (default: off; docs/benchmark.md)")
    p.add_argument("--weight-decays", type=csv_list(float), metavar="WDS",
                   help="weight-decay grid, selected on val with the lrs (default: none swept, every run at 0)")
    p.add_argument("--observation",
                   help="which training labels are seen: single_positive | pos=K,neg=M | ratio=R | full | given (the "
                        "data's own labels) (default: the data set's own: given for your own data, single_positive "
                        "for a benchmark)")
    p.add_argument("--epochs", type=int, help="epochs of every run (default 20)")
    p.add_argument("--batch-size", type=int, metavar="N",
                   help="training examples per step (default: the data set's, as `spmlkit train` uses: 64 on feature "
                        "sets, 16 on your own images)")
    p.add_argument("--head", choices=("linear", "mlp"), help="feature sets: the network on the features (default "
                                                             "linear)")
    p.add_argument("--val", choices=("clean", "observed"), default=None,
                   help="validation labels for model selection (default: clean where the data set has full "
                        "labels, observed for your own data)")
    p.add_argument("--subset", type=int, help="use only the first N training rows, for a quick check (default: all)")
    p.add_argument("--hparams-from", metavar="SOURCE",
                   help="where every method's hyperparameters come from, the same on every data set: defaults (each "
                        "method's recipe defaults) or a data set whose presets to use everywhere, e.g. yeast "
                        "(`spmlkit presets --dataset yeast`; methods without one keep their defaults). Default: the "
                        "data set's own presets with one --dataset, defaults with several")
    p.add_argument("--with-plugins", action="store_true",
                   help="add the methods of installed packages' plug-ins (spmlkit.plugins entry points) to the "
                        "default methods (default: off; spmlkit's methods and those of the plug-ins named with "
                        "--plugin, a --config file or $SPMLKIT_PLUGINS; docs/plugins.md)")
    add_select_option(p, "each run's epoch and each method's lr", "; the runs then record every epoch's measures")
    p.add_argument("--rank-references", action="store_true",
                   help="rank bce (full labels) and iun (one positive and all negatives) with the other methods "
                        "(default: shown beside the ranks, not ranked, since they see more labels)")
    images = p.add_argument_group("network (image data sets)")
    images.add_argument("--backbone", help="torchvision:<name> | timm:<name> | small:cnn (default: the data set's; "
                                           "torchvision:resnet50 for your own images)")
    images.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                        help="start from ImageNet weights, or (--no-pretrained) from random ones, downloading nothing "
                             "(default: the data set's; pretrained for your own images)")
    images.add_argument("--image-size", type=int, metavar="PIXELS",
                        help="images are resized to PIXELS x PIXELS (default: the data set's; 448 for your own images)")
    p.add_argument("--config", metavar="FILE",
                   help="YAML/TOML/JSON file of run settings for every run, as `spmlkit train --config` reads (the "
                        "options given here win; the grid's data sets, methods, seeds and lrs are set by the options "
                        "only; default: none)")
    p.add_argument("--jobs", type=positive_int,
                   help="parallel worker processes (default: one per CPU this process may use; 1 with an image "
                        "data set)")
    p.add_argument("--out", default="spmlkit-results/benchmark",
                   help="output folder: results.db (finished runs are reused) and the tables (with several data "
                        "sets: one folder per data set and the leaderboard) (default spmlkit-results/benchmark)")
    p.add_argument("--retry-failed", action="store_true", help=_RETRY_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_benchmark)

    p = sub.add_parser("sweep", help="run a grid of methods x hyperparameters x seeds into a results store",
                       description="Run every unfinished run of a sweep file's grid into a results store; the same "
                                   "command resumes. The sweep file's keys: docs/sweep-files.md.")
    p.add_argument("config", help="sweep file (YAML/TOML/JSON); every key is described in docs/sweep-files.md")
    p.add_argument("--dry-run", action="store_true",
                   help="check the sweep file and print its grid (its size and first runs) and exit: nothing is "
                        "trained or written")
    p.add_argument("--jobs", type=positive_int,
                   help="parallel worker processes (default: one per CPU this process may use for feature "
                        "datasets, 1 with an image dataset); with --backend ray, the most runs at once (default: as "
                        "many as the cluster's CPUs hold)")
    p.add_argument("--store", help="results database (default: the sweep file's `store`, results.db beside it)")
    p.add_argument("--max-runs", type=positive_int, help="stop after this many runs (resume later)")
    p.add_argument("--retry-failed", action="store_true", help=_RETRY_HELP)
    add_ray_options(p)
    add_select_option(p, "what the store's runs will be read with", "; each run then records every epoch's "
                      "validation and test measures, epoch_metrics, which it reads")
    p.add_argument("--quiet", action="store_true", help="no progress bar (default: one)")
    p.set_defaults(func=run_sweep)

    p = sub.add_parser("report", help="paper-style tables and the papers' analysis figures from a results store")
    p.add_argument("--store", required=True, help="results database written by `spmlkit sweep`")
    p.add_argument("--out", default="report", help="output folder (default report)")
    p.add_argument("--reference", help="show published numbers beside ours: EM, OPML, GR or PU-MLC (default: none)")
    p.add_argument("--metric", default="test_map", help="metric column to tabulate (default test_map)")
    add_select_option(p, "each run's epoch and each row's configuration", "; it needs runs that recorded every "
                      "epoch, sweep --select smile_votes")
    p.add_argument("--formats", type=csv_list(str), default=_FORMATS, help="table formats (md,tex,csv)")
    p.add_argument("--no-figures", action="store_true", help="tables only (default: tables and figures)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into --out even where it holds files of the report's names that spmlkit did not write")
    p.set_defaults(func=run_report, plugins_optional=True)  # a store's numbers need no plug-in

    p = sub.add_parser("presets", help="list the presets and the published numbers they target")
    p.add_argument("--dataset", help="only presets of this dataset (default: all)")
    p.add_argument("--source", help="show each preset's published number from this paper (EM, OPML, GR, PU-MLC, "
                                    "CRISP, BoostLU), leaving out presets it has none for (default: the preset's own "
                                    "source)")
    p.set_defaults(func=run_presets)


class _SweepProgress:
    """A rich progress bar fed by a sweep's callbacks; it remembers the failed runs."""

    def __init__(self, screen: Any, name: str, quiet: bool, where: str, jobs: int | str):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.screen, self.name, self.where, self.jobs = screen, name, where, jobs
        self.failures: list[dict[str, Any]] = []
        self.recorded = 0
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=screen,
                                 disable=quiet)
        self.task = self.progress.add_task(name, total=None)

    def on_start(self, total: int, done: int) -> None:
        self.progress.update(self.task, total=total, completed=done)
        print_whole_words(self.screen, f"{self.name}: {total} runs, {done} already finished in {self.where}, "
                                       f"{self.jobs} worker(s)")

    def on_result(self, rec: dict[str, Any]) -> None:
        self.recorded += 1
        if rec["status"] == "failed":
            self.failures.append(rec)
        self.progress.update(self.task, advance=1,
                             description=f"{rec['method']:>8} lr={rec['lr']:g} seed={rec['seed']}")

    def on_wait(self, held: int) -> None:
        """Runs of a benchmark's grid that another live sweep holds: said when their number changes,
        while the benchmark waits for them before writing its tables."""
        if held != getattr(self, "_waiting", None):
            self._waiting = held
            print_whole_words(self.screen, f"waiting for {held} run(s) of this grid that another sweep or benchmark "
                                           "is training, so the tables hold every run", markup=False)

    def on_extend(self, dataset: str, added: dict[str, float], runs: int, done: int) -> None:
        """A step of --extend-lrs: which methods try which lr, and how many runs that adds to the bar."""
        by_lr: dict[float, list[str]] = {}
        for method, lr in added.items():
            by_lr.setdefault(lr, []).append(method)
        tries = "; ".join(f"{', '.join(methods)} at {lr:g}" for lr, methods in by_lr.items())
        task = self.progress.tasks[0]
        self.progress.update(self.task, total=(task.total or 0) + runs, advance=done)
        kept = "" if not done else ", all finished already" if done == runs else f", {done} of them finished already"
        print_whole_words(self.screen, f"--extend-lrs on {dataset}: best lr on the edge of the grid, so trying "
                                       f"{tries} ({runs} run{'s' * (runs != 1)}{kept})", markup=False)

    def on_skip(self, run: dict[str, Any], reason: str) -> None:
        """A run another sweep finished or holds: not ours to run, so it counts as done here."""
        self.progress.update(self.task, advance=1)

    def print_failures(self, records: list[dict[str, Any]] | None = None, label: str = "failed") -> None:
        """One line per error: runs that failed with the same first line (a setting that fails a whole
        method, weights that cannot be had) are one line naming them all, not one line each.
        ``records``: other failed records than this start's (the ones recorded before it)."""
        from rich.markup import escape

        by_error: dict[str, list[dict[str, Any]]] = {}
        for rec in self.failures if records is None else records:
            by_error.setdefault(rec["error"].splitlines()[0], []).append(rec)
        for error, recs in by_error.items():
            if len(recs) == 1:
                rec = recs[0]
                what = f"{rec['run_id']} {rec['method']} lr={rec['lr']:g} seed={rec['seed']}"
            else:
                def values(key: str, form: str = "{}") -> str:  # sorted: workers finish in any order
                    return ",".join(form.format(v) for v in sorted({rec[key] for rec in recs}))

                what = (f"{len(recs)} runs ({values('method')}; lr={values('lr', '{:g}')}; "
                        f"seed={values('seed')})")
            self.screen.print(f"[red]{label}[/red] {escape(what)}: {escape(error)}")

    def print_earlier_failures(self, runs: Any) -> int:
        """Print the failed records of ``runs`` (the grid's records in the store) that this start did
        not run: a recorded failure counts as finished, so without this a table that leaves them out
        would give no reason. Returns how many of the grid's runs are failed, earlier or now."""
        if runs.empty:
            return 0
        failed = runs[runs["status"] == "failed"]
        now = {rec["run_id"] for rec in self.failures}
        earlier = [rec for rec in failed.to_dict("records") if rec["run_id"] not in now]
        if earlier:
            self.print_failures(earlier, label="failed in an earlier start")
            print_whole_words(self.screen, f"{len(earlier)} run(s) of this grid failed in an earlier start and "
                                           "count as finished; fix the cause, then run again with --retry-failed "
                                           "to run them again", markup=False)
        return len(failed)


#: settings a benchmark's --config file may not hold: the grid sets them, each from its own option
_GRID_OPTIONS = {"dataset": "--dataset", "prepared": "--dataset", "method": "--methods", "hparams": "--methods",
                 "seed": "--seeds", "lr": "--lrs", "out": "--out"}
#: the benchmark's own options that a --config file may set instead: option attribute -> setting, default
_FILE_OR_OPTION = {"observation": ("observation", None), "val": ("val_variant", None),
                   "batch_size": ("batch_size", None), "epochs": ("epochs", 20), "head": ("head", "linear"),
                   "subset": ("subset", None)}


def _benchmark_specs(args: argparse.Namespace) -> tuple[list[Any], list[str]]:
    """The benchmark's specs, one per data set, and the notes to print once before it starts: what
    was left out for the data (the references on data without full labels, image settings on a
    feature set). Settings resolve as `train`'s do: the option, else the --config file, else the
    data set's own."""
    from ..data.registry import labels_held
    from ..experiments import benchmark as bm
    from ..experiments.suites import suite_datasets
    from ..methods import METHODS, get_method
    from ..plugins import load_plugins
    from ..training.config import DataConfig, merged_plugins  # train's default dataset is the benchmark's
    from ..training.run_dir import RunDirectory

    datasets = suite_datasets(args.suite) if args.suite else tuple(args.datasets or (DataConfig.dataset,))
    settings = RunDirectory.config_file_settings(args.config) if args.config else {}
    grid = sorted(k for k in settings if k in _GRID_OPTIONS)
    if grid:
        raise ValueError(f"config file {args.config} sets {', '.join(grid)}, which the benchmark's grid sets per run; "
                         f"give {', '.join(sorted({_GRID_OPTIONS[k] for k in grid}))} on the command line instead")
    chosen = {}
    for option, (setting, default) in _FILE_OR_OPTION.items():
        typed = getattr(args, option)
        chosen[option] = typed if typed is not None else settings.pop(setting, default)
    settings.update({k: getattr(args, k) for k in ("backbone", "pretrained", "image_size") if getattr(args, k) is not None})
    plugins = tuple(merged_plugins(plugin_refs(args), settings.pop("plugins", None), where=f"config file {args.config}"))
    load_plugins(plugins)  # a --config file's too, before its methods are looked up
    if args.methods and args.with_plugins:
        raise ValueError("--with-plugins adds the installed plug-ins' methods to the default list of methods; with "
                         "--methods, name every method there instead")
    notes = []
    methods = tuple(args.methods) if args.methods else bm.default_methods(datasets, plugins,
                                                                          installed=args.with_plugins)
    per_dataset = {d: methods for d in datasets}
    if not args.methods:
        references = [m for m in methods if get_method(m).sees_more_labels]
        notes += _references_left_out(per_dataset, references, [d for d in datasets if labels_held(d).labels ==
                                                                "observed"])
        everywhere = bm.default_methods((), plugins, installed=args.with_plugins)  # images: none left out
        image_only = [m for m in everywhere if not METHODS[m].on_features.trains and m not in methods]
        if image_only:  # default_methods leaves them out where a data set is features
            notes.append(f"left out {', '.join(image_only)}: methods that train on images only (`spmlkit methods` "
                         "says why); a benchmark of images alone includes them")
    specs = bm.one_source([bm.BenchmarkSpec(
        dataset=d, methods=per_dataset[d], seeds=tuple(args.seeds), lrs=tuple(args.lrs),
        observation=chosen["observation"], epochs=chosen["epochs"], batch_size=chosen["batch_size"],
        head=chosen["head"], val_variant=chosen["val"], subset=chosen["subset"], settings=settings, plugins=plugins,
        hparams_from=args.hparams_from, weight_decays=None if args.weight_decays is None else tuple(args.weight_decays),
        extend_lrs=args.extend_lrs, select=args.select) for d in datasets])
    if not args.methods:  # every method: one whose warm-up the epochs cannot hold is left out and said
        specs, left_out = _runnable_methods(specs)
        notes += [f"left out {exc.left_out()}" for exc in left_out]
    return specs, notes + _other_kind_notes(specs[0].sweep("results.db"))


def _references_left_out(per_dataset: dict[str, tuple[str, ...]], references: list[str], own: list[str]) -> list[str]:
    """Take ``references`` (methods that need full labels: to train on, or for their class priors) out
    of the methods of the data sets in ``own``, which hold observed labels only (nothing to train
    them on, nothing to compare them with), in place; the note that says so names exactly those data sets, and where they still run."""
    if not (own and references):
        return []
    for d in own:
        per_dataset[d] = tuple(m for m in per_dataset[d] if m not in references)
    others = [d for d in per_dataset if d not in own]
    words = ", ".join(references)
    if not others:
        return [f"left out {words}: references that need full labels, which {', '.join(own)} "
                f"{'does' if len(own) == 1 else 'do'} not have"]
    return [f"left out {words} on {', '.join(own)} only: references that need full labels, which "
            f"{'it does' if len(own) == 1 else 'they do'} not have; they run on {', '.join(others)}"]


def _runnable_methods(specs: list[Any]) -> tuple[list[Any], list[str]]:
    """The benchmark's specs without the methods that cannot run in their epochs (EM+APL's warm-up in a
    run of 2 epochs), and why each was left out; none left at all is refused."""
    import dataclasses

    from ..experiments.sweep.execute import methods_that_cannot_run

    cannot: dict[str, Any] = {}
    for spec in specs:
        cannot.update(methods_that_cannot_run(spec.sweep("results.db")))
    if not cannot:
        return specs, []
    kept = [tuple(m for m in spec.methods if m not in cannot) for spec in specs]  # a data set's own list each
    if not all(kept):
        raise ValueError("no method can run: " + "; ".join(str(exc) for exc in cannot.values()))
    return [dataclasses.replace(spec, methods=methods) for spec, methods in zip(specs, kept)], list(cannot.values())


def _other_kind_notes(spec: Any) -> list[str]:
    """One line per setting that some data sets of a sweep do not use (their runs train without it)."""
    from ..experiments.sweep.execute import settings_for_other_kinds

    from ..training.config import applies_to

    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for setting, datasets in settings_for_other_kinds(spec).items():
        grouped.setdefault((applies_to(setting), tuple(datasets)), []).append(setting)
    return [f"{', '.join(names)} appl{'ies' if len(names) == 1 else 'y'} to {kind[:-1]} data sets only; the runs of "
            f"{', '.join(datasets)} train without {'it' if len(names) == 1 else 'them'}"
            for (kind, datasets), names in grouped.items()]


def _refuse_repeated_options(args: argparse.Namespace) -> None:
    """``--methods an,an``, ``--seeds 0,0``, ``--lrs 0.001,1e-3``: a value given twice would train one
    grid point twice under one id, a table row twice, "mean ± std over 2 seeds" of one seed. Refused
    in one line naming the option (docs/bad-input.md)."""
    from ..experiments.sweep.spec import first_repeated, repeat_words

    for option, values in (("--methods", args.methods), ("--seeds", args.seeds), ("--lrs", args.lrs)):
        pair = first_repeated(values or ())
        if pair is not None:
            raise ValueError(f"{option} {repeat_words(*pair)} (numbers compare by value); give each value once")


def run_benchmark(args: argparse.Namespace) -> int:
    import contextlib

    from ..errors import InputError, user_input
    from ..experiments import benchmark as bm
    from ..experiments.benchmark_hold import hold_out_folder
    from ..experiments.sweep.cores import default_jobs

    with contextlib.ExitStack() as held:
        with user_input():
            _refuse_repeated_options(args)
            specs, notes = _benchmark_specs(args)
            datasets = [spec.dataset for spec in specs]
            if len(specs) > 1:  # a refusal here leaves no output folder behind
                bm.dataset_folders(datasets, args.out)
            if args.rank_references and len(specs) == 1:
                raise ValueError("--rank-references ranks methods across data sets; give several --dataset or a "
                                 "--suite")
            out = _output_folder(args.out)
            # one grid's tables per folder at a time (experiments/benchmark_hold.py)
            held.enter_context(hold_out_folder(out, bm.grid_of(specs, out / bm.STORE_NAME)))
        screen = console()
        for line in notes:
            print_whole_words(screen, f"note: {line}", markup=False)
        t0 = time.perf_counter()
        jobs = args.jobs if args.jobs is not None else default_jobs(datasets)  # a typed --jobs is used as given
        if len(specs) > 1:
            return _run_suite(args, specs, out, jobs, screen, t0)
        spec = specs[0]
        tracker = _SweepProgress(screen, f"benchmark {spec.dataset} ({spec.observation_used})", args.quiet,
                                 str(out / bm.STORE_NAME), jobs)
        with tracker.progress:
            result = bm.run_benchmark(spec, out, jobs=jobs, retry_failed=args.retry_failed,
                                      on_result=tracker.on_result, on_start=tracker.on_start,
                                      on_wait=tracker.on_wait)
            (spec,), result = _widened([spec], out, jobs, args, tracker, result)
        tracker.print_failures()
        runs = bm.benchmark_runs(spec, result.store)
        failed = tracker.print_earlier_failures(runs)
        if runs.empty or not (runs["status"] == "ok").any():
            raise InputError(f"every run of the benchmark failed ({len(runs)} runs; their errors are above). Earlier "
                             f"tables in {out} are left as they were")
        rows, agg = bm.summarize(runs, spec.methods, spec.select)
        paths = bm.write_outputs(out, spec, runs, rows, agg)
        _print_benchmark_table(screen, spec, rows)
        print_whole_words(screen, bm.hyperparameter_source(spec), markup=False)
        print_whole_words(screen, f"wrote {', '.join(str(p) for p in paths.values())}  "
                                  f"({time.perf_counter() - t0:.1f} s; {result.skipped} finished runs reused from "
                                  f"{result.store})")
        _print_next(screen, result.store, out)
        return 1 if failed else 0  # a table without some of its runs is not a clean finish


def _widened(specs: list[Any], out: Path, jobs: int, args: argparse.Namespace, tracker: _SweepProgress,
             result: Any) -> tuple[list[Any], Any]:
    """``--extend-lrs``: the specs with their lr grids widened where a selection lies on an edge
    (:func:`~spmlkit.experiments.benchmark.widen_lr_grids`), and ``result`` with those runs counted."""
    from ..experiments import benchmark as bm

    if not args.extend_lrs:
        return specs, result
    specs, more = bm.widen_lr_grids(specs, out, jobs=jobs, retry_failed=args.retry_failed,
                                    on_result=tracker.on_result, on_extend=tracker.on_extend, on_wait=tracker.on_wait)
    return specs, result if more is None else bm.combined([result, more])


def _print_next(screen: Any, store: Path, out: Path) -> None:
    """What to do with a benchmark's store next: the report's figures of every run."""
    print_whole_words(screen, f"Next: `spmlkit report --store {store} --out {out / 'report'}` draws the analysis "
                              "figures of these runs (densities, pseudo-labels, training curves, AP gains)",
                      markup=False)


def _print_benchmark_table(screen: Any, spec: Any, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from ..data.feature_dir import feature_dir_warning
    from ..experiments.benchmark import gap_note, labels_measured, lr_edge_note, table_title
    from ..experiments.lr_grid import marked_lr
    from ..experiments.report import format_gap

    labels = labels_measured(spec)
    tested = labels["test_map_labels"] is not None
    with_gap = tested and any(not math.isnan(r["gap_closed"]) for r in rows)
    table = Table(title=table_title(spec))
    columns = [("method", "left")]
    if tested:
        columns += [("test mAP (full labels)", "right")] + ([("gap closed", "right")] if with_gap else [])
    columns += [("lr", "right"), (f"val mAP ({labels['val_map_labels']} labels)", "right"), ("description", "left")]
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for r in rows:
        label = {"bce": "full labels (BCE)", "iun": "1P + all N"}.get(r["method"], r["method"])
        gap = ["" if math.isnan(r["gap_closed"]) else format_gap(r["gap_closed"])] if with_gap else []
        score = f"{r['test_map']:.2f}" + (f" ± {r['test_map_std']:.2f}" if r["seeds"] > 1 else "")
        style = "bold" if r["method"] in ("bce", "an") else None
        test = [score, *gap] if tested else []
        table.add_row(label, *test, marked_lr(r["lr"], r["lr_position"]), f"{r['val_map']:.2f}", r["description"],
                      style=style)
    screen.print(table)
    for note in (gap_note(rows) if tested else None, lr_edge_note(spec, rows)):
        if note:
            print_whole_words(screen, note, markup=False)
    warning = feature_dir_warning(spec.dataset)
    if warning:
        print_whole_words(screen, f"warning: {spec.dataset} holds {warning}", markup=False)
    if labels["val_map_labels"] == "observed":
        print_whole_words(screen, "val mAP on observed labels counts every unobserved positive of a validation row as "
                                  "a negative: it compares methods and lrs on the same rows, it is not the mAP on "
                                  "full labels" + ("" if tested else "; add a fully labelled test set for that "
                                                   "(docs/protocol.md, \"Your own data\")"), markup=False)


def _run_suite(args: argparse.Namespace, specs: list[Any], out: Path, jobs: int, screen: Any, t0: float) -> int:
    """Several data sets: one sweep, a table per data set in its folder, the leaderboard in ``out``."""
    import pandas as pd
    from rich.table import Table

    from ..errors import InputError
    from ..experiments import benchmark as bm
    from ..experiments.leaderboard import summary_lines
    from ..experiments.published import display_name

    observations = {s.observation_used for s in specs}
    names = args.suite or f"{len(specs)} data sets"
    if len(observations) == 1:
        names += f" ({observations.pop()})"
    tracker = _SweepProgress(screen, f"benchmark {names}", args.quiet, str(out / bm.STORE_NAME), jobs)
    with tracker.progress:
        result = bm.run_benchmarks(specs, out, jobs=jobs, retry_failed=args.retry_failed,
                                   on_result=tracker.on_result, on_start=tracker.on_start, on_wait=tracker.on_wait)
        specs, result = _widened(specs, out, jobs, args, tracker, result)
    tracker.print_failures()
    failed = tracker.print_earlier_failures(pd.concat([bm.benchmark_runs(spec, result.store) for spec in specs]))
    seeds = len(specs[0].seeds)
    title = (f"Leaderboard over {bm.labels_words(specs)}: test mAP (%), lr selected on validation, "
             + (f"mean over {seeds} seeds" if seeds > 1 else "one seed"))
    try:
        tables, board, paths = bm.write_suite_outputs(out, specs, result.store, title=title,
                                                      rank_references=args.rank_references)
    except ValueError as exc:
        raise InputError(f"{exc}. Earlier tables in {out} are left as they were") from None
    for spec in specs:
        if spec.dataset in tables:
            _print_benchmark_table(screen, spec, tables[spec.dataset])
    ranked = Table(title=f"average rank over {len(board.ranks)} data sets (1 = best)")
    ranked.add_column("#", justify="right")
    ranked.add_column("method")
    ranked.add_column("avg rank", justify="right")
    for place, (method, rank) in enumerate(board.average_rank.items(), start=1):
        ranked.add_row(str(place), display_name(str(method)), f"{rank:.2f}")
    for method in board.references:
        ranked.add_row("–", f"{display_name(str(method))} (reference, not ranked)", "–", style="dim")
    screen.print(ranked)
    for line in [*board.setup, *summary_lines(board)]:
        print_whole_words(screen, line, markup=False)
    print_whole_words(screen, f"wrote the tables of {len(tables)} data sets to {out}/<data set>/ and "
                              f"{', '.join(str(p) for p in paths.values())}  ({time.perf_counter() - t0:.1f} s; "
                              f"{result.skipped} finished runs reused from {result.store})")
    _print_next(screen, result.store, out)
    return 1 if failed else 0


def run_sweep(args: argparse.Namespace) -> int:
    """Exit status: 0 all ran, 1 some runs failed, 2 bad input or every run failed, 130 Ctrl-C,
    143 SIGTERM (both stop within seconds; finished runs are kept, the same command resumes)."""
    from ..errors import InputError, user_input
    from ..experiments.sweep import load_sweep
    from ..experiments.sweep import run_sweep as sweep
    from ..experiments.sweep.cores import default_jobs

    with user_input():
        spec = _recording_for(load_sweep(args.config, plugins=plugin_refs(args)), args.select)
        ray_options = _ray_options(args)
        notes = _other_kind_notes(spec)  # a setting no data set uses: refused here
    screen = console()
    for line in notes:
        print_whole_words(screen, f"note: {line}", markup=False)
    if args.dry_run:
        with user_input():
            return _print_grid(screen, spec, args.store or spec.store)
    where = args.store or spec.store
    # a number the user typed is used as given; Ray fills the cluster unless told otherwise
    jobs = args.jobs
    if jobs is None and ray_options is None:
        jobs = default_jobs(spec.datasets)
    tracker = _SweepProgress(screen, f"sweep {spec.name}", args.quiet, where, jobs or "Ray")
    result, stopped = stoppable_sweep("sweep", tracker, where, lambda: sweep(
        spec, jobs=jobs, store_path=args.store, max_runs=args.max_runs, retry_failed=args.retry_failed,
        on_result=tracker.on_result, on_start=tracker.on_start, on_skip=tracker.on_skip, backend=args.backend,
        ray_options=ray_options))
    if stopped is not None:
        return stopped
    held = f", {result.held} left to the other sweep(s) holding them" if result.held else ""
    before = (f" ({result.failed_before} of them recorded as failed: --retry-failed runs them again)"
              if result.failed_before else "")
    select = "" if args.select == "val_map" else f" --select {args.select}"
    print_whole_words(screen, f"ran {result.ran} run(s) ({result.failed} failed), skipped {result.skipped} "
                              f"finished{before}{held}; store: {result.store}. Next: `spmlkit report --store "
                              f"{result.store}{select}`")
    if result.ran and result.failed == result.ran:
        raise InputError(f"every one of the {result.ran} runs failed (the errors are listed above); fix the "
                         f"settings in {args.config}, then run again with --retry-failed")
    return 1 if result.failed else 0


def _recording_for(spec: Any, rule: str) -> Any:
    """``spec`` whose runs record what selection rule ``rule`` reads: every epoch's measures
    (``epoch_metrics``) for a rule other than ``val_map``. A sweep file that sets it itself is left as it is."""
    import dataclasses

    from ..experiments.selection import needs_epoch_metrics
    from ..training.config import flat_settings

    if not needs_epoch_metrics(rule) or flat_settings(dict(spec.settings), where="sweep settings").get("epoch_metrics"):
        return spec
    if "schedule" in spec.settings:  # settings in sections: it goes into its own
        settings = {**spec.settings, "schedule": {**spec.settings["schedule"], "epoch_metrics": True}}
    else:
        settings = {**spec.settings, "epoch_metrics": True}
    return dataclasses.replace(spec, settings=settings)


def stoppable_sweep(command: str, tracker: _SweepProgress, where: Any, start: Any) -> tuple[Any, int | None]:
    """``(start(), None)``: a sweep run under the tracker's progress bar, stopped within seconds by
    Ctrl-C or SIGTERM. Stopped, it says what was kept and returns ``(None, 130 or 143)``; either way
    the runs that failed are listed. The same command resumes."""
    import sys

    from ..experiments.sweep import SweepTerminated, sigterm_stops_sweep

    try:
        with sigterm_stops_sweep(), tracker.progress:
            result = start()
    except KeyboardInterrupt as exc:
        tracker.print_failures()
        what = "terminated (SIGTERM)" if isinstance(exc, SweepTerminated) else "interrupted"
        print(f"spmlkit {command}: {what}; {tracker.recorded} run(s) finished and recorded in {where}, runs in "
              "progress were stopped. Run the same command again to resume", file=sys.stderr)
        return None, 143 if isinstance(exc, SweepTerminated) else 130
    tracker.print_failures()
    return result, None


#: the runs a dry run lists before it only counts the rest
_GRID_ROWS = 20


def _print_grid(screen: Any, spec: Any, store: str) -> int:
    """``sweep --dry-run``: the grid's size and how it multiplies out, its first runs (every run's
    settings checked, as a real start does), where it would be stored; nothing is written."""
    from rich.table import Table

    from ..experiments.sweep import expand, run_config

    runs = expand(spec)
    for run in runs:
        run_config(run)  # a bad setting, or labels the data cannot give, fail here, as before the first run
    hp = {m: len({json.dumps(r["hparams"], sort_keys=True) for r in runs if r["method"] == m}) for m in spec.methods}
    factors = [f"{len(spec.datasets)} dataset(s)", f"{len(spec.observations or [None])} observation(s)",
               f"{sum(hp.values())} method/hyperparameter point(s)", f"{len(spec.lrs)} lr(s)",
               f"{len(spec.batch_sizes or [None])} batch size(s)", f"{len(spec.seeds)} seed(s)"]
    if spec.weight_decays is not None:
        factors.append(f"{len(spec.weight_decays)} weight decay(s)")
    print_whole_words(screen, f"sweep {spec.name}: {len(runs)} runs = {' x '.join(factors)}; store {store}")
    own = [axis for axis, given in (("observation", spec.observations), ("batch size", spec.batch_sizes)) if not given]
    if own:  # what the table's columns below show for them
        print_whole_words(screen, f"{' and '.join(own)}: each data set's own, as `spmlkit train` resolves it "
                                  "(docs/sweep-files.md)")
    if spec.settings:
        print_whole_words(screen, "settings of every run: " + ", ".join(f"{k}={v}" for k, v in spec.settings.items()),
                          markup=False)
    if spec.plugins:
        print_whole_words(screen, "plug-ins every run loads: " + ", ".join(spec.plugins), markup=False)
    table = Table(title=f"the first {min(len(runs), _GRID_ROWS)} of {len(runs)} runs")
    wd = spec.weight_decays is not None
    for col in ("run_id", "dataset", "observation", "method", "hparams", "lr", *(("weight decay",) if wd else ()),
                "batch", "seed"):
        table.add_column(col)
    for r in runs[:_GRID_ROWS]:
        table.add_row(r["run_id"], r["dataset"], r["observation"], r["method"],
                      ", ".join(f"{k}={v}" for k, v in r["hparams"].items()), f"{r['lr']:g}",
                      *((f"{r['weight_decay']:g}",) if wd else ()), str(r["batch_size"]), str(r["seed"]))
    screen.print(table)
    if len(runs) > _GRID_ROWS:
        screen.print(f"... and {len(runs) - _GRID_ROWS} more runs")
    screen.print("dry run: nothing trained or written")
    return 0


def _ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The sweep's :class:`~spmlkit.experiments.sweep.ray_backend.RayOptions`, or None for the
    process backend; a Ray option without ``--backend ray`` is refused rather than ignored,
    since the user expects it to do something."""
    given = {name: getattr(args, name) for name in ("address", "gpus_per_run", "cpus_per_run", "max_retries")
             if getattr(args, name) is not None}
    if args.backend != "ray":
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ValueError(f"{flags} only {'applies' if len(given) == 1 else 'apply'} to --backend ray")
        return None
    from ..experiments.sweep.ray_backend import RayOptions

    return RayOptions(**given)


def run_report(args: argparse.Namespace) -> int:
    from ..errors import user_input
    from ..experiments.plots import make_all_figures
    from ..experiments.report_files import write_tables
    from ..experiments.report_folder import open_report_folder
    from ..io import inputs_kept

    store = Path(args.store)
    # the store and SQLite's files beside it: no file the report writes may replace them
    kept = [store, *(store.with_name(store.name + end) for end in ("-wal", "-shm", "-journal"))]
    with user_input():
        bad = sorted(set(args.formats) - set(_FORMATS))
        if bad:
            raise ValueError(f"--formats: unknown format(s) {', '.join(bad)}; choose from {', '.join(_FORMATS)}")
        ok = _finished_runs(store)
        if args.select != "val_map":  # runs that did not record what the rule reads: one line, nothing written
            from ..experiments.selection import read_at

            ok = read_at(ok, args.select)
        folder = open_report_folder(args.out, overwrite=args.overwrite,
                                    inputs={"--store": store, **{f"the store's {p.name}": p for p in kept[1:]}})
        out = folder.path
    screen = console()
    for line in plugin_version_notes(ok):
        screen.print(f"note: {line}", markup=False, soft_wrap=True)
    with inputs_kept(kept, "the results store this report reads"):
        written, tables = write_tables(ok, out, metric=args.metric, reference=args.reference, formats=args.formats,
                                       rule=args.select)
        for title, markdown in tables:
            screen.print(f"[bold]{title}[/bold]")
            screen.print(markdown)
        if not args.no_figures:
            def note(line: str) -> None:  # a figure the runs cannot feed: said in one line, the report goes on
                screen.print(f"note: {line}", markup=False, soft_wrap=True)

            written += make_all_figures(ok, out / "figures", on_skip=note)
        removed = folder.finish(written)
    gone = f"; removed {len(removed)} file(s) of the previous report that this one does not write" if removed else ""
    screen.print(f"wrote {len(written)} files to {out}{gone}")
    return 0


def plugin_version_notes(runs: Any) -> list[str]:
    """One line per method whose runs in the store come from more than one version of its plug-in's
    code: the table picks one of them, as it picks a learning rate, and the reader should know."""
    if "plugin_code" not in runs.columns:
        return []
    notes = []
    for method, codes in runs.groupby("method", sort=False)["plugin_code"]:
        versions = {json.dumps(code) for code in codes if isinstance(code, list)}
        if len(versions) > 1:
            notes.append(f"the store holds runs of {len(versions)} versions of the code of method {method} (its "
                         "plug-in changed between them); each is a configuration of its own, and the table shows the "
                         'one selected on validation (docs/plugins.md, "What a record says")')
    return notes


def _finished_runs(store_path: Path):
    from ..experiments.store import ResultsStore

    if not store_path.is_file():
        raise FileNotFoundError(f"results store {store_path} not found; run `spmlkit sweep` first")
    df = ResultsStore(store_path).to_dataframe()  # a fault of the file is one line (StoreError)
    ok = df[df["status"] == "ok"] if not df.empty else df
    if ok.empty:
        raise ValueError(f"{store_path} holds no finished runs to report")
    return ok


def _output_folder(path: str) -> Path:
    """The benchmark's ``--out``: new, empty, or a benchmark's own (its marker, or a ``results.db``
    of an spmlkit from before the marker), never a folder of someone else's files that share the
    benchmark's names (``table.md``, ``runs.csv``): docs/bad-input.md."""
    from ..output_dir import BENCHMARK, claim_output_dir

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file; give a folder")
    try:
        return claim_output_dir(out, BENCHMARK, option="--out", recognise=lambda folder: (folder / "results.db").is_file())
    except OSError as exc:
        raise ValueError(f"cannot create the output folder {out}: {exc.strerror or exc}") from None


def run_presets(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..errors import InputError
    from ..experiments.presets import list_presets, preset_sources

    source = None
    if args.source is not None:
        from ..experiments.published import SOURCES

        source = next((name for name in SOURCES if name.lower() == args.source.strip().lower()), None)
        if source is None:
            raise InputError(f"--source {args.source!r}: choose one of {', '.join(SOURCES)}")
    shown = [p for p in list_presets() if (not args.dataset or p.dataset == args.dataset)
             and (source is None or any(row.source == source for row in p.targets))]
    if not shown and source is not None:
        print_whole_words(console(), f"no preset{' of ' + args.dataset if args.dataset else ''} targets a number of "
                                     f"{source}", markup=False)
        return 0
    if not shown:  # a table with no rows says nothing; say what such a data set trains with instead
        import difflib

        close = difflib.get_close_matches(args.dataset, preset_sources(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print_whole_words(console(), f"no preset is tuned on {args.dataset}{hint}: its runs use the data set's defaults "
                                     "and each method's recipe defaults (`spmlkit methods`; `spmlkit train --dataset "
                                     f"{args.dataset} --dry-run` shows a run's settings). Presets exist for: "
                                     f"{', '.join(preset_sources())}", markup=False)
        return 0
    table = Table(title="spmlkit presets  (spmlkit train --preset NAME [--root DIR])")
    for col in ("preset", "target (published)", "source", "batch", "lr", "epochs", "hyperparameters", "notes"):
        table.add_column(col)
    for p in shown:
        t = p.target if source is None else next(row for row in p.targets if row.source == source)
        target = "" if t is None else f"{t.mean:.2f}" + ("" if t.std is None else f" ± {t.std:.2f}")
        hp = ", ".join(f"{k}={v}" for k, v in p.config.get("hparams", {}).items())
        table.add_row(p.name, target, "" if t is None else t.source, str(p.config.get("batch_size")),
                      f"{p.config.get('lr'):g}", str(p.config.get("epochs")), hp, p.notes)
    console().print(table)
    return 0
