"""Unit tests of commit-then-reveal across the swarm (``swarm/rounds.py``), without a network.

The reveal gate: a peer serves its payload only once every other sender of its closed commit set has published a
signed ``close`` record, or after ``reveal_wait_s``. The late-commit rule: a commit that appears after our close is reported, never fetched.
The DHT is a dict (``FakeDHT``); the payload server is real but never attached to a P2P daemon.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from p2p_guard.identity import Identity
from p2p_guard.protocol import PROTOCOL_VERSION, Envelope, RejectReason, payload_digest, sign_envelope
from p2p_guard.protocol.records import open_record, sign_record
from p2p_guard.swarm import rounds
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.records import close_key, commit_key, presence_key, read_closes
from p2p_guard.swarm.rounds import (
    ClosedCommits,
    IntegrityVerdict,
    await_commits,
    late_commits,
    reveal_after_close,
)
from p2p_guard.swarm.transport import NOT_READY, OK, PayloadServer
from fake_dht import FakeDHT  # noqa: E402 - the tests' shared dict-backed DHT

RUN = "close-test"
ALICE, BOB, CAROL, MALLORY = (Identity.from_seed(bytes([i]) * 32) for i in (1, 2, 3, 4))
A, B, C, M = (who.peer_id_b58 for who in (ALICE, BOB, CAROL, MALLORY))
PAYLOAD = b"\x00\x00\x80\x3f" * 3



@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds, "POLL_S", 0.02)


def close(who: Identity, round_: int = 3) -> bytes:
    return sign_record("close", RUN, round_, 3, who)


def served(server: PayloadServer, round_: int = 3) -> int:
    return server._answer(["payload", round_])[0]


def envelope(who: Identity, payload: bytes = PAYLOAD, round_: int = 3, run_id: str = RUN) -> Envelope:
    return Envelope(protocol_version=PROTOCOL_VERSION, run_id=run_id, round=round_, sender=who.peer_id,
                    base_hash=bytes(32), digest=payload_digest(payload), codec="fp32", shapes=((3,),),
                    n_samples=10, payload_bytes=len(payload))


class TestWithheld:
    """The copycat's position: present, but no commit when our phase closes (on quorum + grace)."""

    @staticmethod
    def swarm() -> Any:
        dht = FakeDHT()
        dht.data[presence_key(RUN)] = {p.peer_id_b58: sign_record("presence", RUN, 3, 3, p)
                                       for p in (ALICE, BOB, CAROL, MALLORY)}
        dht.data[commit_key(RUN, 3)] = {p.peer_id_b58: sign_envelope(envelope(p, bytes([i]) * 12), p)
                                        for i, p in enumerate((ALICE, BOB, CAROL))}
        return dht

    def test_a_present_peer_without_a_commit_is_reported(self) -> None:
        config = PeerConfig(run_id=RUN, grace_s=0.05).commit_phase
        closed = asyncio.run(await_commits(self.swarm(), config, 3, A, asyncio.Event()))
        assert isinstance(closed, ClosedCommits)
        assert sorted(closed.commits) == sorted([A, B, C])
        assert closed.withheld == frozenset({M})

    def test_banned_and_disallowed_peers_are_not_withholding(self) -> None:
        config = PeerConfig(run_id=RUN, grace_s=0.05).commit_phase
        closed = asyncio.run(await_commits(self.swarm(), config, 3, A, asyncio.Event(), exclude=frozenset({M})))
        assert closed.withheld == frozenset()
        closed = asyncio.run(await_commits(self.swarm(), config, 3, A, asyncio.Event(),
                                           allowed=frozenset({A, B, C})))
        assert closed.withheld == frozenset()


    def test_a_suspect_is_not_waited_for_but_its_commit_still_counts(self) -> None:
        # grace 5 s: closing on "every present peer committed" is the only way to close fast
        config = PeerConfig(run_id=RUN, grace_s=5.0).commit_phase
        started = time.monotonic()
        closed = asyncio.run(await_commits(self.swarm(), config, 3, A, asyncio.Event(), not_waited=frozenset({M})))
        assert time.monotonic() - started < 2.0
        assert sorted(closed.commits) == sorted([A, B, C])
        assert closed.withheld == frozenset()
        closed = asyncio.run(await_commits(self.swarm(), config, 3, A, asyncio.Event(), not_waited=frozenset({C})))
        assert sorted(closed.commits) == sorted([A, B, C])  # C committed: returned, though suspected
        assert closed.withheld == frozenset({M})


