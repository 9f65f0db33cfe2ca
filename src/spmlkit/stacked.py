"""R copies of one linear layer as one call: the product every batched group's layers go through.

A batched group (docs/architecture.md, "Many runs at once") holds the R runs' weights of a layer
stacked in one ``[R, ...]`` tensor. The feature head, the Gaussian bottleneck and SMILE's networks
all compute their linear layers with :func:`affine`, which takes one weight matrix or R of them, so
one module's code serves a solo run and a group. It sits below the models and the losses, which
both use it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["affine"]


def affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T + bias``, as ``nn.Linear`` computes it, for one weight matrix ``[C, D]`` or a
    stack of R of them ``[R, C, D]`` (with ``x`` ``[R, B, D]``, or ``[B, D]`` shared by all).

    One BLAS call either way, so R heads stacked into one module train as R copies of the module
    would, without a batching layer around every operation: ``F.linear`` (an ``addmm``) for one
    matrix; ``baddbmm`` (the same product, once per matrix of the stack) for R matrices on R
    inputs; and for rows all R share (the predictions of a batched group), one ``addmm`` with
    the R*C stacked rows as its columns, whose slice for matrix r is ``F.linear``'s product for
    it -- on a whole split that is several times faster than R narrow products (1,200 x 103
    rows, R = 9 Yeast heads: 0.4 ms against 1.2 ms). The result is then a ``[R, B, C]`` view.
    """
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    if x.dim() == 2:
        runs, classes, dim = weight.shape
        out = torch.addmm(bias.reshape(runs * classes), x, weight.reshape(runs * classes, dim).T)
        return out.view(len(x), runs, classes).transpose(0, 1)
    return _StackedAffine.apply(x, weight, bias)


class _StackedAffine(torch.autograd.Function):
    """``baddbmm(bias, x, weight^T)`` for R stacked weights, with the weight's gradient taken as
    ``F.linear``'s backward takes it for one matrix, ``G^T x``, and so laid out as the weight is.

    Autograd's own backward of the batched product computes ``x^T G`` and hands the weight a
    transposed view of it, which then has to be copied into the weight's layout: for SMILE's
    reconstruction layer (R = 16, 294 x 294) that copy cost more than the product itself.
    ``G^T x`` is also what a solo run computes, so the gradients stay a solo run's
    (docs/architecture.md, "Many runs at once")."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return torch.baddbmm(bias.unsqueeze(-2), x, weight.mT)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_weight, need_bias = ctx.needs_input_grad
        return (torch.bmm(grad, weight) if need_x else None, torch.bmm(grad.mT, x) if need_weight else None,
                grad.sum(-2) if need_bias else None)
