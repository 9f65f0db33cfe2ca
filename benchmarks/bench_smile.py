"""What a SMILE step costs beside an AN step on the same model (docs/methods.md, "smile", "Cost").

For rows of the size of four MULAN sets' 80 % training splits (random features: the cost does not
depend on their values), it times, on one torch thread:

* building SMILE's k-nearest-neighbour graph (the distances; a second build of the same features
  is served from memory, ``spmlkit.models.graph.knn_neighbours``);
* one training step of batch 16 on an MLP head with hidden width C (the SMILE code's classifier):
  forward, SMILE's loss, backward and fused Adam over the head and SMILE's networks; and the same
  step with the AN loss, whose networks are the head's alone.

    PYTHONPATH=src python benchmarks/bench_smile.py [--steps 200]
"""

from __future__ import annotations

import argparse
import time

import torch

from spmlkit import losses
from spmlkit.labels import LabelBatch, PseudoLabels
from spmlkit.methods import METHODS, Method, RunInfo
from spmlkit.models import ModelOutput
from spmlkit.models import graph
from spmlkit.models import FeatureHead

#: (name, training rows, features, classes): 80 % of each set's rows
SIZES = [("yeast", 1933, 103, 14), ("scene", 1925, 294, 6), ("corel5k", 4000, 499, 374),
         ("delicious", 12920, 500, 983)]


def method(name: str, X: torch.Tensor, classes: int) -> Method:
    """The method ``name`` of a run whose training rows are ``X``."""
    info = RunInfo(num_train=len(X), num_classes=classes, observed=None, expected_num_pos=1.0, epochs=1, seed=0,
                   features=lambda: X)
    return METHODS[name](info)


def step_ms(head: FeatureHead, loss: Method, X: torch.Tensor, labels: torch.Tensor, steps: int,
            generator: torch.Generator) -> float:
    """Milliseconds per step (after 20 warm-up steps), batches of 16 random rows."""
    groups = head.param_groups(1e-3) + loss.param_groups(1e-3)
    optimizer = torch.optim.Adam(groups, lr=1e-3, fused=True)
    params = [p for g in groups for p in g["params"]]
    batches = [torch.randperm(len(X), generator=generator)[:16] for _ in range(steps + 20)]
    for i, index in enumerate(batches):
        if i == 20:
            start = time.perf_counter()
        for p in params:
            p.grad = None
        y = labels[index]
        batch = LabelBatch(y, PseudoLabels(torch.zeros_like(y, dtype=torch.bool), torch.zeros_like(y)), index)
        loss.loss(ModelOutput(head(X[index]).logits), batch).backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per method and set (default: 200)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'set':<10} {'rows':>6} {'dim':>4} {'C':>4} {'graph s':>8} {'again s':>8} {'SMILE ms':>9} {'AN ms':>7}")
    for name, n, dim, classes in SIZES:
        generator = torch.Generator().manual_seed(0)
        X = torch.randn(n, dim, generator=generator)
        labels = torch.zeros(n, classes)
        labels[torch.arange(n), torch.randint(classes, (n,), generator=generator)] = 1.0
        graph._RECENT.clear()
        t0 = time.perf_counter()
        smile = method("smile", X, classes)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        method("smile", X, classes)
        again = time.perf_counter() - t0
        torch.manual_seed(0)
        smile_ms = step_ms(FeatureHead(dim, classes, "mlp", hidden=classes), smile, X, labels, args.steps, generator)
        torch.manual_seed(0)
        an_ms = step_ms(FeatureHead(dim, classes, "mlp", hidden=classes), method("an", X, classes), X, labels,
                        args.steps, generator)
        print(f"{name:<10} {n:>6} {dim:>4} {classes:>4} {built:>8.2f} {again:>8.2f} {smile_ms:>9.2f} {an_ms:>7.2f}",
              flush=True)


if __name__ == "__main__":
    main()
