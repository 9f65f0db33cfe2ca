"""Image backbones: torchvision / timm feature extractors and a small CPU network.

Every SPML paper (docs/protocol.md, "Training protocols") trains an ImageNet ResNet-50
(torchvision, weights ``IMAGENET1K_V1``) whose classifier is replaced by global average pooling and one linear
layer. :func:`create_backbone` builds the part *before* the pooling: a module mapping images
``[B, 3, H, W]`` to the last feature map, so the head (:class:`spmlkit.models.head.SPMLNet`)
owns the pooling and the same head works for every backbone.

Names have the form ``<source>:<model>``:

* ``torchvision:<model>`` -- ResNet family (``resnet18/34/50/101/152``, ``resnext*``,
  ``wide_resnet*``): the stem and ``layer1``-``layer4`` (``avgpool`` and ``fc`` stripped, the
  module names kept so torchvision state-dict keys still match). Also the ``.features`` trunk
  of ``vgg*``, ``densenet*`` (plus the final ReLU its ``forward`` applies), ``mobilenet_v2``,
  ``mobilenet_v3_*`` and ``efficientnet*``. For other architectures use their timm version.
* ``timm:<model>`` -- ``timm.create_model(model, pretrained=..., num_classes=0,
  global_pool="")``: the unpooled output, channels-first for convolutional networks (NHWC
  outputs such as Swin's are permuted to NCHW) and ``[B, tokens, dim]`` for transformers.
* ``small:cnn`` -- :class:`SmallResNet`, a compact from-scratch ResNet for the CPU demo on the
  32x32 digit mosaics (:mod:`spmlkit.data.digits_mosaic`). No pretrained weights exist.

Weights are downloaded (and cached by torchvision / timm) only when ``pretrained=True``. For
torchvision the default is ``IMAGENET1K_V1`` wherever a model has it -- the weights the papers
used (``resnet50(pretrained=True)``; newer V2 weights score higher and so do not reproduce the
published numbers) -- and the model's ``DEFAULT`` weights otherwise. timm picks its own default
pretrained tag for a name; pass ``timm:<model>.<tag>`` to choose one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["SMALL_MODELS", "SmallResNet", "create_backbone", "torchvision_weights"]

_EXAMPLES = (
    "torchvision:resnet50, torchvision:resnet101, torchvision:resnet18, "
    "timm:resnet50, timm:convnext_tiny, small:cnn"
)
_SYNTAX = "'<source>:<model>' with source one of 'torchvision', 'timm', 'small'"

#: widths of the four stages of each named small network
SMALL_MODELS: dict[str, tuple[int, int, int, int]] = {"cnn": (16, 32, 64, 128)}


def create_backbone(
    name: str, *, pretrained: bool = False, weights: str | None = None
) -> tuple[nn.Module, int]:
    """Build a feature extractor and return ``(module, feature_channels)``.

    The module maps ``[B, 3, H, W]`` images to an unpooled feature map ``[B, C, h, w]`` (or
    ``[B, tokens, C]`` for timm transformers); ``C`` is the second return value. Global
    average pooling is left to the head so that LgConv and feature caching see the same
    module and the spatial map stays available.

    Args:
        name: ``"torchvision:<model>"``, ``"timm:<model>"`` or ``"small:cnn"`` (module
            docstring).
        pretrained: load ImageNet weights (downloads on first use). Tests never set it.
        weights: torchvision only, a weights-enum member name such as ``"IMAGENET1K_V2"``
            overriding the V1 default; requires ``pretrained=True``.
    """
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(
            f"backbone name {name!r} has no source prefix; expected {_SYNTAX}, e.g. {_EXAMPLES}"
        )
    source, _, model = (part.strip() for part in name.partition(":"))
    if weights is not None and (source != "torchvision" or not pretrained):
        raise ValueError(
            f"weights={weights!r} is only meaningful for 'torchvision:' backbones with "
            f"pretrained=True (got {name!r}, pretrained={pretrained})"
        )
    if source == "torchvision":
        return _torchvision_backbone(model, pretrained=pretrained, weights=weights)
    if source == "timm":
        return _timm_backbone(model, pretrained=pretrained)
    if source == "small":
        return _small_backbone(model, pretrained=pretrained)
    raise ValueError(
        f"unknown backbone source {source!r} in {name!r}; expected {_SYNTAX}, e.g. {_EXAMPLES}"
    )


# --------------------------------------------------------------------------- torchvision


def _import_torchvision() -> Any:
    try:
        import torchvision
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "'torchvision:' backbones need torchvision; install it with "
            "`pip install torchvision` (matching your torch version)"
        ) from err
    return torchvision


def torchvision_weights(model: str, weights: str | None = None) -> Any:
    """The torchvision weights enum member used for ``model`` (nothing is downloaded).

    ``IMAGENET1K_V1`` when the model has it (the papers' weights, docs/protocol.md, "Training
    protocols"), else the model's ``DEFAULT``; ``weights`` names another member explicitly.
    """
    tv = _import_torchvision()
    try:
        enum = tv.models.get_model_weights(model)
    except (ValueError, KeyError) as err:
        raise ValueError(f"torchvision has no weights for model {model!r}") from err
    members = list(enum.__members__)
    choice = (
        weights
        if weights is not None
        else ("IMAGENET1K_V1" if "IMAGENET1K_V1" in members else "DEFAULT")
    )
    if choice not in members:
        raise ValueError(
            f"torchvision model {model!r} has no weights {choice!r}; available: {members}"
        )
    return enum[choice]


def _torchvision_backbone(
    model: str, *, pretrained: bool, weights: str | None
) -> tuple[nn.Module, int]:
    tv = _import_torchvision()
    known = tv.models.list_models(module=tv.models)
    if model not in known:
        raise ValueError(
            f"unknown torchvision classification model {model!r}; examples: "
            f"{[m for m in known if m.startswith('resnet')]} (syntax {_SYNTAX}, "
            f"e.g. {_EXAMPLES})"
        )
    chosen = torchvision_weights(model, weights) if pretrained else None
    net = tv.models.get_model(model, weights=chosen)
    m = tv.models
    if isinstance(net, m.ResNet):
        # Children up to layer4, as the base code does; avgpool and fc dropped.
        names = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")
        body = nn.Sequential(OrderedDict((n, getattr(net, n)) for n in names))
        return body, int(net.fc.in_features)
    if isinstance(net, m.DenseNet):
        # DenseNet.forward applies a ReLU after `features`; keep it in the trunk.
        body = nn.Sequential(OrderedDict(features=net.features, relu=nn.ReLU(inplace=False)))
        return body, int(net.classifier.in_features)
    if isinstance(net, (m.VGG, m.MobileNetV2, m.MobileNetV3, m.EfficientNet)):
        body = nn.Sequential(OrderedDict(features=net.features))
        return body, _probe_channels(body)
    raise ValueError(
        f"torchvision model {model!r} is not supported as a backbone (supported: ResNet "
        "family, VGG, DenseNet, MobileNetV2/V3, EfficientNet); use its timm version, "
        f"e.g. 'timm:{model}'"
    )


def _probe_channels(body: nn.Module) -> int:
    """Channel count of a convolutional trunk, from one small forward pass in eval mode."""
    was_training = body.training
    body.eval()
    with torch.no_grad():
        out = body(torch.zeros(1, 3, 64, 64))
    body.train(was_training)
    return int(out.shape[1])


# --------------------------------------------------------------------------------- timm


class TimmFeatures(nn.Module):
    """A timm model without pooling and classifier, returning channels-first maps.

    timm models built with ``num_classes=0, global_pool=""`` return their last feature map;
    models whose ``output_fmt`` is ``"NHWC"`` (Swin and relatives) are permuted to NCHW so the
    head's pooling has one convention. Token outputs ``[B, N, C]`` pass through unchanged.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.channels_last = str(getattr(model, "output_fmt", "NCHW")) == "NHWC"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        if self.channels_last and out.ndim == 4:
            out = out.permute(0, 3, 1, 2)
        return out


def _timm_backbone(model: str, *, pretrained: bool) -> tuple[nn.Module, int]:
    try:
        import timm
    except ImportError as err:
        raise ImportError(
            f"'timm:{model}' needs the timm package; install it with `pip install timm`"
        ) from err
    base = model.split(".", 1)[0]  # allow 'name.pretrained_tag'
    if not timm.is_model(base):
        close = timm.list_models(f"*{base}*")[:8]
        raise ValueError(
            f"unknown timm model {model!r}; similar names: {close or 'none'} "
            f"(syntax {_SYNTAX}, e.g. {_EXAMPLES})"
        )
    net = timm.create_model(model, pretrained=pretrained, num_classes=0, global_pool="")
    return TimmFeatures(net), int(net.num_features)


# -------------------------------------------------------------------------------- small


class SmallResNet(nn.Module):
    """A compact ResNet (one torchvision ``BasicBlock`` per stage) for small images on CPU.

    ``stem``: 3x3 conv, stride ``stem_stride``, + BN + ReLU (torchvision
    ``Conv2dNormActivation``); then four stages of one ``BasicBlock`` each with the given
    widths, stride 1 for the first stage and 2 for the others (1x1 conv + BN shortcut where
    the shape changes). No max-pool. On a 32x32 input with the default stride-2 stem the
    output map is ``[B, widths[-1], 2, 2]``.

    Why this shape: the digit mosaics carry 8x8-pixel digits upsampled to 16x16 per cell, so
    a stride-2 stem loses almost nothing while making the network about 4x cheaper than a
    stride-1 one; widths (16, 32, 64, 128) train at about 1,000+ images/s (batch 64) on one
    CPU core, so 2,000 images x 10 epochs take well under a minute. Every 3x3 conv after the
    stem has a channel count divisible by 8, so LgConv converts all of them.

    Initialisation follows torchvision's ResNet: Kaiming-normal (fan-out) convs, BN weight 1
    and bias 0, drawn from the global torch RNG (seed it for reproducibility).
    """

    def __init__(self, widths: Sequence[int] = (16, 32, 64, 128), stem_stride: int = 2) -> None:
        super().__init__()
        tv = _import_torchvision()
        BasicBlock = tv.models.resnet.BasicBlock
        Conv2dNormActivation = tv.ops.Conv2dNormActivation

        widths = tuple(int(w) for w in widths)
        if len(widths) == 0 or min(widths) < 1:
            raise ValueError(f"widths must be a non-empty sequence of positive ints, got {widths}")
        if stem_stride not in (1, 2):
            raise ValueError(f"stem_stride must be 1 or 2, got {stem_stride}")
        self.out_channels = widths[-1]
        self.stem = Conv2dNormActivation(3, widths[0], kernel_size=3, stride=stem_stride)
        stages = []
        c_in = widths[0]
        for i, c_out in enumerate(widths):
            stride = 1 if i == 0 else 2
            shortcut = None
            if stride != 1 or c_in != c_out:
                shortcut = nn.Sequential(
                    nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
                )
            stages.append(BasicBlock(c_in, c_out, stride=stride, downsample=shortcut))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        for mod in self.modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(mod, nn.BatchNorm2d):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))


def _small_backbone(model: str, *, pretrained: bool) -> tuple[nn.Module, int]:
    if model not in SMALL_MODELS:
        raise ValueError(
            f"unknown small model {model!r}; available: {['small:' + k for k in SMALL_MODELS]}"
        )
    if pretrained:
        raise ValueError(
            f"'small:{model}' is trained from scratch and has no pretrained weights; "
            "use pretrained=False"
        )
    net = SmallResNet(SMALL_MODELS[model])
    return net, net.out_channels
