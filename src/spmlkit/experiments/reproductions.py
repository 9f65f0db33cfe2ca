"""The published experiments ``spmlkit reproduce`` reruns, by name (docs/reproductions.md).

Apart from :mod:`~spmlkit.experiments.reproduce`, which runs them, so that the command line can
list them in its help without importing NumPy, pandas or torch (docs/architecture.md, "Start-up
time").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .presets import SMILE_TABULAR_HPARAMS, TABULAR_PROTOCOL
from .published import CRISP_METHODS

__all__ = ["PublishedRun", "Reproduction", "REPRODUCTIONS", "SMILE_AS_PUBLISHED", "get_reproduction"]


@dataclass(frozen=True)
class PublishedRun:
    """A method as its paper's code ran it, where the code or its README fixes every setting and the
    rule that picks the reported epoch: the reading "as published" of a reproduction, beside the fair
    grid (docs/reproductions.md, "Two readings"). ``hparams`` maps each data set the README runs (by
    spmlkit's name) to its hyperparameters; ``parts`` says, for a table's reader, where each part of
    the setting comes from."""

    method: str
    source: str  # one line: the code and what of it fixes the setting
    hparams: dict[str, dict[str, Any]]
    lr: float
    batch_size: int
    weight_decay: float
    epochs: int
    rule: str  # the selection rule of the code (experiments/selection.py)
    parts: tuple[tuple[str, str], ...] = ()


#: SMILE as its official code (palm-ml/smile, train_smile2.py) runs each set of its README: the README's
#: command gives --ep 10 and the set's --bias, --p, --mu, --rate; lr 1e-3 and batch 16 are the parser's
#: defaults, which no command changes; Adam is built without weight decay and the lr schedule's decay rate
#: is 1 (a constant lr); the reported epoch is Best.select's (docs/methods.md, "smile")
SMILE_AS_PUBLISHED = PublishedRun(
    method="smile", source="SMILE's official code (palm-ml/smile): its README's command per set, train_smile2.py",
    hparams={name: dict(values) for name, values in SMILE_TABULAR_HPARAMS.items()},
    lr=1e-3, batch_size=16, weight_decay=0.0, epochs=10, rule="smile_votes",
    parts=(("hyperparameters", "the README's command for the set (its bias, p, mu and rate)"),
           ("lr, batch, weight decay, epochs", "1e-3 and 16 (train_smile2.py's defaults), no weight decay (its "
                                               "Adam), 10 (the README's ep 10)"),
           ("reported epoch", "Best.select: five validation measures vote (smile_votes)"),
           ("network and loss", "spmlkit's SMILE (docs/methods.md, \"smile\")")))


@dataclass(frozen=True)
class Reproduction:
    """A published experiment as spmlkit reruns it: its tables, data sets, protocol and grid.

    ``grid_hparams``: hyperparameters the paper leaves open, swept as axes of the fair grid beside lr,
    weight decay and batch size, per method (CRISP's warm-up, which its text does not give);
    ``as_published``: the methods whose code fixes their setting, run that way too;
    ``references``: methods run beside the paper's rows by default, each with the sentence that says
    what it sees beyond the observation and what it separates (CRISP's risk with the true priors
    separates its prior estimator from its risk); no paper publishes a number for them."""

    name: str
    source: str  # the paper's short name in :mod:`~spmlkit.experiments.published`
    tables: dict[str, str]  # published table -> metric
    datasets: dict[str, str]  # the published data set name -> spmlkit's dataset argument
    method_labels: dict[str, str]  # the paper's row label -> spmlkit method name
    lrs: tuple[float, ...]
    weight_decays: tuple[float, ...]
    batch_sizes: tuple[int, ...]
    trials: int
    settings: dict[str, Any] = field(default_factory=dict)  # every run's settings (the protocol)
    description: str = ""
    grid_hparams: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict)
    as_published: tuple[PublishedRun, ...] = ()
    references: dict[str, str] = field(default_factory=dict)

    @property
    def epochs(self) -> int:
        """The paper's epochs (its protocol's settings)."""
        return int(self.settings.get("epochs", 10))


#: what CRISP's text leaves open, swept: its warm-up length
_CRISP_OPEN: dict[str, tuple[Any, ...]] = {"warmup_epochs": (1, 3, 5)}

REPRODUCTIONS: dict[str, Reproduction] = {
    "crisp-tabular": Reproduction(
        name="crisp-tabular", source="CRISP",
        tables={"CRISP Table 2": "ranking_loss", "CRISP Table 8": "example_ap", "CRISP Table 9": "coverage",
                "CRISP Table 10": "hamming_loss", "CRISP Table 11": "one_error"},
        datasets={"yeast": "yeast", "scene": "scene", "corel5k": "corel5k", "delicious": "delicious"},
        method_labels=CRISP_METHODS, lrs=(1e-2, 1e-3, 1e-4, 1e-5), weight_decays=(1e-2, 1e-3, 1e-4, 1e-5),
        batch_sizes=(8, 16), trials=5, settings=dict(TABULAR_PROTOCOL),
        description="CRISP (arXiv 2309.13886) Tables 2, 8-11: five example-based metrics on the MULAN sets under "
                    "random 80/10/10 partitions, 5 trials, SMILE's MLP, the papers' lr x weight decay x batch grid",
        grid_hparams={"crisp": _CRISP_OPEN, "crisp_true_prior": _CRISP_OPEN},  # the reference: CRISP's grid
        as_published=(SMILE_AS_PUBLISHED,),
        references={"crisp_true_prior": "CRISP's risk and warm-up with each class's true prior on the training rows "
                                        "in place of CRISP's estimate, which no single-positive method can know: "
                                        "beside CRISP's row it separates the prior estimator from the risk"}),
}


def get_reproduction(name: str) -> Reproduction:
    if name not in REPRODUCTIONS:
        raise ValueError(f"unknown reproduction {name!r}; choose one of {', '.join(REPRODUCTIONS)}")
    return REPRODUCTIONS[name]
