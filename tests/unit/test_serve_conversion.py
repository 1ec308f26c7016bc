"""Unit tests: a state asked for in float16 or int8 is converted off the event loop, once per state.

The conversion of d float32 values ran inside the stream handler, in the event loop: at d = 25M on a loaded
2-core machine it held a peer's loop for up to 5.4 s (asyncio debug mode, stop 35), and every stream that peer was
serving stalled meanwhile, so its readers cut it as too slow. It now runs in a worker thread, and concurrent
requests for the same state share one conversion.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from p2p_guard.swarm import transport
from p2p_guard.swarm.transport import HALF, INT8, NOT_FOUND, OK, PayloadServer

THETA = np.arange(-8, 8, dtype="<f4") / 4


def _server() -> PayloadServer:
    server = PayloadServer("run")
    server.publish_theta(1, THETA.tobytes())
    return server


def test_a_half_state_is_converted_in_a_worker_thread_while_the_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = transport._to_half

    def slow(data: bytes | memoryview) -> bytes:
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return real(data)

    monkeypatch.setattr(transport, "_to_half", slow)

    async def go() -> tuple[tuple[int, tuple[bytes | memoryview, ...] | None], int]:
        ticks = 0
        server = _server()
        task = asyncio.ensure_future(server._converted(*server._resolve(["theta", 1, HALF])))
        while not task.done():
            ticks += 1
            await asyncio.sleep(0.01)
        return task.result(), ticks

    (status, data), ticks = asyncio.run(go())
    assert status == OK and data is not None
    assert bytes(data[0]) == THETA.astype("<f2").tobytes()
    assert threads and threads[0] != threading.main_thread().name
    assert ticks >= 10  # the loop ran on during the 0.3 s conversion


def test_concurrent_requests_for_one_state_share_one_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = transport._to_int8

    def counted(data: bytes | memoryview) -> bytes:
        calls.append(1)
        time.sleep(0.1)
        return real(data)

    monkeypatch.setattr(transport, "_to_int8", counted)

    async def go() -> list[tuple[int, tuple[bytes | memoryview, ...] | None]]:
        server = _server()
        first = await asyncio.gather(*(server._converted(*server._resolve(["theta", 1, INT8])) for _ in range(4)))
        again = await server._converted(*server._resolve(["theta", 1, INT8]))  # cached: no new conversion
        return [*first, again]

    answers = asyncio.run(go())
    assert len(calls) == 1
    assert len({bytes(data[0]) for _, data in answers if data is not None}) == 1
    assert all(status == OK for status, _ in answers)


def test_answers_without_a_conversion_are_unchanged() -> None:
    async def go() -> list[tuple[int, tuple[bytes | memoryview, ...] | None]]:
        server = _server()
        return [await server._converted(*server._resolve(request))
                for request in (["theta", 1], ["theta", 2, HALF], ["momentum", 1, INT8])]

    (status, data), missing, no_momentum = asyncio.run(go())
    assert status == OK and data is not None and bytes(data[0]) == THETA.tobytes()
    assert missing == (NOT_FOUND, None)
    assert no_momentum == (NOT_FOUND, None)


def test_a_payload_revealed_with_its_digests_serves_them_and_without_computes_the_same() -> None:
    """``reveal_after_close`` hashes the payload's chunks in a worker thread and hands the digests to ``reveal``."""
    from p2p_guard.protocol.chunks import PAYLOAD_CHUNK_BYTES, chunk_digests

    payload = bytes(range(256)) * (PAYLOAD_CHUNK_BYTES // 128)  # two chunks
    given, computed = PayloadServer("run"), PayloadServer("run")
    given.reveal(0, payload, digests=chunk_digests(payload))
    computed.reveal(0, payload)
    status, parts = given._answer(["payload", 0])
    assert status == OK and parts is not None
    assert bytes(parts[0]) == chunk_digests(payload) and len(parts[0]) == 64
    assert computed._answer(["payload", 0]) == (status, parts)
