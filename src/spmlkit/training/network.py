"""Which network a run trains, decided once from its settings and its method's parts.

A run's network is the configured one (a head on features; a backbone and a head on images) with
the parts its method brings (:meth:`spmlkit.methods.Method.model_parts`: the label-query head, a
Gaussian bottleneck, boosted class activation maps), the run's own settings winning where it sets
them. :func:`network_spec` makes that decision, once; from it follow what the network outputs
(checked against what the method requires), the refusals of parts that cannot go together
(:func:`check_network`, before any run starts: by :func:`~spmlkit.training.plan.plan_run` for one
run and by the sweep for every point of its grid), and the network itself
(:func:`build_run_model`: for the trainer, and for ``predict`` and ``export`` from a run's saved
settings). No method is named here: a part is refused for what it is and what it needs.

The parts and what they ask (docs/methods.md has the methods that bring them):

* ``image_head: label_query`` takes the backbone as it is (no LgConv); with a method that reads
  label-wise embeddings it gets a projector that makes them;
* ``bottleneck`` (a width > 0) is read by a method that reads the codes (``latent``: the KL term);
  on features it is the whole network (no MLP head); on images it takes the backbone as it is; it
  is not a linear layer on pooled features, which LinearInit trains;
* ``cam_boost`` (boosted class activation maps) needs a convolutional backbone's spatial map, the
  linear head applied at every location, and no LinearInit (whose features are pooled first). The
  backbone is built on the meta device and shown one image of the run's size, which allocates
  nothing and reads no weights, once per backbone and size.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .config import RunConfig

__all__ = ["NetworkSpec", "backbone_map_reason", "build_run_model", "check_network", "network_spec", "own_part"]

#: the model settings a method may bring (:meth:`~spmlkit.methods.Method.model_parts`), and what a run
#: has where neither it nor its method sets them
METHOD_PARTS = {"image_head": "linear", "bottleneck": 0, "cam_boost": None}
#: the width of the label-wise embeddings of a label-query head's projector (docs/methods.md has whose 128)
PROJECTOR_WIDTH = 128
#: where a network gets each output a method may require, in the words of a refusal
_HOW_TO_GET = {
    "embeddings": "set image_head: label_query (--image-head label_query), whose projector makes them",
    "latent": "a Gaussian bottleneck makes them: leave bottleneck unset (the method's own) or set a width > 0",
}


@dataclass(frozen=True)
class NetworkSpec:
    """The network of a run, as settings: what :func:`build_run_model` builds."""

    kind: str  # "features" | "images"
    #: the classifier: "linear" | "mlp" on features, "linear" | "label_query" on images
    head: str
    #: the Gaussian bottleneck's width, 0 for none
    bottleneck: int
    #: boosted class activation maps' alpha, None for the plain head
    cam_boost: float | None
    #: the label-query head's projector width, None for none
    projector: int | None

    @property
    def outputs(self) -> frozenset[str]:
        """What the network's forward fills beside the logits (:class:`~spmlkit.models.ModelOutput`)."""
        return frozenset(["latent"] * bool(self.bottleneck) + ["embeddings"] * (self.projector is not None))

    def describe(self) -> str:
        """The network in a few words, for a refusal."""
        if self.bottleneck:
            return f"network with a bottleneck of width {self.bottleneck}"
        head = {"label_query": "label-query head", "mlp": "MLP head"}.get(self.head, "linear head")
        return f"{head}{' with boosted class activation maps' if self.cam_boost is not None else ''}"


def network_spec(config: RunConfig, kind: str) -> NetworkSpec:
    """The network a run of ``kind`` ("features" or "images") with ``config`` trains."""
    from ..methods import get_method

    method = get_method(config.method.name)
    model = config.model
    bottleneck = int(own_part("bottleneck", model.bottleneck, method.name, config.method.hparams))
    if kind == "features":
        return NetworkSpec(kind, model.head, bottleneck, None, None)
    head = own_part("image_head", model.image_head, method.name, config.method.hparams)
    projector = PROJECTOR_WIDTH if head == "label_query" and "embeddings" in method.requires else None
    return NetworkSpec(kind, head, bottleneck, own_part("cam_boost", None, method.name, config.method.hparams),
                       projector)


def own_part(setting: str, value: Any, method: str, hparams: Mapping[str, Any]) -> Any:
    """A model setting of :data:`METHOD_PARTS` as a run has it: ``value`` where the run sets it (not
    None), else ``method``'s own part (:meth:`~spmlkit.methods.Method.model_parts`), else the
    setting's plain default. What two runs with the same settings train on, whichever way they say
    it (``--resume`` compares these)."""
    from ..methods import get_method

    if value is not None:
        return value
    cls = get_method(method)
    parts = cls.model_parts(cls.check_hparams(hparams))
    unknown = sorted(set(parts) - set(METHOD_PARTS))
    if unknown:
        raise ValueError(f"method {method!r} brings the model settings {unknown}; a method may bring "
                         f"{', '.join(METHOD_PARTS)}")
    return parts.get(setting, METHOD_PARTS[setting])


