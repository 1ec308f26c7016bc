"""The stream server's admission rules and :func:`fetch`'s argument checks, without a network.

:meth:`PayloadServer.admit` on a fake clock (token bucket, per-peer and global stream caps, allow-list, bounded
per-peer tables) and the constructor rejections. The same limits between two real p2pd daemons are in
``tests/integration/test_transport_limits.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from p2p_guard.swarm.transport import BUSY, FORBIDDEN, PayloadServer, fetch

RUN = "transport-limits-test"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestAdmission:
    """The admission rules of :meth:`PayloadServer.admit`, without a network, on a fake clock."""

    def test_token_bucket_known_answer(self) -> None:
        clock = FakeClock()
        served = PayloadServer(RUN, max_requests_per_peer_per_s=2.0, request_burst=3,
                               max_inbound_streams_per_peer=100, clock=clock)
        outcomes = []
        for _ in range(4):
            outcomes.append(served.admit("A"))
            if outcomes[-1] is None:
                served.release("A")
        assert outcomes == [None, None, None, BUSY]
        assert served.admit("B") is None  # another caller has its own bucket
        served.release("B")
        clock.now += 0.5  # 2/s × 0.5 s = one token
        assert served.admit("A") is None
        served.release("A")
        assert served.admit("A") == BUSY
        clock.now += 100.0  # refill is capped at the burst
        results = [served.admit("A") for _ in range(4)]
        assert results == [None, None, None, BUSY]
        assert served.stats.busy_rate == 3

    def test_order_of_the_rules(self) -> None:
        served = PayloadServer(RUN, max_inbound_streams=3, max_inbound_streams_per_peer=2,
                               allowed=frozenset({"A", "B"}), clock=FakeClock())
        assert served.admit("C") == FORBIDDEN
        assert served.admit(None) == FORBIDDEN
        assert served.admit("A") is None
        assert served.admit("A") is None
        assert served.admit("A") == BUSY  # per peer
        assert served.admit("B") is None
        assert served.admit("B") == BUSY  # global
        assert (served.stats.busy_streams, served.stats.busy_global, served.stats.forbidden) == (1, 1, 2)
        for peer in ("A", "A", "B"):
            served.release(peer)
        assert served.open_streams == 0
        assert served._open_by_peer == {}

    def test_per_peer_tables_are_bounded(self) -> None:
        served = PayloadServer(RUN, max_tracked_peers=16, clock=FakeClock())
        for i in range(1000):
            peer = f"peer{i}"
            assert served.admit(peer) is None
            served.release(peer)
            served._note(peer, "test")
        assert len(served._buckets) == 16
        assert len(served._warned) == 16
        assert served._open_by_peer == {}

    @pytest.mark.parametrize(("name", "value"), [
        ("max_inbound_streams", 0), ("max_inbound_streams_per_peer", -1),
        ("max_requests_per_peer_per_s", 0.0),
        ("request_burst", 0), ("serve_timeout_s", float("inf")), ("serve_timeout_s", float("nan")),
        ("min_serve_bytes_per_s", 0), ("max_tracked_peers", 0), ("request_burst", True),
        ("serve_timeout_s", "10"),
    ])
    def test_constructor_rejects(self, name: str, value: Any) -> None:
        with pytest.raises(ValueError, match=name):
            PayloadServer(RUN, **{name: value})

    def test_constructor_rejects_a_non_frozenset_allow_list(self) -> None:
        with pytest.raises(ValueError, match="allowed"):
            PayloadServer(RUN, allowed={"A"})  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "value"), [("idle_timeout_s", 0.0), ("idle_timeout_s", float("inf")),
                                             ("min_bytes_per_s", 0), ("min_bytes_per_s", True)])
def test_fetch_rejects_bad_read_limits(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=name):
        asyncio.run(fetch(None, None, RUN, ["payload", 0], max_bytes=1, timeout_s=1.0,  # type: ignore[arg-type]
                          **{name: value}))
