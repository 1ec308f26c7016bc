"""Payload and state transfer over hivemind P2P binary streams, with every read bounded.

One stream handler per run, ``p2p_guard.v1.<run_id>.fetch``. A request is a 4-byte big-endian length and a
msgpack array: ``["payload", round]`` or ``["payload", round, first_chunk]`` (the sender's pseudo-gradient of
that round, served only after its commit phase closed: commit before reveal; from chunk ``first_chunk`` on, to
resume a broken transfer) or ``["state", hash]`` (the model state with that 32-byte hash).
The answer is one status byte (:data:`OK`, :data:`NOT_READY`, :data:`NOT_FOUND`, :data:`BAD_REQUEST`,
:data:`BUSY`, :data:`FORBIDDEN`) and, after ``OK``, the raw bytes until the stream closes. For a payload these
are the n·32-byte list of its chunk digests, then its bytes from chunk ``first_chunk`` on (the hash tree of
``protocol.chunks``, protocol version 3). The reader knows from the signed envelope how many bytes to expect;
:func:`fetch_payload` checks the list against the committed root and each 1 MiB chunk as it completes, cuts
the sender at the first bad chunk or the first byte past the declared size, and holds at most the declared
size (one buffer, written in place). :func:`fetch` reads other answers (states) bounded by ``max_bytes``.

``StreamInfo.peer_id`` is the caller as authenticated by libp2p; every server-side limit is keyed by it,
never by anything in the request. The limits (see :class:`PayloadServer`) are checked as a stream opens,
before its request is read: an allow-list (``FORBIDDEN``), a global and a per-peer cap on concurrent
streams and a per-peer token-bucket request rate (``BUSY``). A request must arrive within the request
timeout (:data:`REQUEST_READ_TIMEOUT_S` by default), and the whole answer must be written within the serve
limit, so a slow client (slowloris) holds a stream for a bounded time; refusals in progress are capped too.
With an upload cap (``max_upload_bytes_per_s``, the peer's ``max_upload_mbit``) every answer is written
through one token bucket shared by all streams (:class:`p2p_guard.swarm.upload.UploadLimiter`); the time a
stream waits for tokens does not count against its serve limit.
On the client side, :func:`fetch` and :func:`fetch_payload` cut an answer while reading it: at the first byte
past the declared size, after ``idle_timeout_s`` without a byte, or when the answer falls below
``min_bytes_per_s`` (status :data:`TOO_SLOW`), and always at ``timeout_s``; so a trickling server (slowloris)
costs bounded time and memory too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import msgpack
import numpy as np
from hivemind.p2p import P2P, PeerID

from p2p_guard.protocol.chunks import PAYLOAD_CHUNK_BYTES, ChunkVerifier, chunk_count, chunk_digests
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.upload import UploadLimiter, mbit_to_bytes_per_s

__all__ = [
    "BAD_DATA",
    "BAD_REQUEST",
    "BUSY",
    "DEFAULT_FETCH_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_INBOUND_STREAMS",
    "DEFAULT_MAX_INBOUND_STREAMS_PER_PEER",
    "DEFAULT_MAX_REQUESTS_PER_PEER_PER_S",
    "DEFAULT_MIN_FETCH_BYTES_PER_S",
    "DEFAULT_MIN_SERVE_BYTES_PER_S",
    "DEFAULT_REQUEST_BURST",
    "DEFAULT_SERVE_TIMEOUT_S",
    "FORBIDDEN",
    "HALF",
    "INT8",
    "NOT_FOUND",
    "NOT_READY",
    "OK",
    "TOO_SLOW",
    "AnswerSender",
    "WireCounter",
    "FetchResult",
    "PayloadServer",
    "ServerStats",
    "DEADLINE_DETAIL",
    "NO_ANSWER_DETAIL",
    "STALL_DETAIL",
    "failure_detail",
    "is_stall",
    "is_deadline_cut",
    "is_no_answer",
    "fetch",
    "fetch_payload",
]

logger = logging.getLogger(__name__)

OK, NOT_READY, NOT_FOUND, BAD_REQUEST, BUSY, FORBIDDEN = 0, 1, 2, 3, 4, 5
#: :attr:`FetchResult.status` of an answer :func:`fetch` cut because the server stalled or sent too slowly
#: (never on the wire; -1 is any other transport failure).
TOO_SLOW = -2
#: :attr:`FetchResult.status` of a payload :func:`fetch_payload` cut because its bytes failed a check against the
#: committed root (a bad digest list or chunk, bytes past the declared size); :attr:`FetchResult.rejected` says why.
BAD_DATA = -3
#: Start of a :data:`TOO_SLOW` detail when not even the status byte came: the server never answered (frozen,
#: asleep, or overloaded past ``idle_timeout_s``), as opposed to one that answered and then stalled or trickled.
NO_ANSWER_DETAIL = "no status byte"
#: Start of a :data:`TOO_SLOW` detail when the server answered, sent part of the body, then sent nothing for
#: ``idle_timeout_s`` (a stall), as opposed to a body slower than the rate floor on average.
STALL_DETAIL = "no bytes for"


#: Start of the detail of a -1 :class:`FetchResult` whose whole-exchange deadline (``timeout_s``) ran out. Since
#: ``idle_timeout_s`` and the rate floor cut a silent or trickling server first (:data:`TOO_SLOW`), such an answer
#: was still streaming at least ``min_bytes_per_s`` on average: a slow sender, not a silent one.
DEADLINE_DETAIL = "no complete answer within"


def is_deadline_cut(detail: str) -> bool:
    """True if a failure detail says the deadline ran out while the answer streamed (:data:`DEADLINE_DETAIL`)."""
    return detail.startswith(DEADLINE_DETAIL)


def is_stall(detail: str) -> bool:
    """True if a :data:`TOO_SLOW` detail says the body stalled for ``idle_timeout_s`` (:data:`STALL_DETAIL`)."""
    return detail.startswith(STALL_DETAIL)


def is_no_answer(detail: str) -> bool:
    """True if a failure detail says the server never answered at all (:data:`NO_ANSWER_DETAIL`).

    ``detail``: a :class:`FetchResult`'s detail, or a verdict's detail that quotes it.
    """
    return NO_ANSWER_DETAIL in detail

#: Largest request body, in bytes.
MAX_REQUEST_BYTES = 256
#: Size of one stream write or read, in bytes (1 MiB).
CHUNK_BYTES = 1 << 20
#: After the last declared byte of a payload, how long :func:`fetch_payload` waits to see the stream end (an extra
#: byte is ``OVERSIZE``; a sender that holds the stream open after its complete, verified payload is not waited
#: for longer), in seconds.
EXTRA_BYTES_WAIT_S = 1.0
#: Default time a complete request has to arrive after the stream opens, in seconds.
REQUEST_READ_TIMEOUT_S = 10.0
#: Revealed rounds (and published states) kept for serving.
MAX_KEPT_ROUNDS = 3
#: Rounds whose mixed states (``["mixed", [r, step]]``) are kept for serving: the latest mixing and the one
#: before, for a neighbour one round behind. They are asked only during that mixing; with 3 rounds kept, an
#: early round's 2-3 step states of 4·d bytes each stayed for three rounds (up to 870 MB at d = 25M).
MAX_KEPT_MIXED_ROUNDS = 2

#: Key, in a round's table of mixed states, of the state our mixing ended with (after its last step).
LAST_STEP = -1

#: Third element of a ``["theta" | "momentum" | "mixed", key, HALF]`` request: answer in IEEE float16 (2·d bytes,
#: round to nearest) instead of float32 (4·d). Mixing asks for it: it halves the dense state traffic that sets a
#: round's length for a large model (docs/protocol.md §5 and §7.8).
HALF = "fp16"
#: Third element of a ``["theta" | "momentum" | "mixed", key, INT8]`` request: answer in the ``int8`` codec of
#: ``protocol.quantized`` (one float32 scale per 1024 values, then int8 codes: 4·⌈d/1024⌉ + d bytes;
#: ``protocol.states``). Mixing asks for it with ``mix_precision = "int8"``.
INT8 = "int8"
#: Converted answers the server keeps, per precision (the latest few states; each is asked by up to ``mix_peers``
#: peers).
HALF_CACHE = 4

#: Concurrent inbound streams, all peers together (streams).
DEFAULT_MAX_INBOUND_STREAMS = 64
#: Concurrent inbound streams of one peer (streams).
DEFAULT_MAX_INBOUND_STREAMS_PER_PEER = 4
#: Sustained request rate of one peer (requests per second); an honest fetcher polls at most 2/s.
DEFAULT_MAX_REQUESTS_PER_PEER_PER_S = 5.0
#: Token-bucket depth: requests one peer may send at once after a quiet spell (requests).
DEFAULT_REQUEST_BURST = 10
#: Floor of the time allowed for writing one answer, in seconds.
DEFAULT_SERVE_TIMEOUT_S = 10.0
#: Slowest transfer rate the serve limit allows for, in bytes per second (1 MiB/s).
DEFAULT_MIN_SERVE_BYTES_PER_S = 1 << 20
#: Peers whose rate buckets and warning flags are remembered (least recently seen evicted first).
MAX_TRACKED_PEERS = 1024
#: Time a refused stream is kept open (status byte out, request drained), in seconds.
REFUSAL_TIMEOUT_S = 1.0
#: Longest :func:`fetch` waits for the next bytes of an answer (status byte or body), in seconds.
DEFAULT_FETCH_IDLE_TIMEOUT_S = 5.0
#: Slowest average rate :func:`fetch` accepts for an answer's body once ``idle_timeout_s`` has passed, in
#: bytes per second (64 KiB/s; an honest server writes at least ``min_serve_bytes_per_s`` or cuts itself).
DEFAULT_MIN_FETCH_BYTES_PER_S = 64 * 1024


def handler_name(run_id: str) -> str:
    """The libp2p protocol name of a run's fetch handler."""
    return f"p2p_guard.v1.{run_id}.fetch"


