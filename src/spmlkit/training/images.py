"""End-to-end image training: the same loop as for features, with images and a backbone.

``train_images(config)`` prepares the data under the shared protocol (reference split and
observation over the official train list), builds backbone + head, and runs
:func:`~spmlkit.training.loop.run_loop` with an image :class:`ImageSource`. The method
machinery (:class:`~spmlkit.training.components.MethodComponents`) is the one the feature
trainer uses, so every loss and label-state algorithm works unchanged.

Reproducibility: shuffling *and* the random horizontal flips are drawn in the main process
from one seeded generator (the sampler yields ``(index, flip)`` pairs), so results do not
depend on the number of loader workers, and a resumed run (``resume=True``) continues the
exact random stream from its checkpoint. A resumed run therefore reaches the same result as
an uninterrupted one on the same machine and device.

Run folder (``config.out``): ``config.yaml`` (resolved), ``metrics.csv`` / ``metrics.json``
(per epoch), ``last.pt`` (everything needed to resume, written atomically every epoch),
``best.pt`` (best validation epoch: model, label state, config, class names; what
``spmlkit predict`` loads), ``test_metrics.json`` and TensorBoard logs when tensorboard is
installed.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from .evaluation import evaluate_test, unobserved_analysis
from ..protocol import prepare_protocol
from ..labels import LabelState
from ..methods import get_method, resolve_hparams
from .checkpoint import atomic_save, atomic_write_text, load_checkpoint
from .components import MethodComponents, build_components, method_label_matrix
from .config import TrainConfig, save_config
from .features import FeatureSource, expected_positives
from .loop import LoopState, run_loop

__all__ = ["ImageData", "load_image_data", "ImageSource", "train_images", "RunSummary", "resolve_device"]

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- data
@dataclass
class ImageData:
    """The official train and test lists of an image dataset, ready for the protocol."""

    name: str
    class_names: tuple[str, ...]
    Y_train: np.ndarray  # full 0/1 labels of the official train list
    Y_test: np.ndarray
    train_dataset: Callable[[bool], Dataset]  # (augment) -> dataset over the train list
    test_dataset: Callable[[], Dataset]
    paths: dict[str, list[str]] = field(default_factory=dict)
    #: how to turn an image file into the model's input (recorded in best.pt for predict)
    transform_spec: dict[str, Any] = field(default_factory=dict)


def load_image_data(config: TrainConfig) -> ImageData:
    """Build :class:`ImageData` for ``config.dataset``.

    ``digits-mosaic`` is generated in memory (seed 0, documented in
    :mod:`spmlkit.data.digits_mosaic`); a benchmark dataset is read from its prepared folder
    (``config.prepared``, default ``<root>/spmlkit-prepared/<dataset>``), which is created
    with ``spmlkit prepare`` semantics on first use.
    """
    if config.dataset in ("digits-mosaic", "digits_mosaic"):
        from ..data.digits_mosaic import MOSAIC_MEAN, MOSAIC_STD, DigitsMosaicDataset, make_digits_mosaic

        mosaic = make_digits_mosaic(num_train=config.mosaic_train, num_test=config.mosaic_test, seed=0,
                                    image_size=config.image_size)
        return ImageData(
            name="digits-mosaic",
            class_names=tuple(mosaic.class_names),
            Y_train=mosaic.train_labels,
            Y_test=mosaic.test_labels,
            train_dataset=lambda augment: DigitsMosaicDataset(mosaic.train_images),
            test_dataset=lambda: DigitsMosaicDataset(mosaic.test_images),
            transform_spec={"kind": "grey", "size": config.image_size, "mean": MOSAIC_MEAN, "std": MOSAIC_STD},
        )
    from ..data.formats import load_prepared, prepare
    from ..data.images import ImageFileDataset, build_transform

    prepared_dir = _prepared_dir(config)
    if not (prepared_dir / "meta.json").is_file():
        if config.dataset == "prepared" or not config.root:
            raise FileNotFoundError(
                f"no prepared dataset at {prepared_dir}; run `spmlkit prepare {config.dataset} --root DIR` "
                "or pass --root (the folder you downloaded the dataset into)"
            )
        log.info("preparing %s from %s into %s", config.dataset, config.root, prepared_dir)
        prepare(config.dataset, config.root, prepared_dir)
    ds = load_prepared(prepared_dir)  # image paths resolve against the root recorded by prepare
    size = config.image_size
    train_paths, test_paths = [str(p) for p in ds.paths("train")], [str(p) for p in ds.paths("test")]
    return ImageData(
        name=ds.dataset,
        class_names=tuple(ds.class_names),
        Y_train=np.asarray(ds.train_labels),
        Y_test=np.asarray(ds.test_labels),
        # flips are applied by ImageSource from the seeded generator, never by the transform
        train_dataset=lambda augment: ImageFileDataset(train_paths, build_transform(size, train=False)),
        test_dataset=lambda: ImageFileDataset(test_paths, build_transform(size, train=False)),
        paths={"train": train_paths, "test": test_paths},
        transform_spec={"kind": "imagenet", "size": size},
    )


def _prepared_dir(config: TrainConfig) -> Path:
    if config.prepared:
        return Path(config.prepared)
    if config.root:
        return Path(config.root) / "spmlkit-prepared" / config.dataset
    raise ValueError(
        f"dataset {config.dataset!r} needs --root (where the dataset was unpacked) or --prepared "
        "(a folder written by `spmlkit prepare`)"
    )


class _Indexed(Dataset):
    """Rows ``rows`` of ``base``; item ``(i, flip)`` -> ``(image, i)`` with ``i`` local."""

    def __init__(self, base: Dataset, rows: np.ndarray):
        self.base, self.rows = base, np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item):
        i, flip = item if isinstance(item, tuple) else (item, False)
        x, _ = self.base[int(self.rows[i])]
        if flip:
            x = torch.flip(x, dims=(-1,))
        return x, i


class _EpochBatches(Sampler):
    """Batches of ``(index, flip)`` set by the main process before each epoch."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, bool]]] = []

    def __iter__(self) -> Iterator[list[tuple[int, bool]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class ImageSource:
    """Image loaders for the loop (a :class:`~spmlkit.training.loop.DataSource`)."""

    def __init__(self, data: ImageData, train_idx: np.ndarray, val_idx: np.ndarray, config: TrainConfig,
                 device: torch.device):
        self.config, self.device = config, device
        self.n = len(train_idx)
        workers = config.num_workers
        common = dict(num_workers=workers, pin_memory=device.type == "cuda", persistent_workers=workers > 0)
        self.sampler = _EpochBatches()
        self.train_loader = DataLoader(_Indexed(data.train_dataset(True), train_idx), batch_sampler=self.sampler,
                                       **common)
        eval_bs = config.eval_batch_size or max(config.batch_size, 64)
        eval_ds = data.train_dataset(False)
        self.train_eval_loader = DataLoader(_Indexed(eval_ds, train_idx), batch_size=eval_bs, shuffle=False, **common)
        self.val_loader = DataLoader(_Indexed(eval_ds, val_idx), batch_size=eval_bs, shuffle=False, **common)
        self.autocast: Callable[[], Any] | None = None

    def train_batches(self, generator: torch.Generator):
        perm = torch.randperm(self.n, generator=generator).tolist()
        flips = (torch.rand(self.n, generator=generator) < 0.5).tolist() if self.config.hflip else [False] * self.n
        bs = self.config.batch_size
        self.sampler.batches = [[(i, flips[i]) for i in perm[s : s + bs]] for s in range(0, self.n, bs)]
        for x, idx in self.train_loader:
            if self.device.type == "cuda" and self.config.channels_last:
                x = x.to(memory_format=torch.channels_last)
            yield x, idx

    @torch.no_grad()
    def _predict(self, model: nn.Module, loader: DataLoader) -> torch.Tensor:
        was = model.training
        model.eval()
        out = []
        for x, _ in loader:
            x = x.to(self.device, non_blocking=True)
            with self.autocast() if self.autocast else torch.autocast("cpu", enabled=False):
                out.append(torch.sigmoid(model(x).float()).cpu())
        model.train(was)
        return torch.cat(out)

    def predict_train(self, model: nn.Module) -> torch.Tensor:
        return self._predict(model, self.train_eval_loader)

    def predict_val(self, model: nn.Module) -> torch.Tensor:
        return self._predict(model, self.val_loader)


# ----------------------------------------------------------------------------- machinery
def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    return device


def _autocast_factory(config: TrainConfig, device: torch.device):
    amp = config.amp
    if amp == "auto":
        amp = "bf16" if device.type == "cuda" else "none"
    if amp == "none":
        return None, None
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" and device.type == "cuda" else None
    return (lambda: torch.autocast(device.type, dtype=dtype)), scaler


def _optimizer(config: TrainConfig, groups: list[dict[str, Any]], lr: float) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=config.momentum, weight_decay=config.weight_decay)
    return torch.optim.Adam(groups, lr=lr, weight_decay=config.weight_decay)


@dataclass
class RunSummary:
    out: Path
    best_epoch: int
    val_map: float
    test_map: float
    test_metrics: dict[str, float]
    history: list[dict[str, float]]
    images_per_second: float
    resumed_from: int = 0
    finished: bool = True
    test_ap: list[float] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] = field(default_factory=list)


