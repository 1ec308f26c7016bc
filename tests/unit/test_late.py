"""Unit tests for late payloads carried to the next round (``swarm/late.py``) and how the round uses them.

The book (:class:`LatePayloads`) with scripted continued fetches: a payload still streaming at its deadline is
kept and applied one round late with weight 1/√2; it is dropped when too stale, when its sender is banned,
excluded or gone, when its continued fetch was cut as a slowloris or is still running at the next round, and
never more than k are held. Then ``swarm.rounds.check_rows`` with a scripted ``fetch_payload`` (no network): a
slow but honest sender past its deadline is carried and its resumed fetch completes after its verified chunks,
while a slowloris is cut and not carried. Last, ``Peer._take_late``: the carried row joins the next round's guard
input with its staleness, a fresh row of the same sender wins, and a banned sender's row is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from p2p_guard.guard.integrity import RoundExpectation
from p2p_guard.identity import Identity
from p2p_guard.protocol import (
    PAYLOAD_CHUNK_BYTES,
    PROTOCOL_VERSION,
    ChunkVerifier,
    Envelope,
    Rejected,
    RejectReason,
    payload_digest,
)
from p2p_guard.protocol.chunks import chunk_digests
from p2p_guard.swarm import rounds
from p2p_guard.swarm.config import FetchLimits
from p2p_guard.swarm.late import LatePayloads, Resumed
from p2p_guard.swarm.sampling import staleness_weight
from p2p_guard.swarm.transport import OK, TOO_SLOW, FetchResult

SENDERS = [Identity.from_seed(bytes([i]) * 32) for i in range(1, 5)]
NUMEL = 3 * PAYLOAD_CHUNK_BYTES // 4  # three chunks of fp32
LIMITS = FetchLimits(run_id="run-1", max_parameters=1 << 28, fetch_timeout_s=0.3, fetch_idle_timeout_s=5.0,
                     min_fetch_bytes_per_s=1000)


def payload_of(seed: int) -> bytes:
    return torch.randn(NUMEL, generator=torch.Generator().manual_seed(seed)).numpy().tobytes()


def envelope(identity: Identity, payload: bytes, round_: int = 3, base_round: int | None = None) -> Envelope:
    return Envelope(protocol_version=PROTOCOL_VERSION, run_id="run-1", round=round_, sender=identity.peer_id,
                    base_hash=bytes(32), digest=payload_digest(payload), codec="fp32", shapes=((NUMEL,),),
                    n_samples=8, payload_bytes=len(payload), base_round=base_round)


def expect(round_: int = 3) -> RoundExpectation:
    return RoundExpectation(run_id="run-1", round=round_, shapes=((NUMEL,),))


def partial_verifier(env: Envelope, payload: bytes, nbytes: int = PAYLOAD_CHUNK_BYTES + 100) -> ChunkVerifier:
    """A verifier that holds the payload's first ``nbytes`` (its first chunk verified)."""
    verifier = ChunkVerifier(env.digest, env.payload_bytes)
    assert not isinstance(verifier.check_digests(chunk_digests(payload)), Rejected)
    assert not isinstance(verifier.feed(payload[:nbytes]), Rejected)
    return verifier


def finishing(verifier: ChunkVerifier, payload: bytes) -> Callable[[], Awaitable[Resumed]]:
    """A continued fetch that completes the payload from the verifier's first unverified chunk."""
    async def resume() -> Resumed:
        verifier.restart()
        verifier.feed(payload[verifier.resume_offset():])
        data = verifier.payload()
        assert not isinstance(data, Rejected)
        return data
    return resume


def ending(result: Resumed, *, wait_s: float = 0.0) -> Callable[[], Awaitable[Resumed]]:
    async def resume() -> Resumed:
        await asyncio.sleep(wait_s)
        return result
    return resume


def welcome(_sender: str) -> str | None:
    return None


