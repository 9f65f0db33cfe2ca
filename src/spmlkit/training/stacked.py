"""Stacked training: feature runs that differ only in seed and learning rate, trained together.

Why. A sweep of feature runs (the Yeast benchmark: 26 methods x 3 lrs x 3 seeds of a linear
head on 1,200 x 103 features, 14 classes) spends its time on per-step Python and dispatch
overhead around tiny tensors, not on arithmetic: one step of one run is a 64 x 103 by 103 x 14
product and a few dozen small operations. Runs that share their data, method, hyperparameters,
batch size and epochs can take each step together: one batched product for every run's head
(``[R, B, D] x [R, D, C]``), one loss call over the stacked logits, one update of every run's
parameters. :func:`train_stacked` does that and returns, for each config, what
:func:`~spmlkit.training.train` returns for it.

Same numbers as solo runs. Each run keeps everything a solo run has: its own initial weights
(``torch.manual_seed(seed)`` before its model is built), its own generator for the batch order
(and PU-MLC's mixup draws), its own label state, label algorithm, stopping rule and snapshots,
and the same evaluation (:func:`~spmlkit.training.trainer._evaluate`). Stacking changes only the
shape of the tensors the operations run on, and the code is arranged so that it does not
change any run's floating-point results:

* the optimiser (:class:`_StackedAdam`) applies torch's single-tensor Adam elementwise, op
  by op (``lerp_``, ``mul_``/``addcmul_``, ``sqrt``/``div_``/``add_``, then the per-run step
  ``-lr/bias_correction1`` times ``exp_avg / denom``, rounded as ``addcdiv_`` rounds it).
  Every run's parameter is one row of a padded ``[R, width]`` buffer, so each row goes
  through torch's CPU kernels exactly as the solo parameter does (vectorised body, scalar
  tail); rows also start 64-byte aligned like a fresh tensor;
* every method of the catalogue has a batched loss (:func:`_batched_loss`) that repeats the
  solo operations, in the solo order (autograd adds the gradients a tensor receives in the
  order they were created, and float addition does not associate), on ``[R, B, C]``
  tensors. It is used only for batch sizes where each run's share of every elementwise
  operation covers whole SIMD blocks (:func:`_no_tail`): a stacked tensor's vectorised loop
  then treats every element as the solo loop does, while torch's scalar tail code may round
  transcendental functions differently. Per-class ``[C]`` operations (PU-MLC, soft OPML) run
  row by row (:func:`_rowwise`). Other batch sizes compute each run's loss with the run's own
  components on its ``[B, C]`` slice, the solo code itself. Per-run sums and means are row
  reductions, which torch computes like the solo reduction;
* the head's batched product (and OPML-SP's batched Cholesky factorisations) are used only
  after a probe on this machine's BLAS/LAPACK finds them equal to the solo calls for these
  shapes (:func:`_batched_linear_is_exact`, :func:`_batched_high_rank_is_exact`); otherwise
  each run gets its own;
* everything runs with one torch thread (as sweep workers do): with more, torch splits large
  tensors between threads at places that differ from the solo tensors' splits.

Under these rules the Yeast benchmark's 234 runs equal their solo runs bit for bit (history,
val/test mAP, test metrics, analysis, label state, weights); ``tests/test_stacked.py`` checks
it per method, for batch sizes with and without scalar tails and with early stopping. What
does differ: ``seconds``, ``train_seconds``, ``epoch_seconds`` and ``images_per_second`` are the
group's times divided among its runs.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import metrics
from ..errors import user_input
from ..labeling.large_loss import rejection_count
from ..labels import Kind, LabelBatch, LabelState, PseudoLabels
from ..losses.batchwise import PU_EPS, HighRankRegularizer, _draw_beta, high_rank_regularizer
from ..losses.setwise import OPMLLoss, SoftOPMLLoss, opml_loss, soft_opml_loss
from ..losses.terms import bce_neg, bce_pos, label_masks, spine
from ..methods import ResolvedMethod, resolve_hparams
from .components import MethodComponents, build_components, expected_positives
from .config import RunConfig
from .device import num_threads
from .distributed import Distributed
from .loop import LoopParts, LoopResult, LoopState, StoppingRule, restore
from .result import RunResult
from .run_data import RunData, is_feature_run, load_run_data
from .sources import FeatureSource
from .trainer import _evaluate, _protocol, _source

__all__ = ["VARYING", "stack_key", "train_stacked", "unstackable_reason"]

#: the settings stacked runs may differ in; everything else is shared
VARYING = ("seed", "lr")
#: bytes of the widest block torch's CPU kernels process without a scalar tail (two AVX-512
#: registers); a multiple of it is also a multiple of the AVX2 and default blocks
_SIMD_BYTES = 128
#: padding of each run's parameter row, in float32 elements (64 bytes: a fresh tensor's alignment)
_ROW_ALIGN = 16
_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which the trainer uses
_EPS = 1e-8


# --------------------------------------------------------------------------- who can be stacked
def unstackable_reason(config: RunConfig) -> str | None:
    """Why ``config`` must train on its own (None: it can join a stacked group).

    Stacking covers what a sweep of feature runs uses: a linear head trained with Adam on
    the CPU, in memory, in one process. Everything else is left to :func:`train`.
    """
    try:
        feature = is_feature_run(config)
    except Exception:  # noqa: BLE001 - an unknown dataset is train()'s error to report
        return "the dataset cannot be checked here"
    checks = (
        (not feature, "image runs train one at a time"),
        (config.head != "linear", "only the linear head is stacked"),
        (config.optimizer != "adam", "only Adam is stacked"),
        (config.weight_decay != 0, "weight decay is not stacked"),
        (config.linear_init_epochs != 0, "LinearInit is not stacked"),
        (config.out is not None, "a run with a run folder checkpoints on its own"),
        (config.device not in ("auto", "cpu"), "stacked runs train on the CPU"),
        (bool(config.loggers), "a run with loggers logs on its own"),
        (bool(getattr(config, "compile", False)), "compiled runs train on their own"),
        (int(os.environ.get("WORLD_SIZE", "1")) > 1, "distributed runs train on their own"),
    )
    return next((why for bad, why in checks if bad), None)


def stack_key(config: RunConfig) -> str | None:
    """What runs must share to be stacked (None when ``config`` cannot be): its settings
    without :data:`VARYING`, as text, so that configs with equal keys form one group."""
    if unstackable_reason(config) is not None:
        return None
    values = {k: v for k, v in config.to_dict().items() if k not in VARYING}
    return json.dumps(values, sort_keys=True, default=str)


def _no_tail(*counts: int, itemsize: int = 4) -> bool:
    """Whether tensors of ``counts`` elements fill whole SIMD blocks: then torch's vectorised
    loops take every element through the vector code, in a stacked tensor as in a solo one."""
    return all((n * itemsize) % _SIMD_BYTES == 0 for n in counts)


# --------------------------------------------------------------------------- parameters and Adam
class _Slot:
    """One parameter of every run, stacked: row r holds run r's values, padded to an aligned
    width, with Adam's state and work buffers in the same layout.

    ``leaf`` (``[R, *shape]``, requires grad) is what the stacked forward uses; each run's own
    ``nn.Parameter`` is pointed at its row (:meth:`row`), so its model sees every update.
    """

    def __init__(self, values: list[Tensor], lrs: list[float], state: dict[str, Tensor] | None = None,
                 steps: int = 0) -> None:
        self.shape = tuple(values[0].shape)
        self.numel = values[0].numel()
        self.lrs = list(lrs)
        self.steps = steps  # Adam's step count (torch keeps one per parameter)
        width = (self.numel // _ROW_ALIGN + 1) * _ROW_ALIGN  # > numel: rows never merge into one loop
        rows = len(values)
        self._buffers = {name: torch.zeros(rows, width) for name in ("param", "grad", "exp_avg", "exp_avg_sq",
                                                                      "denom", "update")}
        self._rows = {name: buffer[:, : self.numel] for name, buffer in self._buffers.items()}
        with torch.no_grad():
            self.rows("param").copy_(torch.stack([v.detach().reshape(-1) for v in values]))
            for name, value in (state or {}).items():
                self.rows(name).copy_(value)
        self.leaf = self.rows("param").view(rows, *self.shape).requires_grad_()

    def rows(self, name: str) -> Tensor:
        """``[R, numel]`` view of one buffer (every row starts at a 64-byte boundary)."""
        return self._rows[name]

    def row(self, r: int) -> Tensor:
        """Run ``r``'s parameter as a plain tensor sharing this slot's memory."""
        return self._buffers["param"][r, : self.numel].view(self.shape)

    def keep(self, rows: list[int]) -> _Slot:
        """The slot of the runs ``rows`` only (after others stopped early), state included."""
        index = torch.tensor(rows)
        values = list(self.rows("param")[index].view(len(rows), *self.shape))
        state = {name: self.rows(name)[index] for name in ("exp_avg", "exp_avg_sq")}
        return _Slot(values, [self.lrs[r] for r in rows], state, self.steps)


class _StackedAdam:
    """torch's single-tensor Adam (``torch.optim.Adam`` on the CPU, defaults but ``lr``) applied
    to every run's row at once, with each run's own learning rate.

    The operations are the solo ones on ``[R, numel]`` row views, which torch processes row by
    row exactly as it processes the solo parameter. The one change: ``addcdiv_`` takes a
    single scalar, and the runs' step sizes differ, so ``param + value * exp_avg / denom`` is
    written as a float32 product, a division and an addition, the three roundings of the
    kernel (``self + value * t1 / t2``, ``value`` cast to float32). As in torch, a parameter
    without a gradient is left alone and its step count does not advance.
    """

    def __init__(self, slots: list[_Slot]) -> None:
        self.slots = slots

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = _BETAS
        for slot in self.slots:
            if slot.leaf.grad is None:
                continue
            slot.steps += 1
            step = float(slot.steps)
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            bias_correction2_sqrt = bias_correction2**0.5
            grad, exp_avg, exp_avg_sq = slot.rows("grad"), slot.rows("exp_avg"), slot.rows("exp_avg_sq")
            denom, update = slot.rows("denom"), slot.rows("update")
            grad.copy_(slot.leaf.grad.reshape(grad.shape))
            slot.leaf.grad = None
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            torch.sqrt(exp_avg_sq, out=denom)
            denom.div_(bias_correction2_sqrt).add_(_EPS)
            value = torch.tensor([-(lr / bias_correction1) for lr in slot.lrs], dtype=torch.float32)
            torch.mul(exp_avg, value.unsqueeze(1), out=update)
            update.div_(denom)
            slot.rows("param").add_(update)


_LINEAR_EXACT: dict[tuple, bool] = {}


def _batched_linear_is_exact(x: Tensor, classes: int) -> bool:
    """Whether ``baddbmm`` over the stacked heads gives, for inputs laid out as ``x``
    (``[R, B, D]``, e.g. a batch of views into each run's shuffled rows), the solo ``F.linear``
    logits of every run and, through autograd, the solo weight and bias gradients, on this
    machine's BLAS. Libraries choose kernels by shape and layout, so this is checked (once per
    shape and strides, on ``x`` itself with random weights) rather than assumed; when it fails,
    each run gets its own ``F.linear``."""
    runs, batch, dim = x.shape
    key = (runs, batch, dim, classes, x.stride())
    if key not in _LINEAR_EXACT:
        _LINEAR_EXACT[key] = _probe_linear(x.detach(), classes)
    return _LINEAR_EXACT[key]


def _probe_linear(x: Tensor, classes: int) -> bool:
    """The check of :func:`_batched_linear_is_exact`: random heads and output gradients, the
    batched product and its autograd against each run's ``F.linear`` on its own copy of its rows."""
    runs, batch, dim = x.shape
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(classes, dim, generator=gen) for _ in range(runs)]
    biases = [torch.randn(classes, generator=gen) for _ in range(runs)]
    grad = torch.randn(runs, batch, classes, generator=gen)
    slots = [_Slot(weights, [0.0] * runs), _Slot(biases, [0.0] * runs)]
    stacked = torch.baddbmm(slots[1].leaf.unsqueeze(1), x, slots[0].leaf.transpose(1, 2))
    # (out * grad).sum() hands ``grad`` to out's backward exactly (1 * grad), and unlike
    # backward(grad) it does not import torch's symbolic-shape machinery (seconds)
    (stacked * grad).sum().backward()
    for r in range(runs):
        w = weights[r].clone().requires_grad_()
        b = biases[r].clone().requires_grad_()
        out = F.linear(x[r].clone(), w, b)
        (out * grad[r].clone()).sum().backward()
        if not (torch.equal(out, stacked[r]) and torch.equal(w.grad, slots[0].leaf.grad[r])
                and torch.equal(b.grad, slots[1].leaf.grad[r])):
            return False
    return True


