"""A method made of registered parts: a loss, regularisers added to it, a label algorithm.

Most published methods are a formula and nothing more (AN, EM, GR, ZLPR, the references), or a
formula with a between-epoch label algorithm (EM+APL, LL-Cp's corrections, MIME's confident
positives). They need no class of their own: :func:`loss_method` makes a :class:`LossMethod`
from the names of its parts, and :mod:`spmlkit.methods.catalogue` registers each in one line.
A method that needs more (a draw per step, a step between epochs of its own, a network of its
own) subclasses :class:`LossMethod` or :class:`~spmlkit.methods.Method` in a module of its own.

Its hyperparameters are its loss's and its label algorithm's, read from their constructors (a
recipe's ``loss_kwargs`` and ``labeling_kwargs`` change their defaults), plus the keyword-only
arguments of a subclass's own ``__init__``. What it requires of the model and whether it can be
batched are its losses' declarations: a loss that reads a bottleneck's codes makes a method that
requires them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from torch import Tensor, nn

from .. import labeling, losses
from ..labels import LabelBatch
from ..models.output import OUTPUTS
from .base import Meaning, Method, RunInfo

__all__ = ["LossMethod", "Parts", "loss_method"]


@dataclass(frozen=True)
class Parts:
    """The registered parts of a :class:`LossMethod`, by name."""

    loss: str
    #: where the method deliberately differs from its loss's defaults
    loss_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: losses added to the main one, each with its arguments
    regularizers: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    #: a between-epoch label algorithm (:mod:`spmlkit.labeling`), or None
    labeling: str | None = None
    labeling_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: loss hyperparameters whose default is a statistic of the training data rather than a constant:
    #: EPR's and ROLE's expected number of positives per row is the data's true mean (docs/methods.md,
    #: "epr"); a value set by the user or a preset wins
    data_defaults: tuple[str, ...] = ()


class LossMethod(Method):
    """A loss on the model's logits (with the context it reads), plus regularisers, plus an optional
    label algorithm run after every epoch on the whole training split's predictions."""

    #: the parts, by name (a subclass or :func:`loss_method` sets them)
    made_of: ClassVar[Parts | None] = None
    #: the model settings the method brings (:meth:`~spmlkit.methods.Method.model_parts`)
    model_settings: ClassVar[Mapping[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parts = cls.made_of
        if parts is None:
            return
        classes = [losses.loss_class(parts.loss), *(losses.loss_class(name) for name, _ in parts.regularizers)]
        if parts.labeling is not None:
            labeling.ALGORITHMS.get(parts.labeling)  # an unknown name: one line naming the closest
        # what its losses declare, with what the class itself declares (a hook of its own may read more)
        declared = cls.__dict__
        cls.requires = frozenset(declared.get("requires", ())) | frozenset(
            name for loss in classes for name in loss.reads if name in OUTPUTS)
        cls.batchable = declared.get("batchable", True) and all(loss.batchable for loss in classes)
        cls.writes_labels = declared.get("writes_labels", False) or parts.labeling is not None \
            or classes[0].corrects_labels
        if cls.after_epoch is LossMethod.after_epoch and parts.labeling is None:
            cls.epoch_arguments = ()  # nothing to do between epochs: no pass over the training split

    def __init__(self, run: RunInfo, **hparams: Any) -> None:
        super().__init__(run)
        parts = type(self).made_of
        if parts is None:
            raise TypeError(f"{type(self).__name__} names no parts (made_of)")
        loss_valid = losses.hyperparameters(parts.loss)
        lab_valid = {} if parts.labeling is None else labeling.hyperparameters(parts.labeling)
        loss_kwargs, lab_kwargs = dict(parts.loss_kwargs), dict(parts.labeling_kwargs)
        for key, value in hparams.items():
            if key in loss_valid:
                loss_kwargs[key] = value
            elif key in lab_valid:
                lab_kwargs[key] = value
            else:
                raise ValueError(f"method {self.name!r} has no hyperparameter {key!r}; valid ones are: "
                                 f"{', '.join(sorted(type(self).hyperparameters()))}")
        data = {"num_train": run.num_train, "num_classes": run.num_classes, "observed": run.observed,
                "expected_num_pos": run.expected_num_pos, "seed": run.seed, "features": run.features}

        def filled(name: str, kwargs: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
            for key in (*losses.data_arguments(name), *extra):
                if key not in kwargs:
                    kwargs[key] = data[key]() if key == "features" else data[key]
            return kwargs

        #: the main loss (``criterion``, as a PyTorch training loop names it: ``loss`` is the hook)
        self.criterion = losses.create(parts.loss, **filled(parts.loss, loss_kwargs, parts.data_defaults),
                                       validate_args=False)
        self.regularizers = nn.ModuleList(
            losses.create(name, **filled(name, self.regularizer_kwargs(name, dict(kwargs))), validate_args=False)
            for name, kwargs in parts.regularizers)
        self.algorithm = None if parts.labeling is None else _algorithm(parts.labeling, lab_kwargs, run.epochs)
        # what each loss reads, looked up once rather than on every step
        self._reads = [type(loss).reads for loss in (self.criterion, *self.regularizers)]
        self._corrects = type(self.criterion).corrects_labels

    @classmethod
    def hyperparameters(cls) -> dict[str, Any]:
        parts = cls.made_of
        out = super().hyperparameters()
        if parts is None:
            return out
        loss_params = losses.hyperparameters(parts.loss) | dict(parts.loss_kwargs)
        lab_params = {} if parts.labeling is None else labeling.hyperparameters(parts.labeling) | dict(
            parts.labeling_kwargs)
        return {**lab_params, **loss_params, **out}

    @classmethod
    def model_parts(cls, hparams: Mapping[str, Any]) -> dict[str, Any]:
        return dict(cls.model_settings)

    @classmethod
    def check_run(cls, hparams: Mapping[str, Any], epochs: int) -> None:
        """Its label algorithm built for ``epochs`` epochs, as a run builds it (APL's warm-up must
        end before the last epoch: EM+APL's 5 epochs cannot run in 2)."""
        parts = cls.made_of
        if parts is None or parts.labeling is None:
            return
        valid = labeling.hyperparameters(parts.labeling)
        _algorithm(parts.labeling, {**parts.labeling_kwargs, **{k: v for k, v in hparams.items() if k in valid}},
                   epochs)

    @classmethod
    def parts(cls) -> tuple[tuple[str, str], ...]:
        made = cls.made_of
        if made is None:
            return ()
        names = [("loss", made.loss), *(("loss", name) for name, _ in made.regularizers)]
        return tuple(names + ([("labeling", made.labeling)] if made.labeling is not None else []))

    def regularizer_kwargs(self, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments of regulariser ``name``: the recipe's (a subclass may route a knob of its own
        into them)."""
        return kwargs

    # ------------------------------------------------------------------ hooks
    def loss(self, out: Any, batch: LabelBatch) -> Tensor:
        logits, labels = out.logits, batch.labels
        items = {"pseudo": batch.pseudo, "index": batch.index, "strong": out.strong, "embeddings": out.embeddings,
                 "latent": out.latent}
        reads = self._reads
        value = self.criterion(logits, labels, **{k: items[k] for k in reads[0]})
        for reg, names in zip(self.regularizers, reads[1:]):
            value = value + reg(logits, labels, **{k: items[k] for k in names})
        return value

    def corrections(self, logits: Tensor, batch: LabelBatch) -> Tensor | None:
        if not self._corrects:
            return None
        return self.criterion.corrections(logits.detach(), batch.labels)

    @property
    def corrects_labels(self) -> bool:
        return self._corrects

    def after_epoch(self, epoch: int, *, probs: Tensor | None = None, state: Any = None) -> dict[str, float]:
        """The label algorithm's round on the epoch's training predictions; its scalar statistics, as
        ``labeling_<name>``."""
        if self.algorithm is None:
            return {}
        stats = self.algorithm.step(probs, state, epoch) or {}
        return {f"labeling_{k}": float(v) for k, v in stats.items() if np.isscalar(v)}

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The groups its losses own (ROLE's label estimator at its own multiple of ``lr``)."""
        groups = list(self.criterion.param_groups(lr))
        for reg in self.regularizers:
            groups += reg.param_groups(lr)
        return groups

    def transfer_from(self, other: Method) -> None:
        if isinstance(other, LossMethod):
            self.criterion.transfer_from(other.criterion)

    def get_extra_state(self) -> dict[str, Any]:
        """The loss's non-tensor state and the label algorithm's (the label state travels on its own)."""
        return {"loss_extra": self.criterion.extra_state(),
                "labeling": None if self.algorithm is None else self.algorithm.state_dict()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.criterion.load_extra_state(state.get("loss_extra", {}))
        if self.algorithm is not None and state.get("labeling") is not None:
            self.algorithm.load_state_dict(state["labeling"])

    def legacy_state(self, components: dict[str, Any]) -> dict[str, Any]:
        """The loss's tensors under ``criterion``; its extra state and the label algorithm's as they were."""
        extra = {"loss_extra": components.get("loss_extra", {}), "labeling": components.get("labeling")}
        return {**{f"criterion.{k}": v for k, v in components["loss"].items()}, "_extra_state": extra}


def _algorithm(name: str, kwargs: Mapping[str, Any], epochs: int) -> labeling.LabelingAlgorithm:
    """Label algorithm ``name`` with ``kwargs`` and the run arguments it asks for (its epochs)."""
    run_args = {"num_epochs": epochs}
    return labeling.create(name, **kwargs, **{k: run_args[k] for k in labeling.ALGORITHMS[name].run_arguments})


def loss_method(loss: str, *, loss_kwargs: Mapping[str, Any] | None = None,
                regularizers: tuple[tuple[str, Mapping[str, Any]], ...] = (), labeling: str | None = None,
                labeling_kwargs: Mapping[str, Any] | None = None, data_defaults: tuple[str, ...] = (),
                labels: str | None = None, threshold: float | None = None, on_features: Meaning | None = None,
                model_settings: Mapping[str, Any] | None = None, base: type[LossMethod] = LossMethod
                ) -> type[LossMethod]:
    """A :class:`LossMethod` class of these parts, for :func:`spmlkit.methods.register`: a method that
    is its parts and nothing more, in one line. The declarations given (``labels``, ``threshold``,
    ``on_features``, ``model_settings``) replace ``base``'s; the others are ``base``'s. The class
    belongs to the caller's module, so a plug-in's method has the plug-in as its origin."""
    parts = Parts(loss, dict(loss_kwargs or {}), tuple((n, dict(k)) for n, k in regularizers), labeling,
                  dict(labeling_kwargs or {}), tuple(data_defaults))
    declared = {"labels": labels, "threshold": threshold, "on_features": on_features,
                "model_settings": None if model_settings is None else dict(model_settings)}
    name = "".join(word.capitalize() for word in loss.split("_")) + base.__name__.removesuffix("Method") + "Method"
    body = {"made_of": parts, **{k: v for k, v in declared.items() if v is not None},
            "__module__": sys._getframe(1).f_globals.get("__name__", __name__), "__qualname__": name}
    return type(name, (base,), body)
