"""SMILE: single-positive multi-label learning with label enhancement (docs/methods.md, "smile").

Xu, Qiao, Lv, Geng, Zhang, "One Positive Label is Sufficient: Single-Positive Multi-Label Learning
with Label Enhancement", NeurIPS 2022.

Beside the classifier, SMILE trains a label-enhancement model: a graph convolutional network over
the k-nearest-neighbour graph of the training rows gives every row a label distribution ``D`` (one
probability per class), held close to the observed labels, to the row's reconstruction and to a
Beta variational posterior. The classifier then learns from soft targets that mix ``D`` with the
observed labels. Both models belong to this loss: the network is extra trainable state, like
ROLE's label estimator, in its own optimiser group; the training rows' features (the network's
input and its graph) are a data argument the trainer fills.

The official code trains the two models with two optimisers on two losses; here one step adds the
two losses and takes one backward pass and one optimiser step. No gradient crosses between them
(the classifier's targets are detached, the enhancement loss does not read the classifier), and
Adam updates every parameter from its own state, so the result is the same (docs/methods.md,
"smile", where the differences that remain are listed).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Unpack

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..stacked import affine
from .base import LossContext, LossOptions, SPMLLoss, check_number, register
from .graph import GraphConv, KnnGraph

__all__ = ["SmileLoss", "SmileEncoder", "SmileTerms", "beta_rsample", "beta_kl_term", "smile_classifier_loss",
           "smile_enhancement_loss", "neg_log"]

#: added inside every logarithm of the official code: -log(x + 1e-5) bounds each term at about 11.5
LOG_EPSILON = 1e-5
#: added to both Beta concentrations before sampling, so that neither is 0 when D is 0 or 1
BETA_EPSILON = 1e-5
#: added to both concentrations inside the KL term
KL_EPSILON = 1e-6
#: offsets of the two generators from the run seed: the initial weights and the Beta draws use
#: streams of their own, apart from the run's batch order (seeded with the seed itself)
INIT_SEED_OFFSET = 20_000
DRAW_SEED_OFFSET = 30_000


def neg_log(x: Tensor) -> Tensor:
    """``-log(x + 1e-5)``, the official code's logarithm of a probability."""
    return -torch.log(x + LOG_EPSILON)


def _entry_mean(terms: Tensor) -> Tensor:
    """The mean of each problem's ``[B, C]`` (or ``[B, B]``) matrix: one value, or one per leading index."""
    return terms.mean(dim=(-2, -1))


def _assume_negative(probs: Tensor, positive: Tensor) -> Tensor:
    """Mean over the batch of ``-log p`` at observed positives and ``-log(1 - p)`` elsewhere."""
    return _entry_mean(torch.where(positive, neg_log(probs), neg_log(1.0 - probs)))


class _ProblemMSE(torch.autograd.Function):
    """``F.mse_loss``'s mean of each problem's matrix (``[R, B, F]`` to ``[R]``), with the gradient
    ``F.mse_loss`` computes for one problem, rounded as it rounds it: ``(2 / (B F)) (a - b) g``.
    Reducing the unreduced loss instead would scale in another order (``2 (a - b) (g / (B F))``),
    and a run trained in a batched group would then differ from the same run alone in the last bit."""

    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return _entry_mean(F.mse_loss(a, b, reduction="none"))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = ctx.saved_tensors
        scaled = (a - b).mul_(2.0 / (a.shape[-2] * a.shape[-1])).mul_(grad[..., None, None])
        return scaled, -scaled


def _mse(a: Tensor, b: Tensor) -> Tensor:
    """``F.mse_loss``'s mean, one per problem when ``a`` carries a leading run dimension."""
    return F.mse_loss(a, b) if a.dim() == 2 else _ProblemMSE.apply(a, b)


class _DirichletPair(torch.autograd.Function):
    """A draw ``x`` of a Dirichlet with ``concentration`` (last dimension: the two Beta parameters),
    made by ``sample``, with the implicit reparameterisation gradient torch's own ``Dirichlet``
    uses: ``dx/dalpha`` from the distribution function held fixed at the draw."""

    @staticmethod
    def forward(ctx: Any, concentration: Tensor, sample: Callable[[Tensor], Tensor]) -> Tensor:
        x = sample(concentration.detach())
        ctx.save_for_backward(x, concentration)
        return x

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        x, concentration = ctx.saved_tensors
        total = concentration.sum(-1, True).expand_as(concentration)
        dx = torch._dirichlet_grad(x, concentration, total)  # the derivative torch's Dirichlet.rsample uses
        return dx * (grad - (x * grad).sum(-1, True)), None


