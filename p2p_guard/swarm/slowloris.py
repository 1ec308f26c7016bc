"""The network side of the ``slowloris`` wire attack (:class:`p2p_guard.attacks.wire.Slowloris`).

Only a simulated adversarial peer runs this code; ``swarm.peer`` selects it with :func:`server_for` and
:func:`start_slow_client`, which give an honest peer the plain :class:`PayloadServer` and no client.

- :class:`TricklingPayloadServer` is the sender side: a :class:`PayloadServer` whose :meth:`_stream` hook
  writes the answer's first ``head_bytes`` at once and then ``bytes_per_s`` bytes per second, and which never
  cuts a stream itself before :data:`TRICKLE_HOLD_S`. Honest fetchers must cut it while reading
  (``transport.fetch``: idle timeout and rate floor).
- :func:`slow_client` is the client side: it holds ``streams`` streams open to the payload handler of every
  other present peer, half of them sending a request one byte every ``interval_s`` (it never completes),
  half sending a complete request and reading the answer one byte every ``interval_s``. Honest servers must
  bound it (per-peer stream cap and token bucket, request timeout, serve limit, refusal cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import msgpack
from hivemind.p2p import P2P, PeerID

from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.dht import SwarmDHT
from p2p_guard.swarm.records import read_presence
from p2p_guard.swarm.transport import BUSY, FORBIDDEN, MAX_REQUEST_BYTES, AnswerSender, PayloadServer, handler_name

__all__ = ["ClientStats", "TricklingPayloadServer", "server_for", "slow_client", "start_slow_client"]

logger = logging.getLogger(__name__)

#: The trickling server never cuts a stream itself before this many seconds (bounded, so that no stream
#: outlives a test run by much).
TRICKLE_HOLD_S = 120.0
#: Seconds between two trickled writes (each of ``bytes_per_s · TRICKLE_TICK_S`` bytes, at least one).
TRICKLE_TICK_S = 0.25
#: A client stream is given up after this many seconds (an honest server cuts it far earlier).
CLIENT_HOLD_S = 60.0
#: Limit for opening one client stream, in seconds.
OPEN_TIMEOUT_S = 10.0
#: How often the client looks for new peers in the presence records, in seconds.
DISCOVERY_S = 2.0


class TricklingPayloadServer(PayloadServer):
    """A :class:`PayloadServer` that serves every answer at a trickle (a slowloris sender).

    Admission, statuses and limits on its callers are the honest ones; only the bytes after ``OK`` differ:
    ``head_bytes`` at once, then ``max(1, bytes_per_s · TRICKLE_TICK_S)`` bytes every tick, or nothing more
    when ``bytes_per_s`` is 0. Its own serve limit is :data:`TRICKLE_HOLD_S` whatever the size.
    """

    def __init__(self, run_id: str, *, bytes_per_s: float, head_bytes: int, **limits: Any) -> None:
        """Args: bytes_per_s: rate after the head (>= 0, bytes per second); head_bytes: bytes sent at once
        (>= 0); limits: :class:`PayloadServer` keyword arguments.

        Raises:
            ValueError: ``bytes_per_s`` or ``head_bytes`` out of range, or a limit rejected by the base class.
        """
        super().__init__(run_id, **limits)
        if not 0 <= bytes_per_s < float("inf") or head_bytes < 0:
            raise ValueError(f"bytes_per_s must be finite and >= 0 and head_bytes >= 0; got "
                             f"bytes_per_s={bytes_per_s!r}, head_bytes={head_bytes!r}")
        self.bytes_per_s = float(bytes_per_s)
        self.head_bytes = int(head_bytes)

    def serve_limit_s(self, size_bytes: int) -> float:
        """:data:`TRICKLE_HOLD_S`: the attacker never gives up on a reader itself."""
        return TRICKLE_HOLD_S

    async def _stream(self, data: tuple[bytes | memoryview, ...], sender: AnswerSender) -> None:
        view = memoryview(b"".join(data))  # an attacker's copy: the honest server writes the parts in place
        head = min(self.head_bytes, len(view))
        await sender.send(view[:head])
        if self.bytes_per_s == 0:
            await asyncio.sleep(TRICKLE_HOLD_S)
            return
        step = max(1, int(self.bytes_per_s * TRICKLE_TICK_S))
        for start in range(head, len(view), step):
            await asyncio.sleep(step / self.bytes_per_s)
            await sender.send(view[start:start + step])


def server_for(config: PeerConfig, allowed: frozenset[str] | None, attack: object | None) -> PayloadServer:
    """The stream server a peer runs: the trickling one for a slowloris attack, else the honest one.

    Raises:
        ValueError: a limit of ``config`` or a parameter of the attack is out of range.
    """
    if getattr(attack, "trickles_payload", False):
        rate, head = attack.bytes_per_s, attack.head_bytes  # type: ignore[attr-defined]
        return TricklingPayloadServer.from_config(config, allowed, bytes_per_s=rate, head_bytes=head)
    return PayloadServer.from_config(config, allowed)


@dataclass
class ClientStats:
    """What the slow client's streams came to (counters).

    Attributes:
        opened: streams opened.
        refused: streams answered with ``BUSY`` or ``FORBIDDEN``.
        cut: streams the server ended or reset before a status byte (request timeout) or while we read.
        ended: streams whose answer ended normally (all of it read).
        held: streams we gave up after :data:`CLIENT_HOLD_S`.
        failed: streams that could not be opened.
    """

    opened: int = 0
    refused: int = 0
    cut: int = 0
    ended: int = 0
    held: int = 0
    failed: int = 0


def start_slow_client(attack: object | None, p2p: P2P, dht: SwarmDHT, config: PeerConfig, me: str,
                      stop: asyncio.Event) -> asyncio.Task[ClientStats] | None:
    """Start :func:`slow_client` for a slowloris attack with ``client_streams > 0``; None otherwise."""
    streams = getattr(attack, "client_streams", 0) if getattr(attack, "trickles_payload", False) else 0
    if not streams:
        return None
    return asyncio.create_task(slow_client(p2p, dht, config.run_id, me, streams=streams,
                                           interval_s=attack.interval_s, stop=stop))  # type: ignore[union-attr]


async def slow_client(p2p: P2P, dht: SwarmDHT, run_id: str, me: str, *, streams: int, interval_s: float,
                      stop: asyncio.Event) -> ClientStats:
    """Hold ``streams`` slow streams to every other present peer until ``stop``; return the counters.

    Args:
        p2p: our P2P replica.
        dht: the DHT (presence records name the targets and their rounds).
        run_id: the run (selects the handler).
        me: our PeerID (base58), never a target.
        streams: streams per target; even-numbered ones send their request slowly, odd ones read slowly.
        interval_s: seconds between two bytes sent or read.
        stop: ends the client.

    Returns:
        The :class:`ClientStats`, also logged at INFO when the client stops.
    """
    stats = ClientStats()
    rounds: dict[str, int] = {}
    workers: list[asyncio.Task[None]] = []
    try:
        while not stop.is_set():
            for target, round_ in (await read_presence(dht, run_id)).items():
                if target == me:
                    continue
                if target not in rounds:
                    workers += [asyncio.create_task(_worker(p2p, target, run_id, i % 2 == 0, rounds, interval_s,
                                                            stats, stop)) for i in range(streams)]
                rounds[target] = round_
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), DISCOVERY_S)
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        logger.info("slowloris client: %d streams opened to %d peers, %d refused, %d cut by the server, "
                    "%d ended, %d held to our limit, %d failed to open", stats.opened, len(rounds), stats.refused,
                    stats.cut, stats.ended, stats.held, stats.failed)
    return stats


async def _worker(p2p: P2P, target: str, run_id: str, slow_request: bool, rounds: dict[str, int],
                  interval_s: float, stats: ClientStats, stop: asyncio.Event) -> None:
    """Open one slow stream to ``target`` after another until ``stop``."""
    peer = PeerID.from_base58(target)
    while not stop.is_set():
        try:
            _, reader, writer = await asyncio.wait_for(
                p2p.call_binary_stream_handler(peer, handler_name(run_id)), OPEN_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - the target is gone or refuses streams: try again later
            stats.failed += 1
        else:
            stats.opened += 1
            try:
                hold = _send_slowly(reader, writer, interval_s) if slow_request else \
                    _read_slowly(reader, writer, rounds.get(target, 0), interval_s)
                outcome = await asyncio.wait_for(hold, CLIENT_HOLD_S)
            except asyncio.TimeoutError:
                outcome = "held"
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                outcome = "cut"
            finally:
                writer.close()
            setattr(stats, outcome, getattr(stats, outcome) + 1)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


async def _send_slowly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, interval_s: float) -> str:
    """Declare the longest request, then send one byte of it every ``interval_s`` until the server answers."""
    writer.write(MAX_REQUEST_BYTES.to_bytes(4, "big"))
    await writer.drain()
    while True:
        try:
            got = await asyncio.wait_for(reader.read(1), interval_s)
        except asyncio.TimeoutError:
            writer.write(b"\x92")
            await writer.drain()
            continue
        if not got:
            return "cut"
        return "refused" if got[0] in (BUSY, FORBIDDEN) else "ended"


async def _read_slowly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, round_: int,
                       interval_s: float) -> str:
    """Send a complete payload request for ``round_``, then read the answer one byte every ``interval_s``."""
    body = msgpack.packb(["payload", round_], use_bin_type=True)
    writer.write(len(body).to_bytes(4, "big") + body)
    await writer.drain()
    status = await reader.read(1)
    if not status:
        return "cut"
    if status[0] in (BUSY, FORBIDDEN):
        return "refused"
    while await reader.read(1):
        await asyncio.sleep(interval_s)
    return "ended"
