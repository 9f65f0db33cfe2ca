"""Keep freed memory in the process, so that large tensors made every step cost no page faults.

glibc's ``malloc`` serves a block above its mmap threshold (at most 32 MB by default) with a
fresh ``mmap`` and gives it back to the operating system when it is freed; top-of-heap memory
above the trim threshold is given back too. A tensor of that size made and freed every step --
the gradient of ROLE's label estimates (R x N x C floats: 48 MB for 9 corel5k runs), a
batched group's predictions on a split -- then page-faults every one of its pages again each
time: filling 48 MB with zeros took 35 ms that way against about 3 ms in memory already mapped,
and it made ROLE's step on corel5k four times slower (docs/architecture.md, "Freed memory").

:func:`keep_freed_memory` raises both thresholds, so such blocks come from the heap and stay
there for the next step. The process keeps its peak memory instead of returning it, which
suits a training process (its peak comes back every step) and is why only spmlkit's own
command-line processes and sweep workers call it, never the library on a user's behalf.
It changes where memory comes from, not any value computed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory", "KEEP_BYTES"]

#: blocks up to this size come from the heap, and this much free memory may stay at its top
KEEP_BYTES = 1 << 30
_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(limit: int = KEEP_BYTES) -> bool:
    """Raise glibc's mmap and trim thresholds to ``limit`` bytes for this process (and the
    processes it forks later); True when glibc took both. Elsewhere (macOS, Windows, a C
    library without ``mallopt``) nothing changes and it returns False."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # no C library found, or one without mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, limit)) & bool(mallopt(_M_TRIM_THRESHOLD, limit))
