"""LabelState: observed labels stay untouched, pseudo-labels live beside them."""

import numpy as np
import pytest
import torch

from spmlkit.labels import Kind, LabelState, validate_observed

OBS = np.array([[1, 0, 0, -1], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=np.int8)


def test_initial_kinds_and_effective_labels():
    s = LabelState(OBS)
    assert s.kind.tolist() == [[1, 0, 0, 2], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert torch.equal(s.effective_labels(), torch.tensor(OBS, dtype=torch.float32))
    assert s.unobserved().sum().item() == 8


def test_batch_exposes_pseudo_negatives_separately_from_labels():
    s = LabelState(OBS)
    s.add_pseudo_negatives(torch.tensor([0, 2]), torch.tensor([1, 3]), torch.tensor([0.0, 0.25]), epoch=3)
    b = s.batch(torch.tensor([2, 0]))
    # labels are untouched: a soft target of exactly 0 does not turn into "unobserved"
    assert b.labels.tolist() == [[0, 0, 1, 0], [1, 0, 0, -1]]
    assert b.pseudo.mask.tolist() == [[False, False, False, True], [False, True, False, False]]
    assert b.pseudo.target.tolist() == [[0, 0, 0, 0.25], [0, 0.0, 0, 0]]
    assert s.epoch[2, 3].item() == 3


def test_corrections_become_positive_labels_and_observed_is_never_modified():
    s = LabelState(OBS)
    n = s.correct_mask(torch.tensor([1, 1, 2]), torch.tensor(
        [[True, False, False, False], [True, False, False, True], [False, False, True, False]]), epoch=2)
    # (1,0) requested twice counts once; (1,3) new; (2,2) is an observed positive -> skipped
    assert n == 2
    assert s.effective_labels()[1].tolist() == [1, 1, 0, 1]
    assert s.observed.tolist() == OBS.tolist()
    assert s.count(Kind.CORRECTED) == 2


def test_only_unobserved_entries_can_be_pseudo_labelled():
    s = LabelState(OBS)
    with pytest.raises(ValueError, match=r"\(0, 3\).*NEGATIVE"):
        s.add_pseudo_negatives(torch.tensor([0]), torch.tensor([3]), torch.tensor([0.1]), epoch=1)


def test_pseudo_label_stats_against_truth():
    truth = np.array([[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 1, 0]])
    s = LabelState(OBS)
    s.add_pseudo_negatives(torch.tensor([0, 1, 2]), torch.tensor([1, 0, 0]), torch.tensor([0.1, 0.2, 0.3]), epoch=1)
    s.add_corrections(torch.tensor([1, 2]), torch.tensor([3, 1]), epoch=1)
    st = s.pseudo_label_stats(truth)
    assert st["pseudo_negatives"] == 3 and st["pseudo_negative_accuracy"] == pytest.approx(2 / 3)
    assert st["corrections"] == 2 and st["correction_accuracy"] == pytest.approx(1 / 2)
    assert st["pseudo_label_accuracy"] == pytest.approx(3 / 5)


def test_state_dict_round_trip_and_mismatch_error():
    s = LabelState(OBS)
    s.add_corrections(torch.tensor([0]), torch.tensor([1]), epoch=4)
    t = LabelState(OBS)
    t.load_state_dict(s.state_dict())
    assert torch.equal(t.kind, s.kind) and torch.equal(t.epoch, s.epoch)
    other = OBS.copy()
    other[0, 1] = 1
    with pytest.raises(ValueError, match="different observed labels"):
        LabelState(other).load_state_dict(s.state_dict())


def test_validate_observed_messages():
    with pytest.raises(ValueError, match=r"found 2 at row 1, column 0"):
        validate_observed(np.array([[1, 0], [2, 0]]))
    with pytest.raises(ValueError, match="2-D"):
        validate_observed(np.array([1, 0]))


def _expected(state: LabelState, index: torch.Tensor) -> tuple[list, list, list]:
    """A run's batch read from its own state (LabelState.batch: its own tables, not RunLabels')."""
    b = state.batch(index)
    return b.labels.tolist(), b.pseudo.mask.tolist(), b.pseudo.target.tolist()


@pytest.mark.parametrize("runs", [1, 2])
def test_run_labels_read_and_correct_each_run_as_its_own_state_does(runs: int) -> None:
    """RunLabels, the loop's view of R label states (R = 1 is a solo run): row r of a batch is
    run r's state, also after LL-Cp-style corrections patch the cached tables in place; on exit
    each state has its own tensors back, holding what the epoch wrote, with observed untouched."""
    from spmlkit.labels import RunLabels

    states = [LabelState(OBS) for _ in range(runs)]
    if runs == 2:  # one run with a pseudo-negative, one without: the zeros shortcut must not apply
        states[1].add_pseudo_negatives(torch.tensor([2]), torch.tensor([3]), torch.tensor([0.25]), epoch=1)
    own = [state.kind for state in states]
    index = torch.tensor([[2, 0, 1], [1, 2, 2]])[:runs]
    with RunLabels(states) as labels:
        before = labels.batch(index)
        for r, state in enumerate(states):
            got = (before.labels[r].tolist(), before.pseudo.mask[r].tolist(), before.pseudo.target[r].tolist())
            assert got == _expected(state, index[r])
        mask = torch.zeros(runs, 3, 4, dtype=torch.bool)
        mask[:, 0, 0] = True   # row 2 / row 1, class 0: unobserved -> corrected
        mask[:, 1, 0] = True   # row 0: an observed positive / row 2: unobserved -> corrected
        mask[:, 2, 3] = True   # row 1: unobserved -> corrected / row 2, class 3: a pseudo-negative in run 1 -> kept
        labels.correct(index, mask, epoch=5)
        after = labels.batch(index)  # from the tables patched in place
        for r, state in enumerate(states):
            assert after.labels[r].tolist() == _expected(state, index[r])[0]
    run0 = [[1, 0, 0, -1], [0, 1, 0, 1], [1, 0, 1, 0]]
    assert states[0].effective_labels().tolist() == run0
    assert states[0].count(Kind.CORRECTED) == 2 and states[0].epoch[1, 3].item() == 5
    if runs == 2:
        assert states[1].effective_labels().tolist() == [[1, 0, 0, -1], [1, 1, 0, 0], [1, 0, 1, 0]]
        assert states[1].kind[2, 3].item() == Kind.PSEUDO_NEGATIVE
    for state, kind in zip(states, own):
        assert state.kind is kind and state.observed.tolist() == OBS.tolist()


def test_run_labels_leave_a_state_nothing_wrote_untouched() -> None:
    """Only run 0 corrects entries in the epoch: run 1's tensors are not rewritten on exit (the
    stacked table's version moved for both rows), so what is cached on them stays valid."""
    from spmlkit.labels import RunLabels

    states = [LabelState(OBS) for _ in range(2)]
    versions = [(state.kind._version, state.target._version, state.epoch._version) for state in states]
    index = torch.tensor([[2, 0, 1], [1, 2, 0]])
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[0, 0, 0] = True  # run 0, row 2, class 0: unobserved -> corrected
    with RunLabels(states) as labels:
        labels.correct(index, mask, epoch=3)
    assert states[0].count(Kind.CORRECTED) == 1 and states[1].count(Kind.CORRECTED) == 0
    assert (states[1].kind._version, states[1].target._version, states[1].epoch._version) == versions[1]
    assert states[0].kind._version != versions[0][0]
