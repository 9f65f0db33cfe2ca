"""Tests for backbones and the SPML head (spmlkit.models). Nothing is downloaded."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from spmlkit.models import (
    SPMLNet,
    build_model,
    count_lgconv,
    create_backbone,
    global_average_pool,
    torchvision_weights,
)


pytestmark = pytest.mark.usefixtures("one_thread")  # the machine's cores are shared


def test_torchvision_resnet_backbone_is_resnet_without_pool_and_fc():
    torch.manual_seed(0)
    reference = torchvision.models.resnet18().eval()
    torch.manual_seed(0)
    body, channels = create_backbone("torchvision:resnet18")
    body.eval()
    assert channels == 512
    assert [n for n, _ in body.named_children()] == [
        "conv1",
        "bn1",
        "relu",
        "maxpool",
        "layer1",
        "layer2",
        "layer3",
        "layer4",
    ]
    # state-dict keys stay torchvision's (checkpoints load), minus the classifier
    assert set(body.state_dict()) == {k for k in reference.state_dict() if not k.startswith("fc.")}
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        r = reference
        expected_map = r.layer4(r.layer3(r.layer2(r.layer1(r.maxpool(r.relu(r.bn1(r.conv1(x))))))))
        got_map = body(x)
        assert got_map.shape == (2, 512, 2, 2)
        torch.testing.assert_close(got_map, expected_map)
        # backbone + GAP + linear with the reference fc reproduces torchvision's logits
        net = SPMLNet(body, channels, 1000).eval()
        net.head.load_state_dict(reference.fc.state_dict())
        torch.testing.assert_close(net(x).logits, reference(x), rtol=1e-5, atol=1e-5)


def test_resnet50_channels_and_v1_default_weights():
    _, channels = create_backbone("torchvision:resnet50")
    assert channels == 2048
    tvm = torchvision.models
    assert torchvision_weights("resnet50") is tvm.ResNet50_Weights.IMAGENET1K_V1
    assert torchvision_weights("resnet101") is tvm.ResNet101_Weights.IMAGENET1K_V1
    assert torchvision_weights("resnet50", "IMAGENET1K_V2") is tvm.ResNet50_Weights.IMAGENET1K_V2
    # a model without V1 weights falls back to DEFAULT
    assert "IMAGENET1K_V1" not in tvm.ViT_H_14_Weights.__members__
    assert torchvision_weights("vit_h_14") is tvm.ViT_H_14_Weights.DEFAULT
    with pytest.raises(ValueError, match="IMAGENET1K_V9"):
        torchvision_weights("resnet50", "IMAGENET1K_V9")


def test_other_torchvision_families():
    """The trunk is the torchvision model's own forward up to its pooling: ``features`` (and for
    DenseNet the ReLU its forward applies after them), with the classifier's input width."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    for name, width in (("mobilenet_v3_small", 576), ("densenet121", 1024)):
        body, channels = create_backbone(f"torchvision:{name}")
        reference = getattr(torchvision.models, name)().eval()
        missing, unexpected = reference.load_state_dict(body.state_dict(), strict=False)
        assert not unexpected and all(k.startswith("classifier.") for k in missing)  # the whole trunk loaded
        with torch.no_grad():
            expected = reference.features(x)
            expected = torch.relu(expected) if name == "densenet121" else expected
            torch.testing.assert_close(body.eval()(x), expected, rtol=0, atol=0)
        assert channels == width and expected.shape == (2, width, 2, 2)
    with pytest.raises(ValueError, match="timm:swin_t"):
        create_backbone("torchvision:swin_t")


@pytest.mark.parametrize(
    "name,match",
    [
        ("resnet50", "torchvision:resnet50"),
        ("caffe:resnet50", "unknown backbone source"),
        ("torchvision:resnet5000", "unknown torchvision"),
        ("timm:not_a_model_xyz", "unknown timm model"),
        ("small:huge", "small:cnn"),
    ],
)
def test_bad_names_raise_with_syntax(name, match):
    with pytest.raises(ValueError, match=match):
        create_backbone(name)


def test_bad_pretrained_options():
    with pytest.raises(ValueError, match="no pretrained weights"):
        create_backbone("small:cnn", pretrained=True)
    with pytest.raises(ValueError, match="pretrained=True"):
        create_backbone("torchvision:resnet18", weights="IMAGENET1K_V1")


def test_missing_timm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # makes `import timm` fail
    with pytest.raises(ImportError, match="pip install timm"):
        create_backbone("timm:resnet18")


def test_timm_backbones_spatial_and_tokens():
    import timm

    torch.manual_seed(0)
    body, channels = create_backbone("timm:test_resnet")
    assert channels == timm.create_model("test_resnet").num_features
    out = body.eval()(torch.randn(2, 3, 64, 64))
    assert out.ndim == 4 and out.shape[:2] == (2, channels)

    body, channels = create_backbone("timm:test_vit")
    x = torch.randn(2, 3, 160, 160)
    net = SPMLNet(body, channels, 4).eval()
    with torch.no_grad():
        tokens = body(x)
        assert tokens.ndim == 3 and tokens.shape[2] == channels
        torch.testing.assert_close(net.features(x), tokens.mean(dim=1))


