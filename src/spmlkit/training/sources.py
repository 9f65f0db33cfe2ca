"""Where the training loop gets batches and predictions from: feature matrices or image files.

Both sources draw the epoch's order (and, for images, the horizontal flips) in the main
process from the run's one seeded generator, so a run's random stream does not depend on
the number of loader workers or of processes, and a resumed run continues it exactly. Under
torch.distributed every process draws the same global batches and loads only its slice
(:mod:`spmlkit.training.distributed`); predictions are sharded and gathered in index order. Predictions for
label algorithms and selection are made in eval mode, without augmentation, in index
order (docs/protocol.md, "Quirks of the official code", on APL's pass).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from .distributed import Distributed

__all__ = ["DataSource", "FeatureSource", "ImageSource", "predict_proba"]


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


@torch.no_grad()
def predict_proba(model: nn.Module, X: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    """Probabilities for every row of ``X`` in eval mode (no augmentation, index order)."""
    was_training = model.training
    model.eval()
    if len(X) <= batch_size:  # one product (the same values a one-chunk torch.cat would copy)
        out = torch.sigmoid(model(X))
    else:
        out = torch.cat([torch.sigmoid(model(X[i : i + batch_size])) for i in range(0, len(X), batch_size)])
    model.train(was_training)
    return out


class FeatureSource:
    """In-memory feature tensors (already standardised) of the train, val and test rows."""

    track_train = True

    def __init__(self, X_train: torch.Tensor, X_val: torch.Tensor, X_test: torch.Tensor | None, batch_size: int,
                 dist: Distributed | None = None):
        self.X_train, self.X_val, self.X_test, self.batch_size = X_train, X_val, X_test, batch_size
        self.dist = dist or Distributed()

    def train_batches(self, generators: Sequence[torch.Generator]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.X_train)
        perms = torch.stack([torch.randperm(n, generator=generator) for generator in generators])
        # one gather per epoch for all runs; each batch is then a view (index_select: the copy
        # X[perm] makes, several times faster)
        runs = len(generators)
        shuffled = torch.index_select(self.X_train, 0, perms.reshape(-1)).view(runs, n, -1)
        for start in range(0, n, self.batch_size):
            idx = perms[:, start : start + self.batch_size]
            rows = self.dist.shard(idx.shape[1])
            yield shuffled[:, start + rows.start : start + rows.stop], idx

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


class _Indexed(Dataset):
    """Rows ``rows`` of ``base``; item ``(i, flip)`` -> ``(image, i)`` with ``i`` local."""

    def __init__(self, base: Dataset, rows: np.ndarray):
        self.base, self.rows = base, np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: Any) -> tuple[torch.Tensor, int]:
        i, flip = item if isinstance(item, tuple) else (item, False)
        x, _ = self.base[int(self.rows[i])]
        if flip:
            x = torch.flip(x, dims=(-1,))
        return x, i


class _IndexedPlain(Dataset):
    """Rows ``rows`` of ``base`` (evaluation: no flips)."""

    def __init__(self, base: Dataset, rows: np.ndarray):
        self.base, self.rows = base, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.base[int(self.rows[i])][0], i


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

    ``num_workers``: loader processes (None: :func:`~spmlkit.data.images.loader_workers`
    chooses from the CPUs available; 0: the main process). Workers only load what the main
    process asks for: the (index, flip) batches are drawn here, so results do not depend on
    their number. On CUDA, batches come in pinned memory and are copied to the GPU without
    waiting (``non_blocking``) before the step needs them. ``decode="gpu"`` decodes the training
    JPEGs with nvJPEG (:mod:`spmlkit.data.gpu_decode`; CUDA only); evaluation stays on the CPU.
    """

    track_train = False
    #: training batches each loader worker keeps ready: decoding times vary from image to image,
    #: and a deeper queue absorbs the slow ones before the GPU waits
    train_prefetch = 4

    def __init__(self, train_dataset: Dataset, test_dataset: Dataset, train_idx: np.ndarray, val_idx: np.ndarray, *,
                 batch_size: int, eval_batch_size: int | None, hflip: bool, num_workers: int | None,
                 device: torch.device, channels_last: bool, num_classes: int, dist: Distributed | None = None,
                 decode: str = "cpu"):
        from ..data.images import loader_workers

        self.device, self.hflip, self.batch_size, self.num_classes = device, hflip, batch_size, num_classes
        self.dist = dist or Distributed()
        self.channels_last = channels_last and device.type == "cuda"
        self.n = len(train_idx)
        self.num_workers = workers = loader_workers(num_workers)
        common: dict[str, Any] = dict(num_workers=workers, pin_memory=device.type == "cuda",
                                      persistent_workers=workers > 0)
        prefetch = {"prefetch_factor": self.train_prefetch} if workers > 0 else {}
        self.sampler = _EpochBatches()
        self.decoder: Callable[[list], torch.Tensor] | None = None
        if decode == "gpu":
            from ..data.gpu_decode import collate_encoded

            encoded = self._encoded(train_dataset, train_idx, device)
            self.train_loader = DataLoader(encoded, batch_sampler=self.sampler, collate_fn=collate_encoded,
                                           **common, **prefetch)
        elif decode == "cpu":
            self.train_loader = DataLoader(_Indexed(train_dataset, train_idx), batch_sampler=self.sampler, **common,
                                           **prefetch)
        else:
            raise ValueError(f"decode must be 'cpu' or 'gpu', got {decode!r}")
        eval_bs = eval_batch_size or max(batch_size, 64)
        self.train_eval_loader = self._shard_loader(train_dataset, train_idx, eval_bs, common)
        self.val_loader = self._shard_loader(train_dataset, val_idx, eval_bs, common)
        test_rows = np.arange(len(test_dataset))
        # read once, at the end of the run: workers that outlive it would only hold memory
        self.test_loader = self._shard_loader(test_dataset, test_rows, eval_bs, {**common, "persistent_workers": False})
        self.sizes = {"train": len(train_idx), "val": len(val_idx), "test": len(test_rows)}
        self.autocast: Callable[[], Any] | None = None

    def _encoded(self, train_dataset: Dataset, train_idx: np.ndarray, device: torch.device) -> Dataset:
        """The training rows as file bytes for ``decode="gpu"``; sets :attr:`decoder`."""
        from ..data.gpu_decode import EncodedImages, GpuDecoder
        from ..data.images import transform_size
        from ..errors import InputError

        if device.type != "cuda":
            raise InputError(f"--decode gpu decodes JPEGs on a CUDA GPU, but this run's device is {device}; use "
                             "--decode cpu (the default)")
        paths, size = getattr(train_dataset, "paths", None), transform_size(getattr(train_dataset, "transform", None))
        if paths is None or size is None:
            raise InputError(f"--decode gpu reads image files, but this dataset ({type(train_dataset).__name__}) has "
                             "none (the digits mosaic is generated in memory); use --decode cpu (the default)")
        encoded = EncodedImages(paths, np.asarray(train_idx))
        self.decoder = GpuDecoder(size, device, encoded.path)
        return encoded

    def _shard_loader(self, dataset: Dataset, rows: np.ndarray, batch_size: int, common: dict) -> DataLoader:
        """This process's contiguous share of ``rows``, in index order."""
        return DataLoader(_IndexedPlain(dataset, np.asarray(rows)[self.dist.shard(len(rows))]), batch_size=batch_size,
                          **common)

    def train_batches(self, generators: Sequence[torch.Generator]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if len(generators) != 1:
            raise ValueError("an image source feeds one run at a time")
        generator = generators[0]
        perm = torch.randperm(self.n, generator=generator).tolist()
        flips = (torch.rand(self.n, generator=generator) < 0.5).tolist() if self.hflip else [False] * self.n
        bs = self.batch_size
        batches = [perm[s : s + bs] for s in range(0, self.n, bs)]
        self.sampler.batches = [[(i, flips[i]) for i in b[self.dist.shard(len(b))]] for b in batches]
        for batch, loaded in zip(batches, self.train_loader):
            # on the device before the layout change: converting a pinned batch on the host would
            # copy it into pageable memory, whose transfer can no longer overlap the running step
            x = self.decoder(loaded) if self.decoder is not None else loaded[0].to(self.device, non_blocking=True)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x[None], torch.as_tensor(batch)[None]

    @torch.no_grad()
    def _local_predictions(self, model: nn.Module, loader: DataLoader) -> torch.Tensor:
        was = model.training
        model.eval()
        out = []
        for x, _ in loader:
            x = x.to(self.device, non_blocking=True)
            if self.channels_last:  # the layout the model's weights have (as in training)
                x = x.contiguous(memory_format=torch.channels_last)
            with self.autocast() if self.autocast else torch.autocast("cpu", enabled=False):
                out.append(torch.sigmoid(model(x).float()))
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
            out = [model.features(x.to(self.device)).float() for x, _ in loader]
            return torch.cat(out) if out else torch.zeros(0, model.feat_dim, device=self.device)

        return self.dist.gather_predictions(local, self.sizes[split]).cpu()
