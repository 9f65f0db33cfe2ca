"""Folders spmlkit writes into: its own kind or nothing, marked as its own; saved paths that resume from anywhere.

``spmlkit.output_dir`` is exercised directly, then through ``prepare --out``, ``extract
--features-out`` and ``train --out``: a folder holding the user's files is refused in one
line, before any work, and every byte of it is left as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_user_data_folder import write_image

from spmlkit.cli import main
from spmlkit.output_dir import MARKER, ForeignFolderError, check_output_dir, claim_output_dir, output_kind


def _theirs(folder: Path) -> dict[str, bytes]:
    """A user's folder with files whose names spmlkit also writes."""
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text('{"my": "notes"}')
    (folder / "train_labels.npy").write_bytes(b"my own array")
    (folder / "config.yaml").write_text("mine: true\n")
    (folder / "notes.txt").write_text("do not lose")
    return _contents(folder)


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------ the mechanism


def test_a_new_or_empty_folder_is_claimed_and_marked(tmp_path):
    made = claim_output_dir(tmp_path / "a" / "b", "run", option="--out")
    assert output_kind(made) == "run"
    marker = json.loads((made / MARKER).read_text())
    assert marker["kind"] == "run" and marker["created_by"].startswith("spmlkit ")
    (tmp_path / "empty").mkdir()
    assert output_kind(claim_output_dir(tmp_path / "empty", "report", option="--out")) == "report"
    assert claim_output_dir(made, "run", option="--out") == made   # its own kind: written into again


def test_a_folder_of_other_files_or_another_kind_is_refused(tmp_path):
    before = _theirs(tmp_path / "mine")
    with pytest.raises(ForeignFolderError) as info:
        claim_output_dir(tmp_path / "mine", "prepared dataset", option="--out")
    assert str(info.value) == (f"{tmp_path / 'mine'} already holds files that spmlkit did not write (config.yaml, "
                               "meta.json, notes.txt and 1 more); spmlkit writes a prepared dataset only into a new or "
                               "empty folder or one that holds a prepared dataset: choose another --out")
    assert _contents(tmp_path / "mine") == before
    run = claim_output_dir(tmp_path / "run", "run", option="--out")
    with pytest.raises(ForeignFolderError, match=r"holds a run written by spmlkit, not a feature dataset: writing "
                                                 r"here would mix the two; choose another --features-out$"):
        check_output_dir(run, "feature dataset", option="--features-out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ForeignFolderError, match="is a file, not a folder; choose another --out"):
        claim_output_dir(tmp_path / "file", "run", option="--out")


def test_an_unmarked_folder_of_an_earlier_spmlkit_is_recognised_and_marked(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "last.pt").write_bytes(b"")
    claim_output_dir(old, "run", option="--out", recognise=lambda p: (p / "last.pt").exists())
    assert output_kind(old) == "run"


# ------------------------------------------------------------------ the commands


def _photos(root: Path) -> Path:
    for k, name in enumerate(("cat", "dog", "sky")):
        for i in range(3):
            write_image(root / name / f"{name}{i}.png", {name}, 10 * k + i)
    return root


def test_prepare_refuses_an_out_folder_of_the_users_files(tmp_path, capsys):
    photos = _photos(tmp_path / "photos")
    before = _theirs(tmp_path / "mine")
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(tmp_path / "mine")]) == 2
    assert "already holds files that spmlkit did not write (config.yaml, meta.json" in _one_line(capsys)
    assert _contents(tmp_path / "mine") == before
    # into a new folder it writes, marks it, and preparing again into it is allowed
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(tmp_path / "prep")]) == 0
    assert output_kind(tmp_path / "prep") == "prepared dataset"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(tmp_path / "prep")]) == 0


