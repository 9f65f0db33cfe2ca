"""The Yeast table of docs/benchmark.md, and the README's excerpt of it, are what
`spmlkit benchmark --dataset yeast` prints today: one row per method the benchmark runs, in its
order, under its columns, and AN's numbers as a run of AN's 9 runs prints them."""

import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RERUN = ("the Yeast table of docs/benchmark.md is not what `spmlkit benchmark --dataset yeast` prints: "
         "run it, and copy its rows (without the description column) into docs/benchmark.md, \"The Yeast "
         "table\" (and the README's excerpt)")


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """The first Markdown table of ``text``: its header cells and its rows' cells."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return cells[0], [row for row in cells[2:]]


def _doc_table() -> tuple[list[str], list[list[str]]]:
    text = (ROOT / "docs" / "benchmark.md").read_text()
    return _table(text.split("## The Yeast table", 1)[1].split("\n## ", 1)[0])


def _readme_excerpt() -> tuple[list[str], list[list[str]]]:
    text = (ROOT / "README.md").read_text()
    return _table(text.split("## What the first command prints", 1)[1].split("\n## ", 1)[0])


def _printed(spec, rows) -> tuple[list[str], list[list[str]]]:
    """The benchmark's console table for ``rows``, as `spmlkit benchmark` prints it (wide enough
    that no cell wraps), without its description column."""
    from rich.console import Console

    from spmlkit.cli.experiments import _print_benchmark_table

    screen = Console(file=io.StringIO(), width=400, color_system=None)
    _print_benchmark_table(screen, spec, rows)
    lines = [line for line in screen.file.getvalue().splitlines() if re.match(r"[┃│]", line)]
    cells = [[c.strip() for c in re.split(r"[┃│]", line)[1:-1]] for line in lines]
    return cells[0][:-1], [row[:-1] for row in cells[1:]]


def test_the_doc_table_has_a_row_for_each_method_the_benchmark_runs_in_its_order():
    from spmlkit.experiments.benchmark import BenchmarkSpec

    header, rows = _doc_table()
    labels = {"bce": "full labels (BCE)", "iun": "1P + all N"}
    assert header == ["method", "test mAP (full labels)", "gap closed", "lr", "val mAP (full labels)"], RERUN
    assert [r[0] for r in rows] == [labels.get(m, m) for m in BenchmarkSpec().methods], RERUN


def test_the_readme_shows_rows_of_the_doc_table_under_its_columns():
    doc_header, doc_rows = _doc_table()
    header, rows = _readme_excerpt()
    assert header == doc_header
    assert len(rows) >= 4 and all(row in doc_rows for row in rows), [r for r in rows if r not in doc_rows]
    assert {"full labels (BCE)", "an"} <= {r[0] for r in rows}  # the references a reader is told about


@pytest.mark.usefixtures("one_thread")
def test_ans_row_is_what_the_benchmark_prints(tmp_path):
    """AN's 3 seeds x 3 learning rates (one batched group, a few seconds) give the doc's row."""
    from spmlkit.experiments.benchmark import BenchmarkSpec, benchmark_runs, run_benchmark, summarize

    spec = BenchmarkSpec(dataset="yeast", methods=("an",))
    result = run_benchmark(spec, tmp_path, jobs=1)
    rows, _ = summarize(benchmark_runs(spec, result.store), spec.methods)
    header, printed = _printed(spec, rows)
    assert header == ["method", "test mAP (full labels)", "lr", "val mAP (full labels)"]  # no gap without BCE
    doc = next(r for r in _doc_table()[1] if r[0] == "an")
    assert printed == [[doc[0], doc[1], doc[3], doc[4]]], RERUN
