"""Integration: the stream server's resource limits (``swarm/transport.py``) between two real p2pd daemons.

Two hivemind ``P2P`` instances on 127.0.0.1 (port 0, no NAT port mapping): one serves, the other fetches.
Checks, each keyed by the caller's authenticated PeerID: the per-peer and global caps on concurrent streams
(stalled streams hold the slots, the next one gets ``BUSY``), the per-peer token-bucket request rate, the
serve limit that cuts off a slow reader (slowloris client), the allow-list (``FORBIDDEN``), and on the
client side that a trickling server (slowloris server) costs :func:`fetch` no more than its timeout. The
admission logic is also checked without a network, on a fake clock. Every daemon is shut down in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

hivemind_p2p = pytest.importorskip("hivemind.p2p")
P2P = hivemind_p2p.P2P

from p2p_pair import p2p_pair, run_with_pair  # noqa: E402 - sibling helper module
from p2p_guard.identity import Identity  # noqa: E402 - after the importorskip
from p2p_guard.swarm.transport import (  # noqa: E402
    BUSY,
    CHUNK_BYTES,
    FORBIDDEN,
    NOT_READY,
    OK,
    FetchResult,
    PayloadServer,
    fetch,
    handler_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

RUN = "transport-limits-test"
WAIT_S = 10.0
OTHER = Identity.from_seed(b"\x07" * 32).peer_id_b58


async def wait_until(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Poll ``condition`` every 20 ms; fail the test if it is still false after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def stalled_streams(client: Any, server: Any, count: int) -> AsyncIterator[None]:
    """Open ``count`` streams to the server's handler that never send a request; close them on exit."""
    writers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(count):
            _, _, writer = await asyncio.wait_for(
                client.call_binary_stream_handler(server.peer_id, handler_name(RUN)), WAIT_S)
            writers.append(writer)
        yield
    finally:
        for writer in writers:
            writer.close()


def request_bytes(round_: int) -> bytes:
    import msgpack

    body = msgpack.packb(["payload", round_], use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("which", ["per_peer", "global"])
def test_stream_caps(which: str) -> None:
    """N stalled streams hold the slots: stream N+1 gets BUSY at once; once they close, fetch works again."""
    cap = 2
    limits = {"max_inbound_streams_per_peer": cap} if which == "per_peer" else \
        {"max_inbound_streams": cap, "max_inbound_streams_per_peer": 10}

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN, **limits)
        await served.attach(server)
        async with stalled_streams(client, server, cap):
            await wait_until(lambda: served.open_streams == cap)
            started = time.monotonic()
            extra = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=8, timeout_s=10)
            assert extra == FetchResult(BUSY)
            assert time.monotonic() - started < 2.0  # refused at once, not after the stalled ones time out
        counter = served.stats.busy_streams if which == "per_peer" else served.stats.busy_global
        assert counter == 1
        await wait_until(lambda: served.open_streams == 0)
        again = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=8, timeout_s=10)
        assert again == FetchResult(NOT_READY)
        assert served._open_by_peer == {}  # the per-peer table holds only peers with open streams

    run_with_pair(scenario)


def test_request_rate_limit(caplog: pytest.LogCaptureFixture) -> None:
    """A burst of requests past the token bucket gets BUSY; the refusals are logged at WARNING only once."""
    burst, attempts = 3, 10

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN, max_requests_per_peer_per_s=1.0, request_burst=burst)
        await served.attach(server)
        started = time.monotonic()
        statuses = [
            (await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=8, timeout_s=10)).status
            for _ in range(attempts)
        ]
        elapsed = time.monotonic() - started
        refills = int(elapsed * 1.0) + 1
        assert set(statuses) <= {NOT_READY, BUSY}
        assert burst <= statuses.count(NOT_READY) <= burst + refills
        assert statuses[:burst] == [NOT_READY] * burst
        assert statuses.count(BUSY) == served.stats.busy_rate >= 1
        await asyncio.sleep(1.1)  # one token back
        after = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=8, timeout_s=10)
        assert after.status == NOT_READY

    with caplog.at_level(logging.DEBUG, logger="p2p_guard.swarm.transport"):
        run_with_pair(scenario)
    refusals = [r for r in caplog.records
                if r.name == "p2p_guard.swarm.transport" and "refused" in r.getMessage()]
    assert [r.levelno for r in refusals].count(logging.WARNING) == 1
    assert len(refusals) >= 2