# --------------------------------------------------------------------------- label states
def _gather_rows(table: Tensor, idx: Tensor) -> Tensor:
    """Rows ``idx`` (``[R, B]``) of a table all runs share (``[N, C]``) or of each run's own
    table (``[R, N, C]``, contiguous), as ``[R, B, C]``: one ``index_select``, several times
    faster than advanced indexing here (a copy either way, so the values are the same)."""
    runs, batch = idx.shape
    if table.dim() == 2:
        rows, flat = table, idx.reshape(-1)
    else:  # each run's rows offset by r * N in the flattened [R*N, C] table
        n = table.shape[1]
        rows = table.reshape(runs * n, table.shape[2])
        flat = (idx + torch.arange(0, runs * n, n).unsqueeze(1)).reshape(-1)
    return torch.index_select(rows, 0, flat).view(runs, batch, rows.shape[1])


# --------------------------------------------------------------------------- label states
class _StackedLabels:
    """The label states of the runs, for the stacked step.

    When the method never changes labels (no label algorithm, no per-step correction) every
    run's labels are the observed ones and a batch is one gather. Otherwise the runs' ``kind``,
    ``target`` and ``epoch`` matrices live in ``[R, N, C]`` tensors and each run's
    :class:`~spmlkit.labels.LabelState` holds views of its row, so its label algorithm writes
    where the stacked step reads.
    """

    def __init__(self, states: list[LabelState], dynamic: bool) -> None:
        self.dynamic = dynamic
        self.observed = states[0].observed.to(torch.float32)
        self.states = states
        self._zeros: dict[tuple[int, ...], tuple[Tensor, Tensor]] = {}
        if dynamic:
            self.kind = torch.stack([s.kind for s in states])
            self.target = torch.stack([s.target for s in states])
            self.epoch = torch.stack([s.epoch for s in states])
            for r, s in enumerate(states):
                s.kind, s.target, s.epoch = self.kind[r], self.target[r], self.epoch[r]

    def batch(self, idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(labels, pseudo mask, pseudo target)`` ``[R, B, C]`` of the rows ``idx`` ``[R, B]``,
        the values :meth:`LabelState.batch` gives each run."""
        obs = _gather_rows(self.observed, idx)
        if not self.dynamic:
            if obs.shape not in self._zeros:
                self._zeros[obs.shape] = (torch.zeros(obs.shape, dtype=torch.bool), torch.zeros(obs.shape))
            mask, target = self._zeros[obs.shape]
            return obs, mask, target
        kind = _gather_rows(self.kind, idx)
        labels = torch.where(kind == Kind.CORRECTED, 1.0, obs)
        mask = kind == Kind.PSEUDO_NEGATIVE
        target = torch.where(mask, _gather_rows(self.target, idx), torch.zeros((), dtype=torch.float32))
        return labels, mask, target

    def correct(self, idx: Tensor, mask: Tensor, epoch: int) -> None:
        """Every run's :meth:`LabelState.correct_mask` of one step at once: unobserved entries
        under ``mask`` (``[R, B, C]``, rows ``idx``) become permanent positives."""
        run, b, c = torch.nonzero(mask, as_tuple=True)
        rows = idx[run, b]
        keep = self.kind[run, rows, c] == Kind.UNOBSERVED
        run, rows, c = run[keep], rows[keep], c[keep]
        if rows.numel():
            self.kind[run, rows, c] = Kind.CORRECTED
            self.target[run, rows, c] = 1.0
            self.epoch[run, rows, c] = epoch

    def stats(self, truth: np.ndarray) -> list[dict[str, float]]:
        """Each run's :meth:`LabelState.pseudo_label_stats` (integer counts, so computing them
        for all runs at once gives the same numbers)."""
        if not self.dynamic:
            first = self.states[0].pseudo_label_stats(truth)  # nobody's labels changed: all equal
            return [dict(first) for _ in self.states]
        y = torch.as_tensor(np.asarray(truth)).to(torch.int8)
        neg = self.kind == Kind.PSEUDO_NEGATIVE
        cor = self.kind == Kind.CORRECTED
        counts = torch.stack([neg.sum((1, 2)), cor.sum((1, 2)), (neg & (y == 0)).sum((1, 2)),
                              (cor & (y == 1)).sum((1, 2))], dim=1).tolist()
        out = []
        for n_neg, n_cor, right_neg, right_cor in counts:
            total = n_neg + n_cor
            out.append({
                "pseudo_negatives": float(n_neg),
                "pseudo_negative_accuracy": right_neg / n_neg if n_neg else float("nan"),
                "corrections": float(n_cor),
                "correction_accuracy": right_cor / n_cor if n_cor else float("nan"),
                "pseudo_label_accuracy": (right_neg + right_cor) / total if total else float("nan"),
            })
        return out

    def keep(self, rows: list[int]) -> _StackedLabels:
        """The label states of the runs ``rows`` only."""
        return _StackedLabels([self.states[r] for r in rows], self.dynamic)


# --------------------------------------------------------------------------- batched losses
@dataclass
class _Step:
    """What one stacked step hands a batched loss: the stacked logits ``[R, B, C]``, labels,
    pseudo-labels, rows ``idx`` ``[R, B]`` and inputs ``x`` ``[R, B, D]`` of every run, and the
    stack (its parameter slots and runs)."""

    logits: Tensor
    labels: Tensor
    mask: Tensor
    target: Tensor
    idx: Tensor
    x: Tensor
    stack: _Stack


class _Batched:
    """A method's loss for all runs at once: ``values`` returns the ``[R]`` losses whose
    gradients are those of each run's solo loss. ``counts`` lists, per run, the sizes of the
    tensors its elementwise operations run on; the batched form is used only for batch
    sizes where they have no scalar tail (:func:`_no_tail`); other steps compute each run's
    loss with its own components. Operations are created in the solo code's order: autograd
    adds the gradients a tensor receives in that order, and float addition does not associate."""

    corrects_labels = False

    def __init__(self, comp: MethodComponents) -> None:
        self.loss = copy.deepcopy(comp.loss)
        self.corrections: Tensor | None = None

    def supports(self, batch: int, classes: int) -> bool:
        return _no_tail(*self.counts(batch, classes))

    def counts(self, batch: int, classes: int) -> tuple[int, ...]:
        return (batch * classes,)

    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        self.loss.set_epoch(epoch, num_epochs)

    def values(self, s: _Step) -> Tensor:
        raise NotImplementedError


def _bc_means(terms: Tensor) -> Tensor:
    """Per-run BC-mean of ``[R, B, C]`` element losses (:func:`~spmlkit.losses.base.bc_mean`)."""
    return terms.sum((1, 2)) / (terms.shape[1] * terms.shape[2])


def _rowwise(values: Tensor, op: str, *args: float) -> Tensor:
    """``values.<op>(*args)`` for a ``[R, n]`` tensor, each row computed as torch computes a
    solo ``[n]`` tensor: the rows sit in a padded buffer, which torch cannot walk as one flat
    loop, so each row gets its own vectorised body and scalar tail (for ``n < 32``: scalar
    only). Used for the per-class ``[C]`` tensors of PU-MLC and soft OPML."""
    runs, n = values.shape
    rows = torch.empty(runs, n + _ROW_ALIGN, dtype=values.dtype)[:, :n]
    rows.copy_(values)
    getattr(rows, op + "_")(*args)
    return rows


class _ColumnLogSumExp(torch.autograd.Function):
    """``logsumexp`` over dim 1 of ``[R, B, C]`` as ATen computes it per ``[B, C]`` (max, exp of the
    difference, sum, log, plus the max) with ATen's backward ``grad * exp(x - result)``; the
    log of each run's ``[C]`` sums is taken row by row (:func:`_rowwise`)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        maxes = torch.amax(x, dim=1, keepdim=True)
        maxes_squeezed = maxes.squeeze(1)
        maxes_squeezed.masked_fill_(maxes_squeezed.abs() == math.inf, 0)
        maxes.masked_fill_(maxes.abs() == math.inf, 0)
        result = _rowwise(torch.sum(torch.exp(x - maxes), dim=1), "log").add_(maxes_squeezed)
        ctx.save_for_backward(x, result)
        return result

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        x, result = ctx.saved_tensors
        return grad.unsqueeze(1) * (x - result.unsqueeze(1)).exp()


