"""Defaults of feature runs: one set, used by ``spmlkit train``, the estimator and the presets.

Image runs take the base protocol's defaults (the :class:`~spmlkit.training.config.RunConfig`
field defaults: ResNet-50, batch 8, lr 1e-5, 10 epochs). A linear head on fixed features
trains in a fraction of a second per epoch and wants a larger step and more epochs: 20
epochs of batch 64 at lr 3e-3, the middle of the Yeast benchmark's lr grid
(docs/protocol.md, "Training protocols").
"""

from __future__ import annotations

from typing import Any

__all__ = ["FEATURE_DEFAULTS"]

FEATURE_DEFAULTS: dict[str, Any] = {"epochs": 20, "batch_size": 64, "lr": 3e-3}
