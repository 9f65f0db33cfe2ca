"""Presets of the PU-MLC protocol: COCO's PU-MLC image list and training on all of trainval."""

from __future__ import annotations

import pytest

from spmlkit.data.formats import dataset_variants
from spmlkit.experiments.presets import DATASET_DEFAULTS, PRESETS, get_preset


def test_only_pu_mlc_coco_uses_the_pu_mlc_list():
    with_variant = {name for name, p in PRESETS.items() if p.config.get("dataset_variant") is not None}
    assert with_variant == {"pu_mlc/coco2014", "pu_mlc/coco2014-official"}
    assert get_preset("pu_mlc/coco2014").config["dataset_variant"] == "pu_mlc"
    assert "pu_mlc" in dataset_variants("coco2014")
    # the value is a training option, not a method hyperparameter
    assert "dataset_variant" not in get_preset("pu_mlc/coco2014").config["hparams"]
    # every SPML paper's COCO preset keeps the default (annotated-images) list
    assert get_preset("em/coco2014").config.get("dataset_variant") is None


@pytest.mark.parametrize("name", ["pu_mlc/coco2014", "pu_mlc/voc2007", "voc2007", "pu_mlc/voc2007-official",
                                  "pu_mlc/coco2014-official"])
def test_pu_mlc_presets_train_on_all_of_trainval(name):
    preset = get_preset(name)
    assert preset.config["val_frac"] == 0.0
    assert "val_frac" not in preset.config.get("hparams", {})
    # the notes tell how to get a held-out validation split back
    assert "--val-frac 0.2" in preset.notes and "val_frac: 0.2" in preset.notes


def test_val_frac_is_set_only_for_the_pu_mlc_protocol():
    assert DATASET_DEFAULTS["voc2007"]["val_frac"] == 0.0
    assert all("val_frac" not in DATASET_DEFAULTS[d] for d in ("voc2012", "coco2014", "nuswide", "cub"))
    others = {name for name, p in PRESETS.items() if "val_frac" in p.config and p.method != "pu_mlc"}
    assert others == set()
