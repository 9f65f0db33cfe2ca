"""Method recipes: every recipe builds, overrides are routed, typos are refused."""

import numpy as np
import pytest

from spmlkit import losses
from spmlkit.labeling import APL, OPMLCorrection
from spmlkit.methods import METHODS, get_method, resolve_hparams
from spmlkit.training.components import build_components, method_label_matrix

OBS = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=np.int8)
TRUTH = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 1]], dtype=np.uint8)


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_builds(name):
    comp = build_components(resolve_hparams(name), num_train=4, num_classes=3, observed=OBS,
                            expected_num_pos=1.75, epochs=10, seed=0)
    assert comp.loss.name == METHODS[name].loss


def test_overrides_are_routed_to_loss_labeling_and_knobs():
    r = resolve_hparams("em_apl", {"alpha": 0.2, "beta": 0.02, "theta": 0.5, "warmup_epochs": 3})
    assert r.loss_kwargs == {"alpha": 0.2, "beta": 0.02}
    assert r.labeling_kwargs == {"theta": 0.5, "warmup_epochs": 3}
    comp = build_components(r, num_train=4, num_classes=3, observed=OBS, expected_num_pos=1.0, epochs=10, seed=0)
    assert isinstance(comp.algorithm, APL)
    assert (comp.algorithm.theta, comp.algorithm.warmup_epochs, comp.algorithm.num_epochs) == (0.5, 3, 10)
    assert comp.loss.alpha == 0.2
    r = resolve_hparams("l1r", {"penalty": 1e-3})
    comp = build_components(r, num_train=4, num_classes=3, observed=OBS, expected_num_pos=1.0, epochs=10, seed=0)
    assert comp.penalty == ("l1", 1e-3)


def test_structural_arguments_are_filled_but_user_values_win():
    comp = build_components(resolve_hparams("epr"), num_train=4, num_classes=3, observed=OBS,
                            expected_num_pos=1.75, epochs=10, seed=0)
    assert comp.loss.expected_num_pos == 1.75
    comp = build_components(resolve_hparams("epr", {"expected_num_pos": 3.0}), num_train=4, num_classes=3,
                            observed=OBS, expected_num_pos=1.75, epochs=10, seed=0)
    assert comp.loss.expected_num_pos == 3.0
    comp = build_components(resolve_hparams("opml_sp"), num_train=4, num_classes=3, observed=OBS,
                            expected_num_pos=1.0, epochs=10, seed=0)
    assert isinstance(comp.algorithm, OPMLCorrection)
    assert [r.name for r in comp.regularizers] == ["highrank"]
    assert sum(p["lr"] for p in build_components(
        resolve_hparams("role"), num_train=4, num_classes=3, observed=OBS, expected_num_pos=1.0, epochs=10, seed=0
    ).param_groups(0.01)) == pytest.approx(0.1)


def test_unknown_hyperparameter_lists_valid_ones():
    with pytest.raises(ValueError, match=r"no hyperparameter 'alhpa'.*alpha.*beta.*theta"):
        resolve_hparams("em_apl", {"alhpa": 0.2})
    with pytest.raises(ValueError, match="valid methods are"):
        get_method("nope")


def test_label_matrices_of_the_references():
    assert method_label_matrix(METHODS["an"], OBS, None).tolist() == OBS.tolist()
    assert method_label_matrix(METHODS["bce"], OBS, TRUTH).tolist() == (2 * TRUTH.astype(int) - 1).tolist()
    assert method_label_matrix(METHODS["iun"], OBS, TRUTH).tolist() == [[1, 0, -1], [-1, 1, -1], [0, -1, 1], [1, -1, 0]]
    with pytest.raises(ValueError, match="needs the full training labels"):
        method_label_matrix(METHODS["bce"], OBS, None)


def test_every_recipe_loss_is_registered():
    names = set(losses.available())
    for m in METHODS.values():
        assert m.loss in names
        for reg, _ in m.regularizers:
            assert reg in names
