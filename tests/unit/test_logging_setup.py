"""``setup_logging``: ``p2pd``'s ERROR line on its own shutdown (a Ctrl+C in a terminal) is dropped, no other."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from p2p_guard.cli.logging_setup import P2PD_LOGGER, setup_logging

CLOSED = "error accepting connection: accept unix /tmp/hivemind-p2pd-x.sock: use of closed network connection"


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Put back what ``setup_logging`` changes, so that later tests' ``caplog`` still sees our records."""
    loggers = [logging.getLogger(name) for name in ("p2p_guard", "hivemind", P2PD_LOGGER)]
    saved = [(lg.handlers[:], lg.level, lg.propagate, lg.filters[:]) for lg in loggers]
    yield
    for lg, (handlers, level, propagate, filters) in zip(loggers, saved, strict=True):
        lg.handlers[:], lg.filters[:] = handlers, filters
        lg.setLevel(level)
        lg.propagate = propagate


def _passes(message: str) -> bool:
    record = logging.LogRecord(P2PD_LOGGER, logging.ERROR, __file__, 1, message, None, None)
    return bool(logging.getLogger(P2PD_LOGGER).filter(record))


@pytest.mark.usefixtures("restored_logging")
def test_p2pd_shutdown_line_is_dropped_and_other_errors_pass() -> None:
    setup_logging("INFO")
    setup_logging("INFO")  # twice (tests, the API): one filter
    p2pd = logging.getLogger(P2PD_LOGGER)
    assert len([f for f in p2pd.filters if type(f).__name__ == "_P2pdShutdownNoise"]) == 1
    assert not _passes(CLOSED)
    assert _passes("error accepting connection: too many open files")
    assert _passes("failed to listen on any addresses: use of closed network connection")
