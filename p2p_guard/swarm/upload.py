"""A peer's upload cap (``max_upload_mbit``): one token bucket shared by every stream its server writes.

Like a BitTorrent client's upload limit, the cap bounds the bytes per second that the payload/state server
(``swarm.transport.PayloadServer``) writes across all its streams together: payloads, θ and momentum states
(mixing, catch-up), and each answer's status byte. Refusals (one status byte each, at most
``max_inbound_streams`` in progress) are not throttled, so that a refused caller learns it at once.

The bucket (:class:`UploadLimiter`) holds at most ``rate · burst_s`` bytes (0.25 s of rate by default), so a
burst after a quiet spell is bounded; a writer waits for its bytes with one sleep of exactly the missing
tokens' time (no polling), and writers queue in FIFO order behind one asyncio lock, so concurrent streams get
equal shares of the rate. A stream writes pieces of at most :data:`PIECE_BYTES` bytes, so with k streams
sharing a rate R each gets a piece every ``k · piece / R`` seconds.

**Receivers' slow-sender cut-offs.** A receiver (``transport.fetch``) cuts an answer that stalls for
``fetch_idle_timeout_s`` (I) or that is not complete ``I + received / min_fetch_bytes_per_s`` (m) seconds after
the request, and gives up at its deadline ``fetch_timeout_s`` (T). A server capped at R bytes/s that serves a
b-byte answer to k receivers at once gives each s = R / k, in pieces of p = min(:data:`PIECE_BYTES`, b), so a
stream has received at least ``s·t − p`` bytes at time t. The defaults then hold when

    R ≥ k · max(b / T, b / (I + (b − p) / m), p / I)        (:func:`min_upload_bytes_per_s`)

- deadline: the answer takes ``b / s ≤ T``;
- rate rule: ``t ≤ I + (s·t − p) / m`` over the whole transfer; for s < m the last instant, t = b / s, is the
  tightest, which gives the middle term (below m: an answer short enough to finish inside the allowance may
  be sent slower than the floor); for s ≥ m it always holds;
- idle: a stream's gap between pieces is ``p / s ≤ I``.

For large answers the middle term tends to m, so ``R ≥ k · max(m, b / T)`` is a simpler, slightly stronger form.

The server's own slow-reader limit (``serve_timeout_s``, ``min_serve_bytes_per_s``) does not count the time a
stream waits for tokens, so a cap never makes the server cut its own readers. The bound ignores request
latency and ``NOT_READY`` polls (a receiver asking before the reveal loses part of T): leave headroom. A
peer warns at start-up when its cap is below the bound for its own payload size and fan-out
(:func:`upload_cap_warning`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from p2p_guard.swarm.pacing import deadline_ceiling_s

if TYPE_CHECKING:
    from p2p_guard.swarm.config import PeerConfig

__all__ = [
    "DEFAULT_BURST_S",
    "PIECE_BYTES",
    "UploadLimiter",
    "mbit_to_bytes_per_s",
    "min_upload_bytes_per_s",
    "upload_cap_warning",
    "upload_receivers",
]

#: Depth of the bucket, in seconds of rate: the largest burst after a quiet spell.
DEFAULT_BURST_S = 0.25
#: Largest piece one throttled write takes from the bucket, in bytes (16 KiB).
PIECE_BYTES = 16 * 1024
#: Bytes per second in one Mbit/s (10^6 bits, as network rates and BitTorrent clients count them).
BYTES_PER_S_PER_MBIT = 1_000_000 / 8


def mbit_to_bytes_per_s(mbit: float) -> float:
    """``mbit`` Mbit/s (10^6 bits per second) in bytes per second (÷ 8 × 10^6)."""
    return mbit * BYTES_PER_S_PER_MBIT


class UploadLimiter:
    """A token bucket of bytes shared by every stream of one server (asyncio; no busy waiting).

    ``tokens = min(capacity, tokens + rate · Δt)`` with ``capacity = max(1, rate · burst_s)`` bytes; it starts
    full. :meth:`acquire` takes n tokens, first sleeping ``(n − tokens) / rate`` seconds if fewer are there.
    Callers are served one at a time in arrival order (an ``asyncio.Lock`` is FIFO), so k streams writing
    pieces of the same size share the rate equally. One limiter belongs to one event loop.
    """

    def __init__(self, bytes_per_s: float, *, burst_s: float = DEFAULT_BURST_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Create a full bucket.

        Args:
            bytes_per_s: The rate, in bytes per second (finite, > 0).
            burst_s: Depth of the bucket in seconds of rate (finite, > 0).
            clock: Monotonic time source in seconds (tests pass a fake one).
            sleep: Coroutine function sleeping that many seconds (tests pass one that moves the fake clock).

        Raises:
            ValueError: ``bytes_per_s`` or ``burst_s`` not finite and > 0.
        """
        for name, value in (("bytes_per_s", bytes_per_s), ("burst_s", burst_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be finite and > 0; got {name}={value!r}")
        self.rate = float(bytes_per_s)
        self.capacity = max(1.0, self.rate * float(burst_s))
        #: Largest piece a stream should ask for at once, in bytes (≤ :data:`PIECE_BYTES` and ≤ capacity).
        self.piece_bytes = max(1, min(PIECE_BYTES, int(self.capacity)))
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.capacity
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def available(self) -> float:
        """Tokens (bytes) in the bucket now, after refilling."""
        self._refill()
        return self._tokens

    async def acquire(self, nbytes: int) -> None:
        """Wait until ``nbytes`` tokens are there, then take them.

        Args:
            nbytes: Bytes about to be written (1 ≤ nbytes ≤ ``capacity``; split larger writes into pieces of
                :attr:`piece_bytes`).

        Raises:
            ValueError: ``nbytes`` is not an int in ``[1, capacity]``.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 1 <= nbytes <= self.capacity:
            raise ValueError(f"nbytes must be an int in [1, {self.capacity:.0f}]; got nbytes={nbytes!r}")
        async with self._lock:
            self._refill()
            while self._tokens < nbytes:
                await self._sleep((nbytes - self._tokens) / self.rate)
                self._refill()
            self._tokens -= nbytes

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + max(0.0, now - self._stamp) * self.rate)
        self._stamp = now


def min_upload_bytes_per_s(payload_bytes: int, receivers: int, *, fetch_timeout_s: float,
                           fetch_idle_timeout_s: float, min_fetch_bytes_per_s: float) -> float:
    """The smallest upload cap at which receivers with these limits do not cut an honest capped sender.

    ``k · max(b / T, b / (I + (b − p) / m), p / I)`` with p = min(:data:`PIECE_BYTES`, b): each of k receivers
    served at once gets R / k, which must finish within the deadline T and within the rate rule's allowance,
    and never leave a stream idle for I (module docstring). Request latency and ``NOT_READY`` polls are not
    counted: leave headroom.

    Args:
        payload_bytes: b, the size of one answer, in bytes (≥ 0; 0 gives 0).
        receivers: k, receivers served at once (≥ 0; 0 gives 0).
        fetch_timeout_s: T, the receivers' deadline for the answer, in seconds (> 0).
        fetch_idle_timeout_s: I, the receivers' idle timeout and rate allowance, in seconds (> 0).
        min_fetch_bytes_per_s: m, the receivers' rate floor, in bytes per second (> 0).

    Returns:
        The cap in bytes per second.

    Raises:
        ValueError: a negative size or count, or a non-positive deadline, timeout or floor.
    """
    if payload_bytes < 0 or receivers < 0:
        raise ValueError(f"payload_bytes and receivers must be >= 0; got {payload_bytes!r}, {receivers!r}")
    if not (fetch_timeout_s > 0 and fetch_idle_timeout_s > 0 and min_fetch_bytes_per_s > 0):
        raise ValueError(f"fetch_timeout_s, fetch_idle_timeout_s and min_fetch_bytes_per_s must be > 0; got "
                         f"{fetch_timeout_s!r}, {fetch_idle_timeout_s!r}, {min_fetch_bytes_per_s!r}")
    if payload_bytes == 0:
        return 0.0
    b, piece = float(payload_bytes), float(min(PIECE_BYTES, payload_bytes))
    allowance = fetch_idle_timeout_s + (b - piece) / min_fetch_bytes_per_s
    return receivers * max(b / fetch_timeout_s, b / allowance, piece / fetch_idle_timeout_s)


def upload_receivers(config: PeerConfig, wanted: int) -> int:
    """Receivers served at once when each of the others asks ``wanted`` peers: ``min(wanted, num_peers − 1)``.

    Every peer samples uniformly, so a sender is asked by ``wanted`` others on average (more by chance).
    ``num_peers`` 1 (the intended swarm size is not given) counts as unknown: ``wanted``.
    """
    return wanted if config.num_peers <= 1 else min(wanted, config.num_peers - 1)


def upload_cap_warning(
    config: PeerConfig, numel: int, shapes: tuple[tuple[int, ...], ...] | None = None
) -> str | None:
    """One line saying that ``config.max_upload_mbit`` is below :func:`min_upload_bytes_per_s`, else None.

    Two loads are checked, the larger bound wins: the payload of ``config.codec`` (``expected_payload_bytes``)
    to ``fanout`` receivers within the payload's largest deadline, ``max(fetch_timeout_s, fetch_idle_timeout_s +
    b / min_fetch_bytes_per_s)`` (``swarm.pacing``), and, with mixing on, θ in ``mix_precision`` to ``mix_peers``
    receivers within the same deadline of its size (θ and momentum are fetched one after the other; 2·d bytes
    each with ``mix_precision`` fp16, the default, 4·⌈d/1024⌉ + d with int8; paced like a payload since
    ``Peer._fetch_vector`` took its deadline from ``swarm.pacing``); the receivers' limits taken to be ours. Counts
    per :func:`upload_receivers`.

    Args:
        config: The peer's settings.
        numel: d, the model's parameter count.
        shapes: the model's parameter shapes (a ``dense=head`` codec's size depends on them).

    Raises:
        ValueError: ``numel`` negative, the codec unknown, or a ``dense=head`` codec without ``shapes``
            (``expected_payload_bytes``).
    """
    if config.max_upload_mbit is None:
        return None
    from p2p_guard.protocol.codecs import expected_payload_bytes

    def deadline(size: int) -> float:
        # a payload's or a state's deadline grows with its size and its sender's measured rate up to this
        return deadline_ceiling_s(size, fetch_timeout_s=config.fetch_timeout_s,
                                  idle_timeout_s=config.fetch_idle_timeout_s,
                                  min_bytes_per_s=config.min_fetch_bytes_per_s)

    payload = expected_payload_bytes(config.codec, numel, shapes)
    loads = [(f"{config.codec} payloads", payload, upload_receivers(config, config.fanout), deadline(payload))]
    if config.mix_every > 0:
        from p2p_guard.protocol.states import state_bytes

        state = state_bytes(config.mix_precision, numel)
        loads.append((f"{config.mix_precision} states (mixing)", state, upload_receivers(config, config.mix_peers),
                      deadline(state)))
    need, what, size, k = max((min_upload_bytes_per_s(b, k, fetch_timeout_s=t,
                                                      fetch_idle_timeout_s=config.fetch_idle_timeout_s,
                                                      min_fetch_bytes_per_s=config.min_fetch_bytes_per_s),
                               what, b, k) for what, b, k, t in loads)
    cap = mbit_to_bytes_per_s(config.max_upload_mbit)
    if cap >= need:
        return None
    return (f"max_upload_mbit={config.max_upload_mbit:g} is below {need / BYTES_PER_S_PER_MBIT:.3g} Mbit/s, the "
            f"least at which receivers keep up with {size:,}-byte {what} to {k} at once "
            f"(docs/networking.md, upload cap); they may cut this peer as too slow")
