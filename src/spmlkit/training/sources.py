"""Where the training loop gets batches and predictions from: feature matrices or image files.

Both sources draw the epoch's order (and, for images, the horizontal flips) in the main
process from the run's one seeded generator, so a run's random stream does not depend on
the number of loader workers or of processes, and a resumed run continues it exactly. Under
torch.distributed every process draws the same global batches and loads only its slice
(:mod:`spmlkit.training.distributed`); predictions are sharded and gathered in index order. Predictions for
label algorithms and selection are made in eval mode, without augmentation, in index
order (docs/protocol.md, "Quirks of the official code", on the pass between epochs).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from .distributed import Distributed

__all__ = ["DataSource", "FeatureSource", "ImageSource", "model_inputs", "pixel_loader", "predict_proba"]


class DataSource(Protocol):
    """What the loop reads. ``track_train``: predicting the training set every epoch is cheap
    enough to record the observed-positive loss curve even when no method needs it."""

    track_train: bool

    def train_batches(self, generators: Sequence[torch.Generator]) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``(inputs [R, b, ...] of this process's slice, train-split indices [R, B] of the whole
        global batch)`` for one epoch of R runs, run ``r``'s rows shuffled with ``generators[r]``."""

    def rows(self, split: str) -> torch.Tensor:
        """The inputs of ``split`` (train | val | test) as one tensor, for the predictions of R
        batched runs (feature sources only)."""

    def predict_train(self, model: nn.Module) -> torch.Tensor:
        """Probabilities ``[N_train, C]`` in index order, eval mode, no augmentation."""

    def predict_val(self, model: nn.Module) -> torch.Tensor:
        """Probabilities ``[N_val, C]`` on the validation split."""

    def predict_test(self, model: nn.Module) -> torch.Tensor:
        """Probabilities ``[N_test, C]`` on the official test list."""

    def train_features(self, model: nn.Module) -> torch.Tensor:
        """The training rows' features ``[N_train, D]`` in index order, on the run's device: what a
        method that works on the whole training set reads (a k-NN graph of the rows and a network's
        input). A feature run's rows as the model sees them; an image run's pooled backbone features."""


