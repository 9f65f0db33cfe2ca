"""One registry of datasets and one decision of what a dataset argument is (data/registry.py):
names, ``extract`` folders and ``prepare`` folders alike through ``load_dataset``, ``train``,
``sweep`` and ``extract``; ``spmlkit datasets`` and ``spmlkit prepare``'s choices read it."""

import json

import numpy as np
import pytest
from fixtures.mulan import TINY, tiny_mulan_fixture  # noqa: F401 - the fixture "tiny_mulan"
from test_user_data_folder import _photos

from spmlkit.cli import main
from spmlkit.data import load_dataset, registry
from spmlkit.data.formats import DATASETS as READERS
from spmlkit.data.formats import PreparedDataset
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import SweepSpec, run_sweep

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def mulan_home(tiny_mulan):
    """A data folder holding two small sets in MULAN's layout, pinned as MULAN's emotions and flags; the
    download address on a closed port, so that nothing reaches the internet."""
    return tiny_mulan.install("emotions", "flags")


def _feature_folder(path):
    path.mkdir()
    np.save(path / "train_features.npy", np.arange(12, dtype=np.float32).reshape(6, 2))
    np.save(path / "test_features.npy", np.ones((2, 2), np.float32))
    np.save(path / "train_labels.npy", np.eye(2, dtype=np.uint8)[[0, 1, 0, 1, 0, 1]])
    np.save(path / "test_labels.npy", np.eye(2, dtype=np.uint8))
    (path / "meta.json").write_text(json.dumps({"kind": "spmlkit-features", "format_version": 1, "dataset": "mine",
                                                "class_names": ["a", "b"]}))
    return path


def test_every_argument_is_decided_once_into_its_kind(tmp_path):
    feats = _feature_folder(tmp_path / "feats")
    prepared = tmp_path / "prep"
    assert main(["prepare", "folder", "--root", str(_photos(tmp_path / "photos")), "--out", str(prepared)]) == 0
    decided = {arg: (ref.kind, ref.form, ref.name) for arg in ("yeast", "emotions", "mulan/yeast", "voc2012",
                                                                "digits-mosaic", "folder", str(feats), str(prepared))
               for ref in [registry.resolve_dataset(arg)]}
    assert decided == {
        "yeast": ("features", "named", "yeast"), "emotions": ("features", "named", "emotions"),
        "mulan/yeast": ("features", "named", "mulan/yeast"), "voc2012": ("images", "named", "voc2012"),
        "digits-mosaic": ("images", "named", "digits-mosaic"), "folder": ("images", "user-form", "folder"),
        str(feats): ("features", "features-folder", str(feats)), str(prepared): ("images", "prepared-folder", "folder"),
    }
    # once per process: removing the marker afterwards does not change the answer
    (feats / "meta.json").rename(feats / "meta.moved")
    assert registry.is_feature_dataset(str(feats))
    assert isinstance(load_dataset(str(prepared)), PreparedDataset)


def test_unknown_names_and_foreign_folders_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match=r"unknown dataset 'emotion' \(did you mean 'emotions'\?\); known datasets: "
                                         r"yeast, bibtex, .*`spmlkit datasets` lists them"):
        registry.resolve_dataset("emotion")
    (tmp_path / "stuff").mkdir()
    with pytest.raises(ValueError, match=r"stuff is neither a folder written by `spmlkit extract` nor one written by "
                                         r"`spmlkit prepare`"):
        registry.resolve_dataset(str(tmp_path / "stuff"))
    assert not registry.is_feature_dataset("emotion")
    with pytest.raises(ValueError, match=r"'voc2012' is an image dataset, read from its files: prepare it first"):
        load_dataset("voc2012")


def test_load_dataset_returns_a_feature_folder_as_written(tmp_path):
    ds = load_dataset(str(_feature_folder(tmp_path / "feats")))
    assert ds.X_train[:, 1].tolist() == [1, 3, 5, 7, 9, 11] and ds.class_names == ("a", "b")
    assert ds.Y_train.sum(0).tolist() == [3, 3]


def test_load_dataset_of_a_mulan_name_is_read_once(mulan_home):
    first, again = load_dataset("emotions"), load_dataset("emotions")
    assert first is again  # one read per process: a sweep's runs share it
    assert first.X_train.shape == (TINY.train_rows, TINY.features) and first.class_names == TINY.labels
    assert not first.X_train.flags.writeable


