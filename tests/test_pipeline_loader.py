"""The image loader's defaults: the automatic worker count, and results that do not depend on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.data.digits_mosaic import DigitsMosaicDataset, make_digits_mosaic
from spmlkit.data.images import MAX_AUTO_WORKERS, loader_workers
from spmlkit.experiments.presets import DATASET_DEFAULTS
from spmlkit.training import train
from spmlkit.training.config import RunConfig, config_from_dict
from spmlkit.training.sources import ImageSource

BASE = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 240, "mosaic_test": 60,
        "hflip": True, "batch_size": 32, "method": "an", "epochs": 2, "device": "cpu"}
#: what an epoch's record holds besides the results: wall-clock measurements
TIMINGS = ("train_seconds", "epoch_seconds", "images_per_second")

pytestmark = pytest.mark.usefixtures("one_thread")


def _cpus(monkeypatch: pytest.MonkeyPatch, n: int, local_world_size: int | None = None) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(n)), raising=False)
    if local_world_size is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))


def test_automatic_worker_count_follows_the_cpus_this_process_may_use(monkeypatch):
    _cpus(monkeypatch, 4)
    assert loader_workers(None) == 3  # one CPU left to the main process
    _cpus(monkeypatch, 16)
    assert loader_workers(None) == 15  # a 16-core GPU machine: every core but the main process decodes
    _cpus(monkeypatch, 64)
    assert loader_workers(None) == MAX_AUTO_WORKERS == 16
    _cpus(monkeypatch, 1)
    assert loader_workers(None) == 0  # one CPU: load in the main process
    _cpus(monkeypatch, 16, local_world_size=4)
    assert loader_workers(None) == 3  # 16 CPUs shared by 4 processes, one each for the process itself
    _cpus(monkeypatch, 16, local_world_size=8)
    assert loader_workers(None) == 1


def test_an_explicit_worker_count_is_used_as_given(monkeypatch):
    _cpus(monkeypatch, 64)
    assert loader_workers(0) == 0  # 0: in the main process, never replaced by the automatic count
    assert loader_workers(3) == 3
    assert loader_workers(20) == 20  # the cap applies to the automatic count only


def test_config_defaults_to_automatic_and_checks_the_value():
    assert RunConfig().machine.num_workers is None
    assert config_from_dict({"num_workers": 0}).machine.num_workers == 0
    with pytest.raises(ValueError, match="num_workers must be an integer >= 0 or null"):
        RunConfig(num_workers=-1)


def test_loader_settings_with_and_without_workers():
    mosaic = make_digits_mosaic(num_train=20, num_test=8, seed=0, image_size=32)
    train_set, test_set = DigitsMosaicDataset(mosaic.train_images), DigitsMosaicDataset(mosaic.test_images)

    def source(workers: int | None) -> ImageSource:
        return ImageSource(train_set, test_set, np.arange(16), np.arange(16, 20), batch_size=4, eval_batch_size=None,
                           hflip=True, num_workers=workers, device=torch.device("cpu"), channels_last=True,
                           num_classes=10)

    two = source(2)
    assert two.train_loader.num_workers == 2 and two.train_loader.persistent_workers
    assert two.train_loader.prefetch_factor == ImageSource.train_prefetch == 4
    assert not two.train_loader.pin_memory  # pinned memory only helps a copy to CUDA
    assert two.val_loader.persistent_workers and not two.test_loader.persistent_workers  # the test list: read once
    zero = source(0)
    assert zero.train_loader.num_workers == 0 and not zero.train_loader.persistent_workers
    assert source(None).num_workers == loader_workers(None)


def test_results_do_not_depend_on_the_number_of_workers():
    """The (index, flip) batches are drawn in the main process: 0 or 2 workers load the same ones."""
    runs = [train(config_from_dict({**BASE, "num_workers": n})) for n in (0, 2)]
    histories = [[{k: v for k, v in h.items() if k not in TIMINGS} for h in r.history] for r in runs]
    np.testing.assert_equal(histories[0], histories[1])  # exactly equal; NaN (no pseudo-labels) equals NaN
    assert [h["train_loss"] for h in histories[0]] == [h["train_loss"] for h in histories[1]]
    assert runs[0].test_map == runs[1].test_map
    a, b = (r.model.state_dict() for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_num_workers_option_reaches_the_config(tmp_path):
    from spmlkit.cli.train import resolve_from_args
    from spmlkit.cli import build_parser

    args = build_parser().parse_args(["train", "--dataset", "digits-mosaic", "--num-workers", "0"])
    assert resolve_from_args(args).machine.num_workers == 0
    args = build_parser().parse_args(["train", "--dataset", "digits-mosaic"])
    assert resolve_from_args(args).machine.num_workers is None
    assert main(["train", "--dataset", "digits-mosaic", "--num-workers", "-2", "--out", str(tmp_path / "r")]) == 2
