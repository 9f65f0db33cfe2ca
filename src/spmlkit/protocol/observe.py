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


@dataclass(frozen=True)
class _RowSegments:
    """One side (positives or negatives) of every row of a boolean N x C matrix, as slices.

    Row ``i`` owns ``cols[lo[i]:hi[i]]``. When the side's draws decide what is kept (:meth:`of`),
    ``cols`` holds the row's column indices, ascending as ``flatnonzero`` gives them, so shuffling
    that slice in place is the reference's ``rng.shuffle`` of the row's index array, without
    building N small arrays; it is int64 because the reference shuffles int64 index arrays.
    When they do not (:meth:`blank`: none kept, all kept, or no row has more than the count),
    the shuffles must still run, for the draws they consume, but what they shuffle is never
    read: every row shuffles the start of one small buffer of its length. ``RandomState.shuffle``
    of a one-dimensional array makes the same draws for every array of the same length (it
    draws positions, then swaps bytes), so the stream is the reference's either way, and the
    ten million negative indices of a 983-label set are never written down.
    """

    cols: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def of(cls, mask: np.ndarray) -> _RowSegments:
        """The column indices of ``mask``'s True entries, cut per row."""
        cols = np.nonzero(mask)[1].astype(np.int64, copy=False)  # row-major: columns ascending per row
        start = np.zeros(mask.shape[0] + 1, dtype=np.int64)
        np.cumsum(mask.sum(axis=1), out=start[1:])
        return cls(cols, start[:-1], start[1:])

    @classmethod
    def blank(cls, counts: np.ndarray) -> _RowSegments:
        """Slices of the right lengths (``counts``) into one scratch buffer."""
        longest = int(counts.max(initial=0))
        return cls(np.arange(longest, dtype=np.int64), np.zeros_like(counts), counts)

    def first(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, columns) of the first ``k`` entries of every row's slice (``of`` only)."""
        keep = np.minimum(self.hi - self.lo, k)
        rows = np.repeat(np.arange(keep.size), keep)
        skip = np.repeat(self.lo - (np.cumsum(keep) - keep), keep)  # slice start less entries before it
        return rows, self.cols[np.arange(rows.size) + skip]


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
    pos, neg = positives.cols, negatives.cols
    bounds = zip(positives.lo.tolist(), positives.hi.tolist(), negatives.lo.tolist(), negatives.hi.tolist())
    for p0, p1, n0, n1 in bounds:
        if p1 - p0 > 1:
            shuffle(pos[p0:p1])  # in place on the view
        if n1 - n0 > 1:
            shuffle(neg[n0:n1])


def _side(side: np.ndarray, counts: np.ndarray, k: int) -> _RowSegments:
    """A side's segments: its column indices when its draws decide what is kept, else a blank."""
    return _RowSegments.of(side) if _draws_matter(k, counts) else _RowSegments.blank(counts)


def _observed_matrix(
    truth: np.ndarray, positives: _RowSegments, negatives: _RowSegments, num_pos: int, num_neg: int
) -> np.ndarray:
    """+1 at the first ``num_pos`` (shuffled) positives of each row, -1 at its first ``num_neg`` negatives."""
    observed = np.zeros(truth.shape, dtype=np.int8)
    for is_side, segments, k, value in ((truth, positives, num_pos, 1), (~truth, negatives, num_neg, -1)):
        if k == 0:
            continue
        if k == -1 or not _draws_matter(k, segments.hi - segments.lo):  # every entry of the side is kept
            observed[is_side] = value
        else:
            observed[segments.first(k)] = value
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
    and shuffles of length 0 or 1 are skipped because they consume no draws. A side whose
    draws decide nothing (the negatives when ``num_neg`` is 0 or -1) shuffles a small scratch
    buffer of each row's length instead: the same draws, without an index array of every
    negative. The draws are numpy's own ``RandomState.shuffle``, so the stream is the
    reference's by construction; only the Python overhead per row shrinks (COCO, 82,081 x 80:
    about a second).

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
    pos_count = truth.sum(axis=1)
    if num_pos != 0 and on_empty == "raise":
        _refuse_rows_without_positive(pos_count)
    neg_count = truth.shape[1] - pos_count
    if _draws_matter(num_pos, pos_count) or _draws_matter(num_neg, neg_count):
        positives, negatives = _side(truth, pos_count, num_pos), _side(~truth, neg_count, num_neg)
        _shuffle_rows(positives, negatives, seed)
    else:  # the same rows for every random stream: nothing to draw
        positives, negatives = _RowSegments.blank(pos_count), _RowSegments.blank(neg_count)
    return _observed_matrix(truth, positives, negatives, num_pos, num_neg)


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

