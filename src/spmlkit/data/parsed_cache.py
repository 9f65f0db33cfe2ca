"""A data set's parsed arrays kept beside its files, used only when they are provably the right ones.

Parsing MULAN's largest ARFF files takes about a second; the arrays are kept in an ``.npz`` so
that a sweep's processes do not each pay it. The data folder is often shared (a lab's copy of
the sets, written by whoever fetched them first), so the cache must not be a way to change
anyone's numbers: a digest the file records about itself proves nothing, since whoever edits
the arrays can copy or recompute it. The digest that counts is the one in spmlkit's own code
(``spmlkit.data.mulan.MULAN_PARSED_SHA256``, what spmlkit's reader makes of MULAN's pinned
files; a test parses the files and compares). A cache is used only when:

- its arrays have exactly the names, dtypes and shapes the set has (read from each array's
  header *before* its data: a small compressed file that claims or holds gigabytes is refused
  after reading at most the expected number of bytes);
- their digest (:func:`arrays_digest`) is the pinned one.

Anything else (truncated, not a zip file, an array missing, an edited label) is a warning that
names the cache file and says what was wrong; the set is parsed from its files again and the
cache rewritten where the folder is writable. Nothing here raises for a bad cache: it is ours,
and costs only a parse.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..io import atomic_write_bytes

__all__ = ["ArraySpec", "arrays_digest", "npy_header", "read_cache", "write_cache"]

log = logging.getLogger(__name__)

#: an ``.npy`` header is a few hundred bytes; numpy itself reads none longer than this
_MAX_HEADER = 10_000


@dataclass(frozen=True)
class ArraySpec:
    """What one cached array must be: its shape, its dtype kind (``f``, ``u``, ``U``) and the
    largest item size (bytes) it may have."""

    shape: tuple[int, ...]
    kind: str
    max_itemsize: int


class _Damaged(Exception):
    """The cache is not what it must be (the message says how)."""


def arrays_digest(arrays: dict[str, np.ndarray], keys: tuple[str, ...]) -> str:
    """SHA-256 over ``keys``' arrays: name, dtype and shape, then the values (numbers as
    little-endian bytes, names as JSON text), so that equal arrays give equal digests on any
    machine whatever their byte order or string width."""
    digest = hashlib.sha256()
    for key in keys:
        a = np.asarray(arrays[key])
        if a.dtype.kind == "U":
            head, body = f"{key} names {a.shape}", json.dumps(a.tolist()).encode("utf-8")
        else:
            little = a.astype(a.dtype.newbyteorder("<"), copy=False)
            head, body = f"{key} {little.dtype.str} {a.shape}", np.ascontiguousarray(little).tobytes()
        digest.update(head.encode("utf-8") + b"\n")
        digest.update(body)
    return digest.hexdigest()


def read_cache(path: Path, expected: dict[str, ArraySpec], digest: str) -> dict[str, np.ndarray] | None:
    """The arrays of ``path`` when they are exactly ``expected`` and hash to ``digest``; None
    (with a warning naming ``path`` unless it does not exist) otherwise."""
    if not path.exists():
        return None
    try:
        arrays = _read_bounded(path, expected)
        if arrays_digest(arrays, tuple(expected)) != digest:
            raise _Damaged("its arrays are not what the set's files parse to (changed after it was written)")
    except _Damaged as exc:
        problem = str(exc)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
        problem = f"it cannot be read ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0]})"
    else:
        return arrays
    log.warning("%s: %s; not used: the set is parsed from its files again", path, problem)
    return None


def _read_bounded(path: Path, expected: dict[str, ArraySpec]) -> dict[str, np.ndarray]:
    """Each expected array, its header checked before its data is read or allocated."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as zf:
        for key, spec in expected.items():
            try:
                info = zf.getinfo(f"{key}.npy")
            except KeyError:
                raise _Damaged(f"it holds no array {key!r}") from None
            with zf.open(info) as fh:
                shape, dtype, header = _header(fh, key)
                if (shape != spec.shape or dtype.kind != spec.kind or dtype.itemsize > spec.max_itemsize
                        or dtype.hasobject):
                    raise _Damaged(f"its array {key!r} is {dtype.str} {shape}, not {spec.kind} {spec.shape}")
                size = int(np.prod(shape)) * dtype.itemsize
                if info.file_size > header + size:
                    raise _Damaged(f"its array {key!r} holds {info.file_size:,} bytes, more than its "
                                   f"{header + size:,}")
            with zf.open(info) as fh:  # the header again, then exactly ``size`` bytes
                arrays[key] = np.lib.format.read_array(fh, allow_pickle=False)
    return arrays


def _header(fh, key: str) -> tuple[tuple[int, ...], np.dtype, int]:
    try:
        return npy_header(fh)
    except _UnknownVersion as exc:
        raise _Damaged(f"its array {key!r} has an .npy format version spmlkit does not write ({exc})") from None


class _UnknownVersion(ValueError):
    """An ``.npy`` format version other than 1.0 and 2.0 (the ones ``numpy.save`` writes)."""


def npy_header(fh) -> tuple[tuple[int, ...], np.dtype, int]:
    """An ``.npy`` stream's shape, dtype and header length, reading nothing but the header: what an
    array claims, known before a byte of it is allocated (here, and for a user's ``.npz`` table,
    :mod:`spmlkit.data.table`). A header that is not one raises ``ValueError``."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
    if read is None:
        raise _UnknownVersion(str(version))
    shape, _fortran, dtype = read(fh, max_header_size=_MAX_HEADER)
    return tuple(int(n) for n in shape), np.dtype(dtype), fh.tell()


def write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Keep ``arrays`` at ``path`` when the folder is writable; a read-only data folder only costs
    a parse per process.

    A folder marked read-only (no owner write bit) is left alone even where the process could
    write it anyway (as root): a shared copy of the sets is not ours to add files to."""
    folder = path.parent
    if not (folder.stat().st_mode & stat.S_IWUSR) or not os.access(folder, os.W_OK):
        log.info("not keeping the parsed arrays in %s (read-only)", folder)
        return
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    try:
        atomic_write_bytes(path, buffer.getvalue())
    except OSError as exc:
        log.info("not keeping the parsed arrays at %s (%s)", path, exc)
