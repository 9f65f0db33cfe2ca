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
    from .experiments import add_ray_options, add_select_option

    names = ", ".join(f"{name} ({rep.description})" for name, rep in REPRODUCTIONS.items())
    p = sub.add_parser("reproduce", help="rerun a published table under its own protocol, beside its numbers",
                       description=f"Rerun a published experiment and print each of its tables in two readings -- "
                                   "the fair grid for every method, and as its code ran it where the code fixes the "
                                   "setting -- with the published mean ± std beside ours and, under the paper's "
                                   f"protocol, the difference in published stds. Known: {names}. "
                                   "The same command resumes an interrupted reproduction. docs/reproductions.md.")
    p.add_argument("name", choices=tuple(REPRODUCTIONS), help="which experiment")
    p.add_argument("--datasets", type=csv_list(str), metavar="SETS",
                   help="comma-separated data sets of the experiment, each a set's name or a paper's .mat data file "
                        "standing for it (SET=FILE.mat, or FILE.mat named after the set: its own partition and "
                        "observed positives) (default: all it has that spmlkit reads; crisp-tabular: "
                        "yeast,scene,corel5k,delicious)")
    p.add_argument("--methods", type=csv_list(str),
                   help="comma-separated methods (default: every method of the tables that spmlkit has and that "
                        "trains on features, and the experiment's references (crisp-tabular: crisp_true_prior), "
                        "less any that cannot run in --epochs, named; another feature method gets a row without "
                        "published numbers)")
    add_select_option(p, "each fair-grid row's configuration and epoch (the as-published rows use their code's "
                         "own)")
    p.add_argument("--trials", type=positive_int, help="trials, each its own random partition (default: the paper's, 5)")
    p.add_argument("--epochs", type=positive_int, help="epochs of every run (default: the paper's, 10)")
    p.add_argument("--subset", type=positive_int, metavar="N",
                   help="only the first N rows of each whole set, for a quick check (default: every row)")
    p.add_argument("--jobs", type=positive_int,
                   help="parallel worker processes (default: one per CPU this process may use); with --backend ray, "
                        "the most tasks at once (default: as many as the cluster's CPUs hold)")
    add_ray_options(p)
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
    from .experiments import _ray_options

    with contextlib.ExitStack() as held:
        with user_input():
            rep = rp.get_reproduction(args.name)
            ray_options = _ray_options(args)
            out_path = Path(args.out or Path("spmlkit-results") / "reproduce" / rep.name)
            plan = rp.plan_reproduction(rep, out_path / rp.STORE_NAME, datasets=args.datasets, methods=args.methods,
                                        trials=args.trials, epochs=args.epochs, subset=args.subset,
                                        plugins=plugin_refs(args), select=args.select)
            out = _output_folder(out_path)  # after every check: a refused reproduction writes nothing
            # one grid's tables per folder at a time, as a benchmark's (experiments/benchmark_hold.py)
            held.enter_context(hold_out_folder(out, rp.grid_of(plan.specs), what="reproduction"))
        return _reproduce(args, rep, plan, out, ray_options)


def _reproduce(args: argparse.Namespace, rep: Any, plan: Any, out: Path, ray_options: Any) -> int:
    """The reproduction's runs and tables, while its folder is held."""
    from ..errors import InputError
    from ..experiments import reproduce as rp
    from ..experiments.reproduce_tables import write_reproduction
    from ..experiments.sweep.cores import default_jobs
    from .experiments import _ray_options, _SweepProgress, stoppable_sweep

    screen = console()
    for why in plan.left_out.values():
        print_whole_words(screen, f"note: not run: {why}", markup=False)
    for note in plan.notes:
        print_whole_words(screen, f"note: {note}", markup=False)
    t0 = time.perf_counter()
    jobs = args.jobs
    if jobs is None and ray_options is None:  # a number the user typed is used as given; Ray fills the cluster
        jobs = default_jobs(list(plan.datasets.values()))
    tracker = _SweepProgress(screen, f"reproduce {rep.name}", args.quiet, str(out / rp.STORE_NAME), jobs or "Ray")
    results, stopped = stoppable_sweep("reproduce", tracker, out / rp.STORE_NAME, lambda: rp.run_reproduction(
        plan, jobs=jobs, on_result=tracker.on_result, on_start=tracker.on_start, on_wait=tracker.on_wait,
        backend=args.backend, ray_options=ray_options))
    if stopped is not None:
        return stopped
    cells = rp.summarize_reproduction(plan, out / rp.STORE_NAME)
    if not any(c.ours is not None for c in cells):
        failed = sum(r.failed for r in results)
        raise InputError(f"no run of the reproduction finished ({failed} failed; the first error is above). "
                         f"Earlier tables in {out} are left as they were")
    paths = write_reproduction(out, plan, cells)
    _print_tables(screen, plan, cells)
    print_whole_words(screen, f"wrote {', '.join(str(p) for p in paths.values())}  ({time.perf_counter() - t0:.1f} s; "
                              f"{sum(r.skipped for r in results)} finished runs reused from {out / rp.STORE_NAME})")
    return 1 if any(c.failed for c in cells) else 0


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


def _print_tables(screen: Any, plan: Any, cells: list) -> None:
    """Every table as the markdown file has it, then the priors, the failures and what was run."""
    from rich.table import Table

    from ..experiments.reproduce import METRICS
    from ..experiments.reproduce_tables import failure_lines, heading, prior_rows, table_rows

    for table_name, metric in plan.rep.tables.items():
        header, rows = table_rows(plan, cells, table_name)
        if not rows:
            continue
        name, larger_better, _ = METRICS[metric]
        _print_table(screen, Table, f"{table_name}: {name} ({'larger' if larger_better else 'smaller'} is better)",
                     header, rows)
    header, rows = prior_rows(plan, cells)
    if rows:
        _print_table(screen, Table, "Class priors at the selected epoch: error, mean estimate (true), epoch (warm-up)",
                     header, rows)
    for line in failure_lines(cells):
        print_whole_words(screen, f"failed: {line}", markup=False)
    trials = plan.protocol.trials
    print_whole_words(screen, f"ours: mean ± std over {trials} trial{'s' if trials != 1 else ''}, in the papers' metric "
                              "convention (SMILE's code)" + ("; z = (ours − published) / published std. Agreement means "
                              "|z| within the spread of trials, not equality: the papers' partitions are random and "
                              "unpublished (docs/reproductions.md)" if plan.comparable else ""), markup=False)
    for line in heading(plan).splitlines():
        print_whole_words(screen, line, indent="  ", markup=False)


def _print_table(screen: Any, table_type: Any, title: str, header: list[str], rows: list[list[str]]) -> None:
    table = table_type(title=title, min_width=len(title) + 2)  # the title on one line, however narrow the table
    for i, column in enumerate(header):
        table.add_column(column, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*row)
    screen.print(table)
