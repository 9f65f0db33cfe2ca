"""Loading a checkpoint never runs code: every file is read with torch.load(weights_only=True).

A run writes only tensors, plain containers, numbers, strings, bools and None (the numpy
random state as a plain dict), so the safe load reads everything spmlkit writes and a resume
still continues exactly; a file holding anything else (an older last.pt, a malicious pickle)
is refused in one line and its payload never runs.
"""

import os
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.experiments.presets import DATASET_DEFAULTS, resolve_config
from spmlkit.training import train
from spmlkit.training.checkpoint import load_checkpoint, numpy_rng_state, plain_checkpoint, set_numpy_rng_state

pytestmark = pytest.mark.usefixtures("one_thread")

MOSAIC = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 120, "mosaic_test": 30,
          "batch_size": 32}


class _Payload:
    """Unpickling this runs a shell command that creates ``marker``: what a malicious checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def _malicious_checkpoint(path: Path, marker: Path) -> Path:
    """A file that looks like a best.pt (model, config, class names) and carries the payload."""
    torch.save({"model": {"head.weight": torch.zeros(2, 2)}, "config": {"backbone": "small:cnn"},
                "class_names": ["a", "b"], "extras": _Payload(marker)}, path)
    return path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------ what a run writes


@pytest.mark.parametrize("method", ["an", "em_apl", "role", "gr", "opml_sp", "ll_cp", "pu_mlc", "crisp", "mime"])
def test_every_method_writes_safe_checkpoints_and_resumes_exactly(tmp_path, method):
    # MIME: pseudo-positives from its first epoch on, and a bottleneck drawing from the run's generator
    hp = {"warmup_epochs": 1} if method == "em_apl" else {"threshold": 0.2, "start_epoch": 1} if method == "mime" else {}
    settings = {"dataset": "yeast", "method": method, "subset": 300, "epochs": 4, "lr": 0.01, "hparams": hp,
                "device": "cpu"}
    cut = resolve_config({**settings, "out": str(tmp_path / "cut")})
    part = train(cut, stop_after=2)
    assert not part.finished and len(part.history) == 2
    for name in ("last.pt", "best.pt"):  # the plain load, no spmlkit code in between
        ckpt = torch.load(tmp_path / "cut" / name, map_location="cpu", weights_only=True)
        assert "model" in ckpt and "config" in ckpt
    rng = load_checkpoint(tmp_path / "cut" / "last.pt")["numpy_rng"]
    assert rng["key"].dtype == torch.int64 and rng["key"].shape == (624,)  # the uint32 words, picklable
    resumed = train(cut, resume=True)
    full = train(resolve_config({**settings, "out": str(tmp_path / "full")}))
    assert resumed.resumed_from == 2
    assert [h["val_map"] for h in resumed.history] == [h["val_map"] for h in full.history]
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in full.history]
    assert resumed.test_map == full.test_map
    assert torch.equal(resumed.label_state.kind, full.label_state.kind)
    a, b = load_checkpoint(tmp_path / "full" / "last.pt"), load_checkpoint(tmp_path / "cut" / "last.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_image_run_checkpoints_load_safely(tmp_path):
    train(resolve_config({**MOSAIC, "method": "em_apl", "epochs": 2, "hparams": {"warmup_epochs": 1},
                          "out": str(tmp_path / "run")}))
    for name in ("last.pt", "best.pt"):
        ckpt = torch.load(tmp_path / "run" / name, map_location="cpu", weights_only=True)
        assert ckpt["config"]["method"]["name"] == "em_apl"
    assert load_checkpoint(tmp_path / "run" / "best.pt")["transform"]["kind"] == "grey"


def test_the_numpy_random_state_round_trips_through_plain_data():
    np.random.seed(3)
    np.random.randn(1)  # leaves a cached Gaussian: has_gauss = 1
    state = numpy_rng_state()
    assert state["has_gauss"] == 1 and isinstance(state["cached_gaussian"], float)
    expected = np.random.randn(5)
    np.random.seed(99)
    set_numpy_rng_state(state)
    np.testing.assert_array_equal(np.random.randn(5), expected)


def test_plain_checkpoint_converts_numpy_and_refuses_objects():
    out = plain_checkpoint({"a": np.float64(0.5), "b": [np.int64(3), np.arange(3)], "c": (1, "x", None)})
    assert type(out["a"]) is float and type(out["b"][0]) is int
    assert torch.equal(out["b"][1], torch.arange(3)) and out["c"] == (1, "x", None)
    with pytest.raises(TypeError, match=r"last.pt\['loop'\]\['when'\] is a pathlib.*PosixPath.*state_dict"):
        plain_checkpoint({"loop": {"when": Path("/x")}}, "last.pt")


# ------------------------------------------------------------------ what the safe load refuses


def test_a_malicious_checkpoint_is_refused_and_its_payload_never_runs(tmp_path, capsys):
    marker = tmp_path / "PAYLOAD-RAN"
    evil = _malicious_checkpoint(tmp_path / "best.pt", marker)

    with pytest.raises(ValueError) as info:
        load_checkpoint(evil)
    message = str(info.value)
    assert "\n" not in message and str(evil) in message
    assert "holds Python objects that spmlkit does not load, for safety" in message
    assert "system" in message  # the object the file asked for: os.system
    assert "train the run again" in message and "not an spmlkit checkpoint" in message
    assert not marker.exists()

    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (8, 8)).save(images / "one.png")
    assert main(["predict", "--checkpoint", str(tmp_path), "--images", str(images)]) == 2
    assert "spmlkit does not load, for safety" in _one_line_error(capsys)
    assert main(["export", "--checkpoint", str(evil), "--format", "torchscript", "--out",
                 str(tmp_path / "m.pt")]) == 2
    assert "spmlkit does not load, for safety" in _one_line_error(capsys)
    assert not marker.exists() and not (tmp_path / "m.pt").exists()

    # the control: the same file loaded the unsafe way does run the payload
    torch.load(evil, weights_only=False)
    assert marker.exists()


def test_resume_refuses_a_malicious_last_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    train(resolve_config({"dataset": "yeast", "method": "an", "subset": 200, "epochs": 3, "out": str(run)}),
          stop_after=1)
    marker = tmp_path / "PAYLOAD-RAN"
    _malicious_checkpoint(run / "last.pt", marker)
    assert main(["train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume", "--quiet"]) == 2
    line = _one_line_error(capsys)
    assert str(run / "last.pt") in line and "for safety" in line
    assert not marker.exists()


def test_an_old_last_checkpoint_with_a_pickled_numpy_state_is_refused_with_the_way_out(tmp_path, capsys):
    run = tmp_path / "run"
    config = resolve_config({"dataset": "yeast", "method": "an", "subset": 200, "epochs": 3, "out": str(run)})
    train(config, stop_after=1)
    ckpt = load_checkpoint(run / "last.pt")
    ckpt["numpy_rng"] = np.random.get_state()  # as spmlkit wrote it before checkpoints were safe
    torch.save(ckpt, run / "last.pt")
    assert main(["train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume", "--quiet"]) == 2
    line = _one_line_error(capsys)
    assert "numpy" in line and "for safety" in line and "--overwrite" in line
    # the way out works: train again
    assert train(config, overwrite=True).finished


def test_damaged_and_foreign_files_are_one_line(tmp_path):
    truncated = tmp_path / "truncated.pt"
    torch.save({"model": {}}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:40])
    with pytest.raises(ValueError, match="cannot be read.*damaged or not an spmlkit checkpoint"):
        load_checkpoint(truncated)
    tensor_only = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor_only)
    with pytest.raises(ValueError, match="holds a Tensor, not an spmlkit checkpoint"):
        load_checkpoint(tensor_only)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
