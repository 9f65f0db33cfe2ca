"""R runs of one model at once: their steps and their predictions as single calls.

Why. A sweep of feature runs (the Yeast benchmark: 26 methods x 3 learning rates x 3 seeds of a
linear head on 1,200 x 103 features) spends its time on per-operation overhead around tiny
tensors, not on arithmetic. Runs that share data, architecture and method and differ only in
seed or learning rate (:func:`~spmlkit.training.plan.batch_key`) can take each step together.

How, without a second implementation of anything. Each run keeps everything a solo run has --
its own model, loss and label algorithm, label state, generator, stopping rule -- and the loop
(:mod:`spmlkit.training.loop`) treats a solo run as R = 1. For R > 1 this module calls the runs'
one step function, :class:`~spmlkit.training.step.RunStep`, once for all of them:

* the runs' weights, and their loss state (ROLE's label estimator, soft OPML's class AP), are
  stacked along a new first dimension each step and swapped into the template step with
  ``torch.func.functional_call``; autograd carries each run's gradient back to its own
  parameters, which the one optimiser then updates with the run's own learning rate;
* the model and the losses take that leading run dimension natively: a batchable model (the
  feature head) computes R heads with one batched product, and every built-in loss treats leading
  dimensions as independent problems (:attr:`~spmlkit.losses.SPMLLoss.batchable`). Measured here,
  that is about twice as fast as running the same code under ``torch.func.vmap``, whose batching
  layer costs more than the arithmetic on tensors this small.

Equality with solo runs is a stated tolerance, not bit-identity: a batched matrix product or a
reduction over a stacked tensor may round differently from R single ones (docs/architecture.md,
"Many runs at once", has the bound and the measured differences).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.func import functional_call

from ..labels import LabelBatch
from .components import Mixing
from .step import RunStep

__all__ = ["BatchedSteps"]


class BatchedSteps:
    """The steps of R >= 2 runs (one :class:`RunStep` each, same architecture) as one call.

    ``steps[0]`` is the template whose code runs; the state of every run is swapped in. The
    template must be a run that is still training (its loss schedules are set each epoch), so the
    loop builds a new :class:`BatchedSteps` each epoch, from the runs still training. Buffers are
    read here, once: a loss may replace one between epochs (soft OPML's class AP).
    """

    def __init__(self, steps: list[RunStep]) -> None:
        if len(steps) < 2:
            raise ValueError("BatchedSteps is for two runs or more; a single run calls its RunStep")
        self.steps = steps
        self.template = steps[0]
        model = self.template.model
        self._model_names = [name for name, _ in model.named_parameters()]
        self._trainable = [i for i, (_, p) in enumerate(model.named_parameters()) if p.requires_grad]
        self._model_params = [[p for p in step.model.parameters()] for step in steps]
        self._model_buffer_names = [name for name, _ in model.named_buffers()]
        self._model_buffers = [[b for b in step.model.buffers()] for step in steps]
        terms = self.template.terms
        self._term_names = [f"terms.{n}" for n, _ in terms.named_parameters()]
        self._term_params = [[p for p in step.terms.parameters()] for step in steps]
        self._term_buffer_names = [f"terms.{n}" for n, _ in terms.named_buffers()]
        self._term_buffers = [[b for b in step.terms.buffers()] for step in steps]

    @staticmethod
    def _stack(names: list[str], per_run: list[list[Tensor]]) -> dict[str, Tensor]:
        return {name: torch.stack([tensors[i] for tensors in per_run]) for i, name in enumerate(names)}

    def _model_state(self) -> dict[str, Tensor]:
        return {**self._stack(self._model_names, self._model_params),
                **self._stack(self._model_buffer_names, self._model_buffers)}

    def _forward(self, state: dict[str, Tensor]) -> Callable[[Tensor], Tensor]:
        """The R models' forward pass: ``[R, B, ...]`` inputs (or inputs every run shares) to
        ``[R, B, C]`` logits, the template model run on the stacked weights (a batchable model
        takes the leading run dimension natively, as the losses do)."""
        model = self.template.model
        return lambda x: functional_call(model, state, (x,), tie_weights=False)

    def losses(self, x: Tensor, batch: LabelBatch, mixings: list[Mixing | None]) -> tuple[Tensor, Tensor | None]:
        """``(loss [R], corrections [R, B, C] or None)`` of one step: run r's inputs are ``x[r]``,
        its labels row r of ``batch`` (:class:`~spmlkit.labels.RunLabels`), its draws ``mixings[r]``."""
        model_state = self._model_state()
        weights = [model_state[self._model_names[i]] for i in self._trainable]
        mixing = None
        if mixings[0] is not None:
            mixing = (torch.stack([m[0] for m in mixings]), torch.stack([m[1] for m in mixings]))
        term_state = {**self._stack(self._term_names, self._term_params),
                      **self._stack(self._term_buffer_names, self._term_buffers)}
        return functional_call(
            self.template, term_state,
            (x, batch.index, batch.labels, batch.pseudo.mask, batch.pseudo.target, mixing),
            {"forward": self._forward(model_state), "parameters": lambda: weights}, tie_weights=False)

    @torch.no_grad()
    def probabilities(self, X: Tensor, chunk: int = 4096) -> Tensor:
        """``[R, N, C]`` probabilities of every run's model on the shared rows ``X`` in eval mode,
        in chunks of ``chunk`` rows as :func:`~spmlkit.training.sources.predict_proba` takes them."""
        model = self.template.model
        forward = self._forward(self._model_state())
        was_training = model.training
        model.eval()
        try:
            if len(X) <= chunk:
                return torch.sigmoid(forward(X))
            return torch.cat([torch.sigmoid(forward(X[i : i + chunk])) for i in range(0, len(X), chunk)], dim=1)
        finally:
            model.train(was_training)
