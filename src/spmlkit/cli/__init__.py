"""The ``spmlkit`` command line: one entry point, one sub-command per job.

A mistake in the user's input (a bad option value, a missing file, an unknown name, a
malformed dataset) is printed as one line saying what was wrong and what to do, with exit
status 2; ``--debug`` shows its traceback. Anything else is a bug in spmlkit and keeps its
traceback (:mod:`spmlkit.errors`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import catalogue, data, experiments, train

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="spmlkit", description="Multi-label learning when most labels are missing (SPML and relatives)."
    )
    parser.add_argument("--version", action="version", version=f"spmlkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    catalogue.add_parsers(sub)
    experiments.add_parsers(sub)
    train.add_parser(sub)
    data.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from ..errors import InputError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        if args.debug:
            raise
        print(f"spmlkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
