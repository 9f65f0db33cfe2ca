"""Method recipes: every recipe builds the parts it names, overrides are routed, typos are refused."""

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.labeling import APL, ClassPriorEstimation, ConfidentPositives, OPMLCorrection
from spmlkit.labels import LabelBatch
from spmlkit.methods import METHODS, get_method, resolve_hparams
from spmlkit.training.components import build_components, method_label_matrix

OBS = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=np.int8)
TRUTH = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 1]], dtype=np.uint8)


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_builds_the_parts_its_recipe_names_and_its_step_loss_is_theirs(name):
    """The components of a recipe: its loss (with the recipe's arguments and the data arguments a
    trainer fills), its regularisers, its label algorithm and penalty; and the loss of a step is
    exactly the sum of those parts on that batch, each built here on its own."""
    method = METHODS[name]
    features = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [0.5, 3.0]])  # SMILE's graph of the 4 rows
    comp = build_components(resolve_hparams(name), num_train=4, num_classes=3, observed=OBS,
                            expected_num_pos=1.75, epochs=10, seed=0, features=lambda: features)
    assert comp.loss.name == method.loss
    assert [r.name for r in comp.regularizers] == [reg for reg, _ in method.regularizers]
    assert (comp.algorithm is None) == (method.labeling is None)
    if method.labeling is not None:
        assert isinstance(comp.algorithm, {"apl": APL, "opml_correction": OPMLCorrection,
                                           "class_prior": ClassPriorEstimation,
                                           "confident_positives": ConfidentPositives}[method.labeling])
    assert comp.penalty == method.weight_penalty
    data = {"num_train": 4, "num_classes": 3, "observed": OBS, "expected_num_pos": 1.75, "seed": 0,
            "features": features}

    def fresh(loss: str, kwargs: dict) -> losses.SPMLLoss:
        needed = {k: data[k] for k in (*losses.data_arguments(loss), *method.data_defaults) if k not in kwargs}
        return losses.create(loss, **kwargs, **needed)

    gen = torch.Generator().manual_seed(0)
    z = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    labels = torch.as_tensor(OBS, dtype=torch.float64)
    index = torch.arange(4)
    pseudo = losses.PseudoLabels(torch.zeros(4, 3, dtype=torch.bool), torch.zeros(4, 3, dtype=torch.float64))
    weights = [torch.ones(3, 2, dtype=torch.float64)]
    views = {}
    if comp.loss.needs_views:  # LAC/PLC: the strong view's logits and both views' label-wise embeddings
        views["strong"] = torch.randn(4, 3, generator=gen, dtype=torch.float64)
        emb = torch.randn(2, 4, 3, 5, generator=gen, dtype=torch.float64)
        views["embeddings"] = torch.nn.functional.normalize(emb, dim=-1) if comp.loss.needs_embeddings else None
    if comp.loss.needs_latent:  # MIME: a bottleneck model's codes, width 2
        views["latent"] = (torch.randn(4, 3, 2, generator=gen, dtype=torch.float64),
                           torch.rand(4, 3, 2, generator=gen, dtype=torch.float64) + 0.5)
    expected = fresh(method.loss, dict(method.loss_kwargs))(z, labels, pseudo=pseudo, index=index, **views)
    for reg, kwargs in method.regularizers:
        expected = expected + fresh(reg, dict(kwargs))(z, labels, pseudo=pseudo, index=index, **views)
    if method.weight_penalty is not None:
        kind, lam = method.weight_penalty
        expected = expected + lam * 6.0  # six weights of 1: their L1 norm and squared L2 norm are both 6
    batch = LabelBatch(labels, pseudo, index)
    got = comp.training_loss(lambda x: x, z, z, batch, None, lambda: weights, **views)
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)


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
    with pytest.raises(ValueError, match="valid names are"):
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
