"""Benchmark: a suite's wall time data set by data set, and one data set's cost per training step
beside a bare PyTorch step of the same shapes.

    python benchmarks/bench_suite.py                       # the mulan suite, step cost on delicious
    python benchmarks/bench_suite.py --datasets yeast --step-dataset yeast --methods an,em,bce

What it measures, in one invocation:

1. **The suite, data set by data set.** For each data set of ``--suite`` (or ``--datasets``)
   that this installation can load (``spmlkit.data.load_dataset``; one it cannot is skipped with
   the loader's reason), the wall time of its benchmark as ``spmlkit benchmark --dataset NAME``
   runs it: every method x seed x lr, as one sweep on ``--jobs`` workers (default: one per usable
   CPU), start-up of the workers included, into a fresh store (nothing is reused). Printed with
   its rows, features, labels, runs, the CPU seconds it took (this process and its workers:
   on a shared machine the wall time is only an upper bound) and share of the total, and the total of the data sets other
   than delicious, which docs/leaderboard.md, "Suites" sets against 10 minutes on 2 cores. With
   ``--whole``, also the wall time of the whole suite as one sweep, as ``spmlkit benchmark
   --suite`` runs it (one pool of workers for every data set), and the leaderboard it writes.
2. **Cost per training step** on ``--step-dataset`` (default delicious: 500 features, 983
   labels), on one torch thread as a sweep worker trains: spmlkit's run of each ``--step-methods``
   method with the benchmark's configuration (its batch size, epochs and middle lr), beside a
   bare loop of the same shapes: ``nn.Linear(D, C)`` on batches of the benchmark's size drawn from
   the data set's rows, binary cross-entropy with logits, backward, ``torch.optim.Adam``, for as
   many steps as spmlkit's run took. Measured back to back ``--repeats`` times after one warm-up
   each (first use of torch's kernels is not a step's cost); the medians are printed with three
   ratios to the bare step: spmlkit's training steps alone (its epochs' ``train_seconds``), its
   epochs (steps plus each epoch's validation mAP, which selects the epoch), and the whole run
   (plus planning, the data source and the test metrics), so that what dominates is visible; and
   the same three ratios in CPU seconds (:func:`spmlkit_run` says how), which a loaded machine
   changes far less than wall times measured minutes apart.

The machine may be shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from spmlkit.allocator import keep_freed_memory
from spmlkit.data import TabularDataset, load_dataset
from spmlkit.experiments import benchmark as bm
from spmlkit.experiments.suites import SUITES
from spmlkit.experiments.sweep import expand, run_config
from spmlkit.experiments.sweep.cores import default_jobs
from spmlkit.methods import METHODS
from spmlkit.training import RunConfig, train


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its finished children (a sweep's workers,
    reaped when its pool shuts down): on a machine shared with other work, the wall time of a
    sweep grows with the load, its CPU time hardly does."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def loadable(datasets: list[str]) -> tuple[dict[str, tuple[int, int, int, int]], dict[str, str]]:
    """(train rows, test rows, features, labels) of each data set that loads; the reason of each that does not."""
    shapes, skipped = {}, {}
    for name in datasets:
        try:
            ds = load_dataset(name)
        except (ValueError, OSError) as exc:  # a user-side reason: not installed, not downloadable here
            skipped[name] = str(exc).splitlines()[0]
            continue
        shapes[name] = (len(ds.X_train), len(ds.X_test), ds.X_train.shape[1], ds.Y_train.shape[1])
    return shapes, skipped


def specs_of(args: argparse.Namespace, datasets: list[str]) -> list[bm.BenchmarkSpec]:
    return [bm.BenchmarkSpec(dataset=d, methods=tuple(args.methods), seeds=tuple(args.seeds), lrs=tuple(args.lrs),
                             epochs=args.epochs, subset=args.subset) for d in datasets]


def time_per_dataset(args: argparse.Namespace, shapes: dict[str, tuple[int, int, int, int]], out: Path) -> None:
    specs = specs_of(args, list(shapes))
    print(f"\n1. each data set's benchmark as its own sweep ({len(args.methods)} methods x {len(args.seeds)} seeds x "
          f"{len(args.lrs)} lrs, {args.epochs} epochs, {args.jobs} worker(s)), wall s:")
    print(f"  {'data set':<10} {'train':>6} {'test':>6} {'feat':>6} {'labels':>6} {'runs':>5} {'wall s':>8} "
          f"{'s/run':>6} {'cpu s':>7}  load average (1, 5, 15 min)")
    walls, cpus = {}, {}
    for spec in specs:  # each row as soon as its data set is done: a long suite shows progress, and load
        t0, c0 = time.perf_counter(), cpu_seconds()
        result = bm.run_benchmark(spec, out / spec.dataset, jobs=args.jobs)
        wall, cpus[spec.dataset] = time.perf_counter() - t0, cpu_seconds() - c0
        walls[spec.dataset] = (wall, result.total, result.failed)
        n_train, n_test, d, c = shapes[spec.dataset]
        note = f"  ({result.failed} runs failed)" if result.failed else ""
        print(f"  {spec.dataset:<10} {n_train:6d} {n_test:6d} {d:6d} {c:6d} {result.total:5d} {wall:8.1f} "
              f"{wall / result.total:6.2f} {cpus[spec.dataset]:7.1f}  load {load()}{note}", flush=True)
    total = sum(w for w, _, _ in walls.values())
    print("  share of the total: " + ", ".join(f"{name} {w / total:.1%}" for name, (w, _, _) in walls.items()))
    cpu_others = sum(v for name, v in cpus.items() if name != "delicious")
    print(f"  CPU seconds without delicious: {cpu_others:.1f}, i.e. at least {cpu_others / args.jobs:.1f} s of wall "
          f"time on {args.jobs} dedicated cores (what a loaded machine's wall time hides)")
    others = sum(w for name, (w, _, _) in walls.items() if name != "delicious")
    print(f"  all {len(walls)}: {total:.1f} s; without delicious ({len(walls) - ('delicious' in walls)} sets): "
          f"{others:.1f} s (target: 600 s on 2 cores)")
    slowest = max(walls, key=lambda n: walls[n][0])
    print(f"  slowest: {slowest}, {walls[slowest][0] / total:.0%} of the total")


def time_whole(args: argparse.Namespace, datasets: list[str], out: Path) -> None:
    specs = specs_of(args, datasets)
    t0 = time.perf_counter()
    result = bm.run_benchmarks(specs, out, jobs=args.jobs)
    ran = time.perf_counter() - t0
    t1 = time.perf_counter()
    tables, board, paths = bm.write_suite_outputs(out, specs, result.store)
    wrote = time.perf_counter() - t1
    print(f"\n   the whole suite as one sweep ({result.total} runs, {result.failed} failed): {ran:.1f} s, then the "
          f"{len(tables)} tables and the leaderboard {wrote:.1f} s -> {paths['markdown']}")


def bare_steps(x: np.ndarray, n_labels: int, batch: int, lr: float, steps: int) -> tuple[float, float]:
    """(wall s, CPU s) of ``steps`` bare training steps: Linear(D, C), BCE with logits, backward, Adam."""
    torch.manual_seed(0)
    head = torch.nn.Linear(x.shape[1], n_labels)
    optimizer = torch.optim.Adam(head.parameters(), lr=lr)
    features = torch.from_numpy(np.array(x, dtype=np.float32))  # a copy: the data set's arrays are read-only
    targets = (torch.rand(len(features), n_labels) < 0.02).float()
    order = torch.randint(0, len(features), (steps, batch), generator=torch.Generator().manual_seed(0))
    t0, c0 = time.perf_counter(), time.process_time()
    for idx in order:
        loss = F.binary_cross_entropy_with_logits(head(features[idx]), targets[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - t0, time.process_time() - c0


def spmlkit_run(config: RunConfig) -> tuple[tuple[float, float, float], tuple[float, float, float], int]:
    """One spmlkit run of ``config``: wall seconds and CPU seconds of (its training steps, its epochs,
    the whole run), and its steps.

    The wall times are the run's own (each epoch's ``train_seconds`` and ``epoch_seconds``). The
    CPU times come from the process clock read after every step: a gap between two steps of an
    epoch is one step's cost, the gap before an epoch's first step also holds the previous
    epoch's end (its validation mAP), so the steps cost ``steps x`` the mean step gap and the
    epochs add the excess of the epoch-opening gaps, scaled from ``epochs - 1`` to ``epochs``.
    """
    marks: list[float] = []

    def mark(_: int) -> None:
        marks.append(time.process_time())

    c0 = time.process_time()
    result = train(config, on_step=mark)
    run_cpu = time.process_time() - c0
    steps, epochs = len(marks), len(result.history)
    gaps = np.diff(marks)
    opening = np.arange(steps // epochs, steps, steps // epochs) - 1  # the gap before each later epoch's first step
    step_gap = float(np.delete(gaps, opening).mean())
    step_cpu = step_gap * steps
    epoch_cpu = step_cpu + float((gaps[opening] - step_gap).sum()) * epochs / max(1, epochs - 1)
    walls = (sum(h["train_seconds"] for h in result.history), sum(h["epoch_seconds"] for h in result.history),
             result.seconds)
    return walls, (step_cpu, epoch_cpu, run_cpu), steps


def step_cost(args: argparse.Namespace, name: str, ds: TabularDataset) -> None:
    torch.set_num_threads(1)  # as a sweep worker trains a feature run
    d, c = ds.X_train.shape[1], ds.Y_train.shape[1]
    lr = sorted(args.lrs)[len(args.lrs) // 2]
    print(f"\n2. cost per training step on {name} ({d} features -> {c} labels), one torch thread, median of "
          f"{args.repeats}, ms/step:")
    print(f"  {'method':<10} {'batch':>5} {'steps':>6} {'bare':>7} {'steps':>7} {'epochs':>7} {'run':>7} "
          f"{'ratio':>6} {'ratio':>7} {'ratio':>6}   CPU ratio")
    print(f"  {'':<10} {'':>5} {'':>6} {'':>7} {'':>7} {'':>7} {'':>7} {'steps':>6} {'epochs':>7} {'run':>6} "
          f"  steps epochs   run")
    for method in args.step_methods:
        spec = bm.BenchmarkSpec(dataset=name, methods=(method,), seeds=(0,), lrs=(lr,), epochs=args.epochs,
                                subset=args.subset)
        config = run_config(expand(spec.sweep(os.devnull))[0])
        batch = config.optimisation.batch_size
        spmlkit_run(config)  # warm-up: first use of the data, the kernels, the optimiser
        bare_steps(ds.X_train, c, batch, lr, 50)
        ours, bare, cpu_ratios = [], [], []
        for _ in range(args.repeats):  # back to back, so both sides share the machine's load of that moment
            walls, cpus, steps = spmlkit_run(config)
            ours.append(tuple(w / steps for w in walls))
            bare_wall, bare_cpu = bare_steps(ds.X_train, c, batch, lr, steps)
            bare.append(bare_wall / steps)
            cpu_ratios.append(tuple(v / bare_cpu for v in cpus))
        s, e, r = (statistics.median(x[i] for x in ours) * 1e3 for i in range(3))
        b = statistics.median(bare) * 1e3
        cs, ce, cr = (statistics.median(x[i] for x in cpu_ratios) for i in range(3))
        print(f"  {method:<10} {batch:5d} {steps:6d} {b:7.3f} {s:7.3f} {e:7.3f} {r:7.3f} {s / b:6.2f} {e / b:7.2f} "
              f"{r / b:6.2f}   {cs:5.2f} {ce:6.2f} {cr:5.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--suite", choices=tuple(SUITES), default="mulan", help="the suite to time (default mulan)")
    which.add_argument("--datasets", type=lambda s: s.split(","), help="comma-separated data sets instead of a suite")
    ap.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS),
                    help="comma-separated methods (default: all)")
    ap.add_argument("--seeds", type=lambda s: [int(v) for v in s.split(",")], default=list(bm.DEFAULT_SEEDS))
    ap.add_argument("--lrs", type=lambda s: [float(v) for v in s.split(",")], default=list(bm.DEFAULT_LRS))
    ap.add_argument("--epochs", type=int, default=bm.BenchmarkSpec.epochs)
    ap.add_argument("--subset", type=int, help="first N training rows of every data set (quick checks)")
    ap.add_argument("--jobs", type=int, help="sweep workers (default: one per usable CPU)")
    ap.add_argument("--whole", action="store_true", help="also time the whole suite as one sweep, as the CLI runs it")
    ap.add_argument("--step-dataset", default="delicious", help="data set of the step-cost comparison (default "
                                                                "delicious); 'none' skips it")
    ap.add_argument("--step-methods", type=lambda s: s.split(","), default=["an"],
                    help="methods of the step-cost comparison (default an)")
    ap.add_argument("--repeats", type=int, default=3, help="back-to-back pairs of the step-cost comparison")
    ap.add_argument("--no-suite", action="store_true", help="only the step-cost comparison")
    args = ap.parse_args()
    keep_freed_memory()  # as every spmlkit command does (docs/architecture.md, "Freed memory")
    datasets = args.datasets or list(SUITES[args.suite])
    print(f"load average at start: {load()}")
    if not args.no_suite:
        shapes, skipped = loadable(datasets)
        for name, why in skipped.items():
            print(f"  skipped {name}: {why}")
        if not shapes:
            sys.exit("no data set of the suite can be loaded here; nothing to time")
        args.jobs = args.jobs or default_jobs(list(shapes))  # as the CLI: a typed --jobs is used as given
        with tempfile.TemporaryDirectory(prefix="bench_suite-") as tmp:
            time_per_dataset(args, shapes, Path(tmp) / "each")
            if args.whole:
                time_whole(args, list(shapes), Path(tmp) / "whole")
    if args.step_dataset != "none":
        try:
            ds = load_dataset(args.step_dataset)
        except (ValueError, OSError) as exc:
            print(f"\n2. cost per training step: skipped {args.step_dataset}: {str(exc).splitlines()[0]}")
        else:
            step_cost(args, args.step_dataset, ds)
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
