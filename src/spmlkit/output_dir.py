"""Folders spmlkit writes into: each records that it is spmlkit's, and nobody else's files are replaced.

A user who types ``--out results`` where ``results`` already holds their own ``meta.json`` or
``metrics.csv`` must not lose them to a file of the same name. So every output folder
(a run folder, a prepared dataset, a feature folder, a benchmark) carries a small marker,
:data:`MARKER` (``.spmlkit.json``: ``{"kind": ..., "created_by": "spmlkit <version>"}``), written
before anything else, and spmlkit writes only into

* a folder that does not exist yet, or is empty (it is created and marked), or
* a folder whose marker names the same kind of output (a re-run, a resumed run), or
* an unmarked folder written by an spmlkit older than the marker, recognised by the
  caller's ``recognise`` test (e.g. its ``meta.json`` says ``created_by: spmlkit``); it is
  marked then.

Anything else (another kind of spmlkit output, or files spmlkit did not write) is refused with
:class:`ForeignFolderError`, one line naming the folder, a few of its files and the option to
change. Nothing is written or removed before the check passes. ``check_output_dir`` runs the
same test without writing, so a command can refuse before hours of work rather than after.

Each command that writes a folder writes its own kind, even where two kinds share a format:
``extract`` writes :data:`FEATURES` and ``prepare table`` :data:`TABLE`, both feature folders that
train alike, but preparing a table into ``extract``'s folder would delete features that took
hours of a GPU to compute (and extracting into a table's folder, the user's own labels), so each
refuses the other's folder. ``prepare table`` marked its folders :data:`FEATURES` before the two
were told apart; such a folder is recognised by the table it records (:func:`output_kind`).

A report's folder has a marker of its own (``experiments/report_folder.py``): a report may go
into a folder that also holds the user's other files, and it lists the files it wrote so that
the next report removes only those. It still refuses a folder marked here as another kind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from .errors import InputError

__all__ = ["BENCHMARK", "FEATURES", "MARKER", "PREPARED", "RUN", "TABLE", "ForeignFolderError", "check_output_dir",
           "claim_output_dir", "output_kind", "records_a_table"]

MARKER = ".spmlkit.json"
"""The file that says a folder is spmlkit's output, and of which kind."""

#: the kinds of output folder spmlkit writes (a caller may name another): ``FEATURES`` is what
#: ``extract`` writes, ``TABLE`` what ``prepare table`` writes (a feature folder too)
RUN, PREPARED, FEATURES, TABLE = "run", "prepared dataset", "feature dataset", "prepared table"
BENCHMARK = "benchmark"

_SHOWN = 3


class ForeignFolderError(InputError):
    """An output folder that holds files spmlkit did not write there, or another kind of spmlkit output."""


def output_kind(path: str | Path) -> str | None:
    """The kind recorded in ``path``'s marker, or None when it has no readable marker. A folder
    that ``prepare table`` marked :data:`FEATURES` before it had a kind of its own is a
    :data:`TABLE`: its ``meta.json`` records the table it came from (``source``) and no backbone."""
    try:
        data = json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == FEATURES and records_a_table(Path(path)):
        return TABLE
    return kind if isinstance(kind, str) else None


def records_a_table(path: Path) -> bool:
    """Whether the feature folder ``path`` was written by ``prepare table``: its ``meta.json`` names
    the table it was read from and no backbone (``extract`` records the backbone)."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "source" in meta and "backbone" not in meta


def check_output_dir(path: str | Path, kind: str, *, option: str,
                     recognise: Callable[[Path], bool] | None = None) -> None:
    """Raise :class:`ForeignFolderError` unless spmlkit may write output of ``kind`` into ``path``.

    ``option`` names what the user types to choose another folder (``--out``); ``recognise``
    says whether an unmarked, non-empty folder is output of this kind written before markers
    existed. Writes nothing.
    """
    _verdict(Path(path), kind, option, recognise)


def claim_output_dir(path: str | Path, kind: str, *, option: str,
                     recognise: Callable[[Path], bool] | None = None) -> Path:
    """Check ``path`` (:func:`check_output_dir`), create it if needed and mark it as output of ``kind``."""
    path = Path(path)
    if _verdict(path, kind, option, recognise):
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file appeared there since the check
        raise ForeignFolderError(f"{path} is a file, not a folder; choose another {option}") from None
    from . import __version__
    from .io import atomic_write_text

    atomic_write_text(path / MARKER, json.dumps({"kind": kind, "created_by": f"spmlkit {__version__}"}) + "\n")
    return path


def _verdict(path: Path, kind: str, option: str, recognise: Callable[[Path], bool] | None) -> bool:
    """True when ``path`` is already marked as ``kind``; False when it may be claimed; else raise."""
    if path.exists() and not path.is_dir():
        raise ForeignFolderError(f"{path} is a file, not a folder; choose another {option}")
    if not path.is_dir():
        return False
    found = output_kind(path)
    if found == kind:
        return True
    if found is not None:
        raise ForeignFolderError(f"{path} holds {_article(found)} {found} written by spmlkit, not {_article(kind)} "
                                 f"{kind}: writing here would mix the two; choose another {option}")
    entries = sorted(os.listdir(path))
    if not entries or (recognise is not None and recognise(path)):
        return False
    shown = ", ".join(entries[:_SHOWN]) + (f" and {len(entries) - _SHOWN} more" if len(entries) > _SHOWN else "")
    a_kind = f"{_article(kind)} {kind}"
    raise ForeignFolderError(f"{path} already holds files that spmlkit did not write ({shown}); spmlkit writes "
                             f"{a_kind} only into a new or empty folder or one that holds {a_kind}: choose another "
                             f"{option}")


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
