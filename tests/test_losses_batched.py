"""Every loss that declares ``batchable`` takes logits ``[R, B, C]`` and treats each leading index
as its own problem: its value (for every reduction), its gradient and its corrections equal the R
separate calls (docs/architecture.md, "Many runs at once").

Per-problem state (ROLE's label estimator, soft OPML's class AP, CRISP's priors) is stacked into one module with
``torch.func.functional_call``, as the trainer's stacked tensors take one run's place for R runs. Computed in float64 on the CPU, the
batched values equal the separate ones to 1e-12 (measured: exactly, for all but the high-rank
term's batched Cholesky)."""

from __future__ import annotations


import pytest
import torch
from torch.func import functional_call

from spmlkit import losses
from spmlkit.losses import PseudoLabels
from spmlkit.losses.batchwise import draw_pu_mixing, pu_mixup_consistency
from spmlkit.training.batched import is_data_buffer

R, B, C = 3, 6, 5
TOL = 1e-12


def _problems(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, PseudoLabels]:
    gen = torch.Generator().manual_seed(seed)
    z = 2.0 * torch.randn(R, B, C, generator=gen, dtype=torch.float64)
    y = torch.randint(-1, 2, (R, B, C), generator=gen).double()
    y[..., 0] = 1.0
    index = torch.stack([torch.randperm(B * 2, generator=gen)[:B] for _ in range(R)])
    pseudo = PseudoLabels(torch.rand(R, B, C, generator=gen) < 0.5, torch.rand(R, B, C, generator=gen).double())
    return z, y, index, pseudo


