"""Late payloads: a slow but honest sender's update counts in the receiver's next round instead of being lost.

A sampled sender whose payload is still incomplete at its per-sender deadline (``swarm.pacing``), although its
stream ran faster than the slowloris floor ``min_fetch_bytes_per_s`` the whole time, gets the ``timeout`` verdict
in its round r, as before. If it had streamed something, its fetch is now *carried*: the verified chunks stay
in their :class:`~p2p_guard.protocol.ChunkVerifier` and the fetch resumes at once in the background, from the
first unverified chunk (``["payload", r, k]``). At the receiver's next round R > r, after that round's own
fetch phase, :meth:`LatePayloads.take` hands back each carried payload that completed, and the peer puts it
through the same integrity check (``check_payload`` against round r's expectation) and the guard as any row,
judged against our own update of round R, with the weight ``staleness_weight(R − base_round)``
(``swarm.sampling``; 1/√2 ≈ 0.71 for a fresh update applied one round late). It is dropped, with a logged
reason, when

- its staleness R − base_round exceeds ``max_staleness``;
- its sender is banned (equivocation), excluded by our reputation or has left the swarm by round R;
- its fetch is still incomplete at round R's fetch phase (it never holds up a round: the task is cancelled);
- its continued fetch was cut as a slowloris (stalled, or slower than the floor), or the sender stopped
  serving it; a chunk that fails its digest is a ``digest_mismatch`` rejection, reported in round R.

A sender cut as a slowloris in round r (``TOO_SLOW``), or one that streamed nothing, is never carried.

Memory: at most ``capacity`` payloads are held (the peer uses k, its fan-out), each in its verifier's one buffer
of exactly its declared size, which already passed its codec's cap before any byte was read. An entry is held
from its round's deadline to the next round in which :meth:`take` runs, and never again after that: every entry
is either handed back or dropped there. One carried fetch per sender and round: a sender late in every round
has its round r − 1 payload taken after round r's fetch phase, in which its round r payload was carried, so it
holds two entries for that long (both count against ``capacity``).

No I/O of its own: the caller gives :meth:`LatePayloads.carry` the coroutine that continues the fetch
(``swarm.rounds.resume_payload``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from p2p_guard.guard.integrity import RoundExpectation
from p2p_guard.protocol import ChunkVerifier, Envelope, Rejected
from p2p_guard.swarm.sampling import staleness_weight

__all__ = ["Dropped", "LatePayloads", "LateRow", "Resumed"]

logger = logging.getLogger(__name__)

#: What a continued fetch ends with: the complete verified payload, a rejection of its bytes
#: (``digest_mismatch``...), or a sentence saying why it ended without a payload (cut as a slowloris, refused).
Resumed = bytes | bytearray | Rejected | str


@dataclass
class _Entry:
    envelope: Envelope
    verifier: ChunkVerifier
    expect: RoundExpectation
    task: asyncio.Task[Resumed]


@dataclass(frozen=True)
class LateRow:
    """A carried payload that arrived in full, to be checked and judged in round ``applied_round``.

    Attributes:
        sender: the sender's PeerID (base58).
        envelope: its authenticated envelope of round ``envelope.round`` (< ``applied_round``).
        payload: the verified payload, ``envelope.payload_bytes`` bytes (each chunk already checked against the
            committed root; ``check_payload`` still runs on it).
        expect: the expectation of ``envelope.round``, the one its envelope was checked against.
        staleness: ``applied_round − envelope.base_round``, rounds (≥ 1).
        weight: ``staleness_weight(staleness)``, in (0, 1).
    """

    sender: str
    envelope: Envelope
    payload: bytes | bytearray
    expect: RoundExpectation
    staleness: int
    weight: float


@dataclass(frozen=True)
class Dropped:
    """A carried payload that will not count: whose (``sender``, ``round``), why, and its rejection if any.

    ``rejected`` is set when the continued fetch found bad bytes (a verdict for the round it is reported in);
    None for a circumstantial drop (too stale, incomplete, banned, left, cut as a slowloris).
    """

    sender: str
    round: int
    reason: str
    rejected: Rejected | None = None


class LatePayloads:
    """The payloads carried over from a round's deadline to the next round (at most ``capacity``).

    Use: :meth:`carry` when a fetch ends at its deadline, :meth:`take` once per round after its fetch phase,
    :meth:`close` on shutdown. Every method runs in the peer's event loop.
    """

    def __init__(self, *, capacity: int, max_staleness: int) -> None:
        """Create an empty book.

        Args:
            capacity: most payloads held at once (the fan-out k, ≥ 1).
            max_staleness: largest ``applied_round − base_round`` of a row still applied, rounds (≥ 0; a late
                row is at least 1 stale, so with 0 nothing is ever carried).

        Raises:
            ValueError: ``capacity`` < 1 or ``max_staleness`` < 0, or either not an int.
        """
        for name, value, least in (("capacity", capacity, 1), ("max_staleness", max_staleness, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}; got {name}={value!r}")
        self.capacity = capacity
        self.max_staleness = max_staleness
        self._entries: dict[tuple[str, int], _Entry] = {}

    def __len__(self) -> int:
        """Payloads held now (complete or still being fetched)."""
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """Bytes reserved by the payloads held: the sum of their declared sizes (each verifier's one buffer)."""
        return sum(e.envelope.payload_bytes for e in self._entries.values())

    def carry(self, sender: str, envelope: Envelope, verifier: ChunkVerifier, expect: RoundExpectation,
              resume: Callable[[], Awaitable[Resumed]], *, too_slow: bool = False) -> str | None:
        """Keep a payload still incomplete at its deadline and start ``resume()`` in the background.

        Args:
            sender: the sender's PeerID (base58).
            envelope: the sender's envelope (already checked against ``expect`` and its codec's cap).
            verifier: the fetch's verifier, holding the chunks verified so far; ``resume`` continues into it.
            expect: the expectation of ``envelope.round``.
            resume: returns the awaitable that continues the fetch from the first unverified chunk; called once,
                only when the payload is carried.
            too_slow: the fetch was cut as a slowloris (stalled, or slower than the floor): never carried.

        Returns:
            None when carried, else why not (a short sentence for the ``timeout`` verdict's detail).
        """
        why = self._refusal(sender, envelope, verifier, too_slow)
        if why is not None:
            return why
        task = asyncio.ensure_future(resume())
        self._entries[sender, envelope.round] = _Entry(envelope, verifier, expect, task)
        logger.info("late update of %s (round %d) carried to the next round: %d of %d bytes received (%d in "
                    "verified chunks), fetch continues", sender[-8:], envelope.round, verifier.received,
                    envelope.payload_bytes, verifier.resume_offset())
        return None

    def _refusal(self, sender: str, envelope: Envelope, verifier: ChunkVerifier, too_slow: bool) -> str | None:
        if too_slow:
            return "cut as too slow"
        staleness = envelope.round + 1 - int(envelope.base_round)  # type: ignore[arg-type]
        if staleness > self.max_staleness:
            return f"too stale for the next round ({staleness} > max_staleness {self.max_staleness})"
        if verifier.received <= 0:
            return "nothing streamed"
        if verifier.complete:
            return "already complete"
        if (sender, envelope.round) in self._entries:
            return "a late payload of this sender and round is already held"
        if len(self._entries) >= self.capacity:
            return f"already holding {self.capacity} late payloads"
        return None

    def take(self, round_: int, unwelcome: Callable[[str], str | None]) -> tuple[list[LateRow], list[Dropped]]:
        """Hand back the carried payloads of rounds before ``round_`` that arrived in full; drop the others.

        Every entry of a round < ``round_`` leaves the book here: returned as a :class:`LateRow`, or dropped
        (a fetch still running is cancelled). Entries of ``round_`` itself or later stay (carried in this very
        round's fetch phase).

        Args:
            round_: the round R the rows would be applied in.
            unwelcome: why a sender's update may no longer be applied (banned, excluded, left), or None.

        Returns:
            ``(rows, dropped)``, each sorted by sender, then round.
        """
        rows: list[LateRow] = []
        dropped: list[Dropped] = []
        for key in sorted(self._entries):
            sender, entry = key[0], self._entries[key]
            env = entry.envelope
            if env.round >= round_:
                continue
            del self._entries[key]
            staleness = round_ - int(env.base_round)  # type: ignore[arg-type]
            result = _result(entry)
            why = unwelcome(sender)
            if staleness > self.max_staleness:
                why = f"too stale for round {round_} ({staleness} > max_staleness {self.max_staleness})"
            elif why is not None:
                pass
            elif result is None:
                why = f"still incomplete at round {round_}'s fetch phase ({entry.verifier.received} of " \
                      f"{env.payload_bytes} bytes)"
            elif isinstance(result, Rejected):
                dropped.append(Dropped(sender, env.round, f"{result.reason.value}: {result.detail}", result))
                continue
            elif isinstance(result, str):
                why = result
            else:
                rows.append(LateRow(sender, env, result, entry.expect, staleness, staleness_weight(staleness)))
                continue
            dropped.append(Dropped(sender, env.round, why))
        return rows, dropped

    async def close(self) -> None:
        """Cancel every continued fetch and forget every payload (shutdown)."""
        tasks = [e.task for e in self._entries.values()]
        self._entries.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _result(entry: _Entry) -> Resumed | None:
    """What the entry's continued fetch ended with, or None while it runs (it is then cancelled)."""
    if not entry.task.done():
        entry.task.cancel()
        return None
    if entry.task.cancelled():
        return "its fetch was cancelled"
    error = entry.task.exception()
    if error is not None:
        return f"its fetch failed ({type(error).__name__}: {error})"
    return entry.task.result()
