"""The loop clears gradients with a plain loop (spmlkit.training.loop._clear_grads) instead of
``optimizer.zero_grad(set_to_none=True)``: every step must stay what torch's method gives, bit for
bit, including a parameter that gets no gradient in a step (Adam skips it, as after zero_grad)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from spmlkit.training.loop import _backward_and_step, _clear_grads


def _params() -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(4)),
            torch.nn.Parameter(torch.randn(2))]


def _optimizer(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    # two learning rates, as a batched group's merged parameter groups
    return torch.optim.Adam([{"params": params[:2], "lr": 1e-2}, {"params": params[2:], "lr": 3e-3}], fused=True)


def _loss(params: list[torch.nn.Parameter], step: int) -> torch.Tensor:
    x = torch.linspace(-1.0, 1.0, 12).view(3, 4)
    loss = ((params[0] * x).sum(0) + params[1]).pow(2).sum()
    if step == 0:  # the third parameter gets a gradient in the first step only
        loss = loss + params[2].pow(2).sum()
    return loss


def test_clear_grads_sets_every_gradient_to_none() -> None:
    params = _params()
    optimizer = _optimizer(params)
    _loss(params, 0).backward()
    assert all(p.grad is not None for p in params)
    _clear_grads(optimizer)
    assert [p.grad for p in params] == [None, None, None]


def test_steps_equal_torch_zero_grad_bit_for_bit() -> None:
    ours, theirs = _params(), _params()
    opt_ours, opt_theirs = _optimizer(ours), _optimizer(theirs)
    group = SimpleNamespace(optimizer=opt_ours, scaler=None)
    third_after_first = None
    for step in range(3):
        _backward_and_step(group, _loss(ours, step))
        opt_theirs.zero_grad(set_to_none=True)
        _loss(theirs, step).backward()
        opt_theirs.step()
        if step == 0:
            third_after_first = ours[2].detach().clone()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    # no gradient after the first step: a stale one would have moved it again
    assert ours[2].grad is None
    assert torch.equal(ours[2], third_after_first)
