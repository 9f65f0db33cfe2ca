"""Benchmark: ``spmlkit reproduce crisp-tabular --datasets yeast,scene`` as a user runs it, both readings,
every method, five trials, and what each part of it costs.

    python benchmarks/bench_reproduce.py [--out DIR] [--jobs 2] [--datasets yeast,scene]

Runs the command as a fresh ``spmlkit`` process (imports, worker start and the results store
included: what a user waits for) into a new folder, and prints

* its wall time and the CPU time of it and its workers (user and system), with the load average
  before and after (the machine may be shared: the two workers alone make a load of 2; compare
  timings taken under similar load only);
* from the store the command wrote, the worker-seconds each part of the reproduction took: each
  reading (the fair grid, SMILE as published), each method, and CRISP's warm-up lengths, so the
  cost of what the two readings and the warm-up axis added can be read off (a run's ``seconds``
  are its group's divided among the group's runs).

An existing ``--out`` is refused, so every number is of runs trained by this invocation.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-reproduce", help="a new folder for the store and tables")
    parser.add_argument("--jobs", default="2", help="worker processes (default 2)")
    parser.add_argument("--datasets", default="yeast,scene")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        sys.exit(f"{out} exists: give a new --out, so that every run is trained by this benchmark")
    command = [sys.executable, "-m", "spmlkit", "reproduce", "crisp-tabular", "--datasets", args.datasets,
               "--jobs", args.jobs, "--out", str(out), "--quiet"]
    print("command:", " ".join(command[2:]))
    print("load average before:", _load())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    print("load average after:", _load())
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(f"exit {done.returncode}; wall {wall // 60:.0f} min {wall % 60:.0f} s; CPU {user:.0f} s user, "
          f"{system:.0f} s system")
    _costs(out / "results.db")
    return done.returncode


def _costs(store: Path) -> None:
    """Worker-seconds by reading, method and CRISP's warm-up, from the runs' records."""
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(store).to_dataframe()
    runs["reading"] = ["as published" if str(c.get("sweep", "")).endswith("as-published") else "fair grid"
                       for c in runs["config"]]
    total = runs["seconds"].sum()
    print(f"\n{len(runs)} runs, {total:.0f} worker-seconds in all")
    for (reading, dataset), part in runs.groupby(["reading", "dataset"]):
        print(f"  {reading:13s} {dataset:6s}: {len(part):5d} runs, {part['seconds'].sum():7.0f} s")
    print("by method (both data sets):")
    for method, part in runs.groupby("method"):
        print(f"  {method:8s}: {len(part):5d} runs, {part['seconds'].sum():7.0f} s")
    crisp = runs[runs["method"] == "crisp"]
    if not crisp.empty:
        print("CRISP by warm-up length:")
        for warmup, part in crisp.groupby(crisp["hparams"].map(lambda h: h.get("warmup_epochs"))):
            print(f"  warmup_epochs {warmup}: {len(part):4d} runs, {part['seconds'].sum():6.0f} s")


if __name__ == "__main__":
    raise SystemExit(main())