class TestBook:
    def test_a_carried_payload_is_applied_next_round_with_the_staleness_weight(self) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=4)
            payload = payload_of(1)
            env = envelope(SENDERS[0], payload)
            verifier = partial_verifier(env, payload)
            assert book.carry(SENDERS[0].peer_id_b58, env, verifier, expect(), finishing(verifier, payload)) is None
            assert len(book) == 1
            await asyncio.sleep(0.01)
            assert book.take(3, welcome) == ([], [])  # carried in round 3: not applied in round 3 itself
            rows, dropped = book.take(4, welcome)
            assert dropped == []
            [row] = rows
            assert (row.sender, row.envelope, bytes(row.payload), row.staleness) == \
                (SENDERS[0].peer_id_b58, env, payload, 1)
            assert row.weight == pytest.approx(1 / math.sqrt(2)) == staleness_weight(1)
            assert len(book) == 0 and book.held_bytes == 0

        asyncio.run(go())

    def test_a_stale_update_counts_its_base_round(self) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=4)
            payload = payload_of(2)
            env = envelope(SENDERS[0], payload, round_=3, base_round=1)  # already 2 stale in its own round
            verifier = partial_verifier(env, payload)
            assert book.carry(SENDERS[0].peer_id_b58, env, verifier, expect(), finishing(verifier, payload)) is None
            await asyncio.sleep(0.01)
            [row], _ = book.take(4, welcome)
            assert (row.staleness, row.weight) == (3, pytest.approx(0.5))

        asyncio.run(go())

    def test_too_stale_by_the_round_it_would_apply_in_is_dropped(self) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=2)
            payload = payload_of(3)
            env = envelope(SENDERS[0], payload)
            verifier = partial_verifier(env, payload)
            assert book.carry(SENDERS[0].peer_id_b58, env, verifier, expect(), finishing(verifier, payload)) is None
            await asyncio.sleep(0.01)
            rows, [dropped] = book.take(6, welcome)  # we skipped rounds: 6 − 3 = 3 > 2
            assert rows == []
            assert (dropped.sender, dropped.round, dropped.rejected) == (SENDERS[0].peer_id_b58, 3, None)
            assert dropped.reason == "too stale for round 6 (3 > max_staleness 2)"
            # and one that could never apply is not even kept
            stale = envelope(SENDERS[1], payload, round_=3, base_round=1)
            assert book.carry(SENDERS[1].peer_id_b58, stale, partial_verifier(stale, payload), expect(),
                              ending(payload)) == "too stale for the next round (3 > max_staleness 2)"
            assert len(book) == 0

        asyncio.run(go())

    @pytest.mark.parametrize("why", ["banned: equivocation proof", "excluded by our reputation", "left the swarm"])
    def test_a_sender_banned_excluded_or_gone_by_then_is_dropped(self, why: str) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=4)
            payload = payload_of(4)
            env = envelope(SENDERS[0], payload)
            verifier = partial_verifier(env, payload)
            assert book.carry(SENDERS[0].peer_id_b58, env, verifier, expect(), finishing(verifier, payload)) is None
            await asyncio.sleep(0.01)
            rows, [dropped] = book.take(4, lambda s: why if s == SENDERS[0].peer_id_b58 else None)
            assert rows == [] and dropped.reason == why

        asyncio.run(go())

    def test_a_slowloris_is_never_carried(self) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=4)
            payload = payload_of(5)
            env = envelope(SENDERS[0], payload)
            started: list[bool] = []

            async def resume() -> Resumed:
                started.append(True)
                return payload

            assert book.carry(SENDERS[0].peer_id_b58, env, partial_verifier(env, payload), expect(), resume,
                              too_slow=True) == "cut as too slow"
            empty = ChunkVerifier(env.digest, env.payload_bytes)  # stalled before its first byte
            assert book.carry(SENDERS[0].peer_id_b58, env, empty, expect(), resume) == "nothing streamed"
            await asyncio.sleep(0.01)
            assert len(book) == 0 and started == []

        asyncio.run(go())

    def test_a_continued_fetch_cut_as_too_slow_or_with_a_bad_chunk_is_dropped(self) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=4)
            payload = payload_of(6)
            bad = Rejected(RejectReason.DIGEST_MISMATCH, "chunk 1 of 3 does not match its digest")
            for identity, result in ((SENDERS[0], "sender too slow while resuming, stream cut (idle)"),
                                     (SENDERS[1], bad)):
                env = envelope(identity, payload)
                assert book.carry(identity.peer_id_b58, env, partial_verifier(env, payload), expect(),
                                  ending(result)) is None
            await asyncio.sleep(0.01)
            rows, dropped = book.take(4, welcome)
            assert rows == []
            by_sender = {d.sender: d for d in dropped}
            slow, rejected = by_sender[SENDERS[0].peer_id_b58], by_sender[SENDERS[1].peer_id_b58]
            assert (slow.reason, slow.rejected) == ("sender too slow while resuming, stream cut (idle)", None)
            assert rejected.rejected == bad
            assert rejected.reason == "digest_mismatch: chunk 1 of 3 does not match its digest"

        asyncio.run(go())

    def test_a_fetch_still_running_at_the_next_round_is_cancelled_and_dropped(self) -> None:
        async def go() -> None:
            book = LatePayloads(capacity=8, max_staleness=4)
            payload = payload_of(7)
            env = envelope(SENDERS[0], payload)
            verifier = partial_verifier(env, payload)
            assert book.carry(SENDERS[0].peer_id_b58, env, verifier, expect(), ending(payload, wait_s=60.0)) is None
            await asyncio.sleep(0.01)
            task = book._entries[SENDERS[0].peer_id_b58, 3].task
            rows, [dropped] = book.take(4, welcome)
            assert rows == []
            assert dropped.reason == (f"still incomplete at round 4's fetch phase ({PAYLOAD_CHUNK_BYTES + 100} of "
                                      f"{len(payload)} bytes)")
            await asyncio.sleep(0.01)
            assert task.cancelled()

        asyncio.run(go())

    def test_at_most_k_payloads_are_held_one_per_sender_and_round(self) -> None:
        async def go() -> None:
            k = 2
            book = LatePayloads(capacity=k, max_staleness=4)
            payload = payload_of(8)
            answers = []
            for identity in SENDERS[:3] + SENDERS[:1]:
                env = envelope(identity, payload)
                answers.append(book.carry(identity.peer_id_b58, env, partial_verifier(env, payload), expect(),
                                          ending(payload, wait_s=60.0)))
            assert answers == [None, None, "already holding 2 late payloads",
                               "a late payload of this sender and round is already held"]
            assert len(book) == k
            assert book.held_bytes == k * len(payload)  # each at most its declared size
            await book.close()
            assert len(book) == 0
            env = envelope(SENDERS[0], payload)
            assert book.carry(SENDERS[0].peer_id_b58, env, partial_verifier(env, payload), expect(),
                              ending(payload, wait_s=60.0)) is None
            assert book.carry(SENDERS[0].peer_id_b58, env, partial_verifier(env, payload), expect(),
                              ending(payload)) == "a late payload of this sender and round is already held"
            nxt = envelope(SENDERS[0], payload, round_=4)  # late again in the next round: carried beside it
            assert book.carry(SENDERS[0].peer_id_b58, nxt, partial_verifier(nxt, payload), expect(4),
                              ending(payload)) is None
            await asyncio.sleep(0.01)
            rows, dropped = book.take(4, welcome)  # after round 4's fetch phase: round 3's is still incomplete
            assert rows == [] and [(d.sender, d.round) for d in dropped] == [(SENDERS[0].peer_id_b58, 3)]
            rows, dropped = book.take(5, welcome)
            assert [(r.sender, r.envelope.round) for r in rows] == [(SENDERS[0].peer_id_b58, 4)] and dropped == []

        asyncio.run(go())

    @pytest.mark.parametrize("bad", [{"capacity": 0}, {"max_staleness": -1}, {"capacity": True}])
    def test_local_bugs_raise(self, bad: dict[str, Any]) -> None:
        with pytest.raises(ValueError, match=next(iter(bad))):
            LatePayloads(**{"capacity": 8, "max_staleness": 4, **bad})


