"""Random train/validation/test partitions of a whole data set (docs/protocol.md, "The tabular protocol").

The papers that evaluate single-positive learning on MULAN-style tables (SMILE, NeurIPS 2022;
CRISP, arXiv 2309.13886) do not use the data sets' official train/test lists: each trial draws
a fresh random partition of every row into 80 % training, 10 % validation and 10 % test, and the
reported numbers are means and standard deviations over trials. Their partitions were never
published, so spmlkit cannot repeat theirs; what it promises instead is that its own are the
same bytes for the same seed on every machine and numpy version, so that two spmlkit users (or
one, a year later) compare on identical rows. That is why the draw goes through numpy's legacy
:class:`numpy.random.RandomState` (its stream is frozen by numpy's compatibility promise, as for
the reference split, :mod:`spmlkit.protocol.split`) and why the sizes are fixed by a rounding
rule rather than by how many rows a draw happens to hit.
"""

from __future__ import annotations

import itertools

import numpy as np

from ._checks import _check_fraction, _check_int, _check_seed

__all__ = ["random_partition", "PAPER_FRACTIONS"]

#: the papers' (train, validation, test) shares of the whole set
PAPER_FRACTIONS = (0.8, 0.1, 0.1)


def random_partition(num_examples: int, seed: int, *, val_frac: float = 0.1,
                     test_frac: float = 0.1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split rows ``0 .. N-1`` into train, validation and test indices, bit-exact from ``seed``::

        perm   = RandomState(seed).permutation(N)
        n_val  = int(np.round(val_frac * N));  n_test = int(np.round(test_frac * N))
        train  = sort(perm[:N - n_val - n_test])
        val    = sort(perm[N - n_val - n_test : N - n_test])
        test   = sort(perm[N - n_test:])

    ``np.round`` rounds halves to even (Yeast, N = 2,417: 1,933 / 242 / 242). Each part is in
    ascending row order, so a part's rows keep the order of the file they came from.

    Args:
        num_examples: N, the rows of the whole set.
        seed: the trial's seed, in [0, 2**32 - 1].
        val_frac, test_frac: shares of N for validation and test, each in [0, 1), together < 1.

    Returns:
        ``(train, val, test)``: disjoint, ascending int64 arrays covering ``0 .. N-1``.

    Raises:
        ValueError: on bad arguments, or when the shares leave a part empty: no training row, or
            no validation or test row where its share is above 0 (5 rows at 80/10/10 round to
            5/0/0; a run would train, then fail to select an epoch or score a test list of none).
    """
    n = _check_int("num_examples", num_examples, minimum=1)
    seed = _check_seed("seed", seed)
    val_frac = _check_fraction("val_frac", val_frac, low_open=False, high_open=True)
    test_frac = _check_fraction("test_frac", test_frac, low_open=False, high_open=True)
    n_val, n_test = int(np.round(val_frac * n)), int(np.round(test_frac * n))
    n_train = n - n_val - n_test
    if n_train < 1:
        raise ValueError(f"val_frac={val_frac} and test_frac={test_frac} of {n} rows leave no training row "
                         f"({n_val} validation + {n_test} test); lower the fractions or use more rows.")
    empty = [part for part, frac, rows in (("validation", val_frac, n_val), ("test", test_frac, n_test))
             if frac > 0 and rows == 0]
    if empty:
        least = next(m for m in itertools.count(n + 1) if _parts_filled(m, val_frac, test_frac))
        raise ValueError(f"a partition of {n} rows into {100 * (1 - val_frac - test_frac):g} / {100 * val_frac:g} / "
                         f"{100 * test_frac:g} % leaves the {' and the '.join(empty)} part empty ({n_train} / {n_val} / "
                         f"{n_test} rows); use at least {least} rows (subset) or larger shares")
    perm = np.random.RandomState(seed).permutation(n).astype(np.int64, copy=False)
    return (np.sort(perm[:n_train]), np.sort(perm[n_train:n_train + n_val]), np.sort(perm[n_train + n_val:]))


def _parts_filled(n: int, val_frac: float, test_frac: float) -> bool:
    """Whether ``n`` rows give every part with a share above 0 at least one row (the rounding above)."""
    n_val, n_test = int(np.round(val_frac * n)), int(np.round(test_frac * n))
    return n - n_val - n_test >= 1 and (n_val >= 1 or val_frac == 0) and (n_test >= 1 or test_frac == 0)
