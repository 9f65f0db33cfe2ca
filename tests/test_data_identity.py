"""A run on a user's folder is known by what the folder holds, not only by its path
(docs/architecture.md, "What a run's id is made of"): data prepared again under the same path is
new data, whose runs are trained, never answered with the old data's numbers; a run resumed on
changed features is refused.

Tables here are tiny (60 rows, 4 features), each run a fraction of a second on one thread.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_own_data_compared import _table
from test_user_data_folder import write_image

from spmlkit.cli import main
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import SweepSpec, expand

pytestmark = pytest.mark.usefixtures("one_thread")


def _said(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())


def _prepare(tmp_path, seed: int, out) -> None:
    _table(tmp_path, seed=seed)
    assert main(["prepare", "table", "--table", str(tmp_path / "train.csv"), "--test-table", str(tmp_path / "test.csv"),
                 "--out", str(out)]) == 0


def test_a_benchmark_of_data_prepared_again_under_the_same_path_trains_the_new_data(tmp_path, capsys):
    prep, out = tmp_path / "prep", tmp_path / "bench"
    bench = ["benchmark", "--dataset", str(prep), "--methods", "an,em", "--seeds", "0", "--lrs", "0.01", "--epochs",
             "3", "--jobs", "1", "--out", str(out), "--quiet"]
    _prepare(tmp_path, 0, prep)
    assert main(bench) == 0
    first = {r["method"]: r["test_map"] for r in json.loads((out / "results.json").read_text())["table"]}
    assert "0 finished runs reused" in _said(capsys)
    assert main(bench) == 0  # the same data again: its runs are found
    assert "2 finished runs reused" in _said(capsys)
    _prepare(tmp_path, 1, prep)  # other data, the same folder
    capsys.readouterr()
    assert main(bench) == 0
    said = _said(capsys)
    assert "0 finished runs reused" in said, said  # was: "2 finished runs reused", the old numbers as the new data's
    second = {r["method"]: r["test_map"] for r in json.loads((out / "results.json").read_text())["table"]}
    assert second != first
    # the table's numbers are the new data's: a benchmark of a copy of it in a fresh store gives them
    copy = tmp_path / "copy"
    _prepare(tmp_path, 1, copy)
    fresh = [*bench[:-3], "--out", str(tmp_path / "fresh"), "--quiet"]
    fresh[2] = str(copy)
    assert main(fresh) == 0
    assert {r["method"]: r["test_map"] for r in json.loads((tmp_path / "fresh" / "results.json").read_text())["table"]} \
        == pytest.approx(second, abs=1e-9)
    records = ResultsStore(out / "results.db").records()
    assert len(records) == 4 and len({r["config"]["data_digest"] for r in records}) == 2


def test_run_ids_follow_a_folders_content_and_named_sets_keep_theirs(tmp_path):
    prep = tmp_path / "prep"
    _prepare(tmp_path, 0, prep)

    def ids():
        return [r["run_id"] for r in expand(SweepSpec(datasets=[str(prep)], methods=["an", "em"], seeds=[0, 1]))]

    before = ids()
    _prepare(tmp_path, 0, prep)  # the same table prepared again: the same bytes, the same runs
    assert ids() == before
    _prepare(tmp_path, 1, prep)
    after = ids()
    assert len(set(after)) == 4 and not set(after) & set(before)
    # a named data set's runs carry no digest, so they keep the ids they always had
    assert all("data_digest" not in r for r in expand(SweepSpec(datasets=["yeast", "scene"], methods=["an"])))


def test_a_prepared_image_folders_digest_follows_its_lists_not_its_time_stamp(tmp_path):
    from spmlkit.data.data_digest import data_digest

    def photos(root, names):
        for k, name in enumerate(names):
            for i in range(3):
                write_image(root / name / f"{name}{i}.png", {name}, 10 * k + i)
        return root

    prep = tmp_path / "prep"
    assert main(["prepare", "folder", "--root", str(photos(tmp_path / "a", ("cat", "dog"))), "--out", str(prep)]) == 0
    first = data_digest(str(prep))
    assert main(["prepare", "folder", "--root", str(tmp_path / "a"), "--out", str(prep)]) == 0
    assert data_digest(str(prep)) == first  # prepared again from the same images, at another time
    assert main(["prepare", "folder", "--root", str(photos(tmp_path / "b", ("cat", "sky"))), "--out", str(prep)]) == 0
    assert data_digest(str(prep)) not in (first, None)
    assert data_digest("folder", str(prep)) == data_digest(str(prep))  # named by its form, through --prepared
    assert data_digest("yeast") is None and data_digest(str(tmp_path / "nowhere")) is None


def test_resume_on_changed_features_is_refused_and_on_the_same_data_continues(tmp_path, capsys):
    prep, run = tmp_path / "prep", tmp_path / "run"
    _prepare(tmp_path, 0, prep)
    args = ["train", "--features", str(prep), "--method", "an", "--epochs", "3", "--out", str(run), "--quiet"]
    assert main([*args, "--stop-after", "1"]) == 0
    X = np.load(prep / "train_features.npy")
    np.save(prep / "train_features.npy", X[::-1].copy())  # the same labels, other features (as a new extract would)
    capsys.readouterr()
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--resume: the data of the run in {run} changed since its last epoch was saved" \
        in err and f"the files of {prep} hold other bytes than it trained on" in err
    assert len(json.loads((run / "metrics.json").read_text())) == 1 and not (run / "result.json").exists()
    np.save(prep / "train_features.npy", X)  # its own data back: it resumes and finishes
    assert main([*args, "--resume"]) == 0
    assert json.loads((run / "result.json").read_text())["resumed_from"] == 1