class _Spine(_Batched):
    """The element-wise losses (the spine family), plus an L1/L2 parameter penalty: the
    run's own loss class with ``reduction="none"`` on ``[R*B, C]``, reduced per run."""

    def __init__(self, comp: MethodComponents) -> None:
        super().__init__(comp)
        self.loss.reduction = "none"
        self.penalty = comp.penalty

    def values(self, s: _Step) -> Tensor:
        runs, batch, classes = s.logits.shape
        flat = (runs * batch, classes)
        terms = self.loss(s.logits.reshape(flat), s.labels.reshape(flat),
                          pseudo=PseudoLabels(s.mask.reshape(flat), s.target.reshape(flat)), index=None)
        value = _bc_means(terms.view(runs, batch, classes))
        if self.penalty is not None:  # as MethodComponents._weight_penalty, after the loss
            kind, lam = self.penalty
            norm = 0
            for leaf in s.stack.head_leaves():
                part = leaf.abs() if kind == "l1" else leaf * leaf
                norm = norm + part.reshape(runs, -1).sum(1)
            value = value + lam * norm
        return value


def _epr(probs: Tensor, expected_num_pos: float, norm: str = "l2") -> Tensor:
    """:func:`~spmlkit.losses.batchwise.expected_positive_regularizer` of each run's ``[B, C]``."""
    gap = probs.sum(dim=2).mean(dim=1) - expected_num_pos
    if norm == "l2":
        return gap.square() / probs.shape[2] ** 2
    return gap.abs() / probs.shape[2]


