"""Checks run before anything heavy starts (no torch, no hivemind unless said), shared by the commands.

Each raises ``ValueError`` with a message naming the setting and the bad value; the commands print it in the
one error format of :mod:`p2p_guard.cli.errors` and exit 2.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

__all__ = ["check_identity_file", "check_port_free", "check_task_data"]


def check_identity_file(path: str | Path, *, flag: str = "--identity") -> None:
    """An existing identity file must be a readable Ed25519 key file; a missing one must be creatable.

    Imports ``cryptography`` (a fraction of a second), not torch.

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    path = Path(path)
    if path.exists():
        if not path.is_file():
            raise ValueError(f"{flag} {path}: not a regular file")
        from p2p_guard.identity import Identity

        try:
            Identity.load(path)
        except PermissionError:
            raise ValueError(f"{flag} {path}: not readable (permission denied)") from None
        except (OSError, ValueError) as e:
            raise ValueError(f"{flag} {e}") from None
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: cannot be created ({parent} is not a writable directory)")


def check_port_free(host: str, port: int) -> None:
    """A fixed TCP port (``port > 0``) must be free to listen on at ``host``.

    Raises:
        ValueError: if the port is taken or the address cannot be bound.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ValueError(f"--port {port}: already in use on {host} (pick another, or 0 for any)") from None
            raise ValueError(f"--host {host} --port {port}: cannot listen there: {e.strerror or e}") from None


def check_task_data(task_name: str) -> None:
    """Build the task (its name and options) and read its data now, so a missing data set fails up front.

    Imports torch (through the task); call it after the cheap checks.

    Raises:
        ValueError: on an unknown task, bad options, or missing or malformed data files (the message says
            which package or directory is missing).
    """
    from p2p_guard.tasks import load_task

    task = load_task(task_name)
    check = getattr(task, "check_data", None)
    if callable(check):
        try:
            check()
        except OSError as e:
            raise ValueError(str(e)) from None