class TestRevealGate:
    def test_does_not_reveal_before_every_other_sender_closed(self) -> None:
        async def scenario() -> tuple[frozenset[str], list[int]]:
            dht: Any = FakeDHT()
            server, stop = PayloadServer(RUN), asyncio.Event()
            config = PeerConfig(run_id=RUN, reveal_wait_s=30.0, fetch_timeout_s=60.0).commit_phase
            gate = asyncio.create_task(reveal_after_close(dht, server, ALICE, config, 3, [A, B, C], PAYLOAD, stop))
            statuses = []
            await asyncio.sleep(0.2)
            statuses.append(served(server))
            await dht.store(close_key(RUN, 3), B, close(BOB), 600)
            await asyncio.sleep(0.2)
            statuses.append(served(server))
            await dht.store(close_key(RUN, 3), C, close(CAROL), 600)
            missing = await asyncio.wait_for(gate, 5.0)
            statuses.append(served(server))
            return missing, statuses

        missing, statuses = asyncio.run(scenario())
        assert missing == frozenset()
        assert statuses == [NOT_READY, NOT_READY, OK]

    def test_publishes_its_own_close_record_first(self) -> None:
        dht: Any = FakeDHT()
        server = PayloadServer(RUN)
        config = PeerConfig(run_id=RUN, reveal_wait_s=0.1).commit_phase
        asyncio.run(reveal_after_close(dht, server, ALICE, config, 3, [A, B], PAYLOAD, asyncio.Event()))
        record = open_record(dht.data[close_key(RUN, 3)][A], kind="close", run_id=RUN)
        assert (record.round, record.sender, record.value) == (3, ALICE.peer_id, 2)
        assert asyncio.run(read_closes(dht, RUN, 3)) == {A}

    def test_reveals_after_the_bound_without_the_missing_close(self) -> None:
        dht: Any = FakeDHT()
        server = PayloadServer(RUN)
        dht.data[close_key(RUN, 3)] = {B: close(BOB)}
        config = PeerConfig(run_id=RUN, reveal_wait_s=0.3).commit_phase
        started = time.monotonic()
        missing = asyncio.run(reveal_after_close(dht, server, ALICE, config, 3, [A, B, C], PAYLOAD,
                                                 asyncio.Event()))
        elapsed = time.monotonic() - started
        assert missing == frozenset({C})
        assert served(server) == OK
        assert 0.3 <= elapsed < 3.0

    def test_forged_stale_or_foreign_close_records_do_not_open_the_gate(self) -> None:
        dht: Any = FakeDHT()
        server = PayloadServer(RUN)
        dht.data[close_key(RUN, 3)] = {
            B: close(MALLORY),  # Mallory's record under Bob's subkey
            C: close(CAROL, round_=2),  # Carol's close of the previous round, replayed
            M: b"garbage",
        }
        config = PeerConfig(run_id=RUN, reveal_wait_s=0.2).commit_phase
        missing = asyncio.run(reveal_after_close(dht, server, ALICE, config, 3, [A, B, C], PAYLOAD,
                                                 asyncio.Event()))
        assert missing == frozenset({B, C})

    def test_alone_in_its_closed_set_it_reveals_at_once(self) -> None:
        dht: Any = FakeDHT()
        server = PayloadServer(RUN)
        config = PeerConfig(run_id=RUN, reveal_wait_s=30.0, fetch_timeout_s=60.0).commit_phase
        started = time.monotonic()
        missing = asyncio.run(reveal_after_close(dht, server, ALICE, config, 3, [A], PAYLOAD, asyncio.Event()))
        assert missing == frozenset()
        assert served(server) == OK
        assert time.monotonic() - started < 2.0
        assert close_key(RUN, 3) not in dht.reads  # nobody to wait for: no poll

    def test_stop_ends_the_wait_without_revealing(self) -> None:
        async def scenario() -> tuple[frozenset[str], float]:
            dht: Any = FakeDHT()
            server, stop = PayloadServer(RUN), asyncio.Event()
            config = PeerConfig(run_id=RUN, reveal_wait_s=30.0, fetch_timeout_s=60.0).commit_phase
            gate = asyncio.create_task(reveal_after_close(dht, server, ALICE, config, 3, [A, B], PAYLOAD, stop))
            await asyncio.sleep(0.1)
            started = time.monotonic()
            stop.set()
            missing = await asyncio.wait_for(gate, 5.0)
            assert served(server) == NOT_READY
            return missing, time.monotonic() - started

        missing, elapsed = asyncio.run(scenario())
        assert missing == frozenset({B})
        assert elapsed < 1.0


