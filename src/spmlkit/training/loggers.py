"""Where a run's numbers go besides ``metrics.csv``: TensorBoard, MLflow, Weights & Biases, your own.

The trainer talks to one small interface, :class:`RunLogger`: ``log_config`` once when the
run starts, ``log_metrics`` after every finished epoch (the record ``metrics.json`` gains,
with the epoch as the step) and ``close`` at the end, whether the run finished, stopped as
asked or failed. Under torch.distributed only rank 0 logs, as it alone writes the run folder.

A run names its loggers in ``RunConfig.loggers`` (``--logger NAME``, repeatable). A name is
looked up, in order, among

* the loggers registered in this process with :func:`register_logger` (the built-ins
  ``tensorboard``, ``mlflow`` and ``wandb`` are registered this way), then
* the entry points of the group ``spmlkit.loggers`` of installed packages, so a package can
  ship a logger without the user importing anything::

      [project.entry-points."spmlkit.loggers"]
      mylogger = "mypackage.logging:make_logger"

A factory is called as ``factory(run_dir)`` with the run folder (a ``Path``, or None for a run
kept in memory) and returns the logger. A registration lives in the process that made it:
runs in other processes (sweep workers) find a plug-in through its entry point. The built-ins import their package only when
selected; a missing package is refused before the run starts, in one line with the pip
command, rather than after an hour of training.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rich.progress import ProgressColumn
from rich.text import Text

__all__ = ["RunLogger", "LoggerFactory", "register_logger", "available_loggers", "check_loggers", "open_loggers",
           "LoggerGroup", "ENTRY_POINT_GROUP", "EpochProgress", "EpochLines"]

ENTRY_POINT_GROUP = "spmlkit.loggers"


@runtime_checkable
class RunLogger(Protocol):
    """What the trainer calls. Subclass it for the no-op defaults, or write any class with these methods."""

    def log_config(self, config: dict[str, Any]) -> None:
        """The resolved run configuration (``RunConfig.to_dict()``), once, before the first epoch."""

    def log_metrics(self, record: dict[str, Any], step: int) -> None:
        """One finished epoch's record (train loss, val mAP, pseudo-label counts, timings), ``step`` = epoch."""

    def close(self) -> None:
        """Flush and release; called once, also when the run stops early or fails."""


#: ``factory(run_dir)`` -> a logger; ``run_dir`` is the run folder or None (a run kept in memory)
LoggerFactory = Callable[[Path | None], RunLogger]

_REGISTRY: dict[str, LoggerFactory] = {}
#: built-in loggers: the module they import, and the pip command that installs it
_NEEDS: dict[str, tuple[str, str]] = {}


def register_logger(name: str, factory: LoggerFactory, *, replace: bool = False) -> None:
    """Make ``name`` usable in ``loggers`` / ``--logger`` for this process.

    Registering a name twice is refused unless ``replace=True``, so two plug-ins cannot
    silently shadow each other (or a built-in).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a logger name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"the factory of logger {name!r} must be callable (run_dir -> logger), got {factory!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"a logger named {name!r} is already registered; pass replace=True to replace it")
    _REGISTRY[name] = factory
    _NEEDS.pop(name, None)


def users_loggers() -> list[str]:
    """The loggers registered by code outside spmlkit (a plug-in's), by name: a plug-in that registers
    only a logger has registered something (:mod:`spmlkit.plugins` counts them)."""
    from ..names import BUILTIN, origin_of

    return [name for name, factory in _REGISTRY.items()
            if origin_of(str(getattr(factory, "__module__", "") or "")) != BUILTIN]


def available_loggers() -> list[str]:
    """Every name a run may use: registered in this process, then installed entry points."""
    return sorted({*_REGISTRY, *(ep.name for ep in _entry_points())})


def check_loggers(names: Sequence[str]) -> list[LoggerFactory]:
    """The factory of each name, checked before the run starts (``ValueError`` in one line otherwise).

    Refuses a value that is not a list of names, an unknown name (listing the known ones),
    a name given twice, and a built-in whose package is not installed (with the pip command).
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"loggers must be a list of logger names (e.g. [tensorboard]), got {names!r}")
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise ValueError(f"loggers: {', '.join(twice)} given more than once; name each logger once")
    return [_factory(name) for name in names]


