"""The reference train/val split of an official train list (docs/protocol.md, "Train/val split")."""

from __future__ import annotations

import numpy as np

from ._checks import _check_fraction, _check_int, _check_seed


def split_train_val(
    num_examples: int,
    val_frac: float = 0.2,
    seed: int = 1200,
    *,
    ss_seed: int = 999,
    train_frac: float = 1.0,
    val_sub_frac: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Split the official training list into train and val indices, as the reference does.

    Bit-identical to the reference split (docs/protocol.md, "Train/val split")::

        perm  = RandomState(seed).permutation(N)
        n_val = int(np.round(val_frac * N))          # half-to-even: 0.25 * 10 = 2.5 -> 2
        train = sort(perm[:N - n_val]);  val = sort(perm[N - n_val:])

    followed by the subsampling step: one ``RandomState(ss_seed)`` draws
    ``permutation(len(train))`` and then ``permutation(len(val))``, keeping
    ``int(np.round(frac * m))`` of each (sorted). At fraction 1.0 this is the identity but the
    permutations are still drawn, as in the reference (docs/protocol.md, "Split edge case and
    discarded subsample draws"), so that the val subsample at
    ``val_sub_frac < 1`` does not depend on whether the train fraction was 1.

    ``n_val = 0`` (e.g. ``N = 2``, ``val_frac = 0.2``) gives an empty val set; the reference's
    ``perm[-n_val:]`` would select *everything* there (same section of docs/protocol.md).

    Args:
        num_examples: N, the length of the official training list (file order).
        val_frac: fraction of N held out for validation, in [0, 1).
        seed: split seed (reference 1200).
        ss_seed: subsampling seed (reference 999).
        train_frac, val_sub_frac: fraction of train / val kept by subsampling, in (0, 1].

    Returns:
        ``(train_idx, val_idx)``: ascending, disjoint int64 index arrays into the list.

    Raises:
        ValueError: on bad arguments, or if the split leaves no training example
            (e.g. ``N = 2`` with ``val_frac = 0.75`` rounds to ``n_val = 2``).
    """
    n = _check_int("num_examples", num_examples, minimum=1)
    val_frac = _check_fraction("val_frac", val_frac, low_open=False, high_open=True)
    train_frac = _check_fraction("train_frac", train_frac, low_open=True, high_open=False)
    val_sub_frac = _check_fraction("val_sub_frac", val_sub_frac, low_open=True, high_open=False)
    seed = _check_seed("seed", seed)
    ss_seed = _check_seed("ss_seed", ss_seed)

    perm = np.random.RandomState(seed).permutation(n).astype(np.int64, copy=False)
    n_val = int(np.round(val_frac * n))
    n_train = n - n_val
    if n_train == 0:
        raise ValueError(
            f"val_frac={val_frac} with num_examples={n} puts all {n} examples in val "
            f"(round({val_frac} * {n}) = {n_val}); lower val_frac."
        )
    parts = [np.sort(perm[:n_train]), np.sort(perm[n_train:])]  # perm[n:] is empty, not all

    # Subsampling: the same RandomState draws train's permutation, then val's.
    ss = np.random.RandomState(ss_seed)
    for phase, frac in enumerate((train_frac, val_sub_frac)):
        m = parts[phase].size
        keep = int(np.round(frac * m))
        parts[phase] = parts[phase][np.sort(ss.permutation(m)[:keep])]

    train_idx, val_idx = parts
    if train_idx.size == 0:
        raise ValueError(
            f"train_frac={train_frac} keeps round({train_frac} * {n_train}) = 0 of the "
            f"{n_train} training examples; raise train_frac."
        )
    return train_idx.astype(np.int64, copy=False), val_idx.astype(np.int64, copy=False)


