"""R runs of one model at once: their steps and their predictions as single calls.

Why. A sweep of feature runs (the Yeast benchmark: 26 methods x 3 learning rates x 3 seeds of a
linear head on 1,200 x 103 features) spends its time on per-operation overhead around tiny
tensors, not on arithmetic. Runs that share data, architecture and method and differ only in
seed or learning rate (:func:`~spmlkit.training.plan.batch_key`) can take each step together.

How, without a second implementation of anything. Each run keeps everything a solo run has --
its own model, loss and label algorithm, label state, generator, stopping rule -- and the loop
(:mod:`spmlkit.training.loop`) treats a solo run as R = 1. For R > 1 this module calls the runs'
one step function, :class:`~spmlkit.training.step.RunStep`, once for all of them:

* for the length of an epoch, each parameter of the R runs (model and method: a label estimator,
  networks of the method's own) lives in one ``[R, ...]`` leaf, and each run's own parameter is a view of its row.
  The leaves take the place of the template step's own parameters for the epoch, so a step
  stacks nothing: stacking the weights on every step, and splitting the stacked gradient back
  through autograd, cost more than the head's product (docs/architecture.md, "Many runs at
  once"). A leaf's gradient is handed to the runs' parameters as views of its rows, and the one
  optimiser updates each run's parameter -- in the leaf's memory -- with the run's own learning
  rate and state, as it would a solo run's (it keeps one tensor per run: views over blocks of
  runs would cost it less Python, but its fused kernel would then round the runs' last elements
  in its vector code rather than in the scalar tail a solo tensor gets);
* the model and the method take that leading run dimension natively: a batchable model (the
  feature head) computes R heads with one batched product, and every built-in method's loss treats
  leading dimensions as independent problems (:attr:`~spmlkit.methods.Method.batchable`). Measured here,
  that is about twice as fast as running the same code under ``torch.func.vmap``, whose batching
  layer costs more than the arithmetic on tensors this small.

Equality with solo runs is a stated tolerance, not bit-identity: a batched matrix product or a
reduction over a stacked tensor may round differently from R single ones (docs/architecture.md,
"Many runs at once", has the bound and the measured differences).
"""

from __future__ import annotations

from types import TracebackType

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..labels import LabelBatch
from .sources import predict_proba
from .step import RunStep

__all__ = ["BatchedSteps", "is_data_buffer", "probabilities"]


