"""CRISP's class-prior estimates against the true priors on real data sets.

Trains ``crisp`` (docs/methods.md, "crisp") with spmlkit's settings for each data set named,
then prints, per class, the annotated rows n_p, the training split's true prior, the estimate the
run trained its selected epoch with and their distance, and the mean distance after every epoch
(the run's ``class_prior_error``, the curve of the paper's Figure 4). The estimates with known
priors on synthetic data are in ``tests/test_crisp.py``.

    python benchmarks/crisp_priors.py [--datasets yeast,scene] [--epochs 20]

MULAN sets are read from ``$SPMLKIT_DATA`` as by ``spmlkit train``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from spmlkit.experiments.presets import resolve_config
from spmlkit.training import train
from spmlkit.training.checkpoint import load_checkpoint
from spmlkit.training.plan import plan_run


def report(dataset: str, epochs: int | None, folder: Path) -> None:
    values = {"dataset": dataset, "method": "crisp", "device": "cpu", "out": str(folder / dataset)}
    if epochs is not None:
        values["epochs"] = epochs
    config = resolve_config(values)
    result = train(config)
    plan = plan_run(config)
    truth = np.asarray(plan.split.truth_train, dtype=np.float64).mean(axis=0)
    n_p = (plan.split.observed == 1).sum(axis=0)
    prior = np.asarray(load_checkpoint(folder / dataset / "best.pt")["method"]["_extra_state"]["labeling"]["prior"])
    rows = len(plan.split.observed)
    print(f"\n{dataset}: {rows} training rows, selected epoch {result.best_epoch}, "
          f"val mAP {100 * result.val_map:.2f}%, test mAP {100 * result.test_map:.2f}%")
    print(f"{'class':>28s} {'n_p':>6s} {'true':>7s} {'estimate':>9s} {'|error|':>8s}")
    for name, k, t, e in zip(result.class_names, n_p, truth, prior):
        print(f"{name[:28]:>28s} {int(k):6d} {t:7.4f} {e:9.4f} {abs(e - t):8.4f}")
    print(f"{'mean':>28s} {'':6s} {truth.mean():7.4f} {prior.mean():9.4f} {np.abs(prior - truth).mean():8.4f}")
    curve = " ".join(f"{h['class_prior_error']:.3f}" for h in result.history)
    print(f"mean |estimate - truth| after each epoch: {curve}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="yeast,scene", help="comma-separated data sets (default: yeast,scene)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default: the data set's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets.split(","):
            report(dataset.strip(), args.epochs, Path(tmp))


if __name__ == "__main__":
    main()
