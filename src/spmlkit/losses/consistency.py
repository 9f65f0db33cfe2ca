"""LAC's two stages: pseudo-label consistency across two views (PLC), then label-aware contrast (LAC).

Xie, Xiao, Huang, "Label-Aware Global Consistency for Multi-Label Learning with Single Positive
Labels", NeurIPS 2022 (docs/methods.md, "plc" and "lac", with what the official code does and
where spmlkit differs). Every row is seen twice: a weakly augmented view (flip) and a strongly
augmented one (flip, cutout, RandAugment, colour jitter, grey; :mod:`spmlkit.data.strong_augment`).

**PLC** (stage 1, and part of stage 2). With ``z``/``z'`` the weak/strong logits and ``y`` the
observed positives (0/1):

``L_an = mean_{b,c} BCE(z_bc, y_bc)``   (assume negative, on the weak view)

``p_bc = σ(sg z_bc) + y_bc``,  ``m_bc = 1[p_bc ≥ τ or p_bc < 1 − τ]``,  ``ŷ_bc = 1[p_bc ≥ τ]``

``L_plc = Σ m_bc BCE(z'_bc, ŷ_bc) / Σ m_bc``  and  ``L = L_an + λ_plc L_plc``.

**LAC** (stage 2) adds a supervised contrastive term on label-wise embeddings ``e_bc`` (unit
vectors, one per row and class and view). Every positive pair (b, c) of the batch (observed or
pseudo, ``ŷ_bc = 1``) enters a memory queue as the pair ``(e_bc, e'_bc)`` labelled c; on the
queue's 2N embeddings ``v_i`` with labels ``k_i``, temperature T:

``L_lac = −(1/2N) Σ_i (1/|P(i)|) Σ_{j∈P(i)} log[ exp(v_i·v_j/T) / Σ_{a≠i} exp(v_i·v_a/T) ]``

with ``P(i) = {j ≠ i : k_j = k_i}`` (never empty: the other view of i's own pair is in it). The
entries of earlier steps are constants; this step's carry gradients. ``L = L_an + λ_plc L_plc +
λ_lac L_lac``.
"""

from __future__ import annotations

from typing import Any, Unpack

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import LossContext, LossOptions, SPMLLoss, check_number, make_room, register

__all__ = ["LACLoss", "PLCLoss", "plc_terms", "push_queue", "supervised_contrast"]


