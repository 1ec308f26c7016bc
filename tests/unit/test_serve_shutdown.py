"""A payload stream still being served when the peer's event loop shuts down ends quietly.

``asyncio.run`` cancels the tasks left at a peer's exit; a stream handler cancelled mid-answer (an upload cap slows
every answer, so one is usually in flight) ended cancelled, and Python 3.11's ``StreamReaderProtocol`` callback then
logged "Exception in callback ... CancelledError" with a traceback in every peer's log
(``simulate --max-upload-mbit 1e-300``: two tracebacks per peer after "peer finished").
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest
from hivemind.p2p import PeerID

from p2p_guard.identity import Identity
from p2p_guard.swarm.transport import PayloadServer


@pytest.mark.parametrize("refused", [False, True])
def test_a_stream_handler_cancelled_at_shutdown_logs_no_traceback(refused: bool) -> None:
    """Cancelled while it waits for the request (served) or for the caller to close (refused: not allowed)."""
    allowed = frozenset({Identity.generate().peer_id_b58}) if refused else None
    server = PayloadServer("run", request_timeout_s=60.0, allowed=allowed)
    info = types.SimpleNamespace(peer_id=PeerID.from_base58(Identity.generate().peer_id_b58))
    errors: list[dict[str, Any]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        handlers: list[asyncio.Task[Any]] = []
        started = asyncio.Event()

        async def on_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())  # type: ignore[arg-type]
            started.set()
            await server._handle(info, reader, writer)  # waits for a request (or, refused, an EOF) that never comes

        listener = await asyncio.start_server(on_stream, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        _, client = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(started.wait(), 10)
        handlers[0].cancel()  # what asyncio.run does to the tasks left at exit
        await asyncio.sleep(0.2)
        assert handlers[0].done()
        client.close()
        listener.close()
        await listener.wait_closed()

    asyncio.run(scenario())
    assert [c.get("message") for c in errors] == []
    assert server._open == 0 and server._open_by_peer == {} and server._refusing == 0  # the stream was released
    assert (server.stats.forbidden, server.stats.served) == ((1, 0) if refused else (0, 1))
