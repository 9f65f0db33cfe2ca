"""LinearInit (ROLE+LI, docs/methods.md, "role"): train the head on frozen backbone features first.

Features of the train and val splits are extracted once (eval mode, no augmentation), the
head is trained on them with the method's own loss for ``linear_init_epochs`` epochs as a
feature run (a group of one through the same loop), the best epoch by validation mAP is kept,
and the phase-1 method hands its state to the phase-2 method through the declared
:meth:`~spmlkit.methods.Method.transfer_from` (ROLE's label estimator carries over; other
methods keep nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..labels import LabelState
from ..models import FeatureHead
from .loop import Group, Run, run_loop
from .sources import FeatureSource, ImageSource

if TYPE_CHECKING:
    from .plan import RunPlan

__all__ = ["linear_init"]

#: offset of phase 1's batch-order seed from the run's seed, so the two phases draw different orders
PHASE1_SEED_OFFSET = 10_000


def linear_init(plan: RunPlan, run: Run, source: ImageSource) -> None:
    """Phase 1 of LinearInit for ``run`` (phase 2 is the run itself, from the head it leaves)."""
    config = plan.config
    feats_tr = source.features(run.model, "train")
    feats_va = source.features(run.model, "val")
    labels = run.state.observed.numpy()
    phase1 = plan.build_method(epochs=config.schedule.linear_init_epochs, device="cpu", features=lambda: feats_tr)
    linear = run.model.head.cpu()
    head = FeatureHead(linear.in_features, linear.out_features, layer=linear)  # the model's own layer, trained
    lr = config.schedule.linear_init_lr or config.optimisation.lr
    optimizer = torch.optim.Adam([{"params": list(head.parameters()), "lr": lr}, *phase1.param_groups(lr)], lr=lr)
    phase = Run(head, phase1, LabelState(labels), torch.Generator().manual_seed(config.optimisation.seed + PHASE1_SEED_OFFSET))
    group = Group([phase], FeatureSource(feats_tr, feats_va, None, config.optimisation.batch_size), optimizer)
    run_loop(group, epochs=config.schedule.linear_init_epochs, val_targets=plan.split.val_targets,
             truth_train=plan.split.truth_train)
    head.to(plan.device)
    run.method.transfer_from(phase1)
