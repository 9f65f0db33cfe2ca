"""How many workers a sweep starts and how many torch threads each run gets.

Both come from the CPUs this process may use (its affinity mask: a container, ``taskset`` or
a batch scheduler gives it fewer than the machine has), never from the machine's total:
sized from the total, 16 workers on the 2 CPUs a job was given would fight over them.

Threads never change a run's numbers here: 8 methods of the Yeast benchmark in groups of 9
runs, and 17 methods in single runs, gave bit-identical records under 1 and 2 torch threads
per run. They do not make feature runs faster either: their operations are too small for torch
to split, and on this project's 2-CPU machine the best of three timings was the same (AN, ROLE,
OPML-SP; groups of 9 and single runs, within 5 %). But when other processes kept the second
CPU busy, runs with 2 threads took 3 to 57 times longer (torch's thread pool waits for a CPU
that is busy elsewhere). So feature runs train on one thread each and a feature sweep starts
one worker per CPU; image runs, whose convolutions do use threads, share the CPUs out, never
taking ``jobs x threads`` above the usable CPUs (docs/architecture.md, "Many runs at once").
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ...cpus import usable_cpus

__all__ = ["default_jobs", "threads_per_run", "THREADS_ENV"]

#: the environment variable that fixes every run's torch threads (otherwise sized here)
THREADS_ENV = "SPMLKIT_RUN_THREADS"


def default_jobs(datasets: Iterable[str] = ()) -> int:
    """Workers when the user gave no ``--jobs``: one per usable CPU, each training its tasks
    on one thread. A sweep over an image dataset gets one: an image run may take a whole GPU
    and starts its own loading workers, so running several at once is the user's decision."""
    return usable_cpus() if _feature_only(datasets) else 1


def threads_per_run(jobs: int, datasets: Iterable[str] = (), cpus: float | None = None) -> int:
    """Torch threads of each run when ``jobs`` runs of ``datasets`` share ``cpus`` (default:
    the usable CPUs): one when every dataset is a feature dataset, else ``max(1, cpus // jobs)``;
    :data:`THREADS_ENV` when the user set it. A value that is not a positive integer is the
    user's mistake (``ValueError``)."""
    given = os.environ.get(THREADS_ENV)
    if given is None:
        if _feature_only(datasets):
            return 1
        return max(1, int((usable_cpus() if cpus is None else cpus) // max(1, jobs)))
    try:
        threads = int(given)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer (torch threads per run), got {given!r}")
    return threads


def _feature_only(datasets: Iterable[str]) -> bool:
    """Whether every dataset is a feature dataset (runs of a linear or MLP head on features)."""
    from ...data.registry import is_feature_dataset

    return all(is_feature_dataset(name) for name in datasets)
