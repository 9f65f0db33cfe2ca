"""Between-epoch label-state algorithms: APL and OPML's AP-based correction.

See docs/methods.md, "em_apl" and "opml_sp".

Expected selections are worked out by hand in the comments, or by a naive per-class
reference loop written here (never by calling the code under test).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from spmlkit.labeling import APL, OPMLCorrection
from spmlkit.labels import Kind, LabelState

U, P, N, C_, PN = Kind.UNOBSERVED, Kind.POSITIVE, Kind.NEGATIVE, Kind.CORRECTED, Kind.PSEUDO_NEGATIVE


# ---------------------------------------------------------------------------- APL toy
# 6 examples x 3 classes. Column 0 has an observed negative (row 3).
TOY_OBSERVED = np.array(
    [
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [-1, 0, 0],
        [1, 0, 0],
        [0, 0, 1],
    ]
)
# U_c0 = (3, 5, 4); theta = 0.9, T = 4, T_w = 2 -> 2 useful rounds (after epochs 2 and 3)
# K_c = floor(0.9 * U_c0 / 2) = (floor(1.35), floor(2.25), floor(1.8)) = (1, 2, 1)
TOY_U0 = [3, 5, 4]
TOY_K = [1, 2, 1]

# predictions after epoch 2. Observed entries get the lowest scores on purpose.
TOY_P2 = np.array(
    [
        # c0    c1    c2
        [0.02, 0.60, 0.50],
        [0.30, 0.00, 0.70],
        [0.20, 0.10, 0.05],
        [0.01, 0.40, 0.25],
        [0.05, 0.10, 0.90],
        [0.20, 0.30, 0.00],
    ],
    dtype=np.float32,
)
# epoch 2 selection:
#  c0: candidates rows 1 (.30), 2 (.20), 5 (.20); K=1; tie .20 -> row 2
#  c1: candidates rows 0 (.6), 2 (.1), 3 (.4), 4 (.1), 5 (.3); K=2 -> rows 2, 4 (tie, both)
#  c2: candidates rows 0 (.5), 1 (.7), 3 (.25), 4 (.9); K=1 -> row 3
TOY_SEL2 = {(2, 0): 0.20, (2, 1): 0.10, (4, 1): 0.10, (3, 2): 0.25}

TOY_P3 = np.array(
    [
        [0.00, 0.20, 0.35],
        [0.15, 0.00, 0.80],
        [0.99, 0.00, 0.00],
        [0.00, 0.20, 0.60],
        [0.00, 0.00, 0.35],
        [0.40, 0.05, 0.00],
    ],
    dtype=np.float32,
)
# epoch 3 selection (already pseudo-labelled entries keep their epoch-2 targets):
#  c0: candidates rows 1 (.15), 5 (.40); K=1 -> row 1
#  c1: candidates rows 0 (.2), 3 (.2), 5 (.05); K=2 -> row 5, then tie .2 -> row 0
#  c2: candidates rows 0 (.35), 1 (.8), 4 (.35); K=1 -> tie -> row 0
TOY_SEL3 = {(1, 0): 0.15, (5, 1): 0.05, (0, 1): 0.20, (0, 2): 0.35}


def _expected_kind_after(rounds: list[tuple[int, dict]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kind / target / epoch matrices written out from the hand-worked selections."""
    kind = np.zeros((6, 3), dtype=np.uint8)
    kind[TOY_OBSERVED == 1] = P
    kind[TOY_OBSERVED == -1] = N
    target = (TOY_OBSERVED == 1).astype(np.float32)
    epoch = np.full((6, 3), -1, dtype=np.int16)
    for e, sel in rounds:
        for (r, c), t in sel.items():
            kind[r, c] = PN
            target[r, c] = np.float32(t)
            epoch[r, c] = e
    return kind, target, epoch


def _assert_state(state: LabelState, rounds: list[tuple[int, dict]]) -> None:
    kind, target, epoch = _expected_kind_after(rounds)
    np.testing.assert_array_equal(state.kind.numpy(), kind)
    np.testing.assert_array_equal(state.target.numpy(), target)
    np.testing.assert_array_equal(state.epoch.numpy(), epoch)


def test_apl_quota_from_initial_unobserved():
    apl = APL(theta=0.9, warmup_epochs=2, num_epochs=4)
    apl.initialize(LabelState(TOY_OBSERVED))
    assert apl.initial_unobserved.tolist() == TOY_U0
    assert apl.quota.tolist() == TOY_K
    assert apl.rounds == 2


