"""Integration: the payload/state stream handler (``swarm/transport.py``) between two real p2pd daemons.

Two hivemind ``P2P`` instances on 127.0.0.1 (port 0, no NAT port mapping): one serves, the other fetches.
Checks commit-before-reveal (``NOT_READY`` until :meth:`PayloadServer.reveal`), exact bytes after it,
``NOT_FOUND`` / ``BAD_REQUEST``, the bounded read (never more than ``max_bytes + 1`` bytes, however much the
server streams) and the time bound (a silent server gives status -1 within the timeout). Every daemon is shut
down in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgpack
import pytest

hivemind_p2p = pytest.importorskip("hivemind.p2p")
P2P = hivemind_p2p.P2P

from p2p_pair import p2p_pair, run_with_pair  # noqa: E402 - sibling helper module
from p2p_guard.protocol import ChunkVerifier, payload_digest  # noqa: E402
from p2p_guard.protocol.chunks import CHUNK_DIGEST_BYTES  # noqa: E402
from p2p_guard.swarm.transport import (  # noqa: E402 - after the importorskip
    BAD_REQUEST,
    CHUNK_BYTES,
    MAX_KEPT_MIXED_ROUNDS,
    MAX_KEPT_ROUNDS,
    MAX_REQUEST_BYTES,
    NOT_FOUND,
    NOT_READY,
    OK,
    FetchResult,
    PayloadServer,
    fetch,
    fetch_payload,
    handler_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RUN = "transport-test"


def verifier_for(payload: bytes) -> ChunkVerifier:
    """What a receiver builds from the sender's envelope: the committed root and the declared size."""
    return ChunkVerifier(payload_digest(payload), len(payload))


async def raw_exchange(client: Any, server: Any, request_bytes: bytes, timeout_s: float = 10.0) -> bytes:
    """Send raw bytes to the server's handler and return everything it answers until it closes."""
    async def exchange() -> bytes:
        _, reader, writer = await client.call_binary_stream_handler(server.peer_id, handler_name(RUN))
        try:
            writer.write(request_bytes)
            await writer.drain()
            return await reader.read(64)
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), timeout_s)


def test_commit_before_reveal_then_exact_bytes() -> None:
    payload = os.urandom(3 * CHUNK_BYTES + 12345)  # several chunks, not a multiple of the chunk size

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)

        before = await fetch_payload(client, server.peer_id, RUN, 4, verifier_for(payload), timeout_s=10)
        assert before == FetchResult(NOT_READY)

        served.reveal(4, payload)
        after = await fetch_payload(client, server.peer_id, RUN, 4, verifier_for(payload), timeout_s=20)
        assert after.status == OK, after.detail
        assert after.data == payload
        assert served.bytes_sent == 4 * CHUNK_DIGEST_BYTES + len(payload)  # 4 chunk digests, then the payload

        other_round = await fetch_payload(client, server.peer_id, RUN, 5, verifier_for(b"x"), timeout_s=10)
        assert other_round.status == NOT_READY

    run_with_pair(scenario)


def test_states_and_unknown_hash() -> None:
    state = os.urandom(4096)
    known, unknown = b"\x11" * 32, b"\x22" * 32

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        missing = await fetch(client, server.peer_id, RUN, ["state", unknown], max_bytes=len(state),
                              timeout_s=10)
        assert missing == FetchResult(NOT_FOUND)

        served.publish_state(known, state)
        found = await fetch(client, server.peer_id, RUN, ["state", known], max_bytes=len(state), timeout_s=10)
        assert found == FetchResult(OK, state)
        still_missing = await fetch(client, server.peer_id, RUN, ["state", unknown], max_bytes=len(state),
                                    timeout_s=10)
        assert still_missing.status == NOT_FOUND

    run_with_pair(scenario)


@pytest.mark.parametrize("kind", ["theta", "momentum"])
def test_theta_and_momentum_by_round_and_latest(kind: str) -> None:
    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        publish = served.publish_theta if kind == "theta" else served.publish_momentum
        assert await fetch(client, server.peer_id, RUN, [kind, -1], max_bytes=8, timeout_s=10) == \
            FetchResult(NOT_FOUND)
        for round_ in range(MAX_KEPT_ROUNDS + 1):
            publish(round_, bytes([round_ + 1]) * 8)
        other = served.publish_momentum if kind == "theta" else served.publish_theta
        other(9, b"\xff" * 8)  # the other kind's rounds are a table of their own
        latest = await fetch(client, server.peer_id, RUN, [kind, -1], max_bytes=8, timeout_s=10)
        assert latest == FetchResult(OK, bytes([MAX_KEPT_ROUNDS + 1]) * 8)
        one = await fetch(client, server.peer_id, RUN, [kind, 1], max_bytes=8, timeout_s=10)
        assert one == FetchResult(OK, bytes([2]) * 8)
        evicted = await fetch(client, server.peer_id, RUN, [kind, 0], max_bytes=8, timeout_s=10)
        assert evicted == FetchResult(NOT_FOUND)

    run_with_pair(scenario)