class _EPR(_Batched):
    """EPR: ``BC-mean(-log p on positives) + R(p)`` with ``R`` per run."""

    def values(self, s: _Step) -> Tensor:
        positive_term = torch.where(s.labels > 0, -F.logsigmoid(s.logits), 0.0)
        reg = _epr(torch.sigmoid(s.logits), self.loss.expected_num_pos, self.loss.norm)
        return _bc_means(positive_term) + reg


class _Role(_Batched):
    """ROLE with every run's label estimator Φ stacked (a parameter slot of its own).

    ROLE owns parameters, so its runs never fall back to their solo loss objects (whose Φ is
    not the stacked one): batch sizes with a scalar tail compute :func:`role_objective` run by
    run on the stacked Φ instead."""

    def supports(self, batch: int, classes: int) -> bool:
        return True

    def values(self, s: _Step) -> Tensor:
        from ..losses.role import role_objective

        phi = s.stack.slots[s.stack.phi_slot].leaf
        runs, batch, classes = s.logits.shape
        k = self.loss.expected_num_pos
        if not _no_tail(batch * classes):
            values = []
            for r, (logit, table) in enumerate(zip(s.logits.unbind(0), phi.unbind(0))):
                est = table[s.idx[r]]  # RoleLoss.loss: the rows of its estimator, then role_objective
                values.append(role_objective(logit, est, s.labels[r], classifier_target=torch.sigmoid(logit.detach()),
                                             estimator_target=torch.sigmoid(est.detach()), expected_num_pos=k))
            return torch.stack(values)
        logits = s.logits
        est = phi[torch.arange(runs).unsqueeze(1), s.idx]
        classifier_target, estimator_target = torch.sigmoid(logits.detach()), torch.sigmoid(est.detach())
        positive_term = torch.where(s.labels > 0, -(F.logsigmoid(logits) + F.logsigmoid(est)), 0.0)
        cross = F.binary_cross_entropy_with_logits(logits, estimator_target, reduction="none")
        cross = cross + F.binary_cross_entropy_with_logits(est, classifier_target, reduction="none")
        reg = _epr(torch.sigmoid(logits), k) + _epr(torch.sigmoid(est), k)
        elements, half_reg = 0.5 * positive_term + 0.5 * cross, 0.5 * reg
        return _bc_means(elements) + half_reg


