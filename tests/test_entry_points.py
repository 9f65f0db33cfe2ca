"""The same settings through every entry point give the same numbers (docs/architecture.md, "One run").

Entry points: ``train(config)`` from Python, ``spmlkit train``, ``spmlkit sweep``,
``spmlkit benchmark`` and ``SPMLClassifier``. Each builds its configuration with
``resolve_config`` (or, for the estimator, hands its arrays to ``train``), so on the same
settings their histories and test mAP must be equal to the last bit. Every run is on the CPU:
named where the entry point takes a device; ``spmlkit benchmark`` and ``SPMLClassifier`` take
none, and train feature runs, which ``auto`` puts on the CPU (training/plan.py).
"""

import json

import numpy as np
import pandas as pd
import pytest

from spmlkit import metrics, protocol
from spmlkit.cli import main
from spmlkit.data import registry
from spmlkit.estimator import SPMLClassifier
from spmlkit.experiments.presets import resolve_config
from spmlkit.experiments.store import ResultsStore
from spmlkit.experiments.sweep import SweepSpec, run_sweep
from spmlkit.training import train

SETTINGS = {"dataset": "yeast", "method": "em_apl", "subset": 300, "epochs": 6, "lr": 0.01, "seed": 1, "device": "cpu"}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def reference():
    config = resolve_config({**SETTINGS, "num_threads": 1})  # like the tests, which run with one thread
    assert config.method.hparams["warmup_epochs"] == 4  # the Yeast preset applies to every entry point
    return train(config)


def test_cli_train_equals_train(reference, tmp_path):
    args = ["train", "--dataset", "yeast", "--method", "em_apl", "--subset", "300", "--epochs", "6", "--lr", "0.01",
            "--seed", "1", "--device", "cpu", "--out", str(tmp_path / "run"), "--quiet"]
    assert main(args) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["test_map"] == reference.test_map
    assert [h["val_map"] for h in result["history"]] == [h["val_map"] for h in reference.history]
    assert [h["pseudo_negatives"] for h in result["history"]] == [h["pseudo_negatives"] for h in reference.history]


def test_sweep_and_benchmark_equal_train(reference, tmp_path):
    spec = SweepSpec(name="eq", datasets=["yeast"], methods=["em_apl"], seeds=[1], lrs=[0.01], batch_sizes=[64],
                     settings={"epochs": 6, "subset": 300, "device": "cpu"}, store=str(tmp_path / "s.db"))
    run_sweep(spec)
    (record,) = ResultsStore(spec.store).records()
    assert record["status"] == "ok" and record["test_map"] == reference.test_map
    assert [h["val_map"] for h in record["history"]] == [h["val_map"] for h in reference.history]

    assert main(["benchmark", "--methods", "em_apl", "--seeds", "1", "--lrs", "0.01", "--epochs", "6",
                 "--subset", "300", "--jobs", "1", "--out", str(tmp_path / "bench"), "--quiet"]) == 0
    runs = pd.read_csv(tmp_path / "bench" / "runs.csv")
    assert runs["test_map"].tolist() == [reference.test_map]


def test_estimator_equals_train_on_the_same_observed_labels():
    """The estimator's "given" labels equal the protocol's simulated ones: the same run."""
    config = resolve_config({**SETTINGS, "val_variant": "observed"})
    ref = train(config)
    ds = registry.load_features("yeast")
    X, Y = ds.X_train[:300], ds.Y_train[:300]
    observed = protocol.observe_labels(Y)
    clf = SPMLClassifier(method="em_apl", hparams=config.method.hparams, epochs=6, lr=0.01, seed=1).fit(X, observed)
    assert [h["val_map"] for h in clf.history_] == [h["val_map"] for h in ref.history]
    test = metrics.mean_average_precision(clf.predict_proba(ds.X_test), ds.Y_test)
    assert test == pytest.approx(ref.test_map, abs=1e-12)
    assert np.array_equal(clf.label_state_.kind.numpy(), ref.label_state.kind.numpy())
