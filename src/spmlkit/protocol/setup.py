"""One dataset under one observation setting: the split indices and the observed labels.

The observed labels are drawn once over the whole official train list, before the split
(docs/protocol.md, "Observed labels"), so validation rows also carry partial labels (used
only by the "observed" validation variant) and every method sees the same draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .observation import Observation
from .split import split_train_val

__all__ = ["ProtocolData", "prepare_protocol"]


@dataclass(frozen=True)
class ProtocolData:
    """Split indices and observed labels of a dataset under one observation setting."""

    train_idx: np.ndarray
    val_idx: np.ndarray
    observed: np.ndarray  # [N_official_train, C] over the whole official train list
    observation: Observation


def prepare_protocol(
    Y_train: np.ndarray, observation: Observation | str = "single_positive", *, val_frac: float = 0.2, split_seed: int = 1200
) -> ProtocolData:
    obs = Observation.parse(observation) if isinstance(observation, str) else observation
    observed = obs.apply(Y_train)
    train_idx, val_idx = split_train_val(len(Y_train), val_frac=val_frac, seed=split_seed)
    if len(val_idx) == 0:
        raise ValueError(
            f"the validation split is empty ({len(Y_train)} training examples, val_frac={val_frac}); "
            "model selection needs validation data: use a larger val_frac or more data"
        )
    return ProtocolData(train_idx, val_idx, observed, obs)
