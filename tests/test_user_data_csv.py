"""Your own images with a labels file: prepare -> train -> predict, and every bad input named by its row.

The images are real JPEG files (see ``write_image`` in tests/test_user_data_folder.py); the
labels file is written the way a spreadsheet exports it: a header row, then one row per image.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_user_data_folder import CLASSES, NO_CLEAN_METRIC, TRAIN, assert_test_metrics_from_predictions, write_image

from spmlkit.cli import main
from spmlkit.data.formats import load_prepared, read_csv_labels

pytestmark = pytest.mark.usefixtures("one_thread")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _shop(tmp_path: Path, per_class: int = 6) -> tuple[Path, Path]:
    """``pictures/<label>_<i>.jpg`` and labels.csv: one positive each, every other row a negative too."""
    pictures = tmp_path / "pictures"
    lines = ["image,positives,negatives"]
    for k, name in enumerate(CLASSES):
        for i in range(per_class):
            write_image(pictures / f"{name}_{i}.jpg", {name}, 100 * k + i)
            negative = CLASSES[(k + 1) % 3] if i % 2 else ""
            lines.append(f"{name}_{i}.jpg,{name},{negative}")
    write_image(pictures / "pair.jpg", {"cat", "sky"}, 999)
    lines.append("pair.jpg,cat;sky,")
    return _write(tmp_path / "labels.csv", lines), pictures


def test_csv_with_test_labels_prepare_train_predict(tmp_path, capsys):
    labels, pictures = _shop(tmp_path)
    test_lines = ["image,positives"]
    for k, name in enumerate(CLASSES):
        for i in range(3):
            write_image(pictures / "test" / f"{name}_{i}.jpg", {name, "sky"}, 500 + 10 * k + i)
            test_lines.append(f"test/{name}_{i}.jpg,{name};sky")
    test_lines.append("test/none.jpg,")  # a fully labelled image may have no label at all
    write_image(pictures / "test" / "none.jpg", set(), 600)
    test = _write(tmp_path / "test.csv", test_lines)
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    assert main(["prepare", "csv", "--labels", str(labels), "--images", str(pictures), "--test-labels", str(test),
                 "--out", str(prepared)]) == 0
    ds = load_prepared(prepared)
    assert ds.class_names == sorted(CLASSES) and ds.meta["dataset"] == "csv" and ds.meta["observation"] == "given"
    rows = dict(zip(ds.train_images, ds.observed.tolist()))
    assert len(rows) == 19 and list(rows)[:2] == ["cat_0.jpg", "cat_1.jpg"]  # the file's order
    assert rows["cat_0.jpg"] == [1, 0, 0] and rows["cat_1.jpg"] == [1, -1, 0]  # a negatives cell is -1
    assert rows["pair.jpg"] == [1, 0, 1]
    tests = dict(zip(ds.test_images, ds.test_labels.tolist()))
    assert tests["test/dog_2.jpg"] == [0, 1, 1] and tests["test/none.jpg"] == [0, 0, 0]

    capsys.readouterr()
    assert main(["train", "--prepared", str(prepared), *TRAIN, "--device", "cpu", "--out", str(run)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "test mAP" in said and NO_CLEAN_METRIC not in said
    assert_test_metrics_from_predictions(run, prepared)  # the test set's 10 rows, "none.jpg" without labels
    new = tmp_path / "new"
    write_image(new / "x.jpg", {"dog"}, 3)
    assert main(["predict", "--checkpoint", str(run), "--images", str(new), "--out", str(tmp_path / "p"),
                 "--quiet"]) == 0
    assert json.loads((tmp_path / "p.json").read_text())["class_names"] == list(CLASSES)


def test_csv_without_test_labels_says_there_is_no_clean_metric(tmp_path, capsys):
    labels, pictures = _shop(tmp_path, per_class=4)
    prepared = tmp_path / "prepared"
    assert main(["prepare", "csv", "--labels", str(labels), "--images", str(pictures), "--out", str(prepared)]) == 0
    assert load_prepared(prepared).test_labels is None
    capsys.readouterr()
    assert main(["train", "--prepared", str(prepared), *TRAIN, "--out", str(tmp_path / "run")]) == 0
    assert NO_CLEAN_METRIC in " ".join(capsys.readouterr().out.split())
    assert math.isnan(json.loads((tmp_path / "run" / "result.json").read_text())["test_map"])


def test_a_bad_row_is_named_in_one_line(tmp_path, capsys):
    labels, pictures = _shop(tmp_path, per_class=2)
    lines = labels.read_text().splitlines()
    lines[2] = "cat_1.jpg,cat,bird"  # row 3: 'bird' is no positive anywhere, so no class
    _write(labels, lines)
    out = tmp_path / "out"
    assert main(["prepare", "csv", "--labels", str(labels), "--images", str(pictures), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"spmlkit prepare: error: {labels} row 3: unknown label 'bird' in the negatives column; the "
                   f"labels are those of the positives column of {labels}")
    assert not out.exists()


def test_check_lists_every_problem_by_row_and_writes_nothing(tmp_path, capsys):
    labels, pictures = _shop(tmp_path, per_class=2)
    (pictures / "broken.jpg").write_text("not a jpeg")
    _write(labels, [
        "image,positives,negatives",
        "cat_0.jpg,cat,",
        "cat_1.jpg,cta,",  # row 3 (with --classes): an unknown label
        "missing.jpg,dog,",  # row 4: no such file
        "cat_0.jpg,cat,",  # row 5: listed twice
        "dog_0.jpg,,cat",  # row 6: no positive
        "dog_1.jpg,dog;cat,cat",  # row 7: cat both positive and negative
        "broken.jpg,sky,",  # row 8: not an image
        "sky_0.jpg,sky,dog,extra",  # row 9: a field too many
    ])
    classes = _write(tmp_path / "classes.txt", list(CLASSES))
    out = tmp_path / "out"
    args = ["prepare", "csv", "--labels", str(labels), "--images", str(pictures), "--classes", str(classes),
            "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 3: unknown label 'cta' in the positives column (did you mean 'cat'?)" in err
    assert "(and 6 more problems; add --check to list them all)" in err

    assert main([*args, "--check"]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "7 problems (nothing written)" in said
    expected = [
        "row 3: unknown label 'cta' in the positives column (did you mean 'cat'?)",
        "row 4: image 'missing.jpg' is not in",
        "row 5: image 'cat_0.jpg' is already listed on row 2",
        "row 6: no positive label for image 'dog_0.jpg'",
        "row 7: label 'cat' is both positive and negative",
        "row 8 (broken.jpg): not a readable image",
        "row 9: 4 fields, but the header has 3",
    ]
    positions = [said.find(text) for text in expected]
    assert -1 not in positions and positions == sorted(positions), said  # every problem, in row order
    assert not out.exists()


def test_tsv_classes_order_and_misspellings(tmp_path, capsys):
    pictures = tmp_path / "pictures"
    for i in range(3):
        write_image(pictures / f"a{i}.jpg", {"sky"}, i)
    write_image(pictures / "b.jpg", {"dog"}, 9)
    labels = _write(tmp_path / "labels.tsv", ["Image\tPositives", "a0.jpg\tsky", "a1.jpg\tsky", "a2.jpg\tsky;dog",
                                              "b.jpg\tsyk"])
    data = read_csv_labels(labels, pictures)
    assert data.ok and data.class_names == ["dog", "sky", "syk"]
    assert any("label 'syk' is a positive on 1 row only" in w and "looks like 'sky'" in w for w in data.warnings)
    classes = _write(tmp_path / "classes.txt", ["sky", "dog", "syk"])
    data = read_csv_labels(labels, pictures, classes=classes)
    assert data.class_names == ["sky", "dog", "syk"]  # the classes file's order
    np.testing.assert_array_equal(data.observed, [[1, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 1]])
    assert main(["prepare", "csv", "--labels", str(tmp_path / "labels.txt"), "--images", str(pictures)]) == 2
    assert "expected the labels file (--labels)" in capsys.readouterr().err
    bad_header = _write(tmp_path / "h.csv", ["file,label", "a0.jpg,sky"])
    assert main(["prepare", "csv", "--labels", str(bad_header), "--images", str(pictures)]) == 2
    assert "row 1: the first row must be the header image,positives[,negatives]" in capsys.readouterr().err
    assert main(["prepare", "csv", "--labels", str(labels), "--root", str(pictures)]) == 2
    assert "--root does not apply to `spmlkit prepare csv`" in capsys.readouterr().err
