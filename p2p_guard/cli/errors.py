"""One format for every command's errors and warnings: ``p2p-guard CMD: error: MESSAGE`` on stderr.

It is argparse's own format (``parser.error``), so a usage error found by argparse and one found by our
checks read the same; ``CliParser`` drops the usage text argparse prints before it (a command's usage runs to
thirty lines, so the error scrolled out of sight). Exit code 2 is a usage error (bad flag, file, setting, name);
1 a failure at run time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import NoReturn

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "CliParser", "name_subcommands", "print_error", "print_warning",
           "silence_stdout"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def print_error(command: str, message: str) -> None:
    """Write ``p2p-guard COMMAND: error: MESSAGE`` (one line) to stderr."""
    _print_line(f"p2p-guard {command}", "error", message)


def print_warning(command: str, message: str) -> None:
    """Write ``p2p-guard COMMAND: warning: MESSAGE`` (one line) to stderr."""
    _print_line(f"p2p-guard {command}", "warning", message)


def _print_line(prog: str, kind: str, message: str) -> None:
    """Write ``PROG: KIND: MESSAGE`` to stderr, the message's whitespace and line breaks folded to single spaces."""
    print(f"{prog}: {kind}: {' '.join(message.split())}", file=sys.stderr, flush=True)  # noqa: T201


class CliParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``PROG: error: MESSAGE (see --help)``, exit code 2.

    argparse's own ``error`` prints the whole usage text first. Sub-parsers made by ``add_subparsers`` are of
    the parent's class, so setting it on the top parser covers every command.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``message`` on one line with a pointer to ``--help``, then exit with ``EXIT_USAGE``."""
        _print_line(self.prog, "error", f"{message} (see --help)")
        sys.exit(EXIT_USAGE)


def name_subcommands(subparsers: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    """Give a sub-command group the ``name`` its errors and usage line use (e.g. ``COMMAND``).

    Without it a missing sub-command is reported by the group's internal ``dest`` ("the following arguments are
    required: bench_command"); the sub-commands stay listed, one per line, in ``--help``.
    """
    subparsers.metavar = name


class DefaultsOnceFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each real default shown once: not for flags, None defaults, or a help text that gives it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS \
                or "default" in text or action.nargs == 0:
            return text
        return super()._get_help_string(action)


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone, so later prints and the last flush raise nothing.

    For a closed pipe (``p2p-guard status --watch 1 | head -3``, ``p2p-guard simulate ... | head -2``), which
    otherwise ended in a ``BrokenPipeError`` traceback and exit 1; Python's advice for it:
    https://docs.python.org/3/library/signal.html#note-on-sigpipe.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