def test_mixed_states_by_round_and_step() -> None:
    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        assert await fetch(client, server.peer_id, RUN, ["mixed", [1, 1]], max_bytes=8, timeout_s=10) == \
            FetchResult(NOT_FOUND)
        for round_ in range(MAX_KEPT_MIXED_ROUNDS + 1):
            for step in (1, 2):
                served.publish_mixed(round_, step, bytes([10 * round_ + step]) * 8)
        served.publish_theta(1, b"\xff" * 8)  # θ before mixing is a table of its own
        for round_, step in ((1, 1), (1, 2), (MAX_KEPT_MIXED_ROUNDS, 2)):
            got = await fetch(client, server.peer_id, RUN, ["mixed", [round_, step]], max_bytes=8, timeout_s=10)
            assert got == FetchResult(OK, bytes([10 * round_ + step]) * 8), (round_, step)
        for key in ([0, 1], [1, 3], [-1, 1]):  # evicted, a step not served, no "latest" for mixed states
            got = await fetch(client, server.peer_id, RUN, ["mixed", key], max_bytes=8, timeout_s=10)
            assert got == FetchResult(NOT_FOUND), key

    run_with_pair(scenario)


def test_the_last_mixed_state_answers_every_later_step() -> None:
    """A peer that runs more gossip steps than we did gets our final state for the steps we never ran."""
    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        served.publish_mixed(5, 1, b"\x01" * 8)
        before_last = await fetch(client, server.peer_id, RUN, ["mixed", [5, 3]], max_bytes=8, timeout_s=10)
        assert before_last == FetchResult(NOT_FOUND)  # our mixing may still be running: ask again
        served.publish_mixed(5, 2, b"\x02" * 8, last=True)
        for step, byte in ((1, 1), (2, 2), (3, 2), (7, 2)):
            got = await fetch(client, server.peer_id, RUN, ["mixed", [5, step]], max_bytes=8, timeout_s=10)
            assert got == FetchResult(OK, bytes([byte]) * 8), step
        for key in ([5, 0], [5, -1], [4, 3]):  # no step 0 or "last" by its key; another round has none
            got = await fetch(client, server.peer_id, RUN, ["mixed", key], max_bytes=8, timeout_s=10)
            assert got == FetchResult(NOT_FOUND), key

    run_with_pair(scenario)


def test_only_recent_rounds_are_kept() -> None:
    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        rounds = list(range(MAX_KEPT_ROUNDS + 2))
        for round_ in rounds:
            served.reveal(round_, bytes([round_]) * 8)
        for round_ in rounds:
            result = await fetch_payload(client, server.peer_id, RUN, round_, verifier_for(bytes([round_]) * 8),
                                         timeout_s=10)
            if round_ < len(rounds) - MAX_KEPT_ROUNDS:  # dropped for good: the fetcher stops at once
                assert result.status == NOT_FOUND, round_
            else:
                assert result == FetchResult(OK, bytes([round_]) * 8), round_

    run_with_pair(scenario)


@pytest.mark.parametrize("request_", [
    ["payload", "4"], ["payload", True], ["payload", 1.5], ["payload", None],
    ["state", 7], ["state", "hash"], ["bogus", 1], ["payload"], [], "payload",
    ["payload", 1, 2],  # resume from chunk 2 of a 1-chunk payload: past its end
    ["payload", 1, -1], ["payload", 1, True], ["payload", 1, "0"], ["payload", "1", 0],
    ["payload", 1, 0, 0],  # four items: over the request parser's array limit
    ["mixed", 3], ["mixed", [1]], ["mixed", [1, True]], ["mixed", [1, "2"]], ["mixed", [1, 2, 3]],
])
def test_bad_request_through_fetch(request_: Any) -> None:
    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        served.reveal(1, b"x" * 8)
        result = await fetch(client, server.peer_id, RUN, request_, max_bytes=8, timeout_s=10)
        assert result == FetchResult(BAD_REQUEST)

    run_with_pair(scenario)