def check_network(config: RunConfig, kind: str) -> NetworkSpec:
    """The run's :class:`NetworkSpec`, after refusing in one line (a ``ValueError``: what, why, what
    to do) a method on data or a network it cannot train with, and parts that cannot go together."""
    from ..methods import get_method

    from ..methods import METHODS

    method = get_method(config.method.name)
    if kind == "features" and not method.on_features.trains:
        loss = next((name for family, name in method.parts() if family == "loss"), None)
        plain = (f", or use {loss} on it" if loss not in (None, method.name) and loss in METHODS
                 and METHODS[loss].on_features.trains else "")  # its loss alone, where that is a method there
        raise ValueError(f"method {method.name!r} has no meaning on a feature dataset ({config.data.dataset!r}): "
                         f"{method.on_features.note}; train it on an image dataset{plain}")
    if kind == "features" and "strong" in method.requires:
        raise ValueError(f"method {method.name!r} reads a strong augmentation of every row, which only image runs "
                         "make; train it on an image dataset")
    spec = network_spec(config, kind)
    missing = sorted(method.requires - {"strong"} - spec.outputs)
    if missing:
        raise ValueError(f"method {method.name!r} reads the model's {missing[0]}, which the {spec.describe()} does "
                         f"not give: {_HOW_TO_GET[missing[0]]}")
    _check_bottleneck(config, spec, "latent" in method.requires, method.name)
    if spec.cam_boost is not None:
        _check_cam_boost(config, spec, method.name)
    if kind == "images" and spec.head == "label_query" and config.model.lgconv:
        raise ValueError("image_head label_query takes the backbone as it is; lgconv changes it: choose one")
    return spec


def _check_bottleneck(config: RunConfig, spec: NetworkSpec, reads_codes: bool, name: str) -> None:
    """A Gaussian bottleneck: where a run cannot have one."""
    width = spec.bottleneck
    if not width:
        return
    if not reads_codes:
        raise ValueError(f"bottleneck {width} is a model part whose KL term only a method that reads its codes trains, "
                         f"and method {name!r} does not: set bottleneck 0 (or leave it unset), or train a method that "
                         "reads them (`spmlkit methods`)")
    if spec.kind == "features" and spec.head != "linear":
        raise ValueError(f"on features the bottleneck is the whole network, so head {spec.head!r} would be a second "
                         "one: leave head linear (the default) or set bottleneck 0")
    if spec.kind == "images" and config.model.lgconv:
        raise ValueError("a bottleneck model takes the backbone as it is; lgconv changes it: choose one")
    if config.schedule.linear_init_epochs:
        raise ValueError("LinearInit trains a linear layer on pooled backbone features, and a model with a Gaussian "
                         "bottleneck classifies otherwise: set linear_init_epochs 0")


def _check_cam_boost(config: RunConfig, spec: NetworkSpec, name: str) -> None:
    """Boosted class activation maps: a convolutional map, the linear head at every location."""
    from ..models.cam import CAM_BOOST

    if config.schedule.linear_init_epochs:
        raise ValueError(f"method {name!r} cannot train with LinearInit (linear_init_epochs "
                         f"{config.schedule.linear_init_epochs}): LinearInit trains the linear layer on pooled "
                         f"features, but {CAM_BOOST.does}; set linear_init_epochs to 0")
    if spec.head != "linear":
        raise ValueError(f"method {name!r} needs the linear head applied at every location ({CAM_BOOST.does}), "
                         f"and image_head {spec.head} has none; set image_head: linear")
    reason = backbone_map_reason(config.model.backbone, config.data.image_size)
    if reason is not None:
        raise ValueError(f"method {name!r} needs {CAM_BOOST.needs} ({CAM_BOOST.does}), but {config.model.backbone} "
                         f"has none: {reason}; use a convolutional backbone such as torchvision:resnet50")


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


def build_run_model(config: RunConfig, kind: str, num_classes: int, feature_width: int = 0) -> nn.Module:
    """The network a run of ``kind`` trains (:func:`network_spec`): with the data's sizes, or a
    stand-in of any sizes whose parts are the run's (:func:`~spmlkit.training.recipe.check_parts`).
    Call after seeding the global torch RNG: the initial weights are its draws."""
    from ..models import FeatureHead, GaussianBottleneck, LabelQueryNet, build_bottleneck_net, build_model
    from ..models import create_backbone

    spec = network_spec(config, kind)
    samples = config.model.bottleneck_samples
    if kind == "features":
        if spec.bottleneck:  # the bottleneck is the whole network on the features (check_network)
            return GaussianBottleneck(feature_width, num_classes, spec.bottleneck, samples=samples)
        hidden = num_classes if config.model.hidden == "classes" else config.model.hidden  # an MLP as wide as the labels
        return FeatureHead(feature_width, num_classes, config.model.head, hidden, config.model.dropout)
    recipe = config.recipe  # the official local-global convolution's options: a projection bias, gamma ~ N(0, 1e-4)
    options = ({"project_bias": recipe.lgconv_bias, "gamma_init": recipe.lgconv_gamma_init}
               if config.model.lgconv else None)
    if spec.bottleneck:  # pooled features or label queries, then the bottleneck classifies
        model: nn.Module = build_bottleneck_net(config.model.backbone, num_classes, spec.bottleneck, samples=samples,
                                                label_queries=spec.head == "label_query",
                                                pretrained=config.model.pretrained)
    elif spec.head == "label_query":
        if config.model.lgconv:
            raise ValueError("image_head label_query takes the backbone as it is; lgconv changes it: choose one")
        body, dim = create_backbone(config.model.backbone, pretrained=config.model.pretrained)
        model = LabelQueryNet(body, dim, num_classes, embed_dim=spec.projector)
    else:
        model = build_model(config.model.backbone, num_classes, pretrained=config.model.pretrained,
                            lgconv=config.model.lgconv, lgconv_options=options, cam_boost=spec.cam_boost)
    if recipe.constant_bn:  # docs/protocol.md, "Recipes"
        from ..models.parts import constant_batchnorm

        constant_batchnorm(model)
    return model
