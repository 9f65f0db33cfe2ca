"""Benchmark: ``spmlkit benchmark`` (runs stacked per method) beside the same runs trained one by one.

    python benchmarks/bench_sweep.py [--quick] [--jobs 2] [--unstacked] [--out DIR]

Side by side, in one invocation:

1. **benchmark**: ``spmlkit benchmark --dataset yeast --jobs J`` as a user runs it (a fresh
   process: imports and worker start included). Its sweep trains each method's lr x seed runs
   as one stacked group per task (:mod:`spmlkit.training.stacked`); per-run time is the
   command's wall time over its runs.
2. **per run, stacked vs solo**, in this process with one torch thread (as a sweep worker),
   method by method so that both sides of a row share the machine's load: each method's runs
   (the same configs, from the same sweep grid) as one stacked group through
   ``train_stacked``, then one by one through ``spmlkit.training.train``. The solo total
   divided by J is the wall time J workers would need at best without stacking.
3. with ``--unstacked``, also ``spmlkit benchmark`` with one run per task (stacking off:
   the sweep as it was before), timed as 1.

Every run's val/test mAP of 1 and of the stacked group is compared with its solo run's (they
must be equal, bit for bit).
The default is the full Yeast benchmark (26 methods x 3 lrs x 3 seeds = 234 runs, 20 epochs);
``--quick`` takes six methods of different kinds (54 runs, about a minute). The machine may be
shared: the load average is printed at the start and the end; compare timings taken under
similar load only.
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

import torch

from spmlkit.experiments.benchmark import STORE_NAME, BenchmarkSpec
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import expand, run_config
from spmlkit.methods import METHODS
from spmlkit.training import train
from spmlkit.training.stacked import train_stacked

#: --quick: element-wise, with a label algorithm, with a parameter table, batch-wise with mixup,
#: with per-step corrections, set-wise with a regulariser and class AP
QUICK_METHODS = ("an", "em_apl", "role", "pu_mlc", "ll_cp", "opml_sp")

_UNSTACKED = """
import sys
from spmlkit.cli import main
from spmlkit.experiments.sweep import processes
processes.STACK_MAX = 1  # one run per task: the sweep before stacking
sys.exit(main(sys.argv[1:]))
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_cli(args: list[str], unstacked: bool = False) -> float:
    """Wall time of one ``spmlkit`` command in a fresh process (what a user waits for)."""
    cmd = [sys.executable, "-c", _UNSTACKED, *args] if unstacked else [sys.executable, "-m", "spmlkit", *args]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_METHODS)} (54 runs)")
    parser.add_argument("--jobs", type=int, default=2, help="benchmark worker processes (default 2)")
    parser.add_argument("--unstacked", action="store_true", help="also time the benchmark with one run per task")
    parser.add_argument("--out", help="folder for the outputs (default: a temporary folder, removed)")
    args = parser.parse_args()

    methods = QUICK_METHODS if args.quick else tuple(METHODS)
    spec = BenchmarkSpec(dataset="yeast", methods=methods)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    shutil.rmtree(out / "stacked", ignore_errors=True)
    shutil.rmtree(out / "unstacked", ignore_errors=True)
    cli = ["benchmark", "--dataset", "yeast", "--methods", ",".join(methods), "--jobs", str(args.jobs), "--quiet"]
    runs = expand(spec.sweep(out / "stacked" / STORE_NAME))
    n = len(runs)
    print(f"bench_sweep: yeast, {n} runs ({len(methods)} methods x {len(spec.lrs)} lrs x {len(spec.seeds)} seeds, "
          f"{spec.epochs} epochs), {args.jobs} workers, {os.cpu_count()} CPUs; load average {load()}")

    stacked_wall = run_cli([*cli, "--out", str(out / "stacked")])
    records = {r["run_id"]: r for r in ResultsStore(out / "stacked" / STORE_NAME).records()}
    print(f"benchmark spmlkit benchmark --jobs {args.jobs}: {stacked_wall:7.2f} s wall, "
          f"{stacked_wall / n:.3f} s per run (load {load()})")
    if args.unstacked:
        unstacked_wall = run_cli([*cli, "--out", str(out / "unstacked")], unstacked=True)
        print(f"unstacked spmlkit benchmark --jobs {args.jobs}, one run per task: {unstacked_wall:7.2f} s wall, "
              f"{unstacked_wall / n:.3f} s per run (load {load()})")

    torch.set_num_threads(1)
    train(run_config(runs[0]))  # warm-up (imports), not timed
    train_stacked([run_config(run) for run in runs[:2]])
    print(f"\nper run, in this process, 1 thread (load {load()}):")
    print(f"{'method':<10} {'stacked s/run':>13} {'solo s/run':>11} {'speedup':>8}")
    totals = {"stacked": 0.0, "solo": 0.0}
    equal = 0
    for method in methods:
        group = [run for run in runs if run["method"] == method]
        t0 = time.perf_counter()
        stacked = train_stacked([run_config(run) for run in group])
        t_stacked = time.perf_counter() - t0
        t0 = time.perf_counter()
        solo = [train(run_config(run)) for run in group]
        t_solo = time.perf_counter() - t0
        totals["stacked"] += t_stacked
        totals["solo"] += t_solo
        for run, a, b in zip(group, stacked, solo):
            rec = records[run["run_id"]]
            equal += (rec["val_map"] == a.val_map == b.val_map) and (rec["test_map"] == a.test_map == b.test_map)
        print(f"{method:<10} {t_stacked / len(group):13.3f} {t_solo / len(group):11.3f} {t_solo / t_stacked:7.1f}x")
    print(f"{'all':<10} {totals['stacked'] / n:13.3f} {totals['solo'] / n:11.3f} "
          f"{totals['solo'] / totals['stacked']:7.1f}x   (solo on {args.jobs} workers at best: "
          f"{totals['solo'] / args.jobs:.2f} s; load {load()})")
    print(f"val/test mAP equal in the benchmark, the stacked groups and the solo runs: {equal}/{n}")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if equal == n else 1


if __name__ == "__main__":
    sys.exit(main())