def _factory(name: str) -> LoggerFactory:
    if name in _REGISTRY:
        module, install = _NEEDS.get(name, (None, None))
        if module is not None and not _installed(module):
            raise ValueError(f"logger {name!r} needs the {module} package, which is not installed: "
                             f"pip install {install}")
        return _REGISTRY[name]
    for ep in _entry_points():
        if ep.name == name:
            try:
                factory = ep.load()
            except Exception as exc:  # a broken plug-in: say which package, do not guess further
                raise ValueError(f"logger {name!r} (entry point {ep.value} of group {ENTRY_POINT_GROUP}) cannot be "
                                 f"loaded ({type(exc).__name__}: {exc}); reinstall or fix the package that "
                                 "provides it") from None
            if not callable(factory):
                raise ValueError(f"logger {name!r} (entry point {ep.value}) is not a callable factory; its package "
                                 "must point the entry point at a function run_dir -> logger")
            return factory
    raise ValueError(f"unknown logger {name!r}; available: {', '.join(available_loggers())} (register your own with "
                     f"spmlkit.training.loggers.register_logger or an entry point of group {ENTRY_POINT_GROUP})")


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (mlflow and wandb take seconds)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def open_loggers(names: Sequence[str], run_dir: Path | None) -> LoggerGroup:
    """Create the named loggers for a run in ``run_dir``; one object that forwards to all of them."""
    loggers: list[RunLogger] = []
    try:
        for name, factory in zip(names, check_loggers(names)):
            logger = factory(run_dir)
            missing = [m for m in ("log_config", "log_metrics", "close") if not callable(getattr(logger, m, None))]
            if missing:
                raise TypeError(f"logger {name!r}: its factory returned {type(logger).__name__}, which lacks "
                                f"{', '.join(missing)}; a logger needs log_config, log_metrics and close")
            loggers.append(logger)
    except BaseException:
        LoggerGroup(loggers).close()
        raise
    return LoggerGroup(loggers)


