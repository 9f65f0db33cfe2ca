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
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_torch_save", "to_jsonable",
           "new_file_mode"]


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
