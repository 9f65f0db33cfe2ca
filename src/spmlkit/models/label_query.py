"""A label-query transformer head: one embedding per class of every image (the LAC code's model).

LAC's contrastive term needs *label-wise* embeddings, one vector per (image, class), which a
pooled feature and a linear layer do not have. The official LAC code (docs/methods.md, "lac")
builds them the way Query2Label does, and :class:`LabelQueryNet` is that network:

* the backbone's last feature map ``[B, d, h, w]`` (d = its channels; no input projection) plus a
  fixed sine position encoding (:func:`sine_positions`);
* ``encoder_layers`` transformer encoder layers over the h·w positions (post-norm: attention with
  the positions added to queries and keys, then a ReLU feed-forward of width ``ffn``);
* ``decoder_layers`` decoder layers in which C learned label queries attend to the encoded map
  (cross-attention only: the code removes the decoder's self-attention), then a LayerNorm;
* the classifier: one linear unit per class on its own query's output, ``z_c = w_c · h_c + b_c``;
* the projector (LAC only): ``normalize(W2 relu(W1 h_c + b1) + b2)``, ``embed_dim`` wide.

Sequences are laid out position-first (``[h·w, B, d]``), as ``nn.MultiheadAttention`` takes them by
default and the code feeds them: dropout draws its masks in that layout, so the same seed gives the
same masks (tools/lac_one_step.py compares one step with the code's).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .head import backbone_and_head_groups
from .output import ModelOutput, SPMLModel

__all__ = ["LabelQueryHead", "LabelQueryNet", "sine_positions"]


def sine_positions(height: int, width: int, dim: int, *, temperature: float = 10000.0) -> torch.Tensor:
    """The fixed 2-D sine position encoding ``[dim, height, width]`` (DETR's, normalised).

    Half of the channels encode the row, half the column: with ``y = row / height · 2π`` (rows
    counted from 1, so the last is 2π) and ``ω_k = temperature^(2⌊k/2⌋ / (dim/2))``, channel k of
    the row half is ``sin(y / ω_k)`` for even k and ``cos(y / ω_k)`` for odd k; the column half
    likewise. The code divides by ``height + 1e-6``; so does this.
    """
    if dim % 2:
        raise ValueError(f"the position encoding needs an even width, got {dim}")
    half = dim // 2
    rows = torch.arange(1, height + 1, dtype=torch.float32).view(height, 1).expand(height, width)
    cols = torch.arange(1, width + 1, dtype=torch.float32).view(1, width).expand(height, width)
    rows = rows / (height + 1e-6) * (2 * math.pi)
    cols = cols / (width + 1e-6) * (2 * math.pi)
    k = torch.arange(half, dtype=torch.float32)
    omega = temperature ** (2 * torch.div(k, 2, rounding_mode="floor") / half)

    def encode(coord: torch.Tensor) -> torch.Tensor:
        angle = coord[:, :, None] / omega
        return torch.stack((angle[:, :, 0::2].sin(), angle[:, :, 1::2].cos()), dim=3).flatten(2)

    return torch.cat((encode(rows), encode(cols)), dim=2).permute(2, 0, 1)


class _EncoderLayer(nn.Module):
    """Post-norm self-attention layer: ``x ← LN(x + attn(x+pos, x+pos, x))``, ``x ← LN(x + FFN(x))``."""

    def __init__(self, dim: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, dropout=dropout)
        self.linear1, self.linear2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout, self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = x + pos
        x = self.norm1(x + self.dropout1(self.self_attn(q, q, value=x)[0]))
        return self.norm2(x + self.dropout2(self.linear2(self.dropout(F.relu(self.linear1(x))))))


class _DecoderLayer(nn.Module):
    """Cross-attention layer without self-attention: the queries read the encoded map."""

    def __init__(self, dim: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.multihead_attn = nn.MultiheadAttention(dim, heads, dropout=dropout)
        self.linear1, self.linear2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, t: torch.Tensor, memory: torch.Tensor, pos: torch.Tensor, query_pos: torch.Tensor
                ) -> torch.Tensor:
        read = self.multihead_attn(query=t + query_pos, key=memory + pos, value=memory)[0]
        t = self.norm2(t + self.dropout2(read))
        return self.norm3(t + self.dropout3(self.linear2(self.dropout(F.relu(self.linear1(t))))))


class LabelQueryHead(nn.Module):
    """Feature map ``[B, d, h, w]`` -> logits ``[B, C]`` and label-wise outputs ``[B, C, d]``.

    ``ffn`` 8192, 4 heads, 1 encoder and 2 decoder layers and dropout 0.1 are the code's values
    (its feed-forward width does not scale with d). Initialisation as the code's: Xavier-uniform
    for every matrix of the transformer, N(0, 1) queries, U(±1/√d) for the classifier's weights
    and biases, PyTorch's defaults for the projector.
    """

    def __init__(self, dim: int, num_classes: int, *, heads: int = 4, encoder_layers: int = 1,
                 decoder_layers: int = 2, ffn: int = 8192, dropout: float = 0.1, embed_dim: int | None = None):
        super().__init__()
        if dim % heads or dim % 2:
            raise ValueError(f"the label-query head needs backbone channels ({dim}) divisible by its {heads} "
                             "heads and by 2 (the position encoding); use another backbone")
        self.encoder = nn.ModuleList(_EncoderLayer(dim, heads, ffn, dropout) for _ in range(encoder_layers))
        self.decoder = nn.ModuleList(_DecoderLayer(dim, heads, ffn, dropout) for _ in range(decoder_layers))
        for layer in (*self.encoder, *self.decoder):
            for p in layer.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
        self.decoder_norm = nn.LayerNorm(dim)
        self.queries = nn.Embedding(num_classes, dim)
        bound = 1.0 / math.sqrt(dim)
        self.weight = nn.Parameter(torch.empty(num_classes, dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_classes).uniform_(-bound, bound))
        self.projector = None if embed_dim is None else nn.Sequential(
            nn.Linear(dim, dim), nn.ReLU(inplace=True), nn.Linear(dim, embed_dim))
        self.dim, self.num_classes = dim, num_classes
        self._positions: dict[tuple[int, int, Any], torch.Tensor] = {}

    def _pos(self, height: int, width: int, like: torch.Tensor) -> torch.Tensor:
        key = (height, width, like.device)
        if key not in self._positions:
            self._positions[key] = sine_positions(height, width, self.dim).to(like.device)
        return self._positions[key]

    def outputs(self, fmap: torch.Tensor) -> torch.Tensor:
        """The decoder's output per class, ``[B, C, d]``."""
        b, _, h, w = fmap.shape
        memory = fmap.flatten(2).permute(2, 0, 1)  # [h·w, B, d]
        pos = self._pos(h, w, fmap).to(fmap.dtype).flatten(1).T.unsqueeze(1)  # [h·w, 1, d]
        for layer in self.encoder:
            memory = layer(memory, pos)
        query_pos = self.queries.weight.unsqueeze(1).repeat(1, b, 1)  # [C, B, d]
        t = torch.zeros_like(query_pos)
        for layer in self.decoder:
            t = layer(t, memory, pos, query_pos)
        return self.decoder_norm(t).transpose(0, 1)

    def classify(self, outputs: torch.Tensor) -> torch.Tensor:
        return (self.weight * outputs).sum(-1) + self.bias

    def embed(self, outputs: torch.Tensor) -> torch.Tensor:
        """Unit-length label-wise embeddings ``[B, C, embed_dim]`` (the projector's)."""
        if self.projector is None:
            raise ValueError("this label-query head has no projector (embed_dim is None)")
        return F.normalize(self.projector(outputs), dim=-1)

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        return self.classify(self.outputs(fmap))


class LabelQueryNet(SPMLModel):
    """``backbone -> LabelQueryHead``: logits and, with a projector, label-wise embeddings.

    It offers what the trainer asks of an image model (:meth:`param_groups`, ``batchable``,
    ``backbone`` and ``head`` for a recipe's ``train_only``); it has no pooled features, so
    LinearInit is refused for it. With a projector (``embed_dim``), a training-mode forward also
    returns the unit label-wise embeddings of its one pass (``outputs``: LAC's contrast reads them);
    in eval mode it computes the logits alone.
    """

    batchable = False

    def __init__(self, backbone: nn.Module, dim: int, num_classes: int, **head: Any) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = LabelQueryHead(dim, num_classes, **head)
        self.feat_dim, self.num_classes = dim, num_classes
        self.outputs = frozenset() if self.head.projector is None else frozenset({"embeddings"})

    def forward(self, x: torch.Tensor) -> ModelOutput:
        out = self.head.outputs(self.backbone(x))
        logits = self.head.classify(out)
        if self.head.projector is None or not self.training:
            return ModelOutput(logits)
        return ModelOutput(logits, embeddings=self.head.embed(out))

    def param_groups(self, lr: float, head_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """Backbone at ``lr``, head at ``lr * head_lr_mult``; trainable parameters only."""
        return backbone_and_head_groups(self.backbone, self.head, lr, head_lr_mult)
