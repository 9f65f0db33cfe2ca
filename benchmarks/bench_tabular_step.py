"""Benchmark: one group of the tabular protocol's grid, spmlkit against a bare PyTorch loop of the same shapes.

    SPMLKIT_DATA=DIR python benchmarks/bench_tabular_step.py [--dataset scene] [--method an] [--batch 8]
                                                              [--epochs 10] [--repeats 3] [--profile]

Why. ``spmlkit reproduce crisp-tabular`` (docs/reproductions.md) trains, per data set, method and trial, the
papers' 4 learning rates x 4 weight decays as one group of 16 runs of SMILE's small MLP (one hidden layer
as wide as the set has labels), at batch 8 and at batch 16: hundreds of thousands of steps, each a few
products of a batch of 8 rows. Such a step costs what its operations' overhead costs, not arithmetic,
so the question is how far spmlkit's step is from the least PyTorch needs for the same work. This prints,
side by side in one invocation (each pair back to back, so both share the load of the moment):

1. **spmlkit**: ``train_group`` of the 16 runs (the reproduction's settings: random partition of the
   trial, raw features, the MLP, ``--epochs``), one torch thread, as a sweep worker trains them;
2. **bare loop**: the same rows and batches (the feature source's, each run its own shuffle), the 16
   MLPs as stacked tensors (two batched products and a ReLU), binary cross-entropy on the "assume
   negative" targets, backward, PyTorch's fused Adam with one parameter group per (lr, weight decay) --
   one tensor per run and parameter, so it needs the same groups spmlkit's optimiser has --, each
   epoch the validation mAP that selects the epoch, and each run's test metrics at the end. No label
   state, no best-epoch snapshot, no records, no method beyond "assume negative".

Per step: CPU milliseconds of the whole group (validation and bookkeeping included) over its training
steps. The target is spmlkit within 1.5 times the bare loop. ``--profile`` adds where spmlkit's time goes
(cProfile of one group, by the part of the step that owns each function).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from bench_step_floor import bare_data  # this folder's: the same data as the Yeast benchmark's bare loop
from spmlkit.experiments.presets import TABULAR_PROTOCOL, resolve_config
from spmlkit.metrics import average_precision
from spmlkit.training import train_group
from spmlkit.training.evaluation import evaluate_test

GRID = [(lr, wd) for lr in (1e-2, 1e-3, 1e-4, 1e-5) for wd in (1e-2, 1e-3, 1e-4, 1e-5)]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def configs(dataset: str, method: str, batch: int, epochs: int, seed: int) -> list:
    base = {**TABULAR_PROTOCOL, "dataset": dataset, "method": method, "batch_size": batch, "epochs": epochs,
            "seed": seed, "device": "cpu"}
    return [resolve_config({**base, "lr": lr, "weight_decay": wd}) for lr, wd in GRID]


def bare_loop(group: list, epochs: int) -> tuple[float, int]:
    """CPU seconds and training steps of the bare loop (module docstring, 2.) on ``group``'s runs."""
    t0 = time.process_time()
    source, X_val, X_test, targets, val_targets, test_targets = bare_data(group[0])
    runs, d, c = len(group), X_val.shape[1], targets.shape[1]
    torch.manual_seed(0)
    shapes = ((c, d), (c,), (c, c), (c,))  # SMILE's MLP: hidden width = number of labels
    params = [[torch.nn.Parameter(torch.randn(*s) * 0.1) for s in shapes] for _ in range(runs)]
    optimizer = torch.optim.Adam([{"params": p, "lr": cfg.optimisation.lr, "weight_decay": cfg.optimisation.weight_decay}
                                  for p, cfg in zip(params, group)], fused=True)
    generators = [torch.Generator().manual_seed(r) for r in range(runs)]

    def forward(x: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = (torch.stack([p[k] for p in params]) for k in range(4))
        if x.dim() == 2:
            x = x.expand(runs, *x.shape)
        hidden = torch.relu(torch.baddbmm(b1.unsqueeze(1), x, w1.mT))
        return torch.baddbmm(b2.unsqueeze(1), hidden, w2.mT)

    steps = 0
    for _ in range(epochs):
        for x, idx in source.train_batches(generators):
            y = torch.index_select(targets, 0, idx.reshape(-1)).view(runs, -1, c)
            loss = F.binary_cross_entropy_with_logits(forward(x), y, reduction="none").mean((1, 2)).sum()
            for p in optimizer.param_groups:
                for t in p["params"]:
                    t.grad = None
            loss.backward()
            optimizer.step()
            steps += 1
        with torch.no_grad():
            val_probs = torch.sigmoid(forward(X_val))
        side_by_side = val_probs.transpose(0, 1).reshape(len(X_val), runs * c).numpy()
        average_precision(side_by_side, np.tile(val_targets, (1, runs)))
    with torch.no_grad():
        test_probs = torch.sigmoid(forward(X_test)).numpy()
    for r in range(runs):
        evaluate_test(test_probs[r], test_targets, val_probs=val_probs[r].numpy(), val_targets=val_targets)
    return time.process_time() - t0, steps


#: the parts of a group's time, each the cumulative time of the functions named (file suffix, function)
_PARTS = (
    ("optimiser step (Adam)", (("torch/optim/optimizer.py", "wrapper"),)),
    ("backward", (("torch/_tensor.py", "backward"),)),
    ("forward and loss", (("training/batched.py", "losses"),)),
    ("batches and labels", (("training/sources.py", "train_batches"), ("spmlkit/labels.py", "batch"))),
    ("gradients cleared", (("training/loop.py", "_clear_grads"),)),
    ("epoch ends (validation)", (("training/loop.py", "end_of_epoch"),)),
    ("plan, models, test metrics", (("training/plan.py", "plan_run"), ("training/trainer.py", "_build_run"),
                                    ("training/trainer.py", "_evaluate"))),
)


def profile_parts(group: list) -> tuple[list[tuple[str, float]], float]:
    """Seconds of one ``train_group`` call by part (cumulative times under cProfile), and its total."""
    profiler = cProfile.Profile()
    profiler.enable()
    train_group(group)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = max(cum for (_, _, name), (_, _, _, cum, _) in stats.items() if name == "train_group")
    parts = []
    for label, names in _PARTS:
        seconds = sum(cum for (filename, _, name), (_, _, _, cum, _) in stats.items()
                      if any(filename.endswith(f) and name == n for f, n in names))
        parts.append((label, seconds))
    parts.append(("the rest of the loop", total - sum(s for _, s in parts)))
    return parts, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="scene", help="feature data set (default scene; the MULAN sets need SPMLKIT_DATA)")
    ap.add_argument("--method", default="an", help="method of spmlkit's side (default an)")
    ap.add_argument("--batch", type=int, default=8, help="batch size (default 8, the papers' smaller one)")
    ap.add_argument("--epochs", type=int, default=10, help="epochs (default 10, the protocol's)")
    ap.add_argument("--repeats", type=int, default=3, help="pairs of timings; the medians are printed (default 3)")
    ap.add_argument("--profile", action="store_true", help="also print where spmlkit's time goes")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load average at start: {load()}")
    group = configs(args.dataset, args.method, args.batch, args.epochs, seed=0)
    train_group(configs(args.dataset, args.method, args.batch, 1, seed=0))  # warm-up: imports, data, first calls
    ours, bare, steps = [], [], 0
    for _ in range(args.repeats):
        b, steps = bare_loop(group, args.epochs)
        t0 = time.process_time()
        train_group(group)
        ours.append(time.process_time() - t0)
        bare.append(b)
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"\n{args.dataset}, {args.method}: one group of {len(group)} runs (lr x weight decay), batch {args.batch}, "
          f"{args.epochs} epochs = {steps} steps; one torch thread; median of {args.repeats}, CPU")
    print(f"  {'':<10} {'seconds':>8} {'ms/step':>8}")
    print(f"  {'spmlkit':<10} {o:8.2f} {o / steps * 1e3:8.3f}")
    print(f"  {'bare loop':<10} {b:8.2f} {b / steps * 1e3:8.3f}")
    print(f"  ratio {o / b:.2f} (target: within 1.5)")
    if args.profile:
        parts, total = profile_parts(group)
        print(f"\nwhere spmlkit's time goes (cProfile: {total:.2f} s in all; the profiler slows Python calls):")
        for label, seconds in parts:
            print(f"  {label:<26} {seconds:7.2f} s  {100 * seconds / total:5.1f} %")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
