"""Benchmark: ``spmlkit benchmark`` as a user runs it, with batched groups and with one run per task.

    python benchmarks/bench_sweep.py [--quick] [--jobs 2] [--out DIR]

Side by side, in one invocation, both as a fresh ``spmlkit`` process (imports, worker start and
the results store included, which is what a user waits for):

1. **grouped**: ``spmlkit benchmark --dataset yeast --jobs J``, whose sweep hands each worker
   tasks of runs that differ only in seed and learning rate and trains each task as one batched
   group (docs/architecture.md, "Many runs at once");
2. **one run per task**: the same command with the sweep's task size held at 1
   (``spmlkit.experiments.sweep.processes.STACK_MAX = 1``), so every run trains alone, as
   before batched groups existed.

It prints both wall times, the ratio, and how far each run's validation and test mAP in the two
stores are apart (the contract is 1e-6; most methods are bit-identical) and whether the two
benchmark tables are the same file. The per-method view of the same comparison, in one process
and in CPU seconds, is ``benchmarks/bench_batched.py``.

The default is the full Yeast benchmark (26 methods x 3 lrs x 3 seeds = 234 runs, 20 epochs);
``--quick`` takes six methods of different kinds (54 runs). The machine may be shared: the load
average is printed before and after each command; compare timings taken under similar load only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spmlkit.experiments.benchmark import STORE_NAME
from spmlkit.experiments.store import ResultsStore
from spmlkit.methods import METHODS

#: --quick: element-wise, with a label algorithm, with a parameter table, batch-wise with mixup,
#: with per-step corrections, set-wise with a regulariser and class AP
QUICK_METHODS = ("an", "em_apl", "role", "pu_mlc", "ll_cp", "opml_sp")

#: the contract between a batched run and its solo run (docs/architecture.md, "Many runs at once")
TOLERANCE = 1e-6

_ONE_RUN_PER_TASK = """
import sys
from spmlkit.cli import main
from spmlkit.experiments.sweep import processes
processes.STACK_MAX = 1  # every task one run: no batched groups
sys.exit(main(sys.argv[1:]))
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed_benchmark(args: list[str], one_run_per_task: bool) -> float:
    """Wall time of one ``spmlkit benchmark`` command in a fresh process."""
    cmd = [sys.executable, "-c", _ONE_RUN_PER_TASK, *args] if one_run_per_task else [sys.executable, "-m", "spmlkit", *args]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def largest_differences(a: Path, b: Path) -> tuple[int, int, float, float]:
    """Runs in both stores, runs with bit-identical val and test mAP, and the largest val and test
    mAP differences."""
    first = {r["run_id"]: r for r in ResultsStore(a).records()}
    second = {r["run_id"]: r for r in ResultsStore(b).records()}
    if set(first) != set(second):
        raise SystemExit(f"the stores hold different runs: {sorted(set(first) ^ set(second))[:5]} ...")
    same = sum(first[k]["val_map"] == second[k]["val_map"] and first[k]["test_map"] == second[k]["test_map"]
               for k in first)
    val = max(abs(first[k]["val_map"] - second[k]["val_map"]) for k in first)
    test = max(abs(first[k]["test_map"] - second[k]["test_map"]) for k in first)
    return len(first), same, val, test


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_METHODS)} (54 runs)")
    parser.add_argument("--jobs", type=int, default=2, help="benchmark worker processes (default 2)")
    parser.add_argument("--out", help="folder for the two benchmarks' outputs (default: a temporary folder, removed)")
    args = parser.parse_args()

    methods = QUICK_METHODS if args.quick else tuple(METHODS)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    cli = ["benchmark", "--dataset", "yeast", "--methods", ",".join(methods), "--jobs", str(args.jobs), "--quiet"]
    print(f"bench_sweep: yeast, {len(methods)} methods, {args.jobs} workers, {os.cpu_count()} CPUs")
    walls = {}
    for name, one_run_per_task in (("grouped", False), ("one run per task", True)):
        folder = out / name.replace(" ", "-")
        shutil.rmtree(folder, ignore_errors=True)
        before = load()
        walls[name] = timed_benchmark([*cli, "--out", str(folder)], one_run_per_task)
        print(f"{name:<17} {walls[name]:8.2f} s wall   (load average {before} -> {load()})")
    runs, same, val, test = largest_differences(out / "grouped" / STORE_NAME, out / "one-run-per-task" / STORE_NAME)
    ratio = walls["one run per task"] / walls["grouped"]
    print(f"{runs} runs: {walls['grouped'] / runs:.3f} s per run grouped, "
          f"{walls['one run per task'] / runs:.3f} s one run per task: grouped is {ratio:.2f} times as fast")
    tables_equal = (out / "grouped" / "table.md").read_bytes() == (out / "one-run-per-task" / "table.md").read_bytes()
    print(f"bit-identical val and test mAP: {same}/{runs}; largest difference: val {val:.1e}, test {test:.1e} "
          f"(contract {TOLERANCE:g}); benchmark tables {'identical' if tables_equal else 'DIFFERENT'}")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if max(val, test) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
