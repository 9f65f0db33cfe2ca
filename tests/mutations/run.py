"""Break each behaviour of tests/mutations/catalogue.py on purpose and check that its tests fail.

    python tests/mutations/run.py                 # every mutation this machine can check
    python tests/mutations/run.py peak-kib        # the named ones
    python tests/mutations/run.py --list          # the catalogue: names, behaviours, tests

For each mutation the working tree (src/, tests/, docs/, README.md, pyproject.toml) is copied to
a temporary folder, the mutation's edits are applied there, and pytest runs the mutation's tests
on that copy (its ``src`` first on ``PYTHONPATH``, so subprocesses the tests start import it too).
The checkout itself is never touched. A mutation is *caught* when every one of its tests fails
(an error counts) and, where the catalogue names words the failure must contain (``because``),
when the failures say them: a test that fails for another reason has not shown that it notices.
A test that passes under the mutation, or that pytest does not find, is reported and makes the
exit status 1; a mutation whose tests were all skipped here (no GPU, no MULAN files) is reported
as not checked, with pytest's reason. docs/mutations.md says why this exists and how to add one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catalogue import MUTATIONS, ROOT, Mutation  # noqa: E402

#: what each copy holds: everything the tests read (docs and the README are tested too)
COPIED = ("src", "tests", "docs", "README.md", "pyproject.toml", ".ci", "benchmarks", "examples")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")


@dataclass
class Outcome:
    """What pytest said about one mutation's tests: each test case's id and its verdict."""

    mutation: Mutation
    cases: dict[str, str] = field(default_factory=dict)  # test id -> passed | failed | skipped
    messages: dict[str, str] = field(default_factory=dict)  # test id -> failure or skip text
    missing: list[str] = field(default_factory=list)  # catalogue ids pytest did not run
    seconds: float = 0.0
    output: str = ""

    @property
    def survivors(self) -> list[str]:
        return [case for case, verdict in self.cases.items() if verdict == "passed"]

    @property
    def wrong_reason(self) -> list[str]:
        """Failed tests whose failure does not say the words the catalogue expects."""
        words = self.mutation.because
        if not words:
            return []
        return [case for case, verdict in self.cases.items()
                if verdict == "failed" and words not in self.messages.get(case, "")]

    @property
    def checked(self) -> bool:
        return any(verdict != "skipped" for verdict in self.cases.values())

    @property
    def caught(self) -> bool:
        return self.checked and not self.survivors and not self.missing and not self.wrong_reason


def copy_tree(target: Path) -> Path:
    """A copy of the checkout's tested files under ``target``."""
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=_IGNORED, symlinks=True)
        elif source.is_file():
            shutil.copy2(source, target / name)
    return target


def run_one(mutation: Mutation, python: str, timeout: float, mutate: bool = True) -> Outcome:
    """Run ``mutation``'s tests on a copy of the tree with the mutation applied (``mutate=False``:
    on the copy as it is, where they must pass)."""
    outcome = Outcome(mutation)
    with tempfile.TemporaryDirectory(prefix=f"spmlkit-mutation-{mutation.name}-") as tmp:
        tree = copy_tree(Path(tmp) / "tree")
        if mutate:
            mutation.apply(tree)
        report = Path(tmp) / "report.xml"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), os.environ.get("PYTHONPATH", "")]),
               # MULAN's own files, where the checkout's tests find them (tests/fixtures/mulan.py): the copy has
               # no folder beside it
               "SPMLKIT_DATA": os.environ.get("SPMLKIT_DATA") or str(ROOT.parent / "shared" / "datasets"),
               "PYTHONDONTWRITEBYTECODE": "1"}
        t0 = time.perf_counter()
        try:
            done = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}",
                                   *mutation.tests], cwd=tree, env=env, capture_output=True,
                                  text=True, timeout=timeout)
            outcome.output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            outcome.output = f"timed out after {timeout:g} s\n{exc.stdout or ''}"
        outcome.seconds = time.perf_counter() - t0
        if report.is_file():
            _read_report(report, outcome)
    outcome.missing = [t for t in mutation.tests if not any(_belongs(case, t) for case in outcome.cases)]
    return outcome


def _read_report(report: Path, outcome: Outcome) -> None:
    for case in ElementTree.parse(report).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        case_id = f"{path}::{case.get('name')}"
        verdict, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                verdict, message = "failed", f"{child.get('message', '')}\n{child.text or ''}"
            elif child.tag == "skipped" and verdict != "failed":
                verdict, message = "skipped", child.get("message", "")
        outcome.cases[case_id] = verdict
        outcome.messages[case_id] = message


