"""A leaderboard across data sets: ranks per data set, average ranks, Friedman and Nemenyi.

One number per (data set, method) goes in: the test mAP of the method's lr selected on
validation, exactly the number of the data set's own benchmark table (:func:`spmlkit.experiments.
benchmark.summarize`). Out comes what a reader comparing methods over many data sets needs
(docs/leaderboard.md, "How the leaderboard ranks"):

* the rank of every method on every data set (1 = best; tied methods share the mean of the
  ranks they span), and each method's average rank over the data sets;
* the Friedman test of "all methods rank alike" (``scipy.stats.friedmanchisquare``), when
  there are at least 3 methods and 3 data sets;
* the Nemenyi post-hoc p-values (``scikit_posthocs.posthoc_nemenyi_friedman``) and the
  critical difference at ``alpha`` that the diagram of :mod:`spmlkit.experiments.cd_diagram`
  draws.

References (methods that see more labels than the methods compared: full labels, one positive
and all negatives) are shown beside the ranks with their scores but not ranked: ranked, they
take the first places by seeing more, and one such method alone can make the Friedman test
significant (docs/leaderboard.md, "References beside the ranks").

Mean mAP over data sets is deliberately not the score: data sets differ in how hard they
are by tens of points, so a mean is ruled by the hardest sets; a rank counts every set alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..io import atomic_write_json, atomic_write_text
from .published import display_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FriedmanResult", "Leaderboard", "build_leaderboard", "critical_difference", "diagram",
           "rank_within_datasets", "scores_from_tables", "spread_from_tables", "summary_lines", "leaderboard_table",
           "to_csv", "to_markdown", "write_leaderboard", "MIN_FOR_FRIEDMAN", "ALPHA", "RANK_DECIMALS"]

#: significance level of the Nemenyi critical difference and of the Friedman verdict
ALPHA = 0.05
#: the Friedman test needs at least this many methods and this many data sets: scipy's test
#: refuses fewer than 3 methods, and with 2 data sets its chi-square approximation is far from the
#: exact distribution (3 methods ranked alike on 2 sets: chi2 = 4, approximate p 0.135, exact 1/6)
MIN_FOR_FRIEDMAN = 3
#: scores are ranked as the tables print them, to 0.01 mAP points: two methods whose numbers read
#: the same tie, rather than being ordered by a difference far below any noise (docs/leaderboard.md,
#: "How the leaderboard ranks")
RANK_DECIMALS = 2


@dataclass(frozen=True)
class FriedmanResult:
    statistic: float
    pvalue: float
    n_datasets: int
    n_methods: int

    @property
    def df(self) -> int:
        return self.n_methods - 1


@dataclass
class Leaderboard:
    """Everything the leaderboard shows; built by :func:`build_leaderboard`."""

    #: data sets x methods: test mAP (%) of each method's selected lr; NaN where it has no finished run
    scores: pd.DataFrame
    #: ranked data sets x ranked methods: 1 = best on that data set, ties share their mean rank
    ranks: pd.DataFrame
    #: ranked methods, best (lowest) average rank first; equal averages keep the input order
    average_rank: pd.Series
    #: data sets and methods left out of the ranks, each with the reason
    left_out: dict[str, str] = field(default_factory=dict)
    friedman: FriedmanResult | None = None
    #: Nemenyi p-values between ranked methods (symmetric, 1 on the diagonal)
    nemenyi: pd.DataFrame | None = None
    critical_difference: float | None = None
    #: why a test or the diagram is absent, in words for the reader
    notes: list[str] = field(default_factory=list)
    alpha: float = ALPHA
    #: methods shown with their scores but not ranked (they see more labels than the others)
    references: list[str] = field(default_factory=list)
    #: data sets x methods: the standard deviation over seeds of each score; NaN where one seed
    #: gave it (no spread) or unknown
    spread: pd.DataFrame | None = None
    #: how the numbers were made, one sentence each (where the hyperparameters came from)
    setup: list[str] = field(default_factory=list)

    @property
    def ranked_datasets(self) -> list[str]:
        return list(self.ranks.index)

    @property
    def has_diagram(self) -> bool:
        """The diagram needs average ranks over at least 2 data sets and a Nemenyi matrix."""
        return self.nemenyi is not None and self.critical_difference is not None


def scores_from_tables(tables: Mapping[str, Sequence[Mapping[str, Any]]],
                       methods: Sequence[str] = ()) -> pd.DataFrame:
    """``{dataset: benchmark table rows}`` -> data sets x methods of ``test_map`` (percent).

    The columns are ``methods`` (the benchmark's, so that one absent from every table -- every
    run of it failed -- is still a column, and the leaderboard names it as left out), then any
    other method of the tables, in the order in which they first appear; a method absent from a
    data set's table (every run of it failed there) is NaN.
    """
    methods = list(dict.fromkeys(methods))
    for rows in tables.values():
        methods += [r["method"] for r in rows if r["method"] not in methods]
    data = {ds: {r["method"]: float(r["test_map"]) for r in rows} for ds, rows in tables.items()}
    return pd.DataFrame.from_dict(data, orient="index", columns=methods).astype(float)


def spread_from_tables(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> pd.DataFrame:
    """``{dataset: benchmark table rows}`` -> data sets x methods of ``test_map_std``, in the order
    of :func:`scores_from_tables`; NaN where a score comes from one seed (no spread)."""
    scores = scores_from_tables(tables)
    data = {ds: {r["method"]: float(r["test_map_std"]) if int(r.get("seeds", 2)) > 1 else math.nan for r in rows}
            for ds, rows in tables.items()}
    return pd.DataFrame.from_dict(data, orient="index", columns=list(scores.columns)).astype(float)


def rank_within_datasets(scores: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Rank the methods (columns) within each data set (row): the highest score is rank 1, and
    methods with equal scores share the mean of the ranks they occupy (scores 80, 70, 70, 60 ->
    ranks 1, 2.5, 2.5, 4). Scores are compared rounded to ``decimals`` (None: exactly as stored)."""
    return (scores if decimals is None else scores.round(decimals)).rank(axis=1, ascending=False, method="average")


