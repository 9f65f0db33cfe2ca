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

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn

__all__ = ["SMALL_MODELS", "SmallResNet", "create_backbone", "torchvision_weights"]

_EXAMPLES = (
    "torchvision:resnet50, torchvision:resnet101, torchvision:resnet18, "
    "timm:resnet50, timm:convnext_tiny, small:cnn"
)
_SYNTAX = "'<source>:<model>' with source one of 'torchvision', 'timm', 'small'"

#: widths of the four stages of each named small network
SMALL_MODELS: dict[str, tuple[int, int, int, int]] = {"cnn": (16, 32, 64, 128), "cnn-gn": (16, 32, 64, 128)}
#: small models normalised per sample (GroupNorm) instead of per batch: their forward pass does
#: not depend on how a batch is split over processes, which makes data-parallel runs equal a
#: one-process run to rounding (docs/architecture.md, "Distributed training")
_GROUP_NORM_MODELS = {"cnn-gn"}


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
    try:
        net = tv.models.get_model(model, weights=chosen)
    except OSError as err:  # URLError, DNS and connection failures are all OSError
        if chosen is None:
            raise
        cached = _torch_hub_cache_file(chosen.url)
        if cached.is_file():  # the weights are there; the failure is something else
            raise
        raise ValueError(_offline_message(
            f"the pretrained weights {type(chosen).__name__}.{chosen.name} of 'torchvision:{model}'",
            err, f"download {chosen.url} elsewhere and put the file at {cached} (torch hub's checkpoint folder, "
            "torch.hub.get_dir()/checkpoints; set TORCH_HOME to use another)")) from err
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


def _torch_hub_cache_file(url: str) -> Path:
    """The file ``torch.hub.load_state_dict_from_url`` reads ``url`` from (and downloads it to).

    Same rule as torch hub: ``torch.hub.get_dir()/checkpoints/<last URL component>``, computed
    at call time so that TORCH_HOME set by the user (or a test) is honoured.
    """
    filename = os.path.basename(urlparse(url).path)
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def _offline_message(what: str, err: BaseException, remedy: str) -> str:
    """One line: which weights could not be had, why, and the two ways out.

    Offline machines (clusters, containers) are common, and the download's own traceback
    neither names the cache file nor mentions that training without the weights is possible.
    """
    reason = " ".join(str(getattr(err, "reason", None) or err).split())
    return (f"{what} are not cached and cannot be downloaded ({type(err).__name__}: {reason}); "
            f"train without them with --no-pretrained (pretrained: false in a config file), or {remedy}")


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
    try:
        net = timm.create_model(model, pretrained=pretrained, num_classes=0, global_pool="")
    except OSError as err:  # huggingface_hub's LocalEntryNotFoundError, URLError: both OSError
        if not pretrained:
            raise
        where = _timm_weights_location(model)
        if where is None:  # the weights are cached, so the failure is not the download
            raise
        raise ValueError(_offline_message(f"the pretrained weights of 'timm:{model}'", err, where)) from err
    return TimmFeatures(net), int(net.num_features)


def _timm_weights_location(model: str) -> str | None:
    """Where timm looks for ``model``'s pretrained weights, or None when they are cached there.

    timm fetches from the Hugging Face Hub when the model's pretrained config names a repo
    (``hf_hub_id``), and from a plain URL through torch hub otherwise; the user must know
    which cache to fill, so the message names the one timm will actually read.
    """
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(model)
    hf_hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    url = getattr(cfg, "url", None) if cfg is not None else None
    if hf_hub_id:
        from huggingface_hub import constants, try_to_load_from_cache

        repo = hf_hub_id.split("@", 1)[0]
        names = [getattr(cfg, "hf_hub_filename", None) or "model.safetensors", "pytorch_model.bin"]
        if any(isinstance(try_to_load_from_cache(repo, name), str) for name in names):
            return None
        folder = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}"
        return (f"download the Hugging Face repo {repo} (e.g. `hf download {repo}` on a machine with internet) "
                f"into the Hugging Face cache, so that {folder} holds it (set HF_HOME to use another cache)")
    if url:
        cached = _torch_hub_cache_file(url)
        if cached.is_file():
            return None
        return (f"download {url} elsewhere and put the file at {cached} (torch hub's checkpoint folder, "
                "torch.hub.get_dir()/checkpoints; set TORCH_HOME to use another)")
    return "make the weights available to timm in its cache (Hugging Face cache or torch.hub.get_dir()/checkpoints)"


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

    def __init__(self, widths: Sequence[int] = (16, 32, 64, 128), stem_stride: int = 2, norm: str = "batch") -> None:
        super().__init__()
        tv = _import_torchvision()
        BasicBlock = tv.models.resnet.BasicBlock
        Conv2dNormActivation = tv.ops.Conv2dNormActivation

        widths = tuple(int(w) for w in widths)
        if len(widths) == 0 or min(widths) < 1:
            raise ValueError(f"widths must be a non-empty sequence of positive ints, got {widths}")
        if stem_stride not in (1, 2):
            raise ValueError(f"stem_stride must be 1 or 2, got {stem_stride}")
        if norm not in ("batch", "group"):
            raise ValueError(f"norm must be 'batch' or 'group', got {norm!r}")
        norm_layer = nn.BatchNorm2d if norm == "batch" else (lambda c: nn.GroupNorm(min(8, c), c))
        self.out_channels = widths[-1]
        self.stem = Conv2dNormActivation(3, widths[0], kernel_size=3, stride=stem_stride, norm_layer=norm_layer)
        stages = []
        c_in = widths[0]
        for i, c_out in enumerate(widths):
            stride = 1 if i == 0 else 2
            shortcut = None
            if stride != 1 or c_in != c_out:
                shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), norm_layer(c_out))
            stages.append(BasicBlock(c_in, c_out, stride=stride, downsample=shortcut, norm_layer=norm_layer))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        for mod in self.modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(mod, (nn.BatchNorm2d, nn.GroupNorm)):
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
    net = SmallResNet(SMALL_MODELS[model], norm="group" if model in _GROUP_NORM_MODELS else "batch")
    return net, net.out_channels
