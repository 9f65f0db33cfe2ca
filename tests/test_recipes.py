"""Recipes (docs/protocol.md, "Recipes"): schedules, weight EMA, frozen parts, crops, resume.

Every check compares numbers: the learning rates with torch.optim.lr_scheduler's own for the same
settings, the EMA with the update written out by hand, frozen weights and BatchNorm statistics
bit for bit, and a run stopped and resumed mid-schedule with the uninterrupted one.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler

from spmlkit.data.crops import CropPolicy
from spmlkit.errors import InputError
from spmlkit.experiments.presets import DATASET_DEFAULTS, get_preset, resolve_config
from spmlkit.models import build_model
from spmlkit.training import train
from spmlkit.training.checkpoint import load_checkpoint
from spmlkit.training.config import RecipeConfig, config_from_dict
from spmlkit.training.distributed import Distributed
from spmlkit.training.plan import plan_run, unbatchable_reason
from spmlkit.training.recipe import Recipe, global_batch_size, steps_per_epoch

pytestmark = pytest.mark.usefixtures("one_thread")

FEATURES = {"dataset": "yeast", "method": "an", "subset": 300, "device": "cpu"}
IMAGES = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "method": "an", "mosaic_train": 80,
          "mosaic_test": 20, "batch_size": 16, "device": "cpu", "lgconv": True}


def _optimizer(kind: str = "adam") -> torch.optim.Optimizer:
    params = [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2))]
    groups = [{"params": params[:1], "lr": 1e-3}, {"params": params[1:], "lr": 1e-2}]  # a head at 10x lr
    return torch.optim.Adam(groups) if kind == "adam" else torch.optim.SGD(groups, lr=1e-3, momentum=0.9)


def _trace(optimizer: torch.optim.Optimizer, step, n: int) -> list[tuple]:
    """(lr, beta1 or momentum) of every group before each of ``n`` steps; ``step`` advances the schedule."""
    out = []
    for _ in range(n):
        out.append(tuple((g["lr"], g["betas"][0] if "betas" in g else g["momentum"]) for g in optimizer.param_groups))
        optimizer.step()
        step()
    return out


@pytest.mark.parametrize("settings, reference", [
    # PU-MLC's official settings: one-cycle over 80 epochs, 20 % warm-up, OneCycleLR's defaults otherwise
    ({"lr_schedule": "onecycle", "schedule_epochs": 80, "warmup_frac": 0.2},
     lambda opt, spe: lr_scheduler.OneCycleLR(opt, max_lr=[1e-3, 1e-2], epochs=80, steps_per_epoch=spe, pct_start=0.2)),
    ({"lr_schedule": "onecycle", "schedule_epochs": 12, "warmup_frac": 0.25, "anneal": "linear", "div_factor": 10.0,
      "final_div_factor": 100.0, "cycle_momentum": False},
     lambda opt, spe: lr_scheduler.OneCycleLR(opt, max_lr=[1e-3, 1e-2], total_steps=12 * spe, pct_start=0.25,
                                              anneal_strategy="linear", div_factor=10, final_div_factor=100,
                                              cycle_momentum=False)),
    ({"lr_schedule": "cosine", "min_lr": 1e-5},
     lambda opt, spe: lr_scheduler.CosineAnnealingLR(opt, T_max=6 * spe, eta_min=1e-5)),
    ({"lr_schedule": "step", "step_epochs": 2, "step_gamma": 0.5},
     lambda opt, spe: lr_scheduler.StepLR(opt, step_size=2 * spe, gamma=0.5)),
])
def test_each_schedule_gives_torch_s_learning_rates_step_by_step(settings, reference):
    spe, epochs = 7, 6  # a run of 6 epochs of 7 steps; the one-cycle schedules are longer and stop early
    ours, theirs = _optimizer(), _optimizer()
    recipe = Recipe(RecipeConfig(**settings), nn.Linear(1, 1), ours, epochs=epochs, steps=spe)
    expected = reference(theirs, spe)
    got = _trace(ours, lambda: recipe.after_step(nn.Linear(1, 1)), spe * epochs)
    want = _trace(theirs, expected.step, spe * epochs)
    assert got == want  # every group's lr (and Adam's beta1, which one-cycle cycles), exactly
    assert len({lr for step in got for lr, _ in step}) >= 6  # the schedule moved (step: 3 values per group)


def test_a_run_follows_its_schedule_and_stops_inside_it():
    config = resolve_config({**FEATURES, "epochs": 3, "lr_schedule": "onecycle", "schedule_epochs": 8,
                             "warmup_frac": 0.2})
    spe = steps_per_epoch(len(plan_run(config).split.train_idx), config.optimisation.batch_size)
    assert spe == math.ceil(240 / 64)  # 300 rows, 20 % held out, batch 64
    result = train(config)
    opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=config.optimisation.lr)
    ref = lr_scheduler.OneCycleLR(opt, max_lr=config.optimisation.lr, total_steps=8 * spe, pct_start=0.2)
    expected = []
    for epoch in range(3):
        for _ in range(spe):
            opt.step()
            ref.step()
        expected.append(opt.param_groups[0]["lr"])
    assert [h["lr"] for h in result.history] == expected
    assert expected[-1] > config.optimisation.lr / 25 / 1e4 * 10  # stopped well before the schedule's end


def test_ema_weights_equal_the_update_written_out():
    torch.manual_seed(0)
    model = nn.Linear(3, 2).double()
    start = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    recipe = Recipe(RecipeConfig(ema_decay=0.9), model, opt, epochs=1, steps=3)
    hand = start
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(4, 3, dtype=torch.float64)).pow(2).sum().backward()
        opt.step()
        recipe.after_step(model)
        hand = [0.9 * h + 0.1 * p.detach() for h, p in zip(hand, model.parameters())]
    for averaged, expected, plain in zip(recipe.ema.module.parameters(), hand, model.parameters()):
        assert torch.allclose(averaged, expected, rtol=0, atol=1e-15)
        assert not torch.allclose(averaged, plain)  # an average, not a copy
    # step one already averaged with the starting weights (the official ModelEma), not copied
    assert not torch.allclose(hand[0], start[0])


def test_frozen_parts_and_batchnorm_statistics_do_not_move_while_the_trained_parts_do():
    parts = ["lgconv_global", "stages.3", "head"]
    config = resolve_config({**IMAGES, "epochs": 1, "val_frac": 0.0, "train_only": parts, "freeze_bn": True})
    before = plan_run(config).build_model().state_dict()  # the run's own initial weights (same seed)
    after = train(config).model.state_dict()
    trained = {k for k in after if k.startswith("head.") or k.startswith("backbone.stages.3.")
               or (".conv." not in k and any(f".{n}." in k for n in ("reduce", "attend", "gate", "value", "project",
                                                                      "norm")))}
    stats = [k for k in after if k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    assert len(stats) > 30 and any("stages.3" in k for k in stats) and any(".norm.running" in k for k in stats)
    for key in after:
        if key in stats or key not in trained:
            assert torch.equal(before[key], after[key]), key
    moved = [k for k in trained if k not in stats and not torch.equal(before[k], after[k])]
    assert "head.weight" in moved and any(k.startswith("backbone.stages.3.") and ".conv." in k for k in moved)
    assert any(k.endswith(".value.weight") for k in moved)  # an LgConv global branch outside stages.3
    assert not any(k.startswith("backbone.stem.") for k in moved)  # the stem is frozen


def test_a_feature_run_resumed_mid_schedule_with_ema_equals_an_uninterrupted_one(tmp_path):
    # lr 0.1: steps large enough that the averaged weights win the epochs after the cut (on Yeast's
    # official split the plain weights win every epoch at smaller lrs), so the resumed EMA is what is compared
    cfg = {**FEATURES, "epochs": 4, "lr": 0.1, "lr_schedule": "onecycle", "schedule_epochs": 6, "warmup_frac": 0.2,
           "ema_decay": 0.8}
    full = train(resolve_config({**cfg, "out": str(tmp_path / "full")}))
    cut = resolve_config({**cfg, "out": str(tmp_path / "cut")})
    assert not train(cut, stop_after=2).finished
    resumed = train(cut, resume=True)
    keep = ("epoch", "train_loss", "val_map", "val_map_plain", "val_map_ema", "ema_selected", "lr")
    assert resumed.resumed_from == 2
    assert [[h[k] for k in keep] for h in resumed.history] == [[h[k] for k in keep] for h in full.history]
    assert resumed.test_map == full.test_map
    assert {h["ema_selected"] for h in full.history} == {0.0, 1.0}  # both kinds of weights won an epoch here
    a, b = load_checkpoint(tmp_path / "full" / "last.pt"), load_checkpoint(tmp_path / "cut" / "last.pt")
    assert a["recipe"]["scheduler"]["last_epoch"] == b["recipe"]["scheduler"]["last_epoch"] == 4 * 4
    for key in a["recipe"]["ema"]:
        assert torch.equal(a["recipe"]["ema"][key], b["recipe"]["ema"][key]), key
    best_a, best_b = load_checkpoint(tmp_path / "full" / "best.pt"), load_checkpoint(tmp_path / "cut" / "best.pt")
    assert all(torch.equal(best_a["model"][k], best_b["model"][k]) for k in best_a["model"])


def test_an_image_run_with_the_whole_recipe_resumes_bit_for_bit_and_predicts(tmp_path):
    from spmlkit.predict import load_model

    cfg = {**IMAGES, "epochs": 2, "lr_schedule": "onecycle", "schedule_epochs": 3, "ema_decay": 0.9,
           "train_only": ["lgconv_global", "stages.3", "head"], "freeze_bn": True, "augment": "multiscale_crop",
           "crop_scale": 32, "crop_sizes": [32, 24, 16], "lgconv_bias": True, "lgconv_gamma_init": "normal"}
    full = train(resolve_config({**cfg, "out": str(tmp_path / "full")}))
    cut = resolve_config({**cfg, "out": str(tmp_path / "cut")})
    train(cut, stop_after=1)
    resumed = train(cut, resume=True)
    keep = ("val_map", "val_map_plain", "val_map_ema", "ema_selected", "lr", "train_loss")
    assert [[h[k] for k in keep] for h in resumed.history] == [[h[k] for k in keep] for h in full.history]
    a, b = load_checkpoint(tmp_path / "full" / "last.pt"), load_checkpoint(tmp_path / "cut" / "last.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert any(k.endswith(".project.bias") for k in a["model"])  # the official LgConv's projection bias
    model, _, _ = load_model(tmp_path / "full")  # `spmlkit predict` rebuilds that LgConv variant
    assert model.state_dict().keys() == a["model"].keys()


def test_crops_cut_the_drawn_square_and_resize_it():
    policy = CropPolicy(scale=8, sizes=(4, 6, 8), size=4)
    boxes = policy.draw(500, torch.Generator().manual_seed(0))
    assert set(boxes.side.tolist()) == {4, 6, 8}
    assert (boxes.top >= 0).all() and (boxes.top + boxes.side <= 8).all() and (boxes.left + boxes.side <= 8).all()
    assert {(int(t), int(s)) for t, s in zip(boxes.top, boxes.side) if s == 4} >= {(0, 4), (4, 4)}  # both edges
    pixels = torch.arange(2 * 8 * 8 * 3, dtype=torch.int64).remainder(256).to(torch.uint8).view(2, 8, 8, 3)
    chosen = boxes.rows([0, 1])
    chosen = type(chosen)(torch.tensor([4, 8]), torch.tensor([3, 0]), torch.tensor([1, 0]))
    out = policy.apply(pixels, chosen)
    assert torch.equal(out[0], pixels[0, 3:7, 1:5])  # a crop of the output's side: the pixels themselves
    flat = torch.full((1, 8, 8, 3), 77, dtype=torch.uint8)  # a uniform image stays uniform at any zoom
    assert torch.equal(policy.apply(flat, type(chosen)(torch.tensor([6]), torch.tensor([1]), torch.tensor([2]))),
                       torch.full((1, 4, 4, 3), 77, dtype=torch.uint8))


def test_the_device_resize_of_a_crop_is_within_one_grey_level_of_pil_bicubic():
    from PIL import Image

    from spmlkit.data.crops import CropBoxes

    small = np.random.default_rng(0).integers(0, 256, (16, 16, 3)).astype(np.uint8)
    image = np.array(Image.fromarray(small).resize((128, 128), Image.BICUBIC))  # as the loader reads it
    policy = CropPolicy(scale=128, sizes=(128, 96, 64), size=112)
    for side, top, left in ((128, 0, 0), (96, 5, 30), (64, 64, 1)):
        ours = policy.apply(torch.from_numpy(image)[None], CropBoxes(*(torch.tensor([v]) for v in (side, top, left))))
        pil = Image.fromarray(image[top : top + side, left : left + side]).resize((112, 112), Image.BICUBIC)
        diff = np.abs(ours[0].numpy().astype(int) - np.asarray(pil).astype(int))
        assert diff.max() <= 1 and diff.mean() < 0.5, (side, diff.max(), diff.mean())


def test_batch_per_process_multiplies_by_the_processes():
    config = config_from_dict({"batch_size": 45, "batch_per": "process"})
    assert global_batch_size(config, Distributed(rank=0, world_size=2)) == 90
    assert global_batch_size(config_from_dict({"batch_size": 90}), Distributed(rank=0, world_size=2)) == 90
    assert global_batch_size(config, Distributed()) == 45


def test_drop_last_trains_only_full_batches():
    from spmlkit.training.sources import FeatureSource

    X = torch.arange(10, dtype=torch.float32)[:, None]
    for drop_last, sizes in ((False, [4, 4, 2]), (True, [4, 4])):
        source = FeatureSource(X, X[:0], None, 4, drop_last=drop_last)
        batches = list(source.train_batches([torch.Generator().manual_seed(0)]))
        assert [idx.shape[1] for _, idx in batches] == sizes
        assert steps_per_epoch(10, 4, drop_last) == len(sizes)
    taken = torch.cat([idx[0] for _, idx in batches])
    assert len(set(taken.tolist())) == 8  # two full batches of distinct rows; the last two rows wait
    assert get_preset("pu_mlc/voc2007-official").config["drop_last"] is True


def test_recipe_mistakes_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="schedule_epochs 3 is shorter than epochs 5"):
        config_from_dict({"epochs": 5, "lr_schedule": "cosine", "schedule_epochs": 3})
    with pytest.raises(ValueError, match="schedule_epochs given but lr_schedule is 'none'"):
        config_from_dict({"schedule_epochs": 80})
    with pytest.raises(ValueError, match="ema_decay must be in \\(0, 1\\)"):
        config_from_dict({"ema_decay": 1.0})
    with pytest.raises(ValueError, match="lgconv is off"):
        config_from_dict({"lgconv_bias": True})
    with pytest.raises(ValueError, match="needs step_epochs"):
        config_from_dict({"lr_schedule": "step"})
    # refused while planning, before the run folder exists
    for settings, reason in (({"train_only": ["layer9"]}, "train_only names 'layer9'.*backbone.stages"),
                             ({"drop_last": True, "batch_size": 128}, "drop_last drops every batch shorter than 128"),
                             ({"augment": "multiscale_crop"}, "crop_scale 512 differs .* set crop_scale to 32"),
                             ({"augment": "multiscale_crop", "crop_scale": 32, "crop_sizes": [32], "decode": "gpu"},
                              "multiscale_crop reads the training images with PIL")):
        with pytest.raises(InputError, match=reason):
            train(resolve_config({**IMAGES, "epochs": 1, **settings, "out": str(tmp_path / "run")}))
        assert not (tmp_path / "run").exists()
    assert "recipe" in unbatchable_reason(config_from_dict({**FEATURES, "ema_decay": 0.9}))
    assert unbatchable_reason(config_from_dict(FEATURES)) is None


def test_lgconv_projection_bias_and_normal_gamma():
    torch.manual_seed(0)
    model = build_model("small:cnn", 3, lgconv=True, lgconv_options={"project_bias": True, "gamma_init": "normal"})
    norms = [m.norm.weight for m in model.modules() if hasattr(m, "project")]
    assert all(m.project.bias is not None for m in model.modules() if hasattr(m, "project"))
    gammas = torch.cat([w.detach() for w in norms])
    assert gammas.abs().max() < 1e-3 and gammas.std() > 0  # N(0, 1e-4): small, and not one constant
    assert np.isclose(float(gammas.std()), 1e-4, rtol=0.2)


@pytest.mark.parametrize("dataset, batch, lr, epochs, ema", [("voc2007", 90, 4e-5, 56, 0.991),
                                                            ("coco2014", 70, 1e-4, 41, 0.9997)])
def test_the_official_pu_mlc_presets_carry_the_code_s_recipe(dataset, batch, lr, epochs, ema):
    official = resolve_config(preset=f"pu_mlc/{dataset}-official")
    recipe = official.recipe
    assert (official.optimisation.batch_size, recipe.batch_per, recipe.drop_last) == (batch, "global", True)
    assert (official.optimisation.lr, official.optimisation.weight_decay, official.optimisation.optimizer) == \
        (lr, 1e-4, "adam")
    assert (official.schedule.epochs, recipe.lr_schedule, recipe.schedule_epochs, recipe.warmup_frac) == \
        (epochs, "onecycle", 80, 0.2)
    assert (recipe.ema_decay, recipe.train_only, recipe.freeze_bn) == (ema, ["lgconv_global", "layer4", "head"], True)
    assert (recipe.augment, recipe.crop_scale, recipe.crop_sizes, official.data.image_size) == \
        ("multiscale_crop", 512, [512, 448, 384, 320, 256], 448)
    assert (official.model.backbone, official.model.lgconv, recipe.lgconv_bias, recipe.lgconv_gamma_init) == \
        ("torchvision:resnet101", True, True, "normal")
    simple = resolve_config(preset=f"pu_mlc/{dataset}")  # spmlkit's simpler recipe, as before
    assert simple.recipe == RecipeConfig() and simple.optimisation.batch_size == batch // 2
    assert official.method.hparams == simple.method.hparams and official.data.observation == "ratio=0.1"


def test_frozen_batchnorm_weights_stay_frozen_when_distributed_cpu_runs_convert_them():
    from spmlkit.training.distributed import GlobalBatchNorm

    model = build_model("small:cnn", 3)
    model.backbone.stages[3].bn1.weight.requires_grad_(False)
    converted = GlobalBatchNorm.convert(model)
    assert isinstance(converted.backbone.stages[3].bn1, GlobalBatchNorm)
    assert not converted.backbone.stages[3].bn1.weight.requires_grad and converted.backbone.stages[3].bn1.bias.requires_grad