class _LargeLoss(_Batched):
    """LL-R, LL-Ct and LL-Cp: each run's ``k`` largest unobserved losses of its batch."""

    def __init__(self, comp: MethodComponents) -> None:
        super().__init__(comp)
        self.corrects_labels = comp.loss.corrects_labels

    def values(self, s: _Step) -> Tensor:
        logits, labels = s.logits, s.labels
        runs, batch, classes = logits.shape
        _, _, unobserved = label_masks(labels)
        neg = bce_neg(logits)
        losses = neg.detach()
        k = rejection_count(batch * classes, self.loss.rate)
        if k == 0:
            selected = torch.zeros_like(unobserved)
            threshold = torch.full((runs, 1, 1), math.inf)
        else:
            masked = torch.where(unobserved, losses, torch.zeros((), dtype=losses.dtype))
            threshold = masked.reshape(runs, -1).topk(k, dim=1).values[:, -1].view(runs, 1, 1)
            selected = unobserved & (masked >= threshold)
        sel = selected.to(logits.dtype)
        if self.loss.action == "reject":
            terms = spine(logits, labels, bce_pos, None, neg, v=1.0 - sel)
        else:
            terms = spine(logits, labels, bce_pos, bce_pos, neg, k=sel)
        if self.corrects_labels:
            self.corrections = selected & (losses > threshold)
        return _bc_means(terms)


class _Rows(_Batched):
    """ZLPR, OPML and soft OPML (+ the high-rank regulariser: OPML-SP): one log-sum-exp pair
    per example, the mean over each run's rows. Soft OPML's smoothing uses each run's own
    class AP (set by its components after every epoch), raised to ``r`` run by run."""

    def __init__(self, comp: MethodComponents) -> None:
        super().__init__(comp)
        self.highrank = [(reg.lam, reg.delta) for reg in comp.regularizers]

    def counts(self, batch: int, classes: int) -> tuple[int, ...]:
        return (batch * classes, batch * (classes + 1), batch)

    def values(self, s: _Step) -> Tensor:
        # on [R, B, C] directly, not a flat view: the high-rank term also reads the logits, and
        # their gradients must meet in the solo order (a view would add two of them first)
        logits, labels = s.logits, s.labels
        if isinstance(self.loss, SoftOPMLLoss):
            rows = soft_opml_loss(logits, labels, self._smoothing(s), a=self.loss.a, b=self.loss.b)
        elif isinstance(self.loss, OPMLLoss):
            rows = opml_loss(logits, labels, a=self.loss.a, b=self.loss.b)
        else:
            rows = opml_loss(logits, labels, a=1.0, b=1.0)
        means = rows.mean(dim=1)
        # ZLPRLoss: the mean of the rows; OPMLLoss._reduce_rows: the mean, then minus its offset
        value = means - self.loss._offset() if isinstance(self.loss, OPMLLoss) else means
        for lam, delta in self.highrank:
            value = value + _high_rank(logits, lam, delta)
        return value

    def _smoothing(self, s: _Step) -> Tensor:
        """:meth:`SoftOPMLLoss.smoothing` of every run, each with its own class AP."""
        aps = [run.comp.loss.class_ap for run in s.stack.runs]
        if aps[0] is None:
            return torch.zeros_like(s.logits)
        trust = _rowwise(torch.stack([ap.to(dtype=s.logits.dtype) for ap in aps]), "pow", self.loss.r)
        eps = trust.unsqueeze(1) * torch.sigmoid(s.logits.detach())
        return torch.where(s.labels == 0, eps, 0.0)


def _high_rank(logits: Tensor, lam: float, delta: float) -> Tensor:
    """:func:`~spmlkit.losses.batchwise.high_rank_regularizer` (``"mean"``) of each run's
    ``[B, C]`` logits: batched when the probe finds the batched LAPACK/BLAS calls equal to the
    solo ones here, else run by run with the solo function."""
    runs, batch, classes = logits.shape
    if not (_no_tail(batch * classes, itemsize=8) and _batched_high_rank_is_exact(runs, batch, classes, lam, delta)):
        return torch.stack([high_rank_regularizer(logit, lam, delta) for logit in logits.unbind(0)])
    return _batched_high_rank(logits, lam, delta)


@functools.lru_cache(maxsize=16)
def _batched_high_rank_is_exact(runs: int, batch: int, classes: int, lam: float, delta: float) -> bool:
    """Whether :func:`_batched_high_rank` (batched matrix products and Cholesky factorisations)
    gives, values and gradients, what the solo function gives run by run, on this machine's
    LAPACK/BLAS (probed once per shape on random logits)."""
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(runs, batch, classes, generator=gen)).requires_grad_()
    grad = torch.randn(runs, generator=gen)
    stacked = _batched_high_rank(logits, lam, delta)
    (stacked * grad).sum().backward()
    for r in range(runs):
        solo_logits = logits[r].detach().clone().requires_grad_()
        value = high_rank_regularizer(solo_logits, lam, delta)
        (value * grad[r].clone()).backward()
        if not (torch.equal(value, stacked[r]) and torch.equal(solo_logits.grad, logits.grad[r])):
            return False
    return True


def _batched_high_rank(logits: Tensor, lam: float, delta: float) -> Tensor:
    """The operations of :func:`~spmlkit.losses.batchwise.high_rank_regularizer` on ``[R, B, C]``."""
    _, batch, classes = logits.shape
    probs = torch.sigmoid(logits.to(torch.float64))
    gram = probs.transpose(1, 2) @ probs / batch
    gram = gram + delta * torch.eye(classes, dtype=torch.float64)
    chol = torch.linalg.cholesky_ex(gram).L
    logdet = 2.0 * torch.log(torch.diagonal(chol, dim1=1, dim2=2)).sum(dim=1)
    return (-(lam / classes) * logdet).to(logits.dtype)


