"""The MULAN sets read from their own files (data/arff_reader.py, data/mulan.py; docs/protocol.md,
"MULAN data sets"): sizes per set, values read by hand from the ARFF text, the parsed-array
cache, and the train rows without a positive label that training leaves out.

Tests of what a set's values are read from MULAN's own files (``needs_mulan``: skipped where they are
not there, fixtures/mulan.py); tests of what spmlkit does with a set use a small one in MULAN's layout,
pinned as MULAN's own (``tiny_mulan``). The data folder is a fresh ``SPMLKIT_DATA`` (of symlinks to
MULAN's files, or of the small set's), and the download address points at a closed local port, so
nothing here can reach the internet.
"""

import logging

import numpy as np
import pytest
from fixtures.mulan import TINY, home_fixture, needs_mulan, tiny_mulan_fixture  # noqa: F401 - fixtures

from spmlkit.data import load_dataset
from spmlkit.data.mulan import MULAN_SETS, load_mulan

#: set: train rows, test rows, feature columns, labels, train rows without a positive, test rows without
#: one, positives in the train list. Rows, labels and the empty rows of delicious agree with the table in
#: MULAN's README beside the files; birds' empty rows were counted by splitting its ARFF rows on commas
#: (143 and 151; that README says 164 and 165)
SIZES = {
    "bibtex": (4880, 2515, 1836, 159, 0, 0),
    "birds": (322, 323, 271, 19, 143, 151),
    "corel5k": (4500, 500, 499, 374, 0, 0),
    "delicious": (12920, 3185, 500, 983, 10, 4),
    "emotions": (391, 202, 72, 6, 0, 0),
    "enron": (1123, 579, 1001, 53, 0, 0),
    "flags": (129, 65, 43, 7, 0, 0),
    "genbase": (463, 199, 1185, 27, 0, 0),
    "medical": (333, 645, 1449, 45, 0, 0),
    "scene": (1211, 1196, 294, 6, 0, 0),
    "tmc2007": (21519, 7077, 500, 22, 0, 0),
    "yeast": (1500, 917, 103, 14, 0, 0),
}


@needs_mulan
@pytest.mark.parametrize("name", list(SIZES))
def test_each_set_has_its_official_sizes(home, name):
    home(name)
    ds = load_mulan(name)
    train, test, features, labels, empty_train, empty_test = SIZES[name]
    assert ds.X_train.shape == (train, features) and ds.X_test.shape == (test, features)
    assert ds.Y_train.shape == (train, labels) and ds.Y_test.shape == (test, labels)
    assert ds.X_train.dtype == np.float32 and ds.Y_train.dtype == np.uint8
    assert int((ds.Y_train.sum(1) == 0).sum()) == empty_train and int((ds.Y_test.sum(1) == 0).sum()) == empty_test
    spec = MULAN_SETS[name]
    assert (spec.train_rows, spec.test_rows, spec.labels) == (train, test, labels)  # the table `datasets` shows


@needs_mulan
def test_cal500_is_one_file_without_an_official_split(home):
    """cal500.arff, first row: 68 features (``0.08254,0.048394,...,0.103943``), then the 174 labels,
    ``0,1,0,1,0,1,1,...``; its train list is every row, and it has no test list."""
    home("cal500")
    ds = load_mulan("cal500")
    assert ds.X_train.shape == (502, 68) and ds.Y_train.shape == (502, 174) and ds.X_test is None and ds.Y_test is None
    np.testing.assert_array_equal(ds.X_train[0, [0, 1, 4, 67]], np.float32([0.08254, 0.048394, -73.856273, 0.103943]))
    assert np.flatnonzero(ds.Y_train[0]).tolist()[:8] == [1, 3, 5, 6, 12, 15, 18, 24]
    assert int(ds.Y_train[0].sum()) == 31 and ds.class_names[:2] == ("Angry-Agressive", "NOT-Emotion-Angry-Agressive")
    assert (ds.Y_train.sum(1) > 0).all()  # every song has a label: the tabular protocol keeps all 502
    spec = MULAN_SETS["cal500"]
    assert (spec.train_rows, spec.test_rows, spec.labels, spec.files) == (502, 0, 174, ("cal500.arff", "cal500.xml"))


