"""Base class and registry shared by every spmlkit loss.

Every loss is an ``nn.Module`` called as ``fn(logits, labels, **context)``:

* ``logits``: float tensor ``[B, C]``, or ``[..., B, C]``: leading dimensions index independent
  problems (R runs trained at once, docs/architecture.md, "Many runs at once"), each reduced on
  its own, so the loss then has shape ``[...]``;
* ``labels``: float tensor of the logits' shape with ``1`` = observed positive, ``0`` = unobserved,
  ``-1`` = observed negative (the effective labels of the label state: permanent corrections
  such as LL-Cp's already appear as ``1``);
* ``context``: what some losses read beside the logits, by name (:data:`CONTEXT` lists the names:
  APL's soft pseudo-negatives, the batch's row indices, a strong view's logits, label-wise
  embeddings, a bottleneck's codes). A loop may hand every loss the same context; each loss
  receives exactly what its class declares in :attr:`SPMLLoss.reads`, as one :class:`LossContext`.

What a loss needs from whoever trains it is declared by class attributes with defaults
(``reads``, ``data_arguments``, ``batchable``, ``corrects_labels``) and hooks that do nothing by
default; docs/losses-api.md describes the contract. A loss is a formula: everything a method
needs beyond it (a step between epochs, random draws, networks of its own) belongs to the
method (:mod:`spmlkit.methods`).

The registry is the single source of truth for names, one-line descriptions and
hyperparameters: a loss declares its hyperparameters as keyword arguments of ``__init__``
with their defaults, and :func:`create` validates user input against that signature, so
there is no second list to keep in sync. Constructor arguments that describe the data
(``data_arguments``) and the shared options ``reduction``/``validate_args`` are accepted by
:func:`create` but never listed as hyperparameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, TypedDict

import torch
from torch import Tensor, nn

from ..labels import PseudoLabels
from ..names import REGISTRY, Registry, origin_of
from ..signatures import init_defaults

__all__ = [
    "CONTEXT",
    "PseudoLabels",
    "LossContext",
    "LossOptions",
    "SPMLLoss",
    "REDUCTIONS",
    "register",
    "create",
    "available",
    "hyperparameters",
    "data_arguments",
    "loss_class",
    "bc_mean",
    "check_number",
    "check_reduction",
    "make_room",
]

#: every value of ``reduction``, in PyTorch's spelling
REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")
#: constructor options shared by every loss; never hyperparameters, never data arguments
OPTIONS: tuple[str, ...] = ("reduction", "validate_args")


class LossOptions(TypedDict, total=False):
    """The keyword options of :class:`SPMLLoss` that subclasses pass through ``**options``.

    Declared once here so that a subclass lists only its own hyperparameters and the
    registry can tell the two apart without a second list.
    """

    reduction: str
    validate_args: bool


#: what a loss may read beside ``(logits, labels)`` (:attr:`SPMLLoss.reads`), and what each is
CONTEXT: dict[str, str] = {
    "pseudo": "APL's soft pseudo-negatives of the batch (PseudoLabels: mask and target, [B, C])",
    "index": "the batch rows' indices in the training split (long [B])",
    "strong": "the logits of a strong augmentation of the same rows ([B, C]; logits are the weak view's)",
    "embeddings": "unit label-wise embeddings of the weak and the strong view ([2, B, C, D])",
    "latent": "a Gaussian bottleneck's codes (mu, sigma), each [B, C, w] or [B, w]",
}


class LossContext:
    """The context a loss reads beside ``(logits, labels)``: exactly the names its class declares
    in :attr:`SPMLLoss.reads`, each None where the caller gave none (a loss says what it needs).

    One object instead of one keyword per item keeps every loss's :meth:`SPMLLoss.loss` signature
    the same, however many kinds of context exist."""

    __slots__ = ("_items", "_owner")

    def __init__(self, owner: str, reads: tuple[str, ...], given: dict[str, Any]) -> None:
        object.__setattr__(self, "_items", {name: given.get(name) for name in reads})
        object.__setattr__(self, "_owner", owner)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(f"loss {self._owner!r} reads {name!r} without declaring it: add it to the class's "
                                 f"`reads` ({', '.join(self._items) or 'none yet'})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a loss's context is read-only")


class SPMLLoss(nn.Module):
    """Base class: a loss over ``(logits, labels)`` plus optional batch context.

    Subclasses implement :meth:`loss` and reduce their unreduced terms with :meth:`reduce`.
    The base ``forward`` validates inputs at the boundary, so formulas stay free of checks.

    What a loss needs from the training loop is *declared* by the class attributes below, and
    every hook has a default that does nothing, so a loop calls the same methods on every
    loss and reads the declarations instead of probing with ``getattr``.
    """

    #: registry name, filled in by :func:`register`
    name: ClassVar[str] = ""
    #: what :meth:`loss` reads beside the logits and labels, names of :data:`CONTEXT` (``index``:
    #: ROLE's per-example estimator; ``pseudo``: APL's pseudo-negatives; ``latent``: a bottleneck's
    #: codes); the loss is called with exactly these
    reads: ClassVar[tuple[str, ...]] = ()
    #: True for losses that make permanent label corrections (LL-Cp): :meth:`corrections`
    #: returns the bool ``[B, C]`` mask of entries a step turns positive
    corrects_labels: ClassVar[bool] = False
    #: constructor arguments that describe the data rather than the method; the trainer fills
    #: them, and they are never listed as hyperparameters
    data_arguments: ClassVar[tuple[str, ...]] = ()
    #: the values of ``reduction`` this loss supports (batch-wise losses without per-entry
    #: terms leave out "none")
    reductions: ClassVar[tuple[str, ...]] = REDUCTIONS
    #: True when the loss takes logits ``[..., B, C]`` and treats every leading index as its own
    #: problem, so that the trainer computes the losses of R runs (copies of one model that differ
    #: in seed or learning rate) in one call (docs/architecture.md, "Many runs at once"). That asks
    #: of :meth:`loss`: every statistic over the batch or the classes taken over the last two
    #: dimensions (``dim=-2`` / ``-1``), nothing stored on the module during the forward, no draws
    #: from a stream the problems share (randomness is drawn outside and passed in), and
    #: per-problem state (a parameter table, a buffer) that may carry the same leading dimensions.
    #: Every built-in loss does, and a test checks each against its per-problem values; a loss that
    #: does not declare it (the default, so a loss written for ``[B, C]`` only is never misused)
    #: trains one run at a time.
    batchable: ClassVar[bool] = False

    def __init__(self, *, reduction: str = "mean", validate_args: bool = True) -> None:
        super().__init__()
        label = type(self).name or type(self).__name__
        self.reduction = check_reduction(f"loss {label!r}", reduction, self.reductions)
        if not isinstance(validate_args, bool):
            raise TypeError(f"loss {label!r}: validate_args must be True or False, got {validate_args!r}")
        self.validate_args = validate_args

    # ------------------------------------------------------------------ hooks (defaults)
    def set_epoch(self, epoch: int, num_epochs: int) -> None:  # noqa: D401 - hook
        """Tell the loss the current 1-indexed epoch (for schedules). No-op by default."""

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Extra optimiser parameter groups the loss owns (none by default)."""
        return []

    def corrections(self, logits: Tensor, labels: Tensor) -> Tensor | None:
        """Bool ``[B, C]`` entries that a step on ``(logits, labels)`` corrects permanently.

        Only ``corrects_labels`` losses return a mask (the others None). A pure function of its
        inputs, computed beside the loss rather than stored by the forward, so that it works for
        R runs at once (:attr:`batchable`) and the trainer writes it to each run's label state.
        """
        return None

    def extra_state(self) -> dict[str, Any]:
        """Non-parameter state that must survive a checkpoint (none by default).

        State held in parameters and buffers already travels in ``state_dict``; this is for
        anything else.
        """
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned.

        The default accepts only an empty dict: state this loss cannot hold means the
        checkpoint was made with a different loss, which should not pass silently.
        """
        if state:
            label = self.name or type(self).__name__
            raise ValueError(
                f"loss {label!r} keeps no extra state, but the checkpoint holds {sorted(state)}; "
                "was it made with a different loss?"
            )

    def transfer_from(self, other: SPMLLoss) -> None:
        """Carry state over from the loss of an earlier phase (LinearInit). No-op by default."""

    # ------------------------------------------------------------------ evaluation
    def forward(self, logits: Tensor, labels: Tensor, **context: Any) -> Tensor:
        """The loss of ``logits`` against ``labels``. ``context``: items of :data:`CONTEXT` by name; the
        loss receives those it reads (:attr:`reads`), so that a loop may hand every loss the same
        context, and a name that is no context at all (a typo) is refused."""
        cls = type(self)
        label = self.name or cls.__name__
        unknown = set(context) - set(CONTEXT)
        if unknown:
            raise TypeError(f"loss {label!r} got {', '.join(sorted(unknown))}, which is no context a loss reads: the "
                            f"context is {', '.join(CONTEXT)} (this loss reads {', '.join(cls.reads) or 'none'})")
        _check_inputs(label, logits, labels, values=self.validate_args)
        labels = labels.to(dtype=logits.dtype)
        return self.loss(logits, labels, LossContext(label, cls.reads, context))

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        """The formula, on inputs :meth:`forward` has already checked."""
        raise NotImplementedError

    def reduce(self, terms: Tensor, mean: Callable[[Tensor], Tensor] | None = None, *, event_dims: int = 2) -> Tensor:
        """Apply ``self.reduction`` to a loss's unreduced terms.

        ``terms`` carries ``event_dims`` trailing dimensions of one problem (2 for an element
        matrix ``[..., B, C]``, 1 for a per-row or per-class vector) after any leading ones.
        ``"none"`` returns ``terms``, ``"sum"`` their sum per problem and ``"mean"`` the paper's
        normalisation, ``mean(terms)``: :func:`bc_mean` (the default) for an element matrix, a mean
        over the last dimension for a per-row vector. Taking the mean as a function keeps each
        family's exact expression, so "mean" values stay bit-for-bit what they were.
        """
        if self.reduction == "none":
            return terms
        if self.reduction == "sum":
            return terms.sum(dim=tuple(range(-event_dims, 0)))
        return (mean or bc_mean)(terms)

    def extra_repr(self) -> str:
        params = hyperparameters(self.name) if self.name in _REGISTRY else {}
        return ", ".join(f"{k}={getattr(self, k, v)!r}" for k, v in params.items())


def make_room(module: nn.Module, state_dict: dict[str, Any], prefix: str, name: str) -> None:
    """Give buffer ``name``, registered as None until training sets it (soft OPML's class AP, CRISP's
    priors), the shape a checkpoint holds for it, so that a fresh module's ``load_state_dict`` fills it
    rather than refusing the key. Called first in such a loss's ``_load_from_state_dict``."""
    key = prefix + name
    if key in state_dict and getattr(module, name) is None:
        setattr(module, name, torch.empty_like(state_dict[key]))


