"""Class activation maps and BoostLU, the model part of the ``boostlu_*`` methods.

A network whose classifier is one linear layer after global average pooling can apply that
layer at every location of the feature map first and average afterwards: the per-location
scores are the class activation maps (CAMs), ``M_c(i, j) = w_c · f(i, j) + b_c``, and their
average is the usual logit, because averaging and a linear map commute. BoostLU (Kim et al.,
CVPR 2023; docs/methods.md, "boostlu_ll_r") breaks that symmetry on purpose: before the average
it multiplies every positive CAM score by ``alpha > 1`` and leaves the others as they are,

    BoostLU(m) = alpha · m   if m > 0
                 m           otherwise,

so a model trained with many false negatives (the assumed negatives of single-positive data)
gets back the larger attribution scores a model trained with full labels has. It applies in every
forward pass, training and evaluation alike, as in the official code.

Only a backbone that returns a spatial map ``[B, D, h, w]`` has CAMs: pooled features (a feature
run) and token sequences (a vision transformer's ``[B, N, D]``) do not, and
:func:`boosted_logits` refuses them. The head's weights stay an ``nn.Linear`` ``[C, D]``, applied
per location as a 1 x 1 convolution (the official code's ``nn.Conv2d(D, C, 1)`` holds the same
numbers as ``[C, D, 1, 1]``), so a run's parameters, optimiser groups and checkpoints have the
layout of every other image run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["CAM_BOOST", "ModelPart", "boost_lu", "boosted_logits", "class_activation_maps", "spatial_map_reason"]


@dataclass(frozen=True)
class ModelPart:
    """A part a method adds to the network, in the words of every refusal that names it: what it
    does, and what it needs of the backbone."""

    does: str
    needs: str


#: BoostLU's boosted class activation maps (:func:`boosted_logits`), the ``cam_boost`` of a network
CAM_BOOST = ModelPart("BoostLU boosts class activation maps", "a convolutional backbone's spatial feature map "
                      "[B, D, h, w]")


def boost_lu(cam: torch.Tensor, alpha: float) -> torch.Tensor:
    """``alpha · cam`` where ``cam > 0``, ``cam`` elsewhere (zero included), element-wise.

    The gradient is ``alpha`` on the positive scores and 1 on the others: a piecewise-linear
    activation, like a leaky ReLU whose slope is above 1 on the positive side.
    """
    return torch.where(cam > 0, cam * alpha, cam)


def class_activation_maps(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``[B, C, h, w]`` scores of the linear classifier (``weight`` ``[C, D]``, ``bias`` ``[C]``)
    at every location of the feature map ``features`` ``[B, D, h, w]``: a 1 x 1 convolution, the
    operation the official code computes with its ``nn.Conv2d`` (so the same numbers)."""
    return F.conv2d(features, weight[:, :, None, None], bias)


def spatial_map_reason(features_shape: tuple[int, ...] | torch.Size) -> str | None:
    """Why a backbone output of this shape has no class activation maps (None: it has them).

    ``[B, D, h, w]`` maps have them; ``[B, N, D]`` token sequences and ``[B, D]`` vectors do not."""
    if len(features_shape) == 4:
        return None
    if len(features_shape) == 3:
        return f"its output is a sequence of tokens {tuple(features_shape)}, not a spatial map [B, D, h, w]"
    return f"its output {tuple(features_shape)} is not a spatial map [B, D, h, w]"


def boosted_logits(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   alpha: float) -> torch.Tensor:
    """Logits ``[B, C]``: the class activation maps of ``features`` ``[B, D, h, w]``, boosted by
    :func:`boost_lu`, averaged over the locations.

    The average is ``adaptive_avg_pool2d`` to one location, as in the official code, rather than
    ``mean``: the two sum the locations in different orders, and this one gives its numbers to the
    bit (docs/methods.md, "boostlu_ll_r")."""
    why = spatial_map_reason(features.shape)
    if why is not None:
        raise ValueError(f"BoostLU boosts class activation maps, but the backbone has none: {why}; "
                         "use a convolutional backbone (torchvision ResNet, VGG, DenseNet, EfficientNet, ...)")
    cam = boost_lu(class_activation_maps(features, weight, bias), alpha)
    return F.adaptive_avg_pool2d(cam, 1).flatten(1)
