"""Logging set-up for the command line (the only place in p2p_guard that installs handlers)."""

from __future__ import annotations

import logging
import sys

__all__ = ["setup_logging"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str = "INFO") -> None:
    """Send our log lines to stderr at ``level``; keep hivemind's own chatter at WARNING.

    Args:
        level: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR``.

    Raises:
        ValueError: on an unknown level name.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    root = logging.getLogger("p2p_guard")
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    root.propagate = False
    logging.getLogger("hivemind").setLevel(max(numeric, logging.WARNING))