def critical_difference(n_methods: int, n_datasets: int, alpha: float = ALPHA) -> float:
    """Nemenyi's critical difference of average ranks: ``q_alpha * sqrt(k (k + 1) / (6 N))``, with
    ``q_alpha`` the studentized range quantile for k groups and infinite degrees of freedom,
    divided by sqrt(2) (docs/leaderboard.md, "How the leaderboard ranks")."""
    from scipy.stats import studentized_range

    q = float(studentized_range.ppf(1 - alpha, n_methods, np.inf)) / math.sqrt(2)
    return q * math.sqrt(n_methods * (n_methods + 1) / (6 * n_datasets))


def _complete_block(scores: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """The ranks need every method on every data set: first drop methods with no result at all,
    then data sets on which a remaining method has none; say why for each."""
    left_out: dict[str, str] = {}
    for m in scores.columns[scores.isna().all(axis=0)]:
        left_out[m] = "method without a finished run on any data set"
    kept = scores.loc[:, scores.notna().any(axis=0)]
    for ds in kept.index[kept.isna().any(axis=1)]:
        missing = ", ".join(map(str, kept.columns[kept.loc[ds].isna()]))
        left_out[ds] = f"data set where {missing} finished no run"
    return kept.loc[kept.notna().all(axis=1)], left_out


def build_leaderboard(scores: pd.DataFrame, *, alpha: float = ALPHA, references: Sequence[str] = (),
                      spread: pd.DataFrame | None = None, decimals: int | None = RANK_DECIMALS) -> Leaderboard:
    """Ranks, average ranks, the Friedman test and Nemenyi's critical difference of ``scores``
    (data sets x methods, larger is better). Too few methods or data sets for a test is not an
    error: the test is left out and :attr:`Leaderboard.notes` says why. The columns named in
    ``references`` keep their scores but take no rank and no part in the tests; ``spread``
    (the same shape, standard deviations over seeds) is shown beside the scores. Scores are
    ranked and tested as the table prints them, rounded to ``decimals`` (None: as stored), so
    two methods that read the same tie."""
    if scores.shape[1] == 0 or scores.shape[0] == 0:
        raise ValueError("a leaderboard needs at least one data set and one method")
    refs = [m for m in scores.columns if m in set(references)]
    block, left_out = _complete_block(scores.drop(columns=refs))
    for m in refs:
        if scores[m].isna().all():
            left_out[m] = "reference without a finished run on any data set"
    if decimals is not None:
        block = block.round(decimals)
    ranks = rank_within_datasets(block)
    average = ranks.mean(axis=0).sort_values(kind="stable") if len(ranks) else pd.Series(dtype=float)
    board = Leaderboard(scores=scores, ranks=ranks, average_rank=average, left_out=left_out, alpha=alpha,
                        references=refs, spread=spread)
    n, k = block.shape
    if k == 0 and len(refs) == scores.shape[1]:
        board.notes.append("every method here is a reference, so nothing is ranked (rank_references ranks them)")
        return board
    if k == 0:
        board.notes.append("no method but the references has a finished run on any data set, so nothing is ranked"
                           if refs else "no method has a finished run on any data set, so nothing is ranked")
        return board
    if n == 0:
        board.notes.append("no data set has a result for every method, so nothing is ranked")
        return board
    if k < MIN_FOR_FRIEDMAN or n < MIN_FOR_FRIEDMAN:
        few = f"{k} method{'s' * (k != 1)}" if k < MIN_FOR_FRIEDMAN else f"{n} data set{'s' * (n != 1)}"
        board.notes.append(f"no Friedman test: it needs at least {MIN_FOR_FRIEDMAN} methods and "
                           f"{MIN_FOR_FRIEDMAN} data sets, and this leaderboard ranks {few}")
    elif (ranks.nunique(axis=1) == 1).all():  # scipy's tie correction would divide by zero
        board.notes.append("no Friedman test: every method ties with every other on every data set")
    else:
        from scipy.stats import friedmanchisquare

        stat, p = friedmanchisquare(*(block[m].to_numpy() for m in block.columns))
        board.friedman = FriedmanResult(float(stat), float(p), n, k)
    if n < 2 or k < 2:
        board.notes.append("no critical-difference diagram: average ranks over a single data set (or of a "
                           "single method) have no spread to test")
        return board
    import scikit_posthocs as sp

    p_values = sp.posthoc_nemenyi_friedman(block.to_numpy())
    p_values.index = p_values.columns = list(block.columns)
    board.nemenyi = p_values
    board.critical_difference = critical_difference(k, n, alpha)
    return board


def _friedman_line(board: Leaderboard) -> str:
    f = board.friedman
    if f is None:
        return ""
    verdict = ("the methods do not all rank alike" if f.pvalue < board.alpha
               else "no evidence that the methods rank differently")
    return (f"Friedman test over {f.n_datasets} data sets and {f.n_methods} methods: chi² = {f.statistic:.3f} "
            f"(df {f.df}), p = {f.pvalue:.3g}: {verdict} at alpha = {board.alpha:g}.")


def summary_lines(board: Leaderboard) -> list[str]:
    """The leaderboard's verdicts in sentences: Friedman, the critical difference, what was left out."""
    lines = [line for line in [_friedman_line(board)] if line]
    if board.critical_difference is not None:
        k, n = len(board.average_rank), len(board.ranks)
        lines.append(f"Nemenyi critical difference at alpha = {board.alpha:g} for {k} methods on {n} data sets: "
                     f"CD = {board.critical_difference:.3f}; two methods whose average ranks differ by more than "
                     "CD differ significantly (read this only where Friedman finds a difference).")
    lines += [note[0].upper() + note[1:] + "." for note in board.notes]
    lines += [f"Left out of the ranks: {name} ({why})." for name, why in board.left_out.items()]
    if board.references:
        names = " and ".join(display_name(m) for m in board.references)
        lines.append(f"Not ranked: {names}, references that see more labels than the methods ranked (every label, or "
                     "one positive and every negative); they bound what the missing labels cost and would take the "
                     "first places by seeing more, not by a better method. Their scores are shown for scale "
                     "(`spmlkit benchmark --rank-references` ranks them).")
    return lines


def leaderboard_table(board: Leaderboard) -> pd.DataFrame:
    """One row per method, best average rank first, then the methods left out of the ranks, then
    the references: whether it is a reference, its average rank, then for every data set its test
    mAP, the standard deviation over seeds and its rank (NaN where absent)."""
    unranked = [m for m in board.scores.columns if m not in board.average_rank and m not in board.references]
    methods = list(board.average_rank.index) + unranked + list(board.references)
    out = pd.DataFrame(index=pd.Index(methods, name="method"))
    out["reference"] = [m in board.references for m in methods]
    out["average_rank"] = board.average_rank.reindex(methods)
    for ds in board.scores.index:
        out[f"{ds} test_map"] = board.scores.loc[ds].reindex(methods)
        out[f"{ds} test_map_std"] = (board.spread.loc[ds].reindex(methods) if board.spread is not None
                                     and ds in board.spread.index else pd.Series(np.nan, index=methods))
        out[f"{ds} rank"] = (board.ranks.loc[ds].reindex(methods) if ds in board.ranks.index
                             else pd.Series(np.nan, index=methods))
    return out


def to_csv(board: Leaderboard) -> str:
    return leaderboard_table(board).reset_index().to_csv(index=False)


def _esc(text: Any) -> str:
    return str(text).replace("|", "\\|")


def to_markdown(board: Leaderboard, *, figure: str | None = None, title: str | None = None) -> str:
    """The leaderboard as Markdown: how it was made, the table (cells "mAP ± std (rank)"), the
    verdicts, the figure, and where to read what it may and may not be taken to show."""
    t = leaderboard_table(board)
    datasets = list(board.scores.index)
    head = ["#", "method", "avg rank", *datasets]
    lines = [f"**{_esc(title)}**\n" if title else "", *(f"{_esc(line)}\n" for line in board.setup),
             "| " + " | ".join(map(_esc, head)) + " |", "|" + "---|" * len(head)]
    place = 0
    for method, row in t.iterrows():
        avg = row["average_rank"]
        place += math.isfinite(avg)
        name = display_name(str(method)) + (" (reference, not ranked)" if row["reference"] else "")
        cells = [str(place) if math.isfinite(avg) else "–", name, f"{avg:.2f}" if math.isfinite(avg) else "–"]
        for ds in datasets:
            score, std, rank = row[f"{ds} test_map"], row[f"{ds} test_map_std"], row[f"{ds} rank"]
            cell = "–" if not math.isfinite(score) else f"{score:.2f}"
            if math.isfinite(score) and math.isfinite(std):
                cell += f" ± {std:.2f}"
            if math.isfinite(rank):
                cell += f" ({rank:g})"
            cells.append(cell)
        lines.append("| " + " | ".join(map(_esc, cells)) + " |")
    text = "\n".join(line for line in lines if line) + "\n"
    spread = " ± std" if board.spread is not None and board.spread.notna().any().any() else ""
    text += f"\nCells: test mAP (%) of the lr selected on validation, mean{spread} over seeds; in parentheses the " \
            "rank on that data set (1 = best; equal numbers tie and share their mean rank).\n"
    text += "".join(f"\n{line}\n" for line in summary_lines(board))
    if figure:
        text += f"\n![critical-difference diagram]({figure})\n"
    text += "\nWhat these ranks do and do not show: docs/leaderboard.md, \"What a reader may conclude\".\n"
    return text


def _diagram_title(board: Leaderboard) -> str:
    head = f"Average rank over {len(board.ranks)} data sets (1 = best)"
    bars = f"bars: no Nemenyi difference at alpha = {board.alpha:g}"
    f = board.friedman
    if f is None and any("ties" in note for note in board.notes):
        return f"{head}\nno Friedman test: every method ties with every other on every data set"
    if f is None:
        return f"{head}\nno Friedman test (fewer than {MIN_FOR_FRIEDMAN} methods or data sets); {bars}"
    return f"{head}\nFriedman chi² = {f.statistic:.2f}, p = {f.pvalue:.2g}; {bars}"


def diagram(board: Leaderboard) -> Figure:
    """The critical-difference diagram of ``board`` (:mod:`spmlkit.experiments.cd_diagram`).

    Raises ValueError when the board has none (fewer than 2 ranked data sets or methods;
    ``board.notes`` says which)."""
    from .cd_diagram import critical_difference_figure

    if not board.has_diagram:
        raise ValueError("this leaderboard has no critical-difference diagram: " + "; ".join(board.notes))
    return critical_difference_figure(board.average_rank, board.nemenyi, board.critical_difference,
                                      alpha=board.alpha, title=_diagram_title(board))


def write_leaderboard(out_dir: str | Path, board: Leaderboard, *, title: str | None = None) -> dict[str, Path]:
    """Write leaderboard.md, leaderboard.csv, leaderboard.json, and where the board has one the
    Nemenyi p-values (leaderboard_nemenyi.csv) and the diagram (leaderboard.png), each atomically."""
    from .cd_diagram import save_png

    out = Path(out_dir)
    paths: dict[str, Path] = {}
    figure = None
    if board.has_diagram:
        paths["png"] = save_png(diagram(board), out / "leaderboard.png")
        figure = "leaderboard.png"
        paths["nemenyi"] = atomic_write_text(out / "leaderboard_nemenyi.csv", board.nemenyi.to_csv())
    paths["markdown"] = atomic_write_text(out / "leaderboard.md", to_markdown(board, figure=figure, title=title))
    paths["csv"] = atomic_write_text(out / "leaderboard.csv", to_csv(board))
    f = board.friedman
    paths["json"] = atomic_write_json(out / "leaderboard.json", {
        "datasets": list(board.scores.index), "ranked_datasets": board.ranked_datasets,
        "average_rank": {m: float(r) for m, r in board.average_rank.items()},
        "friedman": None if f is None else {"statistic": f.statistic, "pvalue": f.pvalue, "df": f.df,
                                            "n_datasets": f.n_datasets, "n_methods": f.n_methods},
        "critical_difference": board.critical_difference, "alpha": board.alpha,
        "notes": board.notes, "left_out": board.left_out, "references": board.references, "setup": board.setup})
    return paths
