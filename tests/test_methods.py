"""Methods: every method builds the parts it names, its step's loss is theirs, overrides are routed,
typos are refused, and the protocol's declarations are checked when a method is registered."""

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.labeling import APL, ConfidentPositives, OPMLCorrection
from spmlkit.labels import LabelBatch
from spmlkit.losses.batchwise import pu_mixup_consistency
from spmlkit.methods import METHODS, LossMethod, Meaning, Method, RunInfo, check_hparams, get_method, loss_method
from spmlkit.methods import register
from spmlkit.models import ModelOutput
from spmlkit.training.plan import method_label_matrix

OBS = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=np.int8)
TRUTH = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 1]], dtype=np.uint8)
FEATURES = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [0.5, 3.0]])  # SMILE's graph of the 4 rows
LOSS_METHODS = [name for name in METHODS if issubclass(METHODS[name], LossMethod)]


def run_info(epochs: int = 10, expected_num_pos: float = 1.75) -> RunInfo:
    return RunInfo(num_train=4, num_classes=3, observed=OBS, expected_num_pos=expected_num_pos, epochs=epochs,
                   seed=0, features=lambda: FEATURES)


def build(name: str, **hparams) -> Method:
    return METHODS[name](run_info(), **check_hparams(name, hparams))


@pytest.mark.parametrize("name", LOSS_METHODS)
def test_every_loss_method_builds_the_parts_it_names_and_its_step_loss_is_theirs(name):
    """A method made of parts: its loss (with the recipe's arguments and the data arguments a run
    fills), its regularisers, its label algorithm; and the loss of a step is exactly the sum of those
    parts on that batch, each built here on its own, plus the weight penalty of L1R/L2R."""
    cls = METHODS[name]
    parts = cls.made_of
    method = build(name)
    assert method.criterion.name == parts.loss
    assert [r.name for r in method.regularizers] == [reg for reg, _ in parts.regularizers]
    assert (method.algorithm is None) == (parts.labeling is None)
    if parts.labeling is not None:
        assert isinstance(method.algorithm, {"apl": APL, "opml_correction": OPMLCorrection,
                                             "confident_positives": ConfidentPositives}[parts.labeling])
    data = {"num_train": 4, "num_classes": 3, "observed": OBS, "expected_num_pos": 1.75, "seed": 0,
            "features": FEATURES}

    def fresh(loss: str, kwargs: dict) -> losses.SPMLLoss:
        needed = {k: data[k] for k in (*losses.data_arguments(loss), *parts.data_defaults) if k not in kwargs}
        return losses.create(loss, **kwargs, **needed)

    gen = torch.Generator().manual_seed(0)
    z = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    labels = torch.as_tensor(OBS, dtype=torch.float64)
    index = torch.arange(4)
    pseudo = losses.PseudoLabels(torch.zeros(4, 3, dtype=torch.bool), torch.zeros(4, 3, dtype=torch.float64))
    out = ModelOutput(z)
    if "strong" in cls.requires:  # LAC/PLC: the strong view's logits and both views' label-wise embeddings
        emb = torch.nn.functional.normalize(torch.randn(2, 4, 3, 5, generator=gen, dtype=torch.float64), dim=-1)
        out = out._replace(strong=torch.randn(4, 3, generator=gen, dtype=torch.float64), embeddings=emb)
    if "latent" in cls.requires:  # MIME: a bottleneck model's codes, width 2
        out = out._replace(latent=(torch.randn(4, 3, 2, generator=gen, dtype=torch.float64),
                                   torch.rand(4, 3, 2, generator=gen, dtype=torch.float64) + 0.5))
    context = {"pseudo": pseudo, "index": index, "strong": out.strong, "embeddings": out.embeddings,
               "latent": out.latent}

    def loss_of(loss: losses.SPMLLoss) -> torch.Tensor:
        return loss(z, labels, **{k: context[k] for k in type(loss).reads})

    expected = loss_of(fresh(parts.loss, dict(parts.loss_kwargs)))
    for reg, kwargs in parts.regularizers:
        expected = expected + loss_of(fresh(reg, dict(kwargs)))
    weights = [torch.ones(3, 2, dtype=torch.float64)]
    extras = {"parameters": lambda: weights, "draws": None, "inputs": z, "forward": lambda x: x}
    if "parameters" in cls.step_arguments:
        expected = expected + 1e-6 * 6.0  # six weights of 1: their L1 norm and squared L2 norm are both 6
    got = method.loss(out, LabelBatch(labels, pseudo, index), **{k: extras[k] for k in cls.step_arguments})
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_pu_mlc_adds_the_mixup_consistency_of_its_own_draws():
    """PU-MLC's step: its loss plus ``mixup_weight`` x the consistency of the inputs mixed by the
    draws it made from the run's generator before the step (permutation of half the batch, lambda)."""
    method = build("pu_mlc", mixup_weight=0.5)
    gen = torch.Generator().manual_seed(3)
    draws = method.draw(gen, 4)
    again = torch.Generator().manual_seed(3)
    perm, lam = losses.batchwise.draw_pu_mixing(4, again)
    assert torch.equal(draws[0], perm) and draws[1].dtype == torch.float64 and float(draws[1]) == lam
    assert method.draw(gen, 1) is None  # one row has nothing to mix
    x = torch.randn(4, 2, dtype=torch.float64, generator=gen)
    weight = torch.randn(3, 2, dtype=torch.float64, generator=gen)

    def forward(inputs):
        return inputs @ weight.T

    z, labels = forward(x), torch.as_tensor(OBS, dtype=torch.float64)
    batch = LabelBatch(labels, losses.PseudoLabels(torch.zeros(4, 3, dtype=torch.bool), torch.zeros(4, 3)),
                       torch.arange(4))
    got = method.loss(ModelOutput(z), batch, draws=draws, inputs=x, forward=forward)
    base = losses.create("pu_mlc")(z, labels)
    mix = pu_mixup_consistency(forward, x, z, labels, perm=draws[0], lam=draws[1])
    assert torch.equal(got, base + 0.5 * mix)
    assert torch.equal(method.loss(ModelOutput(z), batch, draws=None, inputs=x, forward=forward), base)


