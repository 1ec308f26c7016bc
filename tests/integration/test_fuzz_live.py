"""Live fuzzing: a hostile client against a real ``PayloadServer``, and malformed commits through the round logic.

1. ``test_stream_handler_survives_hostile_requests``: two ``p2pd`` daemons on 127.0.0.1 (port 0, as in
   ``test_transport.py``); one serves a :class:`PayloadServer` (one revealed payload, one published state), the
   other is a hostile client that sends hypothesis-generated requests over the binary stream handler, several
   at once: random, zero and huge length headers (up to 2**32 − 1), headers that promise more or fewer bytes
   than follow, garbage msgpack, valid msgpack of the wrong types (maps, ext types, bools for rounds, ints for
   hashes, over-long strings and bins, 3-item arrays) and a few valid requests. Every complete request must get
   exactly one status byte with the meaning ``docs/protocol.md`` §6 gives it (an ``OK`` carries exactly the
   revealed bytes; one with bytes past its announced length may instead be reset, §6, in at most a tenth of cases), the handler must never raise (it is wrapped to record any exception, ``CancelledError``
   included), no handler may be left running, and afterwards a valid payload and state fetch must still work.
2. ``test_malformed_commits_get_one_reason_each``: pure (no network): hypothesis-generated commit values
   (byte mutations of an honest commit, re-signed envelopes with wrong fields, impersonation, unsigned, future
   version, garbage) with hostile served payloads go through ``swarm.rounds.open_commits`` and
   ``swarm.rounds.check_rows`` (the peer's own code path; payloads come from ``local_payloads``, so nothing is
   fetched), with a ``PeerConfig``. Each commit must end as exactly one row or one verdict with a
   :class:`RejectReason`, and only an honest, intact commit with its intact payload becomes a row.

Each test prints the number of generated inputs it ran and puts it in its assertion message.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from typing import Any

import msgpack
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

hivemind_p2p = pytest.importorskip("hivemind.p2p")
P2P = hivemind_p2p.P2P

from p2p_guard.guard.integrity import RoundExpectation  # noqa: E402 - after the importorskip
from p2p_guard.identity import Identity  # noqa: E402
from p2p_guard.protocol import (  # noqa: E402
    CODECS,
    ENVELOPE_SIGNING_CONTEXT,
    PROTOCOL_VERSION,
    Envelope,
    RejectReason,
    encode_update,
    pack_envelope,
    payload_cap_bytes,
    payload_digest,
    sign_envelope,
)
from p2p_guard.protocol.chunks import PAYLOAD_CHUNK_BYTES, chunk_digests  # noqa: E402
from p2p_guard.protocol.envelope import SUPPORTED_VERSIONS  # noqa: E402
from p2p_guard.swarm.config import PeerConfig  # noqa: E402
from p2p_guard.swarm.rounds import check_rows, open_commits  # noqa: E402
from p2p_guard.swarm.transport import (  # noqa: E402
    BAD_REQUEST,
    MAX_REQUEST_BYTES,
    NOT_FOUND,
    NOT_READY,
    OK,
    REQUEST_READ_TIMEOUT_S,
    PayloadServer,
    fetch,
    handler_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live, pytest.mark.timeout(300)]

RUN = "fuzz-live"
LOOPBACK = ["/ip4/127.0.0.1/tcp/0"]
START_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 15.0
REVEALED_ROUND = 5
PAYLOAD = bytes(range(256)) * 4
SERVED_DIGESTS = chunk_digests(PAYLOAD)  # what the server sends ahead of a payload (protocol version 3)
STATE_HASH = hashlib.sha256(b"state").digest()
STATE = bytes(reversed(PAYLOAD))
REQUESTS_PER_EXAMPLE = 8
STREAM_EXAMPLES = 250  # × 8 requests = 2,000 hostile requests
COMMIT_EXAMPLES = 1200
EXCHANGE_TIMEOUT_S = 20.0

COUNTS: Counter[str] = Counter()


# --- an event loop in a thread, so that hypothesis (synchronous) can drive the async P2P client ----------------


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


class Served:
    """The server side: a PayloadServer whose handler is wrapped to record exceptions and in-flight calls."""

    def __init__(self) -> None:
        # Limits opened wide: this test fuzzes the request parser, so no request may be refused as BUSY by
        # the per-peer stream cap or rate limit (those have their own tests).
        self.server = PayloadServer(RUN, max_inbound_streams=4 * REQUESTS_PER_EXAMPLE,
                                    max_inbound_streams_per_peer=4 * REQUESTS_PER_EXAMPLE,
                                    max_requests_per_peer_per_s=1e6, request_burst=10**6)
        self.server.reveal(REVEALED_ROUND, PAYLOAD)
        self.server.publish_state(STATE_HASH, STATE)
        self.errors: list[str] = []
        self.in_flight = 0
        self.handled = 0
        original = self.server._handle

        async def guarded(info: object, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.in_flight += 1
            try:
                await original(info, reader, writer)
            except BaseException as error:  # noqa: BLE001 - recorded: the handler must never raise
                self.errors.append(f"{type(error).__name__}: {error}"[:200])
                raise
            finally:
                self.in_flight -= 1
                self.handled += 1

        self.server._handle = guarded  # type: ignore[method-assign]  # attach() registers self._handle


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[LoopThread, Any, Any, Served]]:
    runner = LoopThread()
    started: list[Any] = []
    try:
        async def start() -> tuple[Any, Any, Served]:
            server = await asyncio.wait_for(P2P.create(host_maddrs=LOOPBACK, nat_port_map=False), START_TIMEOUT_S)
            started.append(server)
            maddrs = [str(m) for m in await server.get_visible_maddrs()]
            client = await asyncio.wait_for(
                P2P.create(initial_peers=maddrs, host_maddrs=LOOPBACK, nat_port_map=False), START_TIMEOUT_S)
            started.append(client)
            served = Served()
            await served.server.attach(server)
            return server, client, served

        server, client, served = runner.run(start(), 2 * START_TIMEOUT_S + 10)
        yield runner, server, client, served
    finally:
        async def stop() -> None:
            for p2p in reversed(started):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(p2p.shutdown(), SHUTDOWN_TIMEOUT_S)

        with contextlib.suppress(Exception):
            runner.run(stop(), 2 * SHUTDOWN_TIMEOUT_S + 10)
        runner.close()


# --- hostile requests --------------------------------------------------------------------------------------------


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


wrong_requests = st.one_of(
    st.sampled_from([
        ["payload", REVEALED_ROUND], ["payload", REVEALED_ROUND + 1], ["payload", 0], ["payload", -1],
        ["payload", 2**64 - 1], ["payload", True], ["payload", 5.0], ["payload", "5"], ["payload", b"\x05"],
        ["payload", None], ["payload", [5]], ["state", STATE_HASH], ["state", bytes(32)], ["state", b""],
        ["state", b"\x00" * 64], ["state", "hash"], ["state", 5], ["state", [STATE_HASH]], ["Payload", 5],
        ["payloadpayloadpay", 5], ["state"], ["payload", 5, 6], ["payload", REVEALED_ROUND, 0],
        ["payload", REVEALED_ROUND, 1], ["payload", REVEALED_ROUND, 2], ["payload", REVEALED_ROUND, -1],
        ["payload", REVEALED_ROUND, True], ["payload", REVEALED_ROUND, 1, 2], [], "payload", 5, None, True, b"\x00" * 65,
        "x" * 17, {"payload": 5}, [{"a": 1}, 5], msgpack.ExtType(1, b"x"), ["state", b"\x00" * 65],
    ]),
    st.tuples(st.one_of(st.text(max_size=20), st.binary(max_size=20), st.integers(-(2**63), 2**64 - 1)),
              st.one_of(st.integers(-(2**63), 2**64 - 1), st.binary(max_size=70), st.text(max_size=20),
                        st.booleans(), st.none(), st.floats())).map(list),
)


@st.composite
def hostile_request(draw: st.DrawFn) -> tuple[bytes, str]:
    """``(bytes to send, mode)``: mode ``complete`` (a status is due) or ``truncated`` (the client hangs up)."""
    body_kind = draw(st.sampled_from(["msgpack", "msgpack", "garbage", "huge_header_inside", "big"]))
    if body_kind == "msgpack":
        try:
            body = pack(draw(wrong_requests))
        except (OverflowError, ValueError, TypeError):
            body = b"\xc1"
    elif body_kind == "garbage":
        body = draw(st.binary(max_size=300))
    elif body_kind == "huge_header_inside":
        body = b"\x92\xa7payload" + draw(st.sampled_from([b"\xc6\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff",
                                                           b"\xcf\xff", b"\xdb\x00\x00\x01\x00"]))
    else:
        body = draw(st.binary(min_size=MAX_REQUEST_BYTES - 2, max_size=MAX_REQUEST_BYTES + 40))
    header_kind = draw(st.sampled_from(["exact", "exact", "exact", "huge", "random", "zero", "short", "long"]))
    if header_kind == "exact":
        length = len(body)
    elif header_kind == "huge":
        length = draw(st.sampled_from([MAX_REQUEST_BYTES + 1, 2**16, 2**31, 2**32 - 1]))
    elif header_kind == "random":
        length = draw(st.integers(0, 2**32 - 1))
    elif header_kind == "zero":
        length = 0
    elif header_kind == "short":  # fewer bytes announced than sent: the rest is ignored
        length = draw(st.integers(0, len(body)))
    else:  # more announced than sent: the client hangs up
        length = len(body) + draw(st.integers(1, 64))
    if draw(st.integers(0, 15)) == 0:  # now and then not even a full header
        return draw(st.binary(max_size=3)), "truncated"
    mode = "complete" if length > MAX_REQUEST_BYTES or length <= len(body) else "truncated"
    return length.to_bytes(4, "big") + body, mode


def expected_status(data: bytes) -> tuple[int, bytes | None]:
    """What docs/protocol.md §6 says the server answers to a complete request (independently decoded)."""
    length = int.from_bytes(data[:4], "big")
    if length > MAX_REQUEST_BYTES:
        return BAD_REQUEST, None
    try:
        request = msgpack.unpackb(data[4:4 + length], raw=False, max_bin_len=64, max_str_len=16,
                                  max_array_len=3, max_map_len=0, max_ext_len=0)
    except Exception:  # noqa: BLE001 - a malformed request
        return BAD_REQUEST, None
    if type(request) is list and len(request) == 3 and request[0] == "payload":  # resume from chunk k
        _, key, first = request
        if type(key) is not int or type(first) is not int:
            return BAD_REQUEST, None
        if key != REVEALED_ROUND:
            return NOT_READY, None
        chunks = -(-len(PAYLOAD) // PAYLOAD_CHUNK_BYTES)
        return (OK, SERVED_DIGESTS + PAYLOAD[first * PAYLOAD_CHUNK_BYTES:]) if 0 <= first <= chunks else (BAD_REQUEST, None)
    if not (type(request) is list and len(request) == 2):
        return BAD_REQUEST, None
    kind, key = request
    if kind == "payload" and type(key) is int:  # the chunk digests (hash tree), then the payload
        return (OK, SERVED_DIGESTS + PAYLOAD) if key == REVEALED_ROUND else (NOT_READY, None)
    if kind == "state" and type(key) is bytes:
        return (OK, STATE) if key == STATE_HASH else (NOT_FOUND, None)
    return BAD_REQUEST, None


def overframed(data: bytes) -> bool:
    """A request with bytes past its announced length (within ``MAX_REQUEST_BYTES``): a framing error."""
    length = int.from_bytes(data[:4], "big")
    return length <= MAX_REQUEST_BYTES and len(data) > 4 + length


async def send_raw(client: Any, server: Any, data: bytes, mode: str) -> bytes | None:
    """Send raw bytes to the handler; read the whole answer for a complete request, else hang up at once."""
    _, reader, writer = await client.call_binary_stream_handler(server.peer_id, handler_name(RUN))
    try:
        writer.write(data)
        await writer.drain()
        if mode != "complete":
            return None
        answer = b""
        while len(answer) <= len(SERVED_DIGESTS) + len(PAYLOAD) + 1:
            chunk = await reader.read(4096)
            if not chunk:
                break
            answer += chunk
        return answer
    finally:
        writer.close()


@settings(max_examples=STREAM_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(hostile_request(), min_size=REQUESTS_PER_EXAMPLE, max_size=REQUESTS_PER_EXAMPLE))
def _fuzz_stream(requests: list[tuple[bytes, str]]) -> None:
    runner, server, client, served = _LIVE[0]

    async def batch() -> list[bytes | None]:
        return await asyncio.gather(*(send_raw(client, server, data, mode) for data, mode in requests))

    answers = runner.run(batch(), EXCHANGE_TIMEOUT_S)
    for (data, mode), answer in zip(requests, answers):
        COUNTS["stream requests"] += 1
        if mode != "complete":
            COUNTS["truncated"] += 1
            continue
        COUNTS["complete"] += 1
        COUNTS["overframed"] += overframed(data)
        want_status, want_data = expected_status(data)
        if not answer and overframed(data):  # docs/protocol.md §6: a reset may overtake the status byte
            COUNTS["reset (bytes past the announced length)"] += 1
            continue
        assert answer, f"no status byte for a complete request {data[:40]!r}; server {served.server.stats}"
        assert answer[0] == want_status, f"status {answer[0]}, expected {want_status} for {data[:40]!r}"
        assert answer[1:] == (want_data or b""), f"wrong bytes after status {answer[0]} for {data[:40]!r}"
        COUNTS[f"status {answer[0]}"] += 1


_LIVE: list[tuple[LoopThread, Any, Any, Served]] = []


def test_stream_handler_survives_hostile_requests(live: tuple[LoopThread, Any, Any, Served]) -> None:
    runner, server, client, served = live
    _LIVE[:] = [live]
    started = time.monotonic()
    _fuzz_stream()
    fuzz_s = time.monotonic() - started

    # Hung-up requests end when the stream closes, at the latest after the server's read timeout.
    deadline = time.monotonic() + REQUEST_READ_TIMEOUT_S + 10
    while served.in_flight and time.monotonic() < deadline:
        time.sleep(0.2)

    async def still_serving() -> tuple[Any, Any]:
        payload = await fetch(client, server.peer_id, RUN, ["payload", REVEALED_ROUND],
                              max_bytes=len(SERVED_DIGESTS) + len(PAYLOAD), timeout_s=10)
        state = await fetch(client, server.peer_id, RUN, ["state", STATE_HASH], max_bytes=len(STATE),
                            timeout_s=10)
        return payload, state

    payload, state = runner.run(still_serving(), 30)
    sent = COUNTS["stream requests"]
    summary = (f"{sent} hostile requests ({COUNTS['complete']} complete, {COUNTS['truncated']} hung up) in "
               f"{fuzz_s:.1f} s; statuses {[(k, v) for k, v in COUNTS.items() if k.startswith('status')]}; "
               f"{COUNTS['reset (bytes past the announced length)']} of {COUNTS['overframed']} with bytes past "
               "their announced length reset before the status byte; "
               f"handler calls {served.handled}, handler exceptions {len(served.errors)}, "
               f"still running {served.in_flight}")
    print(f"[fuzz] stream handler: {summary}")
    assert sent >= 1000, summary
    assert not served.errors, f"the stream handler raised: {served.errors[:5]}; {summary}"
    assert served.in_flight == 0, summary
    # A reset is a rare race (bytes still arriving as the server closes), not the rule.
    assert COUNTS["reset (bytes past the announced length)"] * 10 <= COUNTS["overframed"], summary
    assert payload.status == OK and payload.data == SERVED_DIGESTS + PAYLOAD, \
        f"valid payload fetch failed: {payload}; {summary}"
    assert state.status == OK and state.data == STATE, f"valid state fetch failed: {state}; {summary}"


# --- malformed commits through open_commits + check_rows ----------------------------------------------------------

ALICE = Identity.from_seed(b"\x01" * 32)
MALLORY = Identity.from_seed(b"\x02" * 32)
ROUND = 4
BASE = hashlib.sha256(b"live base").digest()
SHAPES: tuple[tuple[int, ...], ...] = ((2, 3),)
NUMEL = 6
CONFIG = PeerConfig(run_id=RUN, max_envelope_bytes=4096, max_parameters=256, fetch_timeout_s=1.0, reveal_wait_s=0.5)
EXPECT = RoundExpectation(run_id=RUN, round=ROUND, max_staleness=2, shapes=SHAPES, codecs=CODECS,
                          max_payload_bytes=payload_cap_bytes("fp32", CONFIG.max_parameters))  # 1024 bytes
HONEST_PAYLOAD = encode_update(torch.linspace(-1, 1, NUMEL), "fp32")
NAN_PAYLOAD = encode_update(torch.full((NUMEL,), float("nan")), "fp32")


def envelope(signer: Identity = ALICE, payload: bytes = HONEST_PAYLOAD, **changes: Any) -> Envelope:
    fields: dict[str, Any] = dict(
        protocol_version=PROTOCOL_VERSION, run_id=RUN, round=ROUND, sender=signer.peer_id, base_hash=BASE,
        digest=payload_digest(payload), codec="fp32", shapes=SHAPES, n_samples=10, payload_bytes=len(payload))
    fields.update(changes)
    return Envelope(**fields)


HONEST = sign_envelope(envelope(), ALICE)

#: Re-signed commits with one wrong field, each with the reason the round logic must give.
RESIGNED: dict[str, tuple[bytes, RejectReason]] = {
    "replayed round": (sign_envelope(envelope(round=ROUND - 1), ALICE), RejectReason.WRONG_ROUND),
    "future round": (sign_envelope(envelope(round=ROUND + 1), ALICE), RejectReason.WRONG_ROUND),
    "stale base": (sign_envelope(envelope(base_round=ROUND - 3), ALICE), RejectReason.STALE_BASE),
    "wrong run": (sign_envelope(envelope(run_id=RUN + "-x"), ALICE), RejectReason.WRONG_RUN),
    "wrong shape": (sign_envelope(envelope(shapes=((3, 2),)), ALICE), RejectReason.SHAPE_MISMATCH),
    "unknown codec": (sign_envelope(envelope(codec="int9"), ALICE), RejectReason.DECODE_ERROR),
    "huge declared size": (sign_envelope(envelope(payload_bytes=2**63 - 1), ALICE), RejectReason.OVERSIZE),
    "inconsistent size": (sign_envelope(envelope(payload_bytes=4 * NUMEL + 4), ALICE), RejectReason.DECODE_ERROR),
    "impersonation": (sign_envelope(envelope(MALLORY), MALLORY), RejectReason.BAD_SIGNATURE),
    "forged in Alice's name": (pack_envelope(envelope(), MALLORY.sign(ENVELOPE_SIGNING_CONTEXT + b"x")),
                               RejectReason.BAD_SIGNATURE),
    "unsigned": (pack_envelope(envelope(), b""), RejectReason.UNSIGNED),
    "future version": (pack([pack([4, RUN, ROUND]), b"\x00" * 64]), RejectReason.UNSUPPORTED_VERSION),
    "NaN payload committed": (sign_envelope(envelope(payload=NAN_PAYLOAD), ALICE), RejectReason.NON_FINITE),
    "oversized envelope": (HONEST + b"\x00" * 5000, RejectReason.OVERSIZE),
}


def _garbage_reason(value: bytes) -> RejectReason:
    """``DECODE_ERROR``, unless the garbage happens to be ``[body: bin, signature: bin]`` whose body is a non-empty
    array starting with an int other than ours: that is a protocol version we do not speak, whatever the layout
    after it (``UNSUPPORTED_VERSION``; CI drew body ``\\x91\\x00``, the array ``[0]``)."""
    try:
        outer = msgpack.unpackb(value)
        if type(outer) is not list or len(outer) != 2 or not all(type(item) is bytes for item in outer):
            return RejectReason.DECODE_ERROR
        inner = msgpack.Unpacker()
        inner.feed(outer[0])
        first = inner.unpack() if inner.read_array_header() >= 1 else None
    except Exception:  # noqa: BLE001 - any parser failure: the peer must say decode_error too
        return RejectReason.DECODE_ERROR
    if type(first) is int and first not in SUPPORTED_VERSIONS:
        return RejectReason.UNSUPPORTED_VERSION
    return RejectReason.DECODE_ERROR


@st.composite
def malformed_commit(draw: st.DrawFn) -> tuple[bytes, bytes, str, RejectReason | None]:
    """``(raw commit, served payload, case, expected reason or None when it must be derived)``."""
    case = draw(st.sampled_from(["honest", "bytes", "bytes", "resigned", "resigned", "garbage", "payload"]))
    if case == "honest":
        return HONEST, HONEST_PAYLOAD, case, None
    if case == "resigned":
        name = draw(st.sampled_from(sorted(RESIGNED)))
        raw, reason = RESIGNED[name]
        served = NAN_PAYLOAD if name == "NaN payload committed" else HONEST_PAYLOAD
        return raw, served, name, reason
    if case == "garbage":
        value = draw(st.one_of(st.binary(max_size=300), st.lists(st.binary(max_size=40), max_size=3).map(pack),
                               st.integers().map(lambda i: pack(i % 2**63)), st.text(max_size=30).map(pack)))
        return value, HONEST_PAYLOAD, case, _garbage_reason(value) if len(value) <= 4096 else None
    if case == "payload":  # an intact commit, a hostile stream
        served = draw(st.one_of(
            st.just(HONEST_PAYLOAD + b"\x00"), st.just(HONEST_PAYLOAD[:-1]), st.binary(max_size=40),
            st.integers(0, len(HONEST_PAYLOAD) * 8 - 1).map(
                lambda bit: bytes(b ^ (1 << (bit % 8)) if i == bit // 8 else b
                                  for i, b in enumerate(HONEST_PAYLOAD)))))
        want = RejectReason.OVERSIZE if len(served) > len(HONEST_PAYLOAD) else RejectReason.DIGEST_MISMATCH
        return HONEST, served, case, want
    data = bytearray(HONEST)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "extend", "insert"]))
        if op == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[draw(st.integers(0, len(data))):]
        elif op == "extend":
            data += draw(st.binary(min_size=1, max_size=32))
        else:
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data), HONEST_PAYLOAD, case, None


@settings(max_examples=COMMIT_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(malformed_commit(), st.integers(0, 9))
def _fuzz_commits(case: tuple[bytes, bytes, str, RejectReason | None], misfile: int) -> None:
    raw, served, name, want = case
    subkey = ALICE.peer_id_b58
    if misfile == 0 and raw == HONEST:  # Alice's intact commit filed under Mallory's subkey
        subkey, name, want = MALLORY.peer_id_b58, "misfiled", RejectReason.BAD_SIGNATURE
    envelopes, rejected = open_commits({subkey: raw}, CONFIG.commit_phase)
    rows, more = asyncio.run(check_rows(None, envelopes, EXPECT, CONFIG.fetch_limits, {subkey: served}, asyncio.Event()))
    verdicts = rejected + more
    COUNTS["commits"] += 1
    assert len(rows) + len(verdicts) == 1, f"{name}: {len(rows)} rows and {verdicts} for one commit"
    if rows:
        assert raw == HONEST and served == HONEST_PAYLOAD and subkey == ALICE.peer_id_b58, (
            f"{name}: a malformed commit became a row")
        assert torch.equal(rows[subkey], torch.linspace(-1, 1, NUMEL))
        COUNTS["accepted"] += 1
        return
    (verdict,) = verdicts
    assert verdict.sender == subkey and isinstance(verdict.reason, RejectReason), verdict
    COUNTS[f"reason {verdict.reason.value}"] += 1
    assert not (raw == HONEST and served == HONEST_PAYLOAD and subkey == ALICE.peer_id_b58), (
        f"the honest commit was rejected: {verdict}")
    if want is not None:
        assert verdict.reason is want, f"{name}: expected {want}, got {verdict}"


def test_malformed_commits_get_one_reason_each() -> None:
    started = time.monotonic()
    _fuzz_commits()
    reasons = {k: v for k, v in COUNTS.items() if k.startswith("reason")}
    summary = (f"{COUNTS['commits']} generated commits in {time.monotonic() - started:.1f} s: "
               f"{COUNTS['accepted']} honest rows, rejections {reasons}, 0 crashes")
    print(f"[fuzz] open_commits + check_rows: {summary}")
    assert COUNTS["commits"] >= 1000, summary
    assert sum(reasons.values()) + COUNTS["accepted"] == COUNTS["commits"], summary
