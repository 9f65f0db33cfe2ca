"""``spmlkit reproduce NAME``: a published table rerun under its own protocol, beside the published numbers."""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

from ._common import console, csv_list, plugin_refs, positive_int, print_whole_words

__all__ = ["add_parsers"]


def add_parsers(sub: Any) -> None:
    from ..experiments.reproductions import REPRODUCTIONS

    names = ", ".join(f"{name} ({rep.description})" for name, rep in REPRODUCTIONS.items())
    p = sub.add_parser("reproduce", help="rerun a published table under its own protocol, beside its numbers",
                       description=f"Rerun a published experiment and print each of its tables with the published "
                                   f"mean ± std beside ours and the difference in published stds. Known: {names}. "
                                   "The same command resumes an interrupted reproduction. docs/reproductions.md.")
    p.add_argument("name", choices=tuple(REPRODUCTIONS), help="which experiment")
    p.add_argument("--datasets", type=csv_list(str), metavar="SETS",
                   help="comma-separated data sets of the experiment (default: all it has that spmlkit reads; "
                        "crisp-tabular: yeast,scene,corel5k,delicious)")
    p.add_argument("--methods", type=csv_list(str),
                   help="comma-separated methods (default: every method of the tables that spmlkit has and that "
                        "trains on features; another feature method gets a row without published numbers)")
    p.add_argument("--trials", type=positive_int, help="trials, each its own random partition (default: the paper's, 5)")
    p.add_argument("--epochs", type=positive_int, help="epochs of every run (default: the paper's, 10)")
    p.add_argument("--subset", type=positive_int, metavar="N",
                   help="only the first N rows of each whole set, for a quick check (default: every row)")
    p.add_argument("--jobs", type=positive_int,
                   help="parallel worker processes (default: one per CPU this process may use)")
    p.add_argument("--out", help="output folder: results.db (finished runs are reused) and the tables "
                                 "(default: spmlkit-results/reproduce/NAME)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_reproduce)


def run_reproduce(args: argparse.Namespace) -> int:
    """Exit status: 0 every run finished, 1 some failed (their errors are printed), 2 bad input,
    130 Ctrl-C and 143 SIGTERM (finished runs are kept; the same command resumes)."""
    from ..errors import user_input
    from ..experiments import reproduce as rp
    from ..experiments.benchmark_hold import hold_out_folder

    with contextlib.ExitStack() as held:
        with user_input():
            rep = rp.get_reproduction(args.name)
            datasets = tuple(args.datasets) if args.datasets else tuple(rep.datasets)
            methods = tuple(args.methods) if args.methods else rp.reproduction_methods(rep)
            rp.check_methods(rep, methods)  # before the output folder is made
            out = _output_folder(Path(args.out or Path("spmlkit-results") / "reproduce" / rep.name))
            specs = rp.reproduction_sweeps(rep, out / rp.STORE_NAME, datasets=datasets, methods=methods,
                                           trials=args.trials, epochs=args.epochs, subset=args.subset,
                                           plugins=plugin_refs(args))
            # one grid's tables per folder at a time, as a benchmark's (experiments/benchmark_hold.py)
            held.enter_context(hold_out_folder(out, rp.grid_of(specs), what="reproduction"))
        return _reproduce(args, rep, specs, out)


def _reproduce(args: argparse.Namespace, rep: Any, specs: list, out: Path) -> int:
    """The reproduction's runs and tables, while its folder is held."""
    from ..errors import InputError
    from ..experiments import reproduce as rp
    from ..experiments.sweep.cores import default_jobs
    from .experiments import _SweepProgress, stoppable_sweep

    screen = console()
    t0 = time.perf_counter()
    jobs = args.jobs if args.jobs is not None else default_jobs([s.datasets[0] for s in specs])  # typed: as given
    tracker = _SweepProgress(screen, f"reproduce {rep.name}", args.quiet, str(out / rp.STORE_NAME), jobs)
    results, stopped = stoppable_sweep("reproduce", tracker, out / rp.STORE_NAME, lambda: rp.run_reproduction(
        specs, jobs=jobs, on_result=tracker.on_result, on_start=tracker.on_start, on_wait=tracker.on_wait))
    if stopped is not None:
        return stopped
    cells = rp.summarize_reproduction(rep, specs, out / rp.STORE_NAME)
    if not cells:
        failed = sum(r.failed for r in results)
        raise InputError(f"no run of the reproduction finished ({failed} failed; the first error is above). "
                         f"Earlier tables in {out} are left as they were")
    paths = rp.write_reproduction(out, rep, specs, cells)
    _print_tables(screen, rep, cells)
    if rp.images_only_note(rep):
        print_whole_words(screen, rp.images_only_note(rep))
    print_whole_words(screen, f"wrote {', '.join(str(p) for p in paths.values())}  ({time.perf_counter() - t0:.1f} s; "
                              f"{sum(r.skipped for r in results)} finished runs reused from {out / rp.STORE_NAME})")
    return 1 if tracker.failures else 0


#: the kind of output folder a reproduction writes (its store and tables; spmlkit.output_dir)
REPRODUCTION = "reproduction"


def _output_folder(out: Path) -> Path:
    """``--out``: new, empty, or a reproduction's own (its marker), never a folder of someone else's
    files or another kind of spmlkit output (docs/bad-input.md)."""
    from ..output_dir import claim_output_dir

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file; give a folder")
    try:
        return claim_output_dir(out, REPRODUCTION, option="--out")
    except OSError as exc:
        raise ValueError(f"cannot create the output folder {out}: {exc.strerror or exc}") from None


def _print_tables(screen: Any, rep: Any, cells: list) -> None:
    from rich.table import Table

    from ..experiments.reproduce import METRICS, _fmt, _z

    for table_name, metric in rep.tables.items():
        mine = [c for c in cells if c.table == table_name]
        if not mine:
            continue
        name, larger_better, _ = METRICS[metric]
        datasets = [d for d in rep.datasets if any(c.dataset == d for c in mine)]
        title = f"{table_name}: {name} ({'larger' if larger_better else 'smaller'} is better)"
        table = Table(title=title, min_width=len(title) + 2)  # the title on one line, however narrow the table
        table.add_column("method")
        for d in datasets:
            for col in (f"{d} ours", "published", "z"):
                table.add_column(col, justify="right")
        for method in dict.fromkeys(c.method for c in mine):
            row = {c.dataset: c for c in mine if c.method == method}
            values: list[str] = []
            for d in datasets:
                c = row.get(d)
                values += ["–"] * 3 if c is None else [_fmt(c.ours, c.ours_std), _fmt(c.published, c.published_std),
                                                      _z(c.z)]
            table.add_row(next(iter(row.values())).label, *values)
        screen.print(table)
    trials = max(c.trials for c in cells)
    print_whole_words(screen, f"ours: mean ± std over {trials} trial{'s' if trials != 1 else ''} of the configuration "
                              "with the best mean validation mAP, in the papers' metric convention (SMILE's code); "
                              "z = (ours − published) / published std. Agreement means |z| within the spread of trials, not equality: the papers' "
                              "partitions are random and unpublished (docs/reproductions.md)")
