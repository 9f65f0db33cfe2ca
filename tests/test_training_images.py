"""Image pipeline end to end on the digits mosaic (CPU, small CNN, a few hundred images).

Runs whose numbers are compared name the CPU (``device: cpu``, ``--device cpu``): under the
default ``auto`` an image run trains on a GPU where there is one, whose numbers differ."""

import json

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.experiments.presets import DATASET_DEFAULTS
from spmlkit.training.checkpoint import load_checkpoint
from spmlkit.training.config import config_from_dict
from spmlkit.training import train

BASE = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 240, "mosaic_test": 60,
        "hflip": True, "batch_size": 32, "device": "cpu"}


pytestmark = pytest.mark.usefixtures("one_thread")


def test_resume_reaches_the_same_result_as_an_uninterrupted_run(tmp_path):
    cfg = {**BASE, "method": "em_apl", "epochs": 4, "hparams": {"warmup_epochs": 2}}
    full = train(config_from_dict({**cfg, "out": str(tmp_path / "full")}))
    part = train(config_from_dict({**cfg, "out": str(tmp_path / "cut")}), stop_after=2)
    assert not part.finished and len(part.history) == 2
    resumed = train(config_from_dict({**cfg, "out": str(tmp_path / "cut")}), resume=True)
    assert resumed.resumed_from == 2
    assert [h["val_map"] for h in resumed.history] == [h["val_map"] for h in full.history]
    assert resumed.test_map == full.test_map
    a, b = load_checkpoint(tmp_path / "full" / "best.pt"), load_checkpoint(tmp_path / "cut" / "best.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert torch.equal(a["label_state"]["kind"], b["label_state"]["kind"])
    assert a["label_state"]["kind"].eq(4).sum() > 0  # APL pseudo-negatives were made and restored


def test_resume_refuses_a_changed_config(tmp_path):
    cfg = {**BASE, "method": "an", "epochs": 2, "out": str(tmp_path / "run")}
    train(config_from_dict(cfg), stop_after=1)
    with pytest.raises(ValueError, match="different settings.*lr"):
        train(config_from_dict({**cfg, "lr": 0.1}), resume=True)


def test_train_then_predict_on_exported_mosaics(tmp_path, capsys):
    from spmlkit.data.digits_mosaic import export_png, make_digits_mosaic

    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits-mosaic", "--method", "an", "--epochs", "2", "--device", "cpu",
                 "--out", str(run), "--quiet"]) == 0
    for name in ("config.yaml", "metrics.csv", "metrics.json", "best.pt", "last.pt", "result.json"):
        assert (run / name).is_file(), name
    history = json.loads((run / "metrics.json").read_text())
    assert len(history) == 2 and history[0]["images_per_second"] > 0
    mosaic = make_digits_mosaic(num_train=4, num_test=6, seed=0)
    export_png(mosaic, tmp_path / "png")
    (tmp_path / "png" / "images" / "test" / "zz_broken.png").write_text("not a png")
    out = tmp_path / "pred"
    assert main(["predict", "--checkpoint", str(run), "--images", str(tmp_path / "png" / "images" / "test"),
                 "--out", str(out), "--quiet", "--threshold", "0.5"]) == 1   # 1: an image was skipped
    payload = json.loads((tmp_path / "pred.json").read_text())
    assert len(payload["predictions"]) == 6 and list(payload["skipped"]) == [str(tmp_path / "png/images/test/zz_broken.png")]
    # the file path gives the same scores as the in-memory test set through the trained model
    from spmlkit.data.digits_mosaic import DigitsMosaicDataset
    from spmlkit.predict import load_predictor

    model, classes, _, _ = load_predictor(run)
    x = torch.stack([DigitsMosaicDataset(mosaic.test_images)[i][0] for i in range(6)])
    expected = torch.sigmoid(model(x).logits).detach().numpy()
    got = np.array([[p["scores"][c] for c in classes] for p in payload["predictions"]])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    labels = [p["labels"] for p in payload["predictions"]]
    assert labels == [[c for c, s in zip(classes, row) if s >= 0.5] for row in expected]