def _belongs(case: str, test: str) -> bool:
    """Whether the test case ``case`` (``path::name[param]``) is one the catalogue's ``test`` names
    (a function, all its parameters, or one parametrised case)."""
    return case == test or case.startswith(test + "[")


def _first_words(message: str) -> str:
    """The first line of a failure that says something (pytest's message, else its last line)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return (lines[0] if lines else "")[:240]


def _show(outcome: Outcome, why: bool = False) -> str:
    m = outcome.mutation
    if outcome.caught:
        verdict = "caught"
    elif not outcome.checked and not outcome.missing and outcome.cases:
        reasons = sorted({outcome.messages[c] for c in outcome.cases})
        verdict = f"not checked here (skipped: {'; '.join(reasons)[:200]})"
    else:
        verdict = "NOT CAUGHT"
    lines = [f"{m.name:<28} {verdict:<14} {outcome.seconds:6.1f} s   {m.behaviour}"]
    if why:
        for case, verdict in outcome.cases.items():
            if verdict == "failed":
                lines.append(f"    {case}: {_first_words(outcome.messages[case])}")
    skipped = sorted({outcome.messages[c] for c, v in outcome.cases.items() if v == "skipped"})
    if skipped and outcome.checked:
        count = sum(v == "skipped" for v in outcome.cases.values())
        lines.append(f"    {count} test(s) skipped here: {'; '.join(skipped)[:200]}")
    for case in outcome.survivors:
        lines.append(f"    passed under the mutation: {case}")
    for case in outcome.wrong_reason:
        lines.append(f"    failed without saying {m.because!r}: {case}: {_first_words(outcome.messages[case])}")
    for test in outcome.missing:
        lines.append(f"    not run by pytest: {test}")
    if verdict == "NOT CAUGHT" and not outcome.cases:
        lines.append("    pytest said: " + outcome.output.strip()[-1500:].replace("\n", "\n    "))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all of them)")
    parser.add_argument("--list", action="store_true", help="list the catalogue and exit (default: run)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs pytest (default: this one, %(default)s)")
    parser.add_argument("--unmutated", action="store_true",
                        help="run the mutations' tests on the tree as it is, where every one must pass: the check "
                             "to make when adding a mutation (default: off, the mutations are applied)")
    parser.add_argument("--why", action="store_true",
                        help="print each failing test with the first line of its failure (default: off)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one mutation's tests may take (default: 900)")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTATIONS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; --list shows them")
    chosen = [known[n] for n in args.names] if args.names else list(MUTATIONS)
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.behaviour}\n    " + "\n    ".join(m.tests))
        return 0
    t0 = time.perf_counter()
    if args.unmutated:
        return _check_unmutated(chosen, args.python, args.timeout, t0)
    bad = 0
    for mutation in chosen:
        outcome = run_one(mutation, args.python, args.timeout)
        if outcome.wrong_reason and not outcome.survivors and not outcome.missing:
            # every test failed, one of them for another reason than the one it should give: a
            # broken behaviour can upset a test on its way (a timing, a process); the failure is
            # printed and the mutation run once more, and only its second verdict counts
            print(_show(outcome, True) + "\n    (run once more: a failure for another reason counts only twice)",
                  flush=True)
            outcome = run_one(mutation, args.python, args.timeout)
        print(_show(outcome, args.why), flush=True)
        bad += not outcome.caught and (outcome.checked or bool(outcome.missing) or not outcome.cases)
    print(f"{len(chosen)} mutation(s) in {time.perf_counter() - t0:.0f} s; "
          f"{'all caught or not checkable here' if not bad else f'{bad} NOT CAUGHT'}")
    return 1 if bad else 0


def _check_unmutated(chosen: list[Mutation], python: str, timeout: float, t0: float) -> int:
    """Each mutation's tests on the unchanged tree: they must pass there (or be skipped)."""
    failing = 0
    for mutation in chosen:
        outcome = run_one(mutation, python, timeout, mutate=False)
        broken = [c for c, v in outcome.cases.items() if v == "failed"] + outcome.missing
        failing += bool(broken)
        verdict = "pass" if not broken else "FAIL UNMUTATED"
        print(f"{mutation.name:<28} {verdict:<14} {outcome.seconds:6.1f} s", flush=True)
        for case in broken:
            print(f"    {case}: {_first_words(outcome.messages.get(case, 'not run by pytest'))}")
    print(f"{len(chosen)} mutation(s)' tests on the unchanged tree in {time.perf_counter() - t0:.0f} s")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
