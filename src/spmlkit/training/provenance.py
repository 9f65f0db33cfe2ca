"""Where a run's numbers came from: versions, command line, device, times, the project's commit.

A result is only worth keeping if it can be traced back: which spmlkit, PyTorch and Python
computed it, by which command, on which device, when, and from which commit of the user's
project. ``result.json`` and the records of a sweep carry these fields (:func:`run_provenance`),
so two results that disagree can be told apart without guessing.

The user's own code counts too: ``plugins`` lists every plug-in of the process (docs/plugins.md)
with its file's SHA-256 or its package's version (:func:`~spmlkit.plugins.plugin_records`), an
empty list when there is none.

The commit is that of the git repository holding the *current directory* (the user's project),
asked with ``git rev-parse HEAD``; it is left out silently when there is none (no git, not a
repository): provenance is worth having, never worth a failed run.
"""

from __future__ import annotations

import datetime as _dt
import functools
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from ..plugins import plugin_records

__all__ = ["git_commit", "process_git_commit", "command_line", "device_name", "utc_now", "run_provenance"]


def utc_now() -> str:
    """A time stamp: UTC, to the second, ISO 8601 (``2026-11-26T14:03:12+00:00``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_commit(cwd: str | Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the repository containing ``cwd`` (default: the current
    directory), or None when git is missing, this is not a repository, or anything fails.
    Never raises: provenance is nice to have, never worth a crashed run."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5,
                             check=False)
    except Exception:  # noqa: BLE001 - any failure just means "unknown"
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


@functools.lru_cache(maxsize=1)
def process_git_commit() -> str | None:
    """:func:`git_commit` of the current directory, asked once per process: ``git rev-parse`` is a
    subprocess (milliseconds in a process holding torch), and a sweep records it for every run."""
    return git_commit()


def command_line(argv: list[str] | None = None) -> str:
    """The command that started this process, as a shell would take it back: ``spmlkit train
    --dataset yeast`` for the installed script and for ``python -m spmlkit`` alike."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    first = Path(argv[0])
    if first.name == "spmlkit" or (first.name == "__main__.py" and first.parent.name == "spmlkit"):
        argv[0] = "spmlkit"
    return shlex.join(argv)


def device_name(device: torch.device | str) -> str:
    """The device a run trained on, with the GPU's model where there is one (``cuda:0 (NVIDIA
    H100 80GB HBM3)``): two numbers from two GPU models may differ in their last digits."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def run_provenance(device: torch.device | str, started_at: str, finished_at: str) -> dict[str, Any]:
    """The provenance fields of a run's record; ``git_commit`` only when there is a repository."""
    from .. import __version__

    record: dict[str, Any] = {
        "spmlkit_version": __version__, "torch_version": torch.__version__,
        "python_version": platform.python_version(), "command": command_line(), "device": device_name(device),
        "started_at": started_at, "finished_at": finished_at, "plugins": plugin_records(),
    }
    commit = process_git_commit()
    if commit is not None:
        record["git_commit"] = commit
    return record