class LoggerGroup:
    """Several loggers as one: each call goes to every logger, in the order the run named them."""

    def __init__(self, loggers: Sequence[RunLogger] = ()) -> None:
        self.loggers = list(loggers)

    def log_config(self, config: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log_config(config)

    def log_metrics(self, record: dict[str, Any], step: int) -> None:
        for logger in self.loggers:
            logger.log_metrics(dict(record), step)

    def close(self) -> None:
        """Close every logger, even when one fails to (the first failure is raised afterwards)."""
        failure: BaseException | None = None
        for logger in self.loggers:
            try:
                logger.close()
            except Exception as exc:
                failure = failure or exc
        self.loggers = []
        if failure is not None:
            raise failure


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a record: what a metrics backend can plot (NaN/inf and text are left out)."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _run_name(run_dir: Path | None) -> str | None:
    """``<dataset>/<method>/<seed>``-like name from the run folder's last parts, for the tracking UIs."""
    return None if run_dir is None else "/".join(Path(run_dir).resolve().parts[-3:])


# ---------------------------------------------------------------------------- built-ins


class TensorBoardLogger:
    """Scalars per epoch into ``<run>/tensorboard`` (``tensorboard --logdir <run>``); the config as text."""

    def __init__(self, run_dir: Path | None) -> None:
        if run_dir is None:
            raise ValueError("logger 'tensorboard' writes into the run folder, but this run keeps everything in "
                             "memory: set out (--out), or use another logger")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def log_config(self, config: dict[str, Any]) -> None:
        text = json.dumps(config, indent=1, sort_keys=True, default=str)
        self.writer.add_text("config", "".join(f"    {line}\n" for line in text.splitlines()))

    def log_metrics(self, record: dict[str, Any], step: int) -> None:
        for key, value in _scalars(record).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # a killed run keeps every finished epoch, as metrics.csv does

    def close(self) -> None:
        self.writer.close()


class MLflowLogger:
    """An MLflow run (tracking URI and experiment from ``MLFLOW_TRACKING_URI`` / ``MLFLOW_EXPERIMENT_NAME``)."""

    def __init__(self, run_dir: Path | None) -> None:
        import mlflow

        self.mlflow = mlflow
        # inside a run the user already started, ours is its child rather than an error
        self.run = mlflow.start_run(run_name=_run_name(run_dir), nested=mlflow.active_run() is not None)

    def log_config(self, config: dict[str, Any]) -> None:
        # one parameter per setting, named by its place in config.yaml (optimisation.lr), and one per
        # hyperparameter (method.hparams.alpha), so runs compare setting by setting
        params: dict[str, Any] = {}

        def walk(prefix: str, values: dict[str, Any]) -> None:
            for key, value in values.items():
                if isinstance(value, dict) and value:
                    walk(f"{prefix}{key}.", value)
                else:
                    params[f"{prefix}{key}"] = value

        walk("", config)
        # MLflow keeps parameter values as strings of bounded length
        self.mlflow.log_params({k: json.dumps(v, default=str)[:500] if not isinstance(v, str) else v[:500]
                                for k, v in params.items()})

    def log_metrics(self, record: dict[str, Any], step: int) -> None:
        self.mlflow.log_metrics(_scalars(record), step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class WandbLogger:
    """A Weights & Biases run (project and entity from ``WANDB_PROJECT`` / ``WANDB_ENTITY``, offline with
    ``WANDB_MODE=offline``); its files go under the run folder."""

    def __init__(self, run_dir: Path | None) -> None:
        import wandb

        self.run = wandb.init(name=_run_name(run_dir), dir=None if run_dir is None else str(run_dir))

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_metrics(self, record: dict[str, Any], step: int) -> None:
        self.run.log(_scalars(record), step=step)

    def close(self) -> None:
        self.run.finish()


for _name, _cls, _module in (("tensorboard", TensorBoardLogger, "tensorboard"), ("mlflow", MLflowLogger, "mlflow"),
                             ("wandb", WandbLogger, "wandb")):
    register_logger(_name, _cls)
    _NEEDS[_name] = (_module, f'"spmlkit[{_name}]"' if _name == "tensorboard" else _module)


# ---------------------------------------------------------------------------- what a person sees


class EpochProgress:
    """Progress within an epoch for a person watching a run: where it is, how fast, how long left.

    An epoch of ResNet-50 at 448 x 448 on a CPU lasts long enough that silence reads as a hang.
    On a terminal (``live``) a rich progress bar shows the examples done, images per second and
    the time left, and disappears when the epoch's line is printed. In a log (output to a file or
    pipe, where a bar would write a carriage-return mess) a plain line is written at most every
    ``every_seconds`` (30 s) instead: an epoch shorter than that writes nothing, so a log of a
    fast run holds only its epoch lines. ``clock`` is injectable for tests.
    """

    def __init__(self, console: Any, *, epochs: int, live: bool | None = None, every_seconds: float = 30.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.console, self.epochs, self.every_seconds = console, epochs, every_seconds
        self.live = console.is_terminal if live is None else live
        self.clock = clock or time.monotonic
        self._bar: Any = None
        self._task: Any = None
        self.epoch = self.total = self.done = 0
        self._t0 = self._last_line = 0.0

    def start(self, epoch: int, examples: int) -> None:
        """An epoch of ``examples`` training examples begins."""
        self.epoch, self.total, self.done = epoch, examples, 0
        self._t0 = self._last_line = self.clock()
        if self.live:
            self._stop_bar()
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn(f"epoch {epoch}/{self.epochs}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("images"), _RateColumn(), TextColumn("left"), TimeRemainingColumn(),
                                 console=self.console, transient=True)
            self._task = self._bar.add_task("train", total=examples)
            self._bar.start()

    def advance(self, examples: int) -> None:
        """A training step over ``examples`` examples finished."""
        self.done += examples
        if self._bar is not None:
            self._bar.advance(self._task, examples)
            return
        now = self.clock()
        if not self.live and now - self._last_line >= self.every_seconds:
            self._last_line = now
            self.console.print(self.line(now - self._t0), soft_wrap=True)

    def line(self, elapsed: float) -> str:
        """The plain progress line after ``elapsed`` seconds of the epoch."""
        rate = self.done / elapsed if elapsed > 0 else float("nan")
        share = self.done / self.total if self.total else float("nan")
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        return (f"  epoch {self.epoch}/{self.epochs}: {self.done}/{self.total} images ({100 * share:.0f}%), "
                f"{rate:.0f} img/s, {_duration(left)} left")

    def finish(self) -> None:
        """The epoch ended (its line is about to be printed): the bar goes away."""
        self._stop_bar()

    def _stop_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``; ``?`` while unknown."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class _RateColumn(ProgressColumn):
    """Images per second, from rich's own moving estimate of the task's speed."""

    def render(self, task: Any) -> Text:
        return Text("? img/s" if task.speed is None else f"{task.speed:.0f} img/s")


class EpochLines:
    """One line per finished epoch under a header that names its columns, aligned for reading::

         epoch  train loss  val mAP (%)  pseudo-labels  img/s  seconds
             1     -0.0273        75.86              0    108     2.31

    The same columns as the table at the end of ``spmlkit train`` and as ``metrics.csv``
    (``train_loss``, ``val_map`` in percent, pseudo-negatives plus corrections,
    ``images_per_second``, ``epoch_seconds``)."""

    COLUMNS = (("epoch", 5), ("train loss", 10), ("val mAP (%)", 11), ("pseudo-labels", 13), ("img/s", 6),
               ("seconds", 7))

    def header(self) -> str:
        return "  ".join(name.rjust(width) for name, width in self.COLUMNS)

    @staticmethod
    def cells(record: dict[str, Any]) -> tuple[str, ...]:
        """The record's values as the columns show them."""
        pseudo = record.get("pseudo_negatives", 0) + record.get("corrections", 0)
        return (str(int(record["epoch"])), f"{record['train_loss']:.4f}", f"{100 * record['val_map']:.2f}",
                f"{int(pseudo)}", f"{record['images_per_second']:.0f}", f"{record['epoch_seconds']:.2f}")

    def row(self, record: dict[str, Any]) -> str:
        return "  ".join(cell.rjust(width) for cell, (_, width) in zip(self.cells(record), self.COLUMNS))
