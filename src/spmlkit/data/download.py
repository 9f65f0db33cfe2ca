"""The data folder, and fetching a file into it once, checked, or not at all.

**The data folder** is ``$SPMLKIT_DATA`` when set, else ``~/spmlkit_data``: a visible folder in
the user's home, as scikit-learn's ``~/scikit_learn_data``, so that a user who wonders where
hundreds of megabytes went finds them, and can copy files in by hand (docs/protocol.md, "MULAN
data sets"). A value that names no folder (empty, or ``~user`` of a user this machine does not
know) is refused in one line.

**A fetched file** streams into a temporary file beside its destination, is hashed on the way,
and is renamed over its destination only when it arrived whole and its SHA-256 is the expected
one. The server is trusted for nothing the checksum already fixes:

- the file's size is known (a file of that checksum has that size), so the download stops
  after that many bytes, whatever the server announces or keeps sending, and the disk is
  checked for room before the first byte;
- each file has an overall deadline (``$SPMLKIT_DOWNLOAD_DEADLINE`` seconds, default
  :data:`DEFAULT_DEADLINE_S`) besides the per-read timeout, so a server that trickles a byte at
  a time cannot hold a run for days;
- a broken connection, a short or long answer, a mismatch, Ctrl-C or SIGTERM leave no file under
  the destination's name, no temporary file, and no folder that the fetch made and left empty;
  the next call starts over instead of trusting half a file. A temporary file left by a process
  killed outright (``kill -9``) is removed by the next fetch of that file once it is older than
  the deadline (no live download can still be writing it).

Each failure is one line (:class:`DownloadError`) that says what went wrong and how to place
the file by hand.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from pathlib import Path
from typing import Iterator

from ..errors import InputError
from ..io import new_file_mode

__all__ = ["DATA_ENV", "DEADLINE_ENV", "DEFAULT_DEADLINE_S", "DownloadError", "data_home", "download_deadline",
           "fetch_file"]

DATA_ENV = "SPMLKIT_DATA"
DEADLINE_ENV = "SPMLKIT_DOWNLOAD_DEADLINE"
DEFAULT_DEADLINE_S = 600.0
"""Seconds one file may take in all: MULAN's largest file (3.2 MB) arrives in it at 6 kB/s."""
_CHUNK = 1 << 16
_TIMEOUT_S = 60


class DownloadError(InputError):
    """A file could not be fetched whole and verified; nothing was kept."""


class _Terminated(BaseException):
    """SIGTERM during a download: cleaned up, then the signal is delivered again."""


def data_home() -> Path:
    """``$SPMLKIT_DATA``, else ``~/spmlkit_data`` (not created here: reading needs no folder)."""
    given = os.environ.get(DATA_ENV)
    if given is not None and not given.strip():
        raise InputError(f"{DATA_ENV} is set but empty; unset it (the default is ~/spmlkit_data) or name a folder")
    try:
        return Path(given).expanduser() if given else Path.home() / "spmlkit_data"
    except RuntimeError:  # ~user of an unknown user, or no home folder at all
        if given:
            user = given[1:].split("/", 1)[0] or os.environ.get("USER", "")
            raise InputError(f"{DATA_ENV}={given} starts with the home folder of user {user!r}, which this machine "
                             f"does not know; give the folder's full path") from None
        raise InputError(f"there is no home folder for the default data folder ~/spmlkit_data (HOME is not set); "
                         f"name a folder with {DATA_ENV}=DIR") from None


def download_deadline() -> float:
    """``$SPMLKIT_DOWNLOAD_DEADLINE`` in seconds, else :data:`DEFAULT_DEADLINE_S`."""
    given = os.environ.get(DEADLINE_ENV)
    if given is None or not given.strip():
        return DEFAULT_DEADLINE_S
    try:
        value = float(given)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError(f"{DEADLINE_ENV}={given} is not a number of seconds above 0; unset it for the default "
                         f"({DEFAULT_DEADLINE_S:g} s per file)")
    return value


