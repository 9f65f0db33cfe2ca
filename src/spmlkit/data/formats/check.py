"""Image checks run while preparing a dataset: existence (always) and decoding (on request).

Existence is a cheap ``os.path.exists`` per listed image, done by default so that a wrong
root or a partly unpacked archive is caught at preparation time instead of hours into a
training run. The deeper check decodes every file in full, as training does; it scans
everything and reports all bad files at the end rather than stopping at the first, because
one unreadable JPEG in 120,000 should not cost a user a full re-run per file found.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .common import MissingImagesError

__all__ = ["BadImage", "ProgressCallback", "find_missing", "require_images", "verify_images"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each image during a ``check=True`` scan."""

_SHOW_MISSING = 5
_MAX_WORKERS = 8  # decoding threads of a check: each holds at most one decoded image


@dataclass(frozen=True)
class BadImage:
    """An image that could not be verified: its path (relative to the root) and why."""

    path: str
    reason: str


def find_missing(base: Path, paths: Sequence[str]) -> list[str]:
    """The entries of ``paths`` (relative to ``base``) that are not existing files, in order."""
    root = os.fspath(base)
    return [p for p in paths if not os.path.isfile(os.path.join(root, p))]


def require_images(base: Path, paths: Sequence[str], hint: str = "") -> None:
    """Raise :class:`MissingImagesError` naming the first few absent images and their count."""
    missing = find_missing(base, paths)
    if not missing:
        return
    shown = ", ".join(missing[:_SHOW_MISSING])
    more = f" (and {len(missing) - _SHOW_MISSING} more)" if len(missing) > _SHOW_MISSING else ""
    parts = [
        f"{len(missing)} of {len(paths)} listed images are missing under {base}: {shown}{more}.",
        hint,
        "Unpack the missing images there, or point --root at the folder that holds them.",
    ]
    raise MissingImagesError(" ".join(p for p in parts if p))


def verify_images(base: Path, paths: Sequence[str], progress: ProgressCallback | None = None, *,
                  workers: int | None = None) -> list[BadImage]:
    """Decode every image in full, as training will; return the ones that fail, in order.

    Each file goes through :func:`~spmlkit.data.image_decode.decode_image`, the very function
    that reads pixels for training, the cache and ``spmlkit predict``: PIL's ``verify()`` reads a
    file's structure only and passed a JPEG cut off halfway, which training then could not
    read in its first epoch. So whatever this check passes, training reads (an image too large
    to decode fails here too). A failure is recorded with its exception and the scan continues.

    Decoding every pixel costs a few milliseconds per photograph where ``verify()`` cost
    microseconds, so ``workers`` threads decode side by side (default: the usable CPUs, at most
    :data:`_MAX_WORKERS`); PIL releases the interpreter lock while it decodes, so threads scale
    without the start-up of processes. The result and the progress calls are in list order.
    """
    from ...cpus import usable_cpus

    root = os.fspath(base)
    files = [os.path.join(root, rel) for rel in paths]
    count = workers if workers is not None else min(_MAX_WORKERS, usable_cpus())
    bad: list[BadImage] = []
    total = len(paths)
    with ThreadPoolExecutor(max(1, count)) as pool:
        for done, (rel, reason) in enumerate(zip(paths, pool.map(_why_unreadable, files)), start=1):
            if reason is not None:
                bad.append(BadImage(rel, reason))
            if progress is not None:
                progress(done, total)
    return bad


def _why_unreadable(path: str) -> str | None:
    """Why the image at ``path`` cannot be decoded (one line), or None when it can."""
    from ..image_decode import decode_image

    try:
        decode_image(path)
    except Exception as err:  # noqa: BLE001 - any failure to read marks the image bad
        return " ".join(f"{type(err).__name__}: {err}".split())
    return None
