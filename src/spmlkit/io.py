"""Writing files so that a killed process never leaves a half-written one behind.

Every writer goes through :func:`atomic_write_bytes`: the bytes go to a uniquely named
temporary file in the destination folder, are flushed to disk, and the file is moved over
the destination with :func:`os.replace`, which is atomic on POSIX and Windows. A reader (or
a resumed run) sees the old file or the new one, never a truncated mix, and two writers of
the same file never share a temporary name.

``tempfile.mkstemp`` creates its file readable by its owner only (mode 0600), whatever the
process's umask, because a temporary file may hold secrets. The files spmlkit writes are
results meant to be shared (tables, figures, predictions, exported models), so before the
rename each one gets the mode ``open()`` would have given it: 0666 less the umask (0644 under
the usual umask 022, 0664 under 002), as every other program's output has.

No output may replace an input. A command names the files it reads with
:func:`inputs_kept`; while that block runs, every write through this module to one of those
files (the same file, compared by device and inode, not by name: a link, another spelling of
the path) raises :class:`~spmlkit.errors.InputError` instead, naming both, before a byte moves.
Commands also check their outputs against their inputs before they start (so a refusal
leaves nothing half done); this is the guarantee behind those checks.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_torch_save", "to_jsonable",
           "check_outputs", "inputs_kept", "kept_input", "new_file_mode", "same_file"]

#: (device, inode) -> (the input's path, what it is) of the files the running command reads
_KEPT: contextvars.ContextVar[dict[tuple[int, int], tuple[str, str]]] = contextvars.ContextVar("kept", default={})


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """A file's (device, inode), following links; None when there is no such file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` are one existing file (a link or another spelling included)."""
    first = _identity(a)
    return first is not None and first == _identity(b)


@contextlib.contextmanager
def inputs_kept(paths: Iterable[str | os.PathLike], what: str) -> Iterator[None]:
    """While the block runs, no write of this module replaces one of ``paths`` (``what`` they
    are, for the message: "the results store this report reads"). Paths that do not exist are
    nothing to keep. Blocks nest: the inputs of each are kept."""
    kept = dict(_KEPT.get())
    for path in paths:
        found = _identity(path)
        if found is not None:
            kept.setdefault(found, (os.fspath(path), what))
    token = _KEPT.set(kept)
    try:
        yield
    finally:
        _KEPT.reset(token)


def kept_input(path: str | os.PathLike) -> tuple[str, str] | None:
    """(the input's path, what it is) when ``path`` is a file :func:`inputs_kept` keeps, else None."""
    found = _identity(path)
    return None if found is None else _KEPT.get().get(found)


def check_outputs(outputs: Iterable[str | os.PathLike], inputs: Iterable[str | os.PathLike], what: str) -> None:
    """Before a command starts: ``ValueError`` (a user error, one line) when one of ``outputs`` is
    one of ``inputs`` (``what`` they are: "an image this command reads"), compared as files."""
    kept = {found: path for path in inputs if (found := _identity(path)) is not None}
    for out in outputs:
        hit = kept.get(_identity(out)) if os.path.exists(out) else None
        if hit is not None:
            also = "" if os.path.abspath(hit) == os.path.abspath(out) else f" ({hit})"
            raise ValueError(f"{out} is {what}{also}; writing it would replace it: give the output another name or "
                             "folder")


def _refuse_an_input(path: Path) -> None:
    kept = kept_input(path)
    if kept is not None:
        where = "" if os.path.abspath(kept[0]) == os.path.abspath(path) else f" (as {kept[0]})"
        raise InputError(f"{path} is {kept[1]}{where}; writing it would replace it: give the output another name "
                         "or folder")


def _umask() -> int:
    """The process's umask. Linux shows it in /proc/self/status, which reads it without
    changing it; elsewhere it is read by setting it and setting it back, which is the only
    portable way (a thread creating a file in that instant would use umask 0)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The permission bits ``open(path, "w")`` gives a new file: 0666 less the umask."""
    return 0o666 & ~_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    _refuse_an_input(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, new_file_mode())  # mkstemp's 0600 is for secrets; a result is shared as open() shares it
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=1, default=to_jsonable))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def to_jsonable(obj: Any) -> Any:
    """``json.dumps(default=...)``: numpy and torch values, tuples and sets, paths."""
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, tuple):
        return list(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"value of type {type(obj).__name__} is not JSON-serialisable: {obj!r}")