class BatchedSteps:
    """The steps of R >= 2 runs (one :class:`RunStep` each, same architecture) as one call, for
    one epoch: a context manager.

    On entry every parameter of the runs is copied once into a ``[R, ...]`` leaf and each run's
    parameter becomes a view of its row (``Parameter.data``: the same parameter object, so the
    optimiser's state and groups stay the run's own); buffers (a loss's per-class statistics) are stacked
    once, as a method replaces them only between epochs -- but for the buffers a module declares as
    data (its ``data_buffers``: a method's training features and their graph), which are a function of
    the data the group shares, so the template's own serve every run (checked equal on entry).
    The template's method is handed its runs' methods for the epoch
    (:meth:`~spmlkit.methods.Method.join_group`), for per-run state that is no tensor: a method
    that draws from a generator of its own draws each run's samples from that run's generator. The leaves and stacked buffers then take
    the place of the template's own (``steps[0]``, whose code runs) for the epoch, under the same
    names, so a step is a plain call of the template: nothing is stacked or swapped per step.
    On exit the template gets its own tensors back and each run's parameters memory of their
    own, so between epochs (snapshots, label algorithms, restores) and after training every
    run's model is an ordinary module.

    The template must be a run that is still training (its loss schedules are set each epoch),
    so the loop enters a new :class:`BatchedSteps` each epoch, with the runs still training.
    """

    def __init__(self, steps: list[RunStep]) -> None:
        if len(steps) < 2:
            raise ValueError("BatchedSteps is for two runs or more; a single run calls its RunStep")
        self.steps = steps
        self.template = steps[0]
        for step in steps:  # recorded as the runs' group size (docs/architecture.md, "How a run trained")
            step.group_size = max(step.group_size, len(steps))
        self._own: list[tuple[nn.Module, str, Tensor]] = []  # the template's tensors while swapped out
        self._entered = False

    def __enter__(self) -> BatchedSteps:
        self._params = [list(step.parameters()) for step in self.steps]
        stacked: dict[str, Tensor] = {}
        for i, (name, _) in enumerate(self.template.named_parameters()):
            params = [run[i] for run in self._params]
            leaf = nn.Parameter(torch.stack([p.detach() for p in params]), requires_grad=params[0].requires_grad)
            rows = leaf.detach()
            for r, p in enumerate(params):
                p.data = rows[r]
            if leaf.requires_grad:
                leaf.register_post_accumulate_grad_hook(_GradRows(params))
            stacked[name] = leaf
        buffers = [list(step.buffers()) for step in self.steps]
        for i, (name, _) in enumerate(self.template.named_buffers()):
            tensors = [run[i] for run in buffers]
            if is_data_buffer(self.template, name):
                _check_shared(name, tensors)
                continue
            stacked[name] = torch.stack(tensors)
        for name, tensor in stacked.items():
            path, _, attr = name.rpartition(".")
            module = self.template.get_submodule(path)
            self._own.append((module, attr, getattr(module, attr)))
            setattr(module, attr, tensor)
        # a method with per-run state that is no tensor (a generator of its own) sees the group's methods
        self.template.method.join_group([step.method for step in self.steps])
        self._entered = True
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._entered = False
        self.template.method.join_group(None)
        while self._own:
            module, attr, tensor = self._own.pop()
            setattr(module, attr, tensor)
        for params in self._params:
            for p in params:
                p.data = p.data.clone()

    def losses(self, x: Tensor, batch: LabelBatch, draws: tuple[Tensor, ...] | None, noise: Tensor | None = None
               ) -> tuple[Tensor, Tensor | None]:
        """``(loss [R], corrections [R, B, C] or None)`` of one step: run r's inputs are ``x[r]``,
        its labels row r of ``batch`` (:class:`~spmlkit.labels.RunLabels`), its draws row r of each of
        ``draws`` (its method's, :meth:`~spmlkit.methods.Method.draw`) and of ``noise`` (the network's
        draws, ``[R, B, ...]``)."""
        if not self._entered:
            raise RuntimeError("BatchedSteps.losses is called inside `with BatchedSteps(...)`")
        return self.template(x, batch.index, batch.labels, batch.pseudo.mask, batch.pseudo.target, draws, noise)


def is_data_buffer(module: nn.Module, name: str) -> bool:
    """Whether buffer ``name`` of ``module`` (a dotted path) is one its owner declares as data
    (``data_buffers``): the same in every run of a group, so never stacked."""
    path, _, attr = name.rpartition(".")
    return attr in getattr(module.get_submodule(path), "data_buffers", ())


def _check_shared(name: str, tensors: list[Tensor]) -> None:
    """A data buffer is a function of the data a group shares, so every run holds the same values;
    one that differs would mean runs with different data were grouped (a bug, not the user's)."""
    first = tensors[0]
    for r, tensor in enumerate(tensors[1:], 1):
        if tensor.shape != first.shape or not torch.equal(tensor, first):
            raise RuntimeError(f"buffer {name!r} is declared data, shared by a batched group, but run {r}'s "
                               "differs from run 0's: the group's runs do not share their data")


class _GradRows:
    """A stacked leaf's post-accumulate-grad hook: row r of its gradient becomes run r's
    parameter's gradient (a view, added to a gradient already there, as autograd accumulates),
    and the leaf keeps none, so the optimiser sees exactly the gradients of a solo step."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params

    def __call__(self, leaf: Tensor) -> None:
        rows, leaf.grad = leaf.grad.unbind(), None
        for p, row in zip(self.params, rows):
            p.grad = row if p.grad is None else p.grad + row


@torch.no_grad()
def probabilities(models: list[nn.Module], X: Tensor, chunk: int = 4096) -> Tensor:
    """``[R, N, C]`` probabilities of R models of one architecture on the shared rows ``X``, in eval
    mode, in chunks of ``chunk`` rows as :func:`~spmlkit.training.sources.predict_proba` takes
    them: the first model run on the R models' stacked weights (a batchable model takes the
    leading run dimension natively)."""
    model = models[0]
    tensors = [dict(m.named_parameters()) | dict(m.named_buffers()) for m in models]
    state = {name: torch.stack([run[name] for run in tensors]) for name in tensors[0]}
    return predict_proba(model, X, chunk, forward=lambda x: functional_call(model, state, (x,), tie_weights=False))
