"""The LabelingAlgorithm contract: declarations, registry helpers and the shared step signature."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmlkit import labeling
from spmlkit.labeling import APL, ClassPriorEstimation, LabelingAlgorithm, OPMLCorrection
from spmlkit.labels import LabelState

OBSERVED = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, 0, 0], [1, 0, 0], [0, 0, 1]])
PROBS = np.array(
    [[0.9, 0.2, 0.1], [0.3, 0.8, 0.4], [0.5, 0.6, 0.9], [0.1, 0.7, 0.2], [0.8, 0.1, 0.3], [0.2, 0.4, 0.7]],
    dtype=np.float32,
)


def test_algorithms_subclass_the_contract_and_declare_their_needs():
    for cls in labeling.ALGORITHMS.values():
        assert issubclass(cls, LabelingAlgorithm)
    assert APL.run_arguments == ("num_epochs",)
    assert OPMLCorrection.run_arguments == () and ClassPriorEstimation.run_arguments == ()
    # CRISP's estimator writes no labels: the crisp method uses it itself, it is no algorithm a recipe names
    assert "class_prior" not in labeling.ALGORITHMS and issubclass(ClassPriorEstimation, LabelingAlgorithm)
    with pytest.raises(TypeError):
        LabelingAlgorithm()  # abstract: is_active, step, state_dict, load_state_dict


def test_hyperparameters_leave_out_run_arguments():
    assert labeling.hyperparameters("apl") == {"theta": 0.9, "warmup_epochs": 5}
    assert labeling.hyperparameters("opml_correction") == {
        "rho": None, "start_epoch": 5, "kappa": 1.0, "every_epoch": False
    }
    assert OPMLCorrection(0.1).start_epoch == 5  # documented default, no trainer guess needed


def test_create_checks_names_and_arguments():
    apl = labeling.create("apl", theta=0.5, num_epochs=8)
    assert (apl.theta, apl.warmup_epochs, apl.num_epochs) == (0.5, 5, 8)
    with pytest.raises(ValueError, match="unknown argument.*thetta.*theta, warmup_epochs.*num_epochs"):
        labeling.create("apl", thetta=0.5)
    with pytest.raises(ValueError, match="needs rho"):
        labeling.create("opml_correction", start_epoch=2)
    with pytest.raises(ValueError, match="valid names are: apl, confident_positives, opml_correction"):
        labeling.create("apl2")
    with pytest.raises(ValueError, match="valid names are"):
        labeling.hyperparameters("nope")


def test_every_algorithm_takes_the_same_step_call():
    """``step(probs, state, epoch)`` for every algorithm; OPML's correction also takes the class AP its
    caller computed, and without it computes the same AP itself."""
    for name, kwargs in (("apl", {"theta": 1.0, "warmup_epochs": 1, "num_epochs": 3}),
                         ("opml_correction", {"rho": 0.5, "start_epoch": 1}),
                         ("confident_positives", {"threshold": 0.3, "start_epoch": 1})):
        algo, same = labeling.create(name, **kwargs), labeling.create(name, **kwargs)
        state = LabelState(OBSERVED)
        algo.initialize(state)
        assert algo.is_active(1)
        record = algo.step(PROBS, state, 1)
        assert record["active"] is True and record["epoch"] == 1
        same.load_state_dict(algo.state_dict())
    opml, state, other = OPMLCorrection(0.5, start_epoch=1), LabelState(OBSERVED), LabelState(OBSERVED)
    given = opml.step(PROBS, state, 1, class_ap=opml.class_ap(PROBS, other))
    computed = OPMLCorrection(0.5, start_epoch=1).step(PROBS, other, 1)
    assert np.array_equal(given["class_ap"], computed["class_ap"]) and torch.equal(state.kind, other.kind)
    prior = ClassPriorEstimation()
    assert prior.step(PROBS, LabelState(OBSERVED), 1)["active"] is True and prior.class_prior().shape == (3,)


def test_class_ap_is_keyword_only():
    with pytest.raises(TypeError):
        OPMLCorrection(0.5, start_epoch=1).step(PROBS, LabelState(OBSERVED), 1, np.zeros(3))


def test_inactive_records_keep_their_shape():
    out = APL(theta=0.9, warmup_epochs=2, num_epochs=4).step(PROBS, LabelState(OBSERVED), 1)
    assert out == {"epoch": 1, "active": False, "selected": 0, "selected_per_class": out["selected_per_class"]}
    assert out["selected_per_class"].tolist() == [0, 0, 0]
    out = OPMLCorrection(0.5, start_epoch=3).step(PROBS, LabelState(OBSERVED), 1)
    assert list(out) == ["epoch", "active", "corrected", "corrected_per_class", "class_ap"]
    assert out["class_ap"] is None and out["corrected"] == 0
