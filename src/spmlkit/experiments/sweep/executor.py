"""The executor interface: what a sweep asks of the backend that trains its runs.

The sweep (:mod:`spmlkit.experiments.sweep.run`) owns the loop and the store: it claims runs
only when the executor has room, submits them as tasks, waits for finished ones and records
them. An executor only trains: it never claims, never writes the store, and never imports
the sweep's loop, so backends (worker processes on this machine, Ray) plug in without
import circles (docs/architecture.md, "Many runs at once").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

__all__ = ["Executor", "Keep", "Record", "Run"]

#: a run of the grid (:func:`~spmlkit.experiments.sweep.expand`) and its results-store record
Run = dict[str, Any]
Record = dict[str, Any]
#: where an executor hands finished records: the sweep holds them until they are written
Keep = Callable[[list[Record]], None]


class Executor(ABC):
    """Trains the tasks a sweep submits; one instance serves one ``run_sweep`` call.

    Life cycle: :meth:`start` once, then ``submit`` while :meth:`room` is positive and
    :meth:`wait` while :meth:`busy`; at the end :meth:`close`, and before it, when the sweep
    stops early (Ctrl-C, SIGTERM, an error), :meth:`stop`. A task is a list of runs that
    differ only in seed and lr (:meth:`task_size` says how many the executor wants); each run
    comes back as exactly one record, a failure included, through ``keep``.
    """

    #: whether :meth:`start` returns while the start-up goes on (worker processes importing and
    #: reading data): such an executor is started before the sweep checks its grid, so that the
    #: two overlap; one whose start blocks (connecting to a cluster) is started after the
    #: checks, so that a refused grid costs nothing
    starts_in_background: bool = False
    #: why a run of this executor's tasks of one run (:meth:`task_size` 1) trains alone, in
    #: the words its record keeps (``alone_reason``): no run trains alone without saying why
    alone_reason: str = "this backend trains one run per task"

    def start(self, runs_dir: str) -> None:
        """Get ready to train (start workers, connect to a cluster). ``runs_dir``: where image
        runs keep their folders. When the sweep ends with no task submitted (a refused grid,
        nothing left to run), :meth:`stop` and :meth:`close` follow."""

    def task_size(self, candidates: int) -> int:
        """The most runs one task should hold, given the runs not yet looked at: 1 unless the
        executor trains groups."""
        return 1

    @abstractmethod
    def room(self) -> int:
        """How many more tasks may be submitted now; the sweep claims no run beyond it, so that
        a concurrent sweep on the same store can take the rest."""

    @abstractmethod
    def submit(self, runs: list[Run]) -> None:
        """Start a task (its runs are claimed)."""

    @abstractmethod
    def busy(self) -> bool:
        """Whether a submitted task has not been handed back yet."""

    @abstractmethod
    def wait(self, keep: Keep) -> None:
        """Block until a task finishes (a backend may return sooner with none, e.g. to let
        Ctrl-C in), and hand every finished task's records to ``keep`` before forgetting it."""

    @abstractmethod
    def stop(self, keep: Keep) -> None:
        """Stop now, within seconds: hand the records of tasks that finished to ``keep``, give
        up the rest (the next sweep runs them again). Never raises: it runs while another
        exception is on its way out, and that one is what the user must see."""

    def close(self) -> None:
        """Release what :meth:`start` took; called last, after a normal end or :meth:`stop`."""
