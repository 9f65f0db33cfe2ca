"""The one distinction the command line needs: a mistake in the user's input, or our bug.

:class:`InputError` marks an error the user can fix (a bad option, a missing file, a malformed
dataset); ``spmlkit`` prints it as one line and exits with status 2. Anything else is a bug
in spmlkit and keeps its traceback. Validation happens at the boundary, before work starts
(reading options, files and data), so :func:`user_input` wraps exactly those steps and turns
the plain ``ValueError`` / ``FileNotFoundError`` they raise into :class:`InputError`; the same
exception raised later, inside a training loop, is not the user's fault and is not disguised.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["InputError", "user_input"]


class InputError(ValueError):
    """A mistake in the user's input: what was wrong, where, and what to do."""


_BOUNDARY_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


@contextlib.contextmanager
def user_input() -> Iterator[None]:
    """Errors raised in this block by checks of the user's input become :class:`InputError`."""
    try:
        yield
    except InputError:
        raise
    except _BOUNDARY_ERRORS as exc:
        raise InputError(_message(exc)) from exc


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)
