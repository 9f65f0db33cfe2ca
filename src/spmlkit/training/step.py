"""One run's training step up to its loss: the forward pass, the logits the loss sees, the loss.

:class:`RunStep` is the function every run's step goes through, whether the run trains on its
own or as one of R runs at once. A solo run calls it directly. A batched group
(:mod:`spmlkit.training.batched`) calls the first run's module with the parameters and buffers
of all R runs (the model's weights, ROLE's label estimator, soft OPML's class AP), stacked, in
place of its own for an epoch: the model then maps ``[R, B, ...]`` inputs to ``[R, B, C]``
logits and the losses take the leading run dimension natively
(:attr:`~spmlkit.losses.SPMLLoss.batchable`). So the forward, the loss and its regularisers, the
penalty and the mixup term exist once (docs/architecture.md, "Many runs at once").

It is an ``nn.Module`` holding the run's model and its loss terms as submodules, so that the
stacked tensors of R runs can take the place of its own under the same names.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch import nn

from ..labels import LabelBatch, PseudoLabels
from .components import MethodComponents, Mixing
from .distributed import Distributed

__all__ = ["RunStep"]


class RunStep(nn.Module):
    """``(inputs, label batch, mixup draws) -> (loss, corrections)`` for one run.

    ``train_model`` is what the forward calls (the model itself, or its DistributedDataParallel /
    compiled wrapper, which only a solo run has); ``dist`` and ``global_batch``: under
    torch.distributed the loss sees the whole global batch (the logits of every process gathered,
    with autograd) or this process's slice (docs/architecture.md, "Distributed training").
    ``autocast``: the run's mixed-precision context (image runs on a GPU). Corrections are the
    bool ``[B, C]`` entries LL-Cp corrects for good (None for other methods).
    """

    def __init__(self, model: nn.Module, components: MethodComponents, *, train_model: nn.Module | None = None,
                 dist: Distributed | None = None, global_batch: bool = True,
                 autocast: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.model = model
        self.terms = components.terms
        self.components = components  # not a Module: its loss modules are registered through ``terms``
        # held outside the module tree: a wrapper around ``model`` would list its weights twice
        self._wrapped = (train_model,)
        self.dist = dist or Distributed()
        self.global_batch = global_batch
        self.autocast = autocast
        # what the run's record says of its training (docs/architecture.md, "How a run trained"),
        # seen where it happens: the dtype the forward's logits came out in (None before a step),
        # whether that forward called torch.compile's wrapper (which keeps the module it compiled
        # as ``_orig_mod``), and the most runs whose steps this one took together (set by BatchedSteps)
        self.forward_dtype: torch.dtype | None = None
        self.compiled = False
        self.group_size = 1

    def _trainable(self) -> list[torch.Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _mixup_forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The extra forward pass of PU-MLC's mixup term (the whole global batch's mixed inputs in
        global mode: each process forwards its slice, the logits are gathered)."""
        if not (self.dist.enabled and self.global_batch):
            return self.model(inputs)
        return self.dist.gather_rows(self.model(inputs[self.dist.shard(len(inputs))]).float(), len(inputs))

    def _model_arguments(self, noise: torch.Tensor | None) -> dict[str, Any]:
        """The forward's keywords beside the inputs: a model with a Gaussian bottleneck gets its step's
        draws ``noise``, and is asked for its codes when the loss reads them (docs/methods.md, "mime")."""
        kwargs: dict[str, Any] = {} if noise is None else {"noise": noise}
        if self.components.loss.needs_latent:
            kwargs["latent"] = True
        return kwargs

    def forward(self, x: torch.Tensor, index: torch.Tensor, labels: torch.Tensor, pseudo_mask: torch.Tensor,
                pseudo_target: torch.Tensor, mixing: Mixing | None = None, noise: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x``: this process's inputs; ``index``, ``labels``, ``pseudo_*``: the rows the loss sees
        (the whole global batch in global mode, this process's slice otherwise); ``noise``: the draws
        of a bottleneck model for the rows of ``x``. With R runs' stacked weights swapped in,
        ``self.model`` is all R models and its parameters are the stacked ones (the L1/L2 penalties
        then take one norm per run)."""
        train_model = self.model if self._wrapped[0] is None else self._wrapped[0]
        loss = self.components.loss
        embed = loss.needs_embeddings  # LAC: the label-wise embeddings come out of the same forward
        forward = self.model.embed if embed else train_model
        with self.autocast() if self.autocast is not None else contextlib.nullcontext():
            out = forward(x, **self._model_arguments(noise))
        # what the run's record says it trained in: the dtype of the logits, the compiled forward or not
        self.forward_dtype = (out[0] if embed or loss.needs_latent else out).dtype
        self.compiled = hasattr(forward, "_orig_mod")
        latent = None
        if embed:
            logits, embeddings = out[0].float(), out[1].float()
        elif loss.needs_latent:  # MIME: the bottleneck's codes come out of the same forward
            logits, embeddings, latent = out[0].float(), None, (out[1][0].float(), out[1][1].float())
        else:
            logits, embeddings = out.float(), None
        strong = None
        if loss.needs_views:  # x holds each row's weak view, then its strong view (one forward, as the LAC code)
            rows = len(index)
            logits, strong = logits[:rows], logits[rows:]
            if embeddings is not None:
                embeddings = embeddings.view(2, rows, *embeddings.shape[1:])
        if self.global_batch and self.dist.enabled:  # the loss of the whole global batch
            logits = self.dist.gather_rows(logits, len(index))
            if latent is not None:
                latent = (self.dist.gather_rows(latent[0], len(index)), self.dist.gather_rows(latent[1], len(index)))
            if self.components.method.mixup:
                x = self.dist.gather_rows(x, len(index))
        batch = LabelBatch(labels, PseudoLabels(pseudo_mask, pseudo_target), index)
        value = self.components.training_loss(self._mixup_forward, x, logits, batch, mixing, self._trainable,
                                              strong=strong, embeddings=embeddings, latent=latent)
        return value, self.components.corrections(logits, batch)
