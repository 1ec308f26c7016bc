"""Integration: a bootstrap node restarted after a crash (same identity and port) knows nobody; a peer that joined
through it before pings it again (``SwarmDHT.ping``, every ``REJOIN_POLL_S`` in a peer), and a newcomer joining
through it then finds that peer's records. Without the ping the newcomer read nothing: a volunteer who joined after
a bootstrap restart waited alone ("1 of 2 peers present") while the swarm trained on.

Three DHT nodes on 127.0.0.1 in this test's event loop; every one is shut down in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest

pytest.importorskip("hivemind")

from p2p_guard.identity import Identity  # noqa: E402 - after the importorskip
from p2p_guard.swarm.dht import SwarmDHT, start_dht  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_restarted_bootstrap_learns_the_swarm_again_from_a_ping(tmp_path: Path) -> None:
    key = tmp_path / "bootstrap.key"
    Identity.load_or_create(key)
    port = _free_port()

    async def bootstrap() -> SwarmDHT:
        return await start_dht(identity_path=str(key), host="127.0.0.1", port=port, record_validators=[])

    async def run() -> None:
        nodes: list[SwarmDHT] = []
        try:
            boot = await bootstrap()
            nodes.append(boot)
            addr = next(m for m in await boot.visible_maddrs() if "/127.0.0.1/" in m)
            old = await start_dht(identity_path=None, initial_peers=[addr], host="127.0.0.1", record_validators=[],
                                  correct_clock=False)
            nodes.append(old)
            assert await old.store("key", "old", b"here", 600.0)
            await boot.shutdown()
            nodes.remove(boot)
            boot = await bootstrap()  # the same PeerID on the same port, an empty routing table
            nodes.append(boot)
            assert await old.ping(addr)
            new = await start_dht(identity_path=None, initial_peers=[addr], host="127.0.0.1", record_validators=[],
                                  correct_clock=False)
            nodes.append(new)
            assert await new.read("key") == {"old": b"here"}
        finally:
            for node in nodes:
                with contextlib.suppress(Exception):
                    await node.shutdown()

    asyncio.run(run())
