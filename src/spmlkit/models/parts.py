"""Named parts of a model, for recipes that train only some of them and freeze BatchNorm.

The official PU-MLC code fine-tunes only part of its network: the LgConv global branches, the
last ResNet stage (``layer4``) and the head, with every BatchNorm kept in eval mode
(docs/protocol.md, "Recipes"). A recipe names what trains with :func:`part_parameters`'s names:

* ``head``: the classifier (``SPMLNet.head``; a feature run's whole model);
* ``backbone``: everything before the pooling;
* ``lgconv_global``: the global branches of every LgConv layer
  (:func:`~spmlkit.models.lgconv.lgconv_branch_parameters`), wherever they sit;
* a module path: ``backbone.layer4``, or ``layer4`` for a child of the backbone.

A name that is none of these is refused with the names that exist, never skipped: a typo in a
frozen-parts list would otherwise silently train the wrong network.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from .lgconv import lgconv_branch_parameters

__all__ = ["NAMED_PARTS", "constant_batchnorm", "freeze_batchnorm", "part_parameters", "train_only"]

#: the parts every model may name, besides module paths
NAMED_PARTS = ("head", "backbone", "lgconv_global")


def part_parameters(model: nn.Module, name: str) -> list[nn.Parameter]:
    """The parameters of the part ``name`` of ``model`` (module docstring); ValueError naming the
    valid names for an unknown one."""
    if name == "lgconv_global":
        params = list(lgconv_branch_parameters(model))
        if not params:
            raise ValueError("train_only names lgconv_global, but the model has no LgConv layers; set lgconv: true "
                             "(--lgconv) or remove it")
        return params
    backbone = getattr(model, "backbone", None)
    if name == "head":
        head = getattr(model, "head", None)
        return list((head if isinstance(head, nn.Module) else model).parameters())
    if name == "backbone":
        if backbone is None:
            raise ValueError("train_only names backbone, but a feature run's model has only a head")
        return list(backbone.parameters())
    modules = dict(model.named_modules())
    module = modules.get(name)
    if module is None and backbone is not None:
        module = modules.get(f"backbone.{name}")
    if module is None or name == "":
        children = [f"backbone.{n}" for n, _ in backbone.named_children()] if backbone is not None else []
        raise ValueError(f"train_only names {name!r}, which this model does not have; name parts "
                         f"({', '.join(NAMED_PARTS)}) or module paths such as {', '.join(children[:8]) or 'net'}")
    return list(module.parameters())


def train_only(model: nn.Module, names: Iterable[str]) -> int:
    """Let only the parts ``names`` train: every other parameter stops requiring gradients (so the
    optimiser never sees it). Returns the number of trainable parameter tensors."""
    keep = {id(p) for name in names for p in part_parameters(model, name)}
    for param in model.parameters():
        param.requires_grad_(id(param) in keep)
    return len(keep)


def freeze_batchnorm(model: nn.Module) -> int:
    """Put every BatchNorm of ``model`` in eval mode: it normalises with its running statistics
    and never updates them. Call after every ``model.train()`` (which switches them back). Its
    scale and shift still train if their part does, as in the official PU-MLC code. Returns the
    number of BatchNorm layers."""
    count = 0
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.eval()
            count += 1
    return count


def constant_batchnorm(model: nn.Module) -> int:
    """Replace every 2-D BatchNorm of ``model`` by a constant affine map (torchvision's
    ``FrozenBatchNorm2d``): ``x · s + t`` with ``s = w / sqrt(var + eps)`` and ``t = b − mean · s``
    from its running statistics, scale and shift, none of which train any more. This is the LAC
    code's backbone (docs/methods.md, "plc"); it computes in that order, so the features equal the
    code's to the bit, where an eval-mode BatchNorm rounds otherwise. Returns the number replaced."""
    from torchvision.ops.misc import FrozenBatchNorm2d

    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                frozen = FrozenBatchNorm2d(child.num_features, eps=child.eps)
                with torch.no_grad():
                    for key in ("weight", "bias", "running_mean", "running_var"):
                        getattr(frozen, key).copy_(getattr(child, key))
                setattr(parent, name, frozen.to(child.weight.device))
                count += 1
    return count
