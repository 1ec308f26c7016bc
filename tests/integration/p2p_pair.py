"""Two live hivemind P2P daemons on loopback for transport tests (shared by the transport test modules)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from hivemind.p2p import P2P

LOOPBACK = ["/ip4/127.0.0.1/tcp/0"]
START_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 15.0


@contextlib.asynccontextmanager
async def p2p_pair() -> AsyncIterator[tuple[Any, Any]]:
    """Yield ``(server, client)``: two daemons on loopback, the client bootstrapped from the server."""
    started: list[Any] = []
    try:
        server = await asyncio.wait_for(P2P.create(host_maddrs=LOOPBACK, nat_port_map=False), START_TIMEOUT_S)
        started.append(server)
        maddrs = [str(m) for m in await server.get_visible_maddrs()]
        client = await asyncio.wait_for(
            P2P.create(initial_peers=maddrs, host_maddrs=LOOPBACK, nat_port_map=False), START_TIMEOUT_S)
        started.append(client)
        yield server, client
    finally:
        for p2p in reversed(started):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(p2p.shutdown(), SHUTDOWN_TIMEOUT_S)


def run_with_pair(scenario: Callable[[Any, Any], Awaitable[None]]) -> None:
    """Run ``scenario(server, client)`` on a fresh pair; both daemons are shut down afterwards."""
    async def main() -> None:
        async with p2p_pair() as (server, client):
            await scenario(server, client)

    asyncio.run(main())