def check_reduction(where: str, reduction: Any, allowed: tuple[str, ...] = REDUCTIONS) -> str:
    """Return ``reduction`` if it is one of ``allowed``; raise a ``ValueError`` naming them otherwise."""
    if not isinstance(reduction, str) or reduction not in allowed:
        missing = "" if reduction not in REDUCTIONS else (
            f" ({reduction!r} is not defined here: the value is a statistic of the whole batch "
            "with no per-entry terms)"
        )
        raise ValueError(
            f"{where}: reduction must be one of {', '.join(map(repr, allowed))}, got {reduction!r}{missing}"
        )
    return reduction


def check_number(
    loss: str,
    key: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """Return ``value`` as a float after checking it is finite and inside the bounds.

    ``low_open`` makes the lower bound strict. Shared by every loss so that a bad
    hyperparameter is reported the same way whichever loss receives it.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"loss {loss!r}: {key} must be a finite number, got {value!r}")
    if low is not None and (value < low or (low_open and value == low)):
        bound = f"> {low}" if low_open else f">= {low}"
        raise ValueError(f"loss {loss!r}: {key} must be {bound}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"loss {loss!r}: {key} must be <= {high}, got {value!r}")
    return float(value)


def _check_inputs(name: str, logits: Tensor, labels: Tensor, *, values: bool = True) -> None:
    """The one input check every loss shares.

    Types, shapes, dtype and emptiness are read from tensor metadata and always checked. The
    label values need the data on the host (a device-to-host sync), so that check runs only
    when ``values`` is True: a trainer that validated its label matrix once builds its losses
    with ``validate_args=False`` and skips it on every step.
    """
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise TypeError(
            f"loss {name!r}: logits and labels must be torch tensors, got "
            f"{type(logits).__name__} and {type(labels).__name__}"
        )
    if logits.dim() < 2:
        raise ValueError(
            f"loss {name!r}: logits must have shape [batch, classes] (or [..., batch, classes] for "
            f"independent problems), got {tuple(logits.shape)}"
        )
    if labels.shape != logits.shape:
        raise ValueError(
            f"loss {name!r}: labels shape {tuple(labels.shape)} does not match logits shape "
            f"{tuple(logits.shape)}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"loss {name!r}: logits must be floating point, got {logits.dtype}")
    if logits.shape[-2] == 0 or logits.shape[-1] == 0:
        raise ValueError(
            f"loss {name!r}: got an empty batch (logits shape {tuple(logits.shape)}); every loss "
            "averages over the batch, so it needs at least one row and one class"
        )
    if values:
        valid = (labels == 1) | (labels == 0) | (labels == -1)
        if not bool(valid.all()):
            bad = labels[~valid]
            raise ValueError(
                f"loss {name!r}: labels may only contain 1 (observed positive), 0 (unobserved) and "
                f"-1 (observed negative); found {bad.flatten()[0].item()!r} ({bad.numel()} bad entries)"
            )


def bc_mean(elementwise: torch.Tensor) -> torch.Tensor:
    """The "BC-mean" reduction: sum of the ``[B, C]`` loss matrix / (B*C), per leading index.

    See docs/methods.md, "The element-wise view". Entries a method ignores are zero but still
    count in the denominator, as in the base, EM, LL and GR code bases.
    """
    return elementwise.sum(dim=(-2, -1)) / (elementwise.shape[-2] * elementwise.shape[-1])


@dataclass(frozen=True)
class _Entry:
    cls: type
    description: str
    #: whether the loss is also a method of its name (:mod:`spmlkit.methods` makes the recipe)
    method: bool = True


_REGISTRY: Registry[_Entry] = REGISTRY.loss


def register(name: str, description: str, *, method: bool = True) -> Callable[[type], type]:
    """Class decorator adding a loss to the registry under ``name``.

    The same decorator registers spmlkit's losses and a user's (docs/plugins.md). A loss is
    also a method of the same name, trained on the observed labels with nothing around it,
    unless ``method=False``: a loss that is only a part of other recipes (the high-rank
    regulariser), or one whose recipe its author registers with :func:`spmlkit.methods.register`.
    """

    def decorate(cls: type) -> type:
        # a data argument the constructor does not take could never be filled: fail at import
        missing = sorted(set(cls.data_arguments) - set(init_defaults(cls)))
        if missing:
            raise RuntimeError(f"loss {name!r} declares data arguments {missing} that __init__ does not take")
        unknown = sorted(set(cls.reads) - set(CONTEXT))
        if unknown:
            raise RuntimeError(f"loss {name!r} declares that it reads {unknown}; a loss may read "
                               f"{', '.join(CONTEXT)} (a method of its own may hand it anything else)")
        cls.name = name
        # a name registered twice fails here, at import
        _REGISTRY.register(name, _Entry(cls, description, method), origin=origin_of(cls.__module__))
        return cls

    return decorate


def hyperparameters(name: str) -> dict[str, Any]:
    """What a user tunes on loss ``name``, with defaults (None where required).

    Read from ``__init__``, minus the data arguments (the trainer fills those from the data)
    and minus the shared options ``reduction`` and ``validate_args``, so recipes, sweeps and
    the CLI list only the method's own knobs.
    """
    cls = _lookup(name).cls
    skip = set(cls.data_arguments) | set(OPTIONS)
    return {k: v for k, v in init_defaults(cls).items() if k not in skip}


def loss_class(name: str) -> type[SPMLLoss]:
    """The class registered as ``name``: what it declares (``batchable``, ``reads``, ...) can be
    read without building it."""
    return _lookup(name).cls


def data_arguments(name: str) -> tuple[str, ...]:
    """Constructor arguments of loss ``name`` that describe the data (filled by the trainer)."""
    return tuple(_lookup(name).cls.data_arguments)


def available() -> dict[str, str]:
    """Registered loss names mapped to their one-line descriptions, sorted by name."""
    return {name: _REGISTRY[name].description for name in sorted(_REGISTRY)}


def create(name: str, **kwargs: Any) -> SPMLLoss:
    """Build loss ``name`` from hyperparameters, data arguments and the shared options.

    Raises ``ValueError`` naming the valid choices for an unknown loss name or an unknown
    argument, so typos fail loudly instead of silently using a default.
    """
    entry = _lookup(name)
    hparams = sorted(hyperparameters(name))
    data = data_arguments(name)
    unknown = sorted(set(kwargs) - set(hparams) - set(data) - set(OPTIONS))
    if unknown:
        data_part = f"; data arguments: {', '.join(data)}" if data else ""
        raise ValueError(
            f"loss {name!r} got unknown hyperparameter(s) {', '.join(unknown)}; "
            f"valid ones are: {', '.join(hparams) or '(none)'}{data_part}; options: {', '.join(OPTIONS)}"
        )
    return entry.cls(**kwargs)


#: loss terms that are functions, not ``(logits, labels)`` modules, because they need more than
#: the logits: the name a user may try with :func:`create`, and how to call it instead
FUNCTIONAL_TERMS = {
    "pu_mixup_consistency": "it needs the model for an extra forward pass on mixed inputs; call "
                            "spmlkit.losses.pu_mixup_consistency(model, inputs, logits, labels) in your loop "
                            "(the pu_mlc method adds it for you)",
}


def _lookup(name: str) -> _Entry:
    if isinstance(name, str) and name in FUNCTIONAL_TERMS:
        raise ValueError(f"{name!r} is not created with losses.create: {FUNCTIONAL_TERMS[name]}")
    return _REGISTRY.get(name)