def plc_terms(weak: Tensor, strong: Tensor, labels: Tensor, threshold: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(L_an, L_plc, ŷ)`` of one batch: weak and strong logits ``[B, C]``, labels in {1, 0, -1}.

    ``ŷ`` (bool ``[B, C]``) are the hard positives, observed or pseudo. An observed negative (-1;
    SPML has none) is always a target 0 of the consistency term [ours: the code's labels are 0/1]. When
    no entry is confident (a batch without positives) ``L_plc`` is 0 [ours: the code divides 0 by 0].
    """
    observed = (labels == 1).to(weak.dtype)
    an = F.binary_cross_entropy_with_logits(weak, observed, reduction="mean")
    score = torch.sigmoid(weak.detach()) + observed
    negative = labels == -1
    hard = (score >= threshold) & ~negative
    mask = ((score >= threshold) | (score < 1 - threshold) | negative).to(weak.dtype)
    terms = F.binary_cross_entropy_with_logits(strong, hard.to(strong.dtype), reduction="none") * mask
    plc = terms.sum() / mask.sum().clamp_min(1.0)
    return an, plc, hard


def supervised_contrast(features: Tensor, labels: Tensor, temperature: float) -> Tensor:
    """The supervised contrastive loss of ``features`` ``[N, V, D]`` (V views of N items, unit
    vectors) with item labels ``[N]``: every one of the N·V embeddings is an anchor, its positives
    are the other embeddings of its label (docs/methods.md, "lac")."""
    n, views, _ = features.shape
    flat = torch.cat(torch.unbind(features, dim=1), dim=0)  # view-major, as the anchors are counted
    logits = flat @ flat.T / temperature
    logits = logits - logits.max(dim=1, keepdim=True).values.detach()  # the value is shift-free
    same = (labels.view(-1, 1) == labels.view(1, -1)).to(flat.dtype).repeat(views, views)
    others = 1.0 - torch.eye(n * views, dtype=flat.dtype, device=flat.device)
    positives = same * others
    log_prob = logits - torch.log((torch.exp(logits) * others).sum(dim=1, keepdim=True))
    return -((positives * log_prob).sum(dim=1) / positives.sum(dim=1)).mean()


def push_queue(queue: Tensor, labels: Tensor, pointer: int, filled: int, new: Tensor, new_labels: Tensor
               ) -> tuple[Tensor, Tensor, int, int]:
    """The memory queue after one step: ``(contents, labels, pointer, filled)``.

    ``queue`` ``[Q, V, D]`` and ``labels`` ``[Q]`` hold earlier steps' entries (constants); the
    ``n`` new ones go to ``[pointer' - n, pointer')`` with ``pointer' = pointer + n``, or ``n`` when
    that reaches the end (the queue starts over at its front, as the official code does).
    ``filled`` is how much of the queue has ever been written: the contents are its first
    ``filled`` entries. The returned contents carry ``new``'s gradient; the caller stores them
    detached.
    """
    size, n = len(queue), len(new)
    if n > size:
        raise ValueError(f"lac: this batch has {n} positive (row, class) pairs but the memory queue holds "
                         f"{size}; raise the hyperparameter queue_size to at least {n} (or lower the batch size)")
    end = n if pointer + n >= size else pointer + n
    contents = torch.cat([queue[: end - n], new, queue[end:]])
    kinds = torch.cat([labels[: end - n], new_labels.to(labels.dtype), labels[end:]])
    filled = max(filled, end)
    return contents, kinds, end, filled


def _check_threshold(name: str, threshold: float) -> float:
    return check_number(name, "threshold", threshold, low=0.5, high=1.0)


@register("plc", "LAC's stage 1: AN on the weak view + hard pseudo-label consistency on the strong view")
class PLCLoss(SPMLLoss):
    """``L_an + plc_weight · L_plc`` (module docstring). ``threshold`` τ in [0.5, 1]: entries with
    ``σ(z) ≥ τ`` become positives, ``σ(z) < 1 − τ`` negatives, the rest are left out."""

    reads = ("strong",)
    reductions = ("mean",)

    def __init__(self, threshold: float = 0.6, plc_weight: float = 1.0, **options: Unpack[LossOptions]) -> None:
        super().__init__(**options)
        self.threshold = _check_threshold(self.name, threshold)
        self.plc_weight = check_number(self.name, "plc_weight", plc_weight, low=0.0)

    def _views(self, logits: Tensor, ctx: LossContext) -> Tensor:
        if ctx.strong is None or ctx.strong.shape != logits.shape:
            got = None if ctx.strong is None else tuple(ctx.strong.shape)
            raise ValueError(f"loss {self.name!r} needs the strong view's logits of the same rows (strong=, shape "
                             f"{tuple(logits.shape)}), got {got}; train it on images with two views per row")
        return ctx.strong

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        an, plc, _ = plc_terms(logits, self._views(logits, ctx), labels, self.threshold)
        return an + self.plc_weight * plc


@register("lac", "LAC's stage 2: PLC + a label-aware contrastive term over a memory queue of label-wise embeddings")
class LACLoss(PLCLoss):
    """``L_an + plc_weight · L_plc + lac_weight · L_lac`` (module docstring).

    The memory queue is the loss's state (buffers, so a checkpoint carries it): ``queue_size``
    pairs of embeddings, their classes (1-based, 0 = never written), the write pointer and how
    much has been written. It is allocated at the first step, when the embedding width is known.
    """

    reads = ("strong", "embeddings")

    def __init__(self, threshold: float = 0.9, plc_weight: float = 1.0, lac_weight: float = 1.0,
                 temperature: float = 0.5, queue_size: int = 512, **options: Unpack[LossOptions]) -> None:
        super().__init__(threshold=threshold, plc_weight=plc_weight, **options)
        self.lac_weight = check_number(self.name, "lac_weight", lac_weight, low=0.0)
        self.temperature = check_number(self.name, "temperature", temperature, low=0.0, low_open=True)
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"loss {self.name!r}: queue_size must be a positive integer, got {queue_size!r}")
        self.queue_size = queue_size
        self.register_buffer("queue", None)
        self.register_buffer("queue_labels", None)
        self.register_buffer("queue_state", torch.zeros(2, dtype=torch.long))  # pointer, filled

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        make_room(self, state_dict, prefix, "queue")
        make_room(self, state_dict, prefix, "queue_labels")
        super()._load_from_state_dict(state_dict, prefix, *args)

    def loss(self, logits: Tensor, labels: Tensor, ctx: LossContext) -> Tensor:
        an, plc, hard = plc_terms(logits, self._views(logits, ctx), labels, self.threshold)
        emb = ctx.embeddings
        if emb is None or emb.dim() != 4 or emb.shape[:3] != (2, *logits.shape):
            got = None if emb is None else tuple(emb.shape)
            raise ValueError(f"loss {self.name!r} needs label-wise embeddings of both views (embeddings=, shape "
                             f"[2, {logits.shape[0]}, {logits.shape[1]}, D]), got {got}; train it with the "
                             "label-query head (image_head: label_query)")
        if self.queue is None:
            self.queue = emb.new_zeros(self.queue_size, 2, emb.shape[-1]).detach()
            self.queue_labels = torch.zeros(self.queue_size, dtype=torch.long, device=emb.device)
        rows, classes = hard.nonzero(as_tuple=True)  # row-major, the code's order
        pairs = torch.stack([emb[0, rows, classes], emb[1, rows, classes]], dim=1)
        pointer, filled = (int(v) for v in self.queue_state.tolist())
        contents, kinds, pointer, filled = push_queue(self.queue, self.queue_labels, pointer, filled, pairs,
                                                      classes + 1)
        # an empty queue (no positive pair yet: a batch without positives) contributes nothing [ours]
        lac = supervised_contrast(contents[:filled], kinds[:filled], self.temperature) if filled else an.new_zeros(())
        with torch.no_grad():  # the state the next step sees: this step's entries as constants
            self.queue.copy_(contents.detach())
            self.queue_labels.copy_(kinds)
            self.queue_state.copy_(torch.tensor([pointer, filled]))
        return an + self.plc_weight * plc + self.lac_weight * lac
