"""``spmlkit --help`` and every command's ``--help`` answer without importing the heavy libraries:
torch alone takes seconds to import, so a help that builds its parser from torch-free modules
appears at once (docs/architecture.md, "Start-up time"). Checked on what the process imported,
not on a clock, so a loaded machine cannot make it flaky."""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: what building the parser and printing any help must not import
HEAVY = ("torch", "numpy", "pandas", "matplotlib", "scipy", "sklearn", "scikit_posthocs", "yaml", "PIL")

_PROBE = """
import contextlib, io, json, sys
from spmlkit.cli import build_parser, main

commands = list(build_parser()._subparsers._group_actions[0].choices)
for argv in [["--help"]] + [[c, "--help"] for c in commands]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit as exit:
            assert exit.code == 0, (argv, exit.code)
    assert out.getvalue().startswith("usage: spmlkit"), argv
print(json.dumps({"commands": commands, "loaded": sorted(m for m in HEAVY if m in sys.modules)}))
"""


def test_no_help_imports_torch_or_another_heavy_library():
    probe = f"HEAVY = {HEAVY!r}\n" + _PROBE
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"train", "benchmark", "sweep", "report", "presets", "extract", "predict", "export"} <= set(seen["commands"])
    assert seen["loaded"] == []
