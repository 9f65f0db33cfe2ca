"""Benchmark: each method's runs trained as one batched group beside the same runs trained one by one.

    python benchmarks/bench_batched.py [--lrs 0.01] [--seeds 0,1,2] [--methods an,em,...] [--epochs 20]

For every method of the Yeast benchmark (its preset hyperparameters, the given learning rates
-- one by default -- and seeds, 20 epochs, the sweep's configurations:
:func:`spmlkit.experiments.sweep.run_config`),
in this process with one torch thread (as a sweep worker):

1. the runs as one group, :func:`spmlkit.training.train_group`, timed in CPU seconds (as the
   groups their batch keys form, where a method groups fewer: SMILE groups one seed's runs);
2. each run alone, :func:`spmlkit.training.train`, timed the same way;
3. the largest absolute difference, over the runs, between a batched run and its solo run in
   the final weights, the selected epoch's validation mAP and the test mAP (the contract is
   1e-6, docs/architecture.md, "Many runs at once"; 0 means bit-identical);
4. the speed-up of the group over the R solo runs (same process, same minute).

Both sides of a row run back to back, so they share the machine's load; the load average is
printed at the start and the end. The first group pays one-off costs (data loading, imports
torch makes on first use), so a warm-up group runs before the table.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from spmlkit.experiments.benchmark import BenchmarkSpec
from spmlkit.experiments.sweep import expand, run_config
from spmlkit.methods import METHODS
from spmlkit.training import RunResult, train, train_group
from spmlkit.training.plan import batch_key


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def _weights_difference(a: RunResult, b: RunResult) -> float:
    return max(float((p - q).detach().abs().max()) for p, q in zip(a.model.parameters(), b.model.parameters(),
                                                                   strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", default="0.01", help="learning rates, comma-separated (the benchmark's: "
                        "0.001,0.003,0.01)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--methods", default=",".join(m for m in METHODS if METHODS[m].on_features.trains),
                        help="methods, comma-separated (default: every method that trains on features)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    methods = tuple(args.methods.split(","))
    seeds = tuple(int(s) for s in args.seeds.split(","))
    lrs = tuple(float(lr) for lr in args.lrs.split(","))
    spec = BenchmarkSpec(methods=methods, seeds=seeds, lrs=lrs, epochs=args.epochs)
    by_method: dict[str, list] = {}
    for run in expand(spec.sweep("unused.db")):
        by_method.setdefault(run["method"], []).append(run_config(run))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; lrs {args.lrs}, seeds {args.seeds}, "
          f"{args.epochs} epochs, one torch thread")
    train_group(next(iter(by_method.values()))[:1])  # warm-up: data loading, torch's first-use imports
    header = (f"| method | weights | val mAP | test mAP | group (s) | {len(seeds) * len(lrs)} solo (s) | speed-up |\n"
              "|---|---|---|---|---|---|---|")
    print(header)
    total_group = total_solo = 0.0
    for method, configs in by_method.items():
        groups: dict[str | None, list] = {}  # a method may group fewer runs (SMILE: one seed's)
        for config in configs:
            groups.setdefault(batch_key(config), []).append(config)
        configs = [config for group in groups.values() for config in group]
        batched, group_seconds = _cpu(lambda: [r for group in groups.values() for r in train_group(group)])
        solo_seconds = 0.0
        worst = {"weights": 0.0, "val": 0.0, "test": 0.0}
        for config, result in zip(configs, batched):
            solo, seconds = _cpu(lambda: train(config))
            solo_seconds += seconds
            worst["weights"] = max(worst["weights"], _weights_difference(result, solo))
            worst["val"] = max(worst["val"], abs(result.val_map - solo.val_map))
            worst["test"] = max(worst["test"], abs(result.test_map - solo.test_map))
        total_group += group_seconds
        total_solo += solo_seconds
        print(f"| {method} | {worst['weights']:.1e} | {worst['val']:.1e} | {worst['test']:.1e} | "
              f"{group_seconds:.2f} | {solo_seconds:.2f} | {solo_seconds / group_seconds:.1f}x |", flush=True)
    print(f"| all | | | | {total_group:.1f} | {total_solo:.1f} | {total_solo / total_group:.1f}x |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