@torch.no_grad()
def predict_proba(model: nn.Module, X: torch.Tensor, batch_size: int = 4096,
                  forward: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Probabilities for every row of ``X`` in eval mode (no augmentation, index order), in
    chunks of ``batch_size`` rows. ``forward`` (default: ``model`` itself) maps rows to a
    :class:`~spmlkit.models.ModelOutput` whose logits are ``[..., rows, C]``: R runs' stacked heads
    give ``[R, N, C]`` (:func:`~spmlkit.training.batched.probabilities`)."""
    forward = model if forward is None else forward
    was_training = model.training
    model.eval()
    try:
        if len(X) <= batch_size:  # one product (the same values a one-chunk torch.cat would copy)
            return torch.sigmoid(forward(X).logits)
        return torch.cat([torch.sigmoid(forward(X[i : i + batch_size]).logits) for i in range(0, len(X), batch_size)],
                         dim=-2)
    finally:
        model.train(was_training)


class FeatureSource:
    """In-memory feature tensors (already standardised) of the train, val and test rows."""

    track_train = True

    def __init__(self, X_train: torch.Tensor, X_val: torch.Tensor, X_test: torch.Tensor | None, batch_size: int,
                 dist: Distributed | None = None, drop_last: bool = False):
        self.X_train, self.X_val, self.X_test, self.batch_size = X_train, X_val, X_test, batch_size
        self.dist = dist or Distributed()
        self.drop_last = drop_last  # an epoch's last, shorter batch is not trained on

    def train_batches(self, generators: Sequence[torch.Generator]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.X_train)
        perms = torch.stack([torch.randperm(n, generator=generator) for generator in generators])
        # each step gathers its own rows (one index_select for all runs): the same values as one
        # gather of the whole shuffled epoch, without writing and re-reading an epoch-sized copy
        # (R x N x D floats: 310 MB for 9 tmc2007 runs, gathered 3.6x slower than step by step)
        runs = len(generators)
        for start in range(0, n - self.batch_size + 1 if self.drop_last else n, self.batch_size):
            idx = perms[:, start : start + self.batch_size]
            rows = self.dist.shard(idx.shape[1])
            mine = idx[:, rows.start : rows.stop]
            # the order is drawn on the CPU (the runs' generators), the features may live on the GPU
            gathered = torch.index_select(self.X_train, 0, mine.reshape(-1).to(self.X_train.device))
            yield gathered.view(runs, mine.shape[1], -1), idx

    def rows(self, split: str) -> torch.Tensor:
        X = {"train": self.X_train, "val": self.X_val, "test": self.X_test}[split]
        if X is None:
            raise ValueError(f"this feature source has no {split} rows")
        return X

    def _predict(self, model: nn.Module, X: torch.Tensor) -> torch.Tensor:
        return self.dist.gather_predictions(lambda rows: predict_proba(model, X[rows]), len(X))

    def predict_train(self, model: nn.Module) -> torch.Tensor:
        return self._predict(model, self.X_train)

    def predict_val(self, model: nn.Module) -> torch.Tensor:
        return self._predict(model, self.X_val)

    def predict_test(self, model: nn.Module) -> torch.Tensor:
        if self.X_test is None:
            raise ValueError("this feature source has no test rows")
        return self._predict(model, self.X_test)

    def train_features(self, model: nn.Module) -> torch.Tensor:
        """The training rows as the model sees them (standardised when the run standardises)."""
        return self.X_train


class _PixelRows(Dataset):
    """Rows ``rows`` of a pixel dataset, read a batch at a time in a loader worker.

    The DataLoader hands :meth:`__getitems__` a whole batch of local indices -- ``i`` for
    evaluation, ``(i, flip)`` for training -- and it returns ``(uint8 pixels [b, S, S, c],
    local indices [b], flips [b] or None)``: one :meth:`~spmlkit.data.images.PixelDataset.pixels`
    call per batch (a single gather from a pre-resized cache), the flips applied later on the
    device.
    """

    def __init__(self, base: Any, rows: np.ndarray):
        self.base, self.rows = base, np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def _split(self, items: list[Any]) -> tuple[list[int], torch.Tensor | None, list | None]:
        """``(local indices, flips or None, strong-view draws or None)`` of a batch's items: ``i``,
        ``(i, flip)`` or ``(i, flip or None, draw)`` (the strong view's draw)."""
        if not (items and isinstance(items[0], tuple)):
            return [int(i) for i in items], None, None
        local = [int(item[0]) for item in items]
        flips = None if items[0][1] is None else torch.tensor([bool(item[1]) for item in items])
        return local, flips, [item[2] for item in items] if len(items[0]) > 2 else None

    def __getitems__(self, items: list[Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        local, flips, draws = self._split(items)
        pixels = self.base.pixels(self.rows[local])
        if draws is not None:  # the weak rows, then their strong views; the strong ones flip themselves
            from ..data.strong_augment import two_views

            pixels = two_views(pixels, draws)
            flips = None if flips is None else torch.cat([flips, torch.zeros(len(local), dtype=torch.bool)])
        return pixels, torch.tensor(local, dtype=torch.long), flips

    def __getitem__(self, item: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        return self.__getitems__([item])


class _EncodedRows(_PixelRows):
    """Rows of a file list as the GPU decoder takes them (:mod:`spmlkit.data.gpu_decode`)."""

    def __getitems__(self, items: list[Any]) -> tuple[list, torch.Tensor, torch.Tensor | None]:
        local, flips, _ = self._split(items)
        return self.base.encoded(self.rows[local]), torch.tensor(local, dtype=torch.long), flips


def _crop_input(dataset: Any, crop: Any) -> Any:
    """The training pixels a crop policy cuts from (read at its scale), or ``dataset`` itself."""
    if crop is None:
        return dataset
    from ..data.crops import ScaledPixels

    return ScaledPixels(dataset, crop.scale)


def _as_is(batch: Any) -> Any:
    """The collate function of batches a dataset already assembled (module level: workers pickle it)."""
    return batch


def pixel_loader(dataset: Any, rows: np.ndarray, *, batch_size: int, num_workers: int, device: torch.device,
                 persistent: bool = False) -> DataLoader:
    """Rows ``rows`` of a pixel dataset in batches of ``batch_size``, in order: ``(uint8 pixels,
    local indices, None)`` per batch, in pinned memory for a CUDA ``device``."""
    return DataLoader(_PixelRows(dataset, rows), batch_size=batch_size, num_workers=num_workers,
                      pin_memory=device.type == "cuda", persistent_workers=persistent and num_workers > 0,
                      collate_fn=_as_is)


def model_inputs(loader: DataLoader, transform: Any, device: torch.device, *, channels_last: bool = False
                 ) -> Iterator[torch.Tensor]:
    """The model's input batches of a :func:`pixel_loader`, in order: each batch copied to
    ``device`` one step ahead and normalised there (no flips)."""
    from .prefetch import to_device_ahead

    for pixels in to_device_ahead(loader, device, lambda loaded: loaded[0].to(device, non_blocking=True)):
        yield transform.normalize(pixels, channels_last=channels_last)


class _EpochBatches(Sampler):
    """Batches of ``(index, flip)`` set by the main process before each epoch."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, bool]]] = []

    def __iter__(self) -> Iterator[list[tuple[int, bool]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class ImageSource:
    """Image loaders over the train/val rows of the official train list, and the test list.

    The datasets are pixel datasets (:class:`~spmlkit.data.images.PixelDataset`): loader workers read whole
    batches of uint8 pixels of the run's size; the batch is copied to the device one step ahead
    (:func:`~spmlkit.training.prefetch.to_device_ahead`, pinned memory and a side stream on
    CUDA), then flipped and normalised there by the dataset's
    :class:`~spmlkit.data.images.ImageTransform` (docs/architecture.md, "Feeding the GPU").

    ``num_workers``: loader processes (None: :func:`~spmlkit.data.images.loader_workers`
    chooses from the CPUs available; 0: the main process). Workers only load what the main
    process asks for: the (index, flip) batches are drawn here, so results do not depend on
    their number. ``decode="gpu"`` decodes the training JPEGs with nvJPEG
    (:mod:`spmlkit.data.gpu_decode`; CUDA only); evaluation stays on the CPU path.
    """

    track_train = False
    #: training batches each loader worker keeps ready: decoding times vary from image to image,
    #: and a deeper queue absorbs the slow ones before the GPU waits
    train_prefetch = 4

    def __init__(self, train_dataset: Any, test_dataset: Any, train_idx: np.ndarray, val_idx: np.ndarray, *,
                 batch_size: int, eval_batch_size: int | None, hflip: bool, num_workers: int | None,
                 device: torch.device, channels_last: bool, num_classes: int, dist: Distributed | None = None,
                 decode: str = "cpu", crop: Any = None, drop_last: bool = False, strong: bool = False):
        from ..data.images import loader_workers

        self.device, self.hflip, self.batch_size, self.num_classes = device, hflip, batch_size, num_classes
        self.transform = train_dataset.transform
        self.dist = dist or Distributed()
        self.channels_last = channels_last and device.type == "cuda"
        self.n = len(train_idx)
        self.num_workers = workers = loader_workers(num_workers)
        prefetch = {"prefetch_factor": self.train_prefetch} if workers > 0 else {}
        self.sampler = _EpochBatches()
        self.decoder: Callable[..., torch.Tensor] | None = None
        #: the multi-scale crops of training images (:class:`~spmlkit.data.crops.CropPolicy`), or None
        self.crop = crop
        self.drop_last = drop_last  # an epoch's last, shorter batch is not trained on
        #: each training row also as a strong view (:mod:`spmlkit.data.strong_augment`): a batch
        #: of b rows is 2b images, the weak views first
        self.strong = strong
        if crop is not None and decode != "cpu":  # planning refuses it first (training.recipe.check_recipe)
            raise ValueError("crops are cut from pixels the loader workers read; they need decode='cpu'")
        if decode == "gpu":
            rows: Dataset = self._encoded(train_dataset, train_idx, device)
        elif decode == "cpu":
            rows = _PixelRows(_crop_input(train_dataset, crop), train_idx)
        else:
            raise ValueError(f"decode must be 'cpu' or 'gpu', got {decode!r}")
        # pixels are pinned for their asynchronous copy; encoded files are not copied by us at all
        # (nvJPEG reads the bytes on the host and stages them in its own pinned buffers)
        self.train_loader = DataLoader(rows, batch_sampler=self.sampler, num_workers=workers,
                                       pin_memory=device.type == "cuda" and decode == "cpu",
                                       persistent_workers=workers > 0,
                                       collate_fn=_as_is, **prefetch)
        eval_bs = eval_batch_size or max(batch_size, 64)
        self.train_eval_loader = self._shard_loader(train_dataset, train_idx, eval_bs)
        self.val_loader = self._shard_loader(train_dataset, val_idx, eval_bs)
        test_rows = np.arange(len(test_dataset))
        # read once, at the end of the run: workers that outlive it would only hold memory
        self.test_loader = self._shard_loader(test_dataset, test_rows, eval_bs, persistent=False)
        self.sizes = {"train": len(train_idx), "val": len(val_idx), "test": len(test_rows)}
        self.autocast: Callable[[], Any] | None = None

    def _encoded(self, train_dataset: Any, train_idx: np.ndarray, device: torch.device) -> Dataset:
        """The training rows as file bytes for ``decode="gpu"``; sets :attr:`decoder`."""
        from ..data.gpu_decode import EncodedImages, GpuDecoder
        from ..errors import InputError

        if device.type != "cuda":
            raise InputError(f"--decode gpu decodes JPEGs on a CUDA GPU, but this run's device is {device}; use "
                             "--decode cpu (the default)")
        paths = getattr(train_dataset, "paths", None)
        if paths is None or self.transform.grey:
            raise InputError(f"--decode gpu reads photographs from image files, but this dataset "
                             f"({type(train_dataset).__name__}) has none (the digits mosaic is generated in memory); "
                             "use --decode cpu (the default)")
        encoded = EncodedImages(paths, self.transform)
        rows = _EncodedRows(encoded, train_idx)
        decoder = GpuDecoder(self.transform, device)
        self.decoder = lambda items, local: decoder(items, [encoded.paths[int(r)] for r in rows.rows[local.numpy()]])
        return rows

    def _shard_loader(self, dataset: Any, rows: np.ndarray, batch_size: int, persistent: bool = True) -> DataLoader:
        """This process's contiguous share of ``rows``, in index order."""
        return pixel_loader(dataset, np.asarray(rows)[self.dist.shard(len(rows))], batch_size=batch_size,
                            num_workers=self.num_workers, device=self.device, persistent=persistent)

    def _upload(self, loaded: tuple[Any, torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A loaded batch on the device: ``(uint8 pixels, flips or None)`` (on the side stream on CUDA)."""
        data, local, flips = loaded
        pixels = self.decoder(data, local) if self.decoder is not None else data.to(self.device, non_blocking=True)
        return pixels, None if flips is None else flips.to(self.device, non_blocking=True)

    def _inputs(self, pixels: torch.Tensor, flips: torch.Tensor | None = None) -> torch.Tensor:
        """The model's input batch from uint8 pixels on the device: flipped where drawn, normalised."""
        from ..data.images import flip_rows

        return self.transform.normalize(flip_rows(pixels, flips), channels_last=self.channels_last)

    def pixel_batches(self, generators: Sequence[torch.Generator]) -> Iterator[tuple[torch.Tensor, torch.Tensor | None, list[int]]]:
        """One epoch of ``(uint8 pixels on the device, flips or None, the batch's train indices)``:
        the input pipeline without the model's arithmetic (``benchmarks/bench_train_throughput.py``
        times it alone)."""
        from .prefetch import to_device_ahead

        if len(generators) != 1:
            raise ValueError("an image source feeds one run at a time")
        generator = generators[0]
        perm = torch.randperm(self.n, generator=generator).tolist()
        flips = (torch.rand(self.n, generator=generator) < 0.5).tolist() if self.hflip else None
        boxes = None if self.crop is None else self.crop.draw(self.n, generator)  # drawn after the flips
        strong = None
        if self.strong:  # drawn after the flips too
            from ..data.strong_augment import draw_strong

            strong = draw_strong(self.n, self.transform.size, generator)
        bs = self.batch_size
        batches = [perm[s : s + bs] for s in range(0, self.n - bs + 1 if self.drop_last else self.n, bs)]
        self.sampler.batches = [[self._item(i, flips, strong) for i in b[self.dist.shard(len(b))]] for b in batches]
        for batch, (pixels, flipped) in zip(batches, to_device_ahead(self.train_loader, self.device, self._upload)):
            if boxes is not None:  # this process's rows, cut and resized on the device
                pixels = self.crop.apply(pixels, boxes.rows(batch[self.dist.shard(len(batch))]))
            yield pixels, flipped, batch

    @staticmethod
    def _item(i: int, flips: list | None, strong: list | None) -> Any:
        """A training row as the loader workers get it: ``i``, ``(i, flip)`` or ``(i, flip, draw)``."""
        if strong is not None:
            return i, None if flips is None else flips[i], strong[i]
        return i if flips is None else (i, flips[i])

    def train_batches(self, generators: Sequence[torch.Generator]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for pixels, flips, batch in self.pixel_batches(generators):
            yield self._inputs(pixels, flips)[None], torch.as_tensor(batch)[None]

    def _eval_inputs(self, loader: DataLoader) -> Iterator[torch.Tensor]:
        """The model's inputs of ``loader``'s batches, in order (no flips)."""
        return model_inputs(loader, self.transform, self.device, channels_last=self.channels_last)

    @torch.no_grad()
    def _local_predictions(self, model: nn.Module, loader: DataLoader) -> torch.Tensor:
        was = model.training
        model.eval()
        out = []
        for x in self._eval_inputs(loader):
            with self.autocast() if self.autocast else torch.autocast("cpu", enabled=False):
                out.append(torch.sigmoid(model(x).logits.float()))
        model.train(was)
        return torch.cat(out) if out else torch.zeros(0, self.num_classes, device=self.device)

    def predict(self, model: nn.Module, loader: DataLoader, split: str) -> torch.Tensor:
        """Every process predicts its share of ``split``; all get the whole split, in index order."""
        return self.dist.gather_predictions(lambda rows: self._local_predictions(model, loader), self.sizes[split]).cpu()

    def predict_train(self, model: nn.Module) -> torch.Tensor:
        return self.predict(model, self.train_eval_loader, "train")

    def predict_val(self, model: nn.Module) -> torch.Tensor:
        return self.predict(model, self.val_loader, "val")

    def predict_test(self, model: nn.Module) -> torch.Tensor:
        return self.predict(model, self.test_loader, "test")

    @torch.no_grad()
    def features(self, model: nn.Module, split: str) -> torch.Tensor:
        """Pooled backbone features of ``split`` (eval mode, no augmentation, gathered in index
        order): LinearInit's phase-1 inputs."""
        loader = {"train": self.train_eval_loader, "val": self.val_loader}[split]
        model.eval()

        def local(rows: slice) -> torch.Tensor:
            out = [model.features(x).float() for x in self._eval_inputs(loader)]
            return torch.cat(out) if out else torch.zeros(0, model.feat_dim, device=self.device)

        return self.dist.gather_predictions(local, self.sizes[split]).cpu()

    def train_features(self, model: nn.Module) -> torch.Tensor:
        """Pooled backbone features of the training split on the run's device (:meth:`features`), from
        ``model`` as it is now; the model's train/eval mode is left as it was."""
        was = model.training
        try:
            return self.features(model, "train").to(self.device)
        finally:
            model.train(was)
