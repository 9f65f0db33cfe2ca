"""BoostLU: the large-loss methods on boosted class activation maps.

Kim et al., CVPR 2023 (docs/methods.md, "boostlu_ll_r"). The method's part is in the model: the
linear classifier is applied at every location of the backbone's feature map, the positive
scores are multiplied by ``boost_alpha``, and the boosted maps are averaged into the logits
(:func:`~spmlkit.models.boosted_logits`). It brings that part to the run's network
(:meth:`BoostLU.model_parts`); its losses are the large-loss family's. A row of pooled features has
no map to boost, so it trains on images only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..models.cam import CAM_BOOST
from .base import Meaning, RunInfo
from .loss_method import LossMethod

__all__ = ["BoostLU"]


class BoostLU(LossMethod):
    """A large-loss method (its :attr:`made_of`) whose network boosts class activation maps by
    ``boost_alpha`` (the paper's 5)."""

    made_of = None
    on_features = Meaning(False, f"{CAM_BOOST.does}, which need {CAM_BOOST.needs}; pooled features have none")

    def __init__(self, run: RunInfo, *, boost_alpha: float = 5.0, **hparams: Any) -> None:
        super().__init__(run, **hparams)
        self.boost_alpha = self.check_number("boost_alpha", boost_alpha, low=0.0, low_open=True)

    @classmethod
    def model_parts(cls, hparams: Mapping[str, Any]) -> dict[str, Any]:
        alpha = hparams.get("boost_alpha", cls.hyperparameters()["boost_alpha"])
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (alpha > 0 and math.isfinite(alpha)):
            raise ValueError(f"method {cls.name!r}: boost_alpha (BoostLU's alpha) must be a positive number, "
                             f"got {alpha!r}")
        return {"cam_boost": float(alpha)}