# --- check_rows with a scripted transport -----------------------------------------------------------------------

def test_check_rows_carries_a_slow_honest_sender_and_not_a_slowloris(monkeypatch: pytest.MonkeyPatch) -> None:
    slow, loris = SENDERS[0], SENDERS[1]
    payloads = {slow.peer_id_b58: payload_of(10), loris.peer_id_b58: payload_of(11)}
    envelopes = {s: envelope(identity, payloads[s]) for s, identity in
                 ((slow.peer_id_b58, slow), (loris.peer_id_b58, loris))}
    asked: list[tuple[str, int]] = []

    async def fake(_p2p: Any, peer: Any, _run: str, _round: int, verifier: ChunkVerifier, **kwargs: Any
                   ) -> FetchResult:
        sender = peer.to_base58()
        verifier.restart()
        asked.append((sender[-4:], verifier.next_chunk))
        payload = payloads[sender]
        if verifier.next_chunk == 0:
            verifier.check_digests(chunk_digests(payload))
            verifier.feed(payload[:PAYLOAD_CHUNK_BYTES + 100])  # one chunk and a bit, then the deadline passes
            if sender == loris.peer_id_b58:
                return FetchResult(TOO_SLOW, detail="idle for 5.0 s")
            await asyncio.sleep(kwargs["timeout_s"])
            return FetchResult(-1, detail="no complete answer within")
        verifier.feed(payload[verifier.resume_offset():])  # the resumed fetch in the background
        return FetchResult(OK, verifier.payload())  # type: ignore[arg-type]

    monkeypatch.setattr(rounds, "fetch_payload", fake)
    monkeypatch.setattr(rounds, "POLL_S", 0.01)
    monkeypatch.setattr(rounds, "extended_deadline_s", lambda *a, **k: None)  # no extension: the deadline passes

    async def go() -> tuple[Any, ...]:
        book = LatePayloads(capacity=8, max_staleness=4)
        rows, verdicts = await rounds.check_rows(None, envelopes, expect(), LIMITS, {}, asyncio.Event(),
                                                 late=book)
        await asyncio.sleep(0.05)  # the carried fetch resumes meanwhile
        return rows, verdicts, book.take(4, welcome)

    rows, verdicts, (late, dropped) = asyncio.run(go())
    assert rows == {}
    by_sender = {v.sender: v for v in verdicts}
    assert by_sender[slow.peer_id_b58].reason is RejectReason.TIMEOUT
    assert by_sender[slow.peer_id_b58].detail.endswith("; carried to the next round")
    assert by_sender[loris.peer_id_b58].detail.startswith(rounds.TOO_SLOW_DETAIL)
    assert [r.sender for r in late] == [slow.peer_id_b58] and dropped == []
    assert bytes(late[0].payload) == payloads[slow.peer_id_b58]
    assert (slow.peer_id_b58[-4:], 1) in asked  # resumed after its verified chunk 0
    assert [c for s, c in asked if s == loris.peer_id_b58[-4:]] == [0]  # the slowloris was asked once


