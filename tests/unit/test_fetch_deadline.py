"""Unit tests: ``fetch`` and ``fetch_payload`` stop at ``timeout_s`` even when a cancellation is swallowed.

On Python 3.11 ``asyncio.wait_for`` loses the outer cancellation when it lands as an inner ``wait_for``
completes (CPython gh-86296). A slowloris server that sends one byte every 50 ms hit that race in CI: a fetch
with ``timeout_s=1.5`` read on until the rate floor cut it 5 s later (status ``TOO_SLOW``, not -1). Here the
outer ``wait_for`` (the one given ``timeout_s``) never fires at all, so only the deadline the fetch keeps itself
can stop it at ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from p2p_guard.identity import Identity
from p2p_guard.protocol.chunks import ChunkVerifier
from p2p_guard.swarm.transport import DEADLINE_DETAIL, OK, fetch, fetch_payload

PEER = Identity.from_seed(bytes(range(32))).peer_id


class _TrickleReader:
    """Answers OK, then one byte every ``gap_s`` seconds."""

    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s

    async def readexactly(self, n: int) -> bytes:
        return bytes([OK]) * n

    async def read(self, n: int) -> bytes:
        await asyncio.sleep(self.gap_s)
        return b"\x01"


class _Writer:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def lost_outer_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """``asyncio.wait_for`` with a timeout of exactly 0.5 s (the fetch's ``timeout_s`` below) waits forever."""
    real = asyncio.wait_for

    async def lossy(awaitable: Any, timeout: float | None) -> Any:
        return await (awaitable if timeout == 0.5 else real(awaitable, timeout))

    monkeypatch.setattr(asyncio, "wait_for", lossy)


class _TrickleP2P:
    async def call_binary_stream_handler(self, peer: Any, name: str) -> Any:
        return None, _TrickleReader(0.05), _Writer()


@pytest.mark.usefixtures("lost_outer_timeout")
def test_a_fetch_from_a_trickling_server_ends_at_its_timeout_with_status_minus_one() -> None:
    start = time.monotonic()
    result = asyncio.run(fetch(_TrickleP2P(), PEER, "run", ["payload", 0],  # type: ignore[arg-type]
                               max_bytes=1 << 20, timeout_s=0.5, idle_timeout_s=5.0, min_bytes_per_s=65536))
    elapsed = time.monotonic() - start
    assert result.status == -1
    assert result.data is None
    assert result.detail == f"{DEADLINE_DETAIL} 0.5 s"
    assert 0.4 <= elapsed < 1.5


@pytest.mark.usefixtures("lost_outer_timeout")
def test_a_payload_fetch_from_a_trickling_server_ends_at_its_timeout_with_status_minus_one() -> None:
    verifier = ChunkVerifier(bytes(32), 1 << 20)
    start = time.monotonic()
    result = asyncio.run(fetch_payload(_TrickleP2P(), PEER, "run", 0, verifier,  # type: ignore[arg-type]
                                       timeout_s=0.5, idle_timeout_s=5.0, min_bytes_per_s=65536))
    elapsed = time.monotonic() - start
    assert result.status == -1
    assert result.detail.startswith("no complete answer within 0.5 s")
    assert 0.4 <= elapsed < 1.5


def test_the_rate_floor_still_cuts_before_a_later_deadline() -> None:
    """With the deadline far off, the rate rule (1 s allowance, then 1000 B/s) cuts the 20 B/s trickle."""
    start = time.monotonic()
    result = asyncio.run(fetch(_TrickleP2P(), PEER, "run", ["payload", 0],  # type: ignore[arg-type]
                               max_bytes=1 << 20, timeout_s=30.0, idle_timeout_s=1.0, min_bytes_per_s=1000))
    assert result.status != -1
    assert "below 1000 B/s after a 1.0 s allowance" in result.detail
    assert time.monotonic() - start < 3.0
