"""MIME (docs/methods.md, "mime"): its loss, its Gaussian bottleneck and its pseudo-labels against
values worked by hand and finite differences; the method through the trainer (a batched group equal
to its solo runs, pseudo-labels made); what a run cannot give it, refused in one line; its presets.

The official code is compared one step at a time by tools/mime_one_step.py (numbers in the docs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spmlkit import losses
from spmlkit.errors import InputError
from spmlkit.experiments.presets import get_preset
from spmlkit.labeling import ConfidentPositives
from spmlkit.labels import Kind, LabelState
from spmlkit.models import BottleneckNet, GaussianBottleneck, create_backbone
from spmlkit.training import RunConfig, train, train_group
from spmlkit.training.network import check_network
from spmlkit.training.plan import plan_run

E = math.e
LN2 = math.log(2.0)

# ------------------------------------------------------------------------------------------- the loss
# logits (0, ln 3 / -ln 3, 0): p = (0.5, 0.75 / 0.25, 0.5); labels (1, 0 / 1, -1)
Z = torch.tensor([[0.0, math.log(3.0)], [-math.log(3.0), 0.0]], dtype=torch.float64)
Y = torch.tensor([[1.0, 0.0], [1.0, -1.0]], dtype=torch.float64)
# codes of width 2 per entry; KL(μ, σ) = -½(1 + 2 ln σ - μ² - σ²): (0, 1) -> 0, (1, 1) -> ½, (2, 1) -> 2,
# (0, e) -> (e² - 3)/2
MU = torch.tensor([[[0.0, 1.0], [2.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]]], dtype=torch.float64)
STD = torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[E, 1.0], [1.0, 1.0]]], dtype=torch.float64)
KL = torch.tensor([[0.25, 1.0], [(E * E - 3) / 4, 0.5]], dtype=torch.float64)  # each entry's mean over its code


def test_the_loss_of_a_batch_worked_by_hand() -> None:
    # BCE: -ln ½, -ln ¼ (label 0 at p = ¾), -ln ¼, -ln ½ (an observed negative is a negative): ln 2 · (1, 2, 2, 1)
    bce = torch.tensor([[LN2, 2 * LN2], [2 * LN2, LN2]], dtype=torch.float64)
    fn = losses.create("mime", beta=0.5, reduction="none")
    assert torch.allclose(fn(Z, Y, latent=(MU, STD)), bce + 0.5 * KL, atol=1e-15, rtol=0)
    # mean: 6 ln 2 / 4 + ½ · (0.25 + 1 + (e² - 3)/4 + 0.5)/4
    assert losses.create("mime", beta=0.5)(Z, Y, latent=(MU, STD)).item() == pytest.approx(1.3956287739315005, abs=1e-15)
    assert losses.create("mime", beta=0.5, reduction="sum")(Z, Y, latent=(MU, STD)).item() == pytest.approx(
        6 * LN2 + 0.5 * float(KL.sum()), abs=1e-14)


def test_the_gradients_worked_by_hand() -> None:
    z, mu, std = Z.clone().requires_grad_(), MU.clone().requires_grad_(), STD.clone().requires_grad_()
    losses.create("mime", beta=0.5)(z, Y, latent=(mu, std)).backward()
    # d/dz of the BC-mean: -(1 - p)/4 on label 1, p/4 elsewhere
    assert torch.allclose(z.grad, torch.tensor([[-0.125, 0.1875], [-0.1875, 0.125]], dtype=torch.float64), atol=1e-15)
    # β · d mean(KL)/dμ = ½ · μ / 8, and / dσ = ½ · (σ - 1/σ) / 8: 0 at σ = 1, (e - 1/e)/16 at σ = e
    assert torch.allclose(mu.grad, MU / 16, atol=1e-15)
    expected = torch.zeros_like(STD)
    expected[1, 0, 0] = (E - 1 / E) / 16
    assert torch.allclose(std.grad, expected, atol=1e-15)


def test_the_code_s_numerics_add_its_epsilon_inside_the_logarithms() -> None:
    hand = [-math.log(0.5 + 1e-5), -math.log(0.25 + 1e-5), -math.log(0.25 + 1e-5), -math.log(0.5 + 1e-5)]
    zero = torch.zeros_like(MU)
    value = losses.create("mime", beta=0.0, numerics="reference")(Z, Y, latent=(zero, torch.ones_like(MU)))
    assert value.item() == pytest.approx(sum(hand) / 4, abs=1e-15)
    assert value.item() != pytest.approx(1.5 * LN2, abs=1e-6)  # the stable form has no epsilon
    with pytest.raises(ValueError, match="numerics must be 'stable' or 'reference'"):
        losses.create("mime", numerics="exact")


def test_one_code_per_row_counts_as_each_class_s_code() -> None:
    mu, std = MU[:, 0], STD[:, 0]  # the codes of column 0, shared by both classes of a row
    shared = losses.create("mime", beta=0.5, reduction="none")(Z, Y, latent=(mu, std))
    each = losses.create("mime", beta=0.5, reduction="none")(
        Z, Y, latent=(mu.unsqueeze(1).expand(2, 2, 2), std.unsqueeze(1).expand(2, 2, 2)))
    assert torch.allclose(shared, each, atol=1e-15, rtol=0)
    assert losses.create("mime", beta=0.5)(Z, Y, latent=(mu, std)).item() == pytest.approx(float(shared.mean()),
                                                                                         abs=1e-15)


@pytest.mark.parametrize("numerics", ["stable", "reference"])
def test_the_loss_against_finite_differences(numerics: str) -> None:
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    mu = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    std = (torch.rand(3, 4, 5, generator=gen, dtype=torch.float64) + 0.3).requires_grad_()
    y = torch.tensor([[1.0, 0, 0, -1], [0, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.float64)
    fn = losses.create("mime", beta=0.3, numerics=numerics)
    assert torch.autograd.gradcheck(lambda a, b, c: fn(a, y, latent=(b, c)), (z, mu, std))


def test_the_loss_refuses_missing_or_misshapen_codes() -> None:
    fn = losses.create("mime")
    with pytest.raises(ValueError, match="needs the model's latent codes.*Gaussian bottleneck"):
        fn(Z, Y)
    with pytest.raises(ValueError, match="do not fit logits of shape"):
        fn(Z, Y, latent=(MU[:1], STD[:1]))


# ------------------------------------------------------------------------------------- the bottleneck
def _bottleneck(per_class: bool) -> GaussianBottleneck:
    """in 2, C 2, width 1: hidden = identity, s = (relu h1, 2 relu h2), so μ = relu h1 and σ = e^{relu h2};
    classifier weights (1, -2), biases (½, 0)."""
    m = GaussianBottleneck(2, 2, 1, samples=4, per_class=per_class).double()
    with torch.no_grad():
        m.hidden.weight.copy_(torch.eye(2)), m.hidden.bias.zero_()
        m.stats.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]])), m.stats.bias.zero_()
        m.classifier.weight.copy_(torch.tensor([[1.0], [-2.0]])), m.classifier.bias.copy_(torch.tensor([0.5, 0.0]))
    return m


def test_the_bottleneck_of_shared_features_worked_by_hand() -> None:
    m = _bottleneck(per_class=False)
    h = torch.tensor([[1.0, 0.5], [-1.0, 10.0]], dtype=torch.float64)  # row 1: μ = 0, σ clipped at e^6
    noise = torch.tensor([[0.2], [0.1]], dtype=torch.float64)
    logits, _, _, (mu, std) = m(h, noise=noise)
    assert torch.allclose(mu, torch.tensor([[1.0], [0.0]], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(std, torch.tensor([[math.exp(0.5)], [math.exp(6.0)]], dtype=torch.float64), rtol=1e-15)
    z0, z1 = 1 + 0.2 * math.exp(0.5), 0.1 * math.exp(6.0)  # z = μ + σ ε̄, one code per row
    hand = torch.tensor([[z0 + 0.5, -2 * z0], [z1 + 0.5, -2 * z1]], dtype=torch.float64)
    assert torch.allclose(logits, hand, atol=1e-12, rtol=0)
    m.eval()  # eval mode classifies μ: deterministic, whatever noise is passed
    assert torch.allclose(m(h, noise=noise).logits, torch.tensor([[1.5, -2.0], [0.5, 0.0]], dtype=torch.float64),
                          atol=1e-15)


def test_the_bottleneck_of_per_class_features_and_the_code_s_separate_draws() -> None:
    m = _bottleneck(per_class=True)
    h = torch.tensor([[[1.0, 0.5], [0.0, 1.0]]], dtype=torch.float64)  # class 0: μ 1, σ e^½; class 1: μ 0, σ e
    noise = torch.tensor([[[0.2], [-0.1]]], dtype=torch.float64)
    hand = torch.tensor([[1 + 0.2 * math.exp(0.5) + 0.5, -2 * (-0.1 * E)]], dtype=torch.float64)
    assert torch.allclose(m(h, noise=noise).logits, hand, atol=1e-12, rtol=0)
    # the code's form: 4 draws averaged as it averages its codes, mean_k(μ + σ ε_k), is the same code
    draws = torch.tensor([0.5, -0.1, 0.3, 0.1], dtype=torch.float64).view(4, 1, 1, 1) * torch.tensor(
        [[[1.0], [-0.5]]], dtype=torch.float64)
    assert torch.allclose(m(h, noise=draws).logits, hand, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="does not fit codes of shape"):
        m(h, noise=noise[..., 0])


def test_the_bottleneck_against_finite_differences() -> None:
    m = GaussianBottleneck(3, 4, 2, per_class=True).double()
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    noise = torch.randn(2, 4, 2, generator=gen, dtype=torch.float64)
    params = tuple(m.parameters())
    names = [n for n, _ in m.named_parameters()]

    def logits_of(x, *weights):
        state = dict(zip(names, weights))
        return torch.func.functional_call(m, state, (x,), {"noise": noise}).logits

    assert torch.autograd.gradcheck(logits_of, (h, *params))


def test_a_step_s_draws_have_the_variance_of_the_mean_of_its_samples() -> None:
    m = GaussianBottleneck(3, 5, 8, samples=10)
    draws = m.draw_noise(torch.Generator().manual_seed(0), 4000)
    assert draws.shape == (4000, 8)  # one code per row of shared features
    assert float(draws.std()) == pytest.approx(1 / math.sqrt(10), rel=0.01)
    assert torch.equal(draws, m.draw_noise(torch.Generator().manual_seed(0), 4000))  # the run's generator decides
    assert GaussianBottleneck(3, 5, 8, per_class=True).draw_noise(torch.Generator(), 2).shape == (2, 5, 8)


def test_the_image_model_with_label_queries_trains_every_part_after_the_backbone() -> None:
    torch.manual_seed(0)
    body, dim = create_backbone("small:cnn")
    model = BottleneckNet(body, dim, 3, 4, samples=2, label_queries=True)
    x = torch.randn(2, 3, 32, 32)
    logits, _, _, (mu, std) = model(x, noise=torch.zeros(2, 3, 4))
    assert logits.shape == (2, 3) and mu.shape == std.shape == (2, 3, 4)
    # the query head's own linear classifier is gone: the bottleneck classifies, nothing sits untrained
    assert not any(name.startswith("head.queries.weight") or name == "head.queries.bias"
                   for name, _ in model.named_parameters())
    groups = {g["name"]: g for g in model.param_groups(1e-4, 10.0)}
    head = {id(p) for p in groups["head"]["params"]}
    assert groups["head"]["lr"] == pytest.approx(1e-3) and head == {id(p) for p in model.head.parameters()}
    assert {id(p) for p in model.head["queries"].parameters()} <= head
    model.eval()
    assert torch.equal(model(x).logits, model(x).logits)  # predictions read μ
    pooled = BottleneckNet(body, dim, 3, 4)  # without queries: pooled features, one code per row
    assert pooled(x, noise=torch.zeros(2, 4)).latent[0].shape == (2, 4)


# --------------------------------------------------------------------------------------- pseudo-labels
def test_confident_positives_worked_by_hand() -> None:
    observed = np.array([[1, 0, 0], [0, 1, 0], [0, 0, -1]], dtype=np.int8)
    probs = torch.tensor([[0.9, 0.7, 0.6], [0.61, 0.2, 0.95], [0.1, 0.8, 0.99]])
    state = LabelState(observed)
    rule = ConfidentPositives(threshold=0.6, start_epoch=2)
    assert rule.step(probs, state, 1)["active"] is False and state.count(Kind.CORRECTED) == 0
    record = rule.step(probs, state, 2)
    # above 0.6 and unobserved: (0,1) 0.7, (1,0) 0.61, (1,2) 0.95, (2,1) 0.8; (0,2) is 0.6, not above; (0,0) is
    # observed, (2,2) an observed negative
    expected = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, -1]], dtype=torch.float32)
    assert torch.equal(state.effective_labels(), expected)
    assert record["positives"] == 4 and record["positives_per_class"].tolist() == [1, 2, 1]
    assert int((state.epoch == 2).sum()) == 4
    # a later round keeps every earlier positive and adds the new confident entries only
    later = rule.step(torch.tensor([[0.1, 0.1, 0.7], [0.1, 0.1, 0.1], [0.9, 0.1, 0.1]]), state, 3)
    expected[0, 2] = expected[2, 0] = 1
    assert torch.equal(state.effective_labels(), expected) and later["positives"] == 2
    assert int((state.epoch == 2).sum()) == 4 and int((state.epoch == 3).sum()) == 2


def test_confident_positives_refuse_bad_settings_and_other_checkpoints() -> None:
    with pytest.raises(ValueError, match=r"threshold must be a probability in \[0, 1\), got 1.0"):
        ConfidentPositives(threshold=1.0)
    with pytest.raises(ValueError, match="start_epoch must be a 1-indexed epoch"):
        ConfidentPositives(start_epoch=0)
    rule = ConfidentPositives(threshold=0.9)
    rule.load_state_dict(rule.state_dict())
    with pytest.raises(ValueError, match="resume with the original settings"):
        rule.load_state_dict({"threshold": 0.5, "start_epoch": 2})


# ----------------------------------------------------------------------------------- the method, run
def _config(**kw) -> RunConfig:
    settings = {"dataset": "yeast", "method": "mime", "subset": 300, "epochs": 3, "lr": 3e-3, "bottleneck": 16,
                "hparams": {"threshold": 0.2, "start_epoch": 1}}
    return RunConfig(**{**settings, **kw})


def test_a_batched_group_of_mime_runs_equals_its_solo_runs_and_makes_pseudo_labels() -> None:
    configs = [_config(seed=0), _config(seed=1, lr=1e-2)]
    group = train_group(configs)
    for config, batched in zip(configs, group):
        solo = train(config)
        a, b = solo.model.state_dict(), batched.model.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)  # each run's own draws: bit-identical
        assert solo.test_map == batched.test_map and solo.best_epoch == batched.best_epoch
        made = [h["labeling_positives"] for h in solo.history]  # the selected epoch's label state is kept
        assert made[0] > 0 and all(h["labeling_active"] for h in solo.history)
        assert solo.label_state.count(Kind.CORRECTED) == sum(made[:solo.best_epoch])


def test_what_a_run_cannot_give_mime_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="method 'mime' reads the model's latent, which the linear head does not "
                                         "give: a Gaussian bottleneck makes them: leave bottleneck unset"):
        plan_run(_config(bottleneck=0))
    with pytest.raises(InputError, match="bottleneck 16 is a model part whose KL term only a method that reads its "
                                         "codes trains, and method 'an' does not"):
        plan_run(_config(method="an", hparams={}))
    with pytest.raises(InputError, match="head 'mlp' would be a second one"):
        plan_run(_config(head="mlp"))
    images = RunConfig(dataset="voc2012", method="mime", linear_init_epochs=2)
    with pytest.raises(ValueError, match="LinearInit trains a linear layer.*Gaussian bottleneck"):
        check_network(images, "images")
    with pytest.raises(ValueError, match="bottleneck must be an integer >= 0"):
        RunConfig(bottleneck=-1)
    with pytest.raises(InputError, match="image_head only apply to image runs, but 'yeast' is a feature dataset"):
        plan_run(_config(image_head="label_query"))


def test_mime_image_presets_carry_the_code_s_settings_and_target_gr_table_2() -> None:
    for dataset, batch, start in (("voc2012", 32, 2), ("coco2014", 32, 2), ("nuswide", 16, 2), ("cub", 16, 5)):
        preset = get_preset(f"mime/{dataset}")
        cfg = preset.config
        assert (cfg["batch_size"], cfg["lr"], cfg["head_lr_mult"], cfg["optimizer"], cfg["epochs"]) == \
               (batch, 1e-4, 10.0, "adamax", 10)
        assert (cfg["image_head"], cfg["bottleneck"], cfg["bottleneck_samples"], cfg["weight_decay"]) == \
               ("label_query", 256, 10, 0.0)
        assert cfg["train_only"] == ["layer2", "layer3", "layer4", "head"] and cfg["constant_bn"] is True
        assert cfg["hparams"] == {"start_epoch": start, "beta": 1e-4, "threshold": 0.95}
        assert preset.target[0] == "GR"
    assert get_preset("mime/voc2012").target[1:3] == (89.20, 0.16)
    assert get_preset("mime/cub").target[1:3] == (21.89, 0.35)
