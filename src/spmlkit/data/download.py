"""The data folder, and fetching a file into it once, checked, or not at all.

**The data folder** is ``$SPMLKIT_DATA`` when set, else ``~/spmlkit_data``: a visible folder in
the user's home, as scikit-learn's ``~/scikit_learn_data``, so that a user who wonders where
hundreds of megabytes went finds them, and can copy files in by hand (docs/protocol.md, "MULAN
data sets").

**A fetched file** streams into a temporary file beside its destination, is hashed on the way,
and is renamed over its destination only when it arrived whole (as many bytes as the server
announced) and its SHA-256 is the expected one. A broken connection, a short answer, a
mismatch or Ctrl-C leave no file under the destination's name, so the next call starts over
instead of trusting half a file; each failure is one line (:class:`DownloadError`) that says
what went wrong and how to place the file by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from ..io import new_file_mode

__all__ = ["DATA_ENV", "DownloadError", "data_home", "fetch_file"]

DATA_ENV = "SPMLKIT_DATA"
_CHUNK = 1 << 16
_TIMEOUT_S = 60


class DownloadError(InputError):
    """A file could not be fetched whole and verified; nothing was kept."""


def data_home() -> Path:
    """``$SPMLKIT_DATA``, else ``~/spmlkit_data`` (not created here: reading needs no folder)."""
    given = os.environ.get(DATA_ENV)
    if given is not None and not given.strip():
        raise ValueError(f"{DATA_ENV} is set but empty; unset it (the default is ~/spmlkit_data) or name a folder")
    return Path(given).expanduser() if given else Path.home() / "spmlkit_data"


def fetch_file(url: str, dest: str | os.PathLike, sha256: str, *, manual: str, timeout: float = _TIMEOUT_S) -> Path:
    """Download ``url`` to ``dest`` if its bytes hash to ``sha256``; ``manual`` says how to do it by hand."""
    import tempfile

    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    except OSError as exc:
        raise DownloadError(f"cannot write into {dest.parent} ({exc.strerror or exc}); choose a writable data folder "
                            f"with {DATA_ENV}=DIR, or {manual}") from None
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, new_file_mode())  # a data file is shared like any other (spmlkit.io says why)
        digest, received, announced = _stream(url, fd, timeout, manual)
        if announced is not None and received != announced:
            raise DownloadError(f"the download of {url} stopped after {received} of {announced} bytes; nothing was "
                                f"kept. Try again, or {manual}")
        if digest != sha256:
            raise DownloadError(f"{url} does not have the expected SHA-256 ({digest[:16]}... instead of "
                                f"{sha256[:16]}...); nothing was kept. The source or a proxy changed the file: "
                                f"{manual} and check it")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _stream(url: str, fd: int, timeout: float, manual: str) -> tuple[str, int, int | None]:
    """Copy the answer into ``fd``: (hex digest, bytes received, bytes announced or None)."""
    import hashlib
    import http.client
    import urllib.error
    import urllib.request

    with os.fdopen(fd, "wb") as out:
        try:
            response = urllib.request.urlopen(url, timeout=timeout)
        except urllib.error.HTTPError as exc:
            raise DownloadError(f"{url} answered HTTP {exc.code} ({exc.reason}); {manual}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise DownloadError(f"cannot reach {url} ({reason}); without a network, {manual}") from None
        digest, received = hashlib.sha256(), 0
        with response:
            length = response.headers.get("Content-Length")
            announced = int(length) if length and length.isdigit() else None
            while True:
                try:
                    block = response.read(_CHUNK)
                except (http.client.HTTPException, OSError) as exc:  # IncompleteRead, a reset, a timeout
                    raise DownloadError(f"the download of {url} broke off after {received} bytes "
                                        f"({type(exc).__name__}); nothing was kept. Try again, or {manual}") from None
                if not block:
                    break
                out.write(block)
                digest.update(block)
                received += len(block)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), received, announced