@needs_mulan
def test_cal500_trains_under_the_tabular_protocol_and_without_test_numbers_under_the_reference(home):
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training.run_data import load_run_data

    home("cal500")
    pooled = load_run_data(resolve_config({"dataset": "cal500", "method": "smile", "partition": "random"}))
    assert (len(pooled.Y_train), len(pooled.Y_val), len(pooled.Y_test)) == (402, 50, 50)  # 80/10/10 of 502
    reference = load_run_data(resolve_config({"dataset": "cal500", "method": "an"}))
    assert reference.num_train == 502 and reference.Y_test is None and reference.X_test is None


@needs_mulan
def test_a_sparse_row_read_by_hand(home):
    """medical-train.arff, first row: ``{0 1,107 1,590 1,671 1,804 1,835 1,968 1,1420 1,1493 1}``;
    attributes 0-1448 are features, 1449-1493 the 45 labels (1493: ``Class-44-786_07``)."""
    home("medical")
    ds = load_mulan("medical")
    assert np.flatnonzero(ds.X_train[0]).tolist() == [0, 107, 590, 671, 804, 835, 968, 1420]
    assert ds.X_train[0, 107] == 1.0
    assert np.flatnonzero(ds.Y_train[0]).tolist() == [44] and ds.class_names[44] == "Class-44-786_07"


@needs_mulan
def test_nominal_features_one_hot_and_binary(home):
    """flags-train.arff, first row: ``4,1,164,7,8,2,0,0,2,1,0,0,0,1,1,0,0,0,0,1,0,0,0,1,0,0``:
    landmass {1..6}=4, zone {1..4}=1, area 164, population 7, language {1..10}=8, religion {0..7}=2,
    bars..sunstars 0,0,2,1,0,0,0,1, crescent..text 1,0,0,0,0, labels red..orange 1,0,0,0,1,0,0."""
    home("flags")
    ds = load_mulan("flags")
    expected = ([0, 0, 0, 1, 0, 0] + [1, 0, 0, 0] + [164, 7] + [0] * 7 + [1, 0, 0] + [0, 0, 1, 0, 0, 0, 0, 0]
                + [0, 0, 2, 1, 0, 0, 0, 1] + [1, 0, 0, 0, 0])
    assert ds.X_train[0].tolist() == expected
    assert ds.feature_names[:7] == ("landmass=1", "landmass=2", "landmass=3", "landmass=4", "landmass=5",
                                    "landmass=6", "zone=1")
    assert ds.Y_train[0].tolist() == [1, 0, 0, 0, 1, 0, 0]
    assert ds.class_names == ("red", "green", "blue", "yellow", "white", "black", "orange")


@needs_mulan
def test_birds_nominal_location_and_quoted_label_names(home):
    """birds-train.arff, first row: attributes 259-260 (1-based) hasSegments {0,1}=1 and location
    {2,10,1,7,5,4,17,15,16,8,13,11}=1 (its third value); labels 11 and 12 set. Label names with
    quotes are spelled as the XML spells them (``Swainson's Thrush``)."""
    home("birds")
    ds = load_mulan("birds")
    assert ds.feature_names[258:262] == ("hasSegments", "location=2", "location=10", "location=1")
    assert ds.X_train[0, 258:271].tolist() == [1, 0, 0, 1] + [0] * 9
    np.testing.assert_array_equal(ds.X_train[0, 254:258], np.float32([46.769231, 71.863118, 788.923077, 1761.80218]))
    assert np.flatnonzero(ds.Y_train[0]).tolist() == [11, 12]
    assert ds.class_names[10:13] == ("Swainson's Thrush", "Hammond's Flycatcher", "Western Tanager")


@needs_mulan
def test_genbase_drops_its_protein_identifier(home):
    """genbase-train.arff, first row: ``Q9PQS9,NO,NO,NO,...`` and labels ``000000000100000000000000000``."""
    home("genbase")
    ds = load_mulan("genbase")
    assert "protein" not in ds.feature_names and ds.feature_names[0] == "PS00010"
    assert ds.X_train[0, :3].tolist() == [0, 0, 0]
    assert set(np.unique(ds.X_train).tolist()) == {0.0, 1.0}  # YES/NO as 1/0
    assert np.flatnonzero(ds.Y_train[0]).tolist() == [9]