def beta_rsample(concentration1: Tensor, concentration0: Tensor, generator: torch.Generator | None = None,
                 sample: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """A reparameterised draw of ``Beta(concentration1, concentration0)``: the value and the
    gradient of ``torch.distributions.Beta(...).rsample()``, drawn from ``generator`` (the global
    stream when None). ``sample`` replaces the sampler (``[..., 2]`` concentrations to a draw of the
    pair); the side-by-side tool replays the official code's draws through it."""
    pair = torch.stack([concentration1, concentration0], -1)
    draw = sample if sample is not None else (lambda c: torch._sample_dirichlet(c, generator=generator))
    return _DirichletPair.apply(pair, draw).select(-1, 0)


def beta_kl_term(d: Tensor) -> Tensor:
    """The official code's "KL" term on label distributions ``d``, averaged over its entries:
    ``lnΓ(a) + lnΓ(b) + (a - 1) ψ(a) + (b - 1) ψ(b)`` with ``a = d + 1e-6``, ``b = 1 - d + 1e-6``.

    Only part of the KL divergence of ``Beta(a, b)`` from ``Beta(1, 1)``: it leaves out
    ``-lnΓ(a + b)`` and ``-(a + b - 2) ψ(a + b)``, and it depends on ``d`` alone, not on the draw.
    Smallest at ``d = 0.5`` (docs/methods.md, "smile")."""
    a, b = d + KL_EPSILON, (1.0 - d) + KL_EPSILON
    return _entry_mean((torch.lgamma(a) + torch.lgamma(b)) + ((a - 1.0) * torch.digamma(a) + (b - 1.0) * torch.digamma(b)))


def smile_classifier_loss(logits: Tensor, labels: Tensor, distribution: Tensor, *, mu: float, p: float,
                          bias: bool, rate: float) -> Tensor:
    """The classifier's loss: cross-entropy against soft targets, mean over the batch's entries.

    ``t = mu * sg(D) + (1 - mu) * y'`` with ``y'`` the observed labels (1 positive, 0 observed
    negative) and ``p`` at unobserved entries; ``-t log(s) - (1 - t) log(1 - s)`` per entry with
    ``s = sigmoid(logits)``; unobserved entries divided by ``C - 1`` (``bias``) or multiplied by
    ``rate``."""
    observed = torch.where(labels > 0, 1.0, torch.where(labels < 0, 0.0, torch.full_like(logits, p)))
    target = (mu * distribution + (1 - mu) * observed).detach()
    scores = torch.sigmoid(logits)
    terms = target * neg_log(scores) + (1 - target) * neg_log(1 - scores)
    unobserved = labels == 0
    terms = torch.where(unobserved, terms / (labels.shape[-1] - 1) if bias else terms * rate, terms)
    return _entry_mean(terms)


def smile_enhancement_loss(distribution: Tensor, labels: Tensor, features: Tensor, reconstructed: Tensor,
                           draw: Tensor, adjacency: Tensor, *, gamma: float, delta: float) -> Tensor:
    """The label-enhancement model's loss on one batch (the official code's ``vae_loss``):

    ``AN(D) + gamma * (MSE(x_rec, x) + AN(r) + MSE(r r^T, A_batch)) + delta * KL(D)``

    with ``D`` the batch's label distributions, ``r`` the Beta draw, ``AN`` the assume-negative
    cross-entropy against the observed positives and ``A_batch`` the 0/1 adjacency among the
    batch's rows. With a leading run dimension on every argument, one loss per run."""
    positive = labels > 0
    align = _assume_negative(distribution, positive)
    rec_x = _mse(reconstructed, features)
    rec_y = _assume_negative(draw, positive)
    rec_a = _mse(torch.matmul(draw, draw.mT), adjacency)
    return align + gamma * (rec_x + rec_y + rec_a) + delta * beta_kl_term(distribution)


class SmileTerms(NamedTuple):
    """What one step computes (:meth:`SmileLoss.terms`): the batch's label distributions ``D``, the
    Beta draw, the reconstructed inputs and the batch's adjacency, then the two losses."""

    distribution: Tensor
    draw: Tensor
    reconstructed: Tensor
    adjacency: Tensor
    classifier: Tensor
    enhancement: Tensor


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
    ``k``-NN graph are fixed for the run, and shared by a batched group's runs (``data_buffers``)."""

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
        raise ValueError("loss 'smile' needs the training rows' features (features=<[num_train, dim] matrix>) for "
                         "its k-nearest-neighbour graph; the trainer fills them")
    x = features.detach() if isinstance(features, Tensor) else torch.as_tensor(np.asarray(features))
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"loss 'smile': features must be a [num_train, dim] float matrix, got {tuple(x.shape)} {x.dtype}")
    if x.shape[0] <= k:
        raise ValueError(f"loss 'smile': its {k}-nearest-neighbour graph needs at least {k + 1} training rows, "
                         f"this run has {x.shape[0]}; lower k or train on more rows")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        row = int(bad.any(dim=1).nonzero()[0])
        raise ValueError(f"loss 'smile': training row {row}'s features hold {x[row][bad[row]][0].item()}; the "
                         "k-nearest-neighbour graph needs finite features")
    return x.to(torch.float32)


