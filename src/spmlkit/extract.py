"""Extract backbone features once, then train any method on them (``spmlkit extract``).

This is the "linear" setting of the base protocol (a linear head on frozen ImageNet
features) and the fast path for sweeping methods and hyperparameters on a CPU. Features are
the global-average-pooled backbone output of each image, evaluation transform (no flip),
written as memory-mapped ``.npy`` files (float32, or float16 to halve the disk size) with the
label matrices:

    <out>/meta.json              kind "spmlkit-features", version, dataset, backbone, size, classes
    <out>/train_features.npy     [N_train, D]  official train list (split later by the protocol)
    <out>/test_features.npy      [N_test, D]
    <out>/train_labels.npy, test_labels.npy   uint8 0/1
    <out>/.spmlkit.json          marks the folder as extracted features (spmlkit.output_dir): a folder
                                 holding other files, or another command's output (a prepared table),
                                 is refused, never written into

Features of a backbone with random weights (``--no-pretrained``, the only way offline) come from no
network trained on images; ``meta.json`` says so in its ``"warning"``, and so does every table built
on them (:func:`~spmlkit.data.feature_dir.random_weights_warning`).

A user's prepared folder (``spmlkit prepare folder|csv``) has no full train labels: its observed
{-1, 0, 1} labels are kept as ``train_observed.npy`` (``meta.json``: ``"observation": "given"``),
and its test list, when it was given one, keeps its full labels; without one the folder has no
test files (``"test": false``). The format is :mod:`spmlkit.data.feature_dir`'s.

:func:`load_feature_dir` reads it back as a :class:`~spmlkit.data.tabular.TabularDataset`
(memory-mapped), so ``spmlkit train --features DIR`` and ``spmlkit benchmark --dataset DIR``
use the feature trainer unchanged, on the data's own labels.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .data.feature_dir import is_feature_dir, random_weights_warning, write_feature_labels
from .errors import InputError, user_input
from .output_dir import FEATURES, check_output_dir, claim_output_dir, records_a_table

__all__ = ["extract_features"]


@torch.no_grad()
def extract_features(
    config,
    out: str | Path,
    *,
    dtype: str = "float32",
    on_batch: Callable[[int], None] | None = None,
) -> Path:
    """Extract pooled features of the official train and test lists of ``config.data.dataset``.

    ``config`` is a :class:`~spmlkit.training.config.RunConfig` (dataset, root/prepared,
    backbone, pretrained, image_size, batch size, device, num_workers are used).
    """
    from .data.images import loader_workers
    from .models import build_model
    from .training.device import resolve_device
    from .training.run_data import load_image_data
    from .training.sources import model_inputs, pixel_loader

    from .data.registry import resolve_dataset

    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
    if resolve_dataset(config.data.dataset).kind == "features":
        raise InputError(f"{config.data.dataset} is a feature dataset already: there are no images to extract "
                         f"features from; train on it directly (spmlkit train --dataset {config.data.dataset})")
    out = Path(out)
    check_output_dir(out, FEATURES, option="--features-out", recognise=_is_feature_output)  # before any work
    device = resolve_device(config.machine.device)
    # the data and the network are had before the folder is made: a refusal (a damaged prepared folder,
    # pretrained weights that cannot be downloaded offline) is one line and leaves nothing behind
    with user_input():
        data = load_image_data(config)
        torch.manual_seed(config.optimisation.seed)  # reproducible features from a randomly initialised backbone
        model = build_model(config.model.backbone, len(data.class_names), pretrained=config.model.pretrained,
                            lgconv=config.model.lgconv)
    claim_output_dir(out, FEATURES, option="--features-out", recognise=_is_feature_output)
    model.to(device).eval()
    bs = config.machine.eval_batch_size or max(config.optimisation.batch_size, 64)
    splits = [("train", data.train_dataset())]
    if data.Y_test is not None:  # a user's folder may have no labelled test list: then it has no test features
        splits.append(("test", data.test_dataset()))
    (out / "meta.json").unlink(missing_ok=True)  # the folder is incomplete until its new meta.json is written
    for split, dataset in splits:
        loader = pixel_loader(dataset, np.arange(len(dataset)), batch_size=bs,
                              num_workers=loader_workers(config.machine.num_workers), device=device)
        tmp = out / f"{split}_features.npy.tmp"
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.dtype(dtype), shape=(len(dataset), model.feat_dim))
        start = 0
        for x in model_inputs(loader, dataset.transform, device):
            f = model.features(x).float().cpu().numpy()
            arr[start : start + len(f)] = f
            start += len(f)
            if on_batch:
                on_batch(len(f))
        arr.flush()
        del arr
        os.replace(tmp, out / f"{split}_features.npy")
    recorded = {"dataset": data.name, "backbone": config.model.backbone, "pretrained": config.model.pretrained,
                "image_size": config.data.image_size, "dtype": dtype, "feature_dim": model.feat_dim}
    warning = random_weights_warning(recorded)
    if warning:  # said where the features are, for whoever reads the folder later
        recorded["warning"] = warning
    if data.observed is not None:
        recorded["prepared"] = str(Path(config.data.prepared).expanduser().resolve())
        for stale in ("train_labels.npy", *(("test_features.npy", "test_labels.npy") if data.Y_test is None else ())):
            (out / stale).unlink(missing_ok=True)  # of an earlier extraction into this folder
    # full labels of a benchmark, or a user's observed train labels and full test labels where given
    write_feature_labels(out, class_names=list(data.class_names), Y_train=data.Y_train, observed=data.observed,
                         Y_test=data.Y_test, recorded=recorded)
    return out


_FEATURE_FILES = frozenset({"meta.json", "train_features.npy", "test_features.npy", "train_labels.npy",
                            "train_observed.npy", "test_labels.npy", "train_features.npy.tmp",
                            "test_features.npy.tmp"})


def _is_feature_output(path: Path) -> bool:
    """An unmarked folder an earlier spmlkit extracted into: a feature folder, or (stopped before its
    ``meta.json``) nothing but the files this module writes; never one ``prepare table`` wrote (its
    labels are the user's own, spmlkit.output_dir)."""
    if records_a_table(path):
        return False
    return is_feature_dir(path) or all(name in _FEATURE_FILES or name.startswith(".") for name in os.listdir(path))
