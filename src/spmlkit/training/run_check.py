"""Checks of a run's settings against its method and its data, made before any run trains.

A sweep checks every value of its grid before the first run (docs/sweep-files.md): a mistake
that would fail every run of a method or a data set is said once, in one line, not once per
run after each has started. These two fail only where the pieces meet, so no single section of
the configuration can check them:

* the method's label algorithm built with the run's epochs (:func:`check_label_algorithm`): APL's
  warm-up must end before the last epoch (EM+APL's ``warmup_epochs`` 5 cannot run in 2 epochs);
* ``subset`` against the data (:func:`check_subset`): no more rows than the set has, and, under
  ``partition: random``, enough for a validation and a test row (10 % each, rounded).
"""

from __future__ import annotations

from .config import RunConfig

__all__ = ["TooFewEpochs", "check_label_algorithm", "check_subset"]


class TooFewEpochs(ValueError):
    """A method whose label algorithm cannot run in the run's epochs (its warm-up is as long): a
    reproduction or a benchmark of every method leaves such a method out and says why, where a
    method the user named is refused."""

    def __init__(self, method: str, epochs: int, reason: str) -> None:
        self.method, self.epochs, self.reason = method, epochs, reason
        super().__init__(f"method {method!r} cannot run in {epochs} epoch(s): {reason}")

    def left_out(self) -> str:
        """The method and why, for a line that says it was left out."""
        return f"{self.method}, which cannot run in {self.epochs} epoch(s): {self.reason}"


def check_label_algorithm(config: RunConfig) -> None:
    """Build the method's label algorithm as the run would (its hyperparameters, the run's epochs):
    ValueError with the algorithm's own reason when it cannot run, e.g. a warm-up as long as the run."""
    from .. import labeling
    from ..methods import resolve_hparams

    resolved = resolve_hparams(config.method.name, config.method.hparams)
    name = resolved.method.labeling
    if name is None:
        return
    run_arguments = {"num_epochs": config.schedule.epochs}
    kwargs = {k: run_arguments[k] for k in labeling.ALGORITHMS[name].run_arguments}
    try:
        labeling.create(name, **resolved.labeling_kwargs, **kwargs)
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
