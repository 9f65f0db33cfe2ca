"""Which threshold decides a label: `predict` and `export` use the run's validation-selected one
unless a threshold is given (0 included), and the headline names every F1 by its threshold
(docs/protocol.md, "Which threshold decides a label")."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.cli.train import f1_summary
from spmlkit.experiments.presets import DATASET_DEFAULTS, resolve_config
from spmlkit.metrics.threshold_selection import select_thresholds
from spmlkit.training import train

BASE = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 240, "mosaic_test": 60,
        "batch_size": 32}
#: what the metrics of the field add to every run's test metrics (docs/protocol.md, "Metrics of the field")
FIELD_KEYS = ("ranking_loss", "one_error", "coverage", "example_ap",
              *(f"{k}@{t}" for k in ("hamming_loss", "example_f1", "micro_f1", "macro_f1")
                for t in ("0.5", "0.75", "val_global", "val_class")))


#: the test split's probabilities and labels the trained run of :func:`run` was evaluated on
EVALUATED: dict[str, np.ndarray] = {}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One digits-mosaic run; the probabilities its evaluation saw are kept in :data:`EVALUATED`."""
    from spmlkit.training import trainer

    def watched(test_probs, test_targets, **kwargs):
        EVALUATED.update(probs=np.asarray(test_probs), targets=np.asarray(test_targets),
                         val_probs=np.asarray(kwargs["val_probs"]), val_targets=np.asarray(kwargs["val_targets"]))
        return evaluate(test_probs, test_targets, **kwargs)

    out = tmp_path_factory.mktemp("thresholds") / "mosaic"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    evaluate = trainer.evaluate_test
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(trainer, "evaluate_test", watched)
            train(resolve_config({**BASE, "method": "an", "epochs": 1, "out": str(out)}))
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from spmlkit.data.digits_mosaic import export_png, make_digits_mosaic

    folder = tmp_path_factory.mktemp("png")
    export_png(make_digits_mosaic(num_train=4, num_test=8, seed=0), folder)
    return folder / "images" / "test"


def _predict(run, images, out, *extra):
    assert main(["predict", "--checkpoint", str(run), "--images", str(images), "--out", str(out), "--quiet",
                 *extra]) == 0
    payload = json.loads(out.with_name(out.name + ".json").read_text())
    scores = np.array([[p["scores"][c] for c in payload["class_names"]] for p in payload["predictions"]])
    return payload, scores


def _labels_at(payload, scores, t):
    return [[c for c, s in zip(payload["class_names"], row) if s >= t] for row in scores]