def test_extract_then_feature_training_round_trip(tmp_path):
    from spmlkit.data.feature_dir import load_feature_dir
    from spmlkit.models import build_model

    feats = tmp_path / "feats"
    assert main(["extract", "--dataset", "digits-mosaic", "--no-pretrained", "--features-out", str(feats),
                 "--quiet", "--seed", "0", "--device", "cpu"]) == 0  # compared with the model on the CPU below
    ds = load_feature_dir(feats)
    assert ds.X_train.shape == (2000, 128) and ds.Y_test.shape == (1000, 10)
    # features equal the pooled backbone output of the same (seeded) model
    torch.manual_seed(0)
    from spmlkit.data.digits_mosaic import DigitsMosaicDataset, make_digits_mosaic

    mosaic = make_digits_mosaic(num_train=2000, num_test=1000, seed=0)
    model = build_model("small:cnn", 10, pretrained=False).eval()
    x = torch.stack([DigitsMosaicDataset(mosaic.test_images)[i][0] for i in range(5)])
    with torch.no_grad():
        np.testing.assert_allclose(ds.X_test[:5], model.features(x).numpy(), atol=1e-5)
    out = tmp_path / "res"
    assert main(["train", "--features", str(feats), "--method", "em", "--epochs", "2", "--device", "cpu",
                 "--out", str(out)]) == 0
    res = json.loads((out / "result.json").read_text())
    assert res["config"]["data"]["dataset"] == str(feats)
    # the reported test mAP is scikit-learn's AP of the kept head on the test features, z-scored with
    # the training rows' mean and std that best.pt records, computed here without spmlkit
    from sklearn.metrics import average_precision_score

    best = load_checkpoint(out / "best.pt")
    spec, weights = best["transform"], best["model"]
    mean, std = (spec[k].numpy().astype(np.float32) for k in ("mean", "std"))  # the run's float32 statistics
    z = torch.from_numpy((ds.X_test - mean) / std)
    probs = torch.sigmoid(torch.nn.functional.linear(z, weights["net.weight"], weights["net.bias"])).numpy()
    assert ds.Y_test.sum(0).min() > 0  # every class has test positives: no empty-class convention involved
    ap = [average_precision_score(ds.Y_test[:, c], probs[:, c]) for c in range(ds.Y_test.shape[1])]
    assert res["test_ap"] == pytest.approx(ap, abs=1e-12)
    assert res["test_map"] == pytest.approx(float(np.mean(ap)), abs=1e-12)


def test_config_layers_preset_then_file_then_command_line(tmp_path):
    from spmlkit.cli import build_parser
    from spmlkit.cli.train import resolve_from_args as resolve_train_config

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("lr: 0.0002\nepochs: 3\nhparams:\n  beta: 0.5\n")
    args = build_parser().parse_args(["train", "--preset", "em_apl/voc2012", "--config", str(cfg_file),
                                      "--epochs", "4", "--root", "/data"])
    cfg = resolve_train_config(args)
    assert (cfg.data.dataset, cfg.method.name, cfg.optimisation.batch_size, cfg.data.image_size) == ("voc2012", "em_apl", 8, 448)  # preset
    assert cfg.optimisation.lr == 0.0002 and cfg.schedule.epochs == 4                                                      # file, cli
    assert cfg.method.hparams == {"alpha": 0.2, "beta": 0.5, "warmup_epochs": 5, "theta": 0.9}
    assert cfg.schedule.patience == 0 and cfg.output.out == "runs/voc2012/em_apl/seed0"
    cfg_file.write_text("lrr: 1\n")
    with pytest.raises(ValueError, match="unknown setting.*lrr"):
        resolve_train_config(build_parser().parse_args(["train", "--config", str(cfg_file)]))