def fetch_file(url: str, dest: str | os.PathLike, sha256: str, *, manual: str, size: int | None = None,
               timeout: float = _TIMEOUT_S) -> Path:
    """Download ``url`` to ``dest`` if its bytes hash to ``sha256``; ``size``: the file's length
    in bytes when known (no more is read); ``manual`` says how to do it by hand."""
    import tempfile

    dest = Path(dest)
    deadline = download_deadline()
    made = [p for p in reversed(dest.parents) if not p.exists()]  # outermost first
    # this process's temporary files carry its id, so that a SIGTERM arriving between their making
    # and the line that would remove them still finds them (and no other process's)
    mine = f".{dest.name}.{os.getpid()}."
    try:
        # SIGTERM is caught before the temporary file exists, not after: in between, its default
        # action would end the process and leave the file behind
        with _sigterm_cleans_up():
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                _remove_stale_parts(dest, deadline)
                _check_room(dest, size, manual)
                fd, tmp_name = tempfile.mkstemp(prefix=mine, suffix=".part", dir=dest.parent)
            except OSError as exc:
                raise DownloadError(f"cannot write into {dest.parent} ({exc.strerror or exc}); choose a writable "
                                    f"data folder with {DATA_ENV}=DIR, or {manual}") from None
            tmp = Path(tmp_name)
            try:
                os.chmod(tmp, new_file_mode())  # a data file is shared like any other (spmlkit.io says why)
                digest, received, announced = _stream(url, fd, timeout, deadline, size, manual)
                if announced is not None and received != announced:
                    raise DownloadError(f"the download of {url} stopped after {received} of {announced} bytes; "
                                        f"nothing was kept. Try again, or {manual}")
                if digest != sha256:
                    raise DownloadError(f"{url} does not have the expected SHA-256 ({digest[:16]}... instead of "
                                        f"{sha256[:16]}...); nothing was kept. The source or a proxy changed the "
                                        f"file: {manual} and check it")
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
    except BaseException as exc:
        if dest.parent.is_dir():
            for part in dest.parent.glob(f"{glob.escape(mine)}*.part"):
                part.unlink(missing_ok=True)
        for folder in reversed(made):  # the folders this fetch made, innermost first, while empty
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(exc, _Terminated):
            import signal

            os.kill(os.getpid(), signal.SIGTERM)  # the default action again: the process ends as asked
        raise
    return dest


def _remove_stale_parts(dest: Path, deadline: float) -> None:
    """Temporary files of ``dest`` older than the deadline: left by a process killed outright."""
    now = time.time()
    for part in dest.parent.glob(f".{dest.name}.*.part"):
        with contextlib.suppress(OSError):
            if now - part.stat().st_mtime > deadline:
                part.unlink()


def _check_room(dest: Path, size: int | None, manual: str) -> None:
    import shutil

    if size is None:
        return
    free = shutil.disk_usage(dest.parent).free
    if free < size:
        raise DownloadError(f"{dest.name} needs {size:,} bytes but the disk holding {dest.parent} has {free:,} free; "
                            f"free space, or choose another data folder with {DATA_ENV}=DIR")


@contextlib.contextmanager
def _sigterm_cleans_up() -> Iterator[None]:
    """While SIGTERM would end the process outright (its default action, in the main thread),
    it raises instead, so that the temporary file and empty folders go first; the caller then
    delivers it again. A handler someone else installed is left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise _Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stream(url: str, fd: int, timeout: float, deadline: float, size: int | None,
            manual: str) -> tuple[str, int, int | None]:
    """Copy the answer into ``fd``: (hex digest, bytes received, bytes announced or None)."""
    import hashlib
    import http.client
    import urllib.error
    import urllib.request

    ends = time.monotonic() + deadline
    with os.fdopen(fd, "wb") as out:
        try:
            response = urllib.request.urlopen(url, timeout=min(timeout, deadline))
        except urllib.error.HTTPError as exc:
            raise DownloadError(f"{url} answered HTTP {exc.code} ({exc.reason}); {manual}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise DownloadError(f"cannot reach {url} ({reason}); without a network, {manual}") from None
        digest, received = hashlib.sha256(), 0
        with response:
            length = response.headers.get("Content-Length")
            announced = int(length) if length and length.isdigit() else None
            if size is not None and announced is not None and announced > size:
                raise DownloadError(f"{url} announces {announced:,} bytes, but the file spmlkit expects has {size:,}; "
                                    f"nothing was fetched. The source or a proxy serves another file: {manual}")
            while True:
                if time.monotonic() > ends:
                    raise DownloadError(f"the download of {url} took longer than {deadline:g} s ({received:,} bytes "
                                        f"arrived); nothing was kept. Try again later, set {DEADLINE_ENV} to more "
                                        f"seconds for a slow network, or {manual}")
                try:
                    block = response.read1(_CHUNK)  # whatever has arrived: the deadline is checked between reads
                except (http.client.HTTPException, OSError) as exc:  # IncompleteRead, a reset, a timeout
                    raise DownloadError(f"the download of {url} broke off after {received} bytes "
                                        f"({type(exc).__name__}); nothing was kept. Try again, or {manual}") from None
                if not block:
                    break
                received += len(block)
                if size is not None and received > size:
                    raise DownloadError(f"{url} sent more than the {size:,} bytes of the file spmlkit expects; "
                                        f"nothing was kept. The source or a proxy serves another file: {manual}")
                out.write(block)
                digest.update(block)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), received, announced
