"""Unit tests: a payload fetch resumes after a stall of a sender whose average rate stays above the floor.

Under CPU load an honest sender's event loop can pause for the idle timeout (5 s) in the middle of its payload: in a
25M-parameter round (stop 34) 2 of 30 payloads were cut at 95 % and not asked again, so those honest updates were
lost. ``rounds._payload`` now resumes such a fetch from its first unverified chunk, at most
``MAX_STALL_RESUMES`` times, while a trickle (a slowloris: average under the floor) is still cut at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest

from p2p_guard.identity import Identity
from p2p_guard.protocol import PROTOCOL_VERSION, Envelope, Rejected, RejectReason
from p2p_guard.protocol.chunks import PAYLOAD_CHUNK_BYTES, ChunkVerifier, chunk_digests, payload_root
from p2p_guard.swarm import rounds
from p2p_guard.swarm.config import FetchLimits
from p2p_guard.swarm.pacing import RateBook
from p2p_guard.swarm.transport import OK, TOO_SLOW, FetchResult

SENDER = Identity.from_seed(bytes(range(32)))
PAYLOAD = bytes(range(256)) * (3 * PAYLOAD_CHUNK_BYTES // 256)
PAYLOAD_DIGESTS = chunk_digests(PAYLOAD)
ENV = Envelope(protocol_version=PROTOCOL_VERSION, run_id="run-1", round=3, sender=SENDER.peer_id,
               base_hash=bytes(32), digest=payload_root(PAYLOAD), codec="fp32", shapes=((len(PAYLOAD) // 4,),),
               n_samples=8, payload_bytes=len(PAYLOAD))
LIMITS = FetchLimits(run_id="run-1", max_parameters=1 << 22, fetch_timeout_s=30.0, fetch_idle_timeout_s=5.0,
                     min_fetch_bytes_per_s=1000)
STALL = "no bytes for 5.0 s after 1048576 of 3145824 bytes"
TRICKLE = "3000 of 3145824 bytes in 8.0 s, below 1000 B/s after a 5.0 s allowance"


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds, "POLL_S", 0.01)


def _script(monkeypatch: pytest.MonkeyPatch, answers: Iterator[str | None]) -> list[int]:
    """``rounds.fetch_payload`` sends one more chunk per call, then answers TOO_SLOW with the next detail (None:
    it sends the rest and answers OK). Returns the verified chunk count at each call."""
    seen: list[int] = []

    async def fake_fetch(_p2p: object, _peer: object, _run: str, _round: int, verifier: ChunkVerifier,
                         **_kwargs: object) -> FetchResult:
        seen.append(verifier.next_chunk)
        verifier.restart()
        if not verifier.has_digests:
            verifier.check_digests(PAYLOAD_DIGESTS)
        detail = next(answers)
        start = verifier.resume_offset()
        end = len(PAYLOAD) if detail is None else min(len(PAYLOAD), start + PAYLOAD_CHUNK_BYTES + 7)
        verifier.feed(PAYLOAD[start:end])
        if detail is None:
            return FetchResult(OK, verifier.payload())
        return FetchResult(TOO_SLOW, None, detail)

    monkeypatch.setattr(rounds, "fetch_payload", fake_fetch)
    return seen



def _run(limits: FetchLimits = LIMITS) -> bytes | bytearray | Rejected | None:
    async def go() -> bytes | bytearray | Rejected | None:
        return await rounds._payload(None, SENDER.peer_id_b58, ENV, limits, RateBook(), {}, asyncio.Event())

    return asyncio.run(go())


def test_an_honest_sender_that_stalls_is_resumed_after_its_verified_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _script(monkeypatch, iter([STALL, STALL, None]))
    assert _run() == PAYLOAD
    assert seen == [0, 1, 2]  # each try starts after the chunks verified before the stall


def test_a_third_stall_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rounds.MAX_STALL_RESUMES == 2
    seen = _script(monkeypatch, iter([STALL, STALL, STALL, None]))
    result = _run()
    assert isinstance(result, Rejected)
    assert result.reason is RejectReason.TIMEOUT
    assert result.detail == f"{rounds.TOO_SLOW_DETAIL}, stream cut ({STALL})"
    assert seen == [0, 1, 2]


def test_a_trickle_under_the_floor_is_not_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _script(monkeypatch, iter([TRICKLE, None]))
    result = _run()
    assert isinstance(result, Rejected)
    assert result.detail == f"{rounds.TOO_SLOW_DETAIL}, stream cut ({TRICKLE})"
    assert seen == [0]


def test_a_stall_with_an_average_under_the_floor_is_not_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 MiB in a few ms is above 1000 B/s, but not above a floor of 10 TB/s
    seen = _script(monkeypatch, iter([STALL, None]))
    result = _run(dataclasses.replace(LIMITS, min_fetch_bytes_per_s=10**13))
    assert isinstance(result, Rejected)
    assert result.detail == f"{rounds.TOO_SLOW_DETAIL}, stream cut ({STALL})"
    assert seen == [0]


@pytest.mark.parametrize(("detail", "received", "elapsed", "expected"), [
    (STALL, 10_001, 10.0, True),  # 1000.1 B/s over 10 s: above a floor of 1000 B/s
    (STALL, 10_000, 10.0, False),  # exactly the floor is not above it
    (TRICKLE, 10**9, 1.0, False),  # a rate cut is never a stall
    ("no status byte within 5.0 s", 10**9, 1.0, False),  # nor a server that never answered
])
def test_stalled_above_floor(detail: str, received: int, elapsed: float, expected: bool) -> None:
    assert rounds.stalled_above_floor(detail, received, elapsed, LIMITS) is expected
