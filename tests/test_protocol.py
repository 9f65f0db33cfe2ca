"""Tests for spmlkit.protocol: reference split and observation simulators.

See docs/protocol.md, "Train/val split", "Observed labels" and "Known-label ratio".

Every value is checked against a plain re-implementation written here from the reference
pseudo-code (numpy legacy RandomState, explicit loops), or against literals produced once by
that re-implementation (regression pins).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spmlkit.protocol import observe_labels, observe_ratio, observed_summary, split_train_val

# --------------------------------------------------------------------------- reference loops


def reference_split(n, val_frac=0.2, seed=1200, ss_seed=999, fracs=(1.0, 1.0)):
    """docs/protocol.md, "Train/val split", written out literally (with the n_val = 0 guard)."""
    rng = np.random.RandomState(seed)
    perm = rng.permutation(n)
    n_val = int(np.round(val_frac * n))
    n_tr = n - n_val
    idx = {"train": np.sort(perm[:n_tr]), "val": np.sort(perm[n_tr:]) if n_val > 0 else perm[:0]}
    ss = np.random.RandomState(ss_seed)
    for phase, frac in zip(("train", "val"), fracs):
        m = len(idx[phase])
        m2 = int(np.round(frac * m))
        idx[phase] = idx[phase][np.sort(ss.permutation(m)[:m2])]
    return idx["train"], idx["val"]


def reference_observe(Y, n_pos=1, n_neg=0, seed=1200, skip_negative_shuffle=False):
    """docs/protocol.md, "Observed labels", written out literally; -1 means all (mapped to a
    large slice bound)."""
    rng = np.random.RandomState(seed)
    truth = 2 * np.asarray(Y, dtype=np.float64) - 1
    out = np.zeros(truth.shape, dtype=np.int64)
    kp = truth.shape[1] + 1 if n_pos == -1 else n_pos
    kn = truth.shape[1] + 1 if n_neg == -1 else n_neg
    for i in range(truth.shape[0]):
        pos = np.flatnonzero(truth[i] == 1)
        rng.shuffle(pos)
        out[i, pos[:kp]] = 1
        neg = np.flatnonzero(truth[i] == -1)
        if not skip_negative_shuffle:
            rng.shuffle(neg)
        out[i, neg[:kn]] = -1
    return out


# --------------------------------------------------------------------------- split


@pytest.mark.parametrize(
    "n, val_frac",
    [(10, 0.2), (10, 0.25), (6, 0.25), (14, 0.25), (1, 0.2), (37, 0.3), (1000, 0.2), (5, 0.0)],
)
def test_split_matches_reference(n, val_frac):
    train, val = split_train_val(n, val_frac)
    ref_train, ref_val = reference_split(n, val_frac)
    np.testing.assert_array_equal(train, ref_train)
    np.testing.assert_array_equal(val, ref_val)
    assert train.dtype == np.int64 and val.dtype == np.int64
    assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)
    assert np.intersect1d(train, val).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val])), np.arange(n))


@pytest.mark.parametrize(
    "n, val_frac, n_val",
    # half-to-even: 2.5 -> 2, 1.5 -> 2, 3.5 -> 4, 0.4 -> 0, 0.2 -> 0
    [(10, 0.25, 2), (6, 0.25, 2), (14, 0.25, 4), (2, 0.2, 0), (1, 0.2, 0), (10, 0.2, 2)],
)
def test_split_sizes_round_half_to_even(n, val_frac, n_val):
    train, val = split_train_val(n, val_frac)
    assert val.size == n_val
    assert train.size == n - n_val


def test_split_pinned_values():
    # Produced once by reference_split; pins the published seed 1200 / 999 behaviour.
    train, val = split_train_val(10)
    assert train.tolist() == [0, 1, 2, 4, 5, 6, 8, 9]
    assert val.tolist() == [3, 7]
    train, val = split_train_val(20, train_frac=0.5, val_sub_frac=0.5)
    assert train.tolist() == [3, 5, 8, 9, 12, 14, 16, 18]
    assert val.tolist() == [0, 19]


@pytest.mark.parametrize(
    "n, n_train, n_val",
    [(5717, 4574, 1143), (82081, 65665, 16416), (5994, 4795, 1199), (150000, 120000, 30000)],
)
def test_split_dataset_sizes(n, n_train, n_val):
    # VOC, COCO, CUB, NUS-WIDE (docs/protocol.md, "Train/val split" and "Datasets").
    train, val = split_train_val(n)
    assert (train.size, val.size) == (n_train, n_val)


def test_split_n_val_zero_gives_empty_val():
    # round(0.2 * 2) = round(0.4) = 0; the reference's perm[-0:] would take everything.
    train, val = split_train_val(2, 0.2)
    assert train.tolist() == [0, 1]
    assert val.size == 0 and val.dtype == np.int64


@pytest.mark.parametrize("fracs", [(0.5, 1.0), (1.0, 0.5), (0.3, 0.7), (0.01, 0.01)])
def test_split_subsampling_matches_reference(fracs):
    train, val = split_train_val(500, train_frac=fracs[0], val_sub_frac=fracs[1])
    ref_train, ref_val = reference_split(500, fracs=fracs)
    np.testing.assert_array_equal(train, ref_train)
    np.testing.assert_array_equal(val, ref_val)
    assert train.size == int(np.round(fracs[0] * 400))
    assert val.size == int(np.round(fracs[1] * 100))


def test_split_val_subsample_depends_on_train_permutation_draw():
    # The train permutation is drawn even at train_frac = 1.0, which shifts val's draw.
    _, val = split_train_val(20, val_sub_frac=0.5)
    perm = np.random.RandomState(1200).permutation(20)
    full_val = np.sort(perm[16:])
    without_train_draw = full_val[np.sort(np.random.RandomState(999).permutation(4)[:2])]
    assert val.tolist() == [0, 19]
    assert without_train_draw.tolist() != val.tolist()


def test_split_other_seed_changes_result():
    a, _ = split_train_val(50, seed=1200)
    b, _ = split_train_val(50, seed=1201)
    ref_b, _ = reference_split(50, seed=1201)
    np.testing.assert_array_equal(b, ref_b)
    assert a.tolist() != b.tolist()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_examples": 0}, "num_examples must be >= 1"),
        ({"num_examples": 3.0}, "num_examples must be an integer"),
        ({"num_examples": True}, "num_examples must be an integer"),
        ({"num_examples": 10, "val_frac": 1.0}, r"val_frac must lie in \[0, 1\)"),
        ({"num_examples": 10, "val_frac": -0.1}, "val_frac"),
        ({"num_examples": 10, "val_frac": float("nan")}, "val_frac"),
        ({"num_examples": 10, "train_frac": 0.0}, r"train_frac must lie in \(0, 1\]"),
        ({"num_examples": 10, "val_sub_frac": 1.5}, "val_sub_frac"),
        ({"num_examples": 10, "seed": -1}, "seed"),
        ({"num_examples": 10, "ss_seed": 2**32}, "ss_seed"),
        ({"num_examples": 2, "val_frac": 0.75}, "all 2 examples in val"),
        ({"num_examples": 3, "train_frac": 0.1}, "keeps round"),
    ],
)
def test_split_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        split_train_val(**kwargs)


# --------------------------------------------------------------------------- observe_labels

Y45 = np.array(
    [
        [1, 1, 0, 1, 0],
        [0, 0, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [0, 1, 0, 1, 1],
    ]
)

Y68 = np.array(
    [
        [1, 1, 1, 0, 0, 0, 0, 0],
        [0, 1, 0, 1, 0, 1, 0, 1],
        [1, 0, 0, 0, 0, 0, 0, 1],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 1, 0, 1],
    ]
)

COUNTS = [(1, 0), (2, 0), (1, 1), (2, 2), (1, 3), (3, 1), (-1, 0), (1, -1), (0, 2), (0, -1)]


@pytest.mark.parametrize("num_pos, num_neg", COUNTS)
def test_observe_labels_matches_reference_loop_4x5(num_pos, num_neg):
    out = observe_labels(Y45, num_pos, num_neg)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, reference_observe(Y45, num_pos, num_neg))


@pytest.mark.parametrize("seed", [0, 1, 1200, 2**32 - 1])
@pytest.mark.parametrize("num_pos, num_neg", COUNTS)
def test_observe_labels_matches_reference_loop_random(num_pos, num_neg, seed):
    rs = np.random.RandomState(7)
    Y = (rs.random_sample((120, 11)) < 0.3).astype(np.float32)
    Y[np.arange(120), rs.randint(0, 11, size=120)] = 1  # every row has a positive
    out = observe_labels(Y, num_pos, num_neg, seed=seed)
    np.testing.assert_array_equal(out, reference_observe(Y, num_pos, num_neg, seed=seed))


@pytest.mark.parametrize("num_pos, num_neg", [(1, 0), (3, 0), (-1, 0), (1, -1), (-1, 2), (0, 5), (40, 0)])
def test_observe_labels_matches_reference_loop_wide(num_pos, num_neg):
    # many labels, few positives (the shape of a 983-label set): the side whose draws decide
    # nothing shuffles a scratch buffer, which must consume the stream as the index arrays do;
    # (40, 0): no row has more than 40 positives, so no draw decides anything and none is made
    rs = np.random.RandomState(3)
    Y = rs.random_sample((60, 300)) < rs.uniform(0.0, 0.1, size=(60, 1))
    Y[np.arange(60), rs.randint(0, 300, size=60)] = True
    out = observe_labels(Y, num_pos, num_neg, seed=1200)
    np.testing.assert_array_equal(out, reference_observe(Y, num_pos, num_neg))


def test_observe_labels_pinned_spml_default():
    # Produced once by reference_observe(Y68) with seed 1200 (regression pin).
    expected = [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 1, 0, 0, 0],
    ]
    assert observe_labels(Y68).tolist() == expected


def test_observe_labels_pinned_two_pos_two_neg():
    # Produced once by reference_observe(Y68, 2, 2) with seed 1200 (regression pin).
    expected = [
        [1, 0, 1, 0, 0, 0, -1, -1],
        [-1, 0, 0, 0, 0, 1, -1, 1],
        [1, -1, 0, 0, 0, 0, -1, 1],
        [0, 0, 1, 1, 0, -1, 0, -1],
        [0, 0, -1, 1, 0, 1, -1, 0],
        [0, 0, -1, 0, 1, 1, -1, 0],
    ]
    assert observe_labels(Y68, 2, 2).tolist() == expected


def test_observe_labels_negative_shuffle_is_always_drawn():
    # Rows 0 and 1 have 5 negatives each (4 draws per shuffle) that num_neg = 0 discards;
    # row 2 has 6 positives, so the positive it gets depends on those draws.
    Y = np.array([[1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    out = observe_labels(Y)
    always = reference_observe(Y)
    skipping = reference_observe(Y, skip_negative_shuffle=True)
    np.testing.assert_array_equal(out, always)
    assert out[2].tolist() == [1, 0, 0, 0, 0, 0]  # pinned from the always-shuffle loop
    assert skipping[2].tolist() == [0, 0, 0, 0, 1, 0]  # what skipping would have given
    assert out[2].tolist() != skipping[2].tolist()


def test_observe_labels_all_counts():
    expected_full = 2 * Y68 - 1
    np.testing.assert_array_equal(observe_labels(Y68, -1, -1), expected_full)
    # All positives, no negatives: the positive part of 2Y - 1.
    np.testing.assert_array_equal(observe_labels(Y68, -1, 0), Y68)
    # "1P + all N": every true negative is -1 and exactly one true positive is +1.
    out = observe_labels(Y68, 1, -1)
    np.testing.assert_array_equal(out == -1, Y68 == 0)
    assert ((out == 1).sum(axis=1) == 1).all()
    assert (Y68[out == 1] == 1).all()
    # -1 is "all", not the slice [:-1] that drops the last index.
    assert (observe_labels(Y68, -1, 0) == 1).sum() == Y68.sum()
    # A count above a row's supply keeps the whole supply.
    np.testing.assert_array_equal(observe_labels(Y68, 8, 8), expected_full)


def test_observe_labels_num_pos_zero_means_no_positive():
    out = observe_labels(Y68, 0, 1)
    assert (out == 1).sum() == 0
    assert ((out == -1).sum(axis=1) == 1).all()
    np.testing.assert_array_equal(out, reference_observe(Y68, 0, 1))


def test_observe_labels_row_counts_and_consistency():
    out = observe_labels(Y68, 2, 3)
    n_pos = Y68.sum(axis=1)
    n_neg = Y68.shape[1] - n_pos
    np.testing.assert_array_equal((out == 1).sum(axis=1), np.minimum(n_pos, 2))
    np.testing.assert_array_equal((out == -1).sum(axis=1), np.minimum(n_neg, 3))
    assert (Y68[out == 1] == 1).all() and (Y68[out == -1] == 0).all()


def test_observe_labels_accepts_bool_int_float_and_lists():
    ref = observe_labels(Y68, 2, 1)
    for variant in (Y68.astype(bool), Y68.astype(np.int8), Y68.astype(np.float64), Y68.tolist()):
        np.testing.assert_array_equal(observe_labels(variant, 2, 1), ref)
    np.testing.assert_array_equal(observe_labels(np.asfortranarray(Y68), 2, 1), ref)


def test_observe_labels_does_not_touch_global_rng_or_input():
    np.random.seed(5)
    before = np.random.random_sample(3)
    np.random.seed(5)
    Y = Y68.copy()
    observe_labels(Y, 2, 2)
    np.testing.assert_array_equal(np.random.random_sample(3), before)
    np.testing.assert_array_equal(Y, Y68)


def test_observe_labels_rows_without_positive():
    Y = Y45.copy()
    Y[1] = 0
    Y[3] = 0
    with pytest.raises(ValueError, match=r"2 of 4 rows .* \(rows 1, 3\).*on_empty='allow'"):
        observe_labels(Y)
    out = observe_labels(Y, on_empty="allow")
    np.testing.assert_array_equal(out, reference_observe(Y))
    assert (out[[1, 3]] == 0).all()
    # num_pos = 0 needs no positive, so no error.
    np.testing.assert_array_equal(observe_labels(Y, 0, 1), reference_observe(Y, 0, 1))


def test_observe_labels_many_empty_rows_message_is_truncated():
    Y = np.zeros((15, 3))
    Y[0, 0] = 1
    expected = r"14 of 15 rows .*rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 \.\.\."
    with pytest.raises(ValueError, match=expected):
        observe_labels(Y)


def test_observe_labels_all_positive_matrix_is_fine():
    # The reference asserts both signs occur; here an all-positive matrix is valid.
    Y = np.ones((3, 4))
    out = observe_labels(Y, 1, 1)
    np.testing.assert_array_equal(out, reference_observe(Y, 1, 1))
    assert ((out == 1).sum(axis=1) == 1).all()


@pytest.mark.parametrize(
    "Y, kwargs, match",
    [
        (np.ones(4), {}, "must be a 2-D label matrix"),
        (np.array([[1, 0], [0, 2]]), {}, r"found 2 at row 1, column 1 \(1 bad"),
        (np.array([[1, -1], [1, 0]]), {}, r"row 0, column 1.*\(Y \+ 1\) // 2"),
        (np.array([[1.0, np.nan]]), {}, r"nan at row 0, column 1"),
        (np.array([["a", "b"]]), {}, "dtype"),
        (Y45, {"num_pos": -2}, r"num_pos must be -1 \(all\) or >= 0"),
        (Y45, {"num_neg": -3}, "num_neg"),
        (Y45, {"num_pos": 1.5}, "num_pos must be an integer"),
        (Y45, {"seed": -1}, "seed"),
        (Y45, {"on_empty": "skip"}, "on_empty must be 'raise' or 'allow'"),
    ],
)
def test_observe_labels_errors(Y, kwargs, match):
    with pytest.raises(ValueError, match=match):
        observe_labels(Y, **kwargs)


# --------------------------------------------------------------------------- observe_ratio


def test_observe_ratio_matches_elementwise_reference():
    rs = np.random.RandomState(3)
    Y = (rs.random_sample((7, 9)) < 0.4).astype(int)
    u = np.random.RandomState(0).random_sample((7, 9))
    for ratio in (0.1, 0.5, 0.9):
        out = observe_ratio(Y, ratio)
        assert out.dtype == np.int8
        for i in range(7):
            for j in range(9):
                expected = (2 * Y[i, j] - 1) if u[i, j] < ratio else 0
                assert out[i, j] == expected


def test_observe_ratio_equals_global_seed_protocol():
    # The reference: np.random.seed(0); np.random.random(shape). Saved and restored here.
    Y = (np.arange(24).reshape(4, 6) % 3 == 0).astype(float)
    saved = np.random.get_state()
    try:
        np.random.seed(0)
        mask = np.random.random(Y.shape) < 0.3
    finally:
        np.random.set_state(saved)
    np.testing.assert_array_equal(observe_ratio(Y, 0.3), mask * (2 * Y - 1))


def test_observe_ratio_nested_across_ratios():
    rs = np.random.RandomState(1)
    Y = (rs.random_sample((50, 8)) < 0.3).astype(int)
    kept = [observe_ratio(Y, r / 10) != 0 for r in range(1, 11)]
    for small, large in zip(kept, kept[1:]):
        assert not (small & ~large).any()
    assert kept[-1].all()  # ratio 1 keeps everything
    np.testing.assert_array_equal(observe_ratio(Y, 1.0), 2 * Y - 1)


def test_observe_ratio_seed_and_global_rng():
    Y = np.ones((5, 5))
    np.random.seed(11)
    before = np.random.random_sample(2)
    np.random.seed(11)
    a = observe_ratio(Y, 0.5, seed=0)
    np.testing.assert_array_equal(np.random.random_sample(2), before)
    b = observe_ratio(Y, 0.5, seed=1)
    np.testing.assert_array_equal(b, np.random.RandomState(1).random_sample((5, 5)) < 0.5)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("ratio", [0.0, -0.2, 1.01, float("nan"), "0.5"])
def test_observe_ratio_errors(ratio):
    with pytest.raises(ValueError, match="known_ratio"):
        observe_ratio(Y45, ratio)


def test_observe_ratio_rejects_bad_matrix():
    with pytest.raises(ValueError, match="row 0, column 0"):
        observe_ratio(np.array([[3, 0]]), 0.5)


# --------------------------------------------------------------------------- summary


def test_observed_summary_counts():
    O = np.array([[1, 0, -1, 0], [0, 0, 0, -1], [1, 1, 0, 0]])
    assert observed_summary(O) == {
        "rows": 3,
        "classes": 4,
        "positives": 3,
        "negatives": 2,
        "unobserved": 7,
        "rows_without_positive": 1,
    }
    s = observed_summary(observe_labels(Y68))
    assert (s["positives"], s["negatives"], s["rows_without_positive"]) == (6, 0, 0)
    assert s["unobserved"] == 48 - 6
    assert math.isclose(s["positives"] / s["rows"], 1.0)


def test_observed_summary_errors():
    with pytest.raises(ValueError, match=r"found 2 at row 1, column 0"):
        observed_summary(np.array([[1, 0], [2, 0]]))
    with pytest.raises(ValueError, match="2-D"):
        observed_summary(np.array([1, 0, -1]))
