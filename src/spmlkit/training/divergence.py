"""A run that diverged: the one line that says where, what and the likely cause.

The loop marks a run diverged when its training loss, its weights or its predictions stop being
finite (:mod:`spmlkit.training.loop`); nothing after that point means anything, so the run
stops there instead of failing later inside a metric with a traceback (docs/protocol.md, "Runs
that diverge"). A diverged run is a failed run: it has no test numbers, :func:`train` raises
:class:`RunDiverged` (one line, exit 2, after writing ``diverged.json`` into a run folder), and a
sweep or benchmark records it as a failed run with that line.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from .config import RunConfig

__all__ = ["RunDiverged", "divergence_message"]


class RunDiverged(InputError):
    """A run whose loss, weights or predictions became non-finite (the message says where)."""


def divergence_message(config: RunConfig, where: dict[str, Any], lr_now: float | None = None) -> str:
    """One line from the loop's ``LoopState.diverged`` record and the run's settings.

    The likely cause is named from the settings: a learning rate too large is by far the most
    common (and what a schedule's lr at that point says); the line gives both lrs when a schedule
    changed it, and the options that lower it."""
    at = f"epoch {where['epoch']}"
    if where.get("step") is not None:
        at += f", step {where['step']} of {where['steps']}"
    lr = config.optimisation.lr
    schedule = config.recipe.lr_schedule
    rate = f"lr {lr:g}"
    if schedule != "none" and lr_now is not None:
        rate += f", {lr_now:g} at the end of that epoch by its {schedule} schedule"
    return (f"the run ({config.method.name} on {config.data.dataset}, seed {config.optimisation.seed}) diverged in "
            f"{at}: its {where['what']} became {where['value']}; the likely cause is a learning rate too large "
            f"for it ({rate}): lower --lr (lr: in a config or sweep file), or check the data for extreme values")