def test_apl_toy_rounds_hand_worked():
    state = LabelState(TOY_OBSERVED)
    apl = APL(theta=0.9, warmup_epochs=2, num_epochs=4)

    # before warm-up: nothing, even with predictions that would be selected
    out = apl.step(torch.from_numpy(TOY_P2), state, 1)
    assert out["active"] is False and out["selected"] == 0
    _assert_state(state, [])

    out = apl.step(torch.from_numpy(TOY_P2), state, 2)
    assert out["active"] is True
    assert out["selected"] == 4
    assert out["selected_per_class"].tolist() == [1, 2, 1]
    _assert_state(state, [(2, TOY_SEL2)])

    out = apl.step(torch.from_numpy(TOY_P3), state, 3)
    assert out["selected"] == 4
    assert out["selected_per_class"].tolist() == [1, 2, 1]
    _assert_state(state, [(2, TOY_SEL2), (3, TOY_SEL3)])
    # frozen targets: row 2 / class 0 now predicts 0.99 but keeps 0.20
    assert state.target[2, 0].item() == np.float32(0.20)

    # epoch T: the reference's useless round -> no-op although candidates remain
    assert int(state.unobserved().sum()) == 12 - 8
    out = apl.step(torch.from_numpy(TOY_P3), state, 4)
    assert out["active"] is False and out["selected"] == 0
    _assert_state(state, [(2, TOY_SEL2), (3, TOY_SEL3)])

    # observed positives / negatives were never touched
    assert (state.kind[torch.from_numpy(TOY_OBSERVED == 1)] == P).all()
    assert state.kind[3, 0] == N

    with pytest.raises(ValueError, match="past num_epochs"):
        apl.step(torch.from_numpy(TOY_P3), state, 5)


def test_apl_is_active_window():
    apl = APL(theta=0.9, warmup_epochs=5, num_epochs=10)
    assert [e for e in range(1, 11) if apl.is_active(e)] == [5, 6, 7, 8, 9]


def test_apl_accepts_numpy_float64_and_stores_float32_targets():
    state = LabelState(TOY_OBSERVED)
    apl = APL(theta=0.9, warmup_epochs=2, num_epochs=4)
    p = TOY_P2.astype(np.float64)
    p[3, 2] = 0.123456789012345  # still the lowest candidate of class 2
    apl.step(p, state, 2)
    assert state.kind[3, 2] == PN
    assert state.target[3, 2].item() == float(np.float32(0.123456789012345))


def test_apl_candidate_exhaustion():
    # theta = 1 and one round (T - T_w = 1): K_c = U_c0 = (3, 3)
    observed = np.array([[1, 0], [0, 1], [0, 0], [0, -1], [1, 0]])
    state = LabelState(observed)
    # two unobserved entries already carry labels from another algorithm
    state.add_corrections(torch.tensor([1]), torch.tensor([0]), epoch=1)
    state.add_pseudo_negatives(torch.tensor([2]), torch.tensor([1]), torch.tensor([0.5]), epoch=1)
    apl = APL(theta=1.0, warmup_epochs=1, num_epochs=2)
    p = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8], [0.9, 0.05]])
    out = apl.step(p, state, 1)
    assert apl.quota.tolist() == [3, 3]
    # c0: candidates rows 2, 3 (2 < K=3); c1: candidates rows 0, 4 (2 < K=3; row 3 is an observed
    # negative, row 2 an earlier pseudo-negative that keeps its target 0.5)
    assert out["selected_per_class"].tolist() == [2, 2]
    expected_kind = np.array([[P, PN], [C_, P], [PN, PN], [PN, N], [P, PN]], dtype=np.uint8)
    np.testing.assert_array_equal(state.kind.numpy(), expected_kind)
    expected_target = np.array(
        [[1.0, 0.2], [1.0, 1.0], [0.5, 0.5], [0.7, 0.0], [1.0, 0.05]], dtype=np.float32
    )
    np.testing.assert_array_equal(state.target.numpy(), expected_target)
    assert state.epoch[2, 1] == 1 and state.epoch[1, 0] == 1


