"""User-side faults reported as one line (exit 2), not as a traceback from deep inside torch or PIL.

Three faults: pretrained weights requested on a machine that cannot download them; a
checkpoint whose class count does not match (``predict`` and ``train --resume``); images
that cannot be read, whether ``spmlkit prepare --check`` listed them or not. Nothing here
downloads: every download is made to fail, and the caches point at empty temporary folders.
"""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
import torch

from spmlkit.cli import main
from spmlkit.errors import InputError
from spmlkit.experiments.presets import DATASET_DEFAULTS
from spmlkit.training import train
from spmlkit.training.config import config_from_dict

BASE = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 240, "mosaic_test": 60,
        "hflip": True, "batch_size": 32}

pytestmark = pytest.mark.usefixtures("one_thread")


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's error output, checked to be the one-line form (no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------- 1. offline weights


def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty torch hub cache and a download that fails as it does without a network."""
    home = tmp_path / "torch-home"
    home.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(home))

    def no_network(url: str, *args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    # torchvision reaches the network through torch.hub.load_state_dict_from_url, which calls this
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    return home


def test_pretrained_weights_that_cannot_be_downloaded_are_one_clear_line(tmp_path, monkeypatch, capsys):
    home = _offline(monkeypatch, tmp_path)
    # digits-mosaic defaults to pretrained: false (its small CNN has no weights); the file asks for them,
    # as the benchmark datasets' defaults do
    settings = tmp_path / "pretrained.yaml"
    settings.write_text("pretrained: true\n")
    code = main(["train", "--dataset", "digits-mosaic", "--backbone", "torchvision:resnet18", "--config",
                 str(settings), "--epochs", "1", "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 2
    line = _one_line_error(capsys)
    expected_file = home / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    assert "ResNet18_Weights.IMAGENET1K_V1" in line and "torchvision:resnet18" in line
    assert str(expected_file) in line
    assert "--no-pretrained" in line and "cannot be downloaded" in line


def test_extract_without_a_network_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """The README's `extract` of one's own photos, offline: it gave a 107-line double traceback, exit 1, and
    left an empty feature folder. Now: train's one line, exit 2, and no folder."""
    from test_user_data_folder import _photos

    home = _offline(monkeypatch, tmp_path)
    prepared, feats = tmp_path / "prepared" / "photos", tmp_path / "features" / "photos"
    assert main(["prepare", "folder", "--root", str(_photos(tmp_path / "photos", per_class=2)), "--out",
                 str(prepared)]) == 0
    capsys.readouterr()
    assert main(["extract", "--prepared", str(prepared), "--features-out", str(feats), "--image-size", "32",
                 "--quiet"]) == 2  # the defaults: ResNet-50 with ImageNet weights
    line = _one_line_error(capsys)
    assert line.startswith("spmlkit extract: error: the pretrained weights ResNet50_Weights.IMAGENET1K_V1 of "
                           "'torchvision:resnet50' are not cached and cannot be downloaded")
    assert "--no-pretrained" in line and str(home / "hub" / "checkpoints" / "resnet50-0676ba61.pth") in line
    assert not feats.exists() and not feats.parent.exists()


def test_cached_pretrained_weights_are_used_without_a_download(tmp_path, monkeypatch):
    import torchvision

    from spmlkit.models import create_backbone

    home = _offline(monkeypatch, tmp_path)
    checkpoints = home / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    # the whole torchvision model's weights, as the real file holds them (fc included), where the message says
    full = torchvision.models.resnet18()
    torch.save(full.state_dict(), checkpoints / "resnet18-f37072fd.pth")
    body, channels = create_backbone("torchvision:resnet18", pretrained=True)
    assert channels == 512
    assert torch.equal(body.conv1.weight, full.conv1.weight)


