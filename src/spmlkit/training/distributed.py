"""Data-parallel training on PyTorch's own engine (torch.distributed, launched by ``torchrun``).

Design (docs/architecture.md, "Distributed training"):

* **One global stream.** Every process draws the same (index, flip) order from the run's
  seeded generator and takes its contiguous slice of every global batch; ``batch_size`` is the
  global batch. The order in which examples are visited does not depend on the number of
  processes.
* **Global statistics by default.** Each process forwards its slice; the logits of the whole
  global batch are gathered with autograd (:meth:`Distributed.gather_rows`) and every process
  computes the *same* loss on them. The gather's backward sums the gradients every process
  sends to a slice, which is W times the gradient of that one loss, and DDP's average divides
  by W again: the parameter gradient equals the single-process gradient of the same global
  batch, for every loss (element-wise, set-wise and batch-wise alike). Batch normalisation is
  synchronised (``SyncBatchNorm`` on CUDA, :class:`GlobalBatchNorm` on CPU) for the same reason.
* **Per-process statistics on request** (``batch_statistics: process``, the default of a method
  whose code computes its statistics on each GPU's own batch, :attr:`spmlkit.methods.Method.batch_statistics`):
  each process computes the loss on its slice and DDP averages, as that code does.
* **Whole-set predictions are gathered.** Training-set predictions for the label algorithms,
  validation and test are sharded over the processes and gathered in index order, so every
  process runs the same deterministic label algorithm on the same predictions and holds the
  same label state.
* **Rank 0 writes** the run folder (atomically); the others wait at a barrier.

In a single process (no ``torchrun``), :class:`Distributed` is inert and costs nothing.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Callable, TypeVar

import torch
from torch import nn

from ..errors import InputError

__all__ = ["Distributed", "GlobalBatchNorm", "shard_bounds"]

T = TypeVar("T")


def shard_bounds(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous share of ``n`` rows (sizes differ by at most 1)."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class Distributed:
    """The process group of a run, or a single process."""

    def __init__(self, rank: int = 0, world_size: int = 1, local_rank: int = 0, backend: str | None = None,
                 owns_group: bool = False):
        self.rank, self.world_size, self.local_rank, self.backend = rank, world_size, local_rank, backend
        self.owns_group = owns_group  # created the process group, so it closes it

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls, device: str) -> "Distributed":
        """Join the process group ``torchrun`` describes in the environment.

        ``device``: the device the run asks for (NCCL for CUDA, gloo for the CPU). A launch of
        a single process (``--nproc_per_node 1``) joins a group too, so that its backend starts
        and ends as in a larger launch, but trains exactly as a plain run: with one process
        there is nothing to gather or average.
        """
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        launched = "RANK" in os.environ and "MASTER_ADDR" in os.environ
        if world_size <= 1 and not launched:
            return cls()
        import torch.distributed as dist

        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = device != "cpu" and torch.cuda.is_available()
        backend = "nccl" if use_cuda else "gloo"
        if use_cuda:
            _check_one_gpu_per_process(device, local_rank)
            torch.cuda.set_device(local_rank)
        owns = not dist.is_initialized()  # a caller's group (several runs in one launch) is left open
        if owns:
            timeout = datetime.timedelta(seconds=int(os.environ.get("SPMLKIT_DIST_TIMEOUT", "1800")))
            dist.init_process_group(backend, timeout=timeout)
        return cls(rank, world_size, local_rank, dist.get_backend(), owns)

    def device(self, requested: torch.device) -> torch.device:
        """Each process of a node on its own GPU."""
        if self.enabled and requested.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return requested

    # ------------------------------------------------------------------ collectives
    def shard(self, n: int) -> slice:
        start, stop = shard_bounds(n, self.world_size, self.rank)
        return slice(start, stop)

    def gather_rows(self, local: torch.Tensor, n: int) -> torch.Tensor:
        """The ``n`` rows of all processes in rank order, with autograd through the gather.

        Slices may differ in size by one row (or be empty), so each is padded to the largest
        size for ``all_gather`` and trimmed after.
        """
        if not self.enabled:
            return local
        sizes = [b - a for a, b in (shard_bounds(n, self.world_size, r) for r in range(self.world_size))]
        width = max(sizes)
        pad = width - local.shape[0]
        padded = torch.cat([local, local.new_zeros((pad, *local.shape[1:]))]) if pad else local
        parts = _autograd_collective("all_gather", padded)
        return torch.cat([part[:size] for part, size in zip(parts, sizes)])

    def gather_predictions(self, predict: Callable[[slice], torch.Tensor], n: int) -> torch.Tensor:
        """Predictions for ``n`` rows, each process predicting its share (no autograd)."""
        if not self.enabled:
            return predict(slice(0, n))
        with torch.no_grad():
            return self.gather_rows(predict(self.shard(n)).contiguous(), n).detach()

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 only and give every process its result or its exception, so
        that a refusal on rank 0 (a run folder that already holds a run) stops every process
        with the same message instead of leaving them waiting."""
        if not self.enabled:
            return fn()
        import torch.distributed as dist

        box: list[Any] = [None]
        if self.is_main:
            try:
                box[0] = ("ok", fn())
            except Exception as exc:  # handed to every process, raised there
                box[0] = ("error", exc)
        dist.broadcast_object_list(box, src=0)
        kind, value = box[0]
        if kind == "error":
            raise value
        return value

    def wrap(self, model: nn.Module) -> nn.Module:
        """DistributedDataParallel around a model whose batch norms are synchronised."""
        if not self.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        if self.backend == "nccl":
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
            return DDP(model, device_ids=[self.local_rank])
        return DDP(GlobalBatchNorm.convert(model))

    def close(self) -> None:
        """Destroy the process group this object created, and make sure its backend is freed
        while the interpreter is still whole (:func:`_free_backends_before_exit`)."""
        if self.backend is not None and self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            _free_backends_before_exit()