def test_overrides_are_routed_to_the_loss_the_label_algorithm_and_the_methods_own_knobs():
    method = build("em_apl", alpha=0.2, beta=0.02, theta=0.5, warmup_epochs=3)
    assert (method.criterion.alpha, method.criterion.beta) == (0.2, 0.02)
    assert isinstance(method.algorithm, APL)
    assert (method.algorithm.theta, method.algorithm.warmup_epochs, method.algorithm.num_epochs) == (0.5, 3, 10)
    l1r = build("l1r", penalty=1e-3)
    assert (l1r.norm, l1r.penalty) == ("l1", 1e-3)
    assert build("opml_sp", highrank_lam=0.3).regularizers[0].lam == 0.3
    assert build("opml_sp").regularizers[0].lam == losses.hyperparameters("highrank")["lam"]
    assert build("boostlu_ll_r", boost_alpha=2.0).boost_alpha == 2.0
    with pytest.raises(ValueError, match="penalty must be >= 0"):
        build("l2r", penalty=-1.0)


def test_data_statistics_fill_a_loss_but_user_values_win():
    assert build("epr").criterion.expected_num_pos == 1.75
    assert build("epr", expected_num_pos=3.0).criterion.expected_num_pos == 3.0
    method = build("opml_sp")
    assert isinstance(method.algorithm, OPMLCorrection)
    assert [r.name for r in method.regularizers] == ["highrank"]
    assert sum(p["lr"] for p in build("role").param_groups(0.01)) == pytest.approx(0.1)


def test_unknown_hyperparameter_lists_valid_ones():
    with pytest.raises(ValueError, match=r"no hyperparameter 'alhpa'.*alpha.*beta.*theta"):
        check_hparams("em_apl", {"alhpa": 0.2})
    with pytest.raises(ValueError, match=r"no hyperparameter 'mu'; valid ones are: alpha, gamma, mixup_weight, numerics, tau_floor$"):
        check_hparams("pu_mlc", {"mu": 0.2})
    with pytest.raises(ValueError, match="valid names are"):
        get_method("nope")


def test_a_method_checks_a_runs_length_as_its_constructor_would():
    """check_run answers from the class what building the method for the run would refuse: APL's
    warm-up (EM+APL's 5 epochs by default) and CRISP's must end before the run does."""
    with pytest.raises(ValueError, match="APL needs warmup_epochs < num_epochs"):
        get_method("em_apl").check_run({}, 5)
    get_method("em_apl").check_run({}, 6)
    get_method("em_apl").check_run({"warmup_epochs": 1}, 2)  # the user's value, not the default
    with pytest.raises(ValueError, match="warmup_epochs=3 is not below the 3 epochs it trains"):
        get_method("crisp").check_run({"warmup_epochs": 3}, 3)
    with pytest.raises(ValueError, match="warmup_epochs=1 is not below the 1 epoch it trains"):
        get_method("crisp").check_run({}, 1)
    get_method("crisp").check_run({}, 2)
    with pytest.raises(ValueError, match="^method 'crisp_true_prior': warmup_epochs=2 is not below"):  # its own name
        get_method("crisp_true_prior").check_run({"warmup_epochs": 2}, 2)
    for name in ("an", "smile", "pu_mlc"):  # nothing to check: any length runs
        get_method(name).check_run({}, 1)
    for name, hparams, epochs in (("em_apl", {}, 5), ("crisp", {"warmup_epochs": 3}, 3),
                                  ("crisp_true_prior", {"warmup_epochs": 2}, 2)):  # the same refusal, word for word
        with pytest.raises(ValueError) as checked:
            get_method(name).check_run(hparams, epochs)
        with pytest.raises(ValueError) as built:
            METHODS[name](run_info(epochs=epochs), **hparams)
        assert str(built.value) == str(checked.value)


