"""SMILE: soft targets from label distributions that a graph network recovers over a k-NN graph.

Xu, Qiao, Lv, Geng, Zhang, "One Positive Label is Sufficient: Single-Positive Multi-Label Learning
with Label Enhancement", NeurIPS 2022 (docs/methods.md, "smile").

Beside the classifier, the method trains networks of its own (its label-enhancement model): a
graph convolutional network over the k-nearest-neighbour graph of the training rows
(:class:`SmileEncoder`) gives every row a label distribution ``D``, an MLP encodes a row and its
``D`` into hidden features, and an MLP reconstructs the row from both. Each step draws a Beta
sample of ``D`` (reparameterised), from a generator of each run's own, since the draw depends on
the forward's values. The classifier learns from soft targets that mix ``D`` with the observed
labels; the two losses are :mod:`spmlkit.losses.smile`'s formulas.

Its networks are parameters of the method, in an optimiser group of their own, so R runs stack
them like a model's weights; the training rows' features and their graph are the data a group
shares. A group holds one seed's runs (``group_varies``): runs of different seeds draw different
batches, and the encoder would compute the rows of every run's batch for every run (measured no
faster than training them one at a time on Yeast, and rounding apart from solo runs).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from ..labels import LabelBatch
from ..losses.smile import (BETA_EPSILON, SmileTerms, beta_rsample, smile_classifier_loss,
                            smile_enhancement_loss)
from ..models.graph import GraphConv, KnnGraph
from ..stacked import affine
from .base import Method, RunInfo

__all__ = ["SMILE", "SmileEncoder"]

#: offsets of the two generators from the run seed: the initial weights and the Beta draws use
#: streams of their own, apart from the run's batch order (seeded with the seed itself)
INIT_SEED_OFFSET = 20_000
DRAW_SEED_OFFSET = 30_000


def _run_mlp(net: nn.Sequential, x: Tensor) -> Tensor:
    """``net`` on ``x``, also with R runs' stacked weights in it (``x`` ``[R, B, in]``): what
    ``net(x)`` computes for one run, each layer through :func:`~spmlkit.stacked.affine`."""
    first, last = net[0], net[2]
    return affine(torch.relu(affine(x, first.weight, first.bias)), last.weight, last.bias)


def _mlp(in_dim: int, hidden: int, out_dim: int, generator: torch.Generator) -> nn.Sequential:
    """``Linear -> ReLU -> Linear`` with torch's default initialisation, drawn from ``generator``."""
    net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
    for layer in (net[0], net[2]):
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        bound = 1.0 / math.sqrt(layer.weight.shape[1])
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return net


