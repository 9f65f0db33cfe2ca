"""Observed-label simulators: k positives / m negatives per row, and the known-label ratio
(docs/protocol.md, "Observed labels")."""

from __future__ import annotations

from typing import Literal

import numpy as np

from ._checks import _SHOW_ROWS, _as_binary_matrix, _as_observed_matrix, _check_fraction, _check_int, _check_seed  # noqa: F401


def _check_count(name: str, value: object) -> int:
    value = _check_int(name, value)
    if value < -1:
        raise ValueError(f"{name} must be -1 (all) or >= 0, got {value}.")
    return value


def _first_k_in_segments(rows: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    """Mask of entries that are among the first ``k`` of their row's segment (k=-1: all)."""
    if k == -1:
        return np.ones(rows.size, dtype=bool)
    rank = np.arange(rows.size) - starts[rows]
    return rank < k


def observe_labels(
    Y: np.ndarray,
    num_pos: int = 1,
    num_neg: int = 0,
    seed: int = 1200,
    *,
    on_empty: Literal["raise", "allow"] = "raise",
) -> np.ndarray:
    """Simulate observed labels by keeping ``num_pos`` positives and ``num_neg`` negatives per row.

    Bit-identical to the reference generator (REFERENCE.md B.7): with a fresh
    ``rng = RandomState(seed)`` and ``T = 2Y - 1``, for every row ``i`` in order::

        pos = flatnonzero(T[i] == +1); rng.shuffle(pos); O[i, pos[:num_pos]] = +1
        neg = flatnonzero(T[i] == -1); rng.shuffle(neg); O[i, neg[:num_neg]] = -1

    The negative shuffle runs even when ``num_neg == 0``: it consumes random numbers
    (``len - 1`` bounded draws), so skipping it would change the positive chosen in every
    later row (G-4). The defaults (1, 0, 1200) give the SPML regime of the published papers;
    call it once per phase on the whole official train list *before* the split.

    Counts: ``-1`` means "all" (handled explicitly; the reference's slice ``[:-1]`` would drop
    the last index); ``0`` means none (for ``num_pos`` this gives a negatives-only regime,
    our choice, the reference never uses it); a count above a row's supply keeps the whole
    supply. ``num_pos = num_neg = -1`` returns the full labels ``2Y - 1``.

    The reference asserts that ``2Y - 1`` contains both -1 and +1. That check is not needed
    here: an all-negative matrix is caught by the empty-row check below, and an all-positive
    one is a valid (if odd) input.

    Implementation: the shuffles act on slices of two flat index arrays (all positives, all
    negatives, row-major, hence each row's indices ascending as ``flatnonzero`` gives them),
    and shuffles of length 0 or 1 are skipped because they consume no draws. The draws are
    numpy's own ``RandomState.shuffle``, so the stream is the reference's by construction;
    only the Python overhead per row shrinks (COCO, 82,081 x 80: about a second).

    Args:
        Y: ground truth, N x C, entries 0/1 (bool, int or float).
        num_pos: positives kept per row (-1 all, 0 none).
        num_neg: negatives kept per row (-1 all, 0 none).
        seed: seed of the fresh ``RandomState`` (reference 1200).
        on_empty: what to do with rows that have no true positive when ``num_pos != 0``:
            ``"raise"`` (default) refuses them, ``"allow"`` leaves them without an observed
            positive, as the reference silently does on CUB.

    Returns:
        int8 matrix N x C with entries in {-1, 0, +1}.
    """
    truth = _as_binary_matrix(Y)
    num_pos = _check_count("num_pos", num_pos)
    num_neg = _check_count("num_neg", num_neg)
    seed = _check_seed("seed", seed)
    if on_empty not in ("raise", "allow"):
        raise ValueError(f"on_empty must be 'raise' or 'allow', got {on_empty!r}.")

    n_rows, n_classes = truth.shape
    pos_count = truth.sum(axis=1)
    neg_count = n_classes - pos_count

    if num_pos != 0 and on_empty == "raise":
        empty = np.flatnonzero(pos_count == 0)
        if empty.size:
            shown = ", ".join(str(int(r)) for r in empty[:_SHOW_ROWS])
            more = " ..." if empty.size > _SHOW_ROWS else ""
            raise ValueError(
                f"{empty.size} of {n_rows} rows of Y have no positive label, so no positive "
                f"can be observed there (rows {shown}{more}). Drop those rows, or pass "
                "on_empty='allow' to leave them without an observed positive (what the "
                "reference code does, e.g. on CUB)."
            )

    # Row-major nonzero: entries grouped by row, columns ascending within a row.
    pos_rows, pos_cols = np.nonzero(truth)
    neg_rows, neg_cols = np.nonzero(~truth)
    pos_cols = pos_cols.astype(np.int64)  # the reference shuffles int64 index arrays
    neg_cols = neg_cols.astype(np.int64)
    pos_start = np.zeros(n_rows + 1, dtype=np.int64)
    neg_start = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(pos_count, out=pos_start[1:])
    np.cumsum(neg_count, out=neg_start[1:])

    # The draws only matter if some row has to choose a strict subset; otherwise the output
    # is the same for every stream and the loop can be skipped.
    def _chooses(k: int, counts: np.ndarray) -> bool:
        return k > 0 and bool((counts > k).any())

    if _chooses(num_pos, pos_count) or _chooses(num_neg, neg_count):
        shuffle = np.random.RandomState(seed).shuffle
        bounds = zip(
            pos_start[:-1].tolist(),
            pos_start[1:].tolist(),
            neg_start[:-1].tolist(),
            neg_start[1:].tolist(),
        )
        for p0, p1, n0, n1 in bounds:
            if p1 - p0 > 1:  # length 0 or 1: Fisher-Yates makes no draw
                shuffle(pos_cols[p0:p1])  # in place on the view
            if n1 - n0 > 1:
                shuffle(neg_cols[n0:n1])

    observed = np.zeros((n_rows, n_classes), dtype=np.int8)
    keep = _first_k_in_segments(pos_rows, pos_start, num_pos)
    observed[pos_rows[keep], pos_cols[keep]] = 1
    keep = _first_k_in_segments(neg_rows, neg_start, num_neg)
    observed[neg_rows[keep], neg_cols[keep]] = -1
    return observed


def observe_ratio(Y: np.ndarray, known_ratio: float, seed: int = 0) -> np.ndarray:
    """Keep each entry of ``2Y - 1`` independently with probability ``known_ratio``.

    The known-label-ratio protocol of PU-MLC and the SST/SARB line (REFERENCE.md B.8)::

        mask  = RandomState(seed).random_sample(Y.shape) < known_ratio
        Y_obs = mask * (2Y - 1)

    The reference calls ``np.random.seed(0); np.random.random(shape)`` on the global RNG; a
    fresh ``RandomState(0)`` produces the identical stream without touching global state.

    Because the same uniforms are used for every ratio, the masks are *nested*: an entry kept
    at ratio r1 is kept at every r2 > r1. The protocol keeps positives *and* negatives;
    PU-MLC then trains on the kept positives only and ignores kept negatives (use
    ``np.maximum(Y_obs, 0)`` for that view). Rows may end up without any kept positive.

    Args:
        Y: ground truth, N x C, entries 0/1.
        known_ratio: probability of keeping an entry, in (0, 1]; 1 gives the full labels.
        seed: seed of the fresh ``RandomState`` (reference 0).

    Returns:
        int8 matrix N x C with entries in {-1, 0, +1}.
    """
    truth = _as_binary_matrix(Y)
    known_ratio = _check_fraction("known_ratio", known_ratio, low_open=True, high_open=False)
    seed = _check_seed("seed", seed)
    mask = np.random.RandomState(seed).random_sample(truth.shape) < known_ratio
    signed = np.where(truth, np.int8(1), np.int8(-1))
    return np.where(mask, signed, np.int8(0)).astype(np.int8, copy=False)


def observed_summary(O: np.ndarray) -> dict[str, int]:
    """Count what an observed matrix contains.

    Returns a dict of Python ints: ``rows``, ``classes``, ``positives`` (+1 entries),
    ``negatives`` (-1 entries), ``unobserved`` (0 entries) and ``rows_without_positive``
    (rows with no +1, which a positive-only loss cannot learn a positive from).
    """
    obs = _as_observed_matrix(O)
    is_pos = obs == 1
    return {
        "rows": int(obs.shape[0]),
        "classes": int(obs.shape[1]),
        "positives": int(is_pos.sum()),
        "negatives": int((obs == -1).sum()),
        "unobserved": int((obs == 0).sum()),
        "rows_without_positive": int((~is_pos.any(axis=1)).sum()),
    }

