"""Observed-label simulators: k positives / m negatives per row, and the known-label ratio
(docs/protocol.md, "Observed labels")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ._checks import _SHOW_ROWS, _as_binary_matrix, _as_observed_matrix, _check_fraction, _check_int, _check_seed


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


@dataclass(frozen=True)
class _RowSegments:
    """The True entries of a boolean N x C matrix, row-major, as flat arrays cut per row.

    Row ``i`` owns ``cols[start[i]:start[i + 1]]``, ascending as ``flatnonzero`` gives them,
    so shuffling that slice in place is the reference's ``rng.shuffle`` of the row's index
    array, without building N small arrays. ``cols`` is int64 because the reference
    shuffles int64 index arrays; ``rows[j]`` is the row of entry ``j``.
    """

    rows: np.ndarray
    cols: np.ndarray
    start: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, mask: np.ndarray) -> _RowSegments:
        """The segments of ``mask``'s True entries (the positives of ``truth``, or of ``~truth``)."""
        rows, cols = np.nonzero(mask)  # row-major: grouped by row, columns ascending
        counts = mask.sum(axis=1)
        start = np.zeros(mask.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        return cls(rows, cols.astype(np.int64), start, counts)


def _check_observe_args(
    Y: np.ndarray, num_pos: object, num_neg: object, seed: object, on_empty: object
) -> tuple[np.ndarray, int, int, int]:
    """Validated ``(truth as bool, num_pos, num_neg, seed)``; every error names its argument."""
    truth = _as_binary_matrix(Y)
    num_pos = _check_count("num_pos", num_pos)
    num_neg = _check_count("num_neg", num_neg)
    seed = _check_seed("seed", seed)
    if on_empty not in ("raise", "allow"):
        raise ValueError(f"on_empty must be 'raise' or 'allow', got {on_empty!r}.")
    return truth, num_pos, num_neg, seed


def _refuse_rows_without_positive(pos_count: np.ndarray) -> None:
    """Raise for rows with no true positive: no positive can be observed there."""
    empty = np.flatnonzero(pos_count == 0)
    if empty.size:
        shown = ", ".join(str(int(r)) for r in empty[:_SHOW_ROWS])
        more = " ..." if empty.size > _SHOW_ROWS else ""
        raise ValueError(
            f"{empty.size} of {pos_count.size} rows of Y have no positive label, so no positive "
            f"can be observed there (rows {shown}{more}). Drop those rows, or pass "
            "on_empty='allow' to leave them without an observed positive (what the "
            "reference code does, e.g. on CUB)."
        )


def _draws_matter(k: int, counts: np.ndarray) -> bool:
    """Whether keeping ``k`` per row makes some row choose a strict subset of its entries.

    If not, the output is the same for every random stream and the shuffles can be skipped.
    """
    return k > 0 and bool((counts > k).any())


def _shuffle_rows(positives: _RowSegments, negatives: _RowSegments, seed: int) -> None:
    """Shuffle every row's positives, then its negatives, in place, row by row (the order of
    docs/protocol.md, "Observed labels").

    Lengths 0 and 1 are skipped because Fisher-Yates makes no draw for them; the order of
    the remaining calls is the reference's, so the stream is consumed identically.
    """
    shuffle = np.random.RandomState(seed).shuffle
    bounds = zip(
        positives.start[:-1].tolist(),
        positives.start[1:].tolist(),
        negatives.start[:-1].tolist(),
        negatives.start[1:].tolist(),
    )
    for p0, p1, n0, n1 in bounds:
        if p1 - p0 > 1:
            shuffle(positives.cols[p0:p1])  # in place on the view
        if n1 - n0 > 1:
            shuffle(negatives.cols[n0:n1])


def _observed_matrix(
    positives: _RowSegments, negatives: _RowSegments, num_pos: int, num_neg: int, shape: tuple[int, int]
) -> np.ndarray:
    """+1 at the first ``num_pos`` (shuffled) positives of each row, -1 at its first ``num_neg`` negatives."""
    observed = np.zeros(shape, dtype=np.int8)
    for segments, k, value in ((positives, num_pos, 1), (negatives, num_neg, -1)):
        keep = _first_k_in_segments(segments.rows, segments.start, k)
        observed[segments.rows[keep], segments.cols[keep]] = value
    return observed


def observe_labels(
    Y: np.ndarray,
    num_pos: int = 1,
    num_neg: int = 0,
    seed: int = 1200,
    *,
    on_empty: Literal["raise", "allow"] = "raise",
) -> np.ndarray:
    """Simulate observed labels by keeping ``num_pos`` positives and ``num_neg`` negatives per row.

    Bit-identical to the reference generator (docs/protocol.md, "Observed labels"): with a fresh
    ``rng = RandomState(seed)`` and ``T = 2Y - 1``, for every row ``i`` in order::

        pos = flatnonzero(T[i] == +1); rng.shuffle(pos); O[i, pos[:num_pos]] = +1
        neg = flatnonzero(T[i] == -1); rng.shuffle(neg); O[i, neg[:num_neg]] = -1

    The negative shuffle runs even when ``num_neg == 0``: it consumes random numbers
    (``len - 1`` bounded draws), so skipping it would change the positive chosen in every
    later row (docs/protocol.md, "Observation draws that are made and thrown away"). The
    defaults (1, 0, 1200) give the SPML regime of the published papers; call it once per phase on the whole official train list *before* the split.

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
    truth, num_pos, num_neg, seed = _check_observe_args(Y, num_pos, num_neg, seed, on_empty)
    positives = _RowSegments.of(truth)
    if num_pos != 0 and on_empty == "raise":
        _refuse_rows_without_positive(positives.counts)
    negatives = _RowSegments.of(~truth)
    if _draws_matter(num_pos, positives.counts) or _draws_matter(num_neg, negatives.counts):
        _shuffle_rows(positives, negatives, seed)
    return _observed_matrix(positives, negatives, num_pos, num_neg, truth.shape)


def observe_ratio(Y: np.ndarray, known_ratio: float, seed: int = 0) -> np.ndarray:
    """Keep each entry of ``2Y - 1`` independently with probability ``known_ratio``.

    The known-label-ratio protocol of PU-MLC and the SST/SARB line (docs/protocol.md, "Known-label ratio")::

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

