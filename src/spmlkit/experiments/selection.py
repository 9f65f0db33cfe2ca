"""Selection rules: which epoch of a run, and which configuration of a grid, a table reports.

A published number is the result of a selection: of an epoch within a run, and of a grid point
(learning rate, weight decay, batch size, hyperparameters) among several. Two rules, by name
(docs/protocol.md, "Selection rules"):

* ``val_map`` (spmlkit's, every table's default): the epoch with the best validation mAP, the one
  the training loop restores (docs/protocol.md, "Training protocols"), and the configuration with
  the best mean validation mAP over the seeds (:func:`~spmlkit.experiments.report.select_and_aggregate`).
* ``smile_votes`` (``Best.select`` of SMILE's official code, which reports its tables with it):
  each of five measures on the validation rows -- Hamming loss, coverage, average precision,
  ranking loss and one-error, in that order, SMILE's metric code -- votes for the epoch where it
  is best (the first such epoch: an epoch must improve on the best so far to take its vote);
  the epoch with the most votes wins. Among epochs with as many votes, the one the earliest
  measure voted for wins; when every measure voted for a different epoch, the code takes average
  precision's. Across a grid spmlkit lets the same five measures vote in the same way, each for
  the configuration with its best mean over the seeds (at each run's voted epoch): the code has
  no grid, and this is the one extension that keeps its rule.

A rule is a reading of runs that are already stored, not a way of training them: ``val_map``
reads what every run records; ``smile_votes`` needs each epoch's measures, which a run records
when its configuration sets ``epoch_metrics`` (:func:`~spmlkit.training.evaluation.epoch_measures`).
:func:`read_at` gives a table of runs the values of the epoch a rule selects, so every table
writer applies any rule to the same runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command line lists the rules in its help without importing pandas
    import pandas as pd

__all__ = ["RULES", "DEFAULT_RULE", "SMILE_VOTERS", "check_rule", "needs_epoch_metrics", "vote", "selected_epoch",
           "read_at", "choose_by_votes"]

#: the rules by name, with the one line ``--select`` prints in its help and tables print under themselves
RULES: dict[str, str] = {
    "val_map": "the epoch and the configuration with the best (mean) validation mAP",
    "smile_votes": "SMILE's code (Best.select): Hamming loss, coverage, average precision, ranking loss and one-error "
                   "on the validation rows each vote for their best epoch (and configuration); most votes wins",
}
DEFAULT_RULE = "val_map"
#: the measures of ``smile_votes`` in their voting order, each with whether larger is better; the names
#: are the keys of :func:`~spmlkit.metrics.smile_metrics` as a run records them (``val.smile.<name>``)
SMILE_VOTERS: tuple[tuple[str, bool], ...] = (("hamming_loss@0.5", False), ("coverage", False), ("example_ap", True),
                                             ("ranking_loss", False), ("one_error", False))
#: the voter whose choice stands when every voter chose another candidate (``Best.select``'s default)
_DEFAULT_VOTER = "example_ap"
#: the history keys of the measures ``smile_votes`` reads
_VAL_KEYS = tuple(f"val.smile.{name}" for name, _ in SMILE_VOTERS)


def check_rule(rule: str) -> str:
    """``rule`` if it is one of :data:`RULES`, else ValueError naming them."""
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}; choose one of {', '.join(RULES)}")
    return rule


def needs_epoch_metrics(rule: str) -> bool:
    """Whether runs must record every epoch's measures (``epoch_metrics``) to be read under ``rule``."""
    return check_rule(rule) != "val_map"


def vote(candidates: Sequence[Mapping[str, Any]], prefix: str = "val.smile.") -> int:
    """The index of the candidate (an epoch, a configuration) that SMILE's ``Best.select`` chooses
    among ``candidates``, each a mapping holding ``<prefix><measure>`` for the measures of
    :data:`SMILE_VOTERS`. A measure that is missing or NaN for a candidate gives it no chance of its
    vote (as in the code, where a comparison with NaN is false); ValueError when no measure has a
    value anywhere, since then nothing was measured to select on."""
    votes: dict[str, int] = {}
    for name, larger in SMILE_VOTERS:
        best: float | None = None
        for i, candidate in enumerate(candidates):
            value = _number(candidate.get(prefix + name))
            if math.isnan(value):
                continue
            if best is None or (value > best if larger else value < best):  # strictly better: ties keep the first
                best, votes[name] = value, i
    if not votes:
        raise ValueError(f"no candidate holds any of the measures {', '.join(prefix + n for n, _ in SMILE_VOTERS)}")
    counts: dict[int, int] = {}
    for name, _ in SMILE_VOTERS:  # in voting order: among equal counts the first voter's candidate wins
        if name in votes:
            counts[votes[name]] = counts.get(votes[name], 0) + 1
    most = max(counts.values())
    if most == 1 and _DEFAULT_VOTER in votes:
        return votes[_DEFAULT_VOTER]
    return next(candidate for candidate, count in counts.items() if count == most)