@pytest.mark.parametrize("outcome", ["complete", "too_slow", "bad_chunk"])
def test_resume_payload_continues_after_the_verified_chunks(monkeypatch: pytest.MonkeyPatch, outcome: str) -> None:
    payload = payload_of(12)
    env = envelope(SENDERS[0], payload)
    # chunk 0 verified, and 500,000 bytes of chunk 1 that the resumed request reads again
    verifier = partial_verifier(env, payload, nbytes=PAYLOAD_CHUNK_BYTES + 500_000)
    calls: list[tuple[int, float]] = []
    bad = Rejected(RejectReason.DIGEST_MISMATCH, "chunk 1 of 3 does not match its digest")

    async def fake(_p2p: Any, _peer: Any, _run: str, round_: int, v: ChunkVerifier, **kwargs: Any) -> FetchResult:
        v.restart()
        calls.append((v.next_chunk, kwargs["timeout_s"]))
        if outcome == "too_slow":
            return FetchResult(TOO_SLOW, detail="idle for 5.0 s")
        if outcome == "bad_chunk":
            return FetchResult(rounds.BAD_DATA, detail=bad.detail, rejected=bad)
        v.feed(payload[v.resume_offset():])
        return FetchResult(OK, v.payload())  # type: ignore[arg-type]

    monkeypatch.setattr(rounds, "fetch_payload", fake)
    result = asyncio.run(rounds.resume_payload(None, env, verifier, LIMITS, asyncio.Event()))  # type: ignore[arg-type]
    [(first_chunk, timeout_s)] = calls
    assert first_chunk == 1
    # the floor's limit for the rest after the verified chunk: I + (b − 1 MiB) / m, not I + (b − received) / m
    assert timeout_s == pytest.approx(LIMITS.fetch_idle_timeout_s + (len(payload) - PAYLOAD_CHUNK_BYTES)
                                      / LIMITS.min_fetch_bytes_per_s, abs=1.0)
    if outcome == "complete":
        assert bytes(result) == payload  # type: ignore[arg-type]
    elif outcome == "too_slow":
        assert result == f"{rounds.TOO_SLOW_DETAIL} while resuming, stream cut (idle for 5.0 s)"
    else:
        assert result == bad


