"""The ``spmlkit`` command line: one entry point, one sub-command per job.

A mistake in the user's input (a bad option value, a missing file, an unknown name, a
malformed dataset) is printed as one line saying what was wrong and what to do, with exit
status 2; ``--debug`` shows its traceback. Anything else is a bug in spmlkit and keeps its
traceback (:mod:`spmlkit.errors`).
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Sequence

from . import catalogue, data, experiments, export, train
from ._common import add_plugin_option, load_command_plugins

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="spmlkit", description="Multi-label learning when most labels are missing (SPML and relatives)."
    )
    parser.add_argument("--version", action="version", version=f"spmlkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors (default: one line)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    catalogue.add_parsers(sub)
    experiments.add_parsers(sub)
    train.add_parser(sub)
    data.add_parsers(sub)
    export.add_parsers(sub)
    for command in sub.choices.values():
        # the global options work after the sub-command too (`spmlkit train ... --debug`); SUPPRESS
        # keeps an absent one from resetting what was given before the sub-command
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show full tracebacks on errors (also accepted before the sub-command)")
        add_plugin_option(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from ..allocator import keep_freed_memory
    from ..errors import InputError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    keep_freed_memory()  # a command's steps reuse memory instead of page-faulting it in again
    try:
        load_command_plugins(args)
        return int(args.func(args) or 0)
    except InputError as exc:
        if args.debug:
            raise
        print(f"spmlkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        advice = _OS_ADVICE.get(exc.errno)
        if advice is None or args.debug:  # not a state of the machine the user can fix: our bug
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"spmlkit {args.command}: error: {where}{exc.strerror}; {advice}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


#: operating-system errors that are the state of the user's machine, and what to do about them;
#: every file spmlkit writes is atomic, so what was there before is intact
_OS_ADVICE = {
    errno.ENOSPC: "the disk is full: free space and run the command again (a training run continues with --resume)",
    errno.EDQUOT: "the disk quota is exhausted: free space and run the command again",
    errno.EACCES: "no permission to write there: choose a writable --out",
    errno.EPERM: "no permission to write there: choose a writable --out",
    errno.EROFS: "the file system is read-only: choose a writable --out",
    errno.ENOTDIR: "a path component is a file, not a folder: choose another --out",
    errno.EISDIR: "a folder stands where a file is to be written: choose another --out",
    errno.EEXIST: "a file stands where a folder is to be made: choose another --out",
}