def test_the_cli_choices_come_from_the_registry(capsys):
    assert registry.PREPARABLE == READERS
    with pytest.raises(SystemExit) as exited:  # argparse refuses a choice itself
        main(["prepare", "nosuch", "--root", "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    for name in (*READERS, "folder", "csv"):
        assert repr(name) in err


def test_datasets_lists_names_kinds_sizes_and_whether_they_are_here(mulan_home, capsys):
    """Sizes are those of MULAN's files (the registry's), whatever the data folder holds."""
    assert main(["datasets"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0]:
            rows[cells[0]] = cells[1:]
    assert list(rows) == [name for name, entry in registry.DATASETS.items() if entry.listed]
    assert rows["yeast"] == ["features", "1500", "917", "14", "river package (no download)", "ready"]
    assert rows["emotions"][:4] == ["features", "391", "202", "6"] and rows["emotions"][-1].startswith("ready (in the")
    assert rows["delicious"][:4] == ["features", "12920", "3185", "983"] and rows["delicious"][-1].startswith("downlo")
    assert rows["voc2012"][:4] == ["images", "5717", "5823", "20"]
    assert "mulan/emotions" not in rows and "mulan/yeast" in rows  # aliases answer without being listed


def test_train_and_sweep_take_a_mulan_name(mulan_home, tmp_path):
    assert main(["train", "--dataset", "emotions", "--method", "an", "--epochs", "2", "--device", "cpu", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["config"]["data"]["dataset"] == "emotions" and len(result["history"]) == 2
    # the feature defaults of yeast (linear head, batch 64, lr 0.003) apply to every feature set
    assert result["config"]["optimisation"]["batch_size"] == 64 and result["config"]["model"]["head"] == "linear"
    spec = SweepSpec(name="m", datasets=["emotions", "flags"], methods=["an"], seeds=[0], lrs=[0.01],
                     batch_sizes=[64], settings={"epochs": 2, "device": "cpu"}, store=str(tmp_path / "s.db"))
    run_sweep(spec)
    records = {r["dataset"]: r for r in ResultsStore(spec.store).records()}
    assert set(records) == {"emotions", "flags"} and all(r["status"] == "ok" for r in records.values())


def test_extract_refuses_a_feature_dataset_without_writing(tmp_path, capsys):
    assert main(["extract", "--dataset", "yeast", "--features-out", str(tmp_path / "f"), "--quiet"]) == 2
    assert "yeast is a feature dataset already" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()


def test_a_sweep_over_a_users_prepared_folder(tmp_path):
    """``datasets: [path/to/prepared]``: the folder says which dataset it holds and its runs train as
    ``spmlkit train --prepared FOLDER`` would (their records name the folder as given)."""
    prepared = tmp_path / "prep"
    assert main(["prepare", "folder", "--root", str(_photos(tmp_path / "photos")), "--out", str(prepared)]) == 0
    settings = {"backbone": "small:cnn", "pretrained": False, "image_size": 32, "epochs": 1, "device": "cpu",
                "hparams": {}}
    spec = SweepSpec(name="own", datasets=[str(prepared)], methods=["an"], seeds=[0], lrs=[0.003], batch_sizes=[8],
                     observations=["given"], val_variant="observed", settings=settings, store=str(tmp_path / "s.db"))
    run_sweep(spec, jobs=1)
    (record,) = ResultsStore(spec.store).records()
    assert record["status"] == "ok", record.get("error")
    assert record["dataset"] == str(prepared) and len(record["history"]) == 1


def test_one_registry_kind_serves_datasets_losses_and_label_algorithms():
    from spmlkit import labeling, losses
    from spmlkit.names import Registry

    reg = Registry("widget")
    reg.register("beta", 2)
    reg.register("alpha", 1)
    assert reg.names() == ("beta", "alpha") and reg.get("alpha") == 1  # registration order
    with pytest.raises(RuntimeError, match="widget name 'beta' registered twice"):
        reg.register("beta", 3)
    with pytest.raises(ValueError, match=r"unknown widget 'alpah' \(did you mean 'alpha'\?\); valid names are: alpha, "
                                         r"beta"):
        reg.get("alpah")
    assert isinstance(registry.DATASETS, Registry) and isinstance(labeling.ALGORITHMS, Registry)
    with pytest.raises(ValueError, match=r"unknown loss 'em_apll' \(did you mean"):
        losses.create("em_apll")
    with pytest.raises(ValueError, match=r"unknown labeling algorithm 'apk' \(did you mean 'apl'\?\)"):
        labeling.create("apk")
