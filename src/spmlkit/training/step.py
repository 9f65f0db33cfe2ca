"""One run's training step up to its loss: the forward pass, the outputs the method sees, the loss.

:class:`RunStep` is the function every run's step goes through, whether the run trains on its
own or as one of R runs at once. A solo run calls it directly. A batched group
(:mod:`spmlkit.training.batched`) calls the first run's module with the parameters and buffers
of all R runs (the model's weights, and the method's own: a label estimator, a class AP buffer,
networks of its own), stacked, in place of its own for an epoch: the model then maps
``[R, B, ...]`` inputs to ``[R, B, C]`` logits and the method takes the leading run dimension
natively (:attr:`~spmlkit.methods.Method.batchable`). So the forward and the method's loss exist
once (docs/architecture.md, "Many runs at once").

The step knows no method: it forwards the batch, hands the method the network's
:class:`~spmlkit.models.ModelOutput` and the step's labels, and gives the method's ``loss`` hook
the arguments its signature asks for (:data:`~spmlkit.methods.STEP_ARGUMENTS`): the step's
draws, the inputs, the model as a function for an extra pass, its trainable parameters. A method
that reads a strong view of every row (:attr:`~spmlkit.methods.Method.requires`) gets a batch
holding each row's weak view, then its strong view, forwarded as one, and its output split.

It is an ``nn.Module`` holding the run's model and its method as submodules, so that the stacked
tensors of R runs can take the place of its own under the same names.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch import nn

from ..labels import LabelBatch, PseudoLabels
from ..methods import Method
from ..models.output import ModelOutput
from .distributed import Distributed

__all__ = ["RunStep"]


class RunStep(nn.Module):
    """``(inputs, label batch, draws) -> (loss, corrections)`` for one run.

    ``train_model`` is what the forward calls (the model itself, or its DistributedDataParallel /
    compiled wrapper, which only a solo run has); ``dist`` and ``global_batch``: under
    torch.distributed the loss sees the whole global batch (the logits of every process gathered,
    with autograd) or this process's slice (docs/architecture.md, "Distributed training").
    ``autocast``: the run's mixed-precision context (image runs on a GPU). Corrections are the
    bool ``[B, C]`` entries the method corrects for good (None for most methods).
    """

    def __init__(self, model: nn.Module, method: Method, *, train_model: nn.Module | None = None,
                 dist: Distributed | None = None, global_batch: bool = True,
                 autocast: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.model = model
        self.method = method
        # held outside the module tree: a wrapper around ``model`` would list its weights twice
        self._wrapped = (train_model,)
        self.dist = dist or Distributed()
        self.global_batch = global_batch
        self.autocast = autocast
        self._two_views = "strong" in method.requires
        self._arguments = type(method).step_arguments
        # what the run's record says of its training (docs/architecture.md, "How a run trained"),
        # seen where it happens: the dtype the forward's logits came out in (None before a step),
        # whether that forward called torch.compile's wrapper (which keeps the module it compiled
        # as ``_orig_mod``), and the most runs whose steps this one took together (set by BatchedSteps)
        self.forward_dtype: torch.dtype | None = None
        self.compiled = False
        self.group_size = 1

    def _trainable(self) -> list[torch.Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _extra_forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The model's logits on inputs a method makes (an extra forward pass; in global mode each
        process forwards its slice of the whole global batch's inputs and the logits are gathered)."""
        if not (self.dist.enabled and self.global_batch):
            return self.model(inputs).logits
        return self.dist.gather_rows(self.model(inputs[self.dist.shard(len(inputs))]).logits.float(), len(inputs))

    def forward(self, x: torch.Tensor, index: torch.Tensor, labels: torch.Tensor, pseudo_mask: torch.Tensor,
                pseudo_target: torch.Tensor, draws: tuple[torch.Tensor, ...] | None = None,
                noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x``: this process's inputs; ``index``, ``labels``, ``pseudo_*``: the rows the loss sees
        (the whole global batch in global mode, this process's slice otherwise); ``draws``: the
        method's draws for the step; ``noise``: the network's draws for the rows of ``x``. With R
        runs' stacked weights swapped in, ``self.model`` is all R models and its parameters are the
        stacked ones."""
        train_model = self.model if self._wrapped[0] is None else self._wrapped[0]
        with self.autocast() if self.autocast is not None else contextlib.nullcontext():
            out = train_model(x) if noise is None else train_model(x, noise=noise)
        # what the run's record says it trained in: the dtype of the logits, the compiled forward or not
        self.forward_dtype = out.logits.dtype
        self.compiled = hasattr(train_model, "_orig_mod")
        out = _in_float32(out)
        rows = len(index)
        if self._two_views:  # x holds each row's weak view, then its strong view (one forward)
            embeddings = out.embeddings
            out = out._replace(logits=out.logits[:rows], strong=out.logits[rows:],
                               embeddings=None if embeddings is None else embeddings.view(2, rows, *embeddings.shape[1:]))
        if self.global_batch and self.dist.enabled:  # the loss of the whole global batch
            latent = out.latent
            out = out._replace(logits=self.dist.gather_rows(out.logits, rows), latent=None if latent is None else (
                self.dist.gather_rows(latent[0], rows), self.dist.gather_rows(latent[1], rows)))
            if "inputs" in self._arguments:
                x = self.dist.gather_rows(x, rows)
        batch = LabelBatch(labels, PseudoLabels(pseudo_mask, pseudo_target), index)
        available = {"draws": draws, "inputs": x, "forward": self._extra_forward, "parameters": self._trainable}
        value = self.method.loss(out, batch, **{name: available[name] for name in self._arguments})
        if not (isinstance(value, torch.Tensor) and value.shape == out.logits.shape[:-2] and value.is_floating_point()):
            raise _bad_loss(self.method, value, out.logits.shape[:-2])  # before any backward or optimiser step
        return value, self.method.corrections(out.logits, batch)


def _in_float32(out: ModelOutput) -> ModelOutput:
    """The outputs the method sees, in float32 whatever the forward's autocast computed them in."""
    latent = out.latent
    return ModelOutput(out.logits.float(), None if out.strong is None else out.strong.float(),
                       None if out.embeddings is None else out.embeddings.float(),
                       None if latent is None else (latent[0].float(), latent[1].float()))


def _bad_loss(method: Method, value: Any, shape: torch.Size) -> Exception:
    """What a step does with a method loss that is no scalar (one per run in a batched group): a
    plug-in's is the user's to fix, named in one line; spmlkit's own is our bug."""
    from ..errors import InputError
    from ..names import BUILTIN, REGISTRY

    got = (f"a {'floating-point' if value.is_floating_point() else str(value.dtype).removeprefix('torch.')} tensor "
           f"of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else f"{type(value).__name__} {value!r}")
    wanted = "a scalar tensor" if not shape else f"a tensor of shape {list(shape)}, one loss per run of a batched group"
    name = method.name or type(method).__name__
    origin = REGISTRY.method.origin(name) if name in REGISTRY.method else BUILTIN
    if origin == BUILTIN:
        return RuntimeError(f"method {name!r} returned {got} from its loss instead of {wanted}")
    return InputError(f"method {name!r} of plug-in {origin} returned {got} from its loss, where a step needs {wanted} "
                      "(reduce it to one value per run); nothing was trained on it")