def test_slow_reader_is_cut_off_by_the_server() -> None:
    """A client that reads the status byte and then nothing holds the stream for the serve limit only."""
    payload = os.urandom(32 * CHUNK_BYTES)  # far more than the daemons' and sockets' buffers
    serve_timeout_s = 1.0

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN, serve_timeout_s=serve_timeout_s, min_serve_bytes_per_s=1 << 40)
        assert served.serve_limit_s(len(payload)) == serve_timeout_s
        await served.attach(server)
        served.reveal(0, payload)
        _, reader, writer = await client.call_binary_stream_handler(server.peer_id, handler_name(RUN))
        try:
            writer.write(request_bytes(0))
            await writer.drain()
            assert await asyncio.wait_for(reader.readexactly(1), WAIT_S) == bytes([OK])
            started = time.monotonic()
            await wait_until(lambda: served.stats.serve_timeouts == 1, serve_timeout_s + 5.0)
            assert time.monotonic() - started < serve_timeout_s + 3.0
            await wait_until(lambda: served.open_streams == 0, 2.0)
            assert served.bytes_sent < len(payload)
            # What the client can still read is what was in flight: the stream ends, far short of the payload.
            received = 0
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while chunk := await asyncio.wait_for(reader.read(CHUNK_BYTES), WAIT_S):
                    received += len(chunk)
            assert received < len(payload)
        finally:
            writer.close()

    run_with_pair(scenario)


def test_serve_limit_grows_with_size() -> None:
    served = PayloadServer(RUN, serve_timeout_s=10.0, min_serve_bytes_per_s=1 << 20)
    assert served.serve_limit_s(0) == 10.0
    assert served.serve_limit_s(5 << 20) == 10.0
    assert served.serve_limit_s(64 << 20) == 64.0


def test_fast_reader_of_a_big_payload_is_not_cut() -> None:
    """The serve limit leaves an honest reader alone: 16 MiB with a 1 s floor at 1 MiB/s (a 16 s limit)."""
    payload = os.urandom(16 * CHUNK_BYTES)

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN, serve_timeout_s=1.0, min_serve_bytes_per_s=1 << 20)
        await served.attach(server)
        served.reveal(0, payload)
        result = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=len(payload),
                             timeout_s=20)
        assert result.status == OK, result.detail
        assert result.data == payload
        assert served.stats.serve_timeouts == 0

    run_with_pair(scenario)


def test_trickling_server_is_cut_off_by_fetch_timeout() -> None:
    """A slowloris server (OK, then one byte every 50 ms): fetch gives status -1 within its timeout."""
    timeout_s = 1.5

    async def trickle(info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        deadline = time.monotonic() + 30.0
        try:
            await reader.readexactly(4)
            writer.write(bytes([OK]))
            while time.monotonic() < deadline:  # bounded so that a test failure never leaves it running
                writer.write(b"\x01")
                await writer.drain()
                await asyncio.sleep(0.05)
        except Exception:  # noqa: BLE001, S110 - the reader hung up: that is the point
            pass
        finally:
            writer.close()

    async def scenario(server: Any, client: Any) -> None:
        await server.add_binary_stream_handler(handler_name(RUN), trickle)
        started = time.monotonic()
        result = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=CHUNK_BYTES,
                             timeout_s=timeout_s)
        elapsed = time.monotonic() - started
        assert result.status == -1
        assert result.data is None
        assert "within" in result.detail
        assert timeout_s - 0.1 <= elapsed < timeout_s + 2.0

    run_with_pair(scenario)