def _check_one_gpu_per_process(device: str, local_rank: int) -> None:
    """Refuse, before any process group exists, more processes on this node than it has GPUs.

    Why: on CUDA every process of a node trains on GPU ``LOCAL_RANK`` (NCCL, one rank per
    device; docs/architecture.md, "Distributed training"). With more processes than GPUs, NCCL
    refuses two ranks on one device, or ``set_device`` fails on a GPU that does not exist, and
    every process stops with a traceback from inside torch instead of the one fix. torchrun
    sets ``LOCAL_WORLD_SIZE``; another launcher may not, and then this process's own
    ``LOCAL_RANK`` says that at least ``LOCAL_RANK + 1`` processes share the node.
    """
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", str(local_rank + 1)))
    gpus = torch.cuda.device_count()
    if processes > gpus:
        asked = "--device auto" if device == "auto" else f"--device {device}"
        raise InputError(
            f"{processes} processes per node were started (torchrun --nproc_per_node {processes}) but this "
            f"machine has {gpus} CUDA GPU{'s' if gpus != 1 else ''}, and with {asked} each process trains on a "
            f"GPU of its own: use --nproc_per_node {gpus} or fewer, or --device cpu to train the processes on "
            f"the CPU (gloo)")


_EXIT_COLLECTION_REGISTERED = False


def _free_backends_before_exit() -> None:
    """Collect garbage now and once more at exit, before the interpreter starts to finalise.

    Why: ``destroy_process_group`` only forgets the group. The gloo backend object (and with it
    its worker threads) lives on while anything refers to it, and the autograd graph of a
    collective does: ``torch.distributed.nn``'s functions keep the group on their context,
    inside reference cycles that only a garbage collection frees. Left to the interpreter's
    last collection, the backend is destroyed while Python finalises; its worker threads then
    try to take the GIL, Python ends them with ``pthread_exit``, and the C++ runtime turns the
    forced unwind into ``std::terminate`` -- "terminate called without an active exception",
    SIGABRT, in about one two-process run in four here. A collection from an ``atexit`` hook
    runs while threads may still take the GIL, so the backend is torn down cleanly (0 aborts in
    40 runs of ``tests/test_distributed.py``'s batch-norm workers, against 9 in 40 without)."""
    import atexit
    import gc

    global _EXIT_COLLECTION_REGISTERED
    gc.collect()
    if not _EXIT_COLLECTION_REGISTERED:
        atexit.register(gc.collect)
        _EXIT_COLLECTION_REGISTERED = True


class GlobalBatchNorm(nn.BatchNorm2d):
    """Batch normalisation over the global batch on CPU (gloo), where ``SyncBatchNorm`` is CUDA-only.

    Every process all-reduces (with autograd) the per-channel count, sum and sum of squares
    of its slice, so all processes normalise with the statistics of the whole global batch,
    as one process would; running statistics follow ``nn.BatchNorm2d`` (unbiased variance).
    """

    @classmethod
    def convert(cls, module: nn.Module) -> nn.Module:
        if isinstance(module, nn.BatchNorm2d) and not isinstance(module, cls):
            new = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
            new.load_state_dict(module.state_dict())
            new.train(module.training)
            for mine, theirs in zip(new.parameters(), module.parameters()):  # frozen parts stay frozen
                mine.requires_grad_(theirs.requires_grad)
            return new
        for name, child in module.named_children():
            setattr(module, name, cls.convert(child))
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        if not self.training or not dist.is_initialized():
            return super().forward(x)

        # sums in float64: E[x^2] - E[x]^2 loses the variance to cancellation in float32 when a
        # channel's mean is large against its spread, which would make the processes' batch
        # statistics differ visibly from one process's two-pass variance
        dims = (0, 2, 3)
        x64 = x.double()
        count = torch.full((1,), x.numel() / x.shape[1], dtype=torch.float64)
        stats = _autograd_collective("all_reduce", torch.cat([x64.sum(dims), (x64 * x64).sum(dims), count]))
        c = x.shape[1]
        total = stats[-1]
        mean64 = stats[:c] / total
        var64 = (stats[c : 2 * c] / total - mean64 * mean64).clamp_min(0)
        mean, var = mean64.to(x.dtype), var64.to(x.dtype)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                unbiased = (var64 * total / (total - 1).clamp_min(1)).to(x.dtype)
                self.running_mean.mul_(1 - momentum).add_(momentum * mean)
                self.running_var.mul_(1 - momentum).add_(momentum * unbiased)
        y = (x - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + self.eps)
        if self.affine:
            y = y * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return y


def _autograd_collective(name: str, tensor: torch.Tensor) -> Any:
    """``all_gather`` / ``all_reduce`` that autograd differentiates through (the gather's backward
    sums what every process sends to a slice). torch marks these functions deprecated in favour
    of the functional collectives, whose autograd support is not yet complete on gloo, so the
    warning is silenced here, in the one place that calls them."""
    import warnings

    import torch.distributed.nn.functional as dnn

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return getattr(dnn, name)(tensor)
