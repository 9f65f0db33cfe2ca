"""Two benchmarks (or reproductions) on one ``--out`` at once: one grid's tables at a time, never a table with holes.

Benchmarks share their store the way sweeps do: each claims a run before training it, so two
benchmarks of one grid split its runs between them (docs/sweep-files.md). Their tables are
another matter: ``table.md``, ``runs.csv`` and the leaderboard have one name per folder. The
rule (docs/bad-input.md, "Sweeps and results stores"):

- **One grid per folder at a time.** A live benchmark holds ``--out`` for its grid (a shared
  ``flock`` on ``.spmlkit-grid-<digest>.lock``, the digest of its run ids). A benchmark of a
  *different* grid started on that folder meanwhile is refused in one line before any run: the
  last to finish would otherwise decide the tables without a word. A benchmark of the *same*
  grid joins (the two split the runs and write the same tables). A lock is let go when its
  process ends, however it ends, so a killed benchmark holds nothing.
- A reproduction (``spmlkit reproduce``) holds its ``--out`` by the same rule: its tables
  (``<name>.md``, ``.csv``, ``.json``) have one name per folder too.
- **Tables wait for held runs.** A benchmark that finds runs of its grid held by another live
  sweep or benchmark (:attr:`~spmlkit.experiments.sweep.SweepResult.held`) waits until they are
  recorded, polling the store, before it writes its tables; a holder that dies lets its leases
  expire, and the waiting benchmark then claims and trains those runs itself. So a table is
  always of every run of the grid, finished or failed.

Locks need a file system whose ``flock`` works across the processes that share the folder (a
local disk; not most network mounts), as the store's locking does. Where ``fcntl`` does not
exist (Windows), no lock is taken and only the waiting holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from .sweep import SweepResult

__all__ = ["GUARD", "WAIT_SECONDS", "grid_digest", "hold_out_folder", "sweep_until_none_held"]

#: the file every benchmark locks while it looks at the others' grid locks
GUARD = ".spmlkit-benchmark.lock"
_GRID = ".spmlkit-grid-{}.lock"
#: how often a benchmark waiting for held runs looks at the store again
WAIT_SECONDS = 2.0


def grid_digest(run_ids: Iterable[str]) -> str:
    """A short name of a grid: the digest of its sorted run ids (the same runs, the same grid)."""
    return hashlib.sha256("\n".join(sorted(run_ids)).encode()).hexdigest()[:16]


@contextlib.contextmanager
def hold_out_folder(out: Path, grid: str, what: str = "benchmark") -> Iterator[None]:
    """Hold ``out`` for the grid ``grid`` while the block runs (module docstring): ValueError, one
    line, when a live ``what`` (a benchmark, a reproduction) of another grid holds it. Grid locks
    left by ended processes are removed on the way."""
    try:
        import fcntl
    except ImportError:  # no flock here: waiting for held runs still keeps tables whole
        yield
        return
    mine_path = out / _GRID.format(grid)
    with open(out / GUARD, "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one benchmark at a time looks and takes its lock
        try:
            for other in sorted(out.glob(_GRID.format("*"))):
                if other.name == mine_path.name:
                    continue
                with open(other, "a") as held:
                    try:
                        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        raise ValueError(f"--out {out} is in use by another {what} of a different grid (other data "
                                         "sets, methods, seeds, lrs or settings), still running: the last to finish "
                                         "would decide the tables; wait for it to finish, or give another --out") \
                            from None
                    other.unlink(missing_ok=True)  # its benchmark has ended
            mine = open(mine_path, "a")
            fcntl.flock(mine, fcntl.LOCK_SH)
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)
    try:
        yield
    finally:
        mine.close()


def sweep_until_none_held(sweep: Callable[[bool], SweepResult], on_wait: Callable[[int], None] | None = None,
                          wait_seconds: float = WAIT_SECONDS) -> SweepResult:
    """Run ``sweep`` (a call of :func:`~spmlkit.experiments.sweep.run_sweep`; its argument is True
    for the first call, which alone reports its start) again while some of its runs are held by
    another live sweep, waiting ``wait_seconds`` between: the runs the others finish are found
    finished, the runs of one that died are claimed and trained here. ``on_wait`` hears how many
    runs are held before each wait. Returns the first call's result with every call's runs and
    failures added."""
    first = result = sweep(True)
    ran, failed = first.ran, first.failed
    while result.held:
        if on_wait is not None:
            on_wait(result.held)
        time.sleep(wait_seconds)
        result = sweep(False)
        ran, failed = ran + result.ran, failed + result.failed
    return replace(first, ran=ran, failed=failed, held=0)
