"""Your own images as a folder per label: prepare -> train -> predict through the command line.

Real PNG files, 32 x 32, whose label decides a coloured stripe (cat: left, dog: middle, sky:
right) over dark noise, so that a small CNN has something to learn in two epochs; the same
helper builds the CSV form's images (tests/test_user_data_csv.py).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spmlkit.cli import main
from spmlkit.data.formats import load_prepared

CLASSES = ("cat", "dog", "sky")
_COLOURS = {"cat": (230, 40, 40), "dog": (40, 200, 40), "sky": (40, 40, 230)}
#: a quick image run: two epochs of the small CNN, APL after one warm-up epoch
TRAIN = ["--method", "em_apl", "--backbone", "small:cnn", "--no-pretrained", "--image-size", "32", "--epochs", "2",
         "--hparam", "warmup_epochs=1", "--quiet"]
NO_CLEAN_METRIC = ("no labelled test set: no clean metric exists; model selected on the observed labels of the "
                   "validation split")

pytestmark = pytest.mark.usefixtures("one_thread")


def write_image(path: Path, labels: set[str], seed: int) -> Path:
    """A 32 x 32 image with one coloured stripe per label over dark noise (PNG or JPEG by the name)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 60, (32, 32, 3), dtype=np.uint8)
    for k, name in enumerate(CLASSES):
        if name in labels:
            pixels[:, 11 * k: 11 * k + 10] = _COLOURS[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path


def _photos(root: Path, per_class: int = 6, seed: int = 0) -> Path:
    """``root/<label>/<label><i>.png``, plus one picture filed under cat and dog by name, one by content."""
    for k, name in enumerate(CLASSES):
        for i in range(per_class):
            write_image(root / name / f"{name}{i}.png", {name}, seed + 100 * k + i)
    write_image(root / "cat" / "both.png", {"cat", "dog"}, seed + 900)
    shutil.copy(root / "cat" / "both.png", root / "dog" / "both.png")  # same name: one image, two labels
    write_image(root / "cat" / "shared.png", {"cat", "sky"}, seed + 901)
    shutil.copy(root / "cat" / "shared.png", root / "sky" / "copy_of_shared.png")  # same bytes, other name
    (root / "dog" / "notes.txt").write_text("not an image")
    return root


def _result(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def assert_test_metrics_from_predictions(run: Path, prepared: Path) -> None:
    """The run's test numbers, recomputed from what `spmlkit predict` scores its test images:
    AP by scikit-learn, F1 at 0.5 and at EM's 0.75 from the ML-GCN counts (docs/protocol.md,
    "Metrics"). The run must have trained on the CPU, where predict scores them."""
    from sklearn.metrics import average_precision_score

    from spmlkit.predict import predict_images

    ds = load_prepared(prepared)
    scores = predict_images(run, ds.paths("test")).scores.astype(np.float64)
    y = ds.test_labels.astype(bool)
    result = _result(run)
    ap = [average_precision_score(y[:, c], scores[:, c]) for c in range(y.shape[1])]
    assert result["test_ap"] == pytest.approx(ap, abs=1e-6)
    assert result["test_map"] == pytest.approx(float(np.mean(ap)), abs=1e-6)

    def f1(p: float, r: float) -> float:
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    for t in (0.5, 0.75):
        pred = scores >= t
        nc, npred, ng = (pred & y).sum(0), np.maximum(pred.sum(0), 1), y.sum(0)
        cf1 = f1(np.mean(nc / npred), np.mean(nc[ng > 0] / ng[ng > 0]))
        of1 = f1(nc.sum() / npred.sum(), nc.sum() / ng.sum())
        assert result["test_metrics"][f"CF1@{t:g}"] == pytest.approx(cf1, abs=1e-12), t
        assert result["test_metrics"][f"OF1@{t:g}"] == pytest.approx(of1, abs=1e-12), t
    assert_field_metrics_from_predictions(result["test_metrics"], scores, y)


def assert_field_metrics_from_predictions(m: dict, scores: np.ndarray, y: np.ndarray) -> None:
    """The metrics of the field a run recorded, recomputed by scikit-learn from the scores
    (docs/protocol.md, "Metrics of the field": rows without a positive left out of the ranking
    metrics, an F1 with nothing to find and nothing predicted is 1)."""
    import warnings

    from sklearn.metrics import (coverage_error, f1_score, hamming_loss, label_ranking_average_precision_score,
                                 label_ranking_loss)

    kept, pair = y.any(axis=1), y.any(axis=1) & ~y.all(axis=1)
    assert m["ranking_loss"] == pytest.approx(label_ranking_loss(y[pair], scores[pair]), abs=1e-12)
    assert m["coverage"] == pytest.approx(coverage_error(y[kept], scores[kept]) - 1, abs=1e-12)
    assert m["example_ap"] == pytest.approx(label_ranking_average_precision_score(y[kept], scores[kept]), abs=1e-12)
    for name, t in (("0.5", 0.5), ("0.75", 0.75), ("val_global", m["threshold_val_global"])):
        pred = scores >= t
        assert m[f"hamming_loss@{name}"] == pytest.approx(hamming_loss(y, pred), abs=1e-12), name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for avg, key in (("samples", "example_f1"), ("micro", "micro_f1"), ("macro", "macro_f1")):
                want = f1_score(y, pred, average=avg, zero_division=1.0)
                assert m[f"{key}@{name}"] == pytest.approx(want, abs=1e-12), (key, name)


def test_folder_without_test_set_prepare_train_predict(tmp_path, capsys):
    photos, prepared, run = _photos(tmp_path / "photos"), tmp_path / "prepared", tmp_path / "run"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(prepared)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 file under" in said and "ignored" in said
    assert "prepared folder: 20 training images, 3 classes, 22 observed positives; no labelled test set" in said

    ds = load_prepared(prepared)
    assert ds.class_names == sorted(p.name for p in photos.iterdir() if p.is_dir()) == list(CLASSES)
    assert ds.meta["dataset"] == "folder" and ds.meta["observation"] == "given"
    assert ds.train_labels is None and ds.test_images == [] and ds.test_labels is None
    assert len(ds.train_images) == 3 * 6 + 2  # 22 files, two of them a second filing of another
    rows = dict(zip(ds.train_images, ds.observed.tolist()))
    assert rows["cat/both.png"] == [1, 1, 0]  # filed under cat and dog (same name)
    assert rows["cat/shared.png"] == [1, 0, 1]  # filed under cat, and under sky as a byte-identical copy
    assert rows["dog/dog0.png"] == [0, 1, 0]
    assert "dog/both.png" not in rows and "sky/copy_of_shared.png" not in rows
    assert set(np.unique(ds.observed)) == {0, 1}

    assert main(["train", "--prepared", str(prepared), *TRAIN, "--out", str(run)]) == 0
    printed = capsys.readouterr().out
    said = " ".join(printed.split())
    assert NO_CLEAN_METRIC in said
    result = _result(run)
    assert math.isnan(result["test_map"]) and result["test_metrics"] == {} and result["test_ap"] == []
    # APL's round after epoch 1 made pseudo-negatives; without the training rows' full labels they are counted
    # all the same (the console's pseudo-labels column and metrics.csv), only their accuracy is unknown
    first, second = result["history"]
    assert first["pseudo_negatives"] == first["labeling_selected"] > 0 and second["labeling_selected"] == 0
    assert second["pseudo_negatives"] == first["pseudo_negatives"] and math.isnan(first["pseudo_label_accuracy"])
    from spmlkit.training.loggers import EpochLines

    counts = [row.split("│")[4].strip() for row in printed.splitlines() if row.count("│") == 7]
    assert counts == [EpochLines.cells(h)[3] for h in result["history"]] == [str(int(first["pseudo_negatives"]))] * 2
    assert result["config"]["data"]["observation"] == "given" and result["config"]["data"]["val_variant"] == "observed"
    assert result["class_names"] == list(CLASSES) and math.isfinite(result["val_map"])

    new = tmp_path / "new"
    write_image(new / "a.png", {"dog"}, 7)
    write_image(new / "b.jpg", {"cat", "sky"}, 8)
    assert main(["predict", "--checkpoint", str(run), "--images", str(new), "--out", str(tmp_path / "preds"),
                 "--quiet"]) == 0
    preds = json.loads((tmp_path / "preds.json").read_text())
    assert preds["class_names"] == list(CLASSES)
    assert [Path(p["image"]).name for p in preds["predictions"]] == ["a.png", "b.jpg"]
    for p in preds["predictions"]:
        assert list(p["scores"]) == list(CLASSES) and all(0 <= s <= 1 for s in p["scores"].values())
    header = (tmp_path / "preds.csv").read_text().splitlines()[0]
    assert header == "image,cat,dog,sky,labels"


def test_a_run_of_ones_own_data_is_kept_under_the_prepared_folders_name(tmp_path, capsys, monkeypatch):
    """`train --prepared prepared/photos` trained into runs/folder/... (the form of the data, shared by every
    folder of photos); now runs/photos/..., the prepared folder's name, as `extract` and `benchmark` name it."""
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "folder", "--root", str(_photos(tmp_path / "photos", per_class=2)), "--out",
                 "prepared/photos"]) == 0
    capsys.readouterr()
    assert main(["train", "--prepared", "prepared/photos", *TRAIN, "--seed", "3", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip().endswith("(the run folder would be runs/photos/em_apl/seed3)")
    # a benchmark's prepared folder keeps the benchmark's name; a named set and a feature folder theirs
    from spmlkit.cli.train import _folder_name

    assert _folder_name("voc2012", "prepared/my-voc") == "voc2012" and _folder_name("yeast") == "yeast"
    assert _folder_name("folder", "prepared/photos") == _folder_name("csv", "prepared/photos/") == "photos"


def test_test_root_gives_full_test_labels_and_test_metrics(tmp_path, capsys):
    photos = _photos(tmp_path / "photos")
    tests = tmp_path / "test_photos"
    for k, name in enumerate(CLASSES):
        for i in range(3):
            write_image(tests / name / f"t{name}{i}.png", {name}, 5000 + 10 * k + i)
    write_image(tests / "dog" / "pair.png", {"dog", "sky"}, 5100)
    shutil.copy(tests / "dog" / "pair.png", tests / "sky" / "pair.png")
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    assert main(["prepare", "folder", "--root", str(photos), "--test-root", str(tests), "--out", str(prepared)]) == 0
    ds = load_prepared(prepared)
    assert len(ds.test_images) == 10 and ds.test_labels.dtype == np.uint8
    labels = dict(zip(ds.test_images, ds.test_labels.tolist()))
    assert labels["test_photos/dog/pair.png"] == [0, 1, 1]  # true labels: every folder it is in
    assert labels["test_photos/cat/tcat0.png"] == [1, 0, 0]
    assert ds.train_images[0].startswith("photos/")  # both lists relative to the folder holding them

    assert main(["train", "--prepared", str(prepared), *TRAIN, "--device", "cpu", "--out", str(run)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "test mAP" in said and "no labelled test set" not in said
    result = _result(run)
    assert f"test mAP {100 * result['test_map']:.2f}%" in said and len(result["test_ap"]) == 3
    # the headline F1 is named by its threshold: 0.5 always, never EM's 0.75 beside a validated one
    m = result["test_metrics"]
    assert f"{100 * m['OF1@0.5']:.2f}% / {100 * m['CF1@0.5']:.2f}% at 0.5" in said
    assert "at 0.75" not in said or "threshold_val_global" not in m
    assert_test_metrics_from_predictions(run, prepared)


def test_methods_that_need_true_labels_and_simulated_observations_are_refused(tmp_path, capsys):
    photos, prepared = _photos(tmp_path / "photos", per_class=3), tmp_path / "prepared"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(prepared)]) == 0
    capsys.readouterr()
    quick = ["--backbone", "small:cnn", "--no-pretrained", "--image-size", "32", "--epochs", "1", "--quiet"]
    for i, (extra, expected) in enumerate([
        (["--method", "bce"], "method 'bce' trains on 'full' labels and needs the full training labels"),
        (["--method", "iun"], "method 'iun' trains on '1p_alln' labels and needs the full training labels"),
        (["--method", "an", "--observation", "single_positive"],
         "no full labels to simulate observation 'single_positive' from; use observation 'given'"),
        (["--method", "an", "--val", "clean"], "has no clean labels to validate on; use val_variant 'observed'"),
    ]):
        assert main(["train", "--prepared", str(prepared), *quick, *extra, "--out", str(tmp_path / f"r{i}")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("spmlkit train: error: ") and expected in err, err


def test_folder_problems_are_named_and_check_lists_them_all(tmp_path, capsys):
    photos, out = _photos(tmp_path / "photos", per_class=2), tmp_path / "out"
    (photos / "empty").mkdir()
    (photos / "sky" / "broken.png").write_text("not a png")
    tests = tmp_path / "tests"
    write_image(tests / "cat" / "t.png", {"cat"}, 1)
    write_image(tests / "horse" / "h.png", {"cat"}, 2)

    assert main(["prepare", "folder", "--root", str(photos), "--test-root", str(tests), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "folder of label 'empty' holds no image" in err
    assert "(and 2 more problems; add --check to list them all)" in err
    assert not out.exists()

    assert main(["prepare", "folder", "--root", str(photos), "--test-root", str(tests), "--out", str(out),
                 "--check"]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "3 problems (nothing written)" in said
    assert f"{photos / 'empty'}: the training folder of label 'empty' holds no image" in said
    assert f"{photos / 'sky' / 'broken.png'}: not a readable image" in said
    assert "test folder 'horse' is not a class of the training data" in said
    assert not out.exists()

    (photos / "empty").rmdir()
    (photos / "sky" / "broken.png").unlink()
    shutil.rmtree(tests / "horse")
    assert main(["prepare", "folder", "--root", str(photos), "--test-root", str(tests), "--out", str(out),
                 "--check"]) == 0
    assert "no problem found" in capsys.readouterr().out and not out.exists()


def test_preparing_again_does_not_read_its_own_output(tmp_path, capsys):
    photos = _photos(tmp_path / "photos", per_class=2)
    assert main(["prepare", "folder", "--root", str(photos)]) == 0
    first = load_prepared(photos / "spmlkit-prepared" / "folder")
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(photos / "mine")]) == 0
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(photos / "mine")]) == 0
    again = load_prepared(photos / "mine")
    assert again.train_images == first.train_images and again.class_names == first.class_names == list(CLASSES)
    np.testing.assert_array_equal(again.observed, first.observed)
    capsys.readouterr()
    assert main(["train", "--dataset", "folder", "--method", "an"]) == 2
    assert "needs --root" in capsys.readouterr().err