def test_label_matrices_of_the_references():
    assert method_label_matrix(METHODS["an"], OBS, None).tolist() == OBS.tolist()
    assert method_label_matrix(METHODS["bce"], OBS, TRUTH).tolist() == (2 * TRUTH.astype(int) - 1).tolist()
    assert method_label_matrix(METHODS["iun"], OBS, TRUTH).tolist() == [[1, 0, -1], [-1, 1, -1], [0, -1, 1], [1, -1, 0]]
    with pytest.raises(ValueError, match="needs the full training labels"):
        method_label_matrix(METHODS["bce"], OBS, None)
    assert [m for m in METHODS if METHODS[m].sees_more_labels] == ["bce", "iun", "crisp_true_prior"]
    assert METHODS["crisp_true_prior"].labels == "observed"  # it sees the truth's priors, not its labels


def test_every_part_a_method_names_is_registered():
    names = set(losses.available())
    for m in METHODS.values():
        for family, name in m.parts():
            assert name in (names if family == "loss" else {"apl", "opml_correction", "confident_positives"})


def test_declarations_come_from_the_parts_and_the_method():
    """What the plan reads is declared by the method class: the outputs its losses read, whether they
    batch, which settings a group may vary, whether a feature set means anything to it."""
    assert METHODS["lac"].requires == {"strong", "embeddings"} and not METHODS["lac"].batchable
    assert METHODS["plc"].requires == {"strong"} and not METHODS["plc"].on_features.trains
    assert METHODS["mime"].requires == {"latent"} and METHODS["mime"].on_features.trains
    assert METHODS["mime"].on_features.note.startswith("the label-query transformer")
    assert METHODS["smile"].group_varies == ("lr", "weight_decay")
    assert METHODS["pu_mlc"].batch_statistics == "process"
    assert METHODS["crisp"].epoch_arguments == ("probs", "state", "truth")
    assert METHODS["an"].epoch_arguments == ()  # nothing between epochs: no pass over the training rows
    assert METHODS["em_apl"].epoch_arguments == ("probs", "state") and METHODS["em_apl"].writes_labels
    assert not METHODS["crisp"].writes_labels and METHODS["ll_cp"].writes_labels
    assert METHODS["pu_mlc"].step_arguments == ("draws", "inputs", "forward")
    assert METHODS["boostlu_ll_cp"].model_parts({}) == {"cam_boost": 5.0}
    assert METHODS["lac"].model_parts({}) == {"image_head": "label_query"}
    assert METHODS["mime"].model_parts({}) == {"bottleneck": 256}


def test_a_hook_asks_only_for_what_the_protocol_offers():
    with pytest.raises(TypeError, match=r"Bad.loss asks for logits; it may ask for draws, inputs, forward"):
        class Bad(Method):
            def loss(self, out, batch, *, logits):  # noqa: ARG002
                return out.logits.sum()
    with pytest.raises(TypeError, match=r"Late.after_epoch asks for model"):
        class Late(Method):
            def after_epoch(self, epoch, *, model):  # noqa: ARG002
                return {}


@pytest.mark.parametrize("declaration, words", [
    ({"labels": "most"}, "labels must be one of observed, full, 1p_alln"),
    ({"requires": frozenset({"logits2"})}, "a method may require strong, embeddings, latent"),
    ({"group_varies": ("seed", "batch_size")}, "group_varies must name some of seed, lr, weight_decay"),
    ({"group_varies": ()}, "group_varies must name some of"),
    ({"batch_statistics": "local"}, "batch_statistics must be 'global' or 'process'"),
    ({"on_features": "yes"}, "on_features must be a spmlkit.methods.Meaning"),
    ({"threshold": 1.0}, "threshold must be a probability strictly between 0 and 1"),
])
def test_registration_refuses_a_declaration_no_run_could_honour(declaration, words):
    cls = type("Odd", (loss_method("an"),), dict(declaration))
    with pytest.raises(ValueError, match=words):
        register("odd_method_never_kept", "odd")(cls)
    assert "odd_method_never_kept" not in METHODS


def test_register_is_a_class_decorator_and_says_so_to_old_callers():
    with pytest.raises(TypeError, match=r"class decorator: @register\(name, description\)"):
        register(loss_method("an"))
    with pytest.raises(TypeError, match="register a subclass of spmlkit.methods.Method"):
        register("not_a_method", "x")(int)
    with pytest.raises(TypeError, match="is already the method 'an'; register a subclass"):
        register("an_again", "x")(METHODS["an"])


def test_a_one_line_method_belongs_to_the_module_that_makes_it():
    made = loss_method("an", on_features=Meaning(False, "why not"))
    assert made.__module__ == __name__  # a plug-in's one-liner has the plug-in as its origin
    assert made.made_of.loss == "an" and not made.on_features.trains
    kept = loss_method("ll_r", base=METHODS["boostlu_ll_r"].__mro__[1])
    assert not kept.on_features.trains  # the base's declarations stay unless given
