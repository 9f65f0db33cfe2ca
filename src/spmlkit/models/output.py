"""What every spmlkit network returns, and what the trainer may ask of a network.

One type for every head. A network's forward returns a :class:`ModelOutput`: the logits, and
the outputs only some networks have -- label-wise embeddings (the label-query head with a
projector), the Gaussian codes of a bottleneck. A method declares which of them it reads
(:attr:`spmlkit.methods.Method.requires`), a network which it fills (:attr:`SPMLModel.outputs`),
and a run whose network cannot give what its method reads is refused before it starts
(docs/architecture.md, "Methods"). Nothing downstream asks which head made the output.

It is a ``NamedTuple`` rather than a dataclass because a tuple passes unchanged through
everything a forward's result goes through: ``DistributedDataParallel`` (which looks for the
tensors of the output), ``torch.compile`` and ``torch.func.functional_call``. Code that wants the
logits reads ``.logits`` -- the convention of the ecosystem's model outputs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

__all__ = ["ModelOutput", "OUTPUTS", "SPMLModel"]

#: the outputs a method may require beside the logits (``strong`` is not a network's: the
#: training step fills it when a batch holds two views of each row)
OUTPUTS = ("strong", "embeddings", "latent")


class ModelOutput(NamedTuple):
    """A network's outputs for a batch of ``B`` rows (with ``R`` runs' stacked weights, every
    tensor has a leading ``[R]``)."""

    #: ``[B, C]`` logits
    logits: Tensor
    #: ``[B, C]`` logits of the strong view of the same rows (LAC's two views; filled by the
    #: training step, which forwards the weak and the strong views as one batch)
    strong: Tensor | None = None
    #: unit label-wise embeddings ``[B, C, D]`` (``[2, B, C, D]`` once the step has split two views)
    embeddings: Tensor | None = None
    #: a bottleneck's Gaussian codes ``(μ, σ)``, each ``[B, C, w]`` or ``[B, w]`` (one code per row)
    latent: tuple[Tensor, Tensor] | None = None


class SPMLModel(nn.Module):
    """The base of every network spmlkit trains: what the trainer reads from a network, declared.

    * :attr:`outputs`: the :data:`OUTPUTS` its forward fills beside the logits (in training mode);
    * :attr:`batchable`: whether R copies with stacked weights train as one batched model
      (docs/architecture.md, "Many runs at once");
    * :meth:`draw_noise`: the randomness of a training forward, drawn before the step from the
      run's own generator and passed back as ``forward(x, noise=...)`` (a bottleneck's draws), so
      that R runs trained as one group draw what their solo runs draw;
    * :meth:`param_groups`: its optimiser groups.
    """

    outputs: frozenset[str] = frozenset()
    batchable: bool = False

    def draw_noise(self, generator: torch.Generator, rows: int) -> Tensor | None:
        """The draws of a training forward on ``rows`` rows, from ``generator``; None: it draws nothing."""
        return None

    def param_groups(self, lr: float, head_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """Every trainable parameter in one group at ``lr`` (networks with a backbone split theirs)."""
        return [{"params": [p for p in self.parameters() if p.requires_grad], "lr": lr, "name": "head"}]
