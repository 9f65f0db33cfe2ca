"""Image runs on prepared folders: each COCO variant in its own folder, a prepared folder alone is enough."""

import json

import pytest
from fixtures.image_formats import build_coco2014

from spmlkit.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

CATEGORIES = [(1, "person"), (2, "dog"), (5, "cat")]
TRAIN_IDS = list(range(1, 31))
TRAIN_ANNS = [(i, [1, 2, 5][i % 3], 0) for i in TRAIN_IDS if i % 6]   # every 6th image is unannotated
VAL_IDS = list(range(101, 111))
VAL_ANNS = [(i, [1, 2, 5][i % 3], 0) for i in VAL_IDS]
SMALL = ["--backbone", "small:cnn", "--no-pretrained", "--image-size", "32", "--epochs", "1", "--batch-size", "8",
         "--lr", "0.001", "--quiet"]


def _result(run):
    return json.loads((run / "result.json").read_text())


def test_each_coco_variant_is_prepared_into_its_own_folder_and_checked(tmp_path, capsys):
    root = build_coco2014(tmp_path / "coco", (TRAIN_IDS, TRAIN_ANNS), (VAL_IDS, VAL_ANNS), CATEGORIES)
    assert main(["train", "--dataset", "coco2014", "--variant", "pu_mlc", "--root", str(root), "--method", "an",
                 "--out", str(tmp_path / "pu"), *SMALL]) == 0
    prepared = root / "spmlkit-prepared"
    assert sorted(p.name for p in prepared.iterdir()) == ["coco2014-pu_mlc"]
    meta = json.loads((prepared / "coco2014-pu_mlc" / "meta.json").read_text())
    assert meta["variant"] == "pu_mlc" and meta["counts"]["train"] == 30   # unannotated images kept
    assert main(["train", "--dataset", "coco2014", "--root", str(root), "--method", "an",
                 "--out", str(tmp_path / "spml"), *SMALL]) == 0
    assert sorted(p.name for p in prepared.iterdir()) == ["coco2014", "coco2014-pu_mlc"]
    assert json.loads((prepared / "coco2014" / "meta.json").read_text())["counts"]["train"] == 25
    # the wrong list in a named folder is refused with the command that makes the right one
    assert main(["train", "--dataset", "coco2014", "--prepared", str(prepared / "coco2014-pu_mlc"),
                 "--method", "an", "--out", str(tmp_path / "wrong"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "pu_mlc" in err and "spmlkit prepare coco2014" in err and "Traceback" not in err


def test_a_prepared_folder_alone_says_which_dataset_and_variant(tmp_path):
    root = build_coco2014(tmp_path / "coco", (TRAIN_IDS, TRAIN_ANNS), (VAL_IDS, VAL_ANNS), CATEGORIES)
    assert main(["prepare", "coco2014", "--variant", "pu_mlc", "--root", str(root)]) == 0
    folder = root / "spmlkit-prepared" / "coco2014-pu_mlc"
    assert main(["train", "--prepared", str(folder), "--method", "an", "--out", str(tmp_path / "run"), *SMALL]) == 0
    config = _result(tmp_path / "run")["config"]
    assert (config["data"]["dataset"], config["data"]["dataset_variant"]) == ("coco2014", "pu_mlc")
    assert main(["train", "--prepared", str(tmp_path / "nothing"), "--method", "an"]) == 2
