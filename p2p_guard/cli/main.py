"""The ``p2p-guard`` command: ``bootstrap``, ``peer``, ``simulate``, ``status``, ``verify-proof``, ``bench``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from p2p_guard.cli import bench_cmd, bootstrap_cmd, peer_cmd, simulate_cmd, status_cmd, verify_proof_cmd
from p2p_guard.cli.errors import EXIT_FAILED, EXIT_USAGE, CliParser, name_subcommands, print_error, silence_stdout
from p2p_guard.cli.lean_imports import defer_scipy_optimize
from p2p_guard.cli.logging_setup import setup_logging

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (one subcommand per module in ``p2p_guard.cli``)."""
    parser = CliParser(prog="p2p-guard", description="Byzantine-robust peer-to-peer training.")
    parser.add_argument("--log-level", default="INFO", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (bootstrap_cmd, peer_cmd, simulate_cmd, status_cmd, verify_proof_cmd, bench_cmd):
        module.add_parser(sub)
    name_subcommands(sub, "COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; return its exit code.

    130 on a KeyboardInterrupt the subcommand did not handle; 1 when stdout's reader went away before the
    subcommand's output was written (``BrokenPipeError``; ``status`` and ``simulate`` handle it themselves).
    """
    # hivemind's default ("file_system") starts a torch_shm_manager daemon per process that outlives it;
    # file descriptors need no daemon. Set before hivemind is imported (the subcommands import it lazily).
    os.environ.setdefault("HIVEMIND_MEMORY_SHARING_STRATEGY", "file_descriptor")
    defer_scipy_optimize()  # about 30 MiB per process that hivemind's unused load balancing would cost
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        print_error(_command_name(args), _unknown_message(unknown))
        return EXIT_USAGE
    setup_logging(args.log_level)
    take_sigint()
    try:
        code = int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # stdout's reader has gone (`verify-proof FILE | true`): one exit status, no traceback
        silence_stdout()
        return EXIT_FAILED
    if argv is None and args.command == "peer":  # the program itself, not a call from Python
        _exit_process(code)
    return code


def take_sigint() -> None:
    """Make SIGINT raise ``KeyboardInterrupt`` again, even where it was inherited ignored (main thread only).

    A shell that runs a command as a background job without job control (``p2p-guard simulate ... &`` in a
    script) starts it with SIGINT set to ``SIG_IGN``, and Python then installs no handler of its own: ``kill -INT``
    did nothing, and the run went on until SIGTERM. Every command takes SIGINT back at start: ``simulate`` and
    ``bench`` stop through their ``KeyboardInterrupt`` path (every child stopped, a partial report written);
    ``peer``, ``bootstrap`` and ``status`` install their own handlers on their event loop over this one.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _command_name(args: argparse.Namespace) -> str:
    """The command as its own errors name it: ``peer``, or ``bench robustness`` for a command of a group.

    argparse's errors of a nested command carry its parser's whole ``prog`` (``p2p-guard bench robustness:
    error: ...``), so an unrecognized argument of ``bench robustness`` must not be ``p2p-guard bench: error:``.
    """
    sub = getattr(args, f"{args.command}_command", None)
    return f"{args.command} {sub}" if isinstance(sub, str) else str(args.command)


def _unknown_message(unknown: list[str]) -> str:
    """The one-line error for arguments no parser took, with a hint for a global option given after the command."""
    message = f"unrecognized arguments: {' '.join(unknown)}"
    if any(arg.split("=", 1)[0] == "--log-level" for arg in unknown):
        message += " (--log-level goes before the command: p2p-guard --log-level DEBUG peer ...)"
    return message + " (see --help)"


def _exit_process(code: int) -> NoReturn:
    """End a peer process that has shut down cleanly (DHT, ``p2pd``, files closed, watchdog stopped) at once.

    The interpreter's own finalization (garbage-collecting torch's and hivemind's objects) took 10 to 20 s on a
    loaded machine after the peer had said it finished, so a Ctrl+C seemed to hang and a supervisor escalated
    to SIGKILL; nothing is left for it to do, so it is skipped.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
