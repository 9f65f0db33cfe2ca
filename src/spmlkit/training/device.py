"""The machinery of a run: its device, mixed precision, its share of CPU threads, and the peak
memory it used."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Any, Callable, Iterator

import torch

__all__ = ["resolve_device", "autocast_factory", "deterministic_cuda", "num_threads", "reset_peak_memory",
           "peak_memory"]


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``; anything else is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {name!r} is not supported; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    return device


def autocast_factory(amp: str, device: torch.device) -> tuple[Callable[[], Any] | None, Any]:
    """``(autocast context factory or None, GradScaler or None)`` for ``amp`` on ``device``.

    fp16 on the CPU is emulated and runs two orders of magnitude slower than float32, so it
    falls back to float32 with a warning instead of silently crawling.
    """
    if amp == "auto":
        amp = "bf16" if device.type == "cuda" else "none"
    if amp == "fp16" and device.type == "cpu":
        warnings.warn("--amp fp16 is not supported efficiently on the CPU; training in float32 instead",
                      RuntimeWarning, stacklevel=2)
        amp = "none"
    if amp == "none":
        return None, None
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    return (lambda: torch.autocast(device.type, dtype=dtype)), scaler


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch CPU threads (None: unchanged), restoring them after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def deterministic_cuda(enabled: bool) -> Iterator[None]:
    """Run the block with CUDA's deterministic algorithms and without TF32 (``enabled``), restoring
    the process's settings after.

    Why each switch (docs/architecture.md, "Numbers across devices"): cuDNN and cuBLAS pick
    among algorithms whose sums run in different orders, some with atomic additions whose
    order changes from run to run; ``torch.use_deterministic_algorithms`` keeps only
    reproducible ones (``warn_only``: an operation without one warns rather than stopping a
    run), and cuBLAS needs a fixed workspace for that (``CUBLAS_WORKSPACE_CONFIG``, read when
    its first handle is made: set here when the run is the first to use CUDA in this process).
    TF32 rounds float32 products to 10 mantissa bits on Ampere and later GPUs, which is
    reproducible but far from the CPU's float32; it is switched off so that such a run also
    compares with the CPU at float32 precision. Disabled, nothing changes.
    """
    if not enabled:
        yield
        return
    import torch.backends.cuda
    import torch.backends.cudnn

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
              torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[4], before[5]


def reset_peak_memory(device: torch.device) -> None:
    """Start a run's count of peak GPU memory here, so that what an earlier run of the same
    process allocated on ``device`` is not counted (docs/architecture.md, "Peak memory"). The
    host's peak cannot be reset: it stays the process's (:func:`peak_memory`)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int | None, int | None]:
    """``(host bytes, GPU bytes)``: the peak memory a run needed (docs/architecture.md, "Peak memory").

    GPU: ``torch.cuda.max_memory_allocated`` on ``device`` since :func:`reset_peak_memory`,
    the tensors' bytes (what the run's model and batches need, without the allocator's cached
    blocks); None when the run is not on CUDA.

    Host: the peak resident set of this *process* (``getrusage(RUSAGE_SELF).ru_maxrss``), not
    of the run alone: the operating system keeps one peak per process and offers no way to
    reset it, so in a process that ran something bigger before (a notebook, a test session)
    it is that earlier peak. Loader worker processes are not counted. An upper bound of the
    run's own need, and exact for ``spmlkit train``, which runs one run per process. None
    where the platform has no ``resource`` module (Windows).
    """
    gpu = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
    try:
        import resource
    except ImportError:
        return None, gpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux and the BSDs, in bytes on macOS
    return (int(peak) if sys.platform == "darwin" else int(peak) * 1024), gpu