class TestLateCommits:
    def test_only_valid_new_commits_are_reported(self) -> None:
        dht: Any = FakeDHT()
        dht.data[commit_key(RUN, 3)] = {
            A: sign_envelope(envelope(ALICE), ALICE),  # in our closed set
            B: sign_envelope(envelope(BOB), BOB),  # banned
            C: sign_envelope(envelope(CAROL, round_=2), CAROL),  # another round: not a commit of this one
            M: sign_envelope(envelope(MALLORY), MALLORY),  # late
        }
        config = PeerConfig(run_id=RUN).commit_phase
        verdicts = asyncio.run(late_commits(dht, config, 3, [A], not_before=0.0, stop=asyncio.Event(),
                                            exclude=frozenset({B})))
        assert verdicts == [IntegrityVerdict(M, RejectReason.LATE_COMMIT,
                                             "committed after our commit phase closed; never fetched")]

    def test_a_sender_that_left_is_not_reported_late(self) -> None:
        """Bob committed into our closed set, then left: the peer drops a departed sender from its closed set
        (``_drop_departed``, reported there as departed), and the one re-read reported his commit as
        ``late_commit`` ("committed after our commit phase closed"). Carol committed late, then left."""
        dht: Any = FakeDHT()
        dht.data[commit_key(RUN, 3)] = {
            A: sign_envelope(envelope(ALICE), ALICE),  # in our closed set
            B: sign_envelope(envelope(BOB), BOB),  # was in it, dropped once he left
            C: sign_envelope(envelope(CAROL), CAROL),  # late, and left
            M: sign_envelope(envelope(MALLORY), MALLORY),  # late
        }
        departures = rounds.Departures(dht, RUN)
        departures.note(frozenset({B, C}))
        config = PeerConfig(run_id=RUN).commit_phase
        verdicts = asyncio.run(late_commits(dht, config, 3, [A], not_before=0.0, stop=asyncio.Event(),
                                            departures=departures))
        assert [(v.sender, v.reason) for v in verdicts] == [(M, RejectReason.LATE_COMMIT)]

    def test_forged_values_and_outsiders_are_not_reported(self) -> None:
        dht: Any = FakeDHT()
        dht.data[commit_key(RUN, 3)] = {
            B: sign_envelope(envelope(MALLORY), MALLORY),  # Mallory's envelope under Bob's subkey
            C: b"garbage",
            M: sign_envelope(envelope(MALLORY), MALLORY),  # outside the allow-list
        }
        config = PeerConfig(run_id=RUN).commit_phase
        allowed = frozenset({A, B, C})
        verdicts = asyncio.run(late_commits(dht, config, 3, [A], not_before=0.0, stop=asyncio.Event(),
                                            allowed=allowed))
        assert verdicts == []
        assert dht.reads == {commit_key(RUN, 3): 1}

    def test_reads_once_and_not_before_it_is_told(self) -> None:
        """A commit made the moment a payload was revealed still lands before the one read."""
        async def scenario() -> tuple[list[IntegrityVerdict], float]:
            dht: Any = FakeDHT()
            config = PeerConfig(run_id=RUN).commit_phase
            revealed_at = time.monotonic()
            late = asyncio.create_task(late_commits(dht, config, 3, [A], not_before=revealed_at + 0.4,
                                                    stop=asyncio.Event()))
            await asyncio.sleep(0.1)  # the copycat fetched the payload: now it commits
            await dht.store(commit_key(RUN, 3), M, sign_envelope(envelope(MALLORY), MALLORY), 600)
            verdicts = await asyncio.wait_for(late, 5.0)
            assert dht.reads == {commit_key(RUN, 3): 1}
            return verdicts, time.monotonic() - revealed_at

        verdicts, elapsed = asyncio.run(scenario())
        assert [(v.sender, v.reason) for v in verdicts] == [(M, RejectReason.LATE_COMMIT)]
        assert 0.4 <= elapsed < 3.0

    def test_stop_ends_the_wait_and_reads_nothing(self) -> None:
        dht: Any = FakeDHT()
        stop = asyncio.Event()
        stop.set()
        config = PeerConfig(run_id=RUN).commit_phase
        started = time.monotonic()
        assert asyncio.run(late_commits(dht, config, 3, [A], not_before=started + 30.0, stop=stop)) == []
        assert time.monotonic() - started < 1.0
        assert dht.reads == {}