def test_linear_init_then_fine_tune_with_role(tmp_path):
    cfg = config_from_dict({**BASE, "method": "role", "epochs": 1, "linear_init_epochs": 2, "linear_init_lr": 0.01,
                            "out": str(tmp_path / "run")})
    res = train(cfg)
    assert res.finished and len(res.history) == 1   # phase 1 is not an epoch of the run's history
    ckpt = load_checkpoint(tmp_path / "run" / "best.pt")
    phi = ckpt["method"]["criterion.estimator.phi"]
    # the estimator starts phase 2 from phase 1 through the clamped logit: bounded by logit(1 - 1e-5)
    assert phi.abs().max() <= np.log((1 - 1e-5) / 1e-5) + 1e-3
    plain = train(config_from_dict({**BASE, "method": "role", "epochs": 1, "out": str(tmp_path / "plain")}))
    ref = load_checkpoint(tmp_path / "plain" / "best.pt")
    # phase 1 really trained the head and the estimator: phase 2 starts elsewhere and ends elsewhere
    assert not torch.equal(ckpt["model"]["head.weight"], ref["model"]["head.weight"])
    assert not torch.equal(phi, ref["method"]["criterion.estimator.phi"])
    assert res.history[0]["val_map"] != plain.history[0]["val_map"]


def test_prepare_then_train_on_a_miniature_voc(tmp_path):
    from fixtures.image_formats import build_voc2012

    classes = ["person", "dog", "cat", "car"]
    train = {f"2008_{i:06d}": {classes[i % 4]: 1, classes[(i + 1) % 4]: (1 if i % 3 == 0 else -1)} for i in range(30)}
    val = {f"2009_{i:06d}": {classes[i % 4]: 1} for i in range(10)}
    build_voc2012(tmp_path / "data", train, val)
    assert main(["prepare", "voc2012", "--root", str(tmp_path / "data")]) == 0
    prepared = tmp_path / "data" / "spmlkit-prepared" / "voc2012"
    assert (prepared / "meta.json").is_file()
    run = tmp_path / "run"
    assert main(["train", "--dataset", "voc2012", "--root", str(tmp_path / "data"), "--method", "em_apl",
                 "--backbone", "small:cnn", "--no-pretrained", "--image-size", "32", "--epochs", "2",
                 "--batch-size", "8", "--lr", "0.001", "--hparam", "warmup_epochs=1", "--device", "cpu",
                 "--out", str(run), "--quiet"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert len(result["test_ap"]) == 20 and len(result["class_names"]) == 20
    # a class without test positives scores AP 0 and stays in the mean (docs/protocol.md, "Metrics")
    present = {result["class_names"].index(c) for c in classes}
    assert all(ap == 0 for c, ap in enumerate(result["test_ap"]) if c not in present)
    assert result["test_map"] == pytest.approx(sum(result["test_ap"]) / 20, abs=1e-15)
    # APL ran on image predictions: one round after epoch 1 (warm-up 1 of 2 epochs), each class
    # taking floor(theta * its unobserved training entries / 1 round) of them (em_apl/voc2012: theta 0.9)
    from spmlkit.data.formats import load_prepared
    from spmlkit.protocol import Observation, split_train_val

    observed = Observation.parse("single_positive").apply(load_prepared(prepared).train_labels)
    unobserved = (observed[split_train_val(30, val_frac=0.2)[0]] == 0).sum(0)
    quota = sum(int(np.floor(0.9 * u)) for u in unobserved)
    history = json.loads((run / "metrics.json").read_text())
    assert [h["pseudo_negatives"] for h in history] == [quota, quota]


def test_train_errors_are_clear(tmp_path, capsys):
    assert main(["train", "--dataset", "voc2012", "--method", "an"]) == 2
    assert "needs --root" in capsys.readouterr().err
    assert main(["train", "--dataset", "voc2012", "--root", str(tmp_path), "--method", "an"]) == 2
    err = capsys.readouterr().err
    assert "VOCdevkit" in err and "Traceback" not in err
