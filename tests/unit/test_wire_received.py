"""Wire bytes a peer's fetches read are counted (``transport.WireCounter``), and go into each round's event.

helper h64: ``bytes_received`` counts the updates and states a peer *used* (declared sizes), not what came over
the wire: chunk digest lists, cut, failed and repeated fetches were counted nowhere. ``wire_bytes_received`` is
the receive-side twin of ``bytes_sent`` (answer bodies, no status bytes).
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

from p2p_guard.identity import Identity
from p2p_guard.protocol.chunks import ChunkVerifier, chunk_digests, payload_root
from p2p_guard.swarm.transport import OK, WireCounter, fetch, fetch_payload

PEER = Identity.from_seed(bytes(range(32))).peer_id


class _Writer:
    def write(self, _data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class _AnsweringP2P:
    """A P2P stand-in whose every stream answers ``answer`` (status byte first), then ends."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def call_binary_stream_handler(self, peer: Any, name: str) -> Any:
        reader = asyncio.StreamReader()
        reader.feed_data(self.answer)
        reader.feed_eof()
        return None, reader, _Writer()


def _state(p2p: Any, max_bytes: int, wire: WireCounter | None) -> Any:
    return asyncio.run(fetch(p2p, PEER, "run", ["theta", 1], max_bytes=max_bytes, timeout_s=5.0, wire=wire))


def test_a_state_fetch_counts_its_body_not_its_status_byte() -> None:
    p2p, counter = _AnsweringP2P(bytes([OK]) + bytes(range(16))), WireCounter()
    assert _state(p2p, 16, counter).status == OK
    assert counter.received == 16
    assert _state(p2p, 16, counter).status == OK  # asked again: counted again
    assert counter.received == 32


def test_a_cut_answer_counts_what_was_read() -> None:
    p2p, counter = _AnsweringP2P(bytes([OK]) + bytes(5)), WireCounter()
    result = _state(p2p, 16, counter)
    assert (result.status, result.detail) == (-1, "stream ended after 5 of 16 bytes")
    assert counter.received == 5


def test_a_payload_fetch_counts_the_digest_list_and_the_chunks() -> None:
    payload = bytes(range(200)) * 3  # 600 bytes, one chunk: 32 digest bytes + 600
    p2p, counter = _AnsweringP2P(bytes([OK]) + chunk_digests(payload) + payload), WireCounter()
    result = asyncio.run(fetch_payload(p2p, PEER, "run", 3, ChunkVerifier(payload_root(payload), len(payload)),
                                       timeout_s=5.0, wire=counter))
    assert (result.status, bytes(result.data or b"")) == (OK, payload)
    assert counter.received == 632


def test_a_fetch_without_a_counter_counts_nowhere() -> None:
    counter = WireCounter()
    assert _state(_AnsweringP2P(bytes([OK]) + bytes(8)), 8, None).status == OK
    assert _state(_AnsweringP2P(bytes([OK]) + bytes(8)), 8, counter).status == OK
    assert counter.received == 8


def test_the_round_clock_laps_the_wire_bytes_and_the_round_event_carries_them() -> None:
    from p2p_guard.swarm.peer import RoundOutcome, _emit_round, _RoundClock
    from p2p_guard.tasks.base import Metrics

    server = SimpleNamespace(bytes_sent=10, stats=SimpleNamespace(payloads_served=1))
    peer = SimpleNamespace(server=server, wire_in=WireCounter(), me="me", metrics=None,
                           log=logging.getLogger("test-wire-received"))
    peer.wire_in.received = 100
    clock = _RoundClock(peer)  # type: ignore[arg-type]
    peer.wire_in.received += 632
    server.bytes_sent += 40
    _seconds, sent, received, served, _phases = clock.lap()
    assert (sent, received, served) == (40, 632, 0)
    assert clock.lap()[1:4] == (0, 0, 0)
    emitted: list[tuple[str, dict[str, object]]] = []
    events = SimpleNamespace(emit=lambda kind, **fields: emitted.append((kind, fields)))
    _emit_round(peer, events, RoundOutcome(3, bytes_received=600), Metrics(1.0, 0.5, None), 2.0, sent,  # type: ignore[arg-type]
                served, None, {}, "ab", wire_bytes_received=received)
    [event] = [fields for kind, fields in emitted if kind == "round"]
    assert (event["bytes_received"], event["wire_bytes_received"], event["bytes_sent"]) == (600, 632, 40)
