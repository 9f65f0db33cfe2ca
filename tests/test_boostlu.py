"""BoostLU (docs/methods.md, "boostlu_ll_r"): the boost and the boosted logits by hand and by gradcheck,
the model part, the recipes and presets, LL-Cp's record rule, and every run that cannot have class
activation maps refused in one line before anything is written.

The one-step equality with the official code is measured by tools/compare_boostlu_official.py (it needs
the official code, which this repository does not hold); its numbers are in docs/methods.md."""

import numpy as np
import pytest
import torch
from torch import nn

from spmlkit import losses
from spmlkit.cli import main
from spmlkit.errors import InputError
from spmlkit.experiments import benchmark as bm
from spmlkit.experiments.presets import PRESETS, resolve_config
from spmlkit.experiments.published import published
from spmlkit.labels import Kind
from spmlkit.methods import METHODS, check_hparams
from spmlkit.models import SPMLNet, boost_lu, boosted_logits, build_model
from spmlkit.training import train
from spmlkit.training.config import config_from_dict
from spmlkit.training.network import backbone_map_reason, check_network, network_spec

BOOSTLU = ("boostlu_ll_r", "boostlu_ll_ct", "boostlu_ll_cp")


# --------------------------------------------------------------------------- the formula
def test_boost_multiplies_positive_scores_only():
    cam = torch.tensor([-2.0, -0.5, 0.0, 0.25, 3.0])
    assert boost_lu(cam, 5.0).tolist() == [-2.0, -0.5, 0.0, 1.25, 15.0]


def test_boosted_logits_by_hand():
    """Two channels on a 2 x 2 map, one class: w = (1, -2), b = 0.5. The four locations score
    f1 - 2 f2 + 0.5 = 1.5, -1.5, 0.5, -0.5; boosted with alpha 4 they are 6, -1.5, 2, -0.5, whose mean
    is 1.5 (the plain head's logit, the mean of the unboosted scores, would be 0)."""
    f1 = torch.tensor([[1.0, 0.0], [2.0, 1.0]])
    f2 = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    features = torch.stack([f1, f2])[None]  # [1, 2, 2, 2]
    weight, bias = torch.tensor([[1.0, -2.0]]), torch.tensor([0.5])
    assert boosted_logits(features, weight, bias, 4.0).tolist() == [[1.5]]
    assert boosted_logits(features, weight, bias, 1.0).tolist() == [[0.0]]


def test_boosted_logits_gradients_pass_gradcheck_in_float64():
    """The boost is piecewise linear (slope alpha on positive scores, 1 elsewhere): away from scores of
    exactly zero its analytic gradient is the numerical one, for the map, the weights and the bias."""
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(2, 3, 3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, generator=gen, dtype=torch.float64, requires_grad=True)
    cam = torch.einsum("bdhw,cd->bchw", features, weight) + bias[:, None, None]
    assert cam.abs().min() > 1e-3  # no score within gradcheck's step of the kink
    assert (cam > 0).any() and (cam < 0).any()
    assert torch.autograd.gradcheck(lambda f, w, b: boosted_logits(f, w, b, 3.0), (features, weight, bias))


def test_the_gradient_of_a_score_is_alpha_where_positive_and_one_elsewhere():
    cam = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    boost_lu(cam, 5.0).sum().backward()
    assert cam.grad.tolist() == [1.0, 1.0, 5.0]


# --------------------------------------------------------------------------- the model part
class _Map(nn.Module):
    """A fixed 'backbone' returning its input: lets a test choose the feature map."""

    def forward(self, x):
        return x


def test_spmlnet_with_cam_boost_boosts_before_pooling_and_alpha_one_is_the_plain_head():
    torch.manual_seed(0)
    plain = SPMLNet(_Map(), 6, 3)
    boosted = SPMLNet(_Map(), 6, 3, cam_boost=5.0)
    boosted.load_state_dict(plain.state_dict())  # the same parameters, the same layout
    x = torch.randn(4, 6, 5, 5)
    cam = torch.einsum("bdhw,cd->bchw", x, plain.head.weight) + plain.head.bias[:, None, None]
    expected = torch.where(cam > 0, 5 * cam, cam).mean(dim=(2, 3))
    assert torch.allclose(boosted(x).logits, expected, atol=1e-6)
    assert not torch.allclose(boosted(x).logits, plain(x).logits, atol=1e-3)
    boosted.cam_boost = 1.0
    assert torch.allclose(boosted(x).logits, plain(x).logits, atol=1e-6)


def test_a_backbone_without_a_spatial_map_is_refused_by_the_forward():
    class Tokens(nn.Module):
        def forward(self, x):
            return x.flatten(2).transpose(1, 2)  # [B, h*w, D], as a vision transformer's tokens

    net = SPMLNet(Tokens(), 6, 3, cam_boost=5.0)
    with pytest.raises(ValueError, match=r"BoostLU boosts class activation maps, but the backbone has none: its "
                                         r"output is a sequence of tokens \(2, 16, 6\)"):
        net(torch.zeros(2, 6, 4, 4))


