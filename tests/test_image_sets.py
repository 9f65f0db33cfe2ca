"""The data layer's one entry point for image datasets (data/image_sets.py), called with plain
values and no run configuration (docs/architecture.md, "Who owns what")."""

from pathlib import Path

import numpy as np
import pytest

from spmlkit.data.digits_mosaic import export_png, make_digits_mosaic
from spmlkit.data.formats.check import BadImage
from spmlkit.data.formats.prepared import load_prepared, write_prepared
from spmlkit.data.image_sets import load_image_set
from spmlkit.training.config import config_from_dict
from spmlkit.training.run_data import load_image_data


def test_the_digits_mosaic_is_generated_at_the_asked_counts_and_size():
    images = load_image_set("digits_mosaic", image_size=32, mosaic_train=6, mosaic_test=3)
    same = make_digits_mosaic(num_train=6, num_test=3, seed=0, image_size=32)
    assert images.name == "digits-mosaic"  # the alias reads the listed name's data
    assert images.class_names == ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
    assert images.Y_train.shape == (6, 10) and images.Y_test.shape == (3, 10)
    np.testing.assert_array_equal(images.Y_train, same.train_labels)  # seed 0, bit-exact
    np.testing.assert_array_equal(images.Y_test, same.test_labels)
    train = images.train_dataset()
    assert len(train) == 6 and len(images.test_dataset()) == 3
    np.testing.assert_array_equal(train.images, same.train_images)  # [6, 1, 32, 32] uint8
    assert train.images.shape == (6, 1, 32, 32)
    assert images.observed is None and images.paths == {}


def test_a_run_passes_its_own_values_to_the_data_layer():
    config = config_from_dict({"dataset": "digits-mosaic", "image_size": 64, "mosaic_train": 5, "mosaic_test": 2})
    images = load_image_data(config)
    assert images.Y_train.shape == (5, 10) and images.Y_test.shape == (2, 10)
    assert images.train_dataset().images.shape == (5, 1, 64, 64)


def test_users_data_without_its_prepared_folder_says_how_to_prepare_it(tmp_path):
    missing = tmp_path / "nothing"
    with pytest.raises(FileNotFoundError) as info:
        load_image_set("folder", image_size=32, prepared=str(missing))
    assert str(info.value) == (
        f"no prepared data at {missing}; prepare your images first (`spmlkit prepare folder --root DIR` or "
        "`spmlkit prepare csv --labels FILE --images DIR`) and pass the folder it reports with --prepared")


def test_a_benchmark_without_a_prepared_folder_or_a_root(tmp_path):
    missing = tmp_path / "voc"
    with pytest.raises(FileNotFoundError) as info:
        load_image_set("voc2012", image_size=32, prepared=str(missing))
    assert str(info.value) == (f"no prepared dataset at {missing}; run `spmlkit prepare voc2012 --root DIR` or pass "
                               "--root (the folder you downloaded the dataset into)")
    with pytest.raises(ValueError) as info:
        load_image_set("voc2012", image_size=32)
    assert str(info.value) == ("dataset 'voc2012' needs --root (where the dataset was unpacked) or --prepared "
                               "(a folder written by `spmlkit prepare`)")
    with pytest.raises(ValueError, match=r"unknown dataset 'vco2012' \(did you mean 'voc2012'\?\)"):
        load_image_set("vco2012", image_size=32, root=str(tmp_path))


def _prepared_with_a_bad_image(folder: Path) -> Path:
    """A digits-mosaic prepared folder (4 train, 2 test images) whose `--check` listed train row 3."""
    export_png(make_digits_mosaic(num_train=4, num_test=2, seed=0, image_size=16), folder)
    ds = load_prepared(folder)
    write_prepared(folder, dataset=ds.dataset, class_names=ds.class_names, train_images=ds.train_images,
                   train_labels=ds.train_labels, test_images=ds.test_images, test_labels=ds.test_labels, root=folder,
                   bad_images=[BadImage(ds.train_images[3], "truncated")])
    return folder / ds.train_images[3]


def test_a_listed_unreadable_image_in_the_read_rows_is_refused_before_training(tmp_path):
    folder = tmp_path / "mosaic"
    bad = _prepared_with_a_bad_image(folder)
    with pytest.raises(ValueError) as info:
        load_image_set("prepared", image_size=16, prepared=str(folder))
    assert str(info.value) == (
        f"1 image of the digits_mosaic lists this run trains and tests on cannot be read ({bad}; the full list with "
        f"reasons is in {folder / 'bad_images.txt'}); re-download it (replace each with a readable copy), then "
        f"prepare again with `spmlkit prepare digits_mosaic --root DIR --out {folder} --check` (DIR: the folder the "
        "dataset was unpacked into) before training")
    # the first 3 train rows leave the bad one out: read, all 4 listed paths kept (the caller cuts rows)
    images = load_image_set("prepared", image_size=16, prepared=str(folder), subset=3)
    assert images.name == "digits_mosaic" and len(images.paths["train"]) == 4 and len(images.paths["test"]) == 2
    assert images.Y_train.shape == (4, 10) and images.transform_spec["size"] == 16