# --- the next round: Peer._take_late ----------------------------------------------------------------------------

def fake_peer(book: LatePayloads, banned: tuple[str, ...] = ()) -> Any:
    from p2p_guard.swarm.peer import Peer

    peer = Peer.__new__(Peer)
    peer.late = book
    peer.banned = dict.fromkeys(banned)  # type: ignore[arg-type]
    peer.departures = SimpleNamespace(left=set())  # type: ignore[assignment]
    peer.me = "me"
    peer.config = SimpleNamespace(codec="fp32")  # type: ignore[assignment]
    peer.codec_warned = set()
    peer.log = logging.LoggerAdapter(logging.getLogger("test_late"), {})  # type: ignore[assignment]
    return peer


def test_the_next_round_adds_the_late_row_with_its_staleness(caplog: pytest.LogCaptureFixture) -> None:
    from p2p_guard.swarm.peer import RoundOutcome

    async def go() -> None:
        book = LatePayloads(capacity=8, max_staleness=4)
        peer = fake_peer(book, banned=(SENDERS[2].peer_id_b58,))
        carried = {}
        for i, identity in enumerate(SENDERS[:3]):
            payload = payload_of(20 + i)
            env = envelope(identity, payload)
            verifier = partial_verifier(env, payload)
            assert book.carry(identity.peer_id_b58, env, verifier, expect(), finishing(verifier, payload)) is None
            carried[identity.peer_id_b58] = payload
        await asyncio.sleep(0.01)
        fresh = torch.ones(NUMEL)
        rows = {SENDERS[1].peer_id_b58: fresh}  # its round 4 update arrived: that one counts
        staleness = {SENDERS[1].peer_id_b58: 0}
        outcome = RoundOutcome(4)
        with caplog.at_level(logging.INFO):
            added = peer._take_late(4, rows, staleness, frozenset(), outcome)
        a = SENDERS[0].peer_id_b58
        assert added == {a: 3}
        assert set(rows) == {a, SENDERS[1].peer_id_b58} and rows[SENDERS[1].peer_id_b58] is fresh
        assert torch.equal(rows[a], torch.frombuffer(bytearray(carried[a]), dtype=torch.float32))
        assert staleness == {a: 1, SENDERS[1].peer_id_b58: 0}
        assert outcome.bytes_received == len(carried[a])
        assert "dropped: banned: equivocation proof" in caplog.text
        assert "dropped: its round 4 update arrived" in caplog.text
        assert len(book) == 0

    asyncio.run(go())


def test_an_accepted_late_row_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    from p2p_guard.swarm.peer import RoundOutcome
    from p2p_guard.swarm.verdicts import SenderVerdict

    peer = fake_peer(LatePayloads(capacity=8, max_staleness=4))
    a, b = SENDERS[0].peer_id_b58, SENDERS[1].peer_id_b58
    outcome = RoundOutcome(4, verdicts=[
        SenderVerdict.judged(a, 4, True, None, "", 1.0, 0.5, staleness_weight(1), 1),
        SenderVerdict.judged(b, 4, False, "outlier", "far", 9.0, -0.5, staleness_weight(1), 1)])
    with caplog.at_level(logging.INFO):
        peer._count_late({a: 3, b: 3}, outcome)
    assert outcome.late_applied == 1
    assert f"late update of {a[-8:]} (round 3) applied in round 4, weight 0.71" in caplog.text
    assert b[-8:] not in caplog.text

