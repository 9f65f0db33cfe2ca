"""What a method is: one object that holds everything a paper trains beside the network.

A *loss* (:mod:`spmlkit.losses`) is a formula; a *method* is what a paper trains: its loss on
the model's outputs, the labels it trains on, the random draws of its steps, its step between
epochs, the networks of its own, the parts it adds to the model, and what a run must give it.
:class:`Method` is that object, in the spirit of timm's models (a plain ``nn.Module`` per method,
one registry) and of pluggy's hooks (a hook receives only the arguments it declares). The
training loop calls every method through the same hooks and reads the same declarations; it
never asks which method runs (docs/architecture.md, "Methods").

What a method declares (class attributes, read from the class before any run is built):

* :attr:`Method.labels`, :attr:`Method.threshold`, :attr:`Method.on_features`: which labels train
  it, its decision threshold, and whether it has a meaning on a feature data set;
* :attr:`Method.requires`: the model outputs it reads beyond the logits (a strong view, label-wise
  embeddings, a bottleneck's codes): a run whose network cannot give them is refused when planned;
* :attr:`Method.batchable`, :attr:`Method.group_varies`: whether R runs may train as one batched
  group, and in which settings such a group's runs may differ (the run plan and the sweep both
  read this one declaration);
* :attr:`Method.batch_statistics`: under ``torch.distributed``, whose batch its statistics see;
* :meth:`Method.model_parts`: the model settings it brings (LAC's label-query head, MIME's
  bottleneck width, BoostLU's boosted maps), which a run's own settings may override;
* :meth:`Method.check_run`: what it needs of a run's length (a warm-up that ends before the last
  epoch), checked for every run of a sweep before the first trains.

What it does (hooks with defaults; the arguments a hook takes beyond its first ones are those
its signature names, see :data:`STEP_ARGUMENTS` and :data:`EPOCH_ARGUMENTS`):

* ``__init__(run, **hyperparameters)``: its hyperparameters are its constructor's keyword-only
  arguments (read as a loss's are); :class:`RunInfo` tells it about the run;
* :meth:`Method.draw`: a step's random draws from the run's own generator, before the forward;
* :meth:`Method.loss`: the step's loss on the model's :class:`~spmlkit.models.ModelOutput`;
* :meth:`Method.corrections`: the label entries a step corrects for good (LL-Cp);
* :meth:`Method.after_epoch`: its step between epochs, returning what the epoch's record shows;
* :meth:`Method.param_groups`: optimiser groups of its own parameters;
* ``state_dict`` / ``load_state_dict``: its modules' tensors and, through ``get_extra_state``,
  anything else a resumed run needs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ..labels import LabelBatch

__all__ = ["EPOCH_ARGUMENTS", "GROUP_SETTINGS", "LABEL_SETTINGS", "Meaning", "Method", "RunInfo", "STEP_ARGUMENTS"]

#: what :meth:`Method.loss` may ask for beyond the model output and the label batch, by naming it
#: as a keyword-only argument
STEP_ARGUMENTS: dict[str, str] = {
    "draws": "the step's draws (:meth:`Method.draw`), each with a leading [R] in a batched group; None without",
    "inputs": "the step's model inputs (the whole global batch's under torch.distributed)",
    "forward": "the model as a function of inputs to logits, for an extra forward pass",
    "parameters": "a function giving the model's trainable parameters (stacked [R, ...] in a batched group)",
}
#: what :meth:`Method.after_epoch` may ask for beyond the epoch, by naming it as a keyword-only
#: argument; the loop predicts the whole training split only for a method that asks for ``probs``
EPOCH_ARGUMENTS: dict[str, str] = {
    "probs": "the model's probabilities on every training row, [N, C], in index order",
    "state": "the run's LabelState (observed labels, pseudo-labels, corrections), which it may change",
    "truth": "the training rows' full labels [N, C] when the data has them, else None (for records only)",
}
#: the settings in which the runs of one batched group may differ (:attr:`Method.group_varies`)
GROUP_SETTINGS: tuple[str, ...] = ("seed", "lr", "weight_decay")
#: the label settings a method may train on (:attr:`Method.labels`)
LABEL_SETTINGS: tuple[str, ...] = ("observed", "full", "1p_alln")


@dataclass(frozen=True)
class Meaning:
    """What a method means on a kind of data: whether it trains there, and the note that says why
    not (``trains`` False) or what it goes without there (``trains`` True; "" when nothing)."""

    trains: bool = True
    note: str = ""


@dataclass(frozen=True)
class RunInfo:
    """What a run tells its method when it builds it: the training split's size and labels, the
    run's length and seed, and the training rows' features (a function: for an image run it is a
    pass over the images, made only when a method calls it)."""

    num_train: int
    num_classes: int
    #: the {-1, 0, 1} matrix the method trains on (:attr:`Method.labels` applied)
    observed: np.ndarray
    #: the mean number of positives per training row (EPR's and ROLE's prior)
    expected_num_pos: float
    epochs: int
    seed: int
    features: Callable[[], Tensor]


def _keyword_arguments(function: Callable[..., Any], allowed: Mapping[str, str], where: str) -> tuple[str, ...]:
    """The keyword-only arguments of ``function``: what a hook declares it receives."""
    names = tuple(p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY)
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise TypeError(f"{where} asks for {', '.join(unknown)}; it may ask for {', '.join(allowed)}")
    return names


class Method(nn.Module):
    """A method: subclass it, declare what it needs, implement :meth:`loss`, register it with
    :func:`spmlkit.methods.register` (module docstring; docs/plugins.md, "A whole method")."""

    # ------------------------------------------------------------------ what the catalogue shows
    #: registry name, one-line description and paper, filled in by :func:`spmlkit.methods.register`
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""

    # ------------------------------------------------------------------ declarations
    #: which label matrix trains it: "observed" (the simulated or given partial labels), "full" (the
    #: complete truth: an oracle reference), "1p_alln" (one positive plus every true negative)
    labels: ClassVar[str] = "observed"
    #: whether it trains on more than the observation gives the others: a reference shown beside a
    #: leaderboard's ranks, not in them. Set at registration from :attr:`labels` (full, 1p_alln); a
    #: method that trains on what ``after_epoch``'s ``truth`` tells it declares it itself, and the
    #: plan refuses it on data without full labels
    sees_more_labels: ClassVar[bool] = False
    #: decision threshold of its thresholded metrics (EM's authors advise 0.75 for EM models)
    threshold: ClassVar[float] = 0.5
    #: the model outputs it reads beyond the logits (names of :data:`spmlkit.models.OUTPUTS`)
    requires: ClassVar[frozenset[str]] = frozenset()
    #: whether it has a meaning on a feature data set (a row of fixed features, a linear head)
    on_features: ClassVar[Meaning] = Meaning()
    #: whether R runs (copies of one model that differ in :attr:`group_varies`) may train as one
    #: batched group: its loss takes logits ``[R, B, C]`` and treats each leading index as its own
    #: run, and its draws and state are per run (docs/architecture.md, "Many runs at once")
    batchable: ClassVar[bool] = False
    #: the settings of :data:`GROUP_SETTINGS` in which one batched group's runs may differ: without
    #: "seed" for a method whose group should hold one seed's runs, which draw the same batches
    group_varies: ClassVar[tuple[str, ...]] = GROUP_SETTINGS
    #: under torch.distributed, whose batch its statistics see by default: "global" (the whole
    #: global batch, as one process) or "process" (each process's slice)
    batch_statistics: ClassVar[str] = "global"
    #: whether it writes pseudo-labels or corrections into the run's label state (so that the label
    #: state's counts and accuracies, and their figure, say something about it)
    writes_labels: ClassVar[bool] = False

    #: the arguments :meth:`loss` and :meth:`after_epoch` ask for (read from their signatures)
    step_arguments: ClassVar[tuple[str, ...]] = ()
    epoch_arguments: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.step_arguments = _keyword_arguments(cls.loss, STEP_ARGUMENTS, f"{cls.__name__}.loss")
        cls.epoch_arguments = _keyword_arguments(cls.after_epoch, EPOCH_ARGUMENTS, f"{cls.__name__}.after_epoch")

    def __init__(self, run: RunInfo) -> None:
        super().__init__()
        if not isinstance(run, RunInfo):
            raise TypeError(f"method {self.name or type(self).__name__!r} is built with a RunInfo, got {run!r}")
        self._members: list[Method] | None = None

    # ------------------------------------------------------------------ reading the class
    @classmethod
    def hyperparameters(cls) -> dict[str, Any]:
        """What a user tunes, with defaults (None where required): the constructor's keyword-only
        arguments."""
        params = inspect.signature(cls.__init__).parameters.values()
        return {p.name: None if p.default is p.empty else p.default for p in params if p.kind is p.KEYWORD_ONLY}

    @classmethod
    def check_hparams(cls, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
        """``overrides`` as given, after refusing a name the method does not have (one line naming
        every valid one); the values are checked when the method is built."""
        overrides = dict(overrides or {})
        valid = cls.hyperparameters()
        for key in overrides:
            if key not in valid:
                raise ValueError(f"method {cls.name!r} has no hyperparameter {key!r}; valid ones are: "
                                 f"{', '.join(sorted(valid)) or '(none)'}")
        return overrides

    @classmethod
    def model_parts(cls, hparams: Mapping[str, Any]) -> dict[str, Any]:
        """The model settings this method brings, given its hyperparameters: defaults a run's own
        settings override (``image_head``, ``bottleneck``), or parts only it sets (``cam_boost``).
        None by default: the run's network as configured."""
        return {}

    @classmethod
    def check_run(cls, hparams: Mapping[str, Any], epochs: int) -> None:
        """ValueError, with the reason, where the method cannot train a run of ``epochs`` epochs with
        ``hparams`` (the user's, over its defaults): e.g. a warm-up as long as the run, whose every
        epoch would train something else. A sweep asks before its first run, so that such a grid is
        refused once (or the method left out of a grid of every method, and said) rather than failing
        every run; the method's constructor refuses the same. Nothing by default."""

    @classmethod
    def parts(cls) -> tuple[tuple[str, str], ...]:
        """The registered names it is made of, as ``(family, name)`` ("loss", "labeling"): a record of a
        run names the plug-ins among them (:func:`spmlkit.plugins.plugin_code`)."""
        return ()

    # ------------------------------------------------------------------ hooks
    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        """The epoch about to be trained (1-indexed): every loss among its modules hears of it (for
        schedules)."""
        from ..losses import SPMLLoss

        for module in self.modules():
            if isinstance(module, SPMLLoss):
                module.set_epoch(epoch, num_epochs)

    def draw(self, generator: torch.Generator, rows: int) -> tuple[Tensor, ...] | None:
        """The random draws of a step of ``rows`` rows, from the run's own ``generator`` (on the
        CPU), made before the forward: where a solo run draws them, so that a run in a batched group
        draws the same numbers. The loop stacks each run's draws (a leading ``[R]``) and hands them to
        :meth:`loss` as ``draws``. None by default: no draws."""
        return None

    def loss(self, out: Any, batch: LabelBatch) -> Tensor:
        """The step's loss: a scalar (``[R]`` in a batched group) of the model's outputs ``out``
        (:class:`~spmlkit.models.ModelOutput`) and the step's labels ``batch`` (labels, APL's
        pseudo-labels, row indices; on the device). Keyword-only arguments named after
        :data:`STEP_ARGUMENTS` receive those."""
        raise NotImplementedError(f"method {self.name or type(self).__name__!r} defines no loss")

    def corrections(self, logits: Tensor, batch: LabelBatch) -> Tensor | None:
        """Bool ``[B, C]`` label entries this step corrects for good (the loop writes them into the
        run's label state); None by default."""
        return None

    @property
    def corrects_labels(self) -> bool:
        """Whether its steps write label corrections (:meth:`corrections`): under torch.distributed
        with per-process statistics the processes' label states would drift apart."""
        return type(self).corrections is not Method.corrections

    def after_epoch(self, epoch: int) -> dict[str, float]:
        """The method's step after ``epoch`` (1-indexed); returns what the epoch's record shows.
        Keyword-only arguments named after :data:`EPOCH_ARGUMENTS` receive those. Nothing by
        default."""
        return {}

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Optimiser groups of the method's own trainable parameters, at the run's ``lr`` (the run's
        weight decay applies to every group). One group of every parameter by default; none without."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [{"params": params, "lr": lr, "name": self.name or "method"}] if params else []

    def transfer_from(self, other: Method) -> None:
        """Take over what an earlier phase of the run learned (LinearInit's first phase trains a method
        of its own). Nothing by default."""

    def legacy_state(self, components: dict[str, Any]) -> dict[str, Any]:
        """This method's ``state_dict`` from the state a checkpoint of spmlkit 0.1 written before a
        method was one object held (its "components": the loss's tensors, the loss's extra state, the
        label algorithm's), so that such a run resumes. A method that did not exist then has none."""
        raise ValueError(f"method {self.name!r}: the checkpoint holds its state in the layout of an earlier version, "
                         "which this method cannot read; start the run afresh (another --out, or --overwrite)")

    # ------------------------------------------------------------------ batched groups
    def join_group(self, members: list[Method] | None) -> None:
        """While R runs train as one batched group, the first run's method computes every run's step;
        it is handed the R runs' methods, in run order (itself first), for per-run state that is no
        tensor and so is not stacked (a generator of its own); None when the group's epoch ends."""
        self._members = None if members is None else list(members)

    def group_members(self) -> list[Method]:
        """The methods of the runs whose step this one computes: ``[self]`` alone, every run's in a
        batched group (:meth:`join_group`)."""
        return [self] if self._members is None else self._members

    # ------------------------------------------------------------------ shared checks
    def check_number(self, key: str, value: Any, *, low: float | None = None, high: float | None = None,
                     low_open: bool = False) -> float:
        """``value`` as a float after checking it is a finite number inside the bounds (one line
        naming the method and the hyperparameter otherwise)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"method {self.name!r}: {key} must be a finite number, got {value!r}")
        if low is not None and (value < low or (low_open and value == low)):
            raise ValueError(f"method {self.name!r}: {key} must be {'>' if low_open else '>='} {low}, got {value!r}")
        if high is not None and value > high:
            raise ValueError(f"method {self.name!r}: {key} must be <= {high}, got {value!r}")
        return float(value)

    def extra_repr(self) -> str:
        return self.name