def test_prepare_of_a_benchmark_refuses_before_reading_it(tmp_path, capsys):
    before = _theirs(tmp_path / "mine")
    # the root does not even exist: the folder is refused first, so nothing was read
    assert main(["prepare", "voc2012", "--root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "mine")]) == 2
    assert "already holds files that spmlkit did not write" in _one_line(capsys)
    assert _contents(tmp_path / "mine") == before


def test_a_prepared_folder_of_an_earlier_spmlkit_is_prepared_again(tmp_path):
    photos = _photos(tmp_path / "photos")
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(tmp_path / "prep")]) == 0
    (tmp_path / "prep" / MARKER).unlink()   # as an spmlkit without markers left it
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(tmp_path / "prep")]) == 0
    assert output_kind(tmp_path / "prep") == "prepared dataset"


def test_extract_refuses_a_features_out_folder_of_the_users_files(tmp_path, capsys):
    before = _theirs(tmp_path / "mine")
    assert main(["extract", "--dataset", "digits-mosaic", "--no-pretrained", "--features-out", str(tmp_path / "mine"),
                 "--quiet", "--device", "cpu"]) == 2
    assert "choose another --features-out" in _one_line(capsys)
    assert _contents(tmp_path / "mine") == before


def test_prepare_table_and_extract_refuse_each_others_folders(tmp_path, capsys):
    photos, feats, table = _photos(tmp_path / "photos"), tmp_path / "feats", tmp_path / "table"
    assert main(["prepare", "folder", "--root", str(photos), "--out", str(tmp_path / "prep")]) == 0
    net = ["--backbone", "small:cnn", "--no-pretrained", "--image-size", "32", "--device", "cpu", "--quiet"]
    assert main(["extract", "--prepared", str(tmp_path / "prep"), *net, "--features-out", str(feats)]) == 0
    extracted = _contents(feats)
    (tmp_path / "t.csv").write_text("f1,f2,positives\n1,2,cat\n3,4,dog\n")
    capsys.readouterr()
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--out", str(feats)]) == 2
    assert _one_line(capsys).endswith(f"{feats} holds a feature dataset written by spmlkit, not a prepared table: "
                                      "writing here would mix the two; choose another --out")
    assert _contents(feats) == extracted  # hours of a GPU's features, as they were
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--out", str(table)]) == 0
    assert output_kind(table) == "prepared table"
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--out", str(table)]) == 0  # its own: again
    prepared = _contents(table)
    assert main(["extract", "--prepared", str(tmp_path / "prep"), *net, "--features-out", str(table)]) == 2
    assert "holds a prepared table written by spmlkit, not a feature dataset" in _one_line(capsys)
    assert _contents(table) == prepared
    # a table folder marked before the two kinds were told apart is still a table's, never extract's
    (table / MARKER).write_text(json.dumps({"kind": "feature dataset", "created_by": "spmlkit 0.9"}))
    assert output_kind(table) == "prepared table" and output_kind(feats) == "feature dataset"
    assert main(["extract", "--prepared", str(tmp_path / "prep"), *net, "--features-out", str(table)]) == 2
    assert "holds a prepared table written by spmlkit" in _one_line(capsys)
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--out", str(table)]) == 0
    (table / MARKER).unlink()  # unmarked, as an spmlkit before the marker left it
    assert main(["extract", "--prepared", str(tmp_path / "prep"), *net, "--features-out", str(table)]) == 2
    assert "already holds files that spmlkit did not write" in _one_line(capsys)
    assert main(["prepare", "table", "--table", str(tmp_path / "t.csv"), "--out", str(table)]) == 0


YEAST = ["--dataset", "yeast", "--subset", "200", "--epochs", "2", "--device", "cpu", "--quiet"]


def test_train_refuses_a_run_folder_of_the_users_files_even_with_overwrite(tmp_path, capsys):
    before = _theirs(tmp_path / "mine")
    for extra in ([], ["--overwrite"]):
        assert main(["train", *YEAST, "--out", str(tmp_path / "mine"), *extra]) == 2
        assert "already holds files that spmlkit did not write" in _one_line(capsys)
    assert _contents(tmp_path / "mine") == before
    prep = tmp_path / "prep"
    claim_output_dir(prep, "prepared dataset", option="--out")
    assert main(["train", *YEAST, "--out", str(prep)]) == 2
    assert "holds a prepared dataset written by spmlkit, not a run" in _one_line(capsys)


