"""LinearInit (ROLE+LI, docs/methods.md, "role"): train the head on frozen backbone features first.

Features of the train and val splits are extracted once (eval mode, no augmentation), the
head is trained on them with the method's own loss for ``linear_init_epochs`` epochs as a
feature run, the best epoch by validation mAP is kept, and the phase-1 loss hands its state
to the phase-2 loss through the declared :meth:`~spmlkit.losses.SPMLLoss.transfer_from`
(ROLE's label estimator carries over; other losses keep nothing).
"""

from __future__ import annotations

import numpy as np
import torch

from ..labels import LabelState
from ..methods import ResolvedMethod
from .components import MethodComponents, build_components, expected_positives
from .config import RunConfig
from .loop import LoopParts, StoppingRule, run_loop
from .sources import FeatureSource, ImageSource

__all__ = ["linear_init"]

#: offset of phase 1's batch-order seed from the run's seed, so the two phases draw different orders
PHASE1_SEED_OFFSET = 10_000


def linear_init(config: RunConfig, resolved: ResolvedMethod, model: torch.nn.Module, comp: MethodComponents,
                source: ImageSource, state: LabelState, val_targets: np.ndarray, truth_train: np.ndarray,
                device: torch.device) -> None:
    feats_tr = source.features(model, "train")
    feats_va = source.features(model, "val")
    labels = state.observed.numpy()
    phase1 = build_components(resolved, num_train=len(labels), num_classes=labels.shape[1], observed=labels,
                              expected_num_pos=expected_positives(labels, truth_train),
                              epochs=config.linear_init_epochs, seed=config.seed)
    head = model.head.cpu()
    lr = config.linear_init_lr or config.lr
    optimizer = torch.optim.Adam([{"params": list(head.parameters()), "lr": lr}, *phase1.param_groups(lr)], lr=lr)
    parts = LoopParts(head, FeatureSource(feats_tr, feats_va, None, config.batch_size), LabelState(labels), phase1,
                      optimizer, torch.Generator().manual_seed(config.seed + PHASE1_SEED_OFFSET))
    run_loop(parts, epochs=config.linear_init_epochs, val_targets=val_targets, rule=StoppingRule(),
             truth_train=truth_train)
    head.to(device)
    comp.loss.transfer_from(phase1.loss)