def test_spmlnet_logits_by_hand_and_pooling():
    torch.manual_seed(0)
    net = SPMLNet(nn.Identity(), feat_dim=3, num_classes=2).double()
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    w = net.head.weight.detach().numpy()
    b = net.head.bias.detach().numpy()
    xn = x.numpy()
    expected = np.zeros((2, 2))
    for n in range(2):
        for c in range(2):
            total = b[c]
            for k in range(3):
                total += w[c, k] * sum(xn[n, k, i, j] for i in range(4) for j in range(5)) / 20
            expected[n, c] = total
    np.testing.assert_allclose(net(x).logits.detach().numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(net.features(x).detach().numpy(), xn.mean(axis=(2, 3)), rtol=1e-12)
    # tokens and vectors
    tok = torch.randn(2, 7, 3)
    torch.testing.assert_close(global_average_pool(tok), tok.mean(1))
    vec = torch.randn(2, 3)
    assert global_average_pool(vec) is vec
    with pytest.raises(ValueError, match="backbone output"):
        global_average_pool(torch.randn(1, 2, 3, 4, 5))


def test_spmlnet_gradcheck_float64():
    torch.manual_seed(0)
    net = SPMLNet(nn.Conv2d(3, 4, 3, padding=1), feat_dim=4, num_classes=3).double()
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda inputs: net(inputs).logits, (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spmlnet_finite_logits_at_extremes(dtype):
    net = SPMLNet(nn.Identity(), feat_dim=3, num_classes=2).to(dtype)
    with torch.no_grad():
        net.head.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]))
        net.head.bias.zero_()
    x = torch.zeros(2, 3, 2, 2, dtype=dtype)
    x[0, 0] = 50.0
    x[1, 0] = -50.0
    logits = net(x).logits
    assert torch.equal(logits, torch.tensor([[50.0, -50.0], [-50.0, 50.0]], dtype=dtype))
    assert torch.isfinite(torch.sigmoid(logits)).all()


def test_spmlnet_input_validation():
    net = SPMLNet(nn.Identity(), feat_dim=3, num_classes=2)
    with pytest.raises(ValueError, match=r"\[B, channels, H, W\]"):
        net(torch.randn(3, 4, 4))
    with pytest.raises(ValueError, match="feat_dim=5"):
        SPMLNet(nn.Identity(), feat_dim=5, num_classes=2)(torch.randn(1, 3, 2, 2))
    with pytest.raises(ValueError, match="num_classes"):
        SPMLNet(nn.Identity(), feat_dim=3, num_classes=0)


def test_param_groups_and_head_multiplier():
    torch.manual_seed(0)
    net = build_model("small:cnn", 10)
    groups = net.param_groups(1e-4, head_lr_mult=10.0)
    assert [g["name"] for g in groups] == ["backbone", "head"]
    assert groups[0]["lr"] == 1e-4 and groups[1]["lr"] == pytest.approx(1e-3, rel=1e-12)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(net.parameters()))
    assert {id(p) for p in groups[1]["params"]} == {id(net.head.weight), id(net.head.bias)}
    torch.optim.Adam(groups)  # accepted by an optimiser
    with pytest.raises(ValueError, match="head_lr_mult"):
        net.param_groups(1e-3, head_lr_mult=0)
    with pytest.raises(ValueError, match="lr"):
        net.param_groups(-1.0)


def test_freeze_backbone_keeps_batchnorm_in_eval():
    torch.manual_seed(0)
    net = build_model("small:cnn", 10)
    net.freeze_backbone(True)
    net.train()
    assert net.training and net.head.training
    assert not any(m.training for m in net.backbone.modules())
    assert all(not p.requires_grad for p in net.backbone.parameters())
    bn = net.backbone.stem[1]
    before = bn.running_mean.clone()
    loss = net(torch.randn(8, 3, 32, 32)).logits.sum()
    loss.backward()
    assert torch.equal(bn.running_mean, before)  # statistics untouched
    assert net.head.weight.grad is not None
    assert all(p.grad is None for p in net.backbone.parameters())
    assert [g["name"] for g in net.param_groups(1e-3)] == ["head"]

    net.freeze_backbone(False)
    assert all(p.requires_grad for p in net.backbone.parameters())
    assert all(m.training for m in net.backbone.modules())
    net(torch.randn(8, 3, 32, 32))
    assert not torch.equal(bn.running_mean, before)


def test_small_cnn_shapes_and_learning():
    torch.manual_seed(0)
    net = build_model("small:cnn", 10)
    assert net.feat_dim == 128
    assert net.backbone(torch.randn(2, 3, 32, 32)).shape == (2, 128, 2, 2)
    x = torch.randn(16, 3, 32, 32)
    y = (torch.rand(16, 10) < 0.3).float()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = nn.functional.binary_cross_entropy_with_logits(net(x).logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_build_model_with_lgconv():
    torch.manual_seed(0)
    net = build_model("small:cnn", 4, lgconv=True, lgconv_options={"gamma_init": "normal"})
    assert count_lgconv(net) == 8
    assert net(torch.randn(2, 3, 32, 32)).logits.shape == (2, 4)
    with pytest.raises(ValueError, match="lgconv=False"):
        build_model("small:cnn", 4, lgconv_options={"heads": 4})
