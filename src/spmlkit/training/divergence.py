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

    The likely cause is named from the settings. A learning rate too large is by far the most
    common (and what a schedule's lr at that point says); the line gives both lrs when a schedule
    changed it, and the options that lower it. A weight decay takes part in every step too: a
    weight decay of 1 or more (beyond any usual setting) whose ``lr × weight decay`` is 1 or more
    can take a weight past zero in one step (plain and decoupled decay alike shrink it by about
    that share), so it is named as the likely cause; any other weight decay above 0 is named
    beside the lr, since either may be it."""
    at = f"epoch {where['epoch']}"
    if where.get("step") is not None:
        at += f", step {where['step']} of {where['steps']}"
    lr, decay = config.optimisation.lr, config.optimisation.weight_decay
    schedule = config.recipe.lr_schedule
    rate = f"lr {lr:g}"
    if schedule != "none" and lr_now is not None:
        rate += f", {lr_now:g} at the end of that epoch by its {schedule} schedule"
    head = (f"the run ({config.method.name} on {config.data.dataset}, seed {config.optimisation.seed}) diverged in "
            f"{at}: its {where['what']} became {where['value']}; ")
    data = "or check the data for extreme values"
    if decay >= 1 and lr * decay >= 1:
        return (f"{head}the likely cause is a weight decay too large for it (weight decay {decay:g} with {rate}: lr × "
                f"weight decay is {lr * decay:g}, and at 1 or more a step can take the weights past zero): lower "
                f"--weight-decay (weight_decay: in a config or sweep file), {data}")
    if decay > 0:
        return (f"{head}the likely cause is a learning rate or a weight decay too large for it ({rate}, weight decay "
                f"{decay:g}): lower --lr or --weight-decay (lr, weight_decay: in a config or sweep file), {data}")
    return (f"{head}the likely cause is a learning rate too large for it ({rate}): lower --lr (lr: in a config or "
            f"sweep file), {data}")
