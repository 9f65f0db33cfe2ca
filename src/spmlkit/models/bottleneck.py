"""MIME's model part: a Gaussian bottleneck between the features and the classifier.

MIME (Liu, Xu, Lv, Geng, "Revisiting Pseudo-Label for Single-Positive Multi-Label Learning", ICML
2023; docs/methods.md, "mime") does not classify its features directly. Each class gets a Gaussian
latent code computed from the features, the classifier reads a sample of that code, and the loss
pulls every code toward N(0, I) with a small weight (the KL term of a variational information
bottleneck). For a row and class c, with ``h`` the features the class sees and ``w`` the width:

* ``s = A2 relu(A1 h + a1) + a2``, two layers, ``2w`` outputs (``A1`` keeps the input width);
* ``μ = s[:w]``, ``σ = exp(clip(s[w:] / 2, -6, 6))`` (the second half is a log-variance);
* ``z = μ + σ ⊙ ε̄`` where ``ε̄`` is the mean of ``samples`` standard normal draws (the code draws
  10 codes and averages them, which is the same as one draw of ``N(0, I / samples)``);
* ``logit_c = v_c · z_c + b_c`` (one weight vector per class).

``h`` is one vector per class (the label-query transformer's outputs, :class:`BottleneckNet` with
``label_queries``; MIME's code), or one vector shared by every class (pooled image features, or a
feature run's row). Shared features give one code per row, ``z = μ + σ ⊙ ε̄`` of width ``w``, and
the classifier is a linear layer on it, ``logit_c = v_c · z + b_c`` [ours: the code always has one
input per class; the per-class formula on C equal inputs would draw C codes of one Gaussian, which
costs C times the draws and products for the same distribution of each class's code].

In eval mode ``z = μ`` [ours: the code samples there too, so its predictions, its pseudo-labels and
its reported mAP carry sampling noise; spmlkit's predictions are deterministic].

Randomness is drawn outside and passed in: :meth:`GaussianBottleneck.draw_noise` draws a step's
``ε̄`` from the run's own generator, and ``forward(..., noise=ε̄)`` uses it, so R runs trained as one
batched group draw exactly what their solo runs draw (docs/architecture.md, "Many runs at once").
A training-mode forward without ``noise`` draws from the global generator.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .backbones import create_backbone
from ..stacked import affine
from .head import backbone_and_head_groups, global_average_pool
from .label_query import LabelQueryHead
from .output import ModelOutput, SPMLModel

__all__ = ["BottleneckNet", "GaussianBottleneck", "Latent", "build_bottleneck_net"]

#: a forward's latent codes ``(μ, σ)``, each ``[..., B, C, w]`` (or ``[..., B, w]``: one code per row; what
#: MIME's KL term reads)
Latent = tuple[torch.Tensor, torch.Tensor]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


class GaussianBottleneck(SPMLModel):
    """Features ``h`` -> Gaussian codes -> logits (module docstring).

    ``h`` is ``[..., B, C, in_dim]`` with ``per_class`` (codes ``[..., B, C, w]``) and ``[..., B,
    in_dim]`` without (one code per row, ``[..., B, w]``); leading dimensions are independent
    problems, so that R copies with stacked weights (``[R, ...]`` in place of each parameter) train
    as one batched model. On its own it is the model of a feature run (``batchable``); in
    :class:`BottleneckNet` it is the classifier of an image run.

    Initialisation as the MIME code's: PyTorch's defaults for the two layers, U(±1/√w) for the
    classifier's weights and biases (``classifier``, one row per class).
    """

    batchable = True
    outputs = frozenset({"latent"})

    def __init__(self, in_dim: int, num_classes: int, width: int, *, samples: int = 10, per_class: bool = False
                 ) -> None:
        super().__init__()
        for name, value in (("in_dim", in_dim), ("num_classes", num_classes), ("bottleneck width", width),
                            ("bottleneck_samples", samples)):
            _positive_int(name, value)
        self.hidden = nn.Linear(in_dim, in_dim)
        self.stats = nn.Linear(in_dim, 2 * width)
        # one weight vector and bias per class; PyTorch's default initialisation of a linear layer draws
        # both from U(±1/√w), the code's initialisation of its grouped linear layer. Registered last, so a
        # checkpoint's last matrix is the classifier (spmlkit.training.run_dir.num_outputs)
        self.classifier = nn.Linear(width, num_classes)
        self.in_dim, self.num_classes, self.width = in_dim, num_classes, width
        self.samples, self.per_class = samples, per_class

    def draw_noise(self, generator: torch.Generator, batch: int) -> torch.Tensor:
        """A step's ``ε̄`` (``[batch, C, w]``, or ``[batch, w]`` for shared features): the mean of
        ``samples`` standard normal draws, drawn as one normal of variance ``1 / samples`` from
        ``generator`` (the run's own, on the CPU)."""
        shape = (batch, self.num_classes, self.width) if self.per_class else (batch, self.width)
        return torch.randn(shape, generator=generator) / math.sqrt(self.samples)

    def latent(self, h: torch.Tensor) -> Latent:
        """``(μ, σ)`` of features ``h``: ``[..., B, C, w]``, or ``[..., B, w]`` for shared features."""
        s = affine(torch.relu(affine(h, self.hidden.weight, self.hidden.bias)), self.stats.weight, self.stats.bias)
        mu = s[..., :self.width]
        std = torch.exp(torch.clamp(s[..., self.width:] / 2, min=-6, max=6))
        return mu, std

    def classify(self, z: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., B, C]`` of codes ``z``: ``v_c · z_c + b_c`` per class (``[..., B, C, w]``, the
        code's grouped linear layer), or ``v_c · z + b_c`` for one code per row (``[..., B, w]``)."""
        weight, bias = self.classifier.weight, self.classifier.bias
        if self.per_class:
            return (weight.unsqueeze(-3) * z).sum(-1) + bias.unsqueeze(-2)
        return affine(z, weight, bias)

    def sample(self, mu: torch.Tensor, std: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """The code a training step classifies. ``noise`` is ``ε̄`` (the shape of ``μ``) or the code's
        ``samples`` separate draws stacked first (``[samples, *μ.shape]``), averaged as the code averages
        its codes, ``mean_k(μ + ε_k σ)``; None draws ``ε̄`` from the global generator."""
        if noise is None:
            noise = torch.randn(mu.shape, dtype=mu.dtype, device=mu.device) / math.sqrt(self.samples)
        if noise.dim() == mu.dim() + 1:
            return (mu + noise * std).mean(dim=0)
        if noise.shape != mu.shape:
            raise ValueError(f"bottleneck noise of shape {tuple(noise.shape)} does not fit codes of shape "
                             f"{tuple(mu.shape)}")
        return mu + noise * std

    def forward(self, h: torch.Tensor, *, noise: torch.Tensor | None = None) -> ModelOutput:
        """Logits ``[..., B, C]`` and the codes ``(μ, σ)`` (``latent``). Training mode samples the code
        (``noise``: :meth:`sample`); eval mode classifies ``μ``."""
        mu, std = self.latent(h)
        z = self.sample(mu, std, noise) if self.training else mu
        return ModelOutput(self.classify(z), latent=(mu, std))

    def param_groups(self, lr: float, head_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """One group: on features the bottleneck is the whole model (``head_lr_mult`` does not apply)."""
        return [{"params": list(self.parameters()), "lr": lr, "name": "head"}]


class BottleneckNet(SPMLModel):
    """``backbone -> (label queries | global average pooling) -> GaussianBottleneck``: MIME's image model.

    With ``label_queries`` the backbone's feature map goes through the label-query transformer of
    the LAC and MIME code (:class:`~spmlkit.models.label_query.LabelQueryHead`: one output per class)
    and each class's output is its bottleneck input, as MIME's code does; without, the pooled
    features of the base protocol's network feed every class. ``head`` holds everything after the
    backbone, so ``head_lr_mult`` and ``train_only: [head]`` reach the transformer, the queries and
    the bottleneck together (the code trains them all at 10x the backbone's lr).
    """

    batchable = False
    outputs = frozenset({"latent"})

    def __init__(self, backbone: nn.Module, feat_dim: int, num_classes: int, width: int, *, samples: int = 10,
                 label_queries: bool = False) -> None:
        super().__init__()
        self.backbone = backbone
        parts: dict[str, nn.Module] = {}
        if label_queries:
            queries = LabelQueryHead(feat_dim, num_classes)
            # the bottleneck classifies; the query head's own linear classifier would never train
            del queries.weight, queries.bias
            parts["queries"] = queries
        parts["bottleneck"] = GaussianBottleneck(feat_dim, num_classes, width, samples=samples,
                                                 per_class=label_queries)
        self.head = nn.ModuleDict(parts)
        self.feat_dim, self.num_classes, self.label_queries = feat_dim, num_classes, label_queries

    @property
    def bottleneck(self) -> GaussianBottleneck:
        return self.head["bottleneck"]  # type: ignore[return-value]

    def draw_noise(self, generator: torch.Generator, batch: int) -> torch.Tensor:
        return self.bottleneck.draw_noise(generator, batch)

    def forward(self, x: torch.Tensor, *, noise: torch.Tensor | None = None) -> ModelOutput:
        fmap = self.backbone(x)
        h = self.head["queries"].outputs(fmap) if self.label_queries else global_average_pool(fmap)
        return self.bottleneck(h, noise=noise)

    def param_groups(self, lr: float, head_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """Backbone at ``lr``, head at ``lr * head_lr_mult``; trainable parameters only."""
        return backbone_and_head_groups(self.backbone, self.head, lr, head_lr_mult)


def build_bottleneck_net(backbone: str, num_classes: int, width: int, *, samples: int = 10, label_queries: bool = False,
                         pretrained: bool = False) -> BottleneckNet:
    """Backbone by name (:func:`~spmlkit.models.backbones.create_backbone`) + :class:`BottleneckNet`:
    MIME's image model (with ``label_queries``, the label-query transformer before the bottleneck)."""
    body, feat_dim = create_backbone(backbone, pretrained=pretrained)
    return BottleneckNet(body, feat_dim, num_classes, width, samples=samples, label_queries=label_queries)