def _write_metrics(out: Path, history: list[dict[str, float]]) -> None:
    import pandas as pd

    atomic_write_text(out / "metrics.json", json.dumps(history, indent=1))
    atomic_write_text(out / "metrics.csv", pd.DataFrame(history).to_csv(index=False))


def _tensorboard(out: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard not installed: logs are optional
        return None
    return SummaryWriter(str(out / "tensorboard"))


def train_images(
    config: TrainConfig,
    *,
    resume: bool = False,
    stop_after: int | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> RunSummary:
    """Train ``config`` end to end and evaluate the best validation epoch on the test list.

    ``resume=True`` continues from ``<out>/last.pt`` (a killed run loses at most the epoch in
    progress). ``stop_after=N`` ends this invocation after N more epochs (for time-sliced
    jobs); resume later to finish.
    """
    from ..models import build_model

    method = get_method(config.method)
    resolved = resolve_hparams(method, config.hparams)
    out = Path(config.out)
    last_path = out / "last.pt"
    ckpt = None
    if resume:
        if not last_path.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint at {last_path}; start the run without --resume")
        ckpt = load_checkpoint(last_path)
        saved = {k: v for k, v in ckpt["config"].items() if k != "out"}
        now = {k: v for k, v in config.to_dict().items() if k != "out"}
        diff = sorted(k for k in now if saved.get(k) != now[k])
        if diff:
            raise ValueError(
                f"--resume: the run in {out} was started with different settings ({', '.join(diff)}); "
                "resume with the same config or start a new run folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    save_config(config, out / "config.yaml")

    device = resolve_device(config.device)
    data = load_image_data(config)
    pdata = prepare_protocol(data.Y_train, config.observation, val_frac=config.val_frac)
    tr, va = pdata.train_idx, pdata.val_idx
    truth_train = data.Y_train[tr]
    train_labels = method_label_matrix(method, pdata.observed[tr], truth_train)
    val_targets = data.Y_train[va] if config.val_variant == "clean" else (pdata.observed[va] == 1).astype(np.uint8)

    torch.manual_seed(config.seed)
    np.random.seed(config.seed % 2**32)
    model = build_model(config.backbone, len(data.class_names), pretrained=config.pretrained, lgconv=config.lgconv)
    model.to(device)
    if device.type == "cuda" and config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    state = LabelState(train_labels)
    num_classes = len(data.class_names)

    def components(epochs: int) -> MethodComponents:
        return build_components(resolved, num_train=len(tr), num_classes=num_classes, observed=train_labels,
                                expected_num_pos=expected_positives(train_labels, truth_train), epochs=epochs,
                                seed=config.seed)

    comp = components(config.epochs)
    comp.loss.to(device)
    source = ImageSource(data, tr, va, config, device)
    autocast, scaler = _autocast_factory(config, device)
    source.autocast = autocast
    generator = torch.Generator().manual_seed(config.seed)

    if ckpt is None and config.linear_init_epochs > 0:
        _linear_init(config, model, comp, components, source, state, val_targets, truth_train, device)

    groups = model.param_groups(config.lr, config.head_lr_mult) + comp.param_groups(config.lr)
    optimizer = _optimizer(config, groups, config.lr)
    ls = LoopState()
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        comp.load_state_dict(ckpt["components"])
        state.load_state_dict(ckpt["label_state"])
        generator.set_state(ckpt["generator"])
        torch.set_rng_state(ckpt["torch_rng"])
        np.random.set_state(ckpt["numpy_rng"])
        loop = ckpt["loop"]
        ls = LoopState(epoch=loop["epoch"], history=loop["history"], best_val_map=loop["best_val_map"],
                       best_epoch=loop["best_epoch"], bad_epochs=loop["bad_epochs"],
                       stopped_early=loop["stopped_early"])
        best = load_checkpoint(out / "best.pt")
        ls.best_snapshot = {"model": best["model"], "components": best["components"], "label_state": best["label_state"]}
    resumed_from = ls.epoch
    writer = _tensorboard(out)
    stop_epoch = None if stop_after is None else ls.epoch + stop_after

    def on_epoch_end(loop_state: LoopState) -> None:
        if loop_state.best_epoch == loop_state.epoch:
            atomic_save({**loop_state.best_snapshot, "config": config.to_dict(), "class_names": list(data.class_names),
                         "epoch": loop_state.epoch, "val_map": loop_state.best_val_map,
                         "threshold": method.threshold, "transform": data.transform_spec}, out / "best.pt")
        atomic_save({
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "components": comp.state_dict(),
            "label_state": state.state_dict(), "generator": generator.get_state(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state(), "config": config.to_dict(),
            "loop": {"epoch": loop_state.epoch, "history": loop_state.history,
                     "best_val_map": loop_state.best_val_map, "best_epoch": loop_state.best_epoch,
                     "bad_epochs": loop_state.bad_epochs, "stopped_early": loop_state.stopped_early},
        }, last_path)
        _write_metrics(out, loop_state.history)
        if writer is not None:
            for k, v in loop_state.history[-1].items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    writer.add_scalar(k, v, loop_state.epoch)
        if stop_epoch is not None and loop_state.epoch >= stop_epoch and loop_state.epoch < config.epochs:
            raise _StopNow()

    try:
        result = run_loop(model=model, source=source, state=state, components=comp, optimizer=optimizer,
                          val_targets=val_targets, epochs=config.epochs, generator=generator,
                          truth_train=truth_train, patience=config.patience, min_delta=config.min_delta,
                          stop_drop=config.stop_drop,
                          loop_state=ls, on_epoch=on_epoch, on_epoch_end=on_epoch_end, autocast=autocast,
                          scaler=scaler, device=device)
    except _StopNow:
        return RunSummary(out, ls.best_epoch, ls.best_val_map, float("nan"), {}, ls.history,
                          _throughput(ls.history), resumed_from, finished=False)
    finally:
        if writer is not None:
            writer.close()

    test_loader = DataLoader(data.test_dataset(), batch_size=config.eval_batch_size or max(config.batch_size, 64),
                             shuffle=False, num_workers=config.num_workers)
    probs = source._predict(model, test_loader).numpy()
    test_metrics = evaluate_test(probs, data.Y_test, threshold=method.threshold,
                                 val_probs=source.predict_val(model).numpy(), val_targets=val_targets)
    analysis = unobserved_analysis(source.predict_train(model).numpy(), truth_train, pdata.observed[tr])
    atomic_write_text(out / "test_metrics.json", json.dumps(
        {"best_epoch": result.best_epoch, "val_map": result.best_val_map, **test_metrics,
         "class_names": list(data.class_names), "analysis": analysis}, indent=1))
    return RunSummary(out, result.best_epoch, result.best_val_map, test_metrics["map"],
                      {k: v for k, v in test_metrics.items() if isinstance(v, float)}, result.history,
                      _throughput(result.history), resumed_from, test_ap=test_metrics["ap"], analysis=analysis,
                      class_names=list(data.class_names))


class _StopNow(Exception):
    pass


def _throughput(history: list[dict[str, float]]) -> float:
    vals = [h["images_per_second"] for h in history if math.isfinite(h.get("images_per_second", float("nan")))]
    return float(np.mean(vals)) if vals else float("nan")


@torch.no_grad()
def _extract(model: nn.Module, loader: DataLoader, device: torch.device) -> torch.Tensor:
    model.eval()
    return torch.cat([model.features(x.to(device)).float().cpu() for x, _ in loader])


def _linear_init(config, model, comp, make_components, source, state, val_targets, truth_train, device) -> None:
    """LinearInit (ROLE+LI, REFERENCE.md C.10): train the head on frozen backbone features.

    Features of the train and val splits are extracted once (eval mode, no augmentation), the
    head is trained on them with the method's loss for ``linear_init_epochs`` epochs, the best
    epoch by validation mAP is kept, and ROLE's label estimator carries over to phase 2.
    """
    feats_tr = _extract(model, source.train_eval_loader, device)
    feats_va = _extract(model, source.val_loader, device)
    phase1 = make_components(config.linear_init_epochs)
    head = model.head
    lr = config.linear_init_lr or config.lr
    opt = torch.optim.Adam([{"params": list(head.parameters()), "lr": lr}, *phase1.param_groups(lr)], lr=lr)
    head_state = LabelState(state.observed.numpy())
    run_loop(model=head.cpu(), source=FeatureSource(feats_tr, feats_va, config.batch_size), state=head_state,
             components=phase1, optimizer=opt, val_targets=val_targets, epochs=config.linear_init_epochs,
             generator=torch.Generator().manual_seed(config.seed + 10_000), truth_train=truth_train)
    head.to(device)
    estimator = getattr(phase1.loss, "estimator", None)
    if estimator is not None and hasattr(comp.loss, "estimator"):
        comp.loss.estimator.load_probabilities(torch.sigmoid(estimator.phi.detach()))