@needs_mulan
def test_mulan_yeast_equals_the_river_copy(home):
    home("yeast")
    mulan, river = load_dataset("mulan/yeast"), load_dataset("yeast")
    for part in ("X_train", "Y_train", "X_test", "Y_test"):
        np.testing.assert_array_equal(getattr(mulan, part), getattr(river, part))
    assert mulan.class_names == river.class_names  # the ARFF's order, though yeast.xml lists Class6 before Class4


def test_parsed_arrays_are_kept_and_follow_the_files(tiny_mulan, caplog, monkeypatch):
    """The first load parses the ARFF files and keeps the arrays; a second load reads them
    without parsing an ARFF file again (the parser is watched); a changed file is parsed again."""
    from spmlkit.data import arff_reader

    parsed: list[str] = []
    parse = arff_reader.read_multilabel_arff
    monkeypatch.setattr(arff_reader, "read_multilabel_arff",
                        lambda path, *args, **kwargs: parsed.append(str(path)) or parse(path, *args, **kwargs))
    folder = tiny_mulan.install("flags") / "mulan" / "flags"
    first = load_mulan("flags")
    assert (folder / "spmlkit-parsed-v1.npz").is_file() and len(parsed) >= 1
    files_parsed = list(parsed)
    again = load_mulan("flags")
    assert parsed == files_parsed, "the second load parsed the ARFF files again instead of reading the kept arrays"
    for part in ("X_train", "Y_train", "X_test", "Y_test", "class_names", "feature_names"):
        np.testing.assert_array_equal(getattr(first, part), getattr(again, part))
    # a changed file (one row less) is parsed again, with a warning that it is not MULAN's
    text = (folder / "flags-train.arff").read_text().rstrip("\n").rsplit("\n", 1)[0] + "\n"
    (folder / "flags-train.arff").unlink()
    (folder / "flags-train.arff").write_text(text)
    with caplog.at_level(logging.WARNING):
        changed = load_mulan("flags")
    assert len(changed.X_train) == TINY.train_rows - 1 and len(parsed) > len(files_parsed)
    assert "flags-train.arff differs from MULAN's file" in caplog.text


def test_training_leaves_out_train_rows_without_a_positive(tiny_mulan, caplog):
    """A set with 10 of its 40 train rows unlabelled (as birds has 143 of 322): every method and observation
    trains on the other 30, and each of them shows exactly one observed positive."""
    from spmlkit.experiments.presets import resolve_config
    from spmlkit.training.run_data import load_run_data, split_and_observe

    tiny_mulan.install("birds")
    official = load_mulan("birds")
    keep = official.Y_train.any(1)
    assert int((~keep).sum()) == TINY.train_rows_without_a_positive == 10
    with caplog.at_level(logging.WARNING):
        for method, observation in (("an", "single_positive"), ("em", "single_positive"), ("bce", "full")):
            data = load_run_data(resolve_config({"dataset": "birds", "method": method, "observation": observation}))
            assert data.num_train == 30
            np.testing.assert_array_equal(data.Y_train, official.Y_train[keep])
            np.testing.assert_array_equal(data.X_train, official.X_train[keep])
            assert len(data.Y_test) == 20  # the test list is untouched
    assert "birds: 10 of its 40 train rows have no positive label" in caplog.text
    single = load_run_data(resolve_config({"dataset": "birds", "method": "an"}))
    split = split_and_observe(resolve_config({"dataset": "birds", "method": "an"}), single)
    assert ((split.observed == 1).sum(1) == 1).all() and len(split.train_idx) + len(split.val_idx) == 30


def test_mulan_sets_get_the_feature_defaults():
    from spmlkit.experiments.presets import dataset_defaults
    from spmlkit.training.defaults import FEATURE_DEFAULTS

    assert dataset_defaults("emotions") == dict(FEATURE_DEFAULTS) == dataset_defaults("yeast")