def test_bad_request_raw_bytes() -> None:
    garbage = b"\xc1\xc1\xc1"  # 0xc1 is never used in msgpack
    long_body = msgpack.packb(["state", b"\x00" * 65], use_bin_type=True)  # bin over the 64-byte limit

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        cases = {
            "garbage body": len(garbage).to_bytes(4, "big") + garbage,
            "declared length over the limit": (MAX_REQUEST_BYTES + 1).to_bytes(4, "big"),
            "huge declared length": (2**32 - 1).to_bytes(4, "big"),
            "bin over the limit": len(long_body).to_bytes(4, "big") + long_body,
            "map instead of array": (lambda b: len(b).to_bytes(4, "big") + b)(msgpack.packb({"a": 1})),
        }
        for name, request_bytes in cases.items():
            answer = await raw_exchange(client, server, request_bytes)
            assert answer == bytes([BAD_REQUEST]), name

    run_with_pair(scenario)


def test_bounded_read_of_a_large_state() -> None:
    """The server streams all 5 MiB; the reader keeps max_bytes + 1 and stops."""
    payload = os.urandom(5 * CHUNK_BYTES)

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        served.publish_state(bytes(32), payload)
        for max_bytes in (0, 1000, CHUNK_BYTES - 1, CHUNK_BYTES, 2 * CHUNK_BYTES + 3):
            result = await fetch(client, server.peer_id, RUN, ["state", bytes(32)], max_bytes=max_bytes,
                                 timeout_s=20)
            assert result.status == OK, result.detail
            assert result.data == payload[:max_bytes + 1], max_bytes

    run_with_pair(scenario)


def test_bounded_read_of_an_endless_stream() -> None:
    """A hostile server that never stops writing: fetch returns exactly max_bytes + 1 bytes, in time."""
    max_bytes = 3 * CHUNK_BYTES + 7
    chunk = b"\xab" * (64 * 1024)

    async def endless(info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        deadline = time.monotonic() + 30.0
        try:
            await reader.readexactly(4)
            writer.write(bytes([OK]))
            while time.monotonic() < deadline:  # bounded so that a test failure never leaves it spinning
                writer.write(chunk)
                await writer.drain()
        except Exception:  # noqa: BLE001, S110 - the reader hung up: that is the point
            pass
        finally:
            writer.close()

    async def scenario(server: Any, client: Any) -> None:
        await server.add_binary_stream_handler(handler_name(RUN), endless)
        started = time.monotonic()
        result = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=max_bytes, timeout_s=20)
        assert result.status == OK, result.detail
        assert result.data is not None
        assert len(result.data) == max_bytes + 1
        assert set(result.data) == {0xAB}
        assert time.monotonic() - started < 20

    run_with_pair(scenario)


def test_silent_server_times_out() -> None:
    """A server that accepts the stream and never answers: status -1 within the timeout, not a hang."""
    timeout_s = 1.5
    release = asyncio.Event()

    async def silent(info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(release.wait(), 30.0)
        except Exception:  # noqa: BLE001, S110 - cancelled or timed out: just close
            pass
        finally:
            writer.close()

    async def scenario(server: Any, client: Any) -> None:
        await server.add_binary_stream_handler(handler_name(RUN), silent)
        try:
            started = time.monotonic()
            result = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=100,
                                 timeout_s=timeout_s)
            elapsed = time.monotonic() - started
            assert result.status == -1
            assert result.data is None
            assert "within" in result.detail
            assert timeout_s - 0.1 <= elapsed < timeout_s + 2.0
        finally:
            release.set()

    run_with_pair(scenario)


def test_server_that_closes_after_ok_is_a_transport_failure() -> None:
    """A short answer is a broken stream (status -1, retried by the caller), never evidence against the sender."""
    async def short(info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readexactly(4)
            writer.write(bytes([OK]) + b"abc")
            await writer.drain()
        finally:
            writer.close()

    async def scenario(server: Any, client: Any) -> None:
        await server.add_binary_stream_handler(handler_name(RUN), short)
        result = await fetch(client, server.peer_id, RUN, ["payload", 0], max_bytes=100, timeout_s=10)
        assert result == FetchResult(-1, detail="stream ended after 3 of 100 bytes")

    run_with_pair(scenario)


def test_no_handler_for_this_run() -> None:
    """Asking for another run's handler fails fast with status -1 (the daemon refuses the protocol)."""
    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        served.reveal(0, b"x")
        started = time.monotonic()
        result = await fetch(client, server.peer_id, "another-run", ["payload", 0], max_bytes=1, timeout_s=10)
        assert result.status == -1
        assert result.detail
        assert time.monotonic() - started < 10

    run_with_pair(scenario)
