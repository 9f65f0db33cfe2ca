"""Every ``--option`` that spmlkit's messages, notes, help texts and docstrings cite is an option that
exists: a user told to pass ``--something`` must find it in some command's ``--help``. (A figure note
once advised an "analysis pass" option that no command had.)"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import spmlkit
from spmlkit.cli import build_parser

ROOT = Path(spmlkit.__file__).parent
#: ``--name`` inside a string, not inside a longer word (``a--b``) and not a bare ``--``
CITED = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*(?:-[a-z0-9_]+)*)")
#: options of other programs that spmlkit's texts tell the user to run, and the program
OTHER_PROGRAMS = {"nproc_per_node": "torchrun", "logdir": "tensorboard", "force-reinstall": "pip install"}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of ``parser`` and of all its sub-commands, at any depth."""
    found = set()
    for action in parser._actions:
        found.update(s[2:] for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def _cited() -> dict[str, list[str]]:
    """Option name -> the places (file:line) whose string constants cite it."""
    cited: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in CITED.findall(node.value):
                    cited.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return cited


def test_every_cited_option_exists():
    options = _options(build_parser())
    assert {"hparams-from", "rank-references", "overwrite", "no-pretrained", "retry-failed"} <= options
    cited = _cited()
    assert {"rank-references", "hparams-from", "resume"} <= set(cited)  # the scan sees messages and help texts
    unknown = {name: places for name, places in cited.items() if name not in options and name not in OTHER_PROGRAMS}
    assert not unknown, f"options cited but defined by no command: {unknown}"


def test_the_check_finds_a_made_up_option():
    """The scan reads f-strings and implicit concatenations too, where most messages are built."""
    source = 'raise ValueError(f"{x}: train with --analysis-pass " "or --also-this")'
    names = [n for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             for n in CITED.findall(node.value)]
    assert names == ["analysis-pass", "also-this"]
    assert not {"analysis-pass", "also-this"} & _options(build_parser())