def test_apl_state_dict_round_trip_and_resume():
    # uninterrupted run
    state_a = LabelState(TOY_OBSERVED)
    apl_a = APL(theta=0.9, warmup_epochs=2, num_epochs=4)
    apl_a.step(TOY_P2, state_a, 2)
    # checkpoint after epoch 2, through torch.save with weights_only loading
    buf = io.BytesIO()
    torch.save({"apl": apl_a.state_dict(), "labels": state_a.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    apl_a.step(TOY_P3, state_a, 3)

    state_b = LabelState(TOY_OBSERVED)
    state_b.load_state_dict(ckpt["labels"])
    apl_b = APL(theta=0.9, warmup_epochs=2, num_epochs=4)
    apl_b.load_state_dict(ckpt["apl"])
    assert apl_b.initial_unobserved.tolist() == TOY_U0
    assert apl_b.quota.tolist() == TOY_K
    apl_b.step(TOY_P3, state_b, 3)
    for key in ("kind", "target", "epoch"):
        assert torch.equal(getattr(state_a, key), getattr(state_b, key))
    _assert_state(state_b, [(2, TOY_SEL2), (3, TOY_SEL3)])

    # U_c0 comes from the checkpoint, not from the label state it is later used with
    apl_c = APL(theta=0.9, warmup_epochs=2, num_epochs=4)
    apl_c.load_state_dict({**ckpt["apl"], "initial_unobserved": torch.tensor([10, 20, 3])})
    assert apl_c.quota.tolist() == [4, 9, 1]  # floor(0.9 * (10, 20, 3) / 2)

    # before initialisation the state is empty and restores as such
    fresh = APL(theta=0.5, warmup_epochs=1, num_epochs=3).state_dict()
    assert fresh["initial_unobserved"] is None
    apl_d = APL(theta=0.5, warmup_epochs=1, num_epochs=3)
    apl_d.load_state_dict(fresh)
    assert apl_d.initial_unobserved is None

    with pytest.raises(ValueError, match="resume with the original settings"):
        APL(theta=0.8, warmup_epochs=2, num_epochs=4).load_state_dict(ckpt["apl"])


def test_apl_rejects_bad_input():
    state = LabelState(TOY_OBSERVED)
    apl = APL(theta=0.9, warmup_epochs=2, num_epochs=4)
    with pytest.raises(ValueError, match=r"shape \(6, 2\)"):
        apl.step(np.full((6, 2), 0.5, dtype=np.float32), state, 2)
    for bad, value in ((float("nan"), "nan"), (1.5, "1.5"), (-0.25, "-0.25"), (float("inf"), "inf")):
        p = TOY_P2.copy()
        p[4, 1] = bad
        with pytest.raises(ValueError, match=rf"{value} at row 4, column 1"):
            apl.step(p, state, 2)
    with pytest.raises(ValueError, match="1-indexed"):
        apl.step(TOY_P2, state, 0)
    _assert_state(state, [])  # nothing was written by the failed calls
    with pytest.raises(ValueError, match="warmup_epochs < num_epochs"):
        APL(warmup_epochs=10, num_epochs=10)
    with pytest.raises(ValueError, match="theta"):
        APL(theta=0.0)
    with pytest.raises(ValueError, match="warmup_epochs"):
        APL(warmup_epochs=0)
    apl.step(TOY_P2, state, 2)
    with pytest.raises(ValueError, match="initialised for 3 classes"):
        apl.step(np.zeros((6, 4), dtype=np.float32), LabelState(np.zeros((6, 4))), 2)


# ---------------------------------------------------------------------------- APL vs naive loop
def _naive_apl_run(observed: np.ndarray, rounds: list[np.ndarray], theta: float, t_w: int, t: int):
    """Plain-Python APL: per class, candidates by a loop over examples, sorted by (p, index)."""
    n_rows, n_cols = observed.shape
    kind = np.where(observed == 1, 1, np.where(observed == -1, 2, 0))
    target = (observed == 1).astype(np.float32)
    quota = [int(theta * int((observed[:, c] == 0).sum()) / (t - t_w)) for c in range(n_cols)]
    for e, p in zip(range(t_w, t), rounds):
        for c in range(n_cols):
            cands = [n for n in range(n_rows) if kind[n, c] == 0]
            cands.sort(key=lambda n: (float(p[n, c]), n))
            for n in cands[: quota[c]]:
                kind[n, c] = 4
                target[n, c] = np.float32(p[n, c])
    return kind, target


@pytest.mark.parametrize("ties", [False, True])
def test_apl_matches_naive_loop_on_random_data(ties):
    rng = np.random.default_rng(7 + ties)
    n_rows, n_cols = 157, 9
    observed = np.zeros((n_rows, n_cols), dtype=np.int64)
    observed[np.arange(n_rows), rng.integers(0, n_cols, n_rows)] = 1
    neg = rng.random((n_rows, n_cols)) < 0.1
    observed[(observed == 0) & neg] = -1
    theta, t_w, t = 0.9, 3, 7
    rounds = []
    for _ in range(t - t_w):
        if ties:  # heavy ties: two decimals
            p = np.round(rng.random((n_rows, n_cols)), 2).astype(np.float32)
        else:  # distinct values
            p = (rng.permutation(n_rows * n_cols).reshape(n_rows, n_cols) / (n_rows * n_cols)).astype(
                np.float32
            )
        rounds.append(p)
    state = LabelState(observed)
    apl = APL(theta=theta, warmup_epochs=t_w, num_epochs=t)
    for e in range(1, t + 1):
        p = rounds[e - t_w] if t_w <= e < t else rounds[0]
        apl.step(torch.from_numpy(p), state, e)
    kind, target = _naive_apl_run(observed, rounds, theta, t_w, t)
    np.testing.assert_array_equal(state.kind.numpy(), kind)
    np.testing.assert_array_equal(state.target.numpy(), target)
    # at most theta of each class's unobserved entries, and with these sizes exactly the quota sum
    u0 = (observed == 0).sum(axis=0)
    per_class = (kind == 4).sum(axis=0)
    assert (per_class <= theta * u0).all()
    assert per_class.tolist() == [(t - t_w) * math.floor(theta * u / (t - t_w)) for u in u0]


# ---------------------------------------------------------------------------- OPML correction
# 10 examples x 3 classes; class 2 has observed negatives (rows 6-9) and two pseudo-negatives.
OPML_OBSERVED = np.array(
    [
        [1, 0, 0],
        [1, 0, 0],
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [0, 0, 1],
        [0, 0, -1],
        [0, 0, -1],
        [0, 0, -1],
        [0, 0, -1],
    ]
)
OPML_P = np.array(
    [
        # c0   c1    c2
        [1.0, 0.95, 0.98],
        [1.0, 0.20, 0.98],
        [1.0, 0.30, 0.10],
        [0.9, 0.99, 0.30],
        [0.8, 0.10, 0.00],
        [0.3, 0.00, 0.00],
        [0.6, 0.40, 0.99],
        [0.8, 0.50, 0.99],
        [0.1, 0.60, 0.99],
        [0.5, 0.95, 0.99],
    ],
    dtype=np.float32,
)
OPML_AP = np.array([0.5, 0.2, 0.0])
# rho = 0.5, kappa = 1.5, N = 10:
#  c0: min(floor(5 * 0.5) = 2, floor(1.5 * 3) = 4, #unobserved 7) = 2   (AP term binds)
#  c1: min(floor(5 * 0.8) = 4, floor(1.5 * 1) = 1, 9) = 1              (kappa cap binds)
#  c2: min(floor(5 * 1.0) = 5, floor(1.5 * 2) = 3, 2) = 2              (#unobserved binds)
# highest unobserved: c0 rows 3 (.9), 4 (.8; tie with row 7 -> lower index); c1 row 0 (.95, tie
# with row 9); c2 rows 3 (.3), 2 (.1). Observed positives / negatives / pseudo-negatives
# score higher but are never candidates.


def _opml_state() -> LabelState:
    state = LabelState(OPML_OBSERVED)
    state.add_pseudo_negatives(torch.tensor([0, 1]), torch.tensor([2, 2]), torch.tensor([0.4, 0.4]), epoch=1)
    return state


def test_opml_correction_hand_worked():
    state = _opml_state()
    corr = OPMLCorrection(0.5, start_epoch=3, kappa=1.5)
    out = corr.step(OPML_P, state, 2, class_ap=OPML_AP)
    assert out["active"] is False and out["corrected"] == 0
    assert state.count(C_) == 0

    out = corr.step(torch.from_numpy(OPML_P), state, 3, class_ap=OPML_AP)
    assert out["active"] is True
    assert out["corrected_per_class"].tolist() == [2, 1, 2]
    assert out["corrected"] == 5
    expected = {(3, 0), (4, 0), (0, 1), (3, 2), (2, 2)}
    got = {(int(r), int(c)) for r, c in torch.nonzero(state.kind == C_)}
    assert got == expected
    for r, c in expected:
        assert state.target[r, c] == 1.0 and state.epoch[r, c] == 3
    # the loss sees corrections as positives
    labels = state.effective_labels()
    assert labels[3, 0] == 1.0 and labels[0, 1] == 1.0 and labels[6, 2] == -1.0
    # untouched: observed labels and pseudo-negatives
    assert state.count(P) == 6 and state.count(N) == 4 and state.count(PN) == 2

    # not every_epoch: epoch 4 does nothing
    out = corr.step(OPML_P, state, 4, class_ap=OPML_AP)
    assert out["active"] is False and state.count(C_) == 5


def test_opml_correction_every_epoch_continues_down_the_ranking():
    state = _opml_state()
    corr = OPMLCorrection(0.5, start_epoch=3, kappa=1.5, every_epoch=True)
    assert [e for e in range(1, 7) if corr.is_active(e)] == [3, 4, 5, 6]
    corr.step(OPML_P, state, 3, class_ap=OPML_AP)
    out = corr.step(OPML_P, state, 4, class_ap=OPML_AP)
    # c0: min(2, 4, 5 left) = 2 -> rows 7 (.8), 6 (.6); c1: min(4, 1, 8) = 1 -> row 9 (.95);
    # c2: no unobserved entry left -> 0
    assert out["corrected_per_class"].tolist() == [2, 1, 0]
    new = {(int(r), int(c)) for r, c in torch.nonzero(state.epoch == 4)}
    assert new == {(7, 0), (6, 0), (9, 1)}


def test_opml_correction_default_kappa_and_zero_rho():
    state = LabelState(OPML_OBSERVED)
    # no pseudo-negatives this time, kappa = 1:
    # c0 min(2, 3, 7) = 2; c1 min(4, 1, 9) = 1; c2 min(5, 2, 4) = 2 -> rows 0, 1 (.98 each)
    out = OPMLCorrection(0.5, start_epoch=1).step(OPML_P, state, 1, class_ap=OPML_AP)
    assert out["corrected_per_class"].tolist() == [2, 1, 2]
    assert state.kind[0, 2] == C_ and state.kind[1, 2] == C_
    assert state.kind[2, 2] == U and state.kind[3, 2] == U
    state2 = LabelState(OPML_OBSERVED)
    out = OPMLCorrection(0.0, start_epoch=1).step(OPML_P, state2, 1, class_ap=OPML_AP)
    assert out["corrected"] == 0 and state2.count(C_) == 0


def test_opml_correction_rejects_bad_input():
    state = _opml_state()
    corr = OPMLCorrection(0.5, start_epoch=1)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        corr.step(OPML_P, state, 1, class_ap=np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="class 1"):
        corr.step(OPML_P, state, 1, class_ap=np.array([0.5, 1.5, 0.0]))
    with pytest.raises(ValueError, match="probabilities"):
        corr.step(OPML_P * 2, state, 1, class_ap=OPML_AP)
    with pytest.raises(ValueError, match="rho"):
        OPMLCorrection(-0.1, start_epoch=1)
    with pytest.raises(ValueError, match="start_epoch"):
        OPMLCorrection(0.1, start_epoch=0)
    assert state.count(C_) == 0
    ok = OPMLCorrection(0.5, start_epoch=2, kappa=2.0, every_epoch=True)
    same = OPMLCorrection(0.5, start_epoch=2, kappa=2.0, every_epoch=True)
    same.load_state_dict(ok.state_dict())
    with pytest.raises(ValueError, match="original settings"):
        OPMLCorrection(0.5, start_epoch=3).load_state_dict(ok.state_dict())


def test_opml_correction_computes_ap_against_observed_positives():
    # class 0: ranking rows 0 (unobs), 1 (pos), 2 (unobs), 3 (pos) -> AP = (1/2 + 2/4) / 2 = 0.5
    #   n = min(floor(0.5 * 4 * 0.5) = 1, floor(1 * 2) = 2, 2) = 1 -> row 0 (highest unobserved)
    # class 1: only positive row 0 ranked first -> AP = 1 -> n = 0
    # class 2: no observed positive -> AP = 0 (empty="zero"), kappa cap 0 -> n = 0
    observed = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 0]])
    p = np.array([[0.9, 0.9, 0.9], [0.8, 0.1, 0.8], [0.7, 0.2, 0.7], [0.6, 0.3, 0.6]], dtype=np.float32)
    state = LabelState(observed)
    out = OPMLCorrection(0.5, start_epoch=1).step(p, state, 1)
    np.testing.assert_allclose(out["class_ap"], [0.5, 1.0, 0.0], rtol=0, atol=1e-12)
    assert out["corrected_per_class"].tolist() == [1, 0, 0]
    assert state.kind[0, 0] == C_