def test_allow_list_refuses_others() -> None:
    """A caller outside the allow-list gets FORBIDDEN, even for a revealed payload; one on it is served."""
    async def scenario(server: Any, client: Any) -> None:
        closed = PayloadServer(RUN, allowed=frozenset({OTHER}))
        await closed.attach(server)
        closed.reveal(0, b"secret")
        refused = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=6, timeout_s=10)
        assert refused == FetchResult(FORBIDDEN)
        assert closed.stats.forbidden == 1
        assert closed.bytes_sent == 0

        await server.remove_binary_stream_handler(handler_name(RUN))
        admitted = PayloadServer(RUN, allowed=frozenset({OTHER, client.peer_id.to_base58()}))
        await admitted.attach(server)
        admitted.reveal(0, b"secret")
        served = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=6, timeout_s=10)
        assert served == FetchResult(OK, b"secret")

    run_with_pair(scenario)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestAdmission:
    """The admission rules of :meth:`PayloadServer.admit`, without a network, on a fake clock."""

    def test_token_bucket_known_answer(self) -> None:
        clock = FakeClock()
        served = PayloadServer(RUN, max_requests_per_peer_per_s=2.0, request_burst=3,
                               max_inbound_streams_per_peer=100, clock=clock)
        outcomes = []
        for _ in range(4):
            outcomes.append(served.admit("A"))
            if outcomes[-1] is None:
                served.release("A")
        assert outcomes == [None, None, None, BUSY]
        assert served.admit("B") is None  # another caller has its own bucket
        served.release("B")
        clock.now += 0.5  # 2/s × 0.5 s = one token
        assert served.admit("A") is None
        served.release("A")
        assert served.admit("A") == BUSY
        clock.now += 100.0  # refill is capped at the burst
        results = [served.admit("A") for _ in range(4)]
        assert results == [None, None, None, BUSY]
        assert served.stats.busy_rate == 3

    def test_order_of_the_rules(self) -> None:
        served = PayloadServer(RUN, max_inbound_streams=3, max_inbound_streams_per_peer=2,
                               allowed=frozenset({"A", "B"}), clock=FakeClock())
        assert served.admit("C") == FORBIDDEN
        assert served.admit(None) == FORBIDDEN
        assert served.admit("A") is None
        assert served.admit("A") is None
        assert served.admit("A") == BUSY  # per peer
        assert served.admit("B") is None
        assert served.admit("B") == BUSY  # global
        assert (served.stats.busy_streams, served.stats.busy_global, served.stats.forbidden) == (1, 1, 2)
        for peer in ("A", "A", "B"):
            served.release(peer)
        assert served.open_streams == 0
        assert served._open_by_peer == {}

    def test_per_peer_tables_are_bounded(self) -> None:
        served = PayloadServer(RUN, max_tracked_peers=16, clock=FakeClock())
        for i in range(1000):
            peer = f"peer{i}"
            assert served.admit(peer) is None
            served.release(peer)
            served._note(peer, "test")
        assert len(served._buckets) == 16
        assert len(served._warned) == 16
        assert served._open_by_peer == {}

    @pytest.mark.parametrize(("name", "value"), [
        ("max_inbound_streams", 0), ("max_inbound_streams_per_peer", -1),
        ("max_requests_per_peer_per_s", 0.0),
        ("request_burst", 0), ("serve_timeout_s", float("inf")), ("serve_timeout_s", float("nan")),
        ("min_serve_bytes_per_s", 0), ("max_tracked_peers", 0), ("request_burst", True),
        ("serve_timeout_s", "10"),
    ])
    def test_constructor_rejects(self, name: str, value: Any) -> None:
        with pytest.raises(ValueError, match=name):
            PayloadServer(RUN, **{name: value})

    def test_constructor_rejects_a_non_frozenset_allow_list(self) -> None:
        with pytest.raises(ValueError, match="allowed"):
            PayloadServer(RUN, allowed={"A"})  # type: ignore[arg-type]
