"""The mutation catalogue (tests/mutations/catalogue.py) stays true to the tree: every edit still
finds its text exactly once, and every test it names exists, so a mutation never silently breaks
nothing, or checks a test that was renamed away. Running the mutations themselves takes minutes:
``python tests/mutations/run.py`` (docs/mutations.md)."""

from __future__ import annotations

import ast

import pytest
from mutations.catalogue import MUTATIONS, ROOT, Mutation


def _test_functions(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_mutation_names_are_unique_and_each_breaks_something():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))
    assert all(m.edits and m.tests and m.behaviour for m in MUTATIONS)
    assert all(edit.old != edit.new for m in MUTATIONS for edit in m.edits)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_edit_applies_to_this_tree_and_each_test_exists(mutation: Mutation):
    stale = [why for edit in mutation.edits if (why := edit.problem(ROOT)) is not None]
    assert not stale, f"{mutation.name}: the code it breaks has moved: {stale}"
    for test in mutation.tests:
        path, _, name = test.partition("::")
        function = name.split("[")[0]
        assert (ROOT / path).is_file() and function in _test_functions(path), f"{mutation.name}: no test {test}"


def _outcome(mutation: Mutation, message: str):
    from mutations.run import Outcome

    case = mutation.tests[0]
    return Outcome(mutation, cases={case: "failed"}, messages={case: message})


def test_a_failure_for_another_reason_runs_the_mutation_once_more_and_the_second_verdict_counts(monkeypatch, capsys):
    from mutations import run

    mutation = next(m for m in MUTATIONS if m.because)
    answers = {"other": [_outcome(mutation, "AssertionError: a port was taken"),
                         _outcome(mutation, f"AssertionError: {mutation.because}")],
               "twice": [_outcome(mutation, "AssertionError: a port was taken")] * 2}
    for kind, expected in (("other", 0), ("twice", 1)):
        queue = list(answers[kind])
        monkeypatch.setattr(run, "run_one", lambda *args, **kwargs: queue.pop(0))
        assert run.main([mutation.name]) == expected
        assert not queue  # run exactly twice
        printed = capsys.readouterr().out
        assert "a port was taken" in printed and "run once more" in printed