def selected_epoch(history: Sequence[Mapping[str, Any]], rule: str, best_epoch: int | None = None) -> int:
    """The epoch (1-based, as the history numbers them) that ``rule`` selects in one run's
    ``history``. Under ``val_map`` it is the run's ``best_epoch`` (the loop's choice, which a run
    that stopped early or resumed made with its whole history); under ``smile_votes`` the vote
    over every recorded epoch."""
    check_rule(rule)
    if rule == "val_map":
        if best_epoch is None:
            raise ValueError("val_map reads the run's best_epoch, which was not given")
        return int(best_epoch)
    epochs = [dict(e) for e in history]
    if not epochs or not all(any(k in e for k in _VAL_KEYS) for e in epochs):
        raise ValueError("smile_votes reads every epoch's validation measures, and this run's history lacks them")
    chosen = epochs[vote(epochs)]
    return int(chosen.get("epoch", epochs.index(chosen) + 1))


def read_at(runs: pd.DataFrame, rule: str) -> pd.DataFrame:
    """``runs`` (one row per run, :meth:`~spmlkit.experiments.store.ResultsStore.to_dataframe`) read at
    the epoch ``rule`` selects: a copy with ``selected_epoch`` and the validation measures of that
    epoch (``val.smile.<name>``, where recorded). Under ``val_map`` the numbers are those the runs
    recorded (their restored best epoch). Under ``smile_votes`` every number the history keeps per
    epoch replaces the run's own (``test_map``, ``val_map``, ``test.<name>``), and the test metrics
    the history does not keep per epoch (thresholds chosen on validation, ...) become NaN, so that no
    number is read at an epoch it was not measured at. ValueError, naming the first run, when a run's
    history lacks what the rule needs (it trained without ``epoch_metrics``)."""
    import pandas as pd

    check_rule(rule)
    out = runs.copy()
    if out.empty:
        out["selected_epoch"] = pd.Series(dtype=float)
        return out
    rows = out.to_dict("records")
    chosen: list[dict[str, Any]] = []
    for rec in rows:
        history = rec.get("history") or []
        if rule == "val_map":  # the run's own choice; a record without one (another program's) has none
            best = _best_epoch(rec)
            chosen.append(next((dict(e) for e in history if e.get("epoch") == best), {"epoch": best}))
            continue
        try:
            epoch = selected_epoch(history, rule, _best_epoch(rec))
        except ValueError:
            raise ValueError(f"run {rec.get('run_id')} ({rec.get('method')}, {rec.get('dataset')}) recorded no "
                             f"per-epoch validation measures, which selection rule {rule!r} reads: it trained without "
                             f"epoch_metrics. Train with --select {rule} (which sets epoch_metrics), or read these "
                             "runs with --select val_map") from None
        at = next((dict(e) for e in history if e.get("epoch") == epoch), {})
        chosen.append(at)
    out["selected_epoch"] = [_number(c.get("epoch")) for c in chosen]
    # under val_map the runs' own test numbers are the selected epoch's already; only the validation measures are added
    prefixes = ("val.smile.",) if rule == "val_map" else ("val.smile.", "test.")
    keys = sorted({k for c in chosen for k in c if k.startswith(prefixes)})
    for key in keys:
        out[key] = [_number(c.get(key)) for c in chosen]
    if rule != "val_map":
        out["test_map"] = [_number(c.get("test.map")) for c in chosen]
        out["val_map"] = [_number(c.get("val_map")) for c in chosen]
        kept = {k for k in keys if k.startswith("test.")}
        for column in [c for c in out.columns if c.startswith("test.") and c not in kept]:
            out[column] = math.nan
    return out


def choose_by_votes(configs: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The configuration (a key of ``configs``, whose values are its runs read at their selected
    epochs) that ``smile_votes`` chooses across a grid: each measure votes for the configuration with
    its best mean over the runs; configurations are candidates in sorted key order, so a tie never
    depends on the order of the runs. A configuration whose runs miss a measure in some seed gets no
    vote of that measure (as :func:`~spmlkit.experiments.report.select_and_aggregate` never prefers a
    configuration with a NaN score)."""
    keys = sorted(configs)
    means = []
    for key in keys:
        runs = configs[key]
        row = {}
        for name, _ in SMILE_VOTERS:
            values = [_number(r.get(f"val.smile.{name}")) for r in runs]
            row[f"val.smile.{name}"] = math.nan if any(math.isnan(v) for v in values) else sum(values) / len(values)
        means.append(row)
    return keys[vote(means)]


def _best_epoch(rec: Mapping[str, Any]) -> int | None:
    value = rec.get("best_epoch")
    return None if value is None or _number(value) != _number(value) else int(value)


def _number(value: Any) -> float:
    """A recorded value as a float; a missing or null one (the store keeps NaN as null) is NaN."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