# ------------------------------------------------------------------ saved paths and --resume


def _feature_folder(folder: Path) -> Path:
    """A small folder in the form ``spmlkit extract`` writes: 120 train and 40 test rows of 6 features."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for split, n in (("train", 120), ("test", 40)):
        labels = (rng.random((n, 3)) < 0.4).astype(np.uint8)
        labels[np.arange(n), rng.integers(0, 3, n)] = 1
        np.save(folder / f"{split}_features.npy", (rng.normal(size=(n, 6)) + labels @ rng.normal(size=(3, 6)))
                .astype(np.float32))
        np.save(folder / f"{split}_labels.npy", labels)
    (folder / "meta.json").write_text(json.dumps({
        "kind": "spmlkit-features", "format_version": 1, "dataset": "toy", "backbone": "none", "pretrained": False,
        "image_size": 0, "dtype": "float32", "feature_dim": 6, "class_names": ["a", "b", "c"]}))
    return folder


def test_resume_from_another_working_folder_finds_the_relative_paths(tmp_path, monkeypatch):
    project = tmp_path / "project"
    _feature_folder(project / "data" / "feats")
    monkeypatch.chdir(project)
    run = ["--features", "data/feats", "--method", "an", "--epochs", "3", "--device", "cpu", "--quiet"]
    assert main(["train", *run, "--out", "runs/a", "--stop-after", "1"]) == 0
    saved = yaml.safe_load((project / "runs" / "a" / "config.yaml").read_text())
    assert saved["data"]["dataset"] == "../../data/feats"   # relative to the run folder, not to where it ran
    assert (project / "runs" / "a" / "config.yaml").read_text().startswith("# spmlkit run configuration.")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["train", "--out", str(project / "runs" / "a"), "--resume", "--stop-after", "1", "--quiet"]) == 0
    assert len(json.loads((project / "runs" / "a" / "metrics.json").read_text())) == 2   # epoch 2 was added
    # retyping the run's own relative option where it was started agrees with the run
    monkeypatch.chdir(project)
    assert main(["train", *run, "--out", "runs/a", "--resume"]) == 0
    final = json.loads((project / "runs" / "a" / "result.json").read_text())
    assert final["resumed_from"] == 2 and len(final["history"]) == 3
    # the project moved as a whole: its runs still find their data
    os.rename(project, tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(tmp_path / "moved" / "runs" / "a" / "config.yaml"),
                 "--out", str(tmp_path / "again"), "--quiet"]) == 0
    again = json.loads((tmp_path / "again" / "result.json").read_text())
    assert again["config"]["data"]["dataset"] == "moved/data/feats"   # read back relative to where it ran
    assert [h["val_map"] for h in again["history"]] == [h["val_map"] for h in final["history"]]   # resumes are exact


def test_an_earlier_run_folder_keeps_its_working_folder_paths(tmp_path, monkeypatch):
    """A run folder without the marker saved paths relative to where it ran; they are still read so."""
    project = tmp_path / "project"
    _feature_folder(project / "feats")
    monkeypatch.chdir(project)
    assert main(["train", "--features", "feats", "--method", "an", "--epochs", "2", "--device", "cpu", "--quiet",
                 "--out", "runs/a", "--stop-after", "1"]) == 0
    folder = project / "runs" / "a"
    (folder / MARKER).unlink()
    import torch

    from spmlkit.training.checkpoint import load_checkpoint

    for path in (folder / "config.yaml", folder / "last.pt", folder / "best.pt"):   # the old form: "feats"
        if path.suffix == ".yaml":
            saved = yaml.safe_load(path.read_text())
            saved["data"]["dataset"] = "feats"
            path.write_text(yaml.safe_dump(saved))
        else:
            ckpt = load_checkpoint(path)
            ckpt["config"]["data"]["dataset"] = "feats"
            torch.save(ckpt, path)
    assert main(["train", "--out", "runs/a", "--resume", "--quiet"]) == 0
    assert json.loads((folder / "result.json").read_text())["resumed_from"] == 1


def test_path_settings_are_saved_relative_to_the_run_folder_and_read_back_from_anywhere(tmp_path, monkeypatch):
    from spmlkit.training.run_paths import paths_from_run_folder, paths_relative_to, typed_paths

    work = tmp_path / "work"
    claim_output_dir(work / "runs" / "a", "run", option="--out")
    monkeypatch.chdir(work)
    typed = {"root": "./data/voc/", "prepared": "/shared/prepared", "dataset": "voc2012", "lr": 0.1}
    values = typed_paths(typed)
    assert values == {"root": "data/voc", "prepared": "/shared/prepared", "dataset": "voc2012", "lr": 0.1}
    saved = paths_relative_to(values, "runs/a")
    assert saved == {"root": "../../data/voc", "prepared": "/shared/prepared", "dataset": "voc2012", "lr": 0.1}
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert paths_from_run_folder(saved, work / "runs" / "a") == {
        "root": "../work/data/voc", "prepared": "/shared/prepared", "dataset": "voc2012", "lr": 0.1}
    assert paths_relative_to(paths_from_run_folder(saved, work / "runs" / "a"), work / "runs" / "a") == saved


def test_an_image_run_on_a_relative_prepared_folder_resumes_from_elsewhere(tmp_path, monkeypatch):
    project = tmp_path / "project"
    _photos(project / "photos")
    monkeypatch.chdir(project)
    assert main(["prepare", "folder", "--root", "photos", "--out", "prep"]) == 0
    run = ["--prepared", "prep", "--method", "an", "--backbone", "small:cnn", "--no-pretrained", "--image-size", "16",
           "--epochs", "2", "--batch-size", "4", "--device", "cpu", "--num-workers", "0", "--quiet"]
    assert main(["train", *run, "--out", "runs/a", "--stop-after", "1"]) == 0
    assert yaml.safe_load((project / "runs" / "a" / "config.yaml").read_text())["data"]["prepared"] == "../../prep"
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--out", str(project / "runs" / "a"), "--resume", "--quiet"]) == 0
    result = json.loads((project / "runs" / "a" / "result.json").read_text())
    assert result["resumed_from"] == 1 and len(result["history"]) == 2
    assert result["config"]["data"]["prepared"] == "project/prep"   # read back relative to where it resumed


def test_benchmark_refuses_an_out_folder_of_the_users_files_and_reuses_its_own(tmp_path, capsys):
    """``benchmark --out`` writes ``table.md``, ``runs.csv``...: a folder of the user's files of those
    names is refused before any run, byte for byte kept; a benchmark's own folder (marked, or holding
    the ``results.db`` of an spmlkit from before the marker) is reused."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "table.md").write_text("my table")
    (theirs / "runs.csv").write_text("my runs")
    before = _contents(theirs)
    small = ["--dataset", "yeast", "--methods", "an", "--seeds", "0", "--lrs", "1e-3", "--epochs", "1",
             "--subset", "200", "--jobs", "1", "--quiet"]
    assert main(["benchmark", *small, "--out", str(theirs)]) == 2
    err = _one_line(capsys)
    assert str(theirs) in err and "--out" in err
    assert _contents(theirs) == before and not (theirs / MARKER).exists()

    ours = tmp_path / "ours"
    assert main(["benchmark", *small, "--out", str(ours)]) == 0
    assert output_kind(ours) == "benchmark" and (ours / "table.md").is_file()
    (ours / MARKER).unlink()  # as a benchmark folder written before the marker existed
    capsys.readouterr()
    assert main(["benchmark", *small, "--out", str(ours)]) == 0
    assert output_kind(ours) == "benchmark"
    assert "1 finished runs reused" in capsys.readouterr().out.replace("\n", " ")
