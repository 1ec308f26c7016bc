"""Unit tests: a stream that does not open (a frozen peer) is cut after the idle timeout, as no answer at all.

A SIGSTOPped peer keeps its libp2p connections open, so the daemon's stream open (protocol negotiation) waits on
it with no bound of its own; ``fetch`` and ``fetch_payload`` used to wait their whole ``timeout_s`` (30 s), or
until the peer resumed. Now the open is bounded by ``idle_timeout_s`` and reported like a missing status byte
(``TOO_SLOW`` with ``NO_ANSWER_DETAIL``), so the peer becomes an unreachable suspect.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from p2p_guard.identity import Identity
from p2p_guard.protocol.chunks import ChunkVerifier
from p2p_guard.swarm.transport import TOO_SLOW, fetch, fetch_payload, is_no_answer

PEER = Identity.from_seed(bytes(range(32))).peer_id


class _FrozenP2P:
    """A P2P stand-in whose stream open never completes (the remote never answers the negotiation)."""

    def __init__(self) -> None:
        self.cancelled = False

    async def call_binary_stream_handler(self, peer: Any, name: str) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_a_fetch_to_a_peer_that_never_opens_the_stream_is_cut_at_the_idle_timeout() -> None:
    p2p = _FrozenP2P()
    start = time.monotonic()
    result = asyncio.run(fetch(p2p, PEER, "run", ["theta", 1], max_bytes=16, timeout_s=30.0,  # type: ignore[arg-type]
                               idle_timeout_s=0.2, min_bytes_per_s=1000))
    assert time.monotonic() - start < 2.0
    assert result.status == TOO_SLOW
    assert is_no_answer(result.detail)
    assert p2p.cancelled  # the open was cancelled, not left running


def test_a_payload_fetch_to_a_peer_that_never_opens_the_stream_is_cut_at_the_idle_timeout() -> None:
    p2p = _FrozenP2P()
    start = time.monotonic()
    verifier = ChunkVerifier(bytes(32), 8)
    result = asyncio.run(fetch_payload(p2p, PEER, "run", 3, verifier, timeout_s=30.0,  # type: ignore[arg-type]
                                       idle_timeout_s=0.2, min_bytes_per_s=1000))
    assert time.monotonic() - start < 2.0
    assert result.status == TOO_SLOW
    assert is_no_answer(result.detail)