@pytest.mark.parametrize("alpha", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_cam_boost_must_be_a_positive_number(alpha):
    with pytest.raises(ValueError, match="cam_boost .BoostLU's alpha. must be a positive number"):
        SPMLNet(_Map(), 6, 3, cam_boost=alpha)


# --------------------------------------------------------------------------- the recipes
def test_recipes_pair_the_large_loss_schemes_with_boostlu_and_their_alpha_is_a_knob():
    assert [METHODS[m].made_of.loss for m in BOOSTLU] == ["ll_r", "ll_ct", "ll_cp"]
    assert METHODS["boostlu_ll_r"].model_parts({}) == {"cam_boost": 5.0}

    def alpha(method, **hparams):
        return network_spec(config_from_dict({"dataset": "digits-mosaic", "method": method, "hparams": hparams}),
                            "images").cam_boost

    assert alpha("boostlu_ll_r") == 5.0
    assert alpha("boostlu_ll_cp", boost_alpha=3, delta_rel=0.1) == 3.0
    assert METHODS["boostlu_ll_cp"].made_of.loss_kwargs == {"record": "ge"}
    assert alpha("ll_r") is None
    with pytest.raises(ValueError, match="method 'll_r' has no hyperparameter 'boost_alpha'"):
        check_hparams("ll_r", {"boost_alpha": 5.0})
    with pytest.raises(ValueError, match="boost_alpha .BoostLU's alpha. must be a positive number, got -1"):
        alpha("boostlu_ll_r", boost_alpha=-1)


def test_ll_cp_records_above_lambda_and_the_boostlu_recipe_records_lambda_too():
    """Epoch 2 at delta_rel 50 %: k = ceil(4 * 0.5) = 2 of one row's four entries. The unobserved losses
    softplus(z) are 2.127 (z=2), 1.313 (z=1) and 0.313 (z=-1), so lambda = 1.313: the step corrects the
    two largest, the LL code records the one above lambda, the BoostLU code both."""
    logits, labels = torch.tensor([[0.0, 2.0, 1.0, -1.0]]), torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    recorded = {}
    for record in ("gt", "ge"):
        loss = losses.create("ll_cp", delta_rel=50.0, record=record)
        loss.set_epoch(2, 10)
        recorded[record] = loss.corrections(logits, labels)[0].tolist()
    assert recorded == {"gt": [False, True, False, False], "ge": [False, True, True, False]}
    with pytest.raises(ValueError, match="record must be 'gt' .* or 'ge'"):
        losses.create("ll_cp", record=">")


def test_a_benchmark_of_features_leaves_them_out_and_one_of_images_keeps_them():
    assert all(METHODS[m].on_features.note.startswith("BoostLU boosts class activation maps") for m in BOOSTLU)
    assert not any(METHODS[m].on_features.trains for m in BOOSTLU)
    assert not set(BOOSTLU) & set(bm.BenchmarkSpec(dataset="yeast").methods)
    assert set(BOOSTLU) <= set(bm.BenchmarkSpec(dataset="digits-mosaic").methods)


# --------------------------------------------------------------------------- presets and targets
def test_presets_carry_the_official_codes_values_and_crisps_targets():
    for method, delta in zip(BOOSTLU, (0.5, 0.2, 0.1)):
        for dataset in ("voc2012", "coco2014", "nuswide", "cub"):
            preset = PRESETS[f"{method}/{dataset}"]
            cfg = preset.config
            assert (cfg["lr"], cfg["batch_size"], cfg["epochs"], cfg["head_lr_mult"]) == (1e-5, 16, 10, 10.0)
            assert cfg["hparams"] == {"delta_rel": delta, "boost_alpha": 5.0}
            assert "stop_drop" not in cfg and "patience" not in cfg
            assert [t.table for t in preset.targets] == ["CRISP Table 1", "BoostLU Table 1"]
    assert PRESETS["boostlu_ll_r/coco2014"].target.mean == 73.272
    assert PRESETS["boostlu_ll_cp/cub"].target[1:3] == (18.166, 0.063)
    assert published("boostlu_ll_ct", "nuswide", source="BoostLU")[0].mean == 48.37
    config = resolve_config(preset="boostlu_ll_cp/voc2012")
    assert (config.method.name, config.schedule.stop_drop, config.schedule.patience) == ("boostlu_ll_cp", None, None)


# --------------------------------------------------------------------------- refusals
def _config(**values):
    return config_from_dict({"dataset": "digits-mosaic", "backbone": "small:cnn", "image_size": 32,
                             "method": "boostlu_ll_r", **values})


def test_a_feature_run_is_refused_in_one_line():
    with pytest.raises(ValueError) as err:
        check_network(config_from_dict({"dataset": "yeast", "method": "boostlu_ll_ct"}), "features")
    assert str(err.value) == (
        "method 'boostlu_ll_ct' has no meaning on a feature dataset ('yeast'): BoostLU boosts class activation maps, "
        "which need a convolutional backbone's spatial feature map [B, D, h, w]; pooled features have none; train "
        "it on an image dataset, or use ll_ct on it")
    check_network(config_from_dict({"dataset": "yeast", "method": "ll_ct"}), "features")  # the plain method runs
    with pytest.raises(InputError, match=r"^method 'boostlu_ll_ct' has no meaning on a feature dataset \('yeast'\)"):
        train(config_from_dict({"dataset": "yeast", "method": "boostlu_ll_ct"}))  # refused by the run's plan


def test_linear_init_the_label_query_head_and_a_token_backbone_are_refused():
    with pytest.raises(ValueError, match=r"cannot train with LinearInit \(linear_init_epochs 3\): LinearInit "
                                         r"trains the linear layer on pooled features, but BoostLU boosts"):
        check_network(_config(linear_init_epochs=3), "images")
    with pytest.raises(ValueError, match=r"needs a convolutional backbone's spatial feature map \[B, D, h, w\] "
                                         r"\(BoostLU boosts class activation maps\), but timm:vit_tiny_patch16_224 "
                                         r"has none: its output is a sequence of tokens \(1, 197, 192\)"):
        check_network(_config(backbone="timm:vit_tiny_patch16_224", image_size=224), "images")
    with pytest.raises(ValueError, match=r"needs the linear head applied at every location .BoostLU boosts class "
                                         r"activation maps., and image_head label_query has none; set image_head: "
                                         r"linear"):
        check_network(_config(image_head="label_query"), "images")
    assert backbone_map_reason("torchvision:resnet18", 64) is None
    check_network(_config(), "images")


def test_a_benchmark_naming_boostlu_on_a_feature_set_is_refused_before_any_run(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["benchmark", "--dataset", "yeast", "--methods", "an,boostlu_ll_r", "--out", str(out),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "method 'boostlu_ll_r' has no meaning on a feature dataset ('yeast')" in err
    assert not (out / "results.db").exists()  # refused while the grid is checked: no run, no record


# --------------------------------------------------------------------------- a run, end to end
@pytest.mark.usefixtures("one_thread")
def test_an_image_run_trains_boosted_records_what_it_corrected_and_predicts_boosted(tmp_path):
    """boostlu_ll_cp on the digits mosaic: 96 training rows in batches of 32, so epoch 2 has 3 steps,
    each with k = ceil(32 * 10 * 0.001) = 1 entry to correct. The BoostLU code records that entry
    (the LL code's rule, loss > lambda, would record none); the saved model predicts with its alpha."""
    from spmlkit.predict import load_model
    from spmlkit.training.checkpoint import load_checkpoint
    from spmlkit.training.plan import plan_run

    run = tmp_path / "run"
    config = config_from_dict({"dataset": "digits-mosaic", "backbone": "small:cnn", "pretrained": False,
                               "image_size": 32, "hflip": True, "mosaic_train": 120, "mosaic_test": 20,
                               "batch_size": 32, "lr": 3e-3, "epochs": 2, "device": "cpu",
                               "method": "boostlu_ll_cp", "hparams": {"delta_rel": 0.1, "boost_alpha": 3.0},
                               "out": str(run)})
    assert plan_run(config).build_model().cam_boost == 3.0  # the model the run trains
    result = train(config)
    assert result.finished
    kinds = load_checkpoint(run / "last.pt")["label_state"]["kind"]
    assert int((kinds == Kind.CORRECTED).sum()) == 3
    model, _, _ = load_model(run)
    assert model.cam_boost == 3.0
    plain = build_model("small:cnn", 10, pretrained=False)
    plain.load_state_dict(model.state_dict())
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain.eval()
        features = plain.backbone(x)
        cam = torch.einsum("bdhw,cd->bchw", features, plain.head.weight) + plain.head.bias[:, None, None]
        centre = cam.mean(dim=(0, 2, 3))
        for net in (model, plain):  # scores of both signs (a short SPML run scores nearly all negative)
            net.head.bias -= centre
        assert (cam - centre[:, None, None] > 0).any() and (cam - centre[:, None, None] < 0).any()
        assert torch.equal(model(x).logits, boosted_logits(features, plain.head.weight, plain.head.bias, 3.0))
        assert not torch.allclose(model(x).logits, plain(x).logits, atol=1e-3)
    assert np.isfinite(result.test_map)
