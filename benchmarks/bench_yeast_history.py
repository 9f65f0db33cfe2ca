"""Benchmark: ``spmlkit benchmark --dataset yeast`` of this tree beside an older commit's, side by side.

    python benchmarks/bench_yeast_history.py [--ref 0880121] [--pairs 4] [--jobs N] [--keep DIR] [--all-methods]

Why. The Yeast benchmark must not be slower than commit ``0880121``, the design before the
one-loop redesign (issue 22, item 7). A wall time measured today cannot be compared with one
measured another day on a machine whose load differs, so this script measures both trees in
one invocation:

1. the older commit's ``src/`` is taken from this repository's own history
   (``git archive <ref> src``) into a temporary folder; nothing in the repository changes;
2. ``python -m spmlkit benchmark --dataset yeast --out <fresh folder> --quiet`` runs for the
   old tree and for this tree, alternately, ``--pairs`` times: the same interpreter (this
   one, so the same virtual environment and libraries), ``PYTHONPATH`` naming each tree's
   ``src``, a fresh output folder per run (no finished run is reused), and the order swapped
   every pair so that neither side always runs first under a load that drifts;
3. per pair: both wall times, both CPU times (user + system of the benchmark process and its
   workers), the load average when the pair starts; then the median of the pairs' new/old
   ratios, and whether the two tables have the same rows (methods); their columns may differ, as a
   newer table says more.

Both sides train the same grid (3 learning rates x 3 seeds, 20 epochs) of the same methods, the
older tree's default list (every method it had; this tree has more), on the same number of rows,
so their times are comparable. ``--all-methods`` gives each tree its own default list instead: the
main job as a user of each version runs it. Their table *values* differ on purpose:
since issue 22, Yeast is split as MULAN splits it (1500 official train rows, 917 official
test rows), while ``0880121`` took the first 1500 rows of the shipped file as training rows
and the last 917 as test rows (docs/protocol.md). Same sizes, different rows.

CPU time is the steadier number on a shared machine (other processes' load stretches wall
time, not the CPU a run uses); wall time is what the user waits. Both ratios are printed.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Timing:
    wall_s: float
    cpu_s: float
    table: Path


def export_tree(ref: str, into: Path) -> Path:
    """``src/`` of commit ``ref`` unpacked under ``into``; returns that ``src`` folder."""
    archive = into / "src.tar"
    with archive.open("wb") as handle:
        subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], stdout=handle, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return into / "src"


def default_methods(src: Path) -> str:
    """The default method list of the tree whose package is under ``src``, comma-separated."""
    code = "from spmlkit.experiments.benchmark import BenchmarkSpec; print(','.join(BenchmarkSpec().methods))"
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(src)),
                          stdout=subprocess.PIPE, text=True, check=True)
    return done.stdout.strip()


def run_benchmark(src: Path, out: Path, jobs: int | None, cwd: Path, methods: str | None = None) -> Timing:
    """One ``spmlkit benchmark --dataset yeast`` of the tree whose package is under ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, "-m", "spmlkit", "benchmark", "--dataset", "yeast", "--out", str(out), "--quiet"]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    if methods is not None:
        cmd += ["--methods", methods]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"benchmark of {src} failed (exit {done.returncode}):\n{done.stdout[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu, out / "table.csv")


def table_shape(path: Path) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """Rows, column names and first-column entries (the methods) of a benchmark's ``table.csv``."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    return len(body), tuple(header), tuple(row[0] for row in body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="0880121", help="the older commit (default 0880121)")
    parser.add_argument("--pairs", type=int, default=4, help="old/new pairs (default 4)")
    parser.add_argument("--jobs", type=int, default=None, help="passed to both benchmarks (default: theirs)")
    parser.add_argument("--keep", default=None, help="keep the output folders under this (new) folder")
    parser.add_argument("--all-methods", action="store_true",
                        help="each tree trains its own default methods (default: both the older tree's)")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=False)
    with tempfile.TemporaryDirectory(prefix="spmlkit-history-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "old").mkdir()
        trees = {"old": export_tree(args.ref, tmp / "old"), "new": REPO / "src"}
        outs = keep if keep is not None else tmp
        methods = None if args.all_methods else default_methods(trees["old"])
        print(f"old = {args.ref} ({trees['old']}), new = this tree ({trees['new']}), python {sys.executable}")
        print(f"methods: {'each tree its own default list' if methods is None else methods}")
        print("Note: a tree from before issue 22 (0880121) took the file's first 1500 rows as Yeast's train rows, "
              "where MULAN's official\n      split is used now, so its table differs in values on purpose; both "
              "train on 1500 rows and test on 917,\n      over the same grid, so the times are comparable.")
        print(f"{'pair':>4} {'load':>5} {'old wall':>9} {'new wall':>9} {'ratio':>6} "
              f"{'old CPU':>8} {'new CPU':>8} {'ratio':>6}")
        wall_ratios, cpu_ratios, shapes_equal = [], [], True
        for pair in range(args.pairs):
            load = os.getloadavg()[0]
            order = ("old", "new") if pair % 2 == 0 else ("new", "old")
            got = {side: run_benchmark(trees[side], outs / f"{side}-{pair}", args.jobs, tmp, methods) for side in order}
            old, new = got["old"], got["new"]
            wall_ratios.append(new.wall_s / old.wall_s)
            cpu_ratios.append(new.cpu_s / old.cpu_s)
            old_rows, _, old_methods = table_shape(old.table)
            new_rows, _, new_methods = table_shape(new.table)
            shapes_equal &= args.all_methods or (old_rows, old_methods) == (new_rows, new_methods)
            print(f"{pair:>4} {load:>5.1f} {old.wall_s:>8.1f}s {new.wall_s:>8.1f}s {wall_ratios[-1]:>6.3f} "
                  f"{old.cpu_s:>7.1f}s {new.cpu_s:>7.1f}s {cpu_ratios[-1]:>6.3f}", flush=True)
        print(f"median new/old: wall {statistics.median(wall_ratios):.3f}, CPU {statistics.median(cpu_ratios):.3f} "
              f"over {args.pairs} pair(s); load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU(s)")
        print("tables: the same rows and methods" if shapes_equal else "tables: DIFFERENT rows or methods")


if __name__ == "__main__":
    main()
