"""Integration: payloads streamed and checked chunk by chunk (``transport.fetch_payload``) between two p2pd daemons.

Hostile handlers on the server side (a bad chunk, a foreign digest list, bytes past the declared size, a stream
broken mid-payload) and an honest :class:`PayloadServer` serving large payloads. Checks: the reader cuts a sender
at its first bad chunk with ``DIGEST_MISMATCH`` naming it, a resumed request asks for the first unverified chunk
and completes the payload, and the Python memory a fetch allocates (tracemalloc) stays near the payload's size,
where the whole-answer read (``transport.fetch``) of the same bytes holds about twice that. Every daemon is shut
down in ``finally`` (``p2p_pair``).
"""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest

hivemind_p2p = pytest.importorskip("hivemind.p2p")

from p2p_pair import run_with_pair  # noqa: E402 - sibling helper module
from p2p_guard.protocol import PAYLOAD_CHUNK_BYTES, ChunkVerifier, RejectReason, payload_digest  # noqa: E402
from p2p_guard.protocol.chunks import chunk_digests  # noqa: E402
from p2p_guard.protocol.quantized import int8_payload_bytes  # noqa: E402
from p2p_guard.swarm.transport import (  # noqa: E402
    BAD_DATA,
    OK,
    FetchResult,
    PayloadServer,
    fetch,
    fetch_payload,
    handler_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RUN = "transport-stream-test"
C = PAYLOAD_CHUNK_BYTES
Handler = Callable[[Any, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def verifier_for(payload: bytes) -> ChunkVerifier:
    return ChunkVerifier(payload_digest(payload), len(payload))


def scripted(answer: Callable[[list[Any]], bytes], requests: list[list[Any]], *, close: bool = True) -> Handler:
    """A handler that records each request and writes ``answer(request)`` (status byte included), then closes."""
    async def handle(info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            length = int.from_bytes(await reader.readexactly(4), "big")
            request = msgpack.unpackb(await reader.readexactly(length), raw=False)
            requests.append(request)
            data = answer(request)
            for start in range(0, len(data), C):
                writer.write(data[start:start + C])
                await writer.drain()
            if not close:
                await asyncio.sleep(30.0)
        except Exception:  # noqa: BLE001, S110 - the reader hung up: that is the point of several tests
            pass
        finally:
            writer.close()

    return handle


def serve(handler: Handler, scenario: Callable[[Any, Any], Awaitable[None]]) -> None:
    async def with_handler(server: Any, client: Any) -> None:
        await server.add_binary_stream_handler(handler_name(RUN), handler)
        await scenario(server, client)

    run_with_pair(with_handler)


def test_a_bad_chunk_cuts_the_sender_at_that_chunk() -> None:
    payload = os.urandom(4 * C)
    tampered = bytearray(payload)
    tampered[C + 17] ^= 0x40  # chunk 1
    requests: list[list[Any]] = []
    # an honest digest list, then the tampered payload, then more bytes than anyone should read
    handler = scripted(lambda _: bytes([OK]) + chunk_digests(payload) + bytes(tampered) + bytes(8 * C), requests)

    async def scenario(server: Any, client: Any) -> None:
        verifier = verifier_for(payload)
        result = await fetch_payload(client, server.peer_id, RUN, 0, verifier, timeout_s=30)
        assert result.status == BAD_DATA
        assert result.rejected is not None and result.rejected.reason is RejectReason.DIGEST_MISMATCH
        assert result.detail == f"chunk 1 of 4 (bytes {C}..{2 * C}) does not match its digest"
        assert result.data is None
        assert verifier.next_chunk == 1
        assert requests == [["payload", 0, 0]]

    serve(handler, scenario)


def test_a_foreign_digest_list_is_cut_before_any_payload_byte() -> None:
    payload, other = os.urandom(2 * C), os.urandom(2 * C)
    handler = scripted(lambda _: bytes([OK]) + chunk_digests(other) + other, [])

    async def scenario(server: Any, client: Any) -> None:
        verifier = verifier_for(payload)
        result = await fetch_payload(client, server.peer_id, RUN, 0, verifier, timeout_s=30)
        assert (result.status, result.detail) == (
            BAD_DATA, "the list of 2 chunk digests does not hash to the committed root")
        assert verifier.received == 0

    serve(handler, scenario)


def test_bytes_past_the_declared_size_are_oversize() -> None:
    payload = os.urandom(C + 5)
    handler = scripted(lambda _: bytes([OK]) + chunk_digests(payload) + payload + b"!", [])

    async def scenario(server: Any, client: Any) -> None:
        result = await fetch_payload(client, server.peer_id, RUN, 0, verifier_for(payload), timeout_s=30)
        assert result.status == BAD_DATA
        assert result.rejected is not None and result.rejected.reason is RejectReason.OVERSIZE
        assert result.detail == f"bytes past the declared {C + 5} bytes"

    serve(handler, scenario)


def test_a_complete_payload_held_open_is_accepted_after_the_short_wait() -> None:
    """All declared bytes, verified, then the sender keeps the stream open: accepted, not held for its timeout."""
    payload = os.urandom(C + 5)
    handler = scripted(lambda _: bytes([OK]) + chunk_digests(payload) + payload, [], close=False)

    async def scenario(server: Any, client: Any) -> None:
        started = time.monotonic()
        result = await fetch_payload(client, server.peer_id, RUN, 0, verifier_for(payload), timeout_s=30)
        assert result == FetchResult(OK, bytearray(payload))
        assert time.monotonic() - started < 10.0

    serve(handler, scenario)


def test_a_broken_stream_resumes_at_the_first_unverified_chunk() -> None:
    payload = os.urandom(4 * C + 123)
    digests = chunk_digests(payload)
    requests: list[list[Any]] = []

    def answer(request: list[Any]) -> bytes:
        first = request[2]
        body = payload[first * C:]
        if len(requests) == 1:  # the first answer breaks in the middle of chunk 2
            body = body[:2 * C + C // 2]
        return bytes([OK]) + digests + body

    async def scenario(server: Any, client: Any) -> None:
        verifier = verifier_for(payload)
        broken = await fetch_payload(client, server.peer_id, RUN, 7, verifier, timeout_s=30)
        assert broken == FetchResult(-1, detail=f"stream ended after {2 * C + C // 2} of {len(payload)} bytes")
        assert verifier.next_chunk == 2
        resumed = await fetch_payload(client, server.peer_id, RUN, 7, verifier, timeout_s=30)
        assert resumed.status == OK, resumed.detail
        assert resumed.data == payload
        assert requests == [["payload", 7, 0], ["payload", 7, 2]]

    serve(scripted(answer, requests), scenario)


def test_the_server_resumes_from_the_requested_chunk() -> None:
    payload = os.urandom(3 * C + 9)

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        served.reveal(2, payload)
        raw = await fetch(client, server.peer_id, RUN, ["payload", 2, 2], max_bytes=4 * 32 + C + 9, timeout_s=30)
        assert raw == FetchResult(OK, chunk_digests(payload) + payload[2 * C:])
        end = await fetch(client, server.peer_id, RUN, ["payload", 2, 4], max_bytes=4 * 32, timeout_s=30)
        assert end == FetchResult(OK, chunk_digests(payload))  # at n: the list and nothing more

    run_with_pair(scenario)


def peak_extra_bytes(fetching: Callable[[], Awaitable[FetchResult]]) -> Callable[[], Awaitable[tuple[FetchResult, int, float]]]:
    """Wrap a fetch: (its result, the peak Python memory it allocated above the start, in bytes, its seconds)."""
    async def measured() -> tuple[FetchResult, int, float]:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            started = time.monotonic()
            result = await fetching()
            took = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        return result, peak, took

    return measured


def stream_and_measure(size: int, *, compare_whole_read: bool) -> None:
    """Serve ``size`` random bytes from an honest server; fetch them chunk-checked and measure the peak memory."""
    payload = os.urandom(size)
    root = payload_digest(payload)

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN)
        await served.attach(server)
        served.reveal(0, payload)
        served.publish_state(bytes(32), payload)
        streamed, peak, took = await peak_extra_bytes(lambda: fetch_payload(
            client, server.peer_id, RUN, 0, ChunkVerifier(root, size), timeout_s=600))()
        assert streamed.status == OK, streamed.detail
        assert streamed.data is not None and len(streamed.data) == size
        assert payload_digest(streamed.data) == root
        print(f"\nstreamed {size:,} bytes in {took:.2f} s ({size / took / 2**20:.1f} MiB/s); "  # noqa: T201
              f"peak extra Python memory {peak:,} B = {peak / size:.3f} x the payload")
        assert size <= peak < 1.25 * size + 4 * C  # the one buffer, plus reads and the daemon client's pieces
        del streamed
        if compare_whole_read:  # the whole-answer read of the same bytes (states): one growing buffer too
            whole, whole_peak, _ = await peak_extra_bytes(lambda: fetch(
                client, server.peer_id, RUN, ["state", bytes(32)], max_bytes=size, timeout_s=600))()
            if whole.status == -1:  # a transport failure is retried once, as Peer._fetch_vector does: one CI run
                # on 2 loaded cores (stop 28, 1 in about 40 runs) got "stream ended after 30978304 of 33554432
                # bytes" here, the stream closed early under the reader; not reproduced since (docs/networking.md)
                whole, whole_peak, _ = await peak_extra_bytes(lambda: fetch(
                    client, server.peer_id, RUN, ["state", bytes(32)], max_bytes=size, timeout_s=600))()
            assert whole.status == OK and whole.data == payload
            print(f"whole-answer read of the same bytes: peak {whole_peak / size:.3f} x")  # noqa: T201
            # it held the pieces and their join (2.0 x and more) until fetch read into one bytearray (stop 34,
            # helper-72); measured 1.141 x in that stop's CI run
            assert size <= whole_peak < 1.5 * size + 4 * C

    run_with_pair(scenario)


def test_a_large_payload_streams_in_about_its_own_size_of_memory() -> None:
    stream_and_measure(32 * C, compare_whole_read=True)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_a_100m_parameter_int8_update_streams_in_about_its_own_size_of_memory() -> None:
    stream_and_measure(int8_payload_bytes(100_000_000), compare_whole_read=False)  # 100,390,628 bytes
