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
   machine's load, doing the least any method does on those runs: the same number of
   epochs and steps, each run its own shuffle, the nine heads as one batched product
   (``baddbmm``), binary cross-entropy on the "assume negative" targets, backward, PyTorch's
   fused Adam with one parameter group per learning rate, and each epoch the validation mAP that
   selects the epoch. No label state, no best-epoch snapshot, no records.
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
from spmlkit.training import train_group
from spmlkit.training.plan import plan_run

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


def bare_loop(configs: list, epochs: int) -> tuple[float, int]:
    """CPU seconds and steps of the bare loop (module docstring, 3.) on ``configs``' data."""
    plan = plan_run(configs[0])
    data, split = plan.data, plan.split
    X = np.asarray(data.X_train[split.train_idx], dtype=np.float32)
    X_val = np.asarray(data.X_train[split.val_idx] if data.X_val is None else data.X_val, dtype=np.float32)
    mean, std = X.mean(0), X.std(0) + 1e-8
    X, X_val = torch.from_numpy((X - mean) / std), torch.from_numpy((X_val - mean) / std)
    targets = torch.from_numpy(plan.train_labels == 1).float()
    val_targets = split.val_targets
    lrs = sorted({c.optimisation.lr for c in configs})
    runs, (n, d), c = len(configs), X.shape, targets.shape[1]
    per_lr = runs // len(lrs)
    batch = configs[0].optimisation.batch_size
    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(per_lr, d, c) * 0.01) for _ in lrs]
    biases = [torch.nn.Parameter(torch.zeros(per_lr, 1, c)) for _ in lrs]
    optimizer = torch.optim.Adam([{"params": [w, b], "lr": lr} for w, b, lr in zip(weights, biases, lrs)], fused=True)
    generators = [torch.Generator().manual_seed(r) for r in range(runs)]
    steps = 0
    t0 = time.process_time()
    for _ in range(epochs):
        perms = torch.stack([torch.randperm(n, generator=g) for g in generators])
        shuffled = torch.index_select(X, 0, perms.reshape(-1)).view(runs, n, d)
        for start in range(0, n, batch):
            idx = perms[:, start : start + batch]
            y = torch.index_select(targets, 0, idx.reshape(-1)).view(runs, -1, c)
            logits = torch.baddbmm(torch.cat(biases), shuffled[:, start : start + batch], torch.cat(weights))
            loss = F.binary_cross_entropy_with_logits(logits, y, reduction="none").mean((1, 2)).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
        with torch.no_grad():
            probs = torch.sigmoid(torch.baddbmm(torch.cat(biases), X_val.expand(runs, -1, -1), torch.cat(weights)))
        side_by_side = probs.transpose(0, 1).reshape(len(X_val), runs * c).numpy()
        average_precision(side_by_side, np.tile(val_targets, (1, runs)))
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
