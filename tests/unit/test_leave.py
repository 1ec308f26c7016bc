"""Clean leave (issue 11), without a network: the signed ``leave`` record under the presence key, who reads it as
gone, and the waits that end on it (the close gate, payload fetches) or on our own stop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import hivemind.utils
import pytest

from p2p_guard.guard.integrity import RoundExpectation
from p2p_guard.identity import Identity
from p2p_guard.protocol import CODECS, PROTOCOL_VERSION, Envelope, payload_digest
from p2p_guard.protocol.records import sign_record
from p2p_guard.swarm import records, rounds
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.records import presence_key, publish_leave, read_presence, read_roster
from p2p_guard.swarm.rounds import Departures, check_rows, first_of, reveal_after_close
from p2p_guard.swarm.transport import NOT_FOUND, OK, FetchResult, PayloadServer
from fake_dht import FakeDHT  # noqa: E402 - the tests' shared dict-backed DHT

RUN = "leave-test"
ALICE, BOB, CAROL, MALLORY = (Identity.from_seed(bytes([i]) * 32) for i in (1, 2, 3, 4))
A, B, C, M = (who.peer_id_b58 for who in (ALICE, BOB, CAROL, MALLORY))
PAYLOAD = b"\x00\x00\x80\x3f" * 3



@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds, "POLL_S", 0.02)


def present(dht: FakeDHT, *who: Identity, round_: int = 3) -> None:
    for p in who:
        dht.data.setdefault(presence_key(RUN), {})[p.peer_id_b58] = sign_record("presence", RUN, round_, round_, p)


def envelope(who: Identity, round_: int = 3) -> Envelope:
    return Envelope(protocol_version=PROTOCOL_VERSION, run_id=RUN, round=round_, sender=who.peer_id,
                    base_hash=bytes(32), digest=payload_digest(PAYLOAD), codec="fp32", shapes=((3,),),
                    n_samples=10, payload_bytes=len(PAYLOAD))


class TestRoster:
    def test_a_leave_record_replaces_presence(self) -> None:
        dht: Any = FakeDHT()
        present(dht, ALICE, BOB, CAROL)
        assert asyncio.run(publish_leave(dht, BOB, RUN, 3))
        roster = asyncio.run(read_roster(dht, RUN))
        assert roster.present == {A: 3, C: 3}
        assert roster.left == frozenset({B})
        assert asyncio.run(read_presence(dht, RUN)) == {A: 3, C: 3}

    def test_an_old_leave_record_says_nothing(self) -> None:
        dht: Any = FakeDHT()
        old = int(hivemind.utils.get_dht_time() - records.LEAVE_VALID_S - 5)
        dht.data[presence_key(RUN)] = {B: sign_record("leave", RUN, 3, old, BOB)}
        roster = asyncio.run(read_roster(dht, RUN))
        assert roster == records.Roster({}, frozenset())

    def test_a_leave_signed_by_someone_else_is_ignored(self) -> None:
        dht: Any = FakeDHT()
        present(dht, ALICE)
        dht.data[presence_key(RUN)][B] = sign_record("leave", RUN, 3, int(hivemind.utils.get_dht_time()), MALLORY)
        roster = asyncio.run(read_roster(dht, RUN))
        assert roster.left == frozenset() and roster.present == {A: 3}

    def test_a_peer_that_comes_back_is_no_longer_left(self) -> None:
        async def scenario() -> tuple[bool, bool]:
            dht: Any = FakeDHT()
            await publish_leave(dht, BOB, RUN, 3)
            departures = Departures(dht, RUN)
            assert await departures.refresh() == frozenset({B})
            gone = departures.event(B).is_set()
            present(dht, BOB)
            await departures.refresh()
            return gone, departures.event(B).is_set()

        assert asyncio.run(scenario()) == (True, False)


class TestWaitsEnd:
    def test_the_close_gate_does_not_wait_for_a_sender_that_left(self) -> None:
        async def scenario() -> tuple[frozenset[str], float, int]:
            dht: Any = FakeDHT()
            present(dht, ALICE, CAROL)
            await publish_leave(dht, BOB, RUN, 3)
            dht.data[records.close_key(RUN, 3)] = {C: sign_record("close", RUN, 3, 3, CAROL)}
            server, stop = PayloadServer(RUN), asyncio.Event()
            started = time.monotonic()
            config = PeerConfig(run_id=RUN, reveal_wait_s=30.0, fetch_timeout_s=60.0)
            missing = await reveal_after_close(dht, server, ALICE, config, 3,
                                               [A, B, C], PAYLOAD, stop, Departures(dht, RUN))
            return missing, time.monotonic() - started, server._answer(["payload", 3])[0]

        missing, seconds, status = asyncio.run(scenario())
        assert missing == frozenset() and seconds < 2.0 and status == OK

    def test_a_fetch_in_flight_is_cut_when_its_sender_leaves(self, monkeypatch: pytest.MonkeyPatch) -> None:
        async def hangs(*_args: object, **_kwargs: object) -> FetchResult:
            await asyncio.sleep(60)
            return FetchResult(OK, PAYLOAD)

        monkeypatch.setattr(rounds, "fetch_payload", hangs)

        async def scenario() -> tuple[Any, float]:
            dht: Any = FakeDHT()
            present(dht, ALICE, BOB)
            expect = RoundExpectation(run_id=RUN, round=3, shapes=((3,),), codecs=CODECS,
                                      max_payload_bytes=1 << 20, max_staleness=4)
            stop = asyncio.Event()
            task = asyncio.create_task(check_rows(None, {B: envelope(BOB)}, expect,  # type: ignore[arg-type]
                                                  PeerConfig(run_id=RUN, fetch_timeout_s=30.0), {}, stop,
                                                  Departures(dht, RUN)))
            await asyncio.sleep(0.2)
            started = time.monotonic()
            await publish_leave(dht, BOB, RUN, 3)
            result = await asyncio.wait_for(task, 5.0)
            return result, time.monotonic() - started

        (rows, verdicts), seconds = asyncio.run(scenario())
        assert rows == {} and verdicts == [], "a sender that left gets no row and no verdict"
        assert seconds < 1.0

    def test_a_fetch_in_flight_is_cut_by_our_stop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        async def hangs(*_args: object, **_kwargs: object) -> FetchResult:
            await asyncio.sleep(60)
            return FetchResult(OK, PAYLOAD)

        monkeypatch.setattr(rounds, "fetch_payload", hangs)

        async def scenario() -> float:
            stop = asyncio.Event()
            expect = RoundExpectation(run_id=RUN, round=3, shapes=((3,),), codecs=CODECS,
                                      max_payload_bytes=1 << 20, max_staleness=4)
            task = asyncio.create_task(check_rows(None, {B: envelope(BOB)}, expect,  # type: ignore[arg-type]
                                                  PeerConfig(run_id=RUN, fetch_timeout_s=30.0), {}, stop))
            await asyncio.sleep(0.1)
            started = time.monotonic()
            stop.set()
            await asyncio.wait_for(task, 5.0)
            return time.monotonic() - started

        assert asyncio.run(scenario()) < 1.0

    def test_first_of(self) -> None:
        async def value() -> int:
            return 7

        async def scenario() -> tuple[int | None, int | None]:
            stop = asyncio.Event()
            first = await first_of(value(), stop)
            stop.set()
            return first, await first_of(asyncio.sleep(60, 8), stop)

        assert asyncio.run(scenario()) == (7, None)


def test_a_withdrawn_server_serves_nothing() -> None:
    server = PayloadServer(RUN)
    server.reveal(3, PAYLOAD)
    server.publish_theta(4, PAYLOAD)
    server.withdraw()
    server.reveal(4, PAYLOAD)
    assert server.withdrawn
    assert server._answer(["payload", 3])[0] == NOT_FOUND
    assert server._answer(["payload", 4])[0] == NOT_FOUND
    assert server._answer(["theta", -1])[0] == NOT_FOUND


class TestLeaveOnTheWayOut:
    """``peer._leave``: a refused second session of a running identity must not publish the leave record."""

    class _Server:
        withdrawn = False

        def withdraw(self) -> None:
            self.withdrawn = True

    class _Events:
        def __init__(self) -> None:
            self.emitted: list[tuple[str, dict[str, Any]]] = []

        def emit(self, kind: str, **fields: Any) -> None:
            self.emitted.append((kind, fields))

    def _peer(self, dht: Any) -> Any:
        import logging

        from p2p_guard.swarm.peer import Peer

        peer: Any = object.__new__(Peer)
        peer.dht, peer.identity, peer.round = dht, BOB, 3
        peer.config = PeerConfig(run_id=RUN, task="digits")
        peer.server, peer.events, peer.log = self._Server(), self._Events(), logging.getLogger("test-leave")
        return peer

    def test_a_leaving_peer_publishes_its_leave_record(self) -> None:
        from p2p_guard.swarm.peer import _leave

        dht: Any = FakeDHT()
        present(dht, ALICE, BOB)
        peer = self._peer(dht)
        asyncio.run(_leave(peer))
        assert asyncio.run(read_roster(dht, RUN)).left == frozenset({B})
        assert peer.server.withdrawn and peer.events.emitted == [("leave", {"round": 3, "stored": True})]

    def test_a_refused_second_session_leaves_the_live_sessions_presence_alone(self) -> None:
        from p2p_guard.swarm.peer import _leave

        dht: Any = FakeDHT()
        present(dht, ALICE, BOB)
        peer = self._peer(dht)
        asyncio.run(_leave(peer, publish=False))
        roster = asyncio.run(read_roster(dht, RUN))
        assert roster.present == {A: 3, B: 3} and roster.left == frozenset()
        assert peer.server.withdrawn and peer.events.emitted == [("leave", {"round": 3, "stored": False})]
