"""Logging set-up for the command line (the only place in p2p_guard that installs handlers)."""

from __future__ import annotations

import logging
import sys

__all__ = ["setup_logging"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: hivemind's logger for the lines of our ``p2pd`` (``P2P._log_p2pd_message``).
P2PD_LOGGER = "hivemind.p2p.p2p_daemon"


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
    p2pd = logging.getLogger(P2PD_LOGGER)
    if not any(isinstance(f, _P2pdShutdownNoise) for f in p2pd.filters):
        p2pd.addFilter(_P2pdShutdownNoise())


class _P2pdShutdownNoise(logging.Filter):
    """Drops ``p2pd``'s ERROR line on its own shutdown: its listener was closed while it accepted connections.

    A Ctrl+C in a terminal reaches ``p2pd`` too (the terminal signals the whole process group), and ``p2pd``
    then logs ``error accepting connection: accept unix ...: use of closed network connection``, an ERROR that
    is no error: the peer or bootstrap node is stopping anyway, and says so.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for that line, True for every other."""
        message = record.getMessage()
        return not (message.startswith("error accepting connection") and "use of closed network connection" in message)