def test_timm_weights_not_in_the_hugging_face_cache_name_the_cache(tmp_path, monkeypatch):
    timm = pytest.importorskip("timm")
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    from spmlkit.models import create_backbone

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))

    def no_network(*args: object, **kwargs: object) -> None:
        raise LocalEntryNotFoundError("cannot reach the Hub and the file is not in the local cache")

    monkeypatch.setattr(timm.models._hub, "hf_hub_download", no_network)
    with pytest.raises(ValueError) as info:
        create_backbone("timm:resnet18", pretrained=True)
    message = str(info.value)
    assert "\n" not in message and "--no-pretrained" in message
    assert "timm/resnet18" in message and str(tmp_path / "hf" / "models--timm--resnet18") in message


# ------------------------------------------------------------------- 2. checkpoint class counts


def test_predict_with_a_checkpoint_whose_class_names_disagree_with_its_weights(tmp_path, capsys):
    from spmlkit.data.digits_mosaic import export_png, make_digits_mosaic

    run = tmp_path / "run"
    train(config_from_dict({**BASE, "method": "an", "epochs": 1, "out": str(run)}))
    best = run / "best.pt"
    ckpt = torch.load(best, map_location="cpu", weights_only=False)
    assert len(ckpt["class_names"]) == 10
    ckpt["class_names"] = ckpt["class_names"][:5]
    torch.save(ckpt, best)
    export_png(make_digits_mosaic(num_train=2, num_test=2, seed=0), tmp_path / "png")

    code = main(["predict", "--checkpoint", str(run), "--images", str(tmp_path / "png" / "images" / "test"),
                 "--out", str(tmp_path / "pred"), "--quiet"])
    assert code == 2
    line = _one_line_error(capsys)
    assert str(best) in line
    assert "model weights for 10 classes but 5 class names" in line
    assert "head.weight: file [10, 128], model [5, 128]" in line
    assert not (tmp_path / "pred.csv").exists()


def test_resume_into_a_run_whose_last_checkpoint_has_another_class_count(tmp_path, capsys):
    run = tmp_path / "run"
    part = train(config_from_dict({**BASE, "method": "an", "epochs": 2, "out": str(run)}), stop_after=1)
    assert not part.finished   # as a killed job leaves it: last.pt after epoch 1 of 2
    last = run / "last.pt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    weight, bias = ckpt["model"]["head.weight"], ckpt["model"]["head.bias"]
    ckpt["model"]["head.weight"], ckpt["model"]["head.bias"] = weight[:7].clone(), bias[:7].clone()
    torch.save(ckpt, last)

    code = main(["train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume", "--quiet"])
    assert code == 2
    line = _one_line_error(capsys)
    assert str(last) in line
    assert "a model for 7 classes, but this run has 10 classes" in line
    assert "head.weight: file [7, 128], model [10, 128]" in line


def test_restore_refuses_a_model_of_another_class_count_before_loading(tmp_path):
    from spmlkit.models import build_model
    from spmlkit.training.run_dir import RunDirectory

    run_dir = RunDirectory(tmp_path)
    ckpt = {"model": build_model("small:cnn", 7).state_dict()}
    run_dir.check_compatible({"model": build_model("small:cnn", 10).state_dict()}, build_model("small:cnn", 10))
    with pytest.raises(ValueError, match=r"last\.pt holds a model for 7 classes, but this run has 10 classes"):
        run_dir.check_compatible(ckpt, build_model("small:cnn", 10))


# ------------------------------------------------------------------------- 3. unreadable images


def _miniature_voc(root: Path) -> Path:
    """A VOC 2012 layout with 30 train and 10 val images; one train image is not a JPEG at all."""
    from fixtures.image_formats import build_voc2012

    classes = ["person", "dog", "cat", "car"]
    train_ids = {f"2008_{i:06d}": {classes[i % 4]: 1, classes[(i + 1) % 4]: (1 if i % 3 == 0 else -1)}
                 for i in range(30)}
    val_ids = {f"2009_{i:06d}": {classes[i % 4]: 1} for i in range(10)}
    voc = build_voc2012(root, train_ids, val_ids)
    broken = voc / "JPEGImages" / "2008_000004.jpg"
    broken.write_bytes(b"this is not a JPEG, the download was cut off")
    return broken


