"""Starting a hivemind DHT node and reading or writing our records in it.

hivemind runs the DHT in a forked child process that owns the ``p2pd`` daemon; the peer process talks to it
through a pipe (``hivemind.DHT``) and opens payload streams through a replica of the same daemon
(``DHT.replicate_p2p``). Keys and subkeys are strings; values are the signed bytes built in ``protocol``.
Everything read back is hostile: only ``bytes`` values under ``str`` subkeys are passed on, still unverified.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Sequence

import hivemind
from hivemind.dht.validation import RecordValidatorBase
from hivemind.p2p import PeerID
from hivemind.utils import get_dht_time
from hivemind.utils.multiaddr import Multiaddr

__all__ = ["SwarmDHT", "listen_maddr", "start_dht"]

logger = logging.getLogger(__name__)

MAX_SUBKEYS_READ = 4096
#: Nodes asked to store each record (hivemind's default is 5). More copies mean a Byzantine storage node can
#: hide a commit from fewer readers, and in a small swarm every node holds, validates and logs every record.
NUM_REPLICAS = 16


class _DHTProcess(hivemind.DHT):
    """hivemind's DHT process, with default signal dispositions restored right after the fork.

    The fork copies the parent's Python signal handlers (the peer's asyncio SIGTERM/SIGINT handlers, the
    bootstrap's stop flag), so ``DHT.terminate()``'s SIGTERM would be swallowed in the child and the parent
    would wait for it forever. hivemind itself then ignores SIGINT in the child.
    """

    def run(self) -> None:
        """Reset SIGTERM to its default action, then serve the DHT (hivemind's ``DHT.run``)."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        super().run()


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


def check_initial_peers(maddrs: Sequence[str]) -> None:
    """Check that every bootstrap address is a multiaddr ending in ``/p2p/<PeerID>``.

    Raises:
        ValueError: naming the first malformed address.
    """
    for text in maddrs:
        try:
            maddr = Multiaddr(text)
            peer = maddr.value_for_protocol("p2p")
            PeerID.from_base58(peer)
        except Exception as e:  # noqa: BLE001 - the multiaddr parser raises many types
            raise ValueError(f"bad --initial-peers address {text!r}: expected /ip4/HOST/tcp/PORT/p2p/PEERID "
                             f"as printed by `p2p-guard bootstrap` ({type(e).__name__})") from None


def listen_maddr(host: str, port: int) -> str:
    """Return the libp2p multiaddr to listen on, e.g. ``/ip4/0.0.0.0/tcp/31337`` (``/ip6/...`` for IPv6)."""
    proto = "ip6" if ":" in host else "ip4"
    return f"/{proto}/{host}/tcp/{port}"


def start_dht(
    *,
    identity_path: str,
    initial_peers: Sequence[str] = (),
    host: str = "0.0.0.0",
    port: int = 0,
    announce_host: str | None = None,
    startup_timeout_s: float = 60.0,
    record_validators: Sequence[RecordValidatorBase] | None = None,
) -> hivemind.DHT:
    """Start a DHT node whose libp2p identity is our Ed25519 key file.

    Args:
        identity_path: libp2p ``PrivateKey`` protobuf file (Ed25519); see ``p2p_guard.identity``.
        initial_peers: bootstrap multiaddrs; empty for the first (bootstrap) node.
        host: listen address; port: TCP port (0 = any free port).
        announce_host: address other peers should dial (public IP of a server); None keeps the listen one.
        startup_timeout_s: how long to wait for the DHT process, in seconds.
        record_validators: hivemind record validators the node applies to every record it stores or reads.
            None (the default) means ``[RecordValidator()]`` (``swarm.validator``), which protects our
            records by their content; a peer passes ``[RecordValidator([run_id])]`` so that garbage under its
            run's keys is refused too. An empty sequence disables validation (tests of reader-side checks).

    Returns:
        A started ``hivemind.DHT``; call ``shutdown()`` when done.

    Raises:
        ValueError: a malformed initial peer address.
        OSError: the port is taken.
        hivemind.p2p.P2PDaemonError: if ``p2pd`` cannot start (bad identity file, unreachable bootstrap peers).
        TimeoutError: if the node is not ready in time, or cannot reach any initial peer.
    """
    kwargs: dict[str, object] = {
        "host_maddrs": [listen_maddr(host, port)],
        "identity_path": identity_path,
        "check_if_identity_free": False,
        "nat_port_map": False,
        "num_replicas": NUM_REPLICAS,
    }
    if announce_host:
        if port == 0:
            raise ValueError("announce_host needs a fixed port (port=0 picks a random one)")
        kwargs["announce_maddrs"] = [listen_maddr(announce_host, port)]
    if record_validators is None:
        from p2p_guard.swarm.validator import RecordValidator  # here: swarm.validator imports swarm.records

        record_validators = [RecordValidator()]
    check_initial_peers(initial_peers)
    if port != 0:
        check_port_free(host, port)
    dht = _DHTProcess(initial_peers=list(initial_peers) or None, start=False,
                       record_validators=list(record_validators), **kwargs)
    dht.run_in_background(await_ready=False)
    try:
        dht.wait_until_ready(timeout=startup_timeout_s)
    except BaseException:
        dht.shutdown()
        raise
    return dht


class SwarmDHT:
    """Async access to our records in a running ``hivemind.DHT`` (from the peer's event loop)."""

    def __init__(self, dht: hivemind.DHT) -> None:
        """Wrap a started DHT.

        Args:
            dht: a started ``hivemind.DHT`` (owned by the caller, who shuts it down).
        """
        self.dht = dht

    async def store(self, key: str, subkey: str, value: bytes, ttl_s: float) -> bool:
        """Store ``value`` under ``key``/``subkey`` for ``ttl_s`` seconds; False if no node accepted it."""
        expiration = get_dht_time() + ttl_s
        try:
            return bool(await self.dht.store(key, value, expiration, subkey=subkey, return_future=True))
        except Exception as e:  # noqa: BLE001 - a failed store is reported, the round goes on
            logger.warning("DHT store of %s failed: %s", key, e)
            return False

    async def read(self, key: str) -> dict[str, bytes]:
        """Return every ``subkey -> bytes`` value stored under ``key`` (unverified), {} if none.

        Values that are not bytes, and subkeys that are not strings, are dropped here.
        """
        try:
            found = await self.dht.get(key, latest=True, return_future=True)
        except Exception as e:  # noqa: BLE001 - a failed read is an empty read
            logger.warning("DHT read of %s failed: %s", key, e)
            return {}
        if found is None or not isinstance(found.value, dict):
            return {}
        out: dict[str, bytes] = {}
        for subkey, item in list(found.value.items())[:MAX_SUBKEYS_READ]:
            value = getattr(item, "value", None)
            if isinstance(subkey, str) and isinstance(value, bytes):
                out[subkey] = value
        return out

