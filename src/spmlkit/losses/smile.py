"""SMILE's formulas: the classifier's loss, the label-enhancement loss and their pieces.

Xu, Qiao, Lv, Geng, Zhang, "One Positive Label is Sufficient: Single-Positive Multi-Label Learning
with Label Enhancement", NeurIPS 2022 (docs/methods.md, "smile").

Beside the classifier, SMILE trains a label-enhancement model: a graph convolutional network over
the k-nearest-neighbour graph of the training rows gives every row a label distribution ``D`` (one
probability per class), held close to the observed labels, to the row's reconstruction and to a
Beta variational posterior. The classifier then learns from soft targets that mix ``D`` with the
observed labels. This module holds the two losses as pure functions of their inputs; the networks,
their draws and their optimiser group are the method's (:mod:`spmlkit.methods.smile`).

The official code trains the two models with two optimisers on two losses; the method adds the
two losses and takes one backward pass and one optimiser step. No gradient crosses between them
(the classifier's targets are detached, the enhancement loss does not read the classifier), and
Adam updates every parameter from its own state, so the result is the same (docs/methods.md,
"smile", where the differences that remain are listed).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["SmileTerms", "beta_rsample", "beta_kl_term", "smile_classifier_loss", "smile_enhancement_loss", "neg_log"]

#: added inside every logarithm of the official code: -log(x + 1e-5) bounds each term at about 11.5
LOG_EPSILON = 1e-5
#: added to both Beta concentrations before sampling, so that neither is 0 when D is 0 or 1
BETA_EPSILON = 1e-5
#: added to both concentrations inside the KL term
KL_EPSILON = 1e-6


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
    """What one step computes (:meth:`spmlkit.methods.smile.SMILE.terms`): the batch's label distributions ``D``, the
    Beta draw, the reconstructed inputs and the batch's adjacency, then the two losses."""

    distribution: Tensor
    draw: Tensor
    reconstructed: Tensor
    adjacency: Tensor
    classifier: Tensor
    enhancement: Tensor
