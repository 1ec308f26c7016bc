"""Payload and state transfer over hivemind P2P binary streams, with every read bounded.

One stream handler per run, ``p2p_guard.v1.<run_id>.fetch``. A request is a 4-byte big-endian length and a
msgpack array: ``["payload", round]`` (the sender's pseudo-gradient of that round, served only after its
commit phase closed: commit before reveal) or ``["state", hash]`` (the model state with that 32-byte hash).
The answer is one status byte (:data:`OK`, :data:`NOT_READY`, :data:`NOT_FOUND`, :data:`BAD_REQUEST`) and,
after ``OK``, the raw bytes until the stream closes. The reader knows from the signed envelope how many
bytes to expect and stops at the first byte past that size.

``StreamInfo.peer_id`` is the caller as authenticated by libp2p; it is logged, never taken from the request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import msgpack
from hivemind.p2p import P2P, PeerID

__all__ = ["BAD_REQUEST", "NOT_FOUND", "NOT_READY", "OK", "FetchResult", "PayloadServer", "fetch"]

logger = logging.getLogger(__name__)

OK, NOT_READY, NOT_FOUND, BAD_REQUEST = 0, 1, 2, 3
MAX_REQUEST_BYTES = 256
CHUNK_BYTES = 1 << 20
REQUEST_READ_TIMEOUT_S = 10.0
MAX_KEPT_ROUNDS = 3


def handler_name(run_id: str) -> str:
    """The libp2p protocol name of a run's fetch handler."""
    return f"p2p_guard.v1.{run_id}.fetch"


class PayloadServer:
    """Serves this peer's revealed payloads and recent model states to other peers.

    Payloads are added with :meth:`reveal` only once the commit phase of their round has closed for this
    peer. Only the last :data:`MAX_KEPT_ROUNDS` rounds are kept, so memory is bounded.
    """

    def __init__(self, run_id: str) -> None:
        """Create an empty server for ``run_id``; call :meth:`attach` to start serving."""
        self.run_id = run_id
        self._payloads: dict[int, bytes] = {}
        self._states: dict[bytes, bytes] = {}
        self.bytes_sent = 0

    async def attach(self, p2p: P2P) -> None:
        """Register the stream handler on ``p2p`` (a replica of the DHT's daemon)."""
        await p2p.add_binary_stream_handler(handler_name(self.run_id), self._handle)

    def reveal(self, round_: int, payload: bytes) -> None:
        """Start serving ``payload`` as this peer's update of ``round_``."""
        self._payloads[round_] = payload
        for old in sorted(self._payloads)[:-MAX_KEPT_ROUNDS]:
            del self._payloads[old]

    def publish_state(self, state_hash: bytes, state: bytes) -> None:
        """Serve ``state`` (raw fp32 bytes of θ and the outer momentum) under its hash."""
        self._states[state_hash] = state
        for old in list(self._states)[:-MAX_KEPT_ROUNDS]:
            del self._states[old]

    async def _handle(self, info: object, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(_read_request(reader), REQUEST_READ_TIMEOUT_S)
            status, data = self._answer(request)
            writer.write(bytes([status]))
            if data is not None:
                await self._stream(data, writer)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
            logger.debug("fetch from %s ended early: %s", getattr(info, "peer_id", "?"), type(e).__name__)
        finally:
            writer.close()

    def _answer(self, request: object) -> tuple[int, bytes | None]:
        if not (isinstance(request, list) and len(request) == 2):
            return BAD_REQUEST, None
        kind, key = request
        if kind == "payload" and isinstance(key, int) and not isinstance(key, bool):
            data = self._payloads.get(key)
        elif kind == "state" and isinstance(key, bytes):
            data = self._states.get(key)
        else:
            return BAD_REQUEST, None
        if data is None:
            return (NOT_READY if kind == "payload" else NOT_FOUND), None
        return OK, data

    async def _stream(self, data: bytes, writer: asyncio.StreamWriter) -> None:
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_BYTES):
            writer.write(view[start:start + CHUNK_BYTES])
            await writer.drain()
            self.bytes_sent += min(CHUNK_BYTES, len(view) - start)


async def _read_request(reader: asyncio.StreamReader) -> object:
    header = await reader.readexactly(4)
    length = int.from_bytes(header, "big")
    if length > MAX_REQUEST_BYTES:
        return None
    body = await reader.readexactly(length)
    try:
        return msgpack.unpackb(body, raw=False, max_bin_len=64, max_str_len=16, max_array_len=2,
                               max_map_len=0, max_ext_len=0)
    except Exception:  # noqa: BLE001 - a malformed request gets BAD_REQUEST
        return None


@dataclass(frozen=True)
class FetchResult:
    """What came back from a fetch.

    Attributes:
        status: :data:`OK`, :data:`NOT_READY`, :data:`NOT_FOUND`, :data:`BAD_REQUEST`, or -1 when the stream
            failed (peer unreachable, closed early, timed out).
        data: the bytes read after ``OK`` (at most ``max_bytes + 1``), else None.
        detail: a short human-readable description of a failure.
    """

    status: int
    data: bytes | None = None
    detail: str = ""


async def fetch(p2p: P2P, peer: PeerID, run_id: str, request: list[object], *, max_bytes: int,
                timeout_s: float) -> FetchResult:
    """Ask ``peer`` for a payload or a state and read at most ``max_bytes + 1`` bytes of the answer.

    Reading stops at the first byte past ``max_bytes``: the caller sees ``len(data) > max_bytes`` and rejects
    the answer as oversized without ever buffering more.

    Args:
        p2p: our P2P replica.
        peer: the sender's PeerID.
        run_id: run name (selects the handler).
        request: ``["payload", round]`` or ``["state", hash]``.
        max_bytes: the size the signed envelope (or the state hash's model) implies, in bytes.
        timeout_s: limit for the whole exchange, in seconds.

    Returns:
        A :class:`FetchResult`; never raises on network failure.
    """
    try:
        return await asyncio.wait_for(_fetch(p2p, peer, run_id, request, max_bytes), timeout_s)
    except asyncio.TimeoutError:
        return FetchResult(-1, detail=f"no complete answer within {timeout_s:.1f} s")
    except Exception as e:  # noqa: BLE001 - any transport failure is reported, not raised
        return FetchResult(-1, detail=f"{type(e).__name__}: {e}"[:200])


async def _fetch(p2p: P2P, peer: PeerID, run_id: str, request: list[object], max_bytes: int) -> FetchResult:
    _, reader, writer = await p2p.call_binary_stream_handler(peer, handler_name(run_id))
    try:
        body = msgpack.packb(request, use_bin_type=True)
        writer.write(len(body).to_bytes(4, "big") + body)
        await writer.drain()
        status = await reader.readexactly(1)
        if status[0] != OK:
            return FetchResult(status[0])
        chunks: list[bytes] = []
        received = 0
        while received <= max_bytes:
            chunk = await reader.read(min(CHUNK_BYTES, max_bytes + 1 - received))
            if not chunk:
                break
            chunks.append(chunk)
            received += len(chunk)
        return FetchResult(OK, b"".join(chunks))
    finally:
        writer.close()
