"""The SPML classifier: backbone -> global average pooling -> one linear layer.

This is the model of every SPML paper built on Cole et al. (CVPR 2021; docs/protocol.md, "Training protocols"):
``logits = W · GAP(backbone(x)) + b`` with ``W`` of shape ``[C, feat_dim]``. The base and EM
code take the ResNet children up to ``avgpool`` and squeeze; LL and GR apply an explicit GAP
to the layer-4 map -- functionally identical, and what :class:`SPMLNet` does.

Two training phases of the papers are supported directly:

* ROLE+LinearInit (docs/methods.md, "role") first trains only the linear layer on frozen ImageNet features:
  :meth:`SPMLNet.freeze_backbone` freezes the backbone *and keeps it in eval mode*, so its
  BatchNorm statistics stay those of the pretrained network and :meth:`SPMLNet.features` can
  be cached once;
* LL and GR train the head with a 10x learning rate: :meth:`SPMLNet.param_groups`.

With ``cam_boost=alpha`` the head is BoostLU's instead (:mod:`spmlkit.models.cam`): the linear
layer is applied at every location of the feature map, the positive scores are multiplied by
``alpha``, and the boosted maps are averaged. The parameters are the same ``nn.Linear``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..stacked import affine
from .backbones import create_backbone
from .cam import boosted_logits
from .lgconv import convert_lgconv
from .output import ModelOutput, SPMLModel

__all__ = ["FeatureHead", "SPMLNet", "backbone_and_head_groups", "build_model", "global_average_pool"]


def global_average_pool(features: torch.Tensor) -> torch.Tensor:
    """Average a backbone output over its spatial (or token) positions -> ``[B, C]``.

    ``[B, C, h, w]`` maps are averaged over ``h, w``; ``[B, N, C]`` token sequences (timm
    transformers) over ``N``; ``[B, C]`` vectors pass through.
    """
    if features.ndim == 4:
        return features.mean(dim=(2, 3))
    if features.ndim == 3:
        return features.mean(dim=1)
    if features.ndim == 2:
        return features
    raise ValueError(
        f"backbone output must be [B, C, h, w], [B, N, C] or [B, C]; got shape "
        f"{tuple(features.shape)}"
    )


class SPMLNet(SPMLModel):
    """``logits = head(GAP(backbone(x)))`` with ``head = Linear(feat_dim, num_classes)``.

    The linear layer uses PyTorch's default initialisation, as the papers' code does.

    Args:
        backbone: module mapping ``[B, 3, H, W]`` to ``[B, feat_dim, h, w]`` (or tokens / vectors,
            see :func:`global_average_pool`).
        feat_dim: channels of the backbone output.
        num_classes: number of labels ``C``.
        cam_boost: None (the plain head), or BoostLU's ``alpha``: the logits are then
            :func:`~spmlkit.models.cam.boosted_logits` of the backbone's map, which must be
            ``[B, feat_dim, h, w]``.
    """

    #: whether R copies of this model may train as one batched model (docs/architecture.md, "Many
    #: runs at once"): no -- batch normalisation keeps running statistics that each copy would
    #: update in place, and an image run's input pipeline and device are its own
    batchable = False

    def __init__(self, backbone: nn.Module, feat_dim: int, num_classes: int, cam_boost: float | None = None) -> None:
        super().__init__()
        for label, value in (("feat_dim", feat_dim), ("num_classes", num_classes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if cam_boost is not None and (isinstance(cam_boost, bool) or not isinstance(cam_boost, (int, float))
                                      or not (cam_boost > 0 and math.isfinite(cam_boost))):
            raise ValueError(f"cam_boost (BoostLU's alpha) must be a positive number, got {cam_boost!r}")
        #: BoostLU's alpha, or None for the plain head (module docstring)
        self.cam_boost = None if cam_boost is None else float(cam_boost)
        self.backbone = backbone
        self.head = nn.Linear(feat_dim, num_classes)
        self.feat_dim = feat_dim
        self.num_classes = num_classes
        self._backbone_frozen = False

    @property
    def backbone_frozen(self) -> bool:
        """Whether :meth:`freeze_backbone` is in effect."""
        return self._backbone_frozen

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled backbone features ``[B, feat_dim]`` (what LinearInit caches). With ``cam_boost``
        the logits are not ``head(features(x))``: BoostLU acts before the pooling."""
        if x.ndim != 4:
            raise ValueError(f"expected images [B, channels, H, W], got shape {tuple(x.shape)}")
        pooled = global_average_pool(self.backbone(x))
        if pooled.shape[1] != self.feat_dim:
            raise ValueError(
                f"backbone produced {pooled.shape[1]} feature channels but the head expects "
                f"feat_dim={self.feat_dim}; pass the channel count returned by create_backbone"
            )
        return pooled

    def forward(self, x: torch.Tensor) -> ModelOutput:
        """Logits ``[B, num_classes]``: of the pooled features, or with ``cam_boost`` of the boosted
        class activation maps."""
        if self.cam_boost is None:
            return ModelOutput(self.head(self.features(x)))
        if x.ndim != 4:
            raise ValueError(f"expected images [B, channels, H, W], got shape {tuple(x.shape)}")
        return ModelOutput(boosted_logits(self.backbone(x), self.head.weight, self.head.bias, self.cam_boost))

    def freeze_backbone(self, flag: bool = True) -> SPMLNet:
        """Freeze (``flag=True``) or unfreeze the backbone.

        Frozen: no backbone parameter requires grad and the backbone stays in eval mode even
        under ``model.train()``, so BatchNorm uses (and keeps) its running statistics and
        dropout is off -- the features equal the cached ImageNet features of LinearInit's
        phase 1 (docs/methods.md, "role"). Unfreezing restores ``requires_grad`` on every backbone
        parameter and the model's current train/eval mode.
        """
        self._backbone_frozen = bool(flag)
        for param in self.backbone.parameters():
            param.requires_grad_(not self._backbone_frozen)
        self.backbone.train(self.training and not self._backbone_frozen)
        return self

    def train(self, mode: bool = True) -> SPMLNet:
        super().train(mode)
        if self._backbone_frozen:
            self.backbone.eval()
        return self

    def param_groups(self, lr: float, head_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """Optimiser parameter groups: backbone at ``lr``, head at ``lr * head_lr_mult``.

        Only parameters that require grad are listed (a frozen backbone contributes no group),
        so build a fresh optimiser after :meth:`freeze_backbone` changes, as LinearInit's
        phase 2 does. Each group carries a ``"name"`` (``"backbone"`` / ``"head"``).
        """
        return backbone_and_head_groups(self.backbone, self.head, lr, head_lr_mult)


def backbone_and_head_groups(backbone: nn.Module, head: nn.Module, lr: float, head_lr_mult: float = 1.0
                             ) -> list[dict[str, Any]]:
    """Optimiser groups of an image model: the backbone at ``lr``, everything after it at ``lr *
    head_lr_mult`` (named ``"backbone"`` and ``"head"``), trainable parameters only; a part with none
    gives no group. Every image model's ``param_groups`` (:class:`SPMLNet`, the label-query and the
    bottleneck networks) is this."""
    for label, value in (("lr", lr), ("head_lr_mult", head_lr_mult)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{label} must be a positive number, got {value!r}")
    groups = []
    for name, module, group_lr in (("backbone", backbone, float(lr)), ("head", head, float(lr) * float(head_lr_mult))):
        params = [p for p in module.parameters() if p.requires_grad]
        if params:
            groups.append({"params": params, "lr": group_lr, "name": name})
    return groups


def build_model(
    backbone: str,
    num_classes: int,
    *,
    pretrained: bool = False,
    lgconv: bool = False,
    lgconv_options: Mapping[str, Any] | None = None,
    cam_boost: float | None = None,
) -> SPMLNet:
    """Backbone by name (:func:`~spmlkit.models.backbones.create_backbone`) + GAP + linear head.

    ``lgconv=True`` converts every eligible 3x3 convolution of the backbone to PU-MLC's
    local-global convolution (:func:`~spmlkit.models.lgconv.convert_lgconv`, options from
    ``lgconv_options``) before the head is attached, so the head is never touched.
    ``cam_boost=alpha``: BoostLU's head (:class:`SPMLNet`).
    """
    if lgconv_options and not lgconv:
        raise ValueError("lgconv_options given but lgconv=False; set lgconv=True to use them")
    body, feat_dim = create_backbone(backbone, pretrained=pretrained)
    if lgconv:
        body = convert_lgconv(body, **dict(lgconv_options or {}))
    return SPMLNet(body, feat_dim, num_classes, cam_boost=cam_boost)


class FeatureHead(SPMLModel):
    """The model of a feature run: a linear layer, or a one-hidden-layer MLP, on fixed features.

    It offers the same :meth:`param_groups` as :class:`SPMLNet`, so the trainer builds the
    optimiser of a feature run and of an image run the same way.
    """

    def __init__(self, in_dim: int, num_classes: int, kind: str = "linear", hidden: int = 256,
                 dropout: float = 0.0, *, layer: nn.Linear | None = None) -> None:
        super().__init__()
        if layer is not None:  # LinearInit trains an image model's own linear layer on its pooled features
            if kind != "linear" or (layer.in_features, layer.out_features) != (in_dim, num_classes):
                raise ValueError(f"a given layer makes a linear head of {in_dim} -> {num_classes}, got {layer}")
            self.net: nn.Module = layer
        elif kind == "linear":
            self.net = nn.Linear(in_dim, num_classes)
        elif kind == "mlp":
            self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                     nn.Linear(hidden, num_classes))
        else:
            raise ValueError(f"head must be 'linear' or 'mlp', got {kind!r}")
        self.kind = kind
        self.batchable = self.batchable_with(kind, dropout)

    @staticmethod
    def batchable_with(kind: str, dropout: float) -> bool:
        """Whether R copies of such a head may train as one batched model (docs/architecture.md,
        "Many runs at once"): yes, unless dropout draws its masks from the global random stream,
        which R batched copies cannot consume the way R solo runs would."""
        return kind == "linear" or dropout == 0

    def forward(self, x: torch.Tensor) -> ModelOutput:
        """Logits ``[B, C]`` of features ``[B, D]``. With the weights of R heads stacked in
        (``[R, C, D]``, in place of its own; docs/architecture.md, "Many runs at once") it
        computes all R heads at once: ``[R, B, D]`` (or shared ``[B, D]``) to ``[R, B, C]``."""
        if self.kind == "linear":
            return ModelOutput(affine(x, self.net.weight, self.net.bias))
        first, activation, dropout, last = self.net
        return ModelOutput(affine(dropout(activation(affine(x, first.weight, first.bias))), last.weight, last.bias))

    def param_groups(self, lr: float, head_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """One group: every parameter is part of the head (``head_lr_mult`` does not apply)."""
        return [{"params": list(self.parameters()), "lr": lr, "name": "head"}]
