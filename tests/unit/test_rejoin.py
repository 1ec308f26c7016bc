"""A peer pings its --initial-peers every ``REJOIN_POLL_S`` (``peer._rejoin_initial_peers``).

A bootstrap node restarted after a crash knows nobody, and a newcomer joining through it found no swarm (it waited
alone while the others trained). The live check is ``tests/integration/test_bootstrap_restart.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from p2p_guard.swarm import peer

UP = "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWLXQTURXyMiQQDz2gNJdfMehT9UQwYx8rfh8Pa3JAQb7P"
DOWN = "/ip4/127.0.0.1/tcp/31338/p2p/12D3KooWGDQckzKhd8sCmFXQm7SHfu3AcZVCta78RzotZhsRb42f"


class PingRecorder:
    def __init__(self) -> None:
        self.pings: list[str] = []

    async def ping(self, maddr: str) -> bool:
        self.pings.append(maddr)
        if maddr == DOWN:
            raise OSError("connection refused")
        return True


def test_every_initial_peer_is_pinged_each_period_until_the_stop() -> None:
    dht = PingRecorder()

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(peer._rejoin_initial_peers(dht, (DOWN, UP), stop, poll_s=0.01))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(task, 1.0)  # a failed ping neither ends the loop nor keeps it from stopping
        count = len(dht.pings)
        await asyncio.sleep(0.05)
        assert len(dht.pings) == count

    asyncio.run(run())
    assert dht.pings.count(UP) >= 3 and dht.pings.count(DOWN) >= 3
    assert dht.pings[:2] == [DOWN, UP]


def test_the_first_ping_waits_one_period_and_a_stop_before_it_pings_nobody() -> None:
    dht = PingRecorder()

    async def run() -> Any:
        stop = asyncio.Event()
        task = asyncio.create_task(peer._rejoin_initial_peers(dht, (UP,), stop, poll_s=30.0))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        stop.set()
        return await asyncio.wait_for(task, 1.0)

    assert asyncio.run(run()) is None
    assert dht.pings == []
    assert peer.REJOIN_POLL_S == 30.0
