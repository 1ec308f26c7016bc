"""DHT time: measure this machine's clock offset against the swarm and correct every DHT time for it.

hivemind stamps every record with an absolute expiration in "DHT time" (``hivemind.utils.get_dht_time``,
which is ``time.time``), and a joining node refuses to start when an initial peer's clock differs from its own
by more than ``MAX_DHT_TIME_DISCREPANCY_SECONDS`` (3 s). A volunteer's clock is often further off than that.
So a joining peer first asks its initial peers for their DHT time (hivemind's own ``rpc_ping``, which carries
it), takes the offset (NTP's rule, per peer the sample with the shortest round trip, then the median over
peers), and, if it is larger than :data:`CLOCK_TOLERANCE_S`, installs a corrected ``get_dht_time`` in this
process (:func:`install_offset`) before its DHT node starts. Beyond :data:`MAX_CLOCK_CORRECTION_S` it does not
correct: :class:`ClockSkewError` carries one line saying how far off the clock is and how to fix it.

``offset = t_peer − (t_sent + t_received) / 2``: positive means our clock is behind the swarm's.

Nothing happens at import. :func:`install_offset` is called at start-up inside a peer process only: it replaces
the ``get_dht_time`` name in every loaded module that holds hivemind's original (hivemind imports it by name
into ``dht.node``, ``dht.protocol``, ``dht.routing``, ``utils.timed_storage``, ``utils.auth``...), and in
``hivemind.utils`` itself, so modules imported later get the corrected one too; the returned callable undoes it.

References:
    [1] D. Mills, "Internet time synchronization: the Network Time Protocol", IEEE Trans. Commun. 39(10), 1991
        (offset from one request/response exchange, the minimum-delay sample being the most accurate).
    [2] hivemind ``dht/protocol.py`` (``call_ping``: the 3 s check), ``utils/timed_storage.py``.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "CLOCK_TOLERANCE_S",
    "MAX_CLOCK_CORRECTION_S",
    "ClockSkewError",
    "ClockSample",
    "install_offset",
    "measure_offset",
    "offset_from_samples",
    "skew_message",
]

logger = logging.getLogger(__name__)

#: Offsets up to this many seconds are left alone (hivemind tolerates 3 s; round-trip noise is ~ms on a LAN).
CLOCK_TOLERANCE_S = 1.0
#: Larger offsets are not corrected: the peer exits with :func:`skew_message` (a clock that far off is broken,
#: and an initial peer that claims such a time should not move ours by that much).
MAX_CLOCK_CORRECTION_S = 600.0
#: Pings per initial peer; the one with the shortest round trip is kept.
SAMPLES_PER_PEER = 3


class ClockSkewError(OSError):
    """This machine's clock is too far from the swarm's to correct; ``str(error)`` is the one line to print.

    An ``OSError`` (a fault of this machine's environment, like a taken port), so callers that report
    ``OSError`` as one line at start-up report this one too.
    """


@dataclass(frozen=True)
class ClockSample:
    """One timed exchange with one peer (all in seconds, our clock for ``sent``/``received``).

    Attributes:
        peer: The peer's base58 PeerID.
        sent: Our time when the ping left.
        peer_time: The DHT time the peer put in its answer.
        received: Our time when the answer arrived.
    """

    peer: str
    sent: float
    peer_time: float
    received: float

    @property
    def offset_s(self) -> float:
        """``peer_time − (sent + received) / 2``: positive when our clock is behind."""
        return self.peer_time - (self.sent + self.received) / 2

    @property
    def round_trip_s(self) -> float:
        """``received − sent``."""
        return self.received - self.sent


def offset_from_samples(samples: Sequence[ClockSample]) -> float | None:
    """The swarm's clock minus ours: per peer the shortest-round-trip sample, then the median over peers.

    The median keeps one lying initial peer (of three or more) from moving our clock.

    Args:
        samples: Exchanges with any number of peers; samples with a non-finite or negative round trip, or a
            non-finite peer time, are ignored.

    Returns:
        The offset in seconds, or None if no usable sample.
    """
    best: dict[str, ClockSample] = {}
    for sample in samples:
        values = (sample.sent, sample.peer_time, sample.received)
        if not all(v == v and abs(v) != float("inf") for v in values) or sample.round_trip_s < 0:
            continue
        if sample.peer not in best or sample.round_trip_s < best[sample.peer].round_trip_s:
            best[sample.peer] = sample
    if not best:
        return None
    return float(statistics.median(s.offset_s for s in best.values()))


def skew_message(offset_s: float, peers: int) -> str:
    """The one line a peer prints when its clock is too far off to correct."""
    direction = "behind" if offset_s > 0 else "ahead of"
    return (f"this machine's clock is {abs(offset_s):.0f} s {direction} the swarm's (measured against {peers} "
            f"initial peer(s)); more than {MAX_CLOCK_CORRECTION_S:.0f} s cannot be corrected: set the clock "
            f"right (enable NTP, e.g. `sudo timedatectl set-ntp true`, or run chrony/ntpd) and start again")


async def measure_offset(p2p: object, peers: Sequence[object], *, timeout_s: float = 5.0,
                         samples_per_peer: int = SAMPLES_PER_PEER) -> tuple[float | None, int]:
    """Ask each peer for its DHT time with hivemind's ``rpc_ping``; return ``(offset_s or None, peers answered)``.

    A client-mode ``DHTProtocol`` sends the pings, so the peers do not add us to their routing tables.
    Our own times are read with ``time.time`` (the raw clock), never a corrected one.

    Args:
        p2p: A started ``hivemind.p2p.P2P``.
        peers: ``hivemind.p2p.PeerID`` of the initial peers.
        timeout_s: Limit per ping, in seconds.
        samples_per_peer: Pings per peer.
    """
    from hivemind.dht.protocol import DHTProtocol  # here: only a joining peer needs hivemind's DHT protocol
    from hivemind.dht.routing import DHTID
    from hivemind.proto import dht_pb2

    probe = await DHTProtocol.create(p2p, DHTID.generate(), bucket_size=20, depth_modulo=5, num_replicas=1,
                                     wait_timeout=timeout_s, client_mode=True)
    request = dht_pb2.PingRequest(peer=probe.node_info, validate=False)

    async def ping(peer: object) -> list[ClockSample]:
        out: list[ClockSample] = []
        for _ in range(samples_per_peer):
            try:
                sent = time.time()
                response = await probe.get_stub(peer).rpc_ping(request, timeout=timeout_s)
                received = time.time()
            except Exception as e:  # noqa: BLE001 - an unreachable peer gives no sample
                logger.debug("clock ping to %s failed: %s", peer, e)
                break
            if response.dht_time:
                out.append(ClockSample(str(peer), sent, float(response.dht_time), received))
        return out

    results = await asyncio.gather(*(ping(peer) for peer in peers))
    samples = [s for found in results for s in found]
    return offset_from_samples(samples), sum(1 for found in results if found)


def install_offset(offset_s: float) -> Callable[[], None]:
    """Make every ``get_dht_time`` in this process return ``time.time() + offset_s``; return the undo.

    Call it at start-up of a peer process, before its DHT node starts (see the module docstring). It is
    process-wide by nature (hivemind reads one global clock); the undo restores hivemind's original in every
    module it changed.

    Args:
        offset_s: Seconds to add (from :func:`measure_offset`).

    Returns:
        A callable that restores the original clock.
    """
    import hivemind.utils  # noqa: F401 - loads hivemind's clock users before the sweep
    import hivemind.utils.timed_storage as timed_storage

    original = timed_storage.get_dht_time
    raw = time.time

    def corrected_dht_time() -> float:
        return raw() + offset_s

    changed = []
    for module in list(sys.modules.values()):
        if getattr(module, "get_dht_time", None) is original:
            module.get_dht_time = corrected_dht_time  # type: ignore[attr-defined]
            changed.append(module)
    logger.debug("DHT time corrected by %+.3f s in %d modules", offset_s, len(changed))

    def undo() -> None:
        for module in changed:
            if getattr(module, "get_dht_time", None) is corrected_dht_time:
                module.get_dht_time = original  # type: ignore[attr-defined]

    return undo
