"""The Yeast multi-label benchmark (2,417 genes, 103 features, 14 functional classes).

Why Yeast: it is a real multi-label data set (about 4.2 positives per gene, so the
single-positive setting hides most labels), small enough that every method trains in
seconds on a laptop, and shipped as package data by a maintained library, so the default
demo needs no download. We read the MULAN version that ``river`` ships
(``river/datasets/yeast.csv.gz``: 103 feature columns ``Att1..Att103`` followed by 14 label
columns ``Class1..Class14``) without importing river itself (its import is slow and we only
need the file).

Split: MULAN distributes Yeast as ``yeast-train.arff`` (1,500 genes) and ``yeast-test.arff``
(917 genes). The packaged file (OpenML 40597, MULAN's single ``yeast.arff``) holds the same
2,417 rows with the **test rows first**: rows ``[0, 917)`` are exactly ``yeast-test`` and rows
``[917, 2417)`` exactly ``yeast-train``, value by value (a test compares them with MULAN's own
files). So the official train list is rows ``[917, 2417)`` and the official test list rows
``[0, 917)``, each in its ARFF file's order; taking the first 1,500 rows instead would train on
every official test gene (docs/protocol.md, "Yeast"). The reference protocol then splits the
train list into train/val (docs/protocol.md, "Train/val split") and draws the observed labels
over the whole train list (docs/protocol.md, "Observed labels"), exactly as for the image data.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from .tabular import TabularDataset

__all__ = ["load_yeast", "yeast_path", "YEAST_TEST_ROWS", "YEAST_TRAIN_ROWS", "YEAST_TRAIN_SIZE"]

#: rows of the packaged file that are MULAN's yeast-test.arff and yeast-train.arff, in that order
YEAST_TEST_ROWS = slice(0, 917)
YEAST_TRAIN_ROWS = slice(917, 2417)
YEAST_TRAIN_SIZE = 1500
_NUM_FEATURES = 103
_NUM_CLASSES = 14
_NUM_ROWS = 2417


def yeast_path() -> Path:
    """Location of the Yeast CSV inside the installed ``river`` package."""
    spec = importlib.util.find_spec("river")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the Yeast data ships with the 'river' package, which is not installed; "
            "run `pip install river` (it is a dependency of spmlkit, so `pip install spmlkit` "
            "normally brings it)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "yeast.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(
            f"expected the Yeast data at {path}, but the installed river package does not "
            "contain it; reinstall river (`pip install --force-reinstall river`)"
        )
    return path


def load_yeast() -> TabularDataset:
    """Load Yeast with MULAN's official 1,500 / 917 train/test split."""
    import pandas as pd

    path = yeast_path()
    frame = pd.read_csv(path)
    if frame.shape != (_NUM_ROWS, _NUM_FEATURES + _NUM_CLASSES):
        raise ValueError(
            f"{path}: expected {_NUM_ROWS} rows x {_NUM_FEATURES + _NUM_CLASSES} columns "
            f"(103 features, 14 labels), found {frame.shape}; the packaged file has changed"
        )
    X = frame.iloc[:, :_NUM_FEATURES].to_numpy(dtype=np.float32)
    Y = frame.iloc[:, _NUM_FEATURES:].to_numpy()
    if not np.isin(Y, (0, 1)).all():
        raise ValueError(f"{path}: label columns must be 0/1")
    Y = Y.astype(np.uint8)
    train, test = YEAST_TRAIN_ROWS, YEAST_TEST_ROWS
    return TabularDataset(
        name="yeast",
        X_train=X[train],
        Y_train=Y[train],
        X_test=X[test],
        Y_test=Y[test],
        class_names=tuple(frame.columns[_NUM_FEATURES:]),
        feature_names=tuple(frame.columns[:_NUM_FEATURES]),
        source=str(path),
        notes={"split": "MULAN yeast-train (rows 917-2416 of the file) / yeast-test (rows 0-916)"},
    )
