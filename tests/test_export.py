"""`spmlkit export`: the exported ONNX and TorchScript models score like the PyTorch model.

An image run (the digits mosaic, small CNN) and a feature run (yeast, FeatureHead) are
exported to both formats; the exported files are run with onnxruntime and torch.jit.load on
the same inputs as the model `spmlkit predict` loads, and the sidecar is checked to say what
a deployment needs (class names, input size and normalisation, thresholds).
"""

import json
import sys

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.errors import InputError
from spmlkit.experiments.presets import DATASET_DEFAULTS, resolve_config
from spmlkit.export import TOLERANCE, export_model
from spmlkit.predict import load_predictor
from spmlkit.training import train

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")

BASE = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 240, "mosaic_test": 60,
        "hflip": True, "batch_size": 32}


def _quietly(run):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "mosaic"
    _quietly(lambda: train(resolve_config({**BASE, "method": "an", "epochs": 1, "out": str(out)})))
    return out


@pytest.fixture(scope="module")
def feature_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "yeast"
    res = _quietly(lambda: train(resolve_config({"dataset": "yeast", "method": "em", "epochs": 3, "lr": 0.01,
                                                 "out": str(out)})))
    return out, res


def _mosaic_images(n: int = 6) -> torch.Tensor:
    """Test images of the digits mosaic, transformed as in training (what the exported model expects)."""
    from spmlkit.data.digits_mosaic import DigitsMosaicDataset, make_digits_mosaic

    mosaic = make_digits_mosaic(num_train=4, num_test=n, seed=0)
    return torch.stack([DigitsMosaicDataset(mosaic.test_images)[i][0] for i in range(n)])


def test_onnx_and_torchscript_score_like_the_pytorch_model(image_run, tmp_path):
    model, classes, threshold, spec = load_predictor(image_run)
    x = _mosaic_images(6)  # 6 images: another batch size than the export traced with
    with torch.no_grad():
        expected = torch.sigmoid(model(x).logits).numpy()

    onnx_out = export_model(image_run, "onnx", tmp_path / "mosaic.onnx")
    session = onnxruntime.InferenceSession(str(onnx_out.model_path), providers=["CPUExecutionProvider"])
    (got_onnx,) = session.run(None, {"images": x.numpy()})
    ts_out = export_model(image_run, "torchscript", tmp_path / "mosaic.torchscript.pt")
    with torch.no_grad():
        got_ts = torch.jit.load(str(ts_out.model_path))(x).numpy()

    diff_onnx, diff_ts = np.abs(got_onnx - expected).max(), np.abs(got_ts - expected).max()
    print(f"max abs difference from PyTorch: ONNX {diff_onnx:.2e}, TorchScript {diff_ts:.2e}")
    assert got_onnx.shape == got_ts.shape == (6, 10)
    assert diff_onnx <= 1e-4 and diff_ts <= 1e-4

    for result in (onnx_out, ts_out):
        sidecar = json.loads(result.sidecar_path.read_text())
        assert result.sidecar_path.name == result.model_path.name + ".json"
        record = json.loads((image_run / "result.json").read_text())
        # the threshold predict uses by default: the one the run selected on validation
        assert sidecar["class_names"] == classes
        assert sidecar["threshold"] == threshold == record["test_metrics"]["threshold_val_global"]
        assert sidecar["thresholds"]["method"] == 0.5  # AN's fixed one, kept beside it
        assert sidecar["input"]["shape"] == ["batch", 3, 32, 32] and sidecar["input"]["kind"] == "images"
        assert sidecar["input"]["transform"] == spec and spec["kind"] == "grey"
        assert sidecar["input"]["mean"] == [spec["mean"]] * 3 and sidecar["input"]["std"] == [spec["std"]] * 3
        assert "sigmoid is applied" in sidecar["output"]["meaning"]
        assert sidecar["method"] == "an" and sidecar["spmlkit_version"]
        assert 0 <= sidecar["check"]["max_abs_diff"] <= TOLERANCE
        assert sidecar["thresholds"]["val_global"] == record["test_metrics"]["threshold_val_global"]
    assert json.loads(onnx_out.sidecar_path.read_text())["opset"] >= 13