def _train_voc(root: Path, run: Path, *extra: str) -> int:
    return main(["train", "--dataset", "voc2012", "--root", str(root), "--method", "an", "--backbone", "small:cnn",
                 "--no-pretrained", "--image-size", "32", "--epochs", "1", "--batch-size", "8", "--out", str(run),
                 "--quiet", *extra])


def test_train_stops_before_the_first_epoch_when_prepare_check_listed_bad_images(tmp_path, capsys):
    broken = _miniature_voc(tmp_path / "data")
    assert main(["prepare", "voc2012", "--root", str(tmp_path / "data"), "--check"]) == 1  # 1: bad images found
    prepared = tmp_path / "data" / "spmlkit-prepared" / "voc2012"
    assert "2008_000004.jpg" in (prepared / "bad_images.txt").read_text()
    capsys.readouterr()

    run = tmp_path / "run"
    assert _train_voc(tmp_path / "data", run) == 2
    line = _one_line_error(capsys)
    assert line.startswith("spmlkit train: error: 1 image of the voc2012 lists")
    assert str(broken) in line and str(prepared / "bad_images.txt") in line
    assert "re-download" in line and "--check" in line
    assert not (run / "metrics.json").exists() and not (run / "last.pt").exists()  # no epoch ran


def test_bad_images_outside_the_subset_do_not_stop_training(tmp_path, capsys):
    _miniature_voc(tmp_path / "data")
    assert main(["prepare", "voc2012", "--root", str(tmp_path / "data"), "--check"]) == 1
    cfg = config_from_dict({"dataset": "voc2012", "root": str(tmp_path / "data"), "method": "an",
                            "backbone": "small:cnn", "pretrained": False, "image_size": 32, "epochs": 1,
                            "batch_size": 8, "subset": 4, "val_frac": 0.25})
    from spmlkit.training.run_data import load_image_data

    images = load_image_data(cfg)   # 2008_000004 is row 4: outside the first 4 rows, so not refused
    assert len(images.paths["train"]) == 30
    capsys.readouterr()
    # and the run trains to its end, reading only its 4 rows (3 train, 1 validation) and the test list
    run = tmp_path / "run"
    code = _train_voc(tmp_path / "data", run, "--subset", "4", "--val-frac", "0.25")
    assert code == 0, f"training stopped: {capsys.readouterr().err.strip()[-500:]}"
    result = json.loads((run / "result.json").read_text())
    assert result["finished"] and len(result["history"]) == 1 and 0 < result["test_map"] <= 1


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unlisted_unreadable_image_is_one_line_naming_the_file(tmp_path, capsys, workers):
    broken = _miniature_voc(tmp_path / "data")
    assert main(["prepare", "voc2012", "--root", str(tmp_path / "data")]) == 0   # no --check: nothing listed
    capsys.readouterr()
    assert _train_voc(tmp_path / "data", tmp_path / "run", "--num-workers", str(workers)) == 2
    line = _one_line_error(capsys)
    assert line.startswith(f"spmlkit train: error: cannot read image {broken} (")
    assert "spmlkit prepare DATASET --root DIR --check" in line


def test_the_dataset_raises_an_input_error_that_survives_a_worker(tmp_path):
    from torch.utils.data import DataLoader

    from spmlkit.data.images import (
        ImageFileDataset,
        UnreadableImageError,
        ImageTransform,
    )

    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    dataset = ImageFileDataset([bad], ImageTransform(8))
    with pytest.raises(InputError, match=r"cannot read image .*bad\.jpg \(UnidentifiedImageError"):
        dataset[0]
    with pytest.raises(UnreadableImageError) as info:
        next(iter(DataLoader(dataset, batch_size=1, num_workers=1)))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"cannot read image {bad} (")
