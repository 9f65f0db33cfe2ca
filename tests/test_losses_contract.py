"""The loss contract: declared capabilities, registry, reductions, input validation, PU-MLC's τ.

Every registered loss is exercised through the same calls a trainer makes, so a loss added
later is covered without touching this file (the family tables below say which reduction
rule applies to it).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from spmlkit import losses
from spmlkit.losses import PseudoLabels
from spmlkit.losses.batchwise import pu_mixup_consistency

torch.set_num_threads(1)

ALL = sorted(losses.available())
ELEMENTWISE = [
    "bce", "iun", "an", "an_ls", "n_ls", "wan", "dw", "entmin", "focal", "asl", "hill",
    "splc", "em", "em_apl", "gr", "ll_r", "ll_ct", "ll_cp",
]
SETWISE = ["zlpr", "opml", "opml_soft"]
#: batch-wise losses whose regulariser belongs to the whole batch: no "none"
BATCH_TERM = ["epr", "role"]
#: losses of the model's latent codes as well as its logits; reduced per entry like the element-wise ones
LATENT = ["mime"]
#: LAC's two stages: losses of two augmented views (and label-wise embeddings), image runs only; a sum of
#: differently normalised terms, "mean" only too
TWO_VIEWS = ["lac", "plc"]
B, C = 5, 4


def build(name: str, **kwargs) -> losses.SPMLLoss:
    """``losses.create`` with the data arguments a trainer would fill for a B x C batch."""
    if "num_train" in losses.data_arguments(name):
        kwargs.setdefault("num_train", B)
        kwargs.setdefault("num_classes", C)
    if name == "crisp":  # the training split's observed labels: one positive per row
        kwargs.setdefault("observed", torch.eye(C)[torch.tensor([0, 1, 2, 3, 0, 1])])
    fn = losses.create(name, **kwargs).double()
    if name == "opml_soft":
        fn.set_class_ap(torch.tensor([0.9, 0.5, 0.3, 0.7]))
    if name == "crisp":
        fn.set_epoch(2, 10)  # past the warm-up: the risk with the estimated priors
        fn.set_class_prior(torch.tensor([0.6, 0.3, 0.2, 0.45]))
    if name in ("splc", "ll_r", "ll_ct", "ll_cp", "gr"):
        fn.set_epoch(3, 10)  # their special branches are active from here on
    return fn


def call(fn: losses.SPMLLoss, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Forward with the context the loss declares it reads (``reads``)."""
    reads, context = type(fn).reads, {}
    if "index" in reads:
        context["index"] = torch.arange(z.shape[0])
    if "pseudo" in reads:  # APL's soft pseudo-negatives
        gen = torch.Generator().manual_seed(2)
        context["pseudo"] = PseudoLabels(torch.rand(z.shape, generator=gen) < 0.5,
                                         torch.rand(z.shape, generator=gen).double())
    if "strong" in reads:  # LAC/PLC: a strong view of the same rows, and label-wise embeddings of both views
        gen = torch.Generator().manual_seed(3)
        context["strong"] = z + torch.randn(z.shape, generator=gen, dtype=z.dtype)
        if "embeddings" in reads:
            emb = torch.randn(2, *z.shape, 3, generator=gen, dtype=z.dtype)
            context["embeddings"] = torch.nn.functional.normalize(emb, dim=-1)
    if "latent" in reads:  # MIME: Gaussian codes of width 3 per row and class
        gen = torch.Generator().manual_seed(3)
        context["latent"] = (torch.randn(*z.shape, 3, generator=gen).to(z.dtype),
                             torch.rand(*z.shape, 3, generator=gen).to(z.dtype) + 0.5)
    return fn(z, y, **context)


