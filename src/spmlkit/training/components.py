"""Turn a method recipe into the objects a training loop calls.

:class:`MethodComponents` owns the loss, the regularisers and the label-state algorithm of
one run and exposes the hooks the loop calls (``set_epoch``, ``draw_mixing``,
``training_loss``, ``corrections``, ``after_epoch``). It talks to them only
through what they declare (:class:`~spmlkit.losses.SPMLLoss` capabilities,
:class:`~spmlkit.labeling.LabelingAlgorithm`), never by probing for attributes; the contracts
are described in docs/architecture.md, "Contracts", and docs/losses-api.md.

The step's parts are pure functions of their inputs (the random draws of PU-MLC's mixup are
made by :meth:`MethodComponents.draw_mixing` before the loss, the corrections of LL-Cp are
returned rather than stored, and the loop writes every run's at once,
:meth:`~spmlkit.labels.RunLabels.correct`), so that the loop can compute the losses of R runs at once
(docs/architecture.md, "Many runs at once"), each run with its own components.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from .. import labeling, losses, metrics
from ..labels import LabelBatch, LabelState
from ..losses.batchwise import draw_pu_mixing, pu_mixup_consistency
from ..methods import Method, ResolvedMethod

__all__ = ["MethodComponents", "Mixing", "build_components", "method_label_matrix", "expected_positives"]

#: PU-MLC's mixup draws of one step: (permutation of the first half of the batch, lambda as a
#: float64 0-dim tensor), None for methods without mixup
Mixing = tuple[torch.Tensor, torch.Tensor]


def method_label_matrix(method: Method, observed: np.ndarray, truth: np.ndarray | None) -> np.ndarray:
    """The {-1, 0, 1} matrix a method trains on.

    Most methods train on the observed partial labels; the oracle references need the truth:
    ``full`` = 2Y - 1 (every label known), ``1p_alln`` = the observed positives plus every
    true negative as -1 (docs/methods.md, "bce" and "iun").
    """
    if method.labels == "observed":
        return observed.astype(np.int8)
    if truth is None:
        raise ValueError(
            f"method {method.name!r} trains on {method.labels!r} labels and needs the full training labels; "
            "it is a reference that cannot run on partially labelled data alone"
        )
    truth = np.asarray(truth)
    if truth.shape != observed.shape:
        raise ValueError(f"truth shape {truth.shape} does not match observed labels {observed.shape}")
    if method.labels == "full":
        return (2 * truth.astype(np.int8) - 1).astype(np.int8)
    if method.labels == "1p_alln":
        out = np.where(truth == 0, -1, 0).astype(np.int8)
        out[observed == 1] = 1
        return out
    raise ValueError(f"unknown label setting {method.labels!r} in method {method.name!r}")


def expected_positives(train_labels: np.ndarray, truth_train: np.ndarray | None) -> float:
    """Mean number of positives per training example: the prior of EPR and ROLE.

    The papers set it from the dataset's true statistics (docs/methods.md, "epr"); without
    the truth we fall back to the observed positives, a lower bound.
    """
    source = train_labels == 1 if truth_train is None else np.asarray(truth_train)
    return float(np.asarray(source).sum(axis=1).mean())


@dataclass
class MethodComponents:
    method: Method
    loss: losses.SPMLLoss
    regularizers: list[losses.SPMLLoss] = field(default_factory=list)
    algorithm: labeling.LabelingAlgorithm | None = None
    penalty: tuple[str, float] | None = None
    mixup_weight: float = 1.0

    # ---------------------------------------------------------------- declared needs
    @property
    def needs_class_ap(self) -> bool:
        return self.loss.needs_class_ap or (self.algorithm is not None and self.algorithm.needs_class_ap)

    @property
    def needs_train_predictions(self) -> bool:
        return self.algorithm is not None or self.needs_class_ap

    @property
    def terms(self) -> nn.ModuleList:
        """The loss and the regularisers as one module: their parameters and buffers (ROLE's
        label estimator, soft OPML's class AP) are what R runs stack for a batched step."""
        return nn.ModuleList([self.loss, *self.regularizers])

    def class_prior(self) -> torch.Tensor | None:
        """The label algorithm's latest estimate of each class's prior (CRISP), None for the others."""
        return None if self.algorithm is None else self.algorithm.class_prior()

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Extra optimiser groups owned by the method (ROLE's label estimator)."""
        groups = list(self.loss.param_groups(lr))
        for reg in self.regularizers:
            groups += reg.param_groups(lr)
        return groups

    def to(self, device: torch.device | str) -> "MethodComponents":
        self.loss.to(device)
        for reg in self.regularizers:
            reg.to(device)
        return self

    # ---------------------------------------------------------------- hooks
    def set_epoch(self, epoch: int, num_epochs: int) -> None:
        self.loss.set_epoch(epoch, num_epochs)
        for reg in self.regularizers:
            reg.set_epoch(epoch, num_epochs)

    def draw_mixing(self, generator: torch.Generator, batch: int) -> Mixing | None:
        """The step's random draws (PU-MLC's mixup permutation and lambda) from the run's own
        generator, before the loss: where a solo run's loss drew them, so batched and solo runs
        draw the same numbers. On the CPU: the loop sends the draws of all its runs to the
        device together. None for methods without randomness in their loss."""
        if not self.method.mixup or batch < 2:
            return None
        perm, lam = draw_pu_mixing(batch, generator)
        return perm, torch.tensor(lam, dtype=torch.float64)

    def training_loss(self, forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, logits: torch.Tensor,
                      batch: LabelBatch, mixing: Mixing | None,
                      parameters: Callable[[], Iterable[torch.Tensor]], *, strong: torch.Tensor | None = None,
                      embeddings: torch.Tensor | None = None,
                      latent: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The method's loss of one step. ``forward`` maps inputs to logits (PU-MLC's mixup term
        needs an extra forward pass, with ``mixing`` from :meth:`draw_mixing`); ``parameters``
        gives the model's trainable weights (L1/L2 penalties). ``strong`` and ``embeddings``: the
        strong view's logits and both views' label-wise embeddings (LAC/PLC; ``logits`` are then
        the weak view's); ``latent``: the model's Gaussian codes for a loss that ``needs_latent`` (MIME)."""
        device = logits.device
        labels = batch.labels.to(device)
        pseudo = losses.PseudoLabels(batch.pseudo.mask.to(device), batch.pseudo.target.to(device))
        index = batch.index.to(device)
        views = {} if strong is None else {"strong": strong, "embeddings": embeddings}
        if self.loss.needs_latent:
            views["latent"] = latent
        value = self.loss(logits, labels, pseudo=pseudo, index=index, **views)
        for reg in self.regularizers:
            value = value + reg(logits, labels, pseudo=pseudo, index=index, **views)
        if self.penalty is not None:
            value = value + self._weight_penalty(parameters(), lead=logits.dim() - 2)
        if mixing is not None:
            perm, lam = mixing
            value = value + self.mixup_weight * pu_mixup_consistency(forward, x, logits, labels, perm=perm, lam=lam)
        return value

    def corrections(self, logits: torch.Tensor, batch: LabelBatch) -> torch.Tensor | None:
        """The permanent corrections of this step (LL-Cp), None for every other method."""
        if not self.loss.corrects_labels:
            return None
        return self.loss.corrections(logits.detach(), batch.labels.to(logits.device))

    def _weight_penalty(self, parameters: Iterable[torch.Tensor], lead: int) -> torch.Tensor:
        """``lam`` times the L1 or squared L2 norm of the weights; with ``lead`` leading run
        dimensions (the stacked weights of R runs) one norm per run."""
        kind, lam = self.penalty
        params = list(parameters)

        def total(t: torch.Tensor) -> torch.Tensor:
            return t.sum(dim=tuple(range(lead, t.dim())))

        norm = sum(total(p.abs()) for p in params) if kind == "l1" else sum(total(p * p) for p in params)
        return lam * norm

    def after_epoch(self, probs: torch.Tensor, state: LabelState, epoch: int) -> dict[str, float]:
        """Run the label-state algorithm on the whole-training-set predictions; a loss that
        ``needs_class_prior`` then gets the algorithm's new estimate."""
        record: dict[str, float] = {}
        class_ap = None
        if self.needs_class_ap:
            observed_pos = (state.observed == 1).numpy().astype(np.int8)
            class_ap = metrics.average_precision(probs.detach().cpu().numpy(), observed_pos)
            if self.loss.needs_class_ap:
                self.loss.set_class_ap(torch.as_tensor(class_ap, dtype=torch.float32))
            record["train_observed_map"] = float(np.mean(class_ap))
        if self.algorithm is not None:
            stats = self.algorithm.step(probs, state, epoch, class_ap=class_ap) or {}
            record.update({f"labeling_{k}": float(v) for k, v in stats.items() if np.isscalar(v)})
            prior = self.algorithm.class_prior()
            if self.loss.needs_class_prior and prior is not None:
                self.loss.set_class_prior(prior)
        return record

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"loss": self.loss.state_dict(), "loss_extra": self.loss.extra_state()}
        if self.algorithm is not None:
            out["labeling"] = self.algorithm.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss.load_state_dict(state["loss"])
        self.loss.load_extra_state(state.get("loss_extra", {}))
        if self.algorithm is not None and "labeling" in state:
            self.algorithm.load_state_dict(state["labeling"])


def build_components(
    resolved: ResolvedMethod,
    *,
    num_train: int,
    num_classes: int,
    observed: np.ndarray,
    expected_num_pos: float,
    epochs: int,
    seed: int,
    features: Callable[[], torch.Tensor] | None = None,
) -> MethodComponents:
    """Instantiate the loss, regularisers and label algorithm of a resolved method.

    Data arguments (what a loss needs to know about the data, e.g. ROLE's table size) come
    from the run; hyperparameters come from the recipe and the user; run arguments of the
    label algorithm (APL's total epochs) come from the run. Nothing else is filled in.
    Input checks run once, on the label matrix, so the losses skip their per-step checks.
    ``features`` gives the training rows' features in index order (SMILE's graph): called only
    when a loss asks for them, since for an image run it is a pass over the training images.
    """
    m = resolved.method

    def training_features() -> torch.Tensor:
        if features is None:
            raise ValueError(f"method {m.name!r} needs the training rows' features, and this run gives none")
        return features()

    context = {"num_train": num_train, "num_classes": num_classes, "observed": observed,
               "expected_num_pos": expected_num_pos, "seed": seed, "features": training_features}
    loss_kwargs = dict(resolved.loss_kwargs)
    for key in (*losses.data_arguments(m.loss), *m.data_defaults):
        if key not in loss_kwargs:
            loss_kwargs[key] = context[key]() if key == "features" else context[key]
    loss = losses.create(m.loss, **loss_kwargs, validate_args=False)
    regs = []
    for name, kwargs in m.regularizers:
        kw = dict(kwargs)
        if name == "highrank" and "highrank_lam" in resolved.knobs:
            kw["lam"] = resolved.knobs["highrank_lam"]
        kw.update({k: context[k]() if k == "features" else context[k] for k in losses.data_arguments(name)
                   if k not in kw})
        regs.append(losses.create(name, **kw, validate_args=False))
    algorithm = None
    if m.labeling is not None:
        run_args = {"num_epochs": epochs}
        kw = {k: run_args[k] for k in labeling.ALGORITHMS[m.labeling].run_arguments}
        algorithm = labeling.create(m.labeling, **resolved.labeling_kwargs, **kw)
    if loss.needs_class_prior and (algorithm is None or not algorithm.provides_class_prior):
        raise ValueError(f"method {m.name!r}: loss {m.loss!r} needs class priors, but its label algorithm "
                         f"{m.labeling!r} does not estimate them; name one that does (e.g. 'class_prior')")
    penalty = None
    if m.weight_penalty is not None:
        kind, lam = m.weight_penalty
        penalty = (kind, float(resolved.knobs.get("penalty", lam)))
    return MethodComponents(method=m, loss=loss, regularizers=regs, algorithm=algorithm, penalty=penalty,
                            mixup_weight=float(resolved.knobs.get("mixup_weight", 1.0)))
