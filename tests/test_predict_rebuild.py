"""`spmlkit predict` and `export` rebuild a run's network as the trainer built it.

:func:`spmlkit.predict.load_model` reads a run's saved configuration back and builds its network
with :func:`spmlkit.training.network.build_run_model`, the trainer's own function. For every
kind of network a run can have, the network built as the trainer builds it is given weights of its
own (as training would), saved the way a run folder saves ``best.pt``, and loaded back: the
rebuilt network's probabilities equal the trained one's bit for bit (one process, the CPU). A
tiny trained run of the label-query head is then scored by `spmlkit predict` end to end.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fixtures.plugins import MY_LOSS, isolated_plugins
from spmlkit.io import atomic_torch_save
from spmlkit.predict import load_model
from spmlkit.training.checkpoint import plain_checkpoint
from spmlkit.training.config import config_from_dict
from spmlkit.training.network import build_run_model
from spmlkit.training.run_dir import RunDirectory

CLASSES = ["a", "b", "c"]
#: the digits mosaic's network, the smallest the label-query head accepts (128 channels)
IMAGES = {"dataset": "digits-mosaic", "backbone": "small:cnn", "pretrained": False, "image_size": 32}
FEATURES = {"dataset": "yeast"}
WIDTH = 12  # a feature run's input width

#: (settings, kind, what the rebuilt network must be): every kind of network a run can have
NETWORKS = {
    "linear feature head": ({**FEATURES, "method": "an"}, "features", "FeatureHead"),
    "mlp feature head": ({**FEATURES, "method": "an", "head": "mlp", "hidden": 16, "dropout": 0.5}, "features",
                         "FeatureHead"),
    "mime on features": ({**FEATURES, "method": "mime", "bottleneck": 8}, "features", "GaussianBottleneck"),
    "plain image head": ({**IMAGES, "method": "an"}, "images", "SPMLNet"),
    "mime on pooled images": ({**IMAGES, "method": "mime", "bottleneck": 8}, "images", "BottleneckNet"),
    "mime on label queries": ({**IMAGES, "method": "mime", "bottleneck": 8, "image_head": "label_query",
                               "constant_bn": True}, "images", "BottleneckNet"),
    "boostlu head": ({**IMAGES, "method": "boostlu_ll_r", "hparams": {"boost_alpha": 3.0}}, "images", "SPMLNet"),
    "lgconv": ({**IMAGES, "method": "an", "lgconv": True, "lgconv_bias": True, "lgconv_gamma_init": "normal"},
               "images", "SPMLNet"),
    "constant batchnorm": ({**IMAGES, "method": "an", "constant_bn": True}, "images", "SPMLNet"),
    "label queries (plc)": ({**IMAGES, "method": "plc", "image_head": "label_query", "constant_bn": True}, "images",
                            "LabelQueryNet"),
    "label queries with the projector (lac)": ({**IMAGES, "method": "lac", "image_head": "label_query",
                                                "constant_bn": True}, "images", "LabelQueryNet"),
}


def _trained(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with weights and statistics no fresh network has (what training would leave)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if not t.is_floating_point():
                continue
            if name.endswith("running_var"):
                t.mul_(torch.rand(t.shape, generator=g) + 0.5)
            else:
                t.add_(0.1 * torch.randn(t.shape, generator=g))
    return model.eval()


def _save_run(folder: Path, config, kind: str, model: torch.nn.Module, transform: dict) -> Path:
    """A run folder holding ``model`` as ``best.pt``, written as :meth:`RunDirectory.save_epoch` writes it."""
    run = RunDirectory(folder)
    run.start(config, resume=False, overwrite=False, kind=kind)
    extras = {"class_names": CLASSES, "threshold": 0.5, "transform": transform}
    atomic_torch_save(plain_checkpoint({"model": model.state_dict(), "components": {}, "label_state": {},
                                        "config": run.saved_config(config), "epoch": 1, "val_map": 0.5, **extras},
                                       "best.pt"), run.best)
    return folder


def _inputs(kind: str) -> torch.Tensor:
    shape = (4, WIDTH) if kind == "features" else (3, 3, 32, 32)
    return torch.randn(shape, generator=torch.Generator().manual_seed(2))


def _built_and_saved(folder: Path, settings: dict, kind: str, transform: dict | None = None
                     ) -> tuple[torch.nn.Module, Path]:
    config = config_from_dict({**settings, "device": "cpu"})
    torch.manual_seed(0)
    model = _trained(build_run_model(config, kind, len(CLASSES), WIDTH if kind == "features" else 0))
    if transform is None:
        transform = ({"kind": "features", "dim": WIDTH, "standardize": False} if kind == "features"
                     else {"kind": "imagenet", "size": 32})
    return model, _save_run(folder, config, kind, model, transform)


def _probabilities(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.sigmoid(model(x).logits)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("network", list(NETWORKS))
def test_predict_rebuilds_the_network_the_run_trained(network: str, tmp_path: Path) -> None:
    settings, kind, model_class = NETWORKS[network]
    trained, run = _built_and_saved(tmp_path / "run", settings, kind)
    torch.manual_seed(5)  # the rebuilt network's fresh weights differ from the trained ones: the file's must win
    rebuilt, ckpt, path = load_model(run)
    assert path == run / "best.pt" and type(rebuilt).__name__ == model_class
    assert not rebuilt.training
    assert getattr(rebuilt, "cam_boost", None) == getattr(trained, "cam_boost", None)
    x = _inputs(kind)
    assert torch.equal(_probabilities(rebuilt, x), _probabilities(trained, x))


@pytest.mark.usefixtures("one_thread")
def test_an_older_feature_checkpoint_gives_its_width_by_its_weights(tmp_path: Path) -> None:
    """A checkpoint that records no input width (older runs, runs of a batched group) is rebuilt
    with the width of its first matrix, for the MLP's hidden layer and MIME's bottleneck alike."""
    for name in ("mlp feature head", "mime on features"):
        settings, kind, _ = NETWORKS[name]
        trained, run = _built_and_saved(tmp_path / name.replace(" ", "_"), settings, kind, {"kind": "features"})
        rebuilt, _, _ = load_model(run)
        x = _inputs(kind)
        assert torch.equal(_probabilities(rebuilt, x), _probabilities(trained, x))


def test_a_checkpoint_whose_weights_do_not_fit_its_config_is_one_line(tmp_path: Path) -> None:
    settings, kind, _ = NETWORKS["label queries (plc)"]
    _, run = _built_and_saved(tmp_path / "run", {**settings, "method": "lac"}, kind)  # lac's weights: a projector
    ckpt = torch.load(run / "best.pt", weights_only=True)
    ckpt["config"]["method"]["name"] = "plc"  # the file says plc, which has no projector
    torch.save(ckpt, run / "best.pt")
    with pytest.raises(ValueError) as err:
        load_model(run)
    assert str(err.value) == (
        f"{run / 'best.pt'} holds model weights that do not fit its config (backbone 'small:cnn') (not in the "
        "model: head.projector.0.weight, head.projector.0.bias, head.projector.2.weight ...); the file was changed "
        "after training or mixes two runs: predict with the best.pt written by `spmlkit train`, or train the run "
        "again")


def test_a_file_that_is_not_a_run_checkpoint_is_one_line(tmp_path: Path) -> None:
    torch.save({"model": {}, "class_names": CLASSES}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match=r"x.pt is not an spmlkit run checkpoint \(no 'config'\); pass a run folder"):
        load_model(tmp_path / "x.pt")
    torch.save({"model": {}, "class_names": CLASSES, "config": {"model": {"backbone": "small:cnn"},
                                                                 "optimisation": {"lr": -1}}}, tmp_path / "y.pt")
    with pytest.raises(ValueError) as err:
        load_model(tmp_path / "y.pt")
    assert str(err.value) == (f"{tmp_path / 'y.pt'}: its saved configuration: lr must be a positive number, got -1; "
                              "the file was changed after training: use the best.pt written by `spmlkit train`, or "
                              "train the run again")


# ----------------------------------------------------------------------------- plug-ins (docs/plugins.md)
#: a plug-in's methods that add parts to the network: BoostLU's head, and MIME's bottleneck
MY_PARTS = '''\
from spmlkit.methods import loss_method, register
from spmlkit.methods.boostlu import BoostLU

register("my_boost", "AN with BoostLU's head", paper="me")(loss_method("an", base=BoostLU))
register("my_bottleneck", "MIME's loss and bottleneck", paper="me")(
    loss_method("mime", model_settings={"bottleneck": 8}))
'''


def _plugin(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "plugin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.usefixtures("one_thread")
def test_predict_loads_the_plugins_the_run_names_and_rebuilds_their_parts(tmp_path: Path, monkeypatch) -> None:
    from spmlkit.methods import METHODS
    from spmlkit.plugins import load_plugins

    plugin = _plugin(tmp_path, "my_parts.py", MY_PARTS)
    with isolated_plugins():
        load_plugins([str(plugin)])
        settings = {**IMAGES, "method": "my_boost", "hparams": {"boost_alpha": 3.0}, "plugins": [os.path.relpath(plugin)]}
        trained, run = _built_and_saved(tmp_path / "run", settings, "images")
    assert "- ../plugin/my_parts.py" in (run / "config.yaml").read_text()  # relative to the run folder
    monkeypatch.chdir(tmp_path / "plugin")  # elsewhere, and nothing loaded: the run names its plug-in
    with isolated_plugins():
        assert "my_boost" not in METHODS
        rebuilt, _, _ = load_model(run)
        assert rebuilt.cam_boost == 3.0
        x = _inputs("images")
        assert torch.equal(_probabilities(rebuilt, x), _probabilities(trained, x))


@pytest.mark.usefixtures("one_thread")
def test_a_plugin_method_whose_plugin_is_gone_predicts_when_its_network_is_plain(tmp_path: Path, caplog) -> None:
    """Its loss alone came from the plug-in: the network needs nothing of it, and a warning says so."""
    from spmlkit.plugins import load_plugins

    plugin = _plugin(tmp_path, "my_loss.py", MY_LOSS)
    with isolated_plugins():
        load_plugins([str(plugin)])
        trained, run = _built_and_saved(tmp_path / "run", {**FEATURES, "method": "my_loss",
                                                           "plugins": [str(plugin)]}, "features")
    plugin.unlink()
    with isolated_plugins(), caplog.at_level(logging.WARNING, logger="spmlkit.predict"):
        rebuilt, _, _ = load_model(run)
    x = _inputs("features")
    assert torch.equal(_probabilities(rebuilt, x), _probabilities(trained, x))
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{run / 'best.pt'}: method 'my_loss' is not known here (plug-in {plugin}: the file "
                              "does not exist")
    assert warning.endswith("its network is rebuilt without the parts a method may add (BoostLU's head, MIME's "
                            "bottleneck, LAC's projector): give the method's plug-in (--plugin) to rebuild it as "
                            "trained")


def test_a_plugin_method_whose_parts_are_unknown_is_refused_in_one_line(tmp_path: Path) -> None:
    from spmlkit.plugins import load_plugins

    plugin = _plugin(tmp_path, "my_parts.py", MY_PARTS)
    with isolated_plugins():
        load_plugins([str(plugin)])
        _, run = _built_and_saved(tmp_path / "run", {**FEATURES, "method": "my_bottleneck"}, "features")
    with isolated_plugins(), pytest.raises(ValueError) as err:  # the run named no plug-in (given by --plugin)
        load_model(run)
    assert str(err.value) == (
        f"{run / 'best.pt'} holds model weights that do not fit its config (head 'linear') (missing in the file: "
        "net.weight, net.bias; not in the model: hidden.weight, hidden.bias, stats.weight ...) as rebuilt without its "
        "method 'my_bottleneck', which is not known here: give the plug-in that registers it (--plugin)")


# ----------------------------------------------------------------------------- end to end
@pytest.mark.usefixtures("one_thread")
def test_spmlkit_predict_scores_images_with_a_trained_label_query_run(tmp_path: Path) -> None:
    """A run of the digits mosaic with the label-query head and no bottleneck (plc's and lac's network;
    their strong view needs colour photographs, so an's loss trains it here), scored by `spmlkit
    predict`: the scores are those of the trainer's network with the run's best weights."""
    from spmlkit.cli import main
    from spmlkit.data.digits_mosaic import export_png, make_digits_mosaic
    from spmlkit.data.images import ImageFileDataset, ImageTransform
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training import train
    from spmlkit.training.checkpoint import load_checkpoint

    config = resolve_config({**IMAGES, "method": "an", "image_head": "label_query", "constant_bn": True,
                             "mosaic_train": 40, "mosaic_test": 10, "batch_size": 16, "epochs": 1, "lr": 1e-3,
                             "num_workers": 0, "out": str(tmp_path / "run")})
    assert train(config).finished
    export_png(make_digits_mosaic(num_train=2, num_test=3, seed=0), tmp_path / "png")
    images = sorted((tmp_path / "png" / "images" / "test").iterdir())
    assert main(["predict", "--checkpoint", str(tmp_path / "run"), "--images", *map(str, images), "--out",
                 str(tmp_path / "preds"), "--quiet"]) == 0
    payload = json.loads((tmp_path / "preds.json").read_text())
    scores = np.array([[p["scores"][c] for c in payload["class_names"]] for p in payload["predictions"]])

    best = load_checkpoint(tmp_path / "run" / "best.pt")
    net = build_run_model(config, "images", len(best["class_names"]))
    net.load_state_dict(best["model"])
    dataset = ImageFileDataset(images, ImageTransform.from_spec(best["transform"]))
    x = torch.stack([dataset[i][0] for i in range(len(images))])
    expected = _probabilities(net.eval(), x).numpy()
    assert scores.shape == (3, 10)
    np.testing.assert_allclose(scores, expected, rtol=0, atol=5e-7)  # the JSON keeps float32's digits
