"""Tests for PU-MLC's local-global convolution (spmlkit.models.lgconv)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from spmlkit.models import (
    LgConv,
    build_model,
    convert_lgconv,
    count_lgconv,
    lgconv_branch_parameters,
    skip_reason,
)


pytestmark = pytest.mark.usefixtures("one_thread")  # the machine's cores are shared


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def _reference_lgconv(module: LgConv, x: np.ndarray) -> np.ndarray:
    """Element-by-element LgConv in plain numpy/math (eval-mode BatchNorm)."""
    conv = module.conv
    w3, b3 = _np(conv.weight), _np(conv.bias) if conv.bias is not None else None
    stride, pad, dil = conv.stride[0], conv.padding[0], conv.dilation[0]
    bsz, c_in, height, width = x.shape
    c_out = w3.shape[0]
    out_h = (height + 2 * pad - 2 * dil - 1) // stride + 1
    out_w = (width + 2 * pad - 2 * dil - 1) // stride + 1

    def conv1x1(weight, bias, inp):  # inp [C, H, W]
        w2 = weight[:, :, 0, 0]
        res = np.zeros((w2.shape[0],) + inp.shape[1:])
        for o in range(w2.shape[0]):
            for i in range(w2.shape[1]):
                res[o] += w2[o, i] * inp[i]
            if bias is not None:
                res[o] += bias[o]
        return res

    heads = module.heads
    y = np.zeros((bsz, c_out, out_h, out_w))
    for b in range(bsz):
        # local 3x3 part with zero padding
        for o in range(c_out):
            for r in range(out_h):
                for s in range(out_w):
                    acc = b3[o] if b3 is not None else 0.0
                    for i in range(c_in):
                        for ky in range(3):
                            for kx in range(3):
                                yy = r * stride - pad + ky * dil
                                xx = s * stride - pad + kx * dil
                                if 0 <= yy < height and 0 <= xx < width:
                                    acc += w3[o, i, ky, kx] * x[b, i, yy, xx]
                    y[b, o, r, s] = acc
        # global branch
        h = np.maximum(conv1x1(_np(module.reduce.weight), _np(module.reduce.bias), x[b]), 0.0)
        hmean = h.mean(axis=(1, 2), keepdims=True) * np.ones_like(h)
        ctx = np.concatenate([h, hmean], axis=0)
        logits_a = conv1x1(_np(module.attend.weight), _np(module.attend.bias), ctx)
        logits_g = conv1x1(_np(module.gate.weight), _np(module.gate.bias), ctx)
        v = conv1x1(_np(module.value.weight), _np(module.value.bias), x[b])
        per_head = c_in // heads
        glob = np.zeros_like(x[b])
        for k in range(heads):
            flat = logits_a[k].ravel()
            expo = [math.exp(val - flat.max()) for val in flat]
            weights = np.array(expo).reshape(height, width) / sum(expo)
            for j in range(per_head):
                ch = k * per_head + j
                pooled = float((weights * v[ch]).sum())
                for r in range(height):
                    for s in range(width):
                        gate = 1.0 / (1.0 + math.exp(-logits_g[k, r, s]))
                        glob[ch, r, s] = pooled * gate
        z = x[b] + glob
        proj = conv1x1(_np(module.project.weight), None, z)[:, ::stride, ::stride]
        bn = module.norm
        mean, var = _np(bn.running_mean), _np(bn.running_var)
        gamma, beta = _np(bn.weight), _np(bn.bias)
        for o in range(c_out):
            y[b, o] += gamma[o] * (proj[o] - mean[o]) / math.sqrt(var[o] + bn.eps) + beta[o]
    return y


def _randomise_bn(module: LgConv, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    n = module.norm.num_features
    with torch.no_grad():
        module.norm.weight.copy_(torch.randn(n, generator=gen, dtype=torch.float64))
        module.norm.bias.copy_(torch.randn(n, generator=gen, dtype=torch.float64))
        module.norm.running_mean.copy_(torch.randn(n, generator=gen, dtype=torch.float64))
        module.norm.running_var.copy_(torch.rand(n, generator=gen, dtype=torch.float64) + 0.5)


@pytest.mark.parametrize(
    "stride,padding,dilation,size",
    [(1, 1, 1, (3, 4)), (2, 1, 1, (5, 4)), (1, 2, 2, (4, 5))],
)
def test_lgconv_matches_elementwise_reference(stride, padding, dilation, size):
    torch.manual_seed(0)
    conv = nn.Conv2d(8, 4, 3, stride=stride, padding=padding, dilation=dilation).double()
    module = LgConv(conv).eval()
    _randomise_bn(module, 1)
    x = torch.randn(2, 8, *size, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    got = module(x)
    expected = _reference_lgconv(module, x.numpy())
    assert got.shape == conv(x).shape
    np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-10, atol=1e-10)


def test_lgconv_rounds_hidden_channels_down():
    module = LgConv(nn.Conv2d(24, 8, 3, padding=1), reduction=5)  # 24 // 5 = 4
    assert module.reduce.out_channels == 4
    assert module.attend.in_channels == 8 and module.gate.in_channels == 8
    tiny = LgConv(nn.Conv2d(8, 8, 3, padding=1), reduction=16)  # 8 // 16 -> at least 1
    assert tiny.reduce.out_channels == 1


def test_lgconv_gradcheck_float64():
    torch.manual_seed(0)
    module = LgConv(nn.Conv2d(8, 8, 3, padding=1, stride=2).double(), gamma=1.0).eval()
    x = torch.randn(1, 8, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lgconv_finite_for_large_attention_logits(dtype):
    torch.manual_seed(0)
    module = LgConv(nn.Conv2d(8, 8, 3, padding=1), gamma=1.0).to(dtype).eval()
    x = torch.randn(2, 8, 5, 5, dtype=dtype)
    seen = []
    module.attend.register_forward_hook(lambda mod, inp, out: seen.append(out.detach()))
    with torch.no_grad():
        module(x)
        scale = 50.0 / seen[-1].abs().max()  # make the attention logits span about [-50, 50]
        module.attend.weight.mul_(scale)
        module.attend.bias.mul_(scale)
        module.gate.weight.mul_(scale)
        module.gate.bias.mul_(scale)
    out = module(x)
    assert math.isclose(float(seen[-1].abs().max()), 50.0, rel_tol=1e-4)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())


def test_skip_rules_and_conversion_count():
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),  # skipped: 3 input channels not divisible by 8
        nn.Conv2d(16, 16, 3, padding=1),  # converted
        nn.Conv2d(16, 16, 3, padding=0),  # skipped: valid padding shrinks the map
        nn.Conv2d(16, 16, 3, padding=1, groups=16),  # skipped: depthwise
        nn.Conv2d(16, 16, 1),  # not 3x3: untouched
        nn.Conv2d(16, 16, 3, padding=2, dilation=2),  # converted
        nn.Conv2d(16, 32, 3, stride=2, padding=1),  # converted
        nn.Sequential(nn.Conv2d(32, 32, 3, padding="same")),  # converted (nested)
    ).eval()
    assert skip_reason(model[0]) is not None and "divisible" in skip_reason(model[0])
    assert "padding" in skip_reason(model[2])
    assert "groups" in skip_reason(model[3])
    assert "3x3" in skip_reason(model[4])
    x = torch.randn(1, 3, 9, 9)
    before = model(x)
    convert_lgconv(model)
    assert count_lgconv(model) == 4
    kinds = [type(m).__name__ for m in model]
    assert kinds[:7] == ["Conv2d", "LgConv", "Conv2d", "Conv2d", "Conv2d", "LgConv", "LgConv"]
    assert isinstance(model[7][0], LgConv)
    after = model(x)
    assert after.shape == before.shape == (1, 32, 4, 4)
    # converting again is a no-op
    convert_lgconv(model)
    assert count_lgconv(model) == 4


def test_shared_conv_is_replaced_by_one_shared_lgconv():
    conv = nn.Conv2d(8, 8, 3, padding=1)
    model = nn.Sequential(conv, nn.ReLU(), conv)
    convert_lgconv(model)
    assert model[0] is model[2] and isinstance(model[0], LgConv)
    assert count_lgconv(model) == 1


def test_constructor_errors():
    with pytest.raises(ValueError, match="divisible"):
        LgConv(nn.Conv2d(12, 8, 3, padding=1))  # 12 channels, 8 heads
    with pytest.raises(ValueError, match="gamma_init"):
        LgConv(nn.Conv2d(8, 8, 3, padding=1), gamma_init="zeros")
    with pytest.raises(ValueError, match="heads"):
        LgConv(nn.Conv2d(8, 8, 3, padding=1), heads=0)
    with pytest.raises(ValueError, match="3x3"):
        LgConv(nn.Conv2d(8, 8, 5, padding=2))


def test_gamma_initialisation():
    const = LgConv(nn.Conv2d(512, 512, 3, padding=1))
    assert torch.all(const.norm.weight == 1e-4) and torch.all(const.norm.bias == 0)
    torch.manual_seed(0)
    normal = LgConv(nn.Conv2d(512, 512, 3, padding=1), gamma_init="normal")
    g = normal.norm.weight.detach().numpy().astype(np.float64)
    assert torch.all(normal.norm.bias == 0)
    assert 0.8e-4 < g.std() < 1.2e-4 and abs(g.mean()) < 2e-5 and len(set(g.tolist())) > 500


def _relative_logit_change(name: str, size: int, **opts) -> float:
    torch.manual_seed(0)
    model = build_model(name, 10).eval()
    x = torch.randn(4, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(x).logits
        converted = convert_lgconv(copy.deepcopy(model), **opts).eval()
        new = converted(x).logits
    return float((new - base).norm() / base.norm())


@pytest.mark.parametrize("name,size", [("torchvision:resnet18", 64), ("small:cnn", 32)])
def test_start_property_converted_network_matches_original(name, size):
    # measured: ~7e-5 (constant 1e-4) and ~5e-5..7e-5 (normal), ~1.3..2.4 with gamma = 1
    assert _relative_logit_change(name, size) < 1e-3
    assert _relative_logit_change(name, size, gamma_init="normal") < 1e-3
    assert _relative_logit_change(name, size, gamma=1.0) > 0.5


def test_resnet18_converts_every_3x3_conv():
    torch.manual_seed(0)
    model = build_model("torchvision:resnet18", 5)
    n3x3 = sum(1 for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3))
    assert n3x3 == 16
    convert_lgconv(model.backbone)
    assert count_lgconv(model) == 16


def test_gradients_flow_into_branch():
    torch.manual_seed(0)
    model = build_model("small:cnn", 10, lgconv=True).train()
    x = torch.randn(4, 3, 32, 32)
    target = (torch.rand(4, 10) < 0.3).float()
    loss = nn.functional.binary_cross_entropy_with_logits(model(x).logits, target)
    loss.backward()
    lgconvs = [m for m in model.modules() if isinstance(m, LgConv)]
    assert len(lgconvs) == 8
    for m in lgconvs:
        for p in m.branch_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all()
        assert m.norm.weight.grad.abs().sum() > 0  # gamma receives the branch signal
        assert m.value.weight.grad.abs().sum() > 0  # and flows through gamma ~ 1e-4
        assert m.conv.weight.grad.abs().sum() > 0
    branch = list(lgconv_branch_parameters(model))
    expected = sum(len(list(m.branch_parameters())) for m in lgconvs)
    assert len(branch) == expected
    conv_ids = {id(m.conv.weight) for m in lgconvs}
    assert not conv_ids & {id(p) for p in branch}


def test_branch_follows_conv_dtype_and_mode():
    conv = nn.Conv2d(8, 8, 3, padding=1).double().eval()
    module = LgConv(conv)
    assert all(p.dtype == torch.float64 for p in module.parameters())
    assert not module.training and not module.norm.training
