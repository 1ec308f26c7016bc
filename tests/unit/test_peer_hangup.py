"""A peer whose terminal closes (SIGHUP: an ssh session that drops) leaves the swarm as on Ctrl+C.

User test (helper-68): ``kill -HUP`` on a running ``p2p-guard peer`` ended it at once (exit 129, no log line, no
signed leave record), so the other peers waited for its presence to expire (30 s) instead of dropping it at
their next read. A peer started under ``nohup`` (SIGHUP inherited ignored) must keep ignoring it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator

import pytest

from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.config import PeerConfig


@pytest.fixture
def hangup_disposition() -> Iterator[None]:
    """Restore SIGHUP's disposition after the test (the peer's handler, or the test's, must not leak)."""
    previous = signal.getsignal(signal.SIGHUP)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def _hang_up_and_wait(stopped: list[bool]):  # noqa: ANN202 - the stand-in for peer._main
    """A stand-in for the peer's run: SIGHUP to ourselves, then wait up to 2 s for the stop request (noted)."""

    async def main(_config: PeerConfig, _progress: bool, stop: asyncio.Event) -> int:
        os.kill(os.getpid(), signal.SIGHUP)
        try:
            await asyncio.wait_for(stop.wait(), 2.0)
        except TimeoutError:
            stopped.append(False)
        else:
            stopped.append(True)
        return 0

    return main


@pytest.mark.usefixtures("hangup_disposition")
def test_sighup_stops_the_peer_cleanly(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The first SIGHUP sets the stop request and is logged; the run then ends normally (exit 0)."""
    seen: list[int] = []
    signal.signal(signal.SIGHUP, lambda signum, _frame: seen.append(signum))  # were the peer to leave it alone
    stopped: list[bool] = []
    monkeypatch.setattr(peer_module, "_main", _hang_up_and_wait(stopped))
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        assert asyncio.run(peer_module._run_with_signals(PeerConfig(), False)) == 0
    assert stopped == [True]
    assert seen == []
    assert "SIGHUP received: finishing cleanly (send again to force)" in [r.getMessage() for r in caplog.records]


@pytest.mark.usefixtures("hangup_disposition")
def test_a_peer_started_under_nohup_keeps_ignoring_sighup(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGHUP inherited as SIG_IGN (``nohup``) is left ignored during the run and after it."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stopped: list[bool] = []
    monkeypatch.setattr(peer_module, "_main", _hang_up_and_wait(stopped))
    assert asyncio.run(peer_module._run_with_signals(PeerConfig(), False)) == 0
    assert stopped == [False]
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
