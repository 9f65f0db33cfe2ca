"""Benchmark: the Yeast benchmark's time beside the least this machine needs for the same work.

    python benchmarks/bench_step_floor.py [--methods an|all|an,role,...] [--jobs 2] [--repeats 3]

Why. ``spmlkit benchmark --dataset yeast`` has a wall-time target (docs/architecture.md, "Many
runs at once"). Whether a target is reachable depends on what no implementation can avoid, so
this prints, measured side by side in one invocation:

1. **start-up**: a fresh Python importing torch; torch and ``torch._dynamo`` (every
   ``torch.optim`` optimiser imports it on its first call, so each sweep worker does); the
   module ``spmlkit benchmark`` runs. Median wall time of ``--repeats`` fresh processes.
2. **one group** of the benchmark per method (its 3 learning rates x 3 seeds, 20 epochs, the
   sweep's configurations), trained by :func:`spmlkit.training.train_group` as a sweep worker
   does (one torch thread): CPU seconds, and per training step.
3. **a bare torch loop**, run just before each group so that a row's two sides share the
   machine's load, doing the least any method does on those runs: the same data, epochs and
   batches (each run its own shuffle), the nine heads as one batched product, binary
   cross-entropy on the "assume negative" targets, backward, PyTorch's fused Adam with one
   parameter group per learning rate, each epoch the validation mAP that selects the epoch,
   and at the end each run's test metrics; planning the runs and building their data source
   are timed on both sides. No label state, no best-epoch snapshot, no records.
4. the **floor** of the whole benchmark on ``--jobs`` workers: start-up (torch, then
   ``torch._dynamo`` in the workers) plus every group's bare loop shared out over the workers,
   that is what the benchmark would take if each of its 26 methods cost no more than the bare
   "assume negative" loop and the workers never waited for each other.

The machine may be shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from spmlkit.experiments.benchmark import BenchmarkSpec
from spmlkit.experiments.sweep import expand, run_config
from spmlkit.metrics import average_precision
from spmlkit.stacked import affine
from spmlkit.training import train_group
from spmlkit.training.distributed import Distributed
from spmlkit.training.evaluation import evaluate_test
from spmlkit.training.plan import plan_run
from spmlkit.training.trainer import _source  # the feature source training reads

_IMPORTS = {"torch": "import torch", "torch + torch._dynamo": "import torch, torch._dynamo",
            "spmlkit benchmark module": "import spmlkit.experiments.benchmark"}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def start_up(repeats: int) -> dict[str, float]:
    """Median wall seconds of a fresh interpreter running each import."""
    out = {}
    for name, code in _IMPORTS.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def bare_data(config) -> tuple:
    """What a bare loop trains and evaluates on, as the run of ``config`` would: its plan's feature
    source (standardised as training standardises), the validation and test rows, the "assume
    negative" targets of the training rows, the validation and test labels."""
    plan = plan_run(config)
    source = _source(plan, Distributed())
    targets = torch.from_numpy(plan.train_labels == 1).float()
    return (source, source.rows("val"), source.rows("test"), targets, plan.split.val_targets, plan.data.Y_test)


