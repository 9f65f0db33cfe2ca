"""Helpers shared by the sub-commands: argument types and the console."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_plugin_option", "csv_list", "hparam", "console", "load_command_plugins", "plugin_refs", "positive_int",
           "print_whole_words"]


def csv_list(kind: type) -> Any:
    """``a,b,c`` -> a tuple of ``kind``; a clear message for a bad item."""

    def parse(text: str) -> tuple:
        try:
            return tuple(kind(t) for t in text.split(",") if t.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}")

    return parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def hparam(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` with VALUE read as JSON when it parses (numbers, lists), else as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key.strip(), parsed


def console():
    """A rich console; wide enough for tables when output goes to a file or pipe."""
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=160)


def print_whole_words(screen: Any, text: str, indent: str = "", **options: Any) -> None:
    """Print ``text`` wrapped between words only, at the console's width.

    rich folds a word longer than the line (a long path) with a line break inside it, so it can
    no longer be copied as one path. Here the lines break at spaces, never inside a word or at a
    hyphen; a path longer than the line stands whole on a line of its own. ``indent`` starts
    every line after the first."""
    import textwrap

    lines = textwrap.wrap(text, width=screen.width, break_long_words=False, break_on_hyphens=False,
                          subsequent_indent=indent) or [""]
    screen.print("\n".join(lines), soft_wrap=True, **options)


def add_plugin_option(p: argparse.ArgumentParser) -> None:
    """``--plugin``, which every command takes: a user's losses, methods, label algorithms and
    datasets, from a file or a module (docs/plugins.md)."""
    p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="FILE.py|MODULE",
                   help="load your own losses, methods, label algorithms or datasets from a Python file or an "
                        "importable module first; repeatable (default: none, besides $SPMLKIT_PLUGINS and installed "
                        "packages' spmlkit.plugins entry points; docs/plugins.md)")


def plugin_refs(args: argparse.Namespace) -> list[str]:
    """The plug-ins this command was given (``--plugin``, then ``$SPMLKIT_PLUGINS``), as typed:
    what a run's settings keep so that a resumed run or a worker loads them again."""
    from ..plugins import env_plugins

    return list(dict.fromkeys([*getattr(args, "plugins", []), *env_plugins()]))


def load_command_plugins(args: argparse.Namespace) -> None:
    """Load the command's plug-ins before it runs (nothing is imported when there are none).

    A command that needs no plug-in (``report``: its numbers come from a store; its parser sets
    ``plugins_optional``) warns in one line about an installed or environment plug-in that cannot
    be loaded and goes on without it; what ``--plugin`` names is loaded or refused as anywhere."""
    import sys

    from ..plugins import load_plugins

    def warn(line: str) -> None:
        print(f"spmlkit {args.command}: warning: {line}; going on without it (this command needs no plug-in)",
              file=sys.stderr)

    load_plugins(getattr(args, "plugins", []), on_broken=warn if getattr(args, "plugins_optional", False) else None)
