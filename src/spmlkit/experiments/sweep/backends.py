"""Backend names (``run_sweep(backend=...)``, ``spmlkit sweep --backend``) -> executors.

A backend's module is imported only when it is chosen (Ray is an optional extra), and only
from here: the sweep's loop knows the :class:`~spmlkit.experiments.sweep.executor.Executor`
interface and this table, never a backend, and no backend imports the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .cores import threads_per_run

if TYPE_CHECKING:
    from .executor import Executor
    from .ray_backend import RayOptions

__all__ = ["BACKENDS", "make_executor"]


def _process(jobs: int | None, ray_options: RayOptions | None, datasets: list[str]) -> Executor:
    """Worker processes on this machine; ``jobs`` None or 1: in the sweep's own process."""
    from .processes import InProcess, WorkerPool

    jobs = jobs or 1
    threads = threads_per_run(jobs, datasets)
    return InProcess(threads) if jobs == 1 else WorkerPool(jobs, threads, datasets=datasets)


def _ray(jobs: int | None, ray_options: RayOptions | None, datasets: list[str]) -> Executor:
    """One Ray task per run; ``jobs``, when given, caps the runs in flight. A run's threads
    are its share of the CPUs Ray gives it (``cpus_per_run``)."""
    from .ray_backend import RayExecutor, with_jobs

    options = with_jobs(ray_options, jobs)
    return RayExecutor(options, threads_per_run(1, datasets, cpus=options.cpus_per_run))


#: every backend by name: a factory of ``(jobs, ray_options, datasets)``
BACKENDS: dict[str, Callable[[int | None, RayOptions | None, list[str]], Executor]] = {
    "process": _process, "ray": _ray}


def make_executor(backend: str, jobs: int | None = None, ray_options: RayOptions | None = None,
                  datasets: Iterable[str] = ()) -> Executor:
    """The executor of ``backend`` for a sweep over ``datasets`` (they decide the threads of a
    run: :func:`~spmlkit.experiments.sweep.cores.threads_per_run`), ready to
    :meth:`~spmlkit.experiments.sweep.executor.Executor.start`. Built before any run is claimed,
    so a bad option or a missing extra is one line and no lease is taken."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sweep backend {backend!r}; choose {' or '.join(BACKENDS)}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    return BACKENDS[backend](jobs, ray_options, list(datasets))
