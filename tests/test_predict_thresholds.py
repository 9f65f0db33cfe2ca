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


def test_a_degenerate_threshold_is_named_where_its_f1_is_printed():
    """An own-images run printed "F1 72.34 % (selected on validation)" from predicting every label positive.
    evaluate_test records the share of test entries each threshold decides positive; at 1 or 0 the
    headline calls the threshold degenerate and says which way."""
    from spmlkit.training.evaluation import evaluate_test

    rng = np.random.default_rng(0)
    Y = (rng.random((40, 3)) < 0.7).astype(np.uint8)
    Y[0] = 1
    P = np.clip(0.3 + 0.05 * rng.random((40, 3)), 0, 1)  # every score between 0.3 and 0.35
    val_P, val_Y = P[:20], Y[:20]
    m = evaluate_test(P, Y, threshold=0.75, val_probs=val_P, val_targets=val_Y)
    assert m["predicted_positive@0.5"] == 0.0 and m["predicted_positive@0.75"] == 0.0
    assert m["threshold_val_global"] <= P.min() and m["predicted_positive@val_global"] == 1.0  # all on wins F1 here
    headline = f1_summary(m, 0.75)
    assert (f"at {m['threshold_val_global']:g} (selected on validation; degenerate: it predicts every test label "
            "positive)") in headline
    assert "at 0.5 (degenerate: it predicts no test label positive)" in headline
    middle = {**m, "predicted_positive@val_global": 0.62, "predicted_positive@0.5": 0.5}
    assert "degenerate" not in f1_summary(middle, 0.75)  # a threshold that splits the labels is not named


def _edited_copy(run, tmp_path, name, **metrics):
    """The run's files in a folder of their own, with ``result.json``'s test metrics edited."""
    copy = tmp_path / name
    copy.mkdir()
    for f in ("best.pt", "config.yaml"):
        shutil.copy(run / f, copy / f)
    record = json.loads((run / "result.json").read_text())
    record["test_metrics"].update(metrics)
    (copy / "result.json").write_text(json.dumps(record))  # NaN and Infinity as Python's json writes them
    return copy


@pytest.mark.parametrize("value, shown", [(float("nan"), "NaN"), (float("inf"), "Infinity"), (-1, "-1"),
                                          (True, "true"), ("abc", '"abc"'), (None, "null"), (1.5, "1.5")])
def test_a_recorded_threshold_that_is_not_a_probability_is_refused_by_predict_and_export(
        run, images, tmp_path, capsys, value, shown):
    """NaN predicted nothing, -1 everything, and the sidecar wrote a bare NaN; "abc" became 0.5: a
    recorded threshold is checked as a typed --threshold is, and never swapped for a default."""
    edited = _edited_copy(run, tmp_path, "edited", threshold_val_global=value)
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(edited), "--images", str(images), "--out", str(tmp_path / "p"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{edited / 'result.json'}: test_metrics.threshold_val_global is {shown}, not a probability in [0, 1]" in err
    assert "restore it, or delete the key to use the method's fixed threshold, or give --threshold" in err
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "p.json").exists()
    assert main(["export", "--checkpoint", str(edited), "--format", "torchscript", "--out",
                 str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"threshold_val_global is {shown}, not a probability" in err
    assert not (tmp_path / "m.pt").exists() and not (tmp_path / "m.pt.json").exists()
    # a typed threshold is what predict uses: the recorded one is not read, so it blocks nothing
    payload, _ = _predict(edited, images, tmp_path / "given", "--threshold", "0.4")
    assert payload["threshold"] == 0.4 and payload["threshold_source"] == "given"


def test_bad_per_class_thresholds_block_only_the_export_that_uses_them(run, images, tmp_path, capsys):
    """predict never uses the per-class thresholds: bad ones there do not stop it; export writes them into
    its sidecar, so there they are checked, one per class."""
    t_val = json.loads((run / "result.json").read_text())["test_metrics"]["threshold_val_global"]
    classes = 10  # the digits mosaic's; a result.json holds per-class thresholds when written by hand or
    # by an earlier spmlkit, and the sidecar then names them
    bad = [0.5] * (classes - 1) + ["abc"]
    edited = _edited_copy(run, tmp_path, "perclass", thresholds_val_class=bad)
    payload, _ = _predict(edited, images, tmp_path / "p")
    assert payload["threshold"] == t_val and payload["threshold_source"] == "validation"
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(edited), "--format", "torchscript", "--out",
                 str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"test_metrics.thresholds_val_class[{classes - 1}] is \"abc\", not a probability in [0, 1]" in err
    short = _edited_copy(run, tmp_path, "short", thresholds_val_class=[0.5] * (classes - 1))
    assert main(["export", "--checkpoint", str(short), "--format", "torchscript", "--out",
                 str(tmp_path / "m.pt")]) == 2
    assert (f"test_metrics.thresholds_val_class holds {classes - 1} values, not one threshold for each of the "
            f"run's {classes} classes") in capsys.readouterr().err
    assert not (tmp_path / "m.pt").exists()


def test_predict_and_export_never_write_over_a_file_they_read(run, images, tmp_path, capsys):
    """`--out` naming the checkpoint, the run's result.json or an image: refused before anything is written
    (files compared as files: a link counts)."""
    copy = _edited_copy(run, tmp_path, "run")
    before = {f: (copy / f).read_bytes() for f in ("best.pt", "result.json", "config.yaml")}
    (tmp_path / "link.json").symlink_to(copy / "result.json")
    capsys.readouterr()
    for out, what in ((copy / "result", "a file of the run this command reads"),
                      (tmp_path / "link", "a file of the run this command reads")):
        assert main(["predict", "--checkpoint", str(copy), "--images", str(images), "--out", str(out),
                     "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{out}.json is {what}" in err and "give the output another" in err
    picture = sorted(images.iterdir())[0]
    pictures = tmp_path / "pictures"
    shutil.copytree(images, pictures)
    target = pictures / picture.name
    (pictures / "scores.csv").symlink_to(target)
    image_bytes = target.read_bytes()
    assert main(["predict", "--checkpoint", str(copy), "--images", str(pictures), "--out",
                 str(pictures / "scores"), "--quiet"]) == 2
    assert f"{pictures / 'scores.csv'} is an image this command reads ({target})" in capsys.readouterr().err
    assert target.read_bytes() == image_bytes
    for out in (copy / "best.pt", copy / "config.yaml"):
        assert main(["export", "--checkpoint", str(copy), "--format", "torchscript", "--out", str(out)]) == 2
        assert "is a file of the run this export reads" in capsys.readouterr().err
    assert {f: (copy / f).read_bytes() for f in before} == before