@register("smile", "SMILE: soft targets from a GCN's label distributions over a k-NN graph (Beta label enhancement)")
class SmileLoss(SPMLLoss):
    """SMILE (docs/methods.md, "smile"); owns the label-enhancement networks as submodules.

    Needs ``index`` (the batch's training-row ids) at every call. Data arguments: ``features``
    (``[num_train, dim]``, the training rows as the model sees them for a feature run, the
    backbone's pooled features of the training images for an image run), ``num_classes`` and
    ``seed`` (of the initial weights and of the Beta draws). Hyperparameters, with the official
    code's names and defaults: ``mu`` (weight of ``D`` in the classifier's targets), ``p`` (target
    of unobserved entries), ``bias`` (unobserved entries weighted ``1/(C-1)``; else by ``rate``),
    ``gamma`` (reconstruction weight), ``delta`` (KL weight), ``k`` (neighbours in the graph).

    Add :meth:`param_groups` to the optimiser (the networks at the run's lr, without weight decay,
    as the official code trains them). The Beta draws come from a generator of the loss's own,
    whose state travels in :meth:`extra_state`, so a resumed run continues the same draws.
    Only ``reduction="mean"``: the loss is a sum of means over different sets of entries.
    """

    needs_index = True
    data_arguments = ("features", "num_classes", "seed")
    reductions = ("mean",)
    #: yes: R runs' networks stack like any parameters, and each run's Beta draws come from that
    #: run's own generator (:meth:`join_group`), so a run draws in a group what it draws alone
    batchable = True
    #: no: runs with different seeds draw different batches, and the encoder would compute the rows
    #: of all R batches for every run -- measured no faster than training them one at a time on
    #: Yeast, and rounding apart from solo runs (docs/methods.md, "smile", "Many runs at once")
    groups_across_seeds = False

    def __init__(
        self,
        mu: float = 0.5,
        p: float = 0.5,
        bias: bool = True,
        rate: float = 1.0,
        gamma: float = 0.001,
        delta: float = 1.0,
        k: int = 3,
        features: Tensor | np.ndarray | None = None,
        num_classes: int | None = None,
        seed: int = 0,
        **options: Unpack[LossOptions],
    ) -> None:
        super().__init__(**options)
        self.mu = check_number("smile", "mu", mu, low=0.0, high=1.0)
        self.p = check_number("smile", "p", p, low=0.0, high=1.0)
        self.rate = check_number("smile", "rate", rate, low=0.0)
        self.gamma = check_number("smile", "gamma", gamma, low=0.0)
        self.delta = check_number("smile", "delta", delta, low=0.0)
        if not isinstance(bias, bool):
            raise ValueError(f"loss 'smile': bias must be true or false, got {bias!r}")
        if bias and self.rate != 1.0:
            raise ValueError(f"loss 'smile': rate={rate!r} weights the unobserved entries only when bias is false (bias 0 in "
                             "the official code); with bias true they are weighted 1/(C-1): set bias false to use rate")
        self.bias = bias
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"loss 'smile': k must be a positive whole number of neighbours, got {k!r}")
        self.k = int(k)
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
            raise ValueError(f"loss 'smile' needs num_classes, the number of labels (at least 2), got {num_classes!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"loss 'smile': seed must be an integer, got {seed!r}")
        self.num_classes, self.seed = int(num_classes), int(seed)
        x = _as_features(features, self.k)
        init = torch.Generator().manual_seed(self.seed + INIT_SEED_OFFSET)
        c = self.num_classes
        self.encoder = SmileEncoder(x, c, self.k, init)
        #: the official code's encoder_z: hidden features of a row from its input and its D
        self.latent = _mlp(x.shape[1] + c, c, c, init)
        #: the official code's decoder: the row's input back from its D and hidden features
        self.reconstruct = _mlp(2 * c, x.shape[1], x.shape[1], init)
        self._draws: torch.Generator | None = None
        self._draw_state: Tensor | None = None
        self._group: list[SPMLLoss] | None = None  # a batched group's losses (all SMILE's), this one first
        #: the sampler of the Beta draws (None: this loss's generator); the side-by-side tool sets it
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

    def join_group(self, members: list[SPMLLoss] | None) -> None:
        """Draw run r's Beta samples with ``members[r]``'s generator while R runs train as one group."""
        self._group = None if members is None else list(members)

    def _draw(self, concentration: Tensor) -> Tensor:
        """Dirichlet draws of ``[..., 2]`` concentrations: with a leading run dimension in a batched
        group, row r from run r's generator, as that run would draw alone; else from this loss's."""
        if self._group is None or concentration.dim() < 4:
            return torch._sample_dirichlet(concentration, generator=self._generator(concentration.device))
        return torch.stack([torch._sample_dirichlet(c, generator=m._generator(c.device))
                            for c, m in zip(concentration, self._group, strict=True)])

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The enhancement networks at ``lr``, without weight decay (the official code has none)."""
        params = [*self.encoder.parameters(), *self.latent.parameters(), *self.reconstruct.parameters()]
        return [{"params": params, "lr": lr, "weight_decay": 0.0, "name": "smile"}]

    def extra_state(self) -> dict[str, Any]:
        if self._draws is not None:
            return {"draws": self._draws.get_state()}
        return {} if self._draw_state is None else {"draws": self._draw_state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        unknown = set(state) - {"draws"}
        if unknown:
            raise ValueError(f"loss 'smile' keeps only its draws' generator, but the checkpoint holds {sorted(unknown)}; "
                             "was it made with a different loss?")
        if "draws" in state:
            self._draws, self._draw_state = None, state["draws"].cpu()

    def transfer_from(self, other: SPMLLoss) -> None:
        """Start from ``other``'s networks and draws (LinearInit: phase 1 hands them to phase 2)."""
        if not isinstance(other, SmileLoss):
            raise TypeError(f"loss 'smile' can only take its networks from another 'smile' loss, got {other.name!r}")
        self.load_state_dict(other.state_dict())
        self.load_extra_state(other.extra_state())

    def distributions(self) -> Tensor:
        """``D`` of every training row, ``[num_train, C]`` (probabilities)."""
        return torch.sigmoid(self.encoder())

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        if ctx.index is None:
            raise ValueError("loss 'smile' needs index=<long tensor [batch] of training-row ids> to find the batch's "
                             "rows in its graph; pass the batch's dataset indices")
        parts = self.terms(logits, labels, ctx.index)
        return parts.classifier + parts.enhancement.to(parts.classifier.device)

    def terms(self, logits: Tensor, labels: Tensor, index: Tensor) -> SmileTerms:
        """One step's intermediate values and its two losses (their sum is the loss)."""
        if logits.dim() not in (2, 3) or tuple(index.shape) != tuple(logits.shape[:-1]):
            raise ValueError(f"loss 'smile' takes logits [batch, classes] (or [runs, batch, classes] for a batched "
                             f"group) and one id per row; got logits {tuple(logits.shape)} and index "
                             f"{tuple(index.shape)}")
        if logits.shape[-1] != self.num_classes:
            raise ValueError(f"loss 'smile': logits have {logits.shape[-1]} classes but its networks were built for "
                             f"{self.num_classes}")
        index = index.to(self.encoder.features.device)
        if self.validate_args and index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.num_train):
            raise ValueError(f"loss 'smile': index values must lie in [0, {self.num_train}); got range "
                             f"[{int(index.min())}, {int(index.max())}]")
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
