"""The folder ``spmlkit report --out`` writes into: spmlkit's own, or refused.

A report writes files with plain names (``table.md``, ``selected_configs.csv``,
``figures/``). Writing them into a folder where a person keeps files of those names would
replace that person's work without a word, so (docs/figures.md, "The report folder"):

- A folder spmlkit's report wrote carries a small marker file, :data:`MARKER`, listing the
  files of the last report. A new report into it replaces that report: it rewrites the
  files and then removes the ones the new report no longer writes (a figure of a method
  the store no longer holds), so the folder never mixes two reports. Only files the
  marker lists are ever removed.
- An unmarked folder that holds none of the report's names is used and marked: other
  files in it are left alone.
- An unmarked folder that holds any of the report's names is refused with one line naming
  the folder, the files, and the two ways out: ``--overwrite`` or another ``--out``.
- A folder that :mod:`spmlkit.output_dir` marks as another kind of spmlkit output (a run, a
  prepared or feature dataset, a benchmark) is refused, ``--overwrite`` or not: a report there
  would mix with that output, as any two kinds would.
- A folder where the report would write over a file it reads (the results store named
  ``table.csv`` in ``--out``, or a link to it there) is refused, ``--overwrite`` or not: the
  files are compared (device and inode), not their names, and the report's writes stay
  guarded by :func:`spmlkit.io.inputs_kept` while it runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..io import atomic_write_json, kept_input, same_file
from ..output_dir import output_kind

__all__ = ["MARKER", "ReportFolder", "open_report_folder"]

#: the marker file of a report folder written by spmlkit
MARKER = ".spmlkit-report.json"
#: what the marker says it is, so a JSON file of the same name that is not ours is no marker
_KIND = "spmlkit report"
#: names a report writes at the top of its folder (tables per observation: table_<obs>.*)
_REPORT_NAME = re.compile(r"(table(_[A-Za-z0-9._~-]+)?\.(md|tex|csv)|selected_configs\.csv|thresholds\.(csv|md)"
                          r"|figures)")


@dataclass
class ReportFolder:
    """An output folder checked by :func:`open_report_folder`: ``path``, and the files the
    previous report in it wrote (relative to ``path``; empty for a new folder)."""

    path: Path
    previous: list[str] = field(default_factory=list)

    def finish(self, written: Iterable[Path]) -> list[str]:
        """Record the files this report wrote in the marker and remove the previous
        report's files it did not write again; returns the removed names."""
        root = self.path.resolve()
        now = sorted({Path(f).resolve().relative_to(root).as_posix() for f in written})
        removed = []
        for name in sorted(set(self.previous) - set(now)):
            stale = (root / name).resolve()
            # a hand-edited marker reaches nothing outside, and a file the report reads stays
            if stale.is_relative_to(root) and stale.is_file() and kept_input(stale) is None:
                stale.unlink()
                removed.append(name)
        _write_marker(self.path, now)
        return removed


def _read_marker(folder: Path) -> list[str] | None:
    """The files the marker of ``folder`` lists, or None when there is no marker of ours."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != _KIND:
        return None
    files = data.get("files")
    return [str(f) for f in files] if isinstance(files, list) else []


def _write_marker(folder: Path, files: list[str]) -> None:
    atomic_write_json(folder / MARKER, {"written_by": _KIND, "spmlkit_version": __version__,
                                        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files})


def _report_files_there(out: Path) -> list[Path]:
    """The files in ``out`` that a report may write: its names at the top, anything under figures/."""
    if not out.is_dir():
        return []
    found = [p for p in out.iterdir() if _REPORT_NAME.fullmatch(p.name) and p.name != "figures"]
    if (out / "figures").is_dir():
        found += [p for p in (out / "figures").rglob("*")]
    return [p for p in found if p.is_file()]


def _check_inputs(out: Path, inputs: dict[str, Path]) -> None:
    """Refuse ``out`` where the report would write over one of ``inputs`` (option -> file): the
    input is there under a name the report writes (or below figures/), or one of the report's
    files in ``out`` is the input itself (a link, a hard link)."""
    root = out.resolve()
    for option, given in inputs.items():
        if not given.exists():
            continue
        real = given.resolve()
        named = (real.parent == root and _REPORT_NAME.fullmatch(real.name)) or real.is_relative_to(root / "figures")
        if named:
            raise ValueError(f"{option} {given} is {real}, a file the report writes in --out {out}: the report would "
                             f"replace it (and everything it holds), --overwrite or not; give another --out, or move "
                             f"it out of {out}")
        link = next((p for p in _report_files_there(out) if same_file(p, given)), None)
        if link is not None:
            raise ValueError(f"{link}, a file the report writes in --out {out}, is {option} {given} itself (a link to "
                             "it): the report would replace it, --overwrite or not; give another --out, or remove "
                             "that link")


def open_report_folder(path: str | Path, *, overwrite: bool = False, inputs: dict[str, Path] | None = None
                       ) -> ReportFolder:
    """Check ``path`` as a report's output folder, create and mark it; see the module's
    docstring for what is refused. ``inputs`` (option -> file, ``{"--store": ...}``) are the files
    the report reads, which no output may replace. Raises ``ValueError`` (a user error) with one line."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file; give a folder")
    _check_inputs(out, inputs or {})
    other = output_kind(out) if out.is_dir() else None
    if other is not None:
        raise ValueError(f"--out {out} holds spmlkit's {other} output, not a report: a report there would mix with "
                         "it; give another folder with --out")
    previous = _read_marker(out) if out.is_dir() else None
    if out.is_dir() and previous is None and not overwrite:
        clashes = sorted(p.name for p in out.iterdir() if _REPORT_NAME.fullmatch(p.name))
        if clashes:
            shown = ", ".join(clashes[:4]) + (f" and {len(clashes) - 4} more" if len(clashes) > 4 else "")
            raise ValueError(f"--out {out} holds {shown}, which spmlkit's report did not write; pass --overwrite "
                             "to replace them, or give another folder with --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create the output folder {out}: {exc.strerror or exc}") from None
    try:  # marked before anything is written, so a report stopped half-way still leaves spmlkit's folder
        _write_marker(out, previous or [])
    except OSError as exc:
        raise ValueError(f"cannot write into the output folder {out}: {exc.strerror or exc}") from None
    return ReportFolder(out, previous or [])
