"""The bootstrap node: a plain DHT node with a persistent identity that new peers dial first.

It holds no model and takes no part in rounds. Once peers have joined, they know each other, and the
bootstrap node can go away without stopping training.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
from pathlib import Path

from p2p_guard.identity import Identity
from p2p_guard.identity.keys import key_in_use, lock_key_file
from p2p_guard.swarm.dht import NetworkOptions, start_dht
from p2p_guard.swarm.reaper import start_reaper, stop_reaper_if_clean

__all__ = ["run_bootstrap", "write_address_file"]

logger = logging.getLogger(__name__)


def write_address_file(path: str | Path, maddrs: list[str]) -> None:
    """Write one multiaddr per line to ``path`` atomically (readers never see a partial file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".addr-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(maddrs) + "\n")
    os.replace(tmp, path)


def run_bootstrap(*, identity_path: str, host: str, port: int, announce_host: str | None = None,
                  address_file: str | None = None, on_ready: object = None, use_relay: bool = True,
                  reachability: str = "auto") -> int:
    """Run a bootstrap DHT node until SIGINT or SIGTERM; return the exit code.

    The node (``p2pd`` and hivemind's ``DHTNode``) runs in this process's event loop (``swarm.dht``).

    Args:
        identity_path: Ed25519 identity file (created on first start, mode 0600), so the node keeps its
            PeerID, and therefore its multiaddr, across restarts.
        host: listen address (``0.0.0.0`` for all interfaces); port: TCP port to open (0 = any).
        announce_host: the public address peers should dial, if it differs from ``host``.
        address_file: if set, the visible multiaddrs are written there, one per line, once ready.
        on_ready: optional callable receiving the list of multiaddrs (the CLI prints them).
        use_relay: serve as a circuit relay for peers behind NAT (once reachable, see ``reachability``).
        reachability: ``auto`` (AutoNAT decides), ``public`` or ``private`` (forced).

    Returns:
        0 on a requested stop.

    Raises:
        ValueError, OSError, TimeoutError, hivemind.p2p.P2PDaemonError: the node could not start
            (see :func:`p2p_guard.swarm.dht.start_dht`).
    """
    created = not Path(identity_path).exists()
    identity = Identity.load_or_create(identity_path)
    # A key created here is locked for the node's life, as `p2p-guard bootstrap` locks an existing one at start:
    # a second node or a peer on it is refused at start.
    try:
        lock = lock_key_file(identity_path) if created else None
    except BlockingIOError:
        raise ValueError(key_in_use(identity_path)) from None
    reaper = start_reaper()
    try:
        network = NetworkOptions(use_relay=use_relay, reachability=reachability)
        asyncio.run(_serve(identity, identity_path, host=host, port=port, announce_host=announce_host,
                           address_file=address_file, on_ready=on_ready, network=network))
    except BaseException:
        stop_reaper_if_clean(reaper)
        raise
    finally:
        if lock is not None:
            lock.close()
    stop_reaper_if_clean(reaper)
    return 0


async def _serve(identity: Identity, identity_path: str, *, host: str, port: int, announce_host: str | None,
                 address_file: str | None, on_ready: object, network: NetworkOptions | None = None) -> None:
    """Start the node, report its addresses, serve until SIGINT/SIGTERM, shut it down."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        dht = await start_dht(identity_path=identity_path, host=host, port=port, announce_host=announce_host,
                              network=network)
        try:
            maddrs = await dht.visible_maddrs()
            logger.info("bootstrap node %s listening", identity.peer_id_b58)
            if address_file:
                write_address_file(address_file, maddrs)
            if callable(on_ready):
                on_ready(maddrs)
            await stop.wait()
            logger.info("stopping the bootstrap node")
        finally:
            await dht.shutdown()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