def test_export_on_the_command_line_writes_beside_the_run(image_run, capsys):
    assert main(["export", "--checkpoint", str(image_run), "--format", "onnx"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps a long path's line anywhere
    sidecar = json.loads((image_run / "model.onnx.json").read_text())
    assert "model.onnx" in out and f"max abs difference {sidecar['check']['max_abs_diff']:.1e}" in out
    assert main(["export", "--checkpoint", str(image_run / "best.pt"), "--format", "torchscript"]) == 0
    # the files written beside the run score like the run's model
    model = load_predictor(image_run)[0]
    x = _mosaic_images(4)
    with torch.no_grad():
        expected = torch.sigmoid(model(x).logits).numpy()
        got_ts = torch.jit.load(str(image_run / "model.torchscript.pt"))(x).numpy()
    session = onnxruntime.InferenceSession(str(image_run / "model.onnx"), providers=["CPUExecutionProvider"])
    (got_onnx,) = session.run(None, {"images": x.numpy()})
    assert np.abs(got_onnx - expected).max() <= 1e-4 and np.abs(got_ts - expected).max() <= 1e-4


def test_a_feature_run_exports_with_its_standardisation(feature_run, tmp_path):
    from spmlkit.data import registry
    from spmlkit.protocol import split_train_val
    from spmlkit.training.run_data import feature_scaling

    run, res = feature_run
    ds = registry.load_features("yeast")
    train_rows = split_train_val(len(ds.X_train))[0]
    mean, std = feature_scaling(ds.X_train[train_rows])
    for fmt in ("onnx", "torchscript"):
        result = export_model(run, fmt, tmp_path / f"yeast.{fmt}")
        sidecar = json.loads(result.sidecar_path.read_text())
        spec = sidecar["input"]
        assert spec["kind"] == "features" and spec["shape"] == ["batch", 103] and spec["standardized"]
        np.testing.assert_allclose(spec["mean"], mean, rtol=0, atol=0)
        np.testing.assert_allclose(spec["std"], std, rtol=0, atol=0)
        assert sidecar["class_names"] == res.class_names and sidecar["thresholds"]["method"] == 0.75  # EM's
        assert sidecar["threshold"] == res.test_metrics["threshold_val_global"]  # what predict would use
        # raw test rows, standardised with the sidecar's numbers, through the exported file ...
        x = ((ds.X_test - np.array(spec["mean"])) / np.array(spec["std"])).astype(np.float32)
        if fmt == "onnx":
            session = onnxruntime.InferenceSession(str(result.model_path), providers=["CPUExecutionProvider"])
            (got,) = session.run(None, {"features": x})
        else:
            with torch.no_grad():
                got = torch.jit.load(str(result.model_path))(torch.from_numpy(x)).numpy()
        # ... score like the run's model on the features it was tested on
        with torch.no_grad():
            expected = torch.sigmoid(res.model(torch.from_numpy(x)).logits).numpy()
        assert np.abs(got - expected).max() <= 1e-4


def test_predict_refuses_a_feature_run_in_one_line(feature_run, tmp_path, capsys):
    from PIL import Image

    run, _ = feature_run
    Image.new("RGB", (8, 8)).save(tmp_path / "one.png")
    assert main(["predict", "--checkpoint", str(run), "--images", str(tmp_path / "one.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "run on features, not images" in err and "spmlkit export" in err


def test_a_missing_onnx_package_is_one_line_with_the_pip_command(image_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if not installed
    assert main(["export", "--checkpoint", str(image_run), "--format", "onnx", "--out", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and 'pip install "spmlkit[export]"' in err
    assert not (tmp_path / "m.onnx").exists()


def test_export_mistakes_are_input_errors(image_run, tmp_path):
    with pytest.raises(InputError, match="unknown export format 'tflite'"):
        export_model(image_run, "tflite")
    with pytest.raises(InputError, match="is a folder"):
        export_model(image_run, "onnx", tmp_path)
    with pytest.raises(InputError, match="not found"):
        export_model(tmp_path / "no-run", "onnx")
