"""Our hivemind DHT node, run inside the calling process's event loop, and our records in it.

One peer process owns one ``hivemind.p2p.P2P`` (one ``p2pd`` daemon, a direct child) and one hivemind
``DHTNode`` on it, both in the peer's own asyncio loop: no forked DHT process, no command pipe (hivemind's
``hivemind.DHT`` forks one and dies on any value over ~16 KB through its pipe), and payload streams use the same
P2P. The node's record validators are ordinary objects of this process, so what they caught (equivocation
proofs, counts) is read directly (:meth:`SwarmDHT.validator_report`).

A joining node first measures its clock against its initial peers and corrects DHT time for it
(``swarm.clock``), so a volunteer whose clock is off joins instead of failing hivemind's 3 s check.

Keys and subkeys are strings; values are the signed bytes built in ``protocol``. Everything read back is
hostile: only ``bytes`` values under ``str`` subkeys are passed on, still unverified.

References:
    [1] hivemind ``dht/dht.py`` (``DHT.run``: how the forked process builds the node), ``dht/node.py``
        (``DHTNode.create``), ``p2p/p2p_daemon.py`` (``P2P.create``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import hivemind.utils
from hivemind.dht.node import DHTNode
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import CompositeValidator, RecordValidatorBase
from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.utils.multiaddr import Multiaddr

from p2p_guard.swarm.addresses import check_initial_peers  # re-exported: the check, without hivemind
from p2p_guard.swarm.clock import (
    CLOCK_TOLERANCE_S,
    MAX_CLOCK_CORRECTION_S,
    ClockSkewError,
    install_offset,
    measure_offset,
    skew_message,
)
from p2p_guard.swarm.config import REACHABILITY

__all__ = [
    "REACHABILITY",
    "ClockSkewError",
    "NetworkOptions",
    "SwarmDHT",
    "check_initial_peers",
    "is_relayed",
    "relay_of",
    "listen_maddr",
    "node_id_of",
    "start_dht",
]

logger = logging.getLogger(__name__)

MAX_SUBKEYS_READ = 4096
#: Nodes asked to store each record (hivemind's default is 5). More copies mean a Byzantine storage node can
#: hide a commit from fewer readers, and in a small swarm every node holds, validates and logs every record.
NUM_REPLICAS = 16
#: Seconds a DHT RPC may take (hivemind's default is 3). A node slower than that is blacklisted for a while
#: (5 s, doubling), so on loaded volunteers' machines 3 s left each peer with a partial view of the presence key.
DHT_RPC_TIMEOUT_S = 8.0
#: Seconds a DHT node that missed ``DHT_RPC_TIMEOUT_S`` is left out of our searches, doubling with each further
#: miss (hivemind's default is 5). A frozen or sleeping peer (SIGSTOP, a closed laptop lid) still holds its
#: connections open, so every read that asks it waits the whole RPC timeout; with 5 s it was asked again every
#: 13 s and stalled every peer's round by about its freeze. Its records stay readable on the other replicas.
DHT_BLACKLIST_S = 30.0
#: How long ``SwarmDHT.shutdown`` waits for the DHT node and for ``p2pd`` (seconds each).
SHUTDOWN_TIMEOUT_S = 10.0


def check_port_free(host: str, port: int) -> None:
    """Fail early, with a clear message, when ``host:port`` (TCP) cannot be bound.

    ``p2pd`` does not report a listen failure to hivemind, so without this check a second node on a taken
    port would say it is up and print an address that reaches the first one.

    Raises:
        OSError: the port is out of [0, 65535], in use, or the address is not local (the message names both).
    """
    if not 0 <= port <= 65535:
        raise OSError(f"cannot listen on {host}:{port}: port must be in [0, 65535]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as e:
            raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


@dataclass(frozen=True)
class NetworkOptions:
    """How ``p2pd`` gets through NATs: relays, UPnP, reachability (the peer's flags; ``docs/networking.md``).

    Attributes:
        use_relay: enable libp2p circuit relay v2: dial peers that are only reachable through a relay (their
            ``/p2p-circuit`` addresses), open streams on relayed connections, and, once AutoNAT finds this node
            publicly reachable, serve as a relay for others (p2pd's limits: 16 circuits per peer, 128
            reservations, 4 GiB per direction and 30 min per relayed connection).
        use_auto_relay: when AutoNAT finds this node unreachable (behind NAT), reserve a slot on a relay and
            announce the relayed ``/p2p-circuit`` addresses; relays come from ``relays`` and the libp2p DHT.
        nat_port_map: ask the home router to forward a port (UPnP / NAT-PMP).
        reachability: ``auto`` (AutoNAT decides), ``public`` or ``private`` (forced; see ``REACHABILITY``).
        relays: multiaddrs (``.../p2p/PEERID``) of the relays to use with ``use_auto_relay``, and only those:
            a reservation is made at once. Empty: relays are discovered through the libp2p DHT (libp2p waits for
            4 candidates or 3 minutes before it reserves).
    """

    use_relay: bool = True
    use_auto_relay: bool = False
    nat_port_map: bool = False
    reachability: str = "auto"
    relays: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Check the values.

        Raises:
            ValueError: an unknown reachability, a malformed relay address, or relays without auto-relay.
        """
        if self.reachability not in REACHABILITY:
            raise ValueError(f"reachability must be one of {', '.join(REACHABILITY)}; got {self.reachability!r}")
        if self.relays and not (self.use_relay and self.use_auto_relay):
            raise ValueError("relays need use_relay and use_auto_relay (p2pd only uses them for auto-relay)")
        check_initial_peers(self.relays, what="--relays")


def is_relayed(maddr: str) -> bool:
    """True if ``maddr`` goes through a circuit relay (it has a ``/p2p-circuit`` component)."""
    return "/p2p-circuit" in maddr


def relay_of(maddr: str) -> str | None:
    """The PeerID of the relay in a ``.../p2p/RELAY/p2p-circuit/...`` multiaddr (None: not a relayed address)."""
    head, sep, _ = maddr.partition("/p2p-circuit")
    if not sep:
        return None
    _, found, relay = head.rpartition("/p2p/")
    return relay if found and relay else None


def listen_maddr(host: str, port: int) -> str:
    """Return the libp2p multiaddr to listen on, e.g. ``/ip4/0.0.0.0/tcp/31337`` (``/ip6/...`` for IPv6)."""
    proto = "ip6" if ":" in host else "ip4"
    return f"/{proto}/{host}/tcp/{port}"




async def start_dht(
    *,
    identity_path: str | None,
    initial_peers: Sequence[str] = (),
    host: str = "0.0.0.0",
    port: int = 0,
    announce_host: str | None = None,
    startup_timeout_s: float = 60.0,
    record_validators: Sequence[RecordValidatorBase] | None = None,
    correct_clock: bool = True,
    network: NetworkOptions | None = None,
    client_mode: bool = False,
) -> SwarmDHT:
    """Start ``p2pd`` and a hivemind DHT node in the running event loop, with our Ed25519 key as identity.

    Steps: ``P2P.create`` (listen, dial the initial peers); measure the clock offset against the initial peers
    and, past ``CLOCK_TOLERANCE_S``, correct DHT time in this process (``swarm.clock.install_offset``); then
    ``DHTNode.create`` on that P2P (ping the initial peers, fill the routing table).

    Args:
        identity_path: libp2p ``PrivateKey`` protobuf file (Ed25519); see ``p2p_guard.identity``. None: a fresh
            random identity for this process only (a read-only client such as ``p2p-guard status``).
        initial_peers: bootstrap multiaddrs; empty for the first (bootstrap) node.
        host: listen address; port: TCP port (0 = any free port).
        announce_host: address other peers should dial (public IP of a server); None keeps the listen one.
        startup_timeout_s: limit for the whole start, in seconds.
        record_validators: hivemind record validators the node applies to every record it stores or reads.
            None (the default) means ``[RecordValidator()]`` (``swarm.validator``), which protects our
            records by their content; a peer passes ``[RecordValidator([run_id])]`` so that garbage under its
            run's keys is refused too. An empty sequence disables validation (tests of reader-side checks).
        correct_clock: measure and correct the clock offset against the initial peers (see above).
        network: relay, UPnP and reachability options of ``p2pd`` (None: ``NetworkOptions()``, relay client
            only, no auto-relay, no UPnP).
        client_mode: join as a hivemind DHT *client*: the node reads and writes through the others but
            answers no DHT requests, so it stores nothing and other nodes do not put it in their routing tables.

    Returns:
        A started :class:`SwarmDHT`; ``await shutdown()`` when done (it also stops ``p2pd``).

    Raises:
        ValueError: a malformed initial peer address, or ``announce_host`` with port 0.
        OSError: the port is taken.
        ClockSkewError: the clock is more than ``MAX_CLOCK_CORRECTION_S`` off the initial peers' (one line).
        hivemind.p2p.P2PDaemonError: if ``p2pd`` cannot start (bad identity file, unreachable bootstrap peers).
        TimeoutError: if the node is not up in time, or no initial peer answers.
    """
    host_maddrs = [listen_maddr(host, port)]
    announce_maddrs = None
    if announce_host:
        if port == 0:
            raise ValueError("announce_host needs a fixed port (port=0 picks a random one)")
        announce_maddrs = [listen_maddr(announce_host, port)]
    if record_validators is None:
        from p2p_guard.swarm.validator import RecordValidator  # here: swarm.validator imports swarm.records

        record_validators = [RecordValidator()]
    if network is None:
        network = NetworkOptions()
    check_initial_peers(initial_peers)
    if port != 0:
        check_port_free(host, port)
    try:
        p2p = await asyncio.wait_for(
            _create_p2p(_p2p_class(network), initial_peers=list(initial_peers) or None, host_maddrs=host_maddrs,
                        announce_maddrs=announce_maddrs, identity_path=identity_path, check_if_identity_free=False,
                        startup_timeout=startup_timeout_s, **_p2p_network_kwargs(network)),
            startup_timeout_s)
    except P2PDaemonError as e:
        if "failed to connect to bootstrap peers" in str(e):
            raise P2PDaemonError(f"cannot reach any of the --initial-peers ({', '.join(initial_peers)}): is the "
                                 "bootstrap node up, its address and port reachable from here, and the /p2p/ PeerID "
                                 "the one it printed (a node that answers with another PeerID is refused)?") from None
        raise
    undo_clock: Callable[[], None] | None = None
    try:
        if correct_clock and initial_peers:
            undo_clock = await _correct_clock(p2p, initial_peers)
        node = await asyncio.wait_for(_create_node(p2p, initial_peers, list(record_validators), client_mode),
                                      startup_timeout_s)
    except BaseException:
        if undo_clock is not None:
            undo_clock()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(p2p.shutdown(), SHUTDOWN_TIMEOUT_S)
        raise
    return SwarmDHT(node, p2p, record_validators, undo_clock=undo_clock)


class _StaticRelayP2P(P2P):
    """hivemind's ``P2P`` whose ``p2pd`` uses only the given relays (``-relayDiscovery=0 -trustedRelays=...``).

    With relay discovery on (hivemind's only choice), libp2p's auto-relay waits for 4 candidate relays or 3
    minutes (``bootDelay``) before it reserves a slot; with static relays it reserves on them at once.
    """

    @staticmethod
    def _make_process_args(*args: Any, **kwargs: Any) -> list[str]:
        if kwargs.get("trustedRelays"):
            kwargs["relayDiscovery"] = False
        return P2P._make_process_args(*args, **kwargs)


def _p2p_class(network: NetworkOptions) -> type[P2P]:
    """``P2P`` class to start ``p2pd`` with (static relays need one more daemon flag than hivemind passes)."""
    return _StaticRelayP2P if network.relays else P2P


async def _create_p2p(base: type[P2P], **kwargs: Any) -> P2P:
    """``base.create(**kwargs)``; if it fails or is cancelled, the ``p2pd`` it launched is stopped and reaped.

    hivemind's ``P2P.create`` leaves its daemon to ``__del__`` when the daemon exits at start-up (unreachable
    bootstrap peers) or when the start is cancelled (a timeout), so nobody awaits the child: asyncio's child
    watcher then reaps it after ``asyncio.run`` closed the loop and logs ``Loop <...> that handles pid N is
    closed`` under the command's error line. Here the instance ``create`` builds is kept, and on failure its
    ``shutdown()`` (terminate, then wait for the exit) runs in the loop, bounded by ``SHUTDOWN_TIMEOUT_S``.
    """
    started: list[P2P] = []

    class _Kept(base):  # type: ignore[valid-type,misc]  # a subclass per call: create() calls cls()
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    _Kept.__name__ = _Kept.__qualname__ = base.__name__
    try:
        return await _Kept.create(**kwargs)
    except BaseException:
        for p2p in started:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(p2p.shutdown(), SHUTDOWN_TIMEOUT_S)
        raise


def _p2p_network_kwargs(network: NetworkOptions) -> dict[str, Any]:
    """``P2P.create`` keyword arguments for ``network`` (p2pd refuses trusted relays without auto-relay)."""
    kwargs: dict[str, Any] = {"use_relay": network.use_relay, "use_auto_relay": network.use_auto_relay,
                              "nat_port_map": network.nat_port_map,
                              "force_reachability": None if network.reachability == "auto" else network.reachability}
    if network.relays:
        kwargs["trusted_relays"] = list(network.relays)
    return kwargs


async def _create_node(p2p: P2P, initial_peers: Sequence[str], record_validators: list[RecordValidatorBase],
                       client_mode: bool = False) -> DHTNode:
    """``DHTNode.create`` on our P2P, as hivemind's ``DHT.run`` does in its forked process (:func:`node_id_of`)."""
    try:
        return await DHTNode.create(p2p=p2p, node_id=node_id_of(p2p.peer_id),
                                    initial_peers=list(initial_peers) or None,
                                    num_replicas=NUM_REPLICAS, record_validator=CompositeValidator(record_validators),
                                    wait_timeout=DHT_RPC_TIMEOUT_S, blacklist_time=DHT_BLACKLIST_S,
                                    client_mode=client_mode)
    except RuntimeError as e:  # hivemind: "DHTNode bootstrap failed: none of the initial_peers responded"
        raise TimeoutError(f"none of the initial peers answered the DHT ({e}); check --initial-peers") from None


def node_id_of(peer_id: PeerID) -> DHTID:
    """Our DHT node id: a hash of our PeerID, so that a restarted peer (same identity) is the same DHT node.

    hivemind draws a random one per process by default, and its routing tables keep a node id until it stops
    answering, even when the PeerID it maps to comes back under a new one. A peer restarted a few times was then
    several "replicas" of the nearest nodes: every store went to it that many times, the duplicates were answered
    False (the value was already there), and a store that returns on the first answer (``SwarmDHT.store``) was
    reported refused: a clean Ctrl+C logged "left the swarm without a leave record" and the others counted the
    peer present for 30 s more (user test).
    """
    return DHTID.generate(source=peer_id.to_bytes())


def _peer_id_of(maddr: str) -> PeerID:
    """The PeerID in a multiaddr's ``/p2p/`` part (checked by ``swarm.addresses.check_initial_peers``)."""
    return PeerID.from_base58(Multiaddr(maddr).value_for_protocol("p2p"))


async def _correct_clock(p2p: P2P, initial_peers: Sequence[str]) -> Callable[[], None] | None:
    """Measure our clock against the initial peers; correct DHT time past the tolerance (see ``swarm.clock``).

    Raises:
        ClockSkewError: the offset is beyond ``MAX_CLOCK_CORRECTION_S``.
    """
    peers = list(dict.fromkeys(_peer_id_of(m) for m in initial_peers))
    offset, answered = await measure_offset(p2p, peers)
    if offset is None:
        logger.debug("no initial peer answered a clock ping; DHT time left uncorrected")
        return None
    if abs(offset) <= CLOCK_TOLERANCE_S:
        logger.debug("clock within %.3f s of %d initial peer(s)", offset, answered)
        return None
    if abs(offset) > MAX_CLOCK_CORRECTION_S:
        raise ClockSkewError(skew_message(offset, answered))
    logger.warning("this machine's clock is %.1f s %s the swarm's (%d initial peer(s)): correcting DHT time by "
                   "%+.1f s; enable NTP to fix it", abs(offset), "behind" if offset > 0 else "ahead of", answered,
                   offset)
    return install_offset(offset)


async def _unless_p2pd_gone(stopping: Awaitable[None], p2p: P2P) -> None:
    """Await ``stopping`` (bounded by ``SHUTDOWN_TIMEOUT_S``) unless ``p2pd`` goes first; then cancel it.

    Raises:
        whatever ``stopping`` raised, if it ended first.
    """
    stop = asyncio.ensure_future(stopping)
    gone = asyncio.ensure_future(_until_p2pd_gone(p2p))
    try:
        await asyncio.wait({stop, gone}, timeout=SHUTDOWN_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (stop, gone):
            task.cancel()
    if stop.done() and not stop.cancelled():
        stop.result()


async def _until_p2pd_gone(p2p: P2P) -> None:
    """Return once ``p2pd`` has exited or our persistent control connection to it has ended.

    Either way no reply comes from it any more. Both are hivemind internals (``P2P._child``, the control client's
    reader task); where one is missing it is not waited for, and with neither this never returns.
    """
    child = getattr(p2p, "_child", None)
    exited = asyncio.ensure_future(child.wait()) if child is not None else None
    reader = getattr(_control_client(p2p), "_read_task", None)
    waits = [w for w in (exited, reader) if isinstance(w, asyncio.Future)]
    try:
        if waits:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.Event().wait()
    finally:
        if exited is not None:
            exited.cancel()


def _control_client(p2p: P2P) -> Any:
    """The control client of ``p2p`` (hivemind's ``P2P._client.control``); None before start or in another version."""
    return getattr(getattr(p2p, "_client", None), "control", None)


def _collect_control_errors(p2p: P2P) -> None:
    """Retrieve the errors that ended the control connection's reader and writer tasks (logged at debug).

    When ``p2pd`` died first (Ctrl+C in a terminal), both end with ``BrokenPipeError`` or
    ``ConnectionResetError`` that nobody awaits, and asyncio printed each as a "Task exception was never
    retrieved" traceback when the task was garbage-collected.
    """
    control = _control_client(p2p)
    for name in ("_read_task", "_write_task"):
        task = getattr(control, name, None)
        if isinstance(task, asyncio.Future) and task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                logger.debug("p2pd control connection ended: %r", error)


class SwarmDHT:
    """Our DHT node and its P2P, in the caller's event loop: async store/read of our records, and shutdown."""

    def __init__(self, node: DHTNode, p2p: P2P, record_validators: Sequence[RecordValidatorBase] = (), *,
                 undo_clock: Callable[[], None] | None = None) -> None:
        """Wrap a started node (use :func:`start_dht`).

        Args:
            node: a started ``DHTNode`` on ``p2p``.
            p2p: the node's P2P (owned: :meth:`shutdown` stops it); payload streams use it too.
            record_validators: the validators the node applies (read by :meth:`validator_report`).
            undo_clock: restores DHT time at shutdown, if :func:`start_dht` corrected it.
        """
        self.node = node
        self.p2p = p2p
        self.record_validators = tuple(record_validators)
        self._undo_clock = undo_clock

    @property
    def peer_id(self) -> PeerID:
        """This node's libp2p PeerID."""
        return self.p2p.peer_id

    async def visible_maddrs(self, latest: bool = False) -> list[str]:
        """The multiaddrs other peers can dial, each ending in ``/p2p/<PeerID>``.

        Args:
            latest: ask ``p2pd`` again (relayed ``/p2p-circuit`` addresses appear once a relay took us);
                False: the addresses read at start-up.
        """
        return [str(m) for m in await self.p2p.get_visible_maddrs(latest=latest)]

    async def connections(self) -> list[tuple[str, str]]:
        """``(PeerID, remote multiaddr)`` of every open libp2p connection; a relayed one has ``/p2p-circuit``."""
        out = []
        for info in await self.p2p.list_peers():
            for addr in info.addrs:
                out.append((info.peer_id.to_base58(), str(addr)))
        return out

    async def ping(self, maddr: str) -> bool:
        """Ping the DHT node at ``maddr`` (``.../p2p/<PeerID>``), which puts us in its routing table.

        A bootstrap node that was restarted knows nobody; the peers that joined through it before do not dial it
        again on their own, so a newcomer joining through it would find no swarm.

        Returns:
            True if it answered.
        """
        return await self.node.protocol.call_ping(_peer_id_of(maddr)) is not None

    def validator_report(self) -> Any:
        """What our :class:`~p2p_guard.swarm.validator.RecordValidator` instances saw (counts, proofs, refusals).

        Returns:
            A ``swarm.validator.ValidatorReport``, merged over our validators (empty if none).
        """
        from p2p_guard.swarm.validator import merged_report  # here: swarm.validator imports swarm.records

        return merged_report(self.record_validators)

    async def store(self, key: str, subkey: str, value: bytes, ttl_s: float) -> bool:
        """Store ``value`` under ``key``/``subkey`` for ``ttl_s`` seconds; False if the first replica refused it.

        Returns after the first replica's answer; the others are stored in the background.
        """
        expiration = hivemind.utils.get_dht_time() + ttl_s
        try:
            # Returns once one replica (often our own node) holds it; the other replicas' stores go on in the
            # background, so a frozen storage node (its RPC times out after DHT_RPC_TIMEOUT_S) delays no round.
            return bool(await self.node.store(key, value, expiration, subkey=subkey, await_all_replicas=False))
        except Exception as e:  # noqa: BLE001 - a failed store is reported, the round goes on
            logger.warning("DHT store of %s failed: %s", key, e)
            return False

    async def read(self, key: str) -> dict[str, bytes]:
        """Return every ``subkey -> bytes`` value stored under ``key`` (unverified), {} if none.

        Values that are not bytes, and subkeys that are not strings, are dropped here.
        """
        return {subkey: value for subkey, (value, _) in (await self._read_items(key)).items()}

    async def read_expirations(self, key: str) -> dict[str, float]:
        """Return ``subkey -> expiration`` (DHT time, seconds) of every bytes value under ``key``, {} if none.

        An expiration is its storer's claim (the storer's DHT time plus its TTL), never signed: use it only where
        a wrong one costs a wait and nothing else (``swarm.suspects``).
        """
        return {subkey: expiration for subkey, (_, expiration) in (await self._read_items(key)).items()}

    async def _read_items(self, key: str) -> dict[str, tuple[bytes, float]]:
        try:
            found = await self.node.get(key, latest=True)
        except Exception as e:  # noqa: BLE001 - a failed read is an empty read
            logger.warning("DHT read of %s failed: %s", key, e)
            return {}
        if found is None or not isinstance(found.value, dict):
            return {}
        out: dict[str, tuple[bytes, float]] = {}
        for subkey, item in list(found.value.items())[:MAX_SUBKEYS_READ]:
            value = getattr(item, "value", None)
            expiration = getattr(item, "expiration_time", None)
            if isinstance(subkey, str) and isinstance(value, bytes) and isinstance(expiration, (int, float)):
                out[subkey] = (value, float(expiration))
        return out

    async def shutdown(self) -> None:
        """Stop the DHT node, then ``p2pd`` (bounded waits); restore DHT time. Safe to call twice.

        The node's shutdown removes its handlers from ``p2pd`` and waits for the daemon's replies; it is given up
        as soon as ``p2pd`` is gone (see :func:`_until_p2pd_gone`), which a Ctrl+C in a terminal causes: the
        signal reaches the whole process group, ``p2pd`` included, and the replies never come (the wait took
        ``SHUTDOWN_TIMEOUT_S``).
        """
        with contextlib.suppress(Exception):
            await _unless_p2pd_gone(self.node.shutdown(), self.p2p)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.p2p.shutdown(), SHUTDOWN_TIMEOUT_S)
        _collect_control_errors(self.p2p)
        if self._undo_clock is not None:
            self._undo_clock()
            self._undo_clock = None