def bare_loop(configs: list, epochs: int) -> tuple[float, int]:
    """CPU seconds and steps of the bare loop (module docstring, 3.) on ``configs``' runs.

    Its data are the tensors and batches the runs train on: the plan's split, the trainer's
    feature source (standardised as training standardises) and its per-run shuffles. The clock
    covers what ``train_group``'s does besides training proper: planning, the source, and each
    run's test metrics at the end. Each learning rate's runs are one ``[R/3, C, D]`` tensor (the
    optimiser needs one group per learning rate), concatenated once per step; that costs less
    than the per-run views and gradient hooks spmlkit keeps so that each run stays its own."""
    t0 = time.process_time()
    source, X_val, X_test, targets, val_targets, test_targets = bare_data(configs[0])
    lrs = sorted({c.optimisation.lr for c in configs})
    runs, d, c = len(configs), X_val.shape[1], targets.shape[1]
    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(runs // len(lrs), c, d) * 0.01) for _ in lrs]
    biases = [torch.nn.Parameter(torch.zeros(runs // len(lrs), c)) for _ in lrs]
    optimizer = torch.optim.Adam([{"params": [w, b], "lr": lr} for w, b, lr in zip(weights, biases, lrs)], fused=True)
    generators = [torch.Generator().manual_seed(r) for r in range(runs)]
    steps = 0
    for _ in range(epochs):
        for x, idx in source.train_batches(generators):
            y = torch.index_select(targets, 0, idx.reshape(-1)).view(runs, -1, c)
            logits = affine(x, torch.cat(weights), torch.cat(biases))
            loss = F.binary_cross_entropy_with_logits(logits, y, reduction="none").mean((1, 2)).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
        with torch.no_grad():
            val_probs = torch.sigmoid(affine(X_val, torch.cat(weights), torch.cat(biases)))
        side_by_side = val_probs.transpose(0, 1).reshape(len(X_val), runs * c).numpy()
        average_precision(side_by_side, np.tile(val_targets, (1, runs)))
    with torch.no_grad():
        test_probs = torch.sigmoid(affine(X_test, torch.cat(weights), torch.cat(biases))).numpy()
    for r in range(runs):
        evaluate_test(test_probs[r], test_targets, val_probs=val_probs[r].numpy(), val_targets=val_targets)
    return time.process_time() - t0, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="an", help="comma-separated methods, or 'all' (default: an)")
    ap.add_argument("--jobs", type=int, default=2, help="workers the floor shares the groups over (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per import timing (default 3)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = BenchmarkSpec()
    all_runs = expand(spec.sweep(os.devnull))
    groups: dict[str, list] = {}
    for run in all_runs:
        groups.setdefault(run["method"], []).append(run)
    methods = list(groups) if args.methods == "all" else args.methods.split(",")
    unknown = [m for m in methods if m not in groups]
    if unknown:
        sys.exit(f"--methods: {', '.join(unknown)} not in the benchmark; it has {', '.join(groups)}")
    print(f"load average at start: {load()}")
    imports = start_up(args.repeats)
    print(f"\nstart-up, a fresh process, median of {args.repeats} (wall s):")
    for name, seconds in imports.items():
        print(f"  {name:<26} {seconds:6.2f}")

    train_group([run_config(r) for r in groups[methods[0]]])  # warm-up: first-use imports and data
    print(f"\none group per method (its {len(groups[methods[0]])} runs, {spec.epochs} epochs), one torch thread, CPU s:")
    print("  (ms/step: the group's CPU time over its training steps, validation and bookkeeping included)")
    print(f"  {'method':<10} {'spmlkit':>8} {'bare loop':>10} {'ratio':>6} {'ms/step':>8} {'bare':>6}")
    bares, total = [], 0.0
    for method in methods:
        configs = [run_config(r) for r in groups[method]]
        # back to back, so that both sides of a row share the machine's load of that moment
        bare_seconds, steps = bare_loop(configs, spec.epochs)
        bares.append(bare_seconds)
        t0 = time.process_time()
        train_group(configs)
        ours = time.process_time() - t0
        total += ours
        print(f"  {method:<10} {ours:8.2f} {bare_seconds:10.2f} {ours / bare_seconds:6.2f} "
              f"{ours / steps * 1e3:8.2f} {bare_seconds / steps * 1e3:6.2f}")

    n_groups, bare_seconds = len(groups), statistics.median(bares)
    critical = imports["torch + torch._dynamo"]
    floor = critical + n_groups * bare_seconds / args.jobs
    print(f"\nwhole benchmark: {n_groups} groups x {steps} steps = {n_groups * steps} steps on {args.jobs} workers")
    print(f"  floor = start-up (torch + torch._dynamo) {critical:.2f} s "
          f"+ {n_groups} x bare loop (median) {bare_seconds:.2f} s / {args.jobs} = {floor:.2f} s")
    if len(methods) == n_groups:
        print(f"  spmlkit = the same start-up + its groups' {total:.2f} s / {args.jobs} = {critical + total / args.jobs:.2f} s "
              f"({total / sum(bares):.2f} times the bare loops' CPU)")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