class _PU(_Batched):
    """PU-MLC: the variational PU loss and the mixup term of every run (its own permutation and
    Beta draw from its own generator, in the solo order), the per-class ``[C]`` operations row
    by row (:func:`_rowwise`, :class:`_ColumnLogSumExp`)."""

    def __init__(self, comp: MethodComponents) -> None:
        super().__init__(comp)
        self.mixup_weight = comp.mixup_weight

    def counts(self, batch: int, classes: int) -> tuple[int, ...]:
        return (batch * classes, (batch // 2) * classes)

    def supports(self, batch: int, classes: int) -> bool:
        return batch >= 2 and super().supports(batch, classes)

    def values(self, s: _Step) -> Tensor:
        loss, logits = self.loss, s.logits
        batch = logits.shape[1]
        # pu_temperature, per run over its batch rows
        spread = logits.detach().std(dim=1, correction=0)
        tempered = (loss.alpha * spread).clamp(max=1.0).clamp(min=loss.tau_floor)
        tau = torch.where(spread > 0, tempered, torch.ones_like(tempered)).unsqueeze(1)
        prior = torch.sigmoid(logits.detach() / tau).mean(dim=1)
        # pu_variational_loss, numerics "stable", summed over classes
        scaled = logits / tau
        positive = s.labels > 0
        count = positive.sum(dim=1)
        log_q = F.logsigmoid(scaled)
        log_mean_q = _ColumnLogSumExp.apply(log_q) - math.log(batch)
        positive_mean = torch.where(positive, log_q, 0.0).sum(dim=1) / count.clamp(min=1)
        weight = _rowwise(prior, "pow", loss.gamma)
        per_class = weight * log_mean_q - torch.where(count > 0, positive_mean, 0.0)
        value = per_class.sum(dim=1)
        return value + self.mixup_weight * self._mixup(s)

    def _mixup(self, s: _Step) -> Tensor:
        """:func:`~spmlkit.losses.batchwise.pu_mixup_consistency` of every run; its permutation
        and Beta draw come from the run's generator through the same functions (``_draw_beta``
        included), so each run draws what it draws solo."""
        logits, x = s.logits, s.x
        runs, batch, classes = logits.shape
        half = batch // 2
        perms, lams = [], []
        for run in s.stack.runs:  # each run's draws from its own generator, in the solo order
            perms.append(torch.randperm(half, generator=run.generator))
            lams.append(_draw_beta(0.3, run.generator))
        perm = torch.stack(perms)
        lam = torch.tensor(lams, dtype=torch.float32).view(runs, 1, 1)
        rest = torch.tensor([1.0 - v for v in lams], dtype=torch.float32).view(runs, 1, 1)
        rows = torch.arange(runs).unsqueeze(1)
        probs = torch.sigmoid(logits)
        targets = torch.where(s.labels > 0, torch.ones_like(probs), probs)
        first, second = slice(0, half), slice(batch - half, batch)
        mixed_inputs = x[:, first][rows, perm] * lam + x[:, second] * rest
        mixed_targets = targets[:, first][rows, perm] * lam + targets[:, second] * rest
        weight, bias = s.stack.head_leaves()
        if _batched_linear_is_exact(mixed_inputs, classes):
            out = torch.baddbmm(bias.unsqueeze(1), mixed_inputs, weight.transpose(1, 2))
        else:
            out = torch.stack([F.linear(m, w, b) for m, w, b in zip(mixed_inputs, weight.unbind(0), bias.unbind(0))])
        log_pred = torch.logaddexp(F.logsigmoid(out), torch.full_like(out, math.log(PU_EPS)))
        log_target = torch.log(mixed_targets + PU_EPS)
        squared = (log_target - log_pred).square()
        return squared.mean(dim=1).sum(dim=1)


_SPINE_LOSSES = {"bce", "iun", "an", "an_ls", "n_ls", "wan", "dw", "entmin", "focal", "asl", "hill", "splc", "em",
                 "em_apl", "gr"}


def _batched_loss(comp: MethodComponents) -> _Batched | None:
    """The batched form of a method's training loss, or None (each run computes its own)."""
    m, name = comp.method, comp.method.loss
    if name == "role":
        return _Role(comp)
    if comp.loss.reduction != "mean":
        return None
    if name == "pu_mlc" and not comp.regularizers and comp.penalty is None and comp.loss.numerics == "stable":
        return _PU(comp) if m.mixup else None
    if m.mixup:
        return None
    if name in _SPINE_LOSSES and not comp.regularizers and not comp.loss.needs_class_ap:
        return _Spine(comp)
    if comp.penalty is not None:
        return None
    if name in ("zlpr", "opml", "opml_soft") and all(isinstance(reg, HighRankRegularizer) and reg.reduction == "mean"
                                                      for reg in comp.regularizers):
        return _Rows(comp)
    if comp.regularizers or comp.loss.needs_class_ap:
        return None
    if name == "epr":
        return _EPR(comp)
    if name in ("ll_r", "ll_ct", "ll_cp"):
        return _LargeLoss(comp)
    return None


# --------------------------------------------------------------------------- the group
@dataclass
class _Run:
    """One run of the group: what its solo run would hold."""

    config: RunConfig
    model: nn.Module
    state: LabelState
    comp: MethodComponents
    generator: torch.Generator
    parts: LoopParts
    rule: StoppingRule
    loop: LoopState = field(default_factory=LoopState)
    params: list[nn.Parameter] = field(default_factory=list)


class _Stack:
    """The active runs' parameters as slots (head weight, head bias, then method parameters)."""

    def __init__(self, runs: list[_Run], phi_slot: int | None, slots: list[_Slot] | None = None) -> None:
        self.runs = runs
        self.phi_slot = phi_slot
        if slots is None:
            lrs = [_param_lrs(run) for run in runs]
            slots = [_Slot([run.params[k] for run in runs], [lr[k] for lr in lrs]) for k in range(len(runs[0].params))]
        self.slots = slots
        for r, run in enumerate(runs):
            for slot, param in zip(slots, run.params):
                param.data = slot.row(r)
        self.adam = _StackedAdam(slots)

    def head_leaves(self) -> tuple[Tensor, Tensor]:
        return self.slots[0].leaf, self.slots[1].leaf

    def keep(self, rows: list[int]) -> _Stack:
        """The stack of the runs ``rows`` (the others stopped early), Adam's state carried over."""
        return _Stack([self.runs[r] for r in rows], self.phi_slot, [slot.keep(rows) for slot in self.slots])


def _param_lrs(run: _Run) -> list[float]:
    """The learning rate of each of ``run.params``, from the groups its solo optimiser gets."""
    groups = run.model.param_groups(run.config.lr, run.config.head_lr_mult) + run.comp.param_groups(run.config.lr)
    lrs = {id(p): float(g["lr"]) for g in groups for p in g["params"]}
    return [lrs[id(p)] for p in run.params]


def train_stacked(configs: list[RunConfig], *, data: RunData | None = None) -> list[RunResult]:
    """Train ``configs`` as one stacked group; result ``i`` equals ``train(configs[i])`` run
    with one torch thread (module docstring). The configs must differ in nothing but
    :data:`VARYING` and be stackable (:func:`unstackable_reason`); ``data`` replaces loading
    the dataset, as in :func:`~spmlkit.training.train`. ``seconds`` of each result, and the
    times in its history, are the group's divided among its runs."""
    if not configs:
        return []
    for config in configs:
        why = unstackable_reason(config)
        if why is not None:
            raise ValueError(f"run {config.method} seed {config.seed} lr {config.lr:g} cannot be stacked: {why}")
    keys = {stack_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(f"stacked runs may differ only in {', '.join(VARYING)}; these differ in more")
    t0 = time.perf_counter()
    with num_threads(1):
        results = _Group(configs, data).run()
    seconds = (time.perf_counter() - t0) / len(configs)
    for result in results:
        result.seconds = seconds
    return results


class _Group:
    """Builds every run as :func:`~spmlkit.training.trainer._run` does, then trains them stacked."""

    def __init__(self, configs: list[RunConfig], data: RunData | None) -> None:
        first = configs[0]
        with user_input():
            self.resolved: ResolvedMethod = resolve_hparams(first.method, first.hparams)
            self.data = data = load_run_data(first) if data is None else data
            self.split, train_labels = _protocol(first, data)
        tr, va = self.split.train_idx, self.split.val_idx
        self.source: FeatureSource = _source(first, data, tr, va, torch.device("cpu"), Distributed())
        self.epochs, self.batch_size = first.epochs, first.batch_size
        self.runs = [self._build(config, train_labels) for config in configs]
        comp = self.runs[0].comp
        self.dynamic = comp.algorithm is not None or comp.loss.corrects_labels
        self.labels = _StackedLabels([run.state for run in self.runs], self.dynamic)
        phi_slot = 2 if len(self.runs[0].params) > 2 else None
        self.stack = _Stack(self.runs, phi_slot)
        self.batched = _batched_loss(comp)

    def _build(self, config: RunConfig, train_labels: np.ndarray) -> _Run:
        """One run's model, label state, components and generator, in the solo trainer's order
        (the global seed before the model, whose initial weights it draws)."""
        torch.manual_seed(config.seed)
        np.random.seed(config.seed % 2**32)
        with user_input():
            model = self.data.build_model(config)
        state = LabelState(train_labels)
        truth = self.split.truth_train
        with user_input():
            comp = build_components(self.resolved, num_train=len(self.split.train_idx),
                                    num_classes=self.data.num_classes, observed=train_labels,
                                    expected_num_pos=expected_positives(train_labels, truth), epochs=config.epochs,
                                    seed=config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        parts = LoopParts(model, self.source, state, comp, None, generator)
        params = [model.net.weight, model.net.bias] + [p for g in comp.param_groups(config.lr) for p in g["params"]]
        if len(params) > 3 or (len(params) == 3 and comp.method.loss != "role"):
            raise ValueError(f"method {comp.method.name!r} owns parameters that stacking does not know")
        return _Run(config, model, state, comp, generator, parts,
                    StoppingRule(config.patience, config.min_delta, config.stop_drop), params=params)

    # ------------------------------------------------------------------ training
    def run(self) -> list[RunResult]:
        for epoch in range(1, self.epochs + 1):
            active = [r for r, run in enumerate(self.stack.runs) if not run.loop.stopped_early]
            if not active:
                break
            if len(active) < len(self.stack.runs):
                self.stack = self.stack.keep(active)
                self.labels = self.labels.keep(active)
            self._epoch(epoch)
        return [self._finish(run) for run in self.runs]

    def _epoch(self, epoch: int) -> None:
        runs = self.stack.runs
        t0 = time.perf_counter()
        for run in runs:
            run.comp.set_epoch(epoch, self.epochs)
        if self.batched is not None:
            self.batched.set_epoch(epoch, self.epochs)
        totals, steps, seen = self._train_epoch(epoch)
        train_seconds = (time.perf_counter() - t0) / len(runs)
        records = self._train_set_records(runs, epoch)
        for record, val_map in zip(records, self._val_maps(runs)):
            record["val_map"] = val_map
        if self.split.truth_train is not None:
            for record, stats in zip(records, self.labels.stats(self.split.truth_train)):
                record.update(stats)
        epoch_seconds = (time.perf_counter() - t0) / len(runs)
        for run, total, eoe in zip(runs, totals.tolist(), records):
            record = {"epoch": epoch, "train_loss": total / max(steps, 1), **eoe, "train_seconds": train_seconds,
                      "epoch_seconds": epoch_seconds,
                      "images_per_second": seen / train_seconds if train_seconds > 0 else float("nan")}
            ls = run.loop
            ls.history.append(record)
            if run.rule.update(ls, record["val_map"]):
                ls.best_epoch = epoch
                ls.best_snapshot = _snapshot(run.parts)
            ls.epoch = epoch

    def _train_set_records(self, runs: list[_Run], epoch: int) -> list[dict[str, float]]:
        """The first part of each run's :func:`~spmlkit.training.loop.end_of_epoch` record: its
        predictions on the training rows, the observed-positive loss (for all runs at once: they
        share the observed labels) and its method's between-epoch step, in the solo key order
        (a feature source always tracks the training rows)."""
        probs = [_probabilities(self.source.X_train, run) for run in runs]
        losses = _observed_positive_losses(probs, self.labels.observed)
        records = []
        for run, p, loss in zip(runs, probs, losses):
            record = {"observed_pos_loss": loss}
            record.update(run.comp.after_epoch(p, run.state, epoch))
            records.append(record)
        return records

    def _train_epoch(self, epoch: int) -> tuple[Tensor, int, int]:
        """One pass of every run over its own shuffled rows, the steps taken together."""
        runs = self.stack.runs
        X = self.source.X_train
        n, classes = len(X), self.data.num_classes
        perms = torch.stack([torch.randperm(n, generator=run.generator) for run in runs])
        shuffled = _gather_rows(X, perms)  # [R, n, D]: one gather per epoch; each batch is then a view
        totals = torch.zeros(len(runs), dtype=torch.float64)
        steps = seen = 0
        for start in range(0, n, self.batch_size):
            idx = perms[:, start : start + self.batch_size]
            x = shuffled[:, start : start + self.batch_size]
            batch = idx.shape[1]
            weight, bias = self.stack.head_leaves()
            if _batched_linear_is_exact(x, classes):
                logits = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            else:
                logits = torch.stack([F.linear(x[r], w, b) for r, (w, b) in
                                      enumerate(zip(weight.unbind(0), bias.unbind(0)))])
            labels, mask, target = self.labels.batch(idx)
            if self.batched is not None and self.batched.supports(batch, classes):
                values = self.batched.values(_Step(logits, labels, mask, target, idx, x, self.stack))
                values.sum().backward()
                self.stack.adam.step()
                if self.batched.corrects_labels:
                    self.labels.correct(idx, self.batched.corrections, epoch)
            else:
                values = self._solo_losses(logits, x, labels, mask, target, idx, epoch)
            totals += values.detach().double()
            steps += 1
            seen += batch
        return totals, steps, seen

    def _solo_losses(self, logits: Tensor, x: Tensor, labels: Tensor, mask: Tensor, target: Tensor, idx: Tensor,
                     epoch: int) -> Tensor:
        """Each run's loss from its own components on its slice (the solo code), one backward
        and one stacked update for all, then each run's per-step label corrections."""
        runs = self.stack.runs
        weights, biases = (leaf.unbind(0) for leaf in self.stack.head_leaves())
        batches = [LabelBatch(labels[r], PseudoLabels(mask[r], target[r]), idx[r]) for r in range(len(runs))]
        values = []
        for r, (run, logit) in enumerate(zip(runs, logits.unbind(0))):
            w, b = weights[r], biases[r]
            forward: Callable[[Tensor], Tensor] = functools.partial(F.linear, weight=w, bias=b)
            values.append(run.comp.training_loss(forward, x[r], logit, batches[r], run.generator,
                                                 functools.partial(_pair, w, b)))
        stacked = torch.stack(values)
        stacked.sum().backward()
        self.stack.adam.step()
        for run, batch in zip(runs, batches):
            run.comp.after_step(run.state, batch, epoch)
        return stacked

    def _val_maps(self, runs: list[_Run]) -> list[float]:
        """Each run's validation mAP, from one :func:`~spmlkit.metrics.average_precision` call
        over every run's classes side by side (a per-column computation, so each run's APs are
        its solo APs), averaged per run as :func:`~spmlkit.metrics.mean_average_precision` does."""
        val_targets = self.split.val_targets
        if not len(val_targets):
            return [float("nan")] * len(runs)
        probs = [_probabilities(self.source.X_val, run).numpy() for run in runs]
        classes = probs[0].shape[1]
        ap = metrics.average_precision(np.concatenate(probs, axis=1), np.tile(val_targets, (1, len(runs))))
        return [float(ap[r * classes : (r + 1) * classes].mean()) for r in range(len(runs))]

    # ------------------------------------------------------------------ results
    def _finish(self, run: _Run) -> RunResult:
        """Restore the selected epoch and evaluate it as the solo trainer does."""
        ls = run.loop
        if ls.best_snapshot is not None:
            restore(run.parts, ls.best_snapshot)
        for param in run.params:  # the run's own memory from here on, free of the group's buffers
            param.data = param.data.clone()
        loop = LoopResult(ls.best_epoch, ls.best_val_map, ls.history, ls.stopped_early)
        return _evaluate(run.config, self.resolved.method, self.data, self.source, run.parts, loop,
                         self.split.val_targets, self.split.truth_train, self.split.observed, 0, None)


@torch.no_grad()
def _probabilities(X: Tensor, run: _Run, chunk: int = 4096) -> Tensor:
    """:func:`~spmlkit.training.sources.predict_proba` of the run's head on ``X``, the same
    operations (a linear layer and a sigmoid per chunk of 4096 rows) without the module calls."""
    weight, bias = run.params[0], run.params[1]
    if len(X) <= chunk:
        return torch.sigmoid(F.linear(X, weight, bias))
    return torch.cat([torch.sigmoid(F.linear(X[i : i + chunk], weight, bias)) for i in range(0, len(X), chunk)])


def _observed_positive_losses(probs: list[Tensor], observed: Tensor) -> list[float]:
    """:func:`~spmlkit.training.loop._observed_positive_loss` of every run (same observed
    labels): the positives gathered from all runs at once, the log taken row by row."""
    pos = observed == 1
    if not bool(pos.any()):
        return [float("nan")] * len(probs)
    p = torch.stack(probs).double()[:, pos].clamp_min(1e-12)
    return (-_rowwise(p, "log").mean(dim=1)).tolist()


def _snapshot(parts: LoopParts) -> dict[str, Any]:
    """:func:`~spmlkit.training.loop.snapshot` with every tensor cloned on its own: a run's
    parameters are views into the group's buffers, which ``copy.deepcopy`` would copy whole."""
    return {"model": _copied(parts.model.state_dict()), "components": _copied(parts.components.state_dict()),
            "label_state": parts.state.state_dict()}


def _copied(value: Any) -> Any:
    """A deep copy of a state dict: tensors cloned, containers rebuilt, the rest deep-copied."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        out = type(value)((k, _copied(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):  # a module state dict's versions, read by load_state_dict
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return copy.deepcopy(value)


def _pair(weight: Tensor, bias: Tensor) -> list[Tensor]:
    """A run's parameters as its penalty sees them (the head's weight, then its bias)."""
    return [weight, bias]