def _latent(shared: bool, seed: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian codes of width 3 (means, standard deviations) for R problems: per row and class, or
    one per row (``shared``: a bottleneck on features every class shares)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (R, B, 3) if shared else (R, B, C, 3)
    return torch.randn(shape, generator=gen, dtype=torch.float64), torch.rand(shape, generator=gen).double() + 0.5


def _losses(name: str, reduction: str) -> list[losses.SPMLLoss]:
    """R instances of loss ``name``, each with its own state where the loss keeps one."""
    out = []
    for r in range(R):
        kwargs = {"num_train": B * 2, "num_classes": C, "seed": r} if "num_train" in losses.data_arguments(name) else {}
        if name == "crisp":  # each run its own observed matrix (one positive per row) and its own priors
            kwargs["observed"] = torch.nn.functional.one_hot(torch.arange(r, r + 4 * B) % (C - r), C)
        fn = losses.create(name, reduction=reduction, **kwargs).double()
        if name == "opml_soft":
            fn.set_class_ap(torch.linspace(0.1 + 0.2 * r, 0.9, C))
        if name == "crisp":
            fn.set_epoch(2, 10)
            fn.set_class_prior(torch.linspace(0.05 + 0.2 * r, 0.7, C))
        if name in ("splc", "ll_r", "ll_ct", "ll_cp", "gr"):
            fn.set_epoch(3, 10)
        out.append(fn)
    return out


def _stacked(fns: list[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """The R modules' parameters and buffers stacked, as the trainer stacks them (the buffers a module
    declares as data stay the first module's: every run shares them)."""
    states = [dict(fn.named_parameters()) | dict(fn.named_buffers()) for fn in fns]
    return {k: torch.stack([s[k] for s in states]) for k in states[0] if not is_data_buffer(fns[0], k)}


BATCHABLE = [n for n in sorted(losses.available()) if losses.loss_class(n).batchable]
#: built-in losses that train one run at a time, and why: LAC's two-view losses train image runs only
#: (one at a time) and keep a memory queue that a step updates
ALONE = {"plc", "lac"}


def test_every_built_in_loss_is_batchable_but_those_that_say_why_not() -> None:
    assert BATCHABLE == sorted(set(losses.available()) - ALONE)


@pytest.mark.parametrize("name", BATCHABLE)
def test_a_loss_of_r_problems_equals_its_r_separate_losses(name: str) -> None:
    cls = losses.loss_class(name)
    for reduction in cls.reductions:
        fns = _losses(name, reduction)
        z, y, index, pseudo = _problems()
        z = z.requires_grad_()
        latent = _latent(shared=False)
        given = {"index": index, "pseudo": pseudo, "latent": latent}
        context = {k: given[k] for k in cls.reads}
        together = functional_call(fns[0], _stacked(fns), (z, y), context)
        apart = []
        for r, fn in enumerate(fns):
            solo = {"index": index[r], "pseudo": PseudoLabels(pseudo.mask[r], pseudo.target[r]),
                    "latent": (latent[0][r], latent[1][r])}
            apart.append(fn(z[r], y[r], **{k: solo[k] for k in cls.reads}))
        apart = torch.stack(apart)
        assert together.shape == apart.shape, (name, reduction)
        assert torch.allclose(together, apart, atol=TOL, rtol=0), (name, reduction)
        (g_together,) = torch.autograd.grad(together.sum(), z)
        (g_apart,) = torch.autograd.grad(apart.sum(), z)
        assert torch.allclose(g_together, g_apart, atol=TOL, rtol=0), (name, reduction)


def test_ll_cp_corrections_of_r_problems_equal_their_separate_corrections() -> None:
    fns = _losses("ll_cp", "mean")
    z, y, _, _ = _problems(1)
    together = fns[0].corrections(z, y)
    assert together.shape == (R, B, C)
    for r, fn in enumerate(fns):
        assert torch.equal(together[r], fn.corrections(z[r], y[r]))


def test_the_mixup_term_of_r_problems_equals_its_separate_terms() -> None:
    z, y, _, _ = _problems(2)
    gen = torch.Generator().manual_seed(0)
    weights = torch.randn(R, 4, C, generator=gen, dtype=torch.float64)
    x = torch.randn(R, B, 4, generator=gen, dtype=torch.float64)
    draws = [draw_pu_mixing(B, torch.Generator().manual_seed(r)) for r in range(R)]
    perms = torch.stack([p for p, _ in draws])
    lams = torch.tensor([lam for _, lam in draws], dtype=torch.float64)
    together = pu_mixup_consistency(lambda inputs: inputs @ weights, x, z, y, perm=perms, lam=lams)
    apart = torch.stack([pu_mixup_consistency(lambda inputs, r=r: inputs @ weights[r], x[r], z[r], y[r],
                                              perm=draws[r][0], lam=draws[r][1]) for r in range(R)])
    assert torch.allclose(together, apart, atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="pass each problem's perm and lam"):
        pu_mixup_consistency(lambda inputs: inputs @ weights, x, z, y)
    with pytest.raises(ValueError, match="one permutation of range"):  # one shared by every problem is not one each
        pu_mixup_consistency(lambda inputs: inputs @ weights, x, z, y, perm=perms[:1], lam=lams)


def test_shapes_without_a_batch_or_classes_are_refused() -> None:
    fn = losses.create("an")
    with pytest.raises(ValueError, match=r"\[batch, classes\]"):
        fn(torch.zeros(4), torch.zeros(4))
    with pytest.raises(ValueError, match="empty batch"):
        fn(torch.zeros(R, 0, C), torch.zeros(R, 0, C))


def test_soft_opml_of_r_problems_is_bit_identical_to_its_separate_losses_in_float32() -> None:
    """The trust AP^r is taken per run when its AP is set, so R stacked runs weigh their logits
    with exactly a solo run's trust: a power over the stacked [R, C] AP (most entries through the
    CPU's vector code, a solo run's 14 through its scalar code) differed in the last bit, and
    OPML-SP's weights after 20 epochs by 1.9e-6 (docs/architecture.md, "Many runs at once")."""
    runs, classes = 9, 14
    gen = torch.Generator().manual_seed(3)
    aps = torch.rand(runs, classes, generator=gen)
    fns = [losses.create("opml_soft", a=16.0, b=0.25, r=4.0) for _ in range(runs)]
    for fn, ap in zip(fns, aps):
        fn.set_class_ap(ap)
    z = torch.randn(runs, 16, classes, generator=gen).requires_grad_()
    y = torch.zeros(runs, 16, classes)
    y[..., 0] = 1.0
    together = functional_call(fns[0], _stacked(fns), (z, y))
    apart = torch.stack([fn(z[r], y[r]) for r, fn in enumerate(fns)])
    assert torch.equal(together, apart)
    (g_together,) = torch.autograd.grad(together.sum(), z)
    (g_apart,) = torch.autograd.grad(apart.sum(), z)
    assert torch.equal(g_together, g_apart)
    assert torch.equal(fns[0].trust, aps[0].double().pow(4.0))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mime_of_r_problems_with_one_code_per_row_equals_its_separate_losses(reduction: str) -> None:
    """The feature-run form of MIME's KL term (one code per row, shared by its classes) batches too."""
    fns = _losses("mime", reduction)
    z, y, _, _ = _problems(5)
    mu, std = _latent(shared=True)
    mu.requires_grad_()
    together = functional_call(fns[0], _stacked(fns), (z, y), {"latent": (mu, std)})
    apart = torch.stack([fn(z[r], y[r], latent=(mu[r], std[r])) for r, fn in enumerate(fns)])
    assert together.shape == apart.shape and torch.allclose(together, apart, atol=TOL, rtol=0)
    (g_together,) = torch.autograd.grad(together.sum(), mu)
    (g_apart,) = torch.autograd.grad(apart.sum(), mu)
    assert torch.allclose(g_together, g_apart, atol=TOL, rtol=0)
