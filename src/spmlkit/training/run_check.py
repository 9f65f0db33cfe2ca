"""Checks of a run's settings against its method and its data, made before any run trains.

A sweep checks every value of its grid before the first run (docs/sweep-files.md): a mistake
that would fail every run of a method or a data set is said once, in one line, not once per
run after each has started. These two fail only where the pieces meet, so no single section of
the configuration can check them:

* the method against the run's epochs (:func:`check_run_length`, the method's own
  :meth:`~spmlkit.methods.Method.check_run`): a method's warm-up must end before the last epoch
  (a warm-up of 5 epochs cannot run in 2);
* ``subset`` against the data (:func:`check_subset`): no more rows than the set has, and, under
  ``partition: random``, enough for a validation and a test row (10 % each, rounded).
"""

from __future__ import annotations

from .config import RunConfig

__all__ = ["TooFewEpochs", "check_run_length", "check_subset"]


class TooFewEpochs(ValueError):
    """A method that cannot run in the run's epochs (its warm-up is as long): a
    reproduction or a benchmark of every method leaves such a method out and says why, where a
    method the user named is refused."""

    def __init__(self, method: str, epochs: int, reason: str) -> None:
        self.method, self.epochs, self.reason = method, epochs, reason
        super().__init__(f"method {method!r} cannot run in {epochs} epoch(s): {reason}")

    def left_out(self) -> str:
        """The method and why, for a line that says it was left out."""
        return f"{self.method}, which cannot run in {self.epochs} epoch(s): {self.reason}"


def check_run_length(config: RunConfig) -> None:
    """The method's own check of the run's length (:meth:`~spmlkit.methods.Method.check_run`, with the
    run's hyperparameters and epochs): :class:`TooFewEpochs` with the method's reason, e.g. a warm-up
    as long as the run."""
    from ..methods import get_method

    method = get_method(config.method.name)
    try:
        method.check_run(method.check_hparams(config.method.hparams), config.schedule.epochs)
    except ValueError as exc:
        raise TooFewEpochs(config.method.name, config.schedule.epochs, str(exc)) from None


def check_subset(config: RunConfig) -> None:
    """Read the run's rows as the run will (feature runs with a ``subset``), so that a subset larger
    than the set, or too small to partition, is refused before any run with the run's own message.
    Decided once per process and (data set, partition, subset)."""
    if config.data.subset is None:
        return
    from .run_data import SubsetMismatch, is_feature_run, load_run_data

    if not is_feature_run(config):
        return
    key = (config.data.dataset, config.data.partition, config.data.subset)
    if key not in _FITTING:
        try:
            load_run_data(config)  # the run's own refusal: larger than the set, no validation or test row left
        except SubsetMismatch:
            raise
        except ValueError:  # the data itself cannot be read: each run records that, as without a subset
            return
        _FITTING.add(key)


#: the (data set, partition, subset) found to fit, in this process
_FITTING: set[tuple[str, str, int]] = set()
