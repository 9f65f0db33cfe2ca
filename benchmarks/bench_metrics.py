"""Benchmark: spmlkit's vectorised average precision against a per-class scikit-learn loop.

Runs both on the same random data, checks they agree to 1e-9 and prints, one line per
case, both times side by side, their ratio and the largest absolute difference; also
compares the Wasserstein distance with scipy's. Defaults to the MS-COCO 2014 test size
(40,137 images x 80 classes, about 3% positives). The AP cases: continuous scores, scores
rounded to 3 decimals, and heavy ties: every column rounded to 2 decimals, 4% positives and
one class without positives (the case that used to be slowest).

    python benchmarks/bench_metrics.py [--n 40137 --c 80 --repeats 3 --seed 0]

scikit-learn and scipy are test/benchmark dependencies only; spmlkit does not import them.
Each side is run once untimed first (imports, allocator warm-up), then timed ``--repeats``
times; the median is reported. For AP the two sides alternate run by run, so that load from
other processes on a shared machine falls on both alike; the header shows the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np
from scipy.stats import wasserstein_distance
from sklearn.metrics import average_precision_score

from spmlkit.metrics import average_precision, unobserved_wasserstein


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time of ``fn`` over ``repeats`` runs after one untimed warm-up run."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def sklearn_loop(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # classes without positives
        return np.array([average_precision_score(targets[:, c], scores[:, c]) for c in range(scores.shape[1])])


#: The heavy-ties case: 2-decimal scores (about 100 distinct values per class), 4% positives.
HEAVY_TIES_DECIMALS = 2
HEAVY_TIES_POS_RATE = 0.04

AP_HEADER = f"{'average_precision':<44} {'spmlkit':>9} {'sklearn loop':>12} {'speedup':>8} {'max |diff|':>10}"


def bench_ap(label: str, scores: np.ndarray, targets: np.ndarray, repeats: int) -> bool:
    """Time spmlkit and the scikit-learn loop alternately; print one row of the AP table."""
    ours, ref = average_precision(scores, targets), sklearn_loop(scores, targets)  # warm-up
    t_ours, t_ref = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        ours = average_precision(scores, targets)
        t_ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        ref = sklearn_loop(scores, targets)
        t_ref.append(time.perf_counter() - start)
    t_o, t_r = statistics.median(t_ours), statistics.median(t_ref)
    err = float(np.max(np.abs(np.asarray(ours) - np.asarray(ref))))
    ok = err <= 1e-9
    print(f"  {label:<42} {t_o:>8.3f}s {t_r:>11.3f}s {t_r / t_o:>7.1f}x {err:>10.1e} {'OK' if ok else 'MISMATCH'}")
    return ok


def bench_wasserstein(probs: np.ndarray, truth: np.ndarray, observed: np.ndarray, repeats: int) -> bool:
    def scipy_per_class() -> np.ndarray:
        hidden = observed == 0
        out = []
        for c in range(probs.shape[1]):
            pos, neg = hidden[:, c] & truth[:, c], hidden[:, c] & ~truth[:, c]
            out.append(wasserstein_distance(probs[pos, c], probs[neg, c]) if pos.any() and neg.any() else np.nan)
        return np.array(out)

    t_ours, ours = median_time(lambda: unobserved_wasserstein(probs, truth, observed, per_class=True), repeats)
    t_ref, ref = median_time(scipy_per_class, repeats)
    err = float(np.nanmax(np.abs(np.asarray(ours) - ref)))
    ok = err <= 1e-9 and np.array_equal(np.isnan(ours), np.isnan(ref))
    print(
        f"unobserved_wasserstein (per class): spmlkit {t_ours:.3f}s, scipy loop {t_ref:.2f}s, "
        f"speedup {t_ref / t_ours:.1f}x, max |diff| {err:.1e} {'OK' if ok else 'MISMATCH'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40137, help="examples (default: COCO 2014 test size)")
    parser.add_argument("--c", type=int, default=80, help="classes")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (median reported)")
    parser.add_argument("--pos-rate", type=float, default=0.03, help="fraction of positive labels")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    probs = rng.random((args.n, args.c))
    targets = rng.random((args.n, args.c)) < args.pos_rate
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"N = {args.n}, C = {args.c}, {targets.mean():.1%} positives, median of {args.repeats} runs")
    print(f"load average (1/5/15 min) {load} on {os.cpu_count()} CPUs")
    print(AP_HEADER)
    ok = bench_ap("continuous scores", probs, targets, args.repeats)
    ok &= bench_ap("rounded to 3 decimals", np.round(probs, 3), targets, args.repeats)
    heavy_targets = rng.random((args.n, args.c)) < HEAVY_TIES_POS_RATE
    heavy_targets[:, 0] = False  # one class without positives: AP 0
    ok &= bench_ap(
        f"heavy ties: {HEAVY_TIES_DECIMALS} decimals, {heavy_targets.mean():.1%} pos, 1 empty",
        np.round(probs, HEAVY_TIES_DECIMALS),
        heavy_targets,
        args.repeats,
    )
    # single-positive observations: one observed positive per row, everything else unobserved
    observed = np.zeros(targets.shape, dtype=np.int8)
    rows = np.flatnonzero(targets.any(axis=1))
    observed[rows, np.argmax(targets[rows], axis=1)] = 1
    ok &= bench_wasserstein(probs, targets, observed, args.repeats)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
