"""The tabular protocol's random partitions (spmlkit.protocol.random_partition; docs/protocol.md, "The tabular
protocol"): the same rows for the same seed on every machine, sizes by numpy's half-to-even rounding, three
disjoint ascending parts that cover the set."""

from __future__ import annotations

import numpy as np
import pytest

from spmlkit.protocol import random_partition


def test_the_partition_is_the_legacy_generators_permutation_cut_in_three():
    # written from the docstring's recipe with a fresh RandomState, not from the implementation
    perm = np.random.RandomState(7).permutation(20)
    expected = (np.sort(perm[:16]), np.sort(perm[16:18]), np.sort(perm[18:]))
    got = random_partition(20, 7)
    for part, want in zip(got, expected):
        assert part.dtype == np.int64 and part.tolist() == want.tolist()
    # the bytes a machine and a numpy version must give for seed 7 (numpy's legacy stream is frozen)
    assert [p.tolist() for p in got] == [[0, 1, 2, 5, 6, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19], [3, 7], [4, 15]]


@pytest.mark.parametrize("rows, sizes", [(2417, (1933, 242, 242)), (2407, (1925, 241, 241)), (5000, (4000, 500, 500)),
                                         (16091, (12873, 1609, 1609)), (25, (21, 2, 2)), (15, (11, 2, 2))])
def test_sizes_round_half_to_even_and_the_parts_cover_the_set(rows, sizes):
    train, val, test = random_partition(rows, 3)
    assert (len(train), len(val), len(test)) == sizes  # 25 x 0.1 = 2.5 -> 2, 15 x 0.1 = 1.5 -> 2
    joined = np.concatenate([train, val, test])
    assert np.array_equal(np.sort(joined), np.arange(rows))
    assert all(np.all(np.diff(part) > 0) for part in (train, val, test))


def test_each_seed_is_its_own_trial():
    a, b = random_partition(200, 0), random_partition(200, 1)
    assert not np.array_equal(a[2], b[2])
    assert all(np.array_equal(x, y) for x, y in zip(a, random_partition(200, 0)))


def test_shares_that_leave_no_training_row_are_refused_with_the_counts():
    with pytest.raises(ValueError, match=r"val_frac=0.5 and test_frac=0.5 of 4 rows leave no training row "
                                         r"\(2 validation \+ 2 test\)"):
        random_partition(4, 0, val_frac=0.5, test_frac=0.5)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        random_partition(10, -1)


@pytest.mark.parametrize("rows, fracs, empty, least", [(5, (0.1, 0.1), "validation and the test part", 6),
                                                       (4, (0.1, 0.2), "validation part", 6),
                                                       (14, (0.2, 0.03), "test part", 17)])
def test_shares_that_round_a_part_to_no_row_are_refused_with_the_rows_that_fill_it(rows, fracs, empty, least):
    """80/10/10 of 5 rows rounded to 5/0/0, and the run trained, then failed on an empty test list."""
    with pytest.raises(ValueError, match=f"leaves the {empty} empty .*; use at least {least} rows") as caught:
        random_partition(rows, 0, val_frac=fracs[0], test_frac=fracs[1])
    assert [len(p) > 0 for p in random_partition(least, 0, val_frac=fracs[0], test_frac=fracs[1])] == [True] * 3
    assert "5 / 0 / 0 rows" in str(caught.value) or rows != 5
    # a share of 0 asks for an empty part: that is kept as asked
    assert [len(p) for p in random_partition(5, 0, val_frac=0.0, test_frac=0.2)] == [4, 0, 1]
