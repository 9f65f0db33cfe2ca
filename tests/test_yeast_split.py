"""Yeast's official split is MULAN's (docs/protocol.md, "Yeast"): the packaged file's rows
[917, 2417) are ``yeast-train.arff`` and its rows [0, 917) ``yeast-test.arff``.

Compared value by value with MULAN's own files (read here with liac-arff directly, not through spmlkit's
reader), skipped where they are not there (fixtures/mulan.py says where they are looked for).
"""

from pathlib import Path

import arff
import numpy as np
from fixtures.mulan import MULAN, needs_mulan

from spmlkit.data.yeast import load_yeast

MULAN_YEAST = MULAN / "yeast"


def _arff_matrix(path: Path) -> np.ndarray:
    with open(path) as fh:
        return np.asarray(arff.load(fh)["data"], dtype=np.float64)


@needs_mulan
def test_yeast_lists_are_mulans_files_value_by_value():
    ds = load_yeast()
    for X, Y, name in ((ds.X_train, ds.Y_train, "yeast-train.arff"), (ds.X_test, ds.Y_test, "yeast-test.arff")):
        expected = _arff_matrix(MULAN_YEAST / name)
        assert X.shape == (len(expected), 103) and Y.shape == (len(expected), 14)
        # float32 features: the ARFF's decimal values rounded to float32, nothing else
        np.testing.assert_array_equal(X, expected[:, :103].astype(np.float32))
        np.testing.assert_array_equal(Y, expected[:, 103:].astype(np.uint8))


def test_yeast_split_sizes_and_first_rows():
    """Without MULAN's files: the sizes and values hand-read from the two ARFF files' first data rows."""
    ds = load_yeast()
    assert (len(ds.X_train), len(ds.X_test)) == (1500, 917)
    # yeast-train.arff, first data row: 0.0937,0.139771,... labels 0,0,1,1,0,0,0,0,0,0,0,0,0,0
    np.testing.assert_array_equal(ds.X_train[0, :2], np.float32([0.0937, 0.139771]))
    assert ds.Y_train[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    # yeast-test.arff, first data row: 0.004168,-0.170975,... labels 0,0,0,0,0,0,1,1,0,0,0,1,1,0
    np.testing.assert_array_equal(ds.X_test[0, :2], np.float32([0.004168, -0.170975]))
    assert ds.Y_test[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0]
    assert ds.class_names == tuple(f"Class{i}" for i in range(1, 15))