@dataclass
class ServerStats:
    """Counters of a :class:`PayloadServer` (monotonic; for tests and events).

    Attributes:
        served: streams admitted (a request was awaited and answered, or the stream ended early).
        busy_global: streams refused with ``BUSY`` because ``max_inbound_streams`` were open.
        busy_streams: streams refused with ``BUSY`` because the caller had ``max_inbound_streams_per_peer``
            streams open.
        busy_rate: streams refused with ``BUSY`` because the caller's token bucket was empty.
        forbidden: streams refused with ``FORBIDDEN`` (caller not on the allow-list).
        refusals_dropped: streams closed at once, without a status byte, because ``max_inbound_streams``
            refusals were already in progress (a flood of streams).
        request_timeouts: admitted streams whose request did not arrive within the request timeout.
        serve_timeouts: answers cut off because the reader took longer than the serve limit.
        payloads_served: ``["payload", r]`` requests answered ``OK`` (the fan-out served).
    """

    served: int = 0
    payloads_served: int = 0
    busy_global: int = 0
    busy_streams: int = 0
    busy_rate: int = 0
    forbidden: int = 0
    refusals_dropped: int = 0
    request_timeouts: int = 0
    serve_timeouts: int = 0


class PayloadServer:
    """Serves this peer's revealed payloads and recent model states to other peers, within limits.

    Payloads are added with :meth:`reveal` only once the commit phase of their round has closed for this
    peer. Only the last :data:`MAX_KEPT_ROUNDS` rounds are kept, so memory is bounded.

    Every inbound stream is checked as it opens, before its request is read, against the caller's PeerID
    as authenticated by libp2p (``StreamInfo.peer_id``), in this order:

    1. ``allowed``: a caller outside the allow-list gets ``FORBIDDEN``.
    2. ``max_inbound_streams``: with that many streams open (all callers), the new one gets ``BUSY``.
    3. ``max_inbound_streams_per_peer``: with that many streams of this caller open, ``BUSY``.
    4. Request rate, a token bucket per caller: ``tokens = min(request_burst, tokens + rate·Δt)``, where
       ``rate`` is ``max_requests_per_peer_per_s`` and Δt the seconds since the caller's last stream; a
       stream needs one token, else ``BUSY``. Refused streams of rules 1-3 take no token.

    A refusal writes one status byte, discards the request (at most ``4 + MAX_REQUEST_BYTES`` bytes and
    :data:`REFUSAL_TIMEOUT_S` seconds) and closes the stream. Refused streams do not count as open, but at
    most ``max_inbound_streams`` refusals are in progress at once: beyond that a new stream is closed at once
    without a status byte (``stats.refusals_dropped``), so a flood of streams holds at most
    ``2 · max_inbound_streams`` handler coroutines and sockets. An admitted stream must deliver its request
    within ``request_timeout_s`` seconds, and the whole answer must be written within
    ``max(serve_timeout_s, len(answer) / min_serve_bytes_per_s)`` seconds, else the stream is aborted: a
    slow client (slowloris) holds a stream, and the memory of its write buffer, for a bounded time. A
    caller's faults (refused, request timeout, slow reader) are logged at WARNING the first time for each
    (caller, kind of fault), at DEBUG after.

    The answer's bytes after the status byte are written by :meth:`_stream`, the one hook a subclass may
    override (a simulated slowloris sender does: ``p2p_guard.swarm.slowloris``).

    Memory is bounded: open-stream counts exist only for callers with open streams (at most
    ``max_inbound_streams``), and the token buckets and warned-once flags are LRU tables of at most
    ``max_tracked_peers`` callers. Evicting a bucket refills it, which is harmless as long as the table
    holds every caller seen in the last ``request_burst / rate`` seconds.

    Upload cap: with ``max_upload_bytes_per_s`` set, the status byte and body of every admitted answer (payloads,
    states, θ, momentum) go through one :class:`~p2p_guard.swarm.upload.UploadLimiter` (:attr:`upload`), in
    pieces of at most ``upload.piece_bytes``; refusals are not throttled. A stream's serve limit is extended by
    the time it waited for tokens, so the cap never counts as a slow reader.
    """

    def __init__(self, run_id: str, *, max_inbound_streams: int = DEFAULT_MAX_INBOUND_STREAMS,
                 max_inbound_streams_per_peer: int = DEFAULT_MAX_INBOUND_STREAMS_PER_PEER,
                 max_requests_per_peer_per_s: float = DEFAULT_MAX_REQUESTS_PER_PEER_PER_S,
                 request_burst: int = DEFAULT_REQUEST_BURST,
                 serve_timeout_s: float = DEFAULT_SERVE_TIMEOUT_S,
                 min_serve_bytes_per_s: int = DEFAULT_MIN_SERVE_BYTES_PER_S,
                 request_timeout_s: float = REQUEST_READ_TIMEOUT_S,
                 allowed: frozenset[str] | None = None, max_tracked_peers: int = MAX_TRACKED_PEERS,
                 max_upload_bytes_per_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Create an empty server for ``run_id``; call :meth:`attach` to start serving.

        Args:
            run_id: The run (selects the handler name).
            max_inbound_streams: Concurrent inbound streams, all callers together (streams).
            max_inbound_streams_per_peer: Concurrent inbound streams of one caller (streams).
            max_requests_per_peer_per_s: Sustained requests per second of one caller (token refill rate).
            request_burst: Token-bucket depth, in requests.
            serve_timeout_s: Floor of the time limit for writing one answer, in seconds.
            min_serve_bytes_per_s: Slowest reader the limit allows for, in bytes per second: an answer of
                ``b`` bytes may take ``max(serve_timeout_s, b / min_serve_bytes_per_s)`` seconds.
            request_timeout_s: Time a complete request has to arrive after the stream opens, in seconds.
            allowed: Base58 PeerIDs allowed to fetch (see :mod:`p2p_guard.swarm.allowlist`); None: anyone.
            max_tracked_peers: Size of the per-caller LRU tables (callers).
            max_upload_bytes_per_s: Upload cap over all streams together, in bytes per second (None: none).
            clock: Monotonic time source of the request buckets, in seconds (tests pass a fake one; the upload
                cap runs on ``time.monotonic``).

        Raises:
            ValueError: a limit is not positive (the message names it and its value).
        """
        for name, value in (("max_inbound_streams", max_inbound_streams),
                            ("max_inbound_streams_per_peer", max_inbound_streams_per_peer),
                            ("max_requests_per_peer_per_s", max_requests_per_peer_per_s),
                            ("request_burst", request_burst), ("serve_timeout_s", serve_timeout_s),
                            ("min_serve_bytes_per_s", min_serve_bytes_per_s),
                            ("request_timeout_s", request_timeout_s),
                            ("max_tracked_peers", max_tracked_peers),
                            *((("max_upload_bytes_per_s", max_upload_bytes_per_s),)
                              if max_upload_bytes_per_s is not None else ())):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or value == float("inf"):
                raise ValueError(f"{name} must be finite and > 0; got {name}={value!r}")
        if allowed is not None and not (isinstance(allowed, frozenset)
                                        and all(isinstance(p, str) for p in allowed)):
            raise ValueError("allowed must be None or a frozenset of base58 PeerIDs; "
                             f"got {type(allowed).__name__}")
        self.run_id = run_id
        self.max_inbound_streams = int(max_inbound_streams)
        self.max_inbound_streams_per_peer = int(max_inbound_streams_per_peer)
        self.max_requests_per_peer_per_s = float(max_requests_per_peer_per_s)
        self.request_burst = int(request_burst)
        self.serve_timeout_s = float(serve_timeout_s)
        self.min_serve_bytes_per_s = int(min_serve_bytes_per_s)
        self.request_timeout_s = float(request_timeout_s)
        self.allowed = allowed
        self.max_tracked_peers = int(max_tracked_peers)
        #: The shared upload bucket (None: no cap).
        self.upload = UploadLimiter(max_upload_bytes_per_s) if max_upload_bytes_per_s is not None else None
        self._clock = clock
        self._payloads: dict[int, tuple[bytes, bytes]] = {}  # round -> (payload, its chunk digests)
        self._states: dict[bytes, bytes] = {}
        # Served states: bytes, or a read-only view of a tensor that is never changed (``training.params.raw_bytes``).
        self._thetas: dict[int, bytes | memoryview] = {}
        self._momenta: dict[int, bytes | memoryview] = {}
        self._mixed: dict[int, dict[int, bytes | memoryview]] = {}
        self._half: OrderedDict[int, tuple[bytes | memoryview, bytes]] = OrderedDict()  # id(fp32) -> (it, fp16)
        self._int8: OrderedDict[int, tuple[bytes | memoryview, bytes]] = OrderedDict()  # id(fp32) -> (it, int8)
        # conversions in progress in a worker thread, by (precision, id(fp32)): one per state however many ask
        self._converting: dict[tuple[str, int], asyncio.Future[bytes]] = {}
        self._first_round: int | None = None  # payloads of earlier rounds are never revealed by this process
        self._withdrawn = False
        self._open = 0
        self._refusing = 0
        self._open_by_peer: dict[str, int] = {}
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # peer -> (tokens, stamp)
        self._warned: OrderedDict[str, None] = OrderedDict()
        self.stats = ServerStats()
        self.bytes_sent = 0

    @classmethod
    def from_config(cls, config: PeerConfig, allowed: frozenset[str] | None, **extra: Any) -> PayloadServer:
        """A server with the limits of ``config`` (see :class:`PeerConfig`); ``extra`` goes to a subclass.

        Raises:
            ValueError: as :meth:`__init__`.
        """
        return cls(config.run_id, max_inbound_streams=config.max_inbound_streams,
                   max_inbound_streams_per_peer=config.max_inbound_streams_per_peer,
                   max_requests_per_peer_per_s=config.max_requests_per_peer_per_s,
                   request_burst=config.request_burst, serve_timeout_s=config.serve_timeout_s,
                   min_serve_bytes_per_s=config.min_serve_bytes_per_s, request_timeout_s=config.request_timeout_s,
                   allowed=allowed, max_upload_bytes_per_s=None if config.max_upload_mbit is None
                   else mbit_to_bytes_per_s(config.max_upload_mbit), **extra)

    async def attach(self, p2p: P2P) -> None:
        """Register the stream handler on ``p2p`` (a replica of the DHT's daemon)."""
        await p2p.add_binary_stream_handler(handler_name(self.run_id), self._handle)

    def withdraw(self) -> None:
        """Stop serving anything (the peer is leaving): every later request gets ``NOT_FOUND``.

        A fetcher stops asking at once (``NOT_FOUND`` ends its attempts) instead of retrying a ``NOT_READY``
        payload that will never come. Later :meth:`reveal` and ``publish_*`` calls are ignored.
        """
        self._withdrawn = True
        for table in (self._payloads, self._states, self._thetas, self._momenta, self._mixed, self._half,
                      self._int8):
            table.clear()

    @property
    def withdrawn(self) -> bool:
        """True once :meth:`withdraw` was called."""
        return self._withdrawn

    def serve_from(self, round_: int) -> None:
        """Answer ``NOT_FOUND`` (not ``NOT_READY``) for payloads of rounds before ``round_``.

        A peer restarted after a crash continues after the rounds its earlier process committed; their payloads
        died with it. Receivers that fetch one stop at once (``unavailable``) instead of polling ``NOT_READY``
        until their fetch deadline (a SIGKILL right after a commit held every other peer 30 s in that round).
        """
        self._first_round = int(round_)

    def reveal(self, round_: int, payload: bytes, *, digests: bytes | None = None) -> None:
        """Start serving ``payload`` as this peer's update of ``round_``.

        Its chunk digests (``protocol.chunks``, 32 bytes per MiB) are sent ahead of the payload in every answer:
        ``digests`` when given (``chunk_digests(payload)``, computed by the caller off the event loop: SHA-256 over
        the whole payload, seconds at 100 MB on a loaded machine), else computed here, once.
        """
        if self._withdrawn:
            return
        self._payloads[round_] = (payload, chunk_digests(payload) if digests is None else digests)
        for old in sorted(self._payloads)[:-MAX_KEPT_ROUNDS]:
            del self._payloads[old]
            # Gone for good: NOT_FOUND, not NOT_READY. A peer frozen (SIGSTOP) for 60 s woke up in its old round
            # and polled NOT_READY for its whole fetch deadline (30 s) before it caught up (user test).
            self.serve_from(max(old + 1, self._first_round or 0))

    def publish_state(self, state_hash: bytes, state: bytes) -> None:
        """Serve ``state`` (raw fp32 bytes of θ and the outer momentum) under its hash."""
        if self._withdrawn:
            return
        self._states[state_hash] = state
        for old in list(self._states)[:-MAX_KEPT_ROUNDS]:
            del self._states[old]

    def publish_theta(self, round_: int, theta: bytes | memoryview) -> None:
        """Serve ``theta`` (raw little-endian fp32 bytes of our θ at the start of ``round_``, 4·d bytes).

        Version 2: every peer owns its model; others fetch it to mix (clipped gossip compares states of the same
        round, ``["theta", r]``) or to catch up (``["theta", -1]``: the latest). Only the last
        :data:`MAX_KEPT_ROUNDS` are kept.
        """
        if not self._withdrawn:
            _keep(self._thetas, round_, theta)
            self._drop_unserved_conversions()

    def publish_momentum(self, round_: int, momentum: bytes | memoryview) -> None:
        """Serve ``momentum`` (raw little-endian fp32 bytes of our outer momentum at the start of ``round_``).

        Served as ``["momentum", r]`` (``-1``: the latest), beside ``["theta", r]``: mixing moves the outer
        momentum toward the sampled peers' too (``Peer.mix``). Only the last :data:`MAX_KEPT_ROUNDS` are kept.
        """
        if not self._withdrawn:
            _keep(self._momenta, round_, momentum)
            self._drop_unserved_conversions()

    def publish_mixed(self, round_: int, step: int, theta: bytes | memoryview, *, last: bool = False) -> None:
        """Serve ``theta`` (raw fp32 bytes, 4·d) as our θ after ``step`` gossip steps of a multi-step mixing.

        Served as ``["mixed", [round_, step]]`` (``round_`` as in :meth:`publish_theta`: the round the mixed θ
        starts; ``step`` ≥ 1): step s + 1 of the others' mixing moves toward it (``Peer.mix``). With ``last``
        (our mixing is over) it is also the answer for every later step of that round: a peer that sees a larger
        swarm runs more steps (``mixing.gossip_steps``) and gets our final state instead of waiting for a step we
        never run. Only the last :data:`MAX_KEPT_MIXED_ROUNDS` rounds are kept.
        """
        if not self._withdrawn:
            steps = self._mixed.get(round_, {})
            steps[step] = theta
            if last:
                steps[LAST_STEP] = theta
            _keep(self._mixed, round_, steps, keep=MAX_KEPT_MIXED_ROUNDS)
            self._drop_unserved_conversions()

    def publish_unmixed(self, round_: int, theta: bytes | memoryview) -> None:
        """Serve ``theta`` (raw fp32 bytes, 4·d) as our answer to every gossip step of round ``round_``'s mixing.

        For a round in which we do not mix (``swarm.mix_schedule``): a neighbour that mixes gets our post-step θ
        (served as ``["theta", round_]`` too; pass the same bytes object, nothing is copied) at each of its gossip
        steps instead of waiting for states we never compute.
        """
        if not self._withdrawn:
            _keep(self._mixed, round_, {LAST_STEP: theta}, keep=MAX_KEPT_MIXED_ROUNDS)
            self._drop_unserved_conversions()

    def _drop_unserved_conversions(self) -> None:
        """Forget the float16 and int8 forms of states no longer served (dropped after :data:`MAX_KEPT_ROUNDS`).

        Nobody can ask for them any more, and each entry also held its float32 state alive: up to
        :data:`HALF_CACHE` stale states of 4·d + 2·d bytes per precision.
        """
        served = {id(v) for v in (*self._thetas.values(), *self._momenta.values())}
        served.update(id(v) for steps in self._mixed.values() for v in steps.values())
        for table in (self._half, self._int8):
            for key in [k for k, (data, _) in table.items() if id(data) not in served]:
                del table[key]

    def _mixed_state(self, round_: int, step: int) -> bytes | memoryview | None:
        """Our θ after ``step`` (≥ 1) gossip steps of round ``round_``'s mixing, or the final one past its end."""
        steps = self._mixed.get(round_, {})
        if step < 1:
            return None
        if step in steps:
            return steps[step]
        return steps[LAST_STEP] if LAST_STEP in steps and step > max(steps) else None

    @property
    def open_streams(self) -> int:
        """Inbound streams being served now."""
        return self._open

    def serve_limit_s(self, size_bytes: int) -> float:
        """Seconds allowed for writing an answer of ``size_bytes`` bytes (see the class docstring)."""
        return max(self.serve_timeout_s, size_bytes / self.min_serve_bytes_per_s)

    def admit(self, peer: str | None) -> int | None:
        """Decide whether a new stream of ``peer`` (base58, authenticated) is served; take its token if so.

        Returns:
            None to serve it, else the refusal status (:data:`FORBIDDEN` or :data:`BUSY`). The caller of an
            admitted stream must call :meth:`release` when it ends.
        """
        if peer is None or (self.allowed is not None and peer not in self.allowed):
            self.stats.forbidden += 1
            return FORBIDDEN
        if self._open >= self.max_inbound_streams:
            self.stats.busy_global += 1
            return BUSY
        if self._open_by_peer.get(peer, 0) >= self.max_inbound_streams_per_peer:
            self.stats.busy_streams += 1
            return BUSY
        if not self._take_token(peer):
            self.stats.busy_rate += 1
            return BUSY
        self._open += 1
        self._open_by_peer[peer] = self._open_by_peer.get(peer, 0) + 1
        return None

    def release(self, peer: str) -> None:
        """End an admitted stream of ``peer``."""
        self._open -= 1
        left = self._open_by_peer.get(peer, 0) - 1
        if left > 0:
            self._open_by_peer[peer] = left
        else:
            self._open_by_peer.pop(peer, None)

    def _take_token(self, peer: str) -> bool:
        now = self._clock()
        tokens, stamp = self._buckets.pop(peer, (float(self.request_burst), now))
        refill = max(0.0, now - stamp) * self.max_requests_per_peer_per_s
        tokens = min(float(self.request_burst), tokens + refill)
        allowed = tokens >= 1.0
        self._buckets[peer] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_tracked_peers:
            self._buckets.popitem(last=False)
        return allowed

    def _note(self, peer: str | None, what: str, *args: object) -> None:
        """Log a caller's fault: WARNING the first time for this caller and ``what``, DEBUG after."""
        caller = peer or "?"
        key = f"{caller} {what}"
        first = key not in self._warned
        if first:
            self._warned[key] = None
            while len(self._warned) > self.max_tracked_peers:
                self._warned.popitem(last=False)
        else:
            self._warned.move_to_end(key)
        logger.log(logging.WARNING if first else logging.DEBUG, "fetch stream from %s: " + what,
                   caller[-12:], *args)

    async def _handle(self, info: object, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_id = getattr(info, "peer_id", None)
        peer = peer_id.to_base58() if isinstance(peer_id, PeerID) else None
        refusal = self.admit(peer)
        if peer is None or refusal is not None:
            await self._refuse_stream(peer, FORBIDDEN if refusal is None else refusal, reader, writer)
            return
        self.stats.served += 1
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader), self.request_timeout_s)
            except asyncio.TimeoutError:
                self.stats.request_timeouts += 1
                self._note(peer, "no complete request within %.1f s, stream cut", self.request_timeout_s)
                writer.transport.abort()
                return
            status, data = await self._converted(*self._resolve(request))
            limit_s = self.serve_limit_s(sum(len(part) for part in data) if data is not None else 1)
            sender = AnswerSender(writer, self.upload, self._count_sent)
            if not await _write_within(self._write_answer(status, data, sender), limit_s, sender):
                self.stats.serve_timeouts += 1
                self._note(peer, "reader too slow, answer cut after %.1f s", limit_s)
                writer.transport.abort()
                return
            if request is _OVERLONG:
                # Its body was never read; closing with unread input resets the stream, and the reset can
                # overtake the status byte (see _refuse). Only this case waits: a read request has no input left.
                await _discard_briefly(reader)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            logger.debug("fetch from %s ended early: %s", peer[-12:], type(e).__name__)
        except asyncio.CancelledError:
            # The loop is closing (asyncio.run cancels the tasks left at the peer's exit; an upload cap keeps answers
            # in flight). This is the stream's outermost task: ended cancelled, Python 3.11's StreamReaderProtocol
            # callback logged "Exception in callback ... CancelledError" with a traceback for each such stream.
            writer.transport.abort()
        finally:
            self.release(peer)
            writer.close()

    async def _refuse_stream(self, peer: str | None, status: int, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        """Refuse a stream with ``status``; past ``max_inbound_streams`` refusals in progress, drop it."""
        if self._refusing >= self.max_inbound_streams:
            self.stats.refusals_dropped += 1
            self._note(peer, "refused (%s)", "too many refusals in progress: dropped")
            writer.transport.abort()
            writer.close()
            return
        self._note(peer, "refused (%s)", "not on the allow-list" if status == FORBIDDEN else "busy")
        self._refusing += 1
        try:
            await _refuse(status, reader, writer)
        except asyncio.CancelledError:  # the loop is closing: end quietly, as _handle does
            writer.transport.abort()
        finally:
            self._refusing -= 1

    async def _write_answer(self, status: int, data: tuple[bytes | memoryview, ...] | None,
                            sender: AnswerSender) -> None:
        await sender.send(bytes([status]), count=False)
        if data is not None:
            await self._stream(data, sender)
        await sender.writer.drain()

    def _count_sent(self, nbytes: int) -> None:
        self.bytes_sent += nbytes

    async def _converted(self, status: int, data: tuple[bytes | memoryview, ...] | None, precision: str | None
                         ) -> tuple[int, tuple[bytes | memoryview, ...] | None]:
        """``(status, data)``, the state in ``data`` converted to ``precision`` (None: as it is).

        The conversion (d values: seconds of CPU at d = 25M on a loaded machine) runs in a worker thread, so the
        event loop keeps serving the streams in flight: done in the loop, it held a loaded peer's loop up to 5.4 s
        and its readers cut it as too slow (stop 35). Each state is converted once (:data:`HALF_CACHE`), and
        concurrent requests for the same state wait for the one conversion.
        """
        if precision is None or data is None:
            return status, data
        state = data[0]
        table = self._half if precision == HALF else self._int8
        cached = _cached_form(table, state)
        if cached is not None:
            return status, (cached,)
        key = (precision, id(state))
        pending = self._converting.get(key)
        if pending is None:
            convert = _to_half if precision == HALF else _to_int8
            pending = asyncio.ensure_future(asyncio.to_thread(convert, state))
            self._converting[key] = pending
            pending.add_done_callback(lambda _: self._converting.pop(key, None))
        converted = await asyncio.shield(pending)
        _keep_converted(table, state, converted)
        return status, (converted,)

    def _answer(self, request: object) -> tuple[int, tuple[bytes | memoryview, ...] | None]:
        """``(status, body parts)`` for ``request``, any conversion done here, in the caller's thread (tests, tools).

        The stream handler uses :meth:`_resolve` and :meth:`_converted` instead: the conversion off the event loop.
        """
        status, data, precision = self._resolve(request)
        if precision is None or data is None:
            return status, data
        table = self._half if precision == HALF else self._int8
        cached = _cached_form(table, data[0])
        if cached is not None:
            return status, (cached,)
        converted = (_to_half if precision == HALF else _to_int8)(data[0])
        _keep_converted(table, data[0], converted)
        return status, (converted,)

    def _resolve(self, request: object) -> tuple[int, tuple[bytes | memoryview, ...] | None, str | None]:
        """``(status, body parts, precision)`` for ``request``; the parts are written one after the other.

        ``precision`` is :data:`HALF` or :data:`INT8` when the one state in the body is still to be converted to it
        (:meth:`_converted`), else None.
        """
        if isinstance(request, list) and request[:1] == ["payload"] and len(request) in (2, 3):
            keys = [*request[1:], 0][:2]  # [round, first_chunk]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in keys):
                return BAD_REQUEST, None, None
            return (*self._payload_answer(keys[0], keys[1]), None)
        if not (isinstance(request, list) and (len(request) == 2 or (len(request) == 3 and request[2] in (HALF, INT8)
                                                                      and request[0] != "state"))):
            return BAD_REQUEST, None, None
        kind, key = request[0], request[1]
        if self._withdrawn:
            return NOT_FOUND, None, None
        data: bytes | memoryview | None
        if kind == "state" and isinstance(key, bytes):
            data = self._states.get(key)
        elif kind in ("theta", "momentum") and isinstance(key, int) and not isinstance(key, bool):
            table = self._thetas if kind == "theta" else self._momenta
            latest = max(table) if table else None
            data = table.get(latest if key == -1 and latest is not None else key)
        elif kind == "mixed" and _is_round_step(key):
            data = self._mixed_state(key[0], key[1])
        else:
            return BAD_REQUEST, None, None
        if data is None:
            return NOT_FOUND, None, None
        return OK, (data,), (request[2] if len(request) == 3 else None)

    def _payload_answer(self, round_: int, first_chunk: int) -> tuple[int, tuple[bytes | memoryview, ...] | None]:
        """``OK`` with (chunk digests, payload from ``first_chunk`` on); else NOT_READY, NOT_FOUND or BAD_REQUEST.

        ``NOT_FOUND`` once withdrawn, or for a round before :meth:`serve_from`'s or one dropped after
        :data:`MAX_KEPT_ROUNDS` later reveals; ``BAD_REQUEST`` when
        ``first_chunk`` is outside ``[0, n]`` for the payload's n chunks.
        """
        if self._withdrawn:
            return NOT_FOUND, None
        served = self._payloads.get(round_)
        if served is None:
            lost = self._first_round is not None and round_ < self._first_round
            return (NOT_FOUND if lost else NOT_READY), None
        payload, digests = served
        if not 0 <= first_chunk <= chunk_count(len(payload)):
            return BAD_REQUEST, None
        self.stats.payloads_served += 1
        return OK, (digests, memoryview(payload)[first_chunk * PAYLOAD_CHUNK_BYTES:])

    async def _stream(self, data: tuple[bytes | memoryview, ...], sender: AnswerSender) -> None:
        """Write the answer's parts after the ``OK`` status byte with ``sender`` (which applies the upload cap)."""
        for part in data:
            await sender.send(part)


_V = TypeVar("_V")


def _is_round_step(key: object) -> TypeGuard[list[int]]:
    """``[round, step]``: two ints (not bools), as a ``["mixed", ...]`` request's key."""
    return (isinstance(key, list) and len(key) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in key))


class AnswerSender:
    """Writes one answer, through the server's upload bucket if it has one, and times the waits for tokens.

    Without a bucket it writes :data:`CHUNK_BYTES` at a time; with one, pieces of ``limiter.piece_bytes``, each
    after its tokens. ``count`` is told the body bytes written (after each drain).
    """

    def __init__(self, writer: asyncio.StreamWriter, limiter: UploadLimiter | None,
                 count: Callable[[int], None]) -> None:
        self.writer = writer
        self.limiter = limiter
        self._count = count
        self._waited_s = 0.0
        self._waiting_since: float | None = None

    def throttled_s(self, now: float) -> float:
        """Seconds this answer has spent waiting for upload tokens up to ``now`` (``time.monotonic``)."""
        ongoing = now - self._waiting_since if self._waiting_since is not None else 0.0
        return self._waited_s + ongoing

    async def send(self, data: bytes | memoryview, *, count: bool = True) -> None:
        """Write ``data`` and drain; with ``count``, add its length to the server's ``bytes_sent``."""
        view = memoryview(data)
        step = CHUNK_BYTES if self.limiter is None else self.limiter.piece_bytes
        for start in range(0, len(view), step):
            piece = view[start:start + step]
            if self.limiter is not None:
                self._waiting_since = time.monotonic()
                try:
                    await self.limiter.acquire(len(piece))
                finally:
                    self._waited_s += time.monotonic() - self._waiting_since
                    self._waiting_since = None
            self.writer.write(piece)
            await self.writer.drain()
            if count:
                self._count(len(piece))


async def _write_within(write: Coroutine[Any, Any, None], limit_s: float, sender: AnswerSender) -> bool:
    """Run ``write``; cancel it once it has taken ``limit_s`` seconds plus its waits for upload tokens.

    Returns:
        True if it finished in time (its exceptions propagate), False if it was cut.
    """
    task = asyncio.ensure_future(write)
    started = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            left = started + limit_s + sender.throttled_s(now) - now
            if left <= 0:
                return False
            done, _ = await asyncio.wait({task}, timeout=left)
            if done:
                task.result()
                return True
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _refuse(status: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Write one refusal status byte, discard the request until the caller closes, then close.

    It takes at most :data:`REFUSAL_TIMEOUT_S` seconds and reads at most ``4 + MAX_REQUEST_BYTES`` bytes.

    Reading the request before closing matters: closing a libp2p stream with unread input resets it, and
    the reset can overtake the status byte, so the caller would see a broken stream instead of the refusal.
    """
    try:
        await asyncio.wait_for(_refuse_unbounded(status, reader, writer), REFUSAL_TIMEOUT_S)
    except (asyncio.TimeoutError, ConnectionError):
        writer.transport.abort()
    finally:
        writer.close()


async def _refuse_unbounded(status: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(bytes([status]))
    await writer.drain()
    await _discard_input(reader)


async def _discard_input(reader: asyncio.StreamReader) -> None:
    """Read and drop what is left of a request (at most ``4 + MAX_REQUEST_BYTES`` bytes), until EOF."""
    left = 4 + MAX_REQUEST_BYTES
    while left > 0:
        chunk = await reader.read(left)
        if not chunk:
            return
        left -= len(chunk)


#: How long the server drains the unread body of an over-long request before closing, in seconds: enough
#: for bytes already in flight; a caller that keeps the stream open is not waited for.
OVERLONG_DRAIN_S = 0.1


async def _discard_briefly(reader: asyncio.StreamReader) -> None:
    """:func:`_discard_input` for at most :data:`OVERLONG_DRAIN_S`; then the stream is simply closed."""
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        await asyncio.wait_for(_discard_input(reader), OVERLONG_DRAIN_S)


#: What :func:`_read_request` returns for a request whose declared length exceeds ``MAX_REQUEST_BYTES``.
_OVERLONG = object()


async def _read_request(reader: asyncio.StreamReader) -> object:
    header = await reader.readexactly(4)
    length = int.from_bytes(header, "big")
    if length > MAX_REQUEST_BYTES:
        return _OVERLONG
    body = await reader.readexactly(length)
    try:
        return msgpack.unpackb(body, raw=False, max_bin_len=64, max_str_len=16, max_array_len=3,
                               max_map_len=0, max_ext_len=0)
    except Exception:  # noqa: BLE001 - a malformed request gets BAD_REQUEST
        return None


def _to_half(data: bytes | memoryview) -> bytes:
    """``data`` (raw little-endian float32) as little-endian float16, round to nearest.

    Our states are finite float32; a value beyond float16's range (±65504) becomes ±inf, which the asking
    peer rejects as non-finite (it asks for float16 only while its own θ is within range).
    """
    return np.frombuffer(data, dtype="<f4").astype("<f2").tobytes()


def _to_int8(data: bytes | memoryview) -> bytes:
    """``data`` (raw little-endian float32, d values) in the ``int8`` codec, 4·⌈d/1024⌉ + d bytes.

    ``protocol.states.encode_state`` (the update codec's encoder: one absmax scale per 1024 values).
    """
    from p2p_guard.protocol.states import encode_state  # torch: only a server asked for int8 needs it

    return encode_state(data, INT8)


def _cached_form(table: OrderedDict[int, tuple[bytes | memoryview, bytes]], data: bytes | memoryview) -> bytes | None:
    """The converted form of ``data`` kept in ``table`` (by identity), or None."""
    cached = table.get(id(data))
    return cached[1] if cached is not None and cached[0] is data else None


def _keep_converted(table: OrderedDict[int, tuple[bytes | memoryview, bytes]], data: bytes | memoryview,
                    converted: bytes) -> None:
    """Keep ``converted`` in ``table`` by the identity of ``data`` (the latest :data:`HALF_CACHE` states)."""
    table[id(data)] = (data, converted)
    table.move_to_end(id(data))
    while len(table) > HALF_CACHE:
        table.popitem(last=False)


class WireCounter:
    """Bytes a peer read off the wire as a fetching client: the receive-side twin of ``PayloadServer.bytes_sent``.

    ``received`` counts the answer bodies read by the :func:`fetch` and :func:`fetch_payload` calls it is passed to
    (``wire=``): payloads with their chunk digest lists (32 B per 1 MiB chunk) and
    states, as read, every answer that was cut, failed, rejected or asked again included; no status bytes,
    requests, DHT or libp2p framing. Bytes, a Python int (never wraps).
    """

    def __init__(self) -> None:
        """Start at 0 bytes."""
        self.received = 0

    def add(self, nbytes: int) -> None:
        """Count ``nbytes`` more bytes read."""
        self.received += nbytes


@dataclass(frozen=True)
class FetchResult:
    """What came back from a fetch.

    Attributes:
        status: :data:`OK`, :data:`NOT_READY`, :data:`NOT_FOUND`, :data:`BAD_REQUEST`, :data:`BUSY` (over a
            limit of the server: retry later), :data:`FORBIDDEN` (not on its allow-list), :data:`TOO_SLOW`
            (the server stalled or sent slower than the floor: the answer was cut while reading), or -1 when
            the stream failed otherwise (peer unreachable, closed early, ``timeout_s`` reached), or
            :data:`BAD_DATA` (:func:`fetch_payload` only: the bytes failed a check, see ``rejected``).
        data: the bytes read after ``OK``, a bytearray (:func:`fetch`: at most ``max_bytes + 1`` bytes;
            :func:`fetch_payload`: the verified payload, of exactly the declared size), else None.
        detail: a short human-readable description of a failure.
        rejected: with :data:`BAD_DATA`, why (``DIGEST_MISMATCH``, ``OVERSIZE``, ``DECODE_ERROR``).
    """

    status: int
    data: bytes | bytearray | None = None
    detail: str = ""
    rejected: Rejected | None = None


async def fetch(p2p: P2P, peer: PeerID, run_id: str, request: list[object], *, max_bytes: int,
                timeout_s: float, idle_timeout_s: float = DEFAULT_FETCH_IDLE_TIMEOUT_S,
                min_bytes_per_s: int = DEFAULT_MIN_FETCH_BYTES_PER_S, wire: WireCounter | None = None) -> FetchResult:
    """Ask ``peer`` for a payload or a state and read at most ``max_bytes + 1`` bytes of the answer.

    Reading stops at the first byte past ``max_bytes``: the caller sees ``len(data) > max_bytes`` and rejects
    the answer as oversized without ever buffering more.

    The answer is also cut while it is read, with status :data:`TOO_SLOW`, when the server is too slow.
    With t the seconds since the request was sent and ``received`` the bytes read after the status byte:

    - idle: one wait for the next bytes (the status byte or a chunk) lasts longer than ``idle_timeout_s``
      (with no body bytes yet, this and the rate rule coincide);
    - rate: ``t > idle_timeout_s + received / min_bytes_per_s`` (the body arrives slower than
      ``min_bytes_per_s`` on average, after an allowance of ``idle_timeout_s``).

    So a server that trickles or stalls (slowloris) costs at most
    ``min(timeout_s, idle_timeout_s + (max_bytes + 1) / min_bytes_per_s)`` seconds and ``max_bytes + 1``
    bytes of memory.

    Args:
        p2p: our P2P replica.
        peer: the sender's PeerID.
        run_id: run name (selects the handler).
        request: ``["payload", round]`` or ``["state", hash]``.
        max_bytes: the size the signed envelope (or the state hash's model) implies, in bytes.
        timeout_s: limit for the whole exchange (open, request, status byte, body), in seconds; reaching
            it gives status -1.
        idle_timeout_s: longest wait for the next bytes of the answer, in seconds (see above).
        min_bytes_per_s: slowest average body rate accepted after ``idle_timeout_s``, in bytes per second.
        wire: counts the answer bytes read, cut answers included (None: not counted).

    Returns:
        A :class:`FetchResult`; never raises on network failure.

    Raises:
        ValueError: ``idle_timeout_s`` or ``min_bytes_per_s`` is not finite and > 0 (a local bug).
    """
    pace = _make_pace(idle_timeout_s, min_bytes_per_s, max_bytes, wire, timeout_s)
    try:
        return await asyncio.wait_for(_fetch(p2p, peer, run_id, request, max_bytes, pace), timeout_s)
    except _TooSlow as e:
        return FetchResult(TOO_SLOW, detail=str(e))
    except (asyncio.TimeoutError, _DeadlineReached):
        return FetchResult(-1, detail=f"{DEADLINE_DETAIL} {timeout_s:.1f} s")
    except Exception as e:  # noqa: BLE001 - any transport failure is reported, not raised
        return FetchResult(-1, detail=failure_detail(e))


class _TooSlow(Exception):
    """Raised inside :func:`fetch` when the server stalls or sends below the rate floor."""


class _DeadlineReached(Exception):
    """Raised inside :func:`fetch` when its ``timeout_s`` has passed (reported as status -1, as a timeout is).

    The fetch does not rely on ``asyncio.wait_for`` alone to stop at ``timeout_s``: on Python 3.11 a cancellation
    that lands as an inner ``wait_for`` completes is swallowed (CPython gh-86296, fixed in 3.12), and the fetch
    then read on until the rate floor cut it, 5 s instead of 1.5 s (CI, stop 34). Every wait inside is bounded
    by the time left instead.
    """


def failure_detail(error: BaseException, limit: int = 200) -> str:
    """One line naming a transport failure, at most ``limit`` characters.

    ``Type: message`` with every run of whitespace made one space: the daemon's dial errors span several lines,
    and a rejection's detail goes into one log line (README: one log line per line) and the event file.
    """
    return " ".join(f"{type(error).__name__}: {error}".split())[:limit]


def _make_pace(idle_timeout_s: float, min_bytes_per_s: float, max_bytes: int,
               wire: WireCounter | None = None, timeout_s: float = float("inf")) -> _Pace:
    """The read limits of one fetch; ValueError unless both limits are finite and > 0 (a local bug).

    ``timeout_s`` (seconds from now) sets the pace's ``deadline``, a ``time.monotonic()`` value.
    """
    for name, value in (("idle_timeout_s", idle_timeout_s), ("min_bytes_per_s", min_bytes_per_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"{name} must be finite and > 0; got {name}={value!r}")
    return _Pace(float(idle_timeout_s), float(min_bytes_per_s), max_bytes, wire,
                 deadline=time.monotonic() + float(timeout_s))


@dataclass
class _Pace:
    """The read limits of one :func:`fetch` (see its docstring); ``started`` is set once the request is sent.

    ``wire``, when given, counts every answer byte the fetch reads (:meth:`note`). ``deadline`` is the
    ``time.monotonic()`` value at which the whole fetch ends: every wait is bounded by the time left to it, and
    one that reaches it raises :class:`_DeadlineReached`.
    """

    idle_timeout_s: float
    min_bytes_per_s: float
    max_bytes: int
    wire: WireCounter | None = None
    started: float = 0.0
    deadline: float = float("inf")

    def left_s(self) -> float:
        """Seconds left before ``deadline``; raises :class:`_DeadlineReached` when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _DeadlineReached
        return left

    @staticmethod
    def _raise_if_deadline(left_s: float, other_s: float) -> None:
        """Raise :class:`_DeadlineReached` if ``left_s`` (time left to the deadline) bound a wait that timed out.

        The wait lasted ``min(left_s, other_s)`` seconds.
        """
        if left_s <= other_s:
            raise _DeadlineReached

    def note(self, nbytes: int) -> None:
        """Count ``nbytes`` answer bytes read into ``wire``, if any."""
        if self.wire is not None:
            self.wire.add(nbytes)

    async def open_and_send(self, p2p: P2P, peer: PeerID, run_id: str, request: list[object]
                            ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Open a stream to ``peer``'s fetch handler and send ``request``; set ``started`` once it is sent.

        The open is bounded by ``idle_timeout_s``: a frozen peer (SIGSTOP, a laptop asleep) keeps its connections
        open, so the daemon's protocol negotiation waits on it with no bound of its own, and the whole fetch used
        to wait its ``timeout_s`` (30 s) or until the peer resumed. Not even opening a stream is no answer at all.

        Raises:
            _TooSlow: the stream did not open within ``idle_timeout_s`` (detail with :data:`NO_ANSWER_DETAIL`).
            Exception: any transport failure of the open or the write (the caller reports it as status -1).
        """
        body = msgpack.packb(request, use_bin_type=True)
        left_s = self.left_s()
        try:
            _, reader, writer = await asyncio.wait_for(p2p.call_binary_stream_handler(peer, handler_name(run_id)),
                                                       min(self.idle_timeout_s, left_s))
        except asyncio.TimeoutError:
            self._raise_if_deadline(left_s, self.idle_timeout_s)
            raise _TooSlow(f"{NO_ANSWER_DETAIL} within {self.idle_timeout_s:.1f} s (the stream did not "
                           "open)") from None
        try:
            writer.write(len(body).to_bytes(4, "big") + body)
            await writer.drain()
        except BaseException:
            writer.close()
            raise
        self.started = time.monotonic()
        return reader, writer

    async def read_status(self, reader: asyncio.StreamReader) -> int:
        """Read the status byte within ``idle_timeout_s``; raise :class:`_TooSlow` if it does not come.

        Raises:
            _DeadlineReached: the fetch's ``deadline`` came first.
        """
        left_s = self.left_s()
        try:
            return (await asyncio.wait_for(reader.readexactly(1), min(self.idle_timeout_s, left_s)))[0]
        except asyncio.TimeoutError:
            self._raise_if_deadline(left_s, self.idle_timeout_s)
            raise _TooSlow(f"{NO_ANSWER_DETAIL} within {self.idle_timeout_s:.1f} s") from None

    async def read_body(self, reader: asyncio.StreamReader, size: int, received: int) -> bytes:
        """Read up to ``size`` bytes within both limits, ``received`` body bytes so far; else :class:`_TooSlow`.

        Raises:
            _DeadlineReached: the fetch's ``deadline`` came first.
        """
        elapsed = time.monotonic() - self.started
        rate_left = self.idle_timeout_s + received / self.min_bytes_per_s - elapsed
        if rate_left <= 0:
            raise _TooSlow(self._rate_detail(received, elapsed))
        left_s = self.left_s()
        try:
            return await asyncio.wait_for(reader.read(size), min(self.idle_timeout_s, rate_left, left_s))
        except asyncio.TimeoutError:
            self._raise_if_deadline(left_s, min(self.idle_timeout_s, rate_left))
            if rate_left <= self.idle_timeout_s:
                raise _TooSlow(self._rate_detail(received, time.monotonic() - self.started)) from None
            raise _TooSlow(f"{STALL_DETAIL} {self.idle_timeout_s:.1f} s after {received} of {self.max_bytes} "
                           "bytes") from None

    def _rate_detail(self, received: int, elapsed: float) -> str:
        return (f"{received} of {self.max_bytes} bytes in {elapsed:.1f} s, below "
                f"{self.min_bytes_per_s:.0f} B/s after a {self.idle_timeout_s:.1f} s allowance")


async def _fetch(p2p: P2P, peer: PeerID, run_id: str, request: list[object], max_bytes: int,
                 pace: _Pace) -> FetchResult:
    reader, writer = await pace.open_and_send(p2p, peer, run_id, request)
    try:
        status = await pace.read_status(reader)
        if status != OK:
            return FetchResult(status)
        body = bytearray()  # grown in place: not a list of chunks joined into a second copy of the answer
        received = 0
        while received <= max_bytes:
            chunk = await pace.read_body(reader, min(CHUNK_BYTES, max_bytes + 1 - received), received)
            if not chunk:
                break
            pace.note(len(chunk))
            body += chunk
            received += len(chunk)
        if received < max_bytes:
            # A stream that ends early is a transport failure (retried), not evidence against the sender.
            return FetchResult(-1, detail=f"stream ended after {received} of {max_bytes} bytes")
        return FetchResult(OK, body)
    finally:
        writer.close()


async def fetch_payload(p2p: P2P, peer: PeerID, run_id: str, round_: int, verifier: ChunkVerifier, *,
                        timeout_s: float, idle_timeout_s: float = DEFAULT_FETCH_IDLE_TIMEOUT_S,
                        min_bytes_per_s: int = DEFAULT_MIN_FETCH_BYTES_PER_S,
                        wire: WireCounter | None = None) -> FetchResult:
    """Stream ``peer``'s payload of ``round_`` through ``verifier``, from its first unverified chunk on.

    Sends ``["payload", round_, verifier.next_chunk]`` and reads the answer: the n·32-byte digest list (checked
    against the committed root), then the chunks, each verified the moment its last byte arrives and written
    in place into the verifier's one buffer of the declared size. So at most the declared size plus one read
    (:data:`CHUNK_BYTES`) is held, and a bad sender is cut at its first bad chunk. Verified chunks stay in
    ``verifier`` when the stream breaks or ``timeout_s`` passes, so the next call resumes after them.

    The same read limits as :func:`fetch` cut a slow sender (status :data:`TOO_SLOW`): an idle wait over
    ``idle_timeout_s``, or a body (digest list included) slower than ``min_bytes_per_s`` on average after an
    allowance of ``idle_timeout_s``; and always ``timeout_s``. After the last declared byte it waits up to
    :data:`EXTRA_BYTES_WAIT_S` for the stream to end: a byte past the declared size is ``OVERSIZE``.

    Args:
        p2p: our P2P replica.
        peer: the sender's PeerID.
        run_id: run name (selects the handler).
        round_: the round of the payload.
        verifier: the sender's committed root and size (``ChunkVerifier(env.digest, env.payload_bytes)``), the
            same object across the retries of one round.
        timeout_s: limit for this exchange, in seconds (status -1 when reached; verified chunks are kept).
        idle_timeout_s: longest wait for the next bytes of the answer, in seconds.
        min_bytes_per_s: slowest average body rate accepted after ``idle_timeout_s``, in bytes per second.
        wire: counts the answer bytes read (digest list and chunks), cut answers included (None: not counted).

    Returns:
        A :class:`FetchResult`: ``OK`` with the verified payload (a bytearray, no copy), :data:`BAD_DATA` with
        the ``Rejected`` reason, a refusal status, :data:`TOO_SLOW`, or -1 (transport failure: retry, it
        resumes). Never raises on network failure or hostile bytes.

    Raises:
        ValueError: ``idle_timeout_s`` or ``min_bytes_per_s`` is not finite and > 0 (a local bug).
    """
    verifier.restart()
    expected = verifier.digests_bytes + verifier.payload_bytes - verifier.resume_offset()
    pace = _make_pace(idle_timeout_s, min_bytes_per_s, expected, wire, timeout_s)
    try:
        return await asyncio.wait_for(_fetch_payload(p2p, peer, run_id, round_, verifier, pace), timeout_s)
    except _TooSlow as e:
        return FetchResult(TOO_SLOW, detail=str(e))
    except (asyncio.TimeoutError, _DeadlineReached):
        return FetchResult(-1, detail=f"no complete answer within {timeout_s:.1f} s ({verifier.next_chunk} of "
                                      f"{verifier.chunks} chunks verified)")
    except Exception as e:  # noqa: BLE001 - any transport failure is reported, not raised
        return FetchResult(-1, detail=failure_detail(e))


async def _fetch_payload(p2p: P2P, peer: PeerID, run_id: str, round_: int, verifier: ChunkVerifier,
                         pace: _Pace) -> FetchResult:
    reader, writer = await pace.open_and_send(p2p, peer, run_id, ["payload", round_, verifier.next_chunk])
    try:
        status = await pace.read_status(reader)
        if status != OK:
            return FetchResult(status)
        digests = bytearray()
        while len(digests) < verifier.digests_bytes:
            piece = await pace.read_body(reader, verifier.digests_bytes - len(digests), len(digests))
            if not piece:
                return FetchResult(-1, detail=f"stream ended in the digest list ({len(digests)} of "
                                              f"{verifier.digests_bytes} bytes)")
            pace.note(len(piece))
            digests += piece
        checked = verifier.check_digests(digests)
        if isinstance(checked, Rejected):
            return FetchResult(BAD_DATA, detail=checked.detail, rejected=checked)
        received = len(digests)
        while not verifier.complete:
            left = verifier.payload_bytes - verifier.received
            piece = await pace.read_body(reader, min(CHUNK_BYTES, left + 1), received)
            if not piece:
                return FetchResult(-1, detail=f"stream ended after {verifier.received} of {verifier.payload_bytes}"
                                              " bytes")
            pace.note(len(piece))
            received += len(piece)
            checked = verifier.feed(piece)
            if isinstance(checked, Rejected):
                return FetchResult(BAD_DATA, detail=checked.detail, rejected=checked)
        extra = await _extra_bytes(reader, min(pace.idle_timeout_s, EXTRA_BYTES_WAIT_S))
        pace.note(len(extra))
        if extra:
            rejected = verifier.feed(extra)
            if isinstance(rejected, Rejected):
                return FetchResult(BAD_DATA, detail=rejected.detail, rejected=rejected)
        payload = verifier.payload()
        if isinstance(payload, Rejected):  # not reachable once complete; kept so that no path raises
            return FetchResult(BAD_DATA, detail=payload.detail, rejected=payload)
        return FetchResult(OK, payload)
    finally:
        writer.close()


async def _extra_bytes(reader: asyncio.StreamReader, wait_s: float) -> bytes:
    """At most one byte after the declared end: b"" at EOF or when none comes within ``wait_s`` seconds."""
    try:
        return await asyncio.wait_for(reader.read(1), wait_s)
    except asyncio.TimeoutError:
        return b""


def _keep(table: dict[int, _V], round_: int, data: _V, *, keep: int = MAX_KEPT_ROUNDS) -> None:
    """Store ``data`` under ``round_`` and drop all but the newest ``keep`` rounds (:data:`MAX_KEPT_ROUNDS`)."""
    table[round_] = data
    for old in sorted(table)[:-keep]:
        del table[old]
