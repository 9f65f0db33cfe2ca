"""Choose the Yeast hyperparameter presets of the benchmark on *validation* mAP only.

The papers tune each method's hyperparameters per dataset on the validation split; this
script does the same for the Yeast presets in ``spmlkit.experiments.presets.YEAST_HPARAMS``: for
every candidate setting it trains all (lr, seed) pairs of the default benchmark grid and
prints the mean validation mAP of the best lr. Test mAP is never looked at.

    python benchmarks/tune_yeast.py [--jobs 2] [--out tune-yeast]

Every candidate is a benchmark whose runs land in one results store (``--out``), so an
interrupted tuning resumes where it stopped.
"""

from __future__ import annotations

import argparse
import itertools

from spmlkit.experiments.benchmark import BenchmarkSpec, benchmark_runs, run_benchmark, summarize

GRID = {
    "em": [{"alpha": a} for a in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)],
    "em_apl": [{"alpha": a, "beta": b, "warmup_epochs": w}
               for a, b, w in itertools.product((0.005, 0.01, 0.02, 0.05), (0.1, 0.4, 0.9), (1, 2, 4))],
    "l1r": [{"penalty": p} for p in (1e-4, 1e-3, 3e-3, 1e-2)],
    "l2r": [{"penalty": p} for p in (1e-3, 1e-2, 0.1, 0.3, 1.0)],
    "opml": [{"a": a, "b": b} for a, b in itertools.product((4.0, 16.0, 32.0, 64.0), (0.1, 0.25, 0.5, 1.0))],
    "opml_sp": [{"a": a, "b": b, "rho": r, "highrank_lam": 0.001, "r": q}
                for (a, b), r, q in itertools.product(((4.0, 0.5), (16.0, 0.25)), (0.0, 0.02, 0.05), (2.0, 4.0))],
    "dw": [{"weight": w} for w in (0.02, 0.05, 0.1, 0.2)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--methods", default=",".join(GRID))
    parser.add_argument("--out", default="tune-yeast", help="folder of the results store")
    args = parser.parse_args()
    for method in args.methods.split(","):
        scores = []
        for hp in GRID[method]:
            spec = BenchmarkSpec(methods=(method,), hparams={method: hp})
            result = run_benchmark(spec, args.out, jobs=args.jobs)
            row = summarize(benchmark_runs(spec, result.store), (method,))[0][0]
            scores.append((row["val_map"], hp))
            print(f"{method:8s} {hp}  val mAP {row['val_map']:.2f} (lr {row['lr']:g})", flush=True)
        best = max(scores, key=lambda s: s[0])
        print(f"==> {method}: {best[1]}  val mAP {best[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