def test_a_run_records_the_metrics_of_the_field(run):
    """result.json holds each metric of the field at each threshold, with the value scikit-learn
    computes from the test probabilities the run was evaluated on (docs/protocol.md, "Metrics of
    the field": rows without a positive are left out of the ranking metrics, coverage counts
    from 0, an F1 with nothing to count is 1)."""
    import warnings

    from sklearn.metrics import (coverage_error, f1_score, hamming_loss, label_ranking_average_precision_score,
                                 label_ranking_loss)

    metrics = json.loads((run / "result.json").read_text())["test_metrics"]
    missing = [k for k in FIELD_KEYS if k not in metrics]
    assert not missing
    p, y = EVALUATED["probs"], EVALUATED["targets"]
    kept = y.sum(axis=1) > 0
    pair = kept & (y.sum(axis=1) < y.shape[1])
    top = p[kept].max(axis=1, keepdims=True)
    one_error = float(np.mean([not y[kept][i][p[kept][i] == top[i]].all() for i in range(int(kept.sum()))]))
    expected = {"ranking_loss": label_ranking_loss(y[pair], p[pair]), "coverage": coverage_error(y[kept], p[kept]) - 1,
                "example_ap": label_ranking_average_precision_score(y[kept], p[kept]), "one_error": one_error}
    # result.json keeps the global validation threshold; the per-class ones are chosen again here
    per_class = select_thresholds(EVALUATED["val_probs"], EVALUATED["val_targets"], per_class=True)
    thresholds = {"0.5": 0.5, "0.75": 0.75, "val_global": metrics["threshold_val_global"], "val_class": per_class}
    for name, t in thresholds.items():
        pred = (p >= np.broadcast_to(t, (y.shape[1],))[None, :]).astype(int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected[f"hamming_loss@{name}"] = hamming_loss(y, pred)
            for average, key in (("samples", "example_f1"), ("micro", "micro_f1"), ("macro", "macro_f1")):
                expected[f"{key}@{name}"] = f1_score(y, pred, average=average, zero_division=1.0)
    wrong = {k: (metrics[k], float(v)) for k, v in expected.items() if metrics[k] != pytest.approx(v, abs=1e-9)}
    assert not wrong, f"recorded metrics of the field differ from scikit-learn's: {wrong}"
    assert 0 < metrics["hamming_loss@0.5"] < 1 and 0 < metrics["example_ap"] < 1  # a run that learnt something


def test_predict_uses_the_validation_threshold_unless_one_is_given(run, images, tmp_path, capsys):
    t_val = json.loads((run / "result.json").read_text())["test_metrics"]["threshold_val_global"]
    payload, scores = _predict(run, images, tmp_path / "default")
    assert payload["threshold"] == t_val and payload["threshold_source"] == "validation"
    assert [p["labels"] for p in payload["predictions"]] == _labels_at(payload, scores, t_val)
    assert f"threshold {t_val:g} selected on the run's validation split" in " ".join(capsys.readouterr().out.split())

    for given in ("0", "0.5", "1"):
        payload, scores = _predict(run, images, tmp_path / f"at{given}", "--threshold", given)
        assert payload["threshold"] == float(given) and payload["threshold_source"] == "given"
        assert [p["labels"] for p in payload["predictions"]] == _labels_at(payload, scores, float(given))
    # 0 is a threshold like any other: every class of every image, not the default swapped in
    assert all(len(p["labels"]) == 10 for p in json.loads((tmp_path / "at0.json").read_text())["predictions"])
    # an --out with a dot keeps it: at0.5 wrote at0.5.json, not over at0.json
    assert json.loads((tmp_path / "at0.5.json").read_text())["threshold"] == 0.5


def test_a_checkpoint_without_its_result_falls_back_to_the_method_threshold(run, images, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run / "best.pt", alone / "best.pt")  # no result.json beside it
    payload, scores = _predict(alone / "best.pt", images, tmp_path / "alone-pred")
    assert payload["threshold"] == 0.5 and payload["threshold_source"] == "method"  # AN's
    assert [p["labels"] for p in payload["predictions"]] == _labels_at(payload, scores, 0.5)


def test_export_names_the_validation_threshold_or_the_given_one(run, tmp_path, capsys):
    from spmlkit.export import export_model

    t_val = json.loads((run / "result.json").read_text())["test_metrics"]["threshold_val_global"]
    sidecar = export_model(run, "torchscript", tmp_path / "m.torchscript.pt", verify=False).sidecar
    assert sidecar["threshold"] == t_val and sidecar["thresholds"]["val_global"] == t_val
    assert sidecar["threshold_source"].startswith("selected on the validation split")
    assert sidecar["thresholds"]["method"] == 0.5
    assert main(["export", "--checkpoint", str(run), "--format", "torchscript", "--out",
                 str(tmp_path / "zero.torchscript.pt"), "--threshold", "0"]) == 0
    sidecar = json.loads((tmp_path / "zero.torchscript.pt.json").read_text())
    assert sidecar["threshold"] == 0.0 and sidecar["threshold_source"] == "given to spmlkit export"
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run), "--format", "torchscript", "--out",
                 str(tmp_path / "bad.torchscript.pt"), "--threshold", "-0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "threshold must be a probability in [0, 1], got -0.1" in err[0]
    assert not (tmp_path / "bad.torchscript.pt").exists()


def test_the_headline_names_each_f1_by_its_threshold():
    m = {"OF1@0.5": 0.4, "CF1@0.5": 0.3, "OF1@0.75": 0.0, "CF1@0.75": 0.0,
         "OF1@val_global": 0.6, "CF1@val_global": 0.5, "threshold_val_global": 0.31}
    assert f1_summary(m, 0.75) == ", F1 overall / per-class 60.00% / 50.00% at 0.31 (selected on validation), " \
                                  "40.00% / 30.00% at 0.5"
    without_val = {k: v for k, v in m.items() if "val" not in k}
    assert f1_summary(without_val, 0.75) == ", F1 overall / per-class 40.00% / 30.00% at 0.5, " \
                                            "0.00% / 0.00% at 0.75 (the method's)"
    assert f1_summary(without_val, 0.5) == ", F1 overall / per-class 40.00% / 30.00% at 0.5"
    assert f1_summary({}, 0.5) == ""