def batch(seed: int = 0, rows: int = B, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    z = (2.0 * torch.randn(rows, C, generator=gen)).to(dtype)
    y = torch.randint(-1, 2, (rows, C), generator=gen).to(dtype)
    y[:, 0] = 1.0
    return z, y


def close(a: torch.Tensor, b: torch.Tensor | float) -> None:
    b = b.detach() if isinstance(b, torch.Tensor) else b
    assert float(a.detach()) == pytest.approx(float(b), rel=1e-12, abs=1e-12)


# --------------------------------------------------------------------------- declarations / registry
def test_families_cover_every_registered_loss():
    assert sorted(ELEMENTWISE + SETWISE + BATCH_TERM + TWO_VIEWS + LATENT + ["highrank", "pu_mlc", "crisp"]) == ALL


def test_capabilities_are_declared_on_the_class():
    cls = {name: type(build(name)) for name in ALL}
    assert {name: cls[name].reads for name in ALL if cls[name].reads} == {
        "role": ("index",), "em_apl": ("pseudo",), "plc": ("strong",), "lac": ("strong", "embeddings"),
        "mime": ("latent",)}
    assert {name for name in ALL if cls[name].corrects_labels} == {"ll_cp"}
    assert {name for name in ALL if losses.data_arguments(name)} == {"role", "crisp"}
    assert losses.data_arguments("role") == ("num_train", "num_classes", "observed", "seed")
    assert losses.data_arguments("crisp") == ("observed",)


def test_a_loss_receives_exactly_what_it_reads():
    """The context is by name, and a loss is given only what its class declares: a loop may hand every
    loss the same context (AN ignores the indices ROLE reads), a name that is no context (a typo) is
    refused rather than ignored, and a loss may read only what a method can hand it."""
    z, y = batch()
    seen = {}

    class Peek(losses.SPMLLoss):
        reads = ("index",)

        def loss(self, logits, labels, ctx):
            seen["index"] = ctx.index
            with pytest.raises(AttributeError, match="reads 'pseudo' without declaring it"):
                ctx.pseudo  # noqa: B018
            return logits.sum()

    Peek()(z, y, index=torch.arange(B), pseudo=None)
    assert torch.equal(seen["index"], torch.arange(B))
    close(losses.create("an")(z, y, index=torch.arange(B)), losses.create("an")(z, y))
    with pytest.raises(TypeError, match=r"loss 'role' got indx, which is no context a loss reads: the context is "
                                        r"pseudo, index, strong, embeddings, latent \(this loss reads index\)"):
        build("role")(z, y, indx=torch.arange(B))
    with pytest.raises(RuntimeError, match=r"loss 'peek' declares that it reads \['features'\]; a loss may read "
                                           r"pseudo, index, strong, embeddings, latent"):
        losses.register("peek", "reads what no method gives", method=False)(
            type("Peek", (losses.SPMLLoss,), {"reads": ("features",)}))
    assert "peek" not in losses.available()


def test_hyperparameters_list_only_what_a_user_tunes():
    for name in ALL:
        hp = losses.hyperparameters(name)
        assert not set(hp) & ({"reduction", "validate_args"} | set(losses.data_arguments(name))), name
    assert losses.hyperparameters("role") == {"expected_num_pos": 1.5, "lr_mult": 10.0}
    assert losses.hyperparameters("an") == {}
    assert losses.hyperparameters("em_apl") == {"alpha": 0.1, "beta": 0.9}
    assert losses.hyperparameters("crisp") == {"lam": 0.0, "warmup_epochs": 1}
    assert losses.hyperparameters("mime") == {"beta": 1e-4, "numerics": "stable"}


def test_create_accepts_data_arguments_and_options_and_names_the_valid_ones():
    fn = losses.create("role", num_train=3, num_classes=2, seed=4, lr_mult=2.0, reduction="sum", validate_args=False)
    assert (fn.reduction, fn.validate_args, fn.seed, fn.lr_mult) == ("sum", False, 4, 2.0)
    with pytest.raises(ValueError) as err:
        losses.create("role", num_train=3, num_classes=2, learning_rate=1.0)
    message = str(err.value)
    for word in ("learning_rate", "expected_num_pos", "lr_mult", "num_train", "observed", "reduction", "validate_args"):
        assert word in message
    with pytest.raises(ValueError, match="reduction must be one of 'mean', 'sum', 'none', got 'avg'"):
        losses.create("an", reduction="avg")
    with pytest.raises(TypeError, match="validate_args must be True or False"):
        losses.create("an", validate_args="no")


def test_default_hooks_do_nothing():
    fn, other = losses.create("an"), losses.create("em")
    assert fn.param_groups(0.1) == []
    assert fn.corrections(*batch()) is None
    assert fn.extra_state() == {}
    fn.load_extra_state({})
    with pytest.raises(ValueError, match="keeps no extra state"):
        fn.load_extra_state({"class_ap": [0.5]})
    fn.set_epoch(2, 10)
    fn.transfer_from(other)
    z, y = batch()
    close(fn(z, y), losses.create("an")(z, y))  # none of the hooks changed the loss


def test_ll_cp_corrections_are_a_pure_function_of_the_step():
    """LL-Cp's permanent corrections come from a call of their own, not from state the forward
    leaves behind: the same inputs give the same mask, and the forward stores nothing."""
    fn = losses.create("ll_cp", delta_rel=40.0)
    fn.set_epoch(2, 10)
    z, y = batch(1)
    mask = fn.corrections(z, y)
    assert mask.dtype == torch.bool and mask.shape == (B, C)
    assert bool(mask.any()) and not bool((mask & (y != 0)).any())  # only unobserved entries
    before = dict(vars(fn))
    fn(z, y)
    assert vars(fn).keys() == before.keys() and torch.equal(fn.corrections(z, y), mask)


def test_role_transfer_from_copies_the_estimate():
    first = losses.create("role", num_train=B, num_classes=C, seed=1)
    second = losses.create("role", num_train=B, num_classes=C, seed=2)
    with torch.no_grad():
        first.estimator.phi.mul_(3.0)
    assert not torch.allclose(first.estimator.phi, second.estimator.phi)
    second.transfer_from(first)
    torch.testing.assert_close(second.estimator.phi, first.estimator.phi, atol=1e-5, rtol=0)
    with pytest.raises(TypeError, match="another 'role' loss"):
        second.transfer_from(losses.create("an"))
    assert second.param_groups(1e-3)[0]["params"][0] is second.estimator.phi


# --------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("name", ELEMENTWISE + LATENT)
def test_elementwise_reductions_agree(name):
    z, y = batch(3)
    mean, total, each = (call(build(name, reduction=r), z, y) for r in ("mean", "sum", "none"))
    assert mean.dim() == 0 and total.dim() == 0 and each.shape == (B, C)
    close(each.sum() / (B * C), mean)
    close(each.sum(), total)


@pytest.mark.parametrize("name", SETWISE)
def test_setwise_reductions_agree(name):
    z, y = batch(4)
    for extra in ({}, {"a": 2.0, "b": 0.5, "subtract_min": True}) if name != "zlpr" else ({},):
        mean, total, each = (call(build(name, reduction=r, **extra), z, y) for r in ("mean", "sum", "none"))
        assert each.shape == (B,)
        close(each.mean(), mean)
        close(each.sum(), total)


@pytest.mark.parametrize("name", TWO_VIEWS)
def test_mean_only_losses_refuse_sum_and_none_when_built(name):
    for reduction in ("sum", "none"):
        with pytest.raises(ValueError, match=f"reduction must be one of 'mean', got '{reduction}'"):
            build(name, reduction=reduction)


@pytest.mark.parametrize("name", BATCH_TERM)
def test_batch_term_losses_sum_scales_the_mean_and_reject_none(name):
    z, y = batch(5)
    close(call(build(name, reduction="sum"), z, y), B * C * call(build(name), z, y))
    with pytest.raises(ValueError, match="reduction must be one of 'mean', 'sum', got 'none'.*whole batch"):
        build(name, reduction="none")


@pytest.mark.parametrize("rows", [7, 2])  # B > C and B < C (repeated eigenvalue δ)
def test_highrank_reductions_are_per_eigen_direction(rows):
    z, y = batch(6, rows=rows)
    mean, total = (call(build("highrank", lam=0.3, reduction=r), z, y) for r in ("mean", "sum"))
    zz = z.clone().requires_grad_(True)
    each = build("highrank", lam=0.3, reduction="none")(zz, y)
    assert each.shape == (C,)
    assert float(each.detach().mean()) == pytest.approx(float(mean), abs=1e-10)
    assert float(each.detach().sum()) == pytest.approx(float(total), abs=1e-10)
    close(total, C * mean)
    each.sum().backward()
    assert torch.isfinite(zz.grad).all()


def test_pu_mlc_reductions_are_per_class():
    z, y = batch(7)
    mean, total, each = (call(build("pu_mlc", reduction=r), z, y) for r in ("mean", "sum", "none"))
    assert each.shape == (C,)
    close(each.sum(), mean)
    close(total, mean)  # the paper's form is already a sum over classes


def test_crisp_reductions_are_per_class():
    z, y = batch(9)
    mean, total, each = (call(build("crisp", reduction=r), z, y) for r in ("mean", "sum", "none"))
    assert each.shape == (C,)
    close(each.mean(), mean)  # the classes' mean, the scale of the AN warm-up's BC-mean
    close(each.sum(), total)  # the paper's sum over classes


def test_mixup_reductions():
    z, y = batch(8, rows=6)
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = torch.randn(3, C, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mean, total, each = (
        pu_mixup_consistency(lambda t: t @ w, x, z, y, lam=0.4, generator=torch.Generator().manual_seed(3), reduction=r)
        for r in ("mean", "sum", "none")
    )
    assert each.shape == (3, C)
    close(each.sum(), total)
    close(each.sum() / 3, mean)
    assert pu_mixup_consistency(lambda t: t @ w, x[:1], z[:1], y[:1], reduction="none").shape == (0, C)
    with pytest.raises(ValueError, match="reduction"):
        pu_mixup_consistency(lambda t: t @ w, x, z, y, reduction="avg")


# --------------------------------------------------------------------------- input validation
@pytest.mark.parametrize("name", ALL)
def test_every_loss_rejects_bad_label_values_the_same_way(name):
    z, y = batch(9)
    y[2, 1] = 7.0
    expected = (
        f"loss '{name}': labels may only contain 1 (observed positive), 0 (unobserved) and -1 "
        "(observed negative); found 7.0 (1 bad entries)"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        call(build(name), z, y)
    # the value check is what validate_args=False skips (it reads the labels on the host)
    assert call(build(name, validate_args=False), z, y).dim() == 0


@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("name", ALL)
def test_every_loss_rejects_an_empty_batch_by_name(name, validate_args):
    fn = build(name, validate_args=validate_args)
    with pytest.raises(ValueError, match=f"loss '{name}': got an empty batch"):
        call(fn, torch.zeros(0, C, dtype=torch.float64), torch.zeros(0, C, dtype=torch.float64))


def test_shape_and_dtype_checks_run_even_without_validate_args():
    fn = losses.create("zlpr", validate_args=False)
    with pytest.raises(ValueError, match="does not match logits shape"):
        fn(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(TypeError, match="floating point"):
        fn(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3))


# --------------------------------------------------------------------------- PU-MLC temperature
def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_pu_mlc_one_row_batch_is_untempered_and_moderate():
    z, y, gamma = [0.7, -0.3, 1.2, -2.0], [1, 0, -1, 0], 0.55
    # τ = 1 for every column: q = σ(z), mean over one row is q itself
    expected = sum(
        _sig(v) ** gamma * math.log(_sig(v)) - (math.log(_sig(v)) if t == 1 else 0.0) for v, t in zip(z, y)
    )
    for numerics in ("stable", "reference"):
        value = losses.create("pu_mlc", gamma=gamma, numerics=numerics)(
            torch.tensor([z], dtype=torch.float64), torch.tensor([y], dtype=torch.float64)
        )
        assert float(value) == pytest.approx(expected, abs=1e-9)
        assert abs(float(value)) < 10  # the floored τ gave thousands here


def test_pu_mlc_constant_column_matches_untempered_hand_value():
    z = torch.tensor([[0.5, -1.0], [-0.5, -1.0], [1.5, -1.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    gamma, alpha = 0.55, 1.0
    col0 = [0.5, -0.5, 1.5]
    tau0 = min(alpha * (sum((v - 0.5) ** 2 for v in col0) / 3) ** 0.5, 1.0)
    q0 = [_sig(v / tau0) for v in col0]
    m0 = sum(q0) / 3
    expected = m0**gamma * math.log(m0) - math.log(q0[0])
    q1 = _sig(-1.0)  # constant column: τ = 1
    expected += q1**gamma * math.log(q1) - math.log(q1)
    value = losses.create("pu_mlc", gamma=gamma, alpha=alpha)(z, y)
    assert float(value) == pytest.approx(expected, abs=1e-9)


def test_pu_mlc_float16_constant_column_is_finite():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(6, 4, generator=gen).to(torch.float16)
    z[:, 1] = -3.0
    y = torch.randint(-1, 2, (6, 4), generator=gen).to(torch.float16)
    y[:, 1] = 1.0
    for numerics in ("stable", "reference"):
        zz = z.clone().requires_grad_(True)
        value = losses.create("pu_mlc", numerics=numerics)(zz, y)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(zz.grad).all(), numerics
