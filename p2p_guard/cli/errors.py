"""One format for every command's errors and warnings: ``p2p-guard CMD: error: MESSAGE`` on stderr.

It is argparse's own format (``parser.error``), so a usage error found by argparse and one found by our
checks read the same. Exit code 2 is a usage error (bad flag, file, setting, name); 1 a failure at run time.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "print_error", "print_warning"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def print_error(command: str, message: str) -> None:
    """Write ``p2p-guard COMMAND: error: MESSAGE`` (one line) to stderr."""
    print(f"p2p-guard {command}: error: {_one_line(message)}", file=sys.stderr, flush=True)  # noqa: T201


def print_warning(command: str, message: str) -> None:
    """Write ``p2p-guard COMMAND: warning: MESSAGE`` (one line) to stderr."""
    print(f"p2p-guard {command}: warning: {_one_line(message)}", file=sys.stderr, flush=True)  # noqa: T201


def _one_line(message: str) -> str:
    return " ".join(message.split())


class DefaultsOnceFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each real default shown once: not for flags, None defaults, or a help text that gives it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS \
                or "default" in text or action.nargs == 0:
            return text
        return super()._get_help_string(action)
