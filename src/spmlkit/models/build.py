"""Building a model from settings: the image network and the network of a feature run.

One place decides which classes a run's settings make (``SPMLNet``, ``BottleneckNet``,
``LabelQueryNet``; ``FeatureHead`` or ``GaussianBottleneck``), so that training, ``spmlkit
predict`` and export rebuild the same network from the same settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from .backbones import create_backbone
from .bottleneck import BottleneckNet, GaussianBottleneck
from .head import FeatureHead, SPMLNet
from .label_query import LabelQueryNet
from .lgconv import convert_lgconv

__all__ = ["build_model", "feature_model"]


def build_model(
    backbone: str,
    num_classes: int,
    *,
    pretrained: bool = False,
    lgconv: bool = False,
    lgconv_options: Mapping[str, Any] | None = None,
    bottleneck: int = 0,
    bottleneck_samples: int = 10,
    label_queries: bool = False,
) -> nn.Module:
    """Backbone by name (:func:`~spmlkit.models.backbones.create_backbone`) + GAP + linear head.

    ``lgconv=True`` converts every eligible 3x3 convolution of the backbone to PU-MLC's
    local-global convolution (:func:`~spmlkit.models.lgconv.convert_lgconv`, options from
    ``lgconv_options``) before the head is attached, so the head is never touched.
    ``bottleneck`` > 0 puts MIME's Gaussian bottleneck of that width before the classifier
    (:class:`~spmlkit.models.bottleneck.BottleneckNet`, ``bottleneck_samples`` draws a step), and
    ``label_queries`` the label-query transformer between the backbone and the classifier
    (docs/methods.md, "mime").
    """
    if lgconv_options and not lgconv:
        raise ValueError("lgconv_options given but lgconv=False; set lgconv=True to use them")
    body, feat_dim = create_backbone(backbone, pretrained=pretrained)
    if lgconv:
        body = convert_lgconv(body, **dict(lgconv_options or {}))
    if bottleneck:
        return BottleneckNet(body, feat_dim, num_classes, bottleneck, samples=bottleneck_samples,
                             label_queries=label_queries)
    if label_queries:
        return LabelQueryNet(body, feat_dim, num_classes)
    return SPMLNet(body, feat_dim, num_classes)


def feature_model(in_dim: int, num_classes: int, *, head: str = "linear", hidden: int = 256, dropout: float = 0.0,
                  bottleneck: int = 0, bottleneck_samples: int = 10) -> nn.Module:
    """The model of a feature run: :class:`FeatureHead`, or with ``bottleneck`` > 0 MIME's Gaussian
    bottleneck on the features (:class:`~spmlkit.models.bottleneck.GaussianBottleneck`), which takes the
    place of the head (``head`` must then be "linear", the default)."""
    if bottleneck:
        if head != "linear":
            raise ValueError(f"a bottleneck is the whole network on the features; head {head!r} would be a second "
                             "one: leave head linear (the default) or set bottleneck 0")
        return GaussianBottleneck(in_dim, num_classes, bottleneck, samples=bottleneck_samples)
    return FeatureHead(in_dim, num_classes, head, hidden, dropout)
