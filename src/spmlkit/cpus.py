"""The CPUs this process may use.

One answer for everything that sizes work by CPUs (a run's image loader workers, a sweep's
workers and threads): the process's affinity mask, which a container, ``taskset`` or a batch
scheduler narrows, never the machine's total -- sized from the total, 16 workers on the 2 CPUs a
job was given would fight over them.
"""

from __future__ import annotations

import os

__all__ = ["usable_cpus"]


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask where the platform has one (Linux),
    else every CPU of the machine."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)
