"""PU-MLC's local-global convolution (LgConv).

Yuan, Zhang, Huang, "Positive Label Is All You Need for Multi-Label Classification", ICME 2024
(docs/methods.md, "pu_mlc"; docs/protocol.md, "PU-MLC code differs from the paper"). Each
3x3 convolution of a pretrained backbone becomes

    y = conv3x3(x) + G(x)

where the 3x3 conv keeps its pretrained weights (local context) and ``G`` adds a cheap,
attention-pooled *global* context per spatial position. ``G`` ends in a BatchNorm whose scale
starts at about 1e-4, so the converted network initially computes (almost) exactly what the
pretrained one did and the new branch is learned from there.

Which convolutions are converted (:func:`convert_lgconv`): every ``nn.Conv2d`` (subclasses
included) with a 3x3 kernel, ``groups == 1``, "same" padding (``padding == dilation`` per axis,
or ``padding="same"``) so that the 1x1 branch with the conv's stride yields the same output
size, and ``in_channels`` divisible by the number of heads (8). Everything else is left as
it is: depthwise/grouped 3x3 convs, other kernel sizes, "valid"-padded convs (timm's
dynamic-"same" ``Conv2dSame`` has ``padding=0`` and falls here), and convs with too few or
indivisible input channels -- in practice an RGB stem ``3 -> C``; ResNet stems are 7x7 anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LgConv", "convert_lgconv", "count_lgconv", "lgconv_branch_parameters", "skip_reason"]

logger = logging.getLogger(__name__)

_GAMMA_INITS = ("constant", "normal")


def skip_reason(conv: nn.Module, heads: int = 8) -> str | None:
    """Why ``conv`` cannot be converted to :class:`LgConv` (``None`` when it can)."""
    if not isinstance(conv, nn.Conv2d):
        return f"not an nn.Conv2d ({type(conv).__name__})"
    if tuple(conv.kernel_size) != (3, 3):
        return f"kernel {tuple(conv.kernel_size)} is not 3x3"
    if conv.groups != 1:
        return f"groups={conv.groups} (only groups=1 is converted)"
    padding = conv.padding
    if isinstance(padding, str):
        if padding != "same":
            return f"padding={padding!r} changes the output size"
    elif tuple(padding) != tuple(conv.dilation):
        return (
            f"padding {tuple(padding)} != dilation {tuple(conv.dilation)}: the output size "
            "differs from the 1x1 branch's"
        )
    if conv.in_channels % heads != 0:
        return f"in_channels={conv.in_channels} is not divisible by heads={heads}"
    return None


class LgConv(nn.Module):
    """``y = conv3x3(x) + G(x)``: a 3x3 convolution plus a gated global-context branch.

    With ``C = in_channels``, ``K = heads`` (8), ``r = reduction`` (4) and ``[B, C, H, W]`` input:

    * context ``h = ReLU(conv1x1(x -> C // r))``, concatenated with its spatial mean broadcast
      to every position -> ``ctx`` (``2·(C // r)`` channels): what each position sees and
      what the whole image looks like;
    * aggregation weights ``a = softmax_{HW}(conv1x1(ctx -> K))`` and gates
      ``g = σ(conv1x1(ctx -> K))``, one map per head;
    * values ``v = conv1x1(x -> C)`` split into K heads of ``C / K`` channels; per head the
      global vector ``u_k = Σ_p a_k(p) · v_k(p)`` is broadcast back as ``u_k · g_k(p)``;
    * ``G(x) = BN(conv1x1(x + that, C -> C_out, stride = conv.stride))``.

    The BN scale γ starts near zero -- ``gamma_init="constant"``: γ = ``gamma`` (the paper,
    1e-4); ``"normal"``: γ ~ N(0, ``gamma``²) from the global torch RNG (the official code) --
    and β = 0, so ``G(x) ≈ 0`` at the start and the pretrained features are undisturbed.
    The 1x1 convs inside G have biases; the projection has none (BN follows) unless
    ``project_bias=True``, as in the official code: a BatchNorm in training mode removes a
    constant bias, but one kept in eval mode (the official recipe's frozen BatchNorm) does not,
    so there the bias is a real, trainable offset (docs/protocol.md, "Recipes"). Where ``C // r``
    is not an integer it is rounded down (at least 1); ``C`` must be divisible by ``heads``.
    """

    def __init__(
        self,
        conv: nn.Conv2d,
        *,
        heads: int = 8,
        reduction: int = 4,
        gamma_init: str = "constant",
        gamma: float = 1e-4,
        project_bias: bool = False,
    ) -> None:
        super().__init__()
        for label, value in (("heads", heads), ("reduction", reduction)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LgConv {label} must be a positive int, got {value!r}")
        if gamma_init not in _GAMMA_INITS:
            raise ValueError(f"gamma_init must be one of {_GAMMA_INITS}, got {gamma_init!r}")
        if not isinstance(gamma, (int, float)) or not gamma >= 0:
            raise ValueError(f"gamma must be a non-negative number, got {gamma!r}")
        reason = skip_reason(conv, heads)
        if reason is not None:
            raise ValueError(f"cannot convert {conv!r} to LgConv: {reason}")

        c_in, c_out = conv.in_channels, conv.out_channels
        hidden = max(1, c_in // reduction)
        self.heads = heads
        self.conv = conv
        self.reduce = nn.Conv2d(c_in, hidden, 1)
        self.attend = nn.Conv2d(2 * hidden, heads, 1)
        self.gate = nn.Conv2d(2 * hidden, heads, 1)
        self.value = nn.Conv2d(c_in, c_in, 1)
        self.project = nn.Conv2d(c_in, c_out, 1, stride=conv.stride, bias=bool(project_bias))
        self.norm = nn.BatchNorm2d(c_out)
        with torch.no_grad():
            if gamma_init == "constant":
                self.norm.weight.fill_(gamma)
            else:
                self.norm.weight.normal_(0.0, gamma)
            self.norm.bias.zero_()
        ref = conv.weight
        for module in (self.reduce, self.attend, self.gate, self.value, self.project, self.norm):
            module.to(device=ref.device, dtype=ref.dtype)
        self.train(conv.training)

    def global_context(self, x: torch.Tensor) -> torch.Tensor:
        """The branch ``G(x)`` alone, shape of ``conv(x)``."""
        b, c, height, width = x.shape
        h = F.relu(self.reduce(x))
        ctx = torch.cat([h, h.mean(dim=(2, 3), keepdim=True).expand_as(h)], dim=1)
        weights = self.attend(ctx).flatten(2).softmax(dim=-1)  # [B, K, HW]
        gates = torch.sigmoid(self.gate(ctx))  # [B, K, H, W]
        values = self.value(x).reshape(b, self.heads, c // self.heads, height * width)
        pooled = torch.einsum("bkcn,bkn->bkc", values, weights)  # [B, K, C/K]
        spread = pooled[..., None, None] * gates[:, :, None]  # [B, K, C/K, H, W]
        return self.norm(self.project(x + spread.reshape(b, c, height, width)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.global_context(x)

    def branch_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters of the new branch G (everything except the wrapped conv's)."""
        for module in (self.reduce, self.attend, self.gate, self.value, self.project, self.norm):
            yield from module.parameters()


def convert_lgconv(
    model: nn.Module,
    *,
    heads: int = 8,
    reduction: int = 4,
    gamma_init: str = "constant",
    gamma: float = 1e-4,
    project_bias: bool = False,
) -> nn.Module:
    """Replace every eligible 3x3 convolution of ``model`` by :class:`LgConv`, in place.

    Recurses through all children (existing ``LgConv`` modules are left alone, so converting
    twice is a no-op); eligibility is :func:`skip_reason`. A conv shared by several parents is
    replaced by one shared ``LgConv``. The converted and skipped counts are logged at INFO
    level; :func:`count_lgconv` returns the number of ``LgConv`` layers afterwards. If
    ``model`` itself is an eligible conv, the new ``LgConv`` is returned.
    """
    options = {"heads": heads, "reduction": reduction, "gamma_init": gamma_init, "gamma": gamma,
               "project_bias": project_bias}
    if isinstance(model, nn.Conv2d) and skip_reason(model, heads) is None:
        return LgConv(model, **options)
    replaced: dict[int, LgConv] = {}
    skipped: list[str] = []

    def visit(parent: nn.Module, prefix: str) -> None:
        # _modules rather than named_children(): the latter hides repeated (shared) children
        for name, child in list(parent._modules.items()):
            path = f"{prefix}{name}"
            if child is None or isinstance(child, LgConv):
                continue
            if isinstance(child, nn.Conv2d):
                if id(child) in replaced:
                    setattr(parent, name, replaced[id(child)])
                    continue
                reason = skip_reason(child, heads)
                if reason is None:
                    replaced[id(child)] = LgConv(child, **options)
                    setattr(parent, name, replaced[id(child)])
                elif tuple(child.kernel_size) == (3, 3):
                    skipped.append(f"{path}: {reason}")
                continue
            visit(child, f"{path}.")

    visit(model, "")
    logger.info(
        "LgConv: converted %d 3x3 conv(s), skipped %d%s",
        len(replaced),
        len(skipped),
        "".join(f"\n  {s}" for s in skipped),
    )
    return model


def count_lgconv(model: nn.Module) -> int:
    """Number of distinct :class:`LgConv` layers in ``model``."""
    return sum(1 for m in model.modules() if isinstance(m, LgConv))


def lgconv_branch_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """Parameters of every LgConv branch in ``model`` (PU-MLC trains these, layer4 and the
    head; docs/methods.md, "pu_mlc")."""
    for module in model.modules():
        if isinstance(module, LgConv):
            yield from module.branch_parameters()
