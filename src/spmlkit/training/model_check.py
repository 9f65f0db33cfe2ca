"""What a method needs of the run's data and model, refused from the configuration before any run.

Some methods have no meaning on a feature data set (:attr:`spmlkit.methods.Method.images_only`:
LAC's two views of an image, BoostLU's class activation maps), and a method whose recipe changes
the image model's head (:attr:`spmlkit.methods.Method.head`; BoostLU, docs/methods.md,
"boostlu_ll_r") needs a backbone with a spatial feature map. Each run that cannot give what its
method needs is refused in one line before anything is written, by :func:`plan_run
<spmlkit.training.plan.plan_run>` for one run and by the sweep for every point of its grid (so a
benchmark or a sweep says it once, before training):

* an image-only method on a feature data set: its inputs are pooled features (or a table's
  columns), and its model is a linear head on them;
* BoostLU with LinearInit (``linear_init_epochs``): its first phase trains the linear layer on
  cached pooled features, which the boosted maps never pass through;
* BoostLU on the label-query head (``image_head: label_query``), which has no per-location
  linear classifier to boost;
* BoostLU on a backbone whose output is not ``[B, D, h, w]`` (a vision transformer's tokens). The
  backbone is built on the meta device and shown one image of the run's size, which allocates
  nothing and reads no weights (about half a second for ResNet-50), once per backbone and size;
* MIME (docs/methods.md, "mime") without a Gaussian bottleneck (``bottleneck: 0``), whose codes its
  loss reads; a bottleneck under a method whose loss does not train its KL term; a bottleneck with
  an MLP head on features, where the bottleneck is the whole network; a bottleneck with LgConv or
  with LinearInit, which trains a linear layer on pooled features that the bottleneck never reads.
"""

from __future__ import annotations

import functools

import torch

from ..methods import HEADS, Method, bottleneck_width, get_method
from .config import RunConfig

__all__ = ["check_model", "backbone_map_reason"]


def check_model(config: RunConfig, kind: str) -> None:
    """ValueError (one line: what, why, what to do) when the run's method needs data or a model part
    the run cannot have; ``kind`` is the run's data kind, ``"features"`` or ``"images"``."""
    method = get_method(config.method.name)
    _check_bottleneck(config, method, kind)
    if kind == "features" and method.images_only:
        plain = f", or use {method.loss} on it" if method.head is not None else ""
        raise ValueError(f"method {method.name!r} has no meaning on a feature dataset ({config.data.dataset!r}): "
                         f"{method.images_only}; train it on an image dataset{plain}")
    if method.head is None or kind == "features":
        return
    head = HEADS[method.head]
    if config.schedule.linear_init_epochs:
        raise ValueError(f"method {method.name!r} cannot train with LinearInit (linear_init_epochs "
                         f"{config.schedule.linear_init_epochs}): LinearInit trains the linear layer on pooled "
                         f"features, but {head['does']}; set linear_init_epochs to 0")
    if config.model.image_head != "linear":
        raise ValueError(f"method {method.name!r} needs the linear head applied at every location ({head['does']}), "
                         f"and image_head {config.model.image_head} has none; set image_head: linear")
    reason = backbone_map_reason(config.model.backbone, config.data.image_size)
    if reason is not None:
        raise ValueError(f"method {method.name!r} needs {head['needs']} ({head['does']}), but "
                         f"{config.model.backbone} has none: {reason}; use a convolutional backbone such as "
                         "torchvision:resnet50")


def _check_bottleneck(config: RunConfig, method: Method, kind: str) -> None:
    """MIME's Gaussian bottleneck: where the method needs one and where a run cannot have one."""
    from .. import losses

    width = bottleneck_width(method, config.model.bottleneck)
    needs_latent = losses.loss_class(method.loss).needs_latent
    if needs_latent and not width:
        raise ValueError(f"method {method.name!r} trains the KL term of a Gaussian bottleneck before the classifier, "
                         f"and bottleneck 0 removes it: leave bottleneck unset (the method's {method.bottleneck}) "
                         "or set a width > 0")
    if width and not needs_latent:
        raise ValueError(f"bottleneck {width} is MIME's model part, and method {method.name!r} does not train its KL "
                         "term: set bottleneck 0 (or leave it unset), or train method mime")
    if width and kind == "features" and config.model.head != "linear":
        raise ValueError(f"on features the bottleneck is the whole network, so head {config.model.head!r} would be a "
                         "second one: leave head linear (the default) or set bottleneck 0")
    if width and kind == "images" and config.model.lgconv:
        raise ValueError("a bottleneck model takes the backbone as it is; lgconv changes it: choose one")
    if width and config.schedule.linear_init_epochs:
        raise ValueError("LinearInit trains a linear layer on pooled backbone features, and a model with a Gaussian "
                         "bottleneck classifies otherwise: set linear_init_epochs 0")


@functools.lru_cache(maxsize=16)
def backbone_map_reason(backbone: str, image_size: int) -> str | None:
    """Why ``backbone``'s output on an image of ``image_size`` pixels is no spatial map (None: it is
    one, or the meta device cannot tell; the model's own forward then refuses at the first step)."""
    from ..models import create_backbone, spatial_map_reason

    try:
        with torch.device("meta"):
            body, _ = create_backbone(backbone, pretrained=False)
            out = body(torch.empty(1, 3, image_size, image_size))
    except (NotImplementedError, RuntimeError):  # an operation without a meta kernel: cannot tell here
        return None
    return spatial_map_reason(tuple(out.shape))