def _first_occurrences(index: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct ids of ``index`` (``[R, B]``) in the order they first occur, and where each entry
    of ``index`` is among them (``[R, B]``). Runs that share one batch (a group that differs only in
    learning rate or weight decay) get their batch itself, in its order: every sum over the rows
    then adds what a solo run adds, in the same order, and the group's runs equal their solo runs
    bit for bit (docs/architecture.md, "Many runs at once")."""
    flat = index.reshape(-1)
    rows, where = torch.unique(flat, return_inverse=True)
    positions = torch.arange(len(flat), device=flat.device)
    first = torch.full((len(rows),), len(flat), device=flat.device).scatter_reduce(0, where, positions, "amin")
    order = first.argsort()
    return rows[order], order.argsort()[where].view(index.shape)


class SmileEncoder(nn.Module):
    """``D``'s logits: two graph convolutions and a linear layer, ``fc(conv2(relu(conv1(X))))``,
    hidden width ``C``. ``features`` ``[N, D]`` (a buffer, not checkpointed: it is the data) and its
    ``k``-NN graph are fixed for the run, and shared by a batched group's runs (``data_buffers``,
    :func:`spmlkit.training.batched.is_data_buffer`)."""

    data_buffers = ("features",)

    def __init__(self, features: Tensor, num_classes: int, k: int, generator: torch.Generator) -> None:
        super().__init__()
        self.register_buffer("features", features, persistent=False)
        self.graph = KnnGraph(features, k)
        dim = features.shape[1]
        self.conv1 = GraphConv(dim, num_classes, generator=generator)
        self.conv2 = GraphConv(num_classes, num_classes, generator=generator)
        self.fc = nn.Linear(num_classes, num_classes)
        nn.init.kaiming_uniform_(self.fc.weight, a=math.sqrt(5), generator=generator)
        nn.init.uniform_(self.fc.bias, -1 / math.sqrt(num_classes), 1 / math.sqrt(num_classes), generator=generator)

    def forward(self, index: Tensor | None = None) -> Tensor:
        """The logits of rows ``index`` (``[B, C]``), or of every row (``[N, C]``) without it.

        A row's output depends only on the rows within two incoming edges of it, so a batch's
        rows are computed from those alone: the values of the official code's pass over every row
        (which it then indexes), at a fraction of the cost on a large set.

        With R runs' stacked weights in place of its own (a batched group), every result has a
        leading run dimension, and ``index`` may be ``[R, B]``, each run's batch: the rows of all
        R batches are computed once per run and each run reads its own."""
        if index is not None and index.dim() == 2:
            rows, where = _first_occurrences(index)
            out = self(rows)
            return out[where] if out.dim() == 2 else torch.take_along_dim(out, where.unsqueeze(-1), dim=-2)
        second = self.graph.block(index)
        first = second if index is None else self.graph.block(second.sources)
        h = torch.relu(self.conv1(self.graph, self.features[first.sources], first))
        return affine(self.conv2(self.graph, h, second), self.fc.weight, self.fc.bias)


def _as_features(features: Any, k: int) -> Tensor:
    if features is None:
        raise ValueError("method 'smile' needs the training rows' features (features=<[num_train, dim] matrix>) for "
                         "its k-nearest-neighbour graph; the trainer fills them")
    x = features.detach() if isinstance(features, Tensor) else torch.as_tensor(np.asarray(features))
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"method 'smile': features must be a [num_train, dim] float matrix, got {tuple(x.shape)} {x.dtype}")
    if x.shape[0] <= k:
        raise ValueError(f"method 'smile': its {k}-nearest-neighbour graph needs at least {k + 1} training rows, "
                         f"this run has {x.shape[0]}; lower k or train on more rows")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        row = int(bad.any(dim=1).nonzero()[0])
        raise ValueError(f"method 'smile': training row {row}'s features hold {x[row][bad[row]][0].item()}; the "
                         "k-nearest-neighbour graph needs finite features")
    return x.to(torch.float32)



class SMILE(Method):
    """SMILE (module docstring; docs/methods.md, "smile"). Hyperparameters, with the official
    code's names and defaults: ``mu`` (weight of ``D`` in the classifier's targets), ``p`` (target
    of unobserved entries), ``bias`` (unobserved entries weighted ``1/(C-1)``; else by ``rate``),
    ``gamma`` (reconstruction weight), ``delta`` (KL weight), ``k`` (neighbours in the graph).

    Its networks are built from the run's training features (:class:`RunInfo`: a feature run's rows
    as the model sees them, an image run's pooled backbone features of its training images), its
    number of classes and its seed (initial weights and Beta draws, on streams of their own). The
    Beta draws' generator travels in the checkpoint, so a resumed run continues the same draws.
    """

    batchable = True
    group_varies = ("lr", "weight_decay")

    def __init__(self, run: RunInfo, *, mu: float = 0.5, p: float = 0.5, bias: bool = True, rate: float = 1.0,
                 gamma: float = 0.001, delta: float = 1.0, k: int = 3) -> None:
        super().__init__(run)
        self.mu = self.check_number("mu", mu, low=0.0, high=1.0)
        self.p = self.check_number("p", p, low=0.0, high=1.0)
        self.rate = self.check_number("rate", rate, low=0.0)
        self.gamma = self.check_number("gamma", gamma, low=0.0)
        self.delta = self.check_number("delta", delta, low=0.0)
        if not isinstance(bias, bool):
            raise ValueError(f"method 'smile': bias must be true or false, got {bias!r}")
        if bias and self.rate != 1.0:
            raise ValueError(f"method 'smile': rate={rate!r} weights the unobserved entries only when bias is false (bias "
                             "0 in the official code); with bias true they are weighted 1/(C-1): set bias false to use "
                             "rate")
        self.bias = bias
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"method 'smile': k must be a positive whole number of neighbours, got {k!r}")
        self.k = int(k)
        num_classes, seed = run.num_classes, run.seed
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
            raise ValueError(f"method 'smile' needs at least 2 labels, got {num_classes!r}")
        self.num_classes, self.seed = int(num_classes), int(seed)
        x = _as_features(run.features(), self.k)
        init = torch.Generator().manual_seed(self.seed + INIT_SEED_OFFSET)
        c = self.num_classes
        self.encoder = SmileEncoder(x, c, self.k, init)
        #: the official code's encoder_z: hidden features of a row from its input and its D
        self.latent = _mlp(x.shape[1] + c, c, c, init)
        #: the official code's decoder: the row's input back from its D and hidden features
        self.reconstruct = _mlp(2 * c, x.shape[1], x.shape[1], init)
        self._draws: torch.Generator | None = None
        self._draw_state: Tensor | None = None
        #: the sampler of the Beta draws (None: the runs' own generators); the side-by-side tool sets it
        self.sample: Callable[[Tensor], Tensor] | None = None

    @property
    def num_train(self) -> int:
        return self.encoder.graph.num_rows

    def _generator(self, device: torch.device) -> torch.Generator:
        """The generator of the Beta draws, on the device of the draws, made at the first draw."""
        if self._draws is None or self._draws.device != device:
            self._draws = torch.Generator(device=device).manual_seed(self.seed + DRAW_SEED_OFFSET)
            if self._draw_state is not None:
                self._draws.set_state(self._draw_state)
                self._draw_state = None
        return self._draws

    def _draw(self, concentration: Tensor) -> Tensor:
        """Dirichlet draws of ``[..., 2]`` concentrations: with a leading run dimension in a batched
        group, row r from run r's generator, as that run would draw alone; else from this run's."""
        if concentration.dim() < 4:
            return torch._sample_dirichlet(concentration, generator=self._generator(concentration.device))
        return torch.stack([torch._sample_dirichlet(c, generator=m._generator(c.device))
                            for c, m in zip(concentration, self.group_members(), strict=True)])

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The networks at ``lr``, in a group of their own (the run's weight decay applies to it too)."""
        params = [*self.encoder.parameters(), *self.latent.parameters(), *self.reconstruct.parameters()]
        return [{"params": params, "lr": lr, "name": "smile"}]

    def get_extra_state(self) -> dict[str, Any]:
        if self._draws is not None:
            return {"draws": self._draws.get_state()}
        return {} if self._draw_state is None else {"draws": self._draw_state}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        unknown = set(state) - {"draws"}
        if unknown:
            raise ValueError(f"method 'smile' keeps only its draws' generator, but the checkpoint holds "
                             f"{sorted(unknown)}; was it made with a different method?")
        if "draws" in state:
            self._draws, self._draw_state = None, state["draws"].cpu()

    def legacy_state(self, components: dict[str, Any]) -> dict[str, Any]:
        """The networks' tensors as the loss held them, and its draws' generator."""
        return {**components["loss"], "_extra_state": dict(components.get("loss_extra", {}))}

    def transfer_from(self, other: Method) -> None:
        """Start from ``other``'s networks and draws (LinearInit: phase 1 hands them to phase 2)."""
        if not isinstance(other, SMILE):
            raise TypeError(f"method 'smile' can only take its networks from another 'smile' method, got {other.name!r}")
        self.load_state_dict(other.state_dict())

    def distributions(self) -> Tensor:
        """``D`` of every training row, ``[num_train, C]`` (probabilities)."""
        return torch.sigmoid(self.encoder())

    def loss(self, out: Any, batch: LabelBatch) -> Tensor:
        parts = self.terms(out.logits, batch.labels, batch.index)
        return parts.classifier + parts.enhancement.to(parts.classifier.device)

    def terms(self, logits: Tensor, labels: Tensor, index: Tensor) -> SmileTerms:
        """One step's intermediate values and its two losses (their sum is the loss)."""
        if logits.dim() not in (2, 3) or tuple(index.shape) != tuple(logits.shape[:-1]):
            raise ValueError(f"method 'smile' takes logits [batch, classes] (or [runs, batch, classes] for a batched "
                             f"group) and one id per row; got logits {tuple(logits.shape)} and index "
                             f"{tuple(index.shape)}")
        if logits.shape[-1] != self.num_classes:
            raise ValueError(f"method 'smile': logits have {logits.shape[-1]} classes but its networks were built for "
                             f"{self.num_classes}")
        labels = labels.to(dtype=logits.dtype)
        index = index.to(self.encoder.features.device)
        distribution = torch.sigmoid(self.encoder(index))
        rows = self.encoder.features[index]
        hidden = _run_mlp(self.latent, torch.cat((rows, distribution), dim=-1))
        draw = beta_rsample(distribution + BETA_EPSILON, 1 - distribution + BETA_EPSILON,
                            sample=self._draw if self.sample is None else self.sample)
        reconstructed = _run_mlp(self.reconstruct, torch.cat((distribution, hidden), dim=-1))
        adjacency = self.encoder.graph.adjacency(index).to(distribution.dtype)
        enhancement = smile_enhancement_loss(distribution, labels.to(distribution.device), rows, reconstructed, draw,
                                             adjacency, gamma=self.gamma, delta=self.delta)
        classifier = smile_classifier_loss(logits, labels, distribution.to(logits.device).detach(), mu=self.mu,
                                           p=self.p, bias=self.bias, rate=self.rate)
        return SmileTerms(distribution, draw, reconstructed, adjacency, classifier, enhancement)

    def extra_repr(self) -> str:
        return (f"mu={self.mu}, p={self.p}, bias={self.bias}, rate={self.rate}, gamma={self.gamma}, "
                f"delta={self.delta}, k={self.k}, seed={self.seed}")
