"""One outer round as seen by one peer: wait for commits, open them, fetch payloads, check integrity.

The state machine of round r for peer i (see ``docs/protocol.md``)::

    INNER    --commit-->  COMMITTED  --quorum+grace | all present | deadline-->  CLOSED (publish a close record)
    CLOSED   --close records of every other sender of our closed set | reveal_wait_s-->  REVEALED (serve it)
    REVEALED --open envelopes, sample k senders (``swarm.sampling``), stream payloads (each chunk checked against
               the committed root, one deadline per sender from its size and rate: ``swarm.pacing``; one still
               streaming at its deadline is carried to our next round, ``swarm.late``)-->  CHECKED
    CHECKED  --re-read commits once, report late ones (grace_s after the reveal if a present peer had
               withheld its commit); guard, outer step-->  round r+1

The close gate makes the commit phase close for every honest peer before any honest payload is served (except
for a peer slower than ``reveal_wait_s``), so no commit that honest peers accept can depend on an honest payload
of the same round: a commit that appears later is ``LATE_COMMIT``, never fetched nor applied.

Nothing here decides what to aggregate: it hands ``swarm.peer`` the integrity-checked rows and one
verdict per rejected sender. No step waits past its deadline, so a dead or silent peer never blocks a round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, TypeVar

import torch
from hivemind.p2p import P2P, PeerID

from p2p_guard.guard.integrity import RoundExpectation, check_envelope, check_payload
from p2p_guard.identity import Identity, peer_id_to_b58
from p2p_guard.protocol import ChunkVerifier, Envelope, Rejected, RejectReason, open_envelope, payload_cap_bytes
from p2p_guard.protocol.chunks import chunk_digests
from p2p_guard.protocol.codecs import parse_codec
from p2p_guard.swarm.allowlist import filter_allowed
from p2p_guard.swarm.config import CommitPhase, FetchLimits
from p2p_guard.swarm.dht import SwarmDHT
from p2p_guard.swarm.late import LatePayloads
from p2p_guard.swarm.pacing import RateBook, extended_deadline_s, fetch_deadline_s
from p2p_guard.swarm.records import commit_key, publish_close, read_closes, read_presence, read_roster
from p2p_guard.swarm.transport import (
    BAD_DATA,
    BUSY,
    NOT_READY,
    OK,
    TOO_SLOW,
    FetchResult,
    PayloadServer,
    WireCounter,
    fetch_payload,
    is_stall,
)

__all__ = ["LATE_CARRIED_DETAIL", "ClosedCommits", "Departures", "IntegrityVerdict", "await_closes", "await_commits",
           "check_rows", "first_of", "late_commits", "open_commits", "resume_payload", "reveal_after_close",
           "revealed_payloads", "stalled_above_floor"]

logger = logging.getLogger(__name__)

POLL_S = 0.5

#: A sender whose every fetch failed at the transport (no answer at all: refused, dial failed, stream reset) for
#: this long, in seconds, and at least :data:`UNREACHABLE_TRIES` times in a row, is given up as unreachable
#: for this round instead of being retried until the fetch deadline (a killed peer's presence outlives it by up
#: to the presence TTL). Long enough for a relayed dial to find its circuit; short next to ``fetch_timeout_s``.
UNREACHABLE_GIVE_UP_S = 5.0
UNREACHABLE_TRIES = 3
#: How the detail of such a rejection starts (``swarm.suspects`` reads it).
UNREACHABLE_DETAIL = "sender unreachable"
#: How the detail of a sender cut while reading (``TOO_SLOW``: stalled or trickled) starts (``swarm.suspects``).
TOO_SLOW_DETAIL = "sender too slow"
#: How the detail of a ``timeout`` whose payload was carried to the next round ends (``swarm.late``).
LATE_CARRIED_DETAIL = "carried to the next round"
#: How many times one payload fetch resumes after a stall (``transport.is_stall``: nothing for ``idle_timeout_s``
#: after part of the body) of a sender whose body came faster than the rate floor on average, stall included.
#: A loaded honest sender pauses (measured: 2 of 30 payloads of a 25M-parameter round, cut at 95 % by one 5 s
#: stall under CPU load, stop 34); a slowloris's stalls bring its average under the floor, so it is still cut,
#: and every resume stays within the fetch's deadline.
MAX_STALL_RESUMES = 2

_T = TypeVar("_T")


async def first_of(awaitable: Awaitable[_T], *events: asyncio.Event) -> _T | None:
    """Await ``awaitable`` unless one of ``events`` is set first (then it is cancelled and None returned).

    A fetch to a peer that has stopped, or our own shutdown, must not hold us for the fetch's whole timeout.
    """
    task = asyncio.ensure_future(awaitable)
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait([task, *waiters], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    return task.result() if task.done() and not task.cancelled() else None


class Departures:
    """The peers that have left the swarm (their signed ``leave`` record, ``swarm.records.read_roster``).

    One per peer process. :meth:`refresh` reads the presence key; :meth:`watching` refreshes it every
    :data:`POLL_S` while a phase that waits on other peers runs (fetching payloads or states), and
    :meth:`event` is set the moment a given peer is seen to have left, so that a fetch to it is cut at once
    (:func:`first_of`). A peer that comes back (a presence record replaces its leave record) is no longer
    counted as left.
    """

    def __init__(self, dht: SwarmDHT, run_id: str) -> None:
        """Args: dht: the DHT to read; run_id: the run."""
        self.dht = dht
        self.run_id = run_id
        self.left: frozenset[str] = frozenset()
        self._events: dict[str, asyncio.Event] = {}

    def event(self, peer: str) -> asyncio.Event:
        """An event set once ``peer`` (PeerID b58) is seen to have left."""
        event = self._events.get(peer)
        if event is None:
            event = self._events[peer] = asyncio.Event()
            if peer in self.left:
                event.set()
        return event

    def note(self, left: frozenset[str]) -> frozenset[str]:
        """Record the peers now seen as left; return those that were not left before."""
        new = left - self.left
        for peer in self.left - left:  # back again
            self._events.pop(peer, None)
        self.left = left
        for peer in new:
            if peer in self._events:
                self._events[peer].set()
        return new

    async def refresh(self) -> frozenset[str]:
        """Read the presence key once; return the peers newly seen as left."""
        return self.note((await read_roster(self.dht, self.run_id)).left)

    async def _watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.refresh()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)

    @contextlib.asynccontextmanager
    async def watching(self, stop: asyncio.Event) -> AsyncIterator[None]:
        """Refresh every :data:`POLL_S` in the background while the block runs."""
        task = asyncio.create_task(self._watch(stop))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@dataclass(frozen=True)
class IntegrityVerdict:
    """Outcome of the integrity stage for one sender of one round.

    Attributes:
        sender: PeerID (base58) the commit was filed under.
        reason: ``None`` if the update passed, else the :class:`RejectReason`.
        detail: human-readable detail (never payload bytes).
    """

    sender: str
    reason: RejectReason | None
    detail: str = ""


class ClosedCommits(NamedTuple):
    """What :func:`await_commits` saw when the commit phase closed.

    Attributes:
        commits: ``{subkey: raw envelope bytes}`` as read from the DHT (unverified).
        withheld: present peers (allowed, not banned) that had not committed; a listening peer is among them,
            and so is a copycat waiting for a reveal.
    """

    commits: dict[str, bytes]
    withheld: frozenset[str]


async def await_commits(dht: SwarmDHT, config: CommitPhase, round_: int, me: str | None,
                        stop: asyncio.Event, *, on_poll: Callable[[dict[str, bytes]], None] | None = None,
                        exclude: frozenset[str] = frozenset(),
                        allowed: frozenset[str] | None = None,
                        not_waited: frozenset[str] = frozenset()) -> ClosedCommits:
    """Poll the round's commit key until the commit phase closes for this peer.

    It closes when every present peer has committed, or when ``ceil(quorum_fraction · present)`` commits
    are in and ``grace_s`` has passed since, or at ``commit_timeout_s``, whichever comes first
    (a minimum quorum plus a grace window, as in Decoupled DiLoCo, arXiv:2604.21428).

    Args:
        me: our PeerID (base58) when we committed this round; None for a peer that only listens.
        on_poll: called with every poll's raw commits (the equivocation detector watches them change).
        exclude: banned senders: neither waited for nor returned.
        allowed: the allow-list of a permissioned swarm (None: open); others neither count nor are returned.
        not_waited: peers not counted as present (suspects we could not reach: ``swarm.suspects``); their
            commits, if they come, are returned like any other.

    Returns:
        The commits, and the present peers that had not committed when the phase closed.
    """
    started = time.monotonic()
    quorum_since: float | None = None
    commits: dict[str, bytes] = {}
    present: set[str] = set()
    while not stop.is_set():
        commits = await dht.read(commit_key(config.run_id, round_))
        if on_poll is not None:
            on_poll(commits)
        commits = filter_allowed({k: v for k, v in commits.items() if k not in exclude}, allowed)
        present = set(filter_allowed(await read_presence(dht, config.run_id), allowed))
        present = (present | ({me} if me else set())) - exclude - (not_waited - commits.keys())
        now = time.monotonic()
        if present <= commits.keys():
            break
        if len(commits.keys() & present) >= math.ceil(config.quorum_fraction * len(present)):
            quorum_since = quorum_since if quorum_since is not None else now
            if now - quorum_since >= config.grace_s:
                break
        if now - started >= config.commit_timeout_s:
            logger.warning("round %d: commit deadline (%.0f s) reached with %d/%d commits",
                           round_, config.commit_timeout_s, len(commits), len(present))
            break
        await asyncio.sleep(POLL_S)
    return ClosedCommits(commits, frozenset(present - commits.keys()))


async def await_closes(dht: SwarmDHT, config: CommitPhase, round_: int, waiting: Collection[str],
                       stop: asyncio.Event, departures: Departures | None = None) -> frozenset[str]:
    """Poll the round's close key until every sender in ``waiting`` has published its ``close`` record.

    Gives up ``reveal_wait_s`` after it started (or when ``stop`` is set), so a sender that committed but
    never closes delays us by at most that long. A sender that has left the swarm (its signed ``leave``
    record, read through ``departures`` whenever someone is still missing) is not waited for.

    Args:
        dht: the DHT to read.
        config: the commit and close phases' settings (run, ``reveal_wait_s``).
        round_: the round.
        waiting: PeerIDs (base58) whose close records we wait for (the other senders of our closed set).
        stop: set on shutdown.
        departures: the peers that left (None: not checked).

    Returns:
        The senders of ``waiting`` whose close record was not seen (empty when all closed in time).
    """
    deadline = time.monotonic() + config.reveal_wait_s
    missing = frozenset(waiting)
    while missing and not stop.is_set():
        missing = missing - await read_closes(dht, config.run_id, round_)
        if missing and departures is not None:
            await departures.refresh()
            missing = missing - departures.left
        remaining = deadline - time.monotonic()
        if not missing or remaining <= 0:
            break
        await asyncio.sleep(min(POLL_S, remaining))
    return missing


async def reveal_after_close(dht: SwarmDHT, server: PayloadServer, identity: Identity, config: CommitPhase,
                             round_: int, closed: Collection[str], payload: bytes,
                             stop: asyncio.Event, departures: Departures | None = None) -> frozenset[str]:
    """Publish our close record, wait for the others' (bounded by ``reveal_wait_s``), then serve ``payload``.

    Commit before reveal across the swarm: every other sender of our closed commit set has closed its own
    commit phase before we serve, so no commit an honest peer still accepts can be computed from our payload.
    Only a sender slower than ``reveal_wait_s`` may still be open when we reveal (its id is returned).

    Args:
        dht: the DHT to read and write.
        server: our payload server; :meth:`PayloadServer.reveal` is called at the end (not if ``stop`` is set).
        identity: our key (signs the close record).
        config: the commit and close phases' settings (run, ``reveal_wait_s``).
        round_: the round.
        closed: the senders (base58) of our closed commit set, banned ones removed; ours may be in it.
        payload: the bytes to serve as our update of ``round_``.
        stop: set on shutdown.
        departures: senders that left the swarm are not waited for (None: no such check).

    Returns:
        The senders whose close record we did not see before revealing (those that left excluded).
    """
    me = identity.peer_id_b58
    others = frozenset(closed) - {me}
    await publish_close(dht, identity, config.run_id, round_, len(others) + 1)
    missing = await await_closes(dht, config, round_, others, stop, departures)
    if missing and not stop.is_set():
        logger.warning("round %d: revealing after %.0f s without the close records of %d sender(s): %s",
                       round_, config.reveal_wait_s, len(missing), ", ".join(sorted(s[-8:] for s in missing)))
    if not stop.is_set():
        server.reveal(round_, payload, digests=await asyncio.to_thread(chunk_digests, payload))
    return missing


def open_commits(commits: dict[str, bytes], config: CommitPhase
                 ) -> tuple[dict[str, Envelope], list[IntegrityVerdict]]:
    """Parse and verify every committed envelope; the sender must be the PeerID of its subkey.

    Returns:
        The envelopes that are well-formed and correctly signed, by subkey, and a verdict for each that
        is not (bad signature, unsigned, impersonation, undecodable, unsupported version, oversized).
    """
    opened: dict[str, Envelope] = {}
    rejected: list[IntegrityVerdict] = []
    for subkey, raw in commits.items():
        env = open_envelope(raw, max_bytes=config.max_envelope_bytes)
        if isinstance(env, Rejected):
            rejected.append(IntegrityVerdict(subkey, env.reason, env.detail))
        elif peer_id_to_b58(env.sender) != subkey:
            rejected.append(IntegrityVerdict(subkey, RejectReason.BAD_SIGNATURE,
                                             "envelope signed by another PeerID than the one it is filed under"))
        else:
            opened[subkey] = env
    return opened, rejected


async def late_commits(dht: SwarmDHT, config: CommitPhase, round_: int, closed: Collection[str], *,
                       not_before: float, stop: asyncio.Event, exclude: frozenset[str] = frozenset(),
                       allowed: frozenset[str] | None = None,
                       departures: Departures | None = None) -> list[IntegrityVerdict]:
    """Re-read the round's commit key once and report every sender that committed after our phase closed.

    Such a commit may be copied from, or adapted to, payloads revealed since; it is never fetched nor
    applied. The read happens at ``not_before`` at the earliest (the peer passes its reveal time plus
    ``grace_s`` when some present peer withheld its commit, so that a commit made the moment a payload was
    revealed has landed and is reported). Only envelopes that open, are signed by the PeerID of their subkey
    and are for this run and round are reported (a forged value under someone's subkey says nothing about its
    owner). A sender that has left the swarm (``departures``) is never reported: its commit may be in our closed
    set, dropped from it by the caller once the sender left (the peer's ``_drop_departed``, which reports it as
    departed), and a peer that left is fetched from no more anyway; until this was checked, every peer that left
    after committing was reported ``late_commit`` ("committed after our commit phase closed") by everyone.

    Args:
        dht: the DHT to read.
        config: the commit phase's settings (run, envelope size limit).
        round_: the round.
        closed: the senders (base58) of our closed commit set, ours included.
        not_before: ``time.monotonic()`` value before which the key is not read (the wait ends on ``stop``).
        stop: set on shutdown: the wait ends and nothing is read.
        exclude: banned senders (never reported).
        allowed: the allow-list of a permissioned swarm (None: open).
        departures: the peers seen to have left, read after the wait (never reported as late).

    Returns:
        One ``LATE_COMMIT`` verdict per late sender that has not left, sorted by sender.
    """
    remaining = not_before - time.monotonic()
    if remaining > 0:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), remaining)
    if stop.is_set():
        return []
    raw = {k: v for k, v in (await dht.read(commit_key(config.run_id, round_))).items()
           if k not in closed and k not in exclude}
    left = frozenset() if departures is None else departures.left & raw.keys()
    if left:
        logger.debug("round %d: commit(s) of %s not in our closed set, not late: they have left the swarm", round_,
                     ", ".join(s[-8:] for s in sorted(left)))
        raw = {k: v for k, v in raw.items() if k not in left}
    verdicts: list[IntegrityVerdict] = []
    for sender, data in sorted(filter_allowed(raw, allowed).items()):
        env = open_envelope(data, max_bytes=config.max_envelope_bytes)
        if isinstance(env, Rejected) or peer_id_to_b58(env.sender) != sender or env.run_id != config.run_id \
                or env.round != round_:
            logger.debug("round %d: late value under %s ignored (not a valid commit of its own)", round_,
                         sender[-8:])
            continue
        verdicts.append(IntegrityVerdict(sender, RejectReason.LATE_COMMIT,
                                         "committed after our commit phase closed; never fetched"))
    return verdicts


async def revealed_payloads(p2p: P2P, dht: SwarmDHT, config: CommitPhase, limits: FetchLimits, round_: int, me: str,
                            timeout_s: float = 2 * POLL_S) -> list[tuple[Envelope, bytes]]:
    """One pass over the round's committers: the payloads they already serve that match their commits.

    What a copycat (``attacks.wire.Copycat``, a simulated adversary) polls. Each committer other than ``me``
    whose envelope opens and is signed by its subkey is asked once for its payload, with a bounded read
    (``payload_bytes``, chunk by chunk against the committed root) and ``timeout_s``; only payloads that verify
    are returned.

    Args:
        p2p: our P2P replica.
        dht: the DHT to read.
        config: the commit phase's settings (run, envelope size limit).
        limits: the fetch limits (payload size limit).
        round_: the round.
        me: our PeerID (base58), skipped.
        timeout_s: limit per fetch, in seconds.

    Returns:
        ``[(envelope, payload)]`` sorted by sender; empty while nobody serves yet.
    """
    envelopes, _ = open_commits(await dht.read(commit_key(config.run_id, round_)), config)
    wanted = {s: env for s, env in sorted(envelopes.items())
              if s != me and env.run_id == config.run_id and env.round == round_
              and _within_cap(env, limits.max_parameters) is None}
    results = await asyncio.gather(*(
        fetch_payload(p2p, PeerID(env.sender), config.run_id, round_, ChunkVerifier(env.digest, env.payload_bytes),
                      timeout_s=timeout_s) for env in wanted.values()))
    return [(env, bytes(result.data)) for env, result in zip(wanted.values(), results)
            if result.status == OK and result.data is not None]


def _within_cap(env: Envelope, max_parameters: int) -> Rejected | None:
    """``OVERSIZE`` when the envelope declares more than its codec's cap (``protocol.codecs.payload_cap_bytes``)."""
    spec = parse_codec(env.codec)
    if isinstance(spec, Rejected):
        return spec
    cap = payload_cap_bytes(env.codec, max_parameters)
    if env.payload_bytes > cap:
        return Rejected(RejectReason.OVERSIZE, f"declares {env.payload_bytes} payload bytes, the {spec.name} cap "
                                               f"for {max_parameters} parameters is {cap}")
    return None


async def check_rows(p2p: P2P, envelopes: dict[str, Envelope], expect: RoundExpectation, config: FetchLimits,
                     local_payloads: dict[str, bytes], stop: asyncio.Event, departures: Departures | None = None,
                     rates: RateBook | None = None, late: LatePayloads | None = None,
                     wire: WireCounter | None = None) -> tuple[dict[str, torch.Tensor], list[IntegrityVerdict]]:
    """Check each envelope against the round, stream its payload (verified chunk by chunk), and check the payload.

    Each envelope must also be within its codec's cap (``payload_cap_bytes(codec, config.max_parameters)``,
    else ``OVERSIZE``, before any byte is read). Each sender's fetch has its own deadline from its declared size
    and measured rate (``swarm.pacing``); fetches run concurrently, so the phase lasts as long as the slowest.

    A fetch in flight ends at once when ``stop`` is set, or when its sender is seen to have left the swarm
    (``departures``, refreshed every :data:`POLL_S` meanwhile): such a sender gets no verdict (it did nothing
    wrong, it is gone) and no row.

    Args:
        p2p: our P2P replica.
        envelopes: verified envelopes by sender (base58).
        expect: what this round's updates must match (run, round, base hash, shapes, codecs, size limit).
        config: the fetch limits (deadline floor, idle timeout, rate floor, parameter cap).
        local_payloads: payloads we already hold (our own), by sender; they are not fetched.
        stop: set when the peer is shutting down.
        departures: the peers that left (None: not watched).
        rates: each sender's measured rate, read for its deadline and updated by its fetch (None: every sender
            counts as never measured, and nothing is recorded).
        late: where a payload still streaming at its deadline is carried to the next round (``swarm.late``; its
            sender still gets this round's ``timeout`` verdict). None: such a payload is lost.
        wire: counts the answer bytes every fetch of this call reads, carried ones included (None: not counted).

    Returns:
        ``{sender: (d,) float32 update}`` for the updates that passed, and one verdict per sender rejected.
    """
    rows: dict[str, torch.Tensor] = {}
    verdicts: list[IntegrityVerdict] = []
    to_fetch: dict[str, Envelope] = {}
    for sender, env in envelopes.items():
        checked = check_envelope(env, expect)
        problem = checked if isinstance(checked, Rejected) else _within_cap(env, config.max_parameters)
        if problem is not None:
            verdicts.append(IntegrityVerdict(sender, problem.reason, problem.detail))
        else:
            to_fetch[sender] = env
    rates = rates if rates is not None else RateBook()
    watch = departures.watching(stop) if departures is not None and to_fetch else contextlib.nullcontext()
    async with watch:
        fetched = await asyncio.gather(*(
            _payload(p2p, sender, env, config, rates, local_payloads, stop, departures,
                     None if late is None else partial(_carry, late, p2p, sender, env, expect, config, stop, wire),
                     wire)
            for sender, env in to_fetch.items()))
    for (sender, env), payload in zip(to_fetch.items(), fetched):
        if payload is None:  # it left the swarm
            continue
        # Decoding and checking d values is seconds of CPU at d = 25M on a loaded machine: in a thread, so that the
        # event loop keeps serving our own payload meanwhile (a loop held 4 s made its readers cut us, stop 35).
        row = payload if isinstance(payload, Rejected) else await asyncio.to_thread(check_payload, env, payload,
                                                                                      expect)
        if isinstance(row, Rejected):
            verdicts.append(IntegrityVerdict(sender, row.reason, row.detail))
        else:
            rows[sender] = row
    return rows, verdicts


@dataclass
class _Unreachable:
    """Consecutive transport failures (status -1) of one sender's fetches; any answer resets the count."""

    tries: int = 0
    since: float = 0.0
    last: float = 0.0

    def failed(self, status: int, now: float) -> bool:
        """Record one try's status at ``now`` (monotonic seconds); True once the sender counts as unreachable."""
        if status != -1:
            self.tries = 0
            return False
        if self.tries == 0:
            self.since = now
        self.tries += 1
        self.last = now
        return self.tries >= UNREACHABLE_TRIES and self.last - self.since >= UNREACHABLE_GIVE_UP_S


async def _payload(p2p: P2P, sender: str, env: Envelope, config: FetchLimits, rates: RateBook,
                   local: dict[str, bytes], stop: asyncio.Event, departures: Departures | None = None,
                   carry: Callable[[ChunkVerifier], str | None] | None = None,
                   wire: WireCounter | None = None) -> bytes | bytearray | Rejected | None:
    """Stream one sender's payload, retrying (resuming after its verified chunks) until its own deadline.

    The deadline is ``swarm.pacing.fetch_deadline_s`` of its declared size and measured rate; reached while
    the stream still runs faster than the rate floor, it is extended once from this fetch's rate, and an exchange
    still streaming then goes on (it is not cut and asked again, which would send its unfinished chunk twice). A
    sender cut for slowness (``TOO_SLOW``: a slowloris) is not retried unless it stalled with its average rate
    still above the floor (:func:`stalled_above_floor`, at most :data:`MAX_STALL_RESUMES` times), nor one whose
    bytes fail a check against its committed root (``BAD_DATA``: the reason of the first bad chunk). A sender that
    cannot be reached at all (every try a transport failure for :data:`UNREACHABLE_GIVE_UP_S`,
    :data:`UNREACHABLE_TRIES` tries or more) is rejected as ``unavailable`` then, not at the deadline.

    None: we stopped, or the sender left the swarm (the fetch in flight is cut at once).

    A sender still incomplete at its deadline that streamed something (never cut as too slow) is offered to
    ``carry`` with the fetch's verifier (``swarm.late``): its rejection's detail then says whether it was carried.
    """
    if sender in local:
        return local[sender][:env.payload_bytes + 1]
    peer = PeerID(env.sender)
    detail = "no answer"
    gone = departures.event(sender) if departures is not None else asyncio.Event()
    unreachable = _Unreachable()
    verifier = ChunkVerifier(env.digest, env.payload_bytes)
    stalls = 0
    started = time.monotonic()
    due = _Deadline(started + fetch_deadline_s(
        env.payload_bytes, rates.rate(sender), fetch_timeout_s=config.fetch_timeout_s,
        idle_timeout_s=config.fetch_idle_timeout_s, min_bytes_per_s=config.min_fetch_bytes_per_s))
    ceiling = started + config.fetch_idle_timeout_s + env.payload_bytes / config.min_fetch_bytes_per_s

    def extend() -> None:
        """At the deadline, once: extend it from this fetch's rate if the payload still streams fast enough."""
        due.extended = True
        more = extended_deadline_s(env.payload_bytes, verifier.received, time.monotonic() - started,
                                   idle_timeout_s=config.fetch_idle_timeout_s,
                                   min_bytes_per_s=config.min_fetch_bytes_per_s,
                                   kept_bytes=verifier.resume_offset())
        if more is not None:
            logger.info("round %d: %s still streaming (%d of %d bytes): deadline extended to %.0f s", env.round,
                        sender[-8:], verifier.received, env.payload_bytes, more)
            due.at = started + more

    while not stop.is_set() and not gone.is_set():
        if due.at - time.monotonic() <= 0 and not due.extended:
            extend()
        remaining = due.at - time.monotonic()
        if remaining <= 0:
            break
        # The exchange may outlive the deadline (up to the extension's ceiling): a stream still running at the
        # deadline is extended in place, not cut and asked again, which would send its unfinished chunk (up to
        # 1 MiB) a second time over the sender's uplink.
        exchange = asyncio.ensure_future(fetch_payload(
            p2p, peer, config.run_id, env.round, verifier, timeout_s=max(remaining, ceiling - time.monotonic()),
            idle_timeout_s=config.fetch_idle_timeout_s, min_bytes_per_s=config.min_fetch_bytes_per_s, wire=wire))
        result = await first_of(_within_deadline(exchange, due, extend, verifier), stop, gone)
        if result is None:
            return None
        if result.status == OK and result.data is not None:
            rates.record(sender, env.payload_bytes, time.monotonic() - started)
            return result.data
        if result.status == BAD_DATA and result.rejected is not None:
            return result.rejected
        if departures is not None and result.status != NOT_READY:  # a leaving peer withdraws its serve first
            await departures.refresh()
            if gone.is_set():
                return None
        detail = result.detail or f"status {result.status}"
        if result.status == TOO_SLOW and stalls < MAX_STALL_RESUMES and \
                stalled_above_floor(detail, verifier.received, time.monotonic() - started, config):
            stalls += 1
            logger.info("round %d: %s stalled after %d of %d bytes, above the rate floor on average: resuming",
                        env.round, sender[-8:], verifier.received, env.payload_bytes)
            continue
        if result.status == TOO_SLOW:  # it answered OK, then trickled (or stalled again): a slowloris is not retried
            return Rejected(RejectReason.TIMEOUT, f"{TOO_SLOW_DETAIL}, stream cut ({detail})")
        if result.status not in (NOT_READY, BUSY, -1):
            return Rejected(RejectReason.UNAVAILABLE, f"sender refused to serve its committed payload ({detail})")
        if unreachable.failed(result.status, time.monotonic()):
            span = unreachable.last - unreachable.since
            return Rejected(RejectReason.UNAVAILABLE, f"{UNREACHABLE_DETAIL}: {unreachable.tries} tries in "
                                                      f"{span:.1f} s, each without an answer ({detail})")
        await asyncio.sleep(min(POLL_S, max(0.0, due.at - time.monotonic())))
    if stop.is_set() or gone.is_set():
        return None
    rates.record(sender, verifier.received, time.monotonic() - started)  # its next deadline fits its rate
    detail = f"payload not received before its fetch deadline of {due.at - started:.1f} s " \
             f"({verifier.received} of {env.payload_bytes} bytes; {detail})"
    if carry is not None:
        not_carried = carry(verifier)
        detail += f"; {LATE_CARRIED_DETAIL}" if not_carried is None else f"; not carried: {not_carried}"
    return Rejected(RejectReason.TIMEOUT, detail)


def stalled_above_floor(detail: str, received_bytes: int, elapsed_s: float, config: FetchLimits) -> bool:
    """True if a ``TOO_SLOW`` fetch stalled (``transport.is_stall``) while its average rate stayed above the floor.

    Args:
        detail: the cut fetch's detail.
        received_bytes: payload bytes read for this payload since ``elapsed_s`` began, in bytes.
        elapsed_s: seconds since the first request for this payload, the stall included.
        config: the fetch limits (``min_fetch_bytes_per_s``, ρ_min, in bytes per second).

    Returns:
        ``is_stall(detail) and received_bytes > ρ_min · elapsed_s``: the sender paused, but what it sent came faster
        than a slowloris may send, so it is asked again from its first unverified chunk.
    """
    return is_stall(detail) and received_bytes > config.min_fetch_bytes_per_s * elapsed_s


@dataclass
class _Deadline:
    """A payload fetch's deadline (monotonic seconds) and whether its one extension was tried."""

    at: float
    extended: bool = False


async def _within_deadline(exchange: asyncio.Future[FetchResult], due: _Deadline, extend: Callable[[], None],
                           verifier: ChunkVerifier) -> FetchResult:
    """Await one payload exchange until ``due.at``, which ``extend()`` may move once while the exchange runs.

    At the first deadline reached while the exchange still runs, ``extend()`` is called (it moves ``due.at`` when
    the stream runs faster than the rate floor) and the same exchange goes on. At a deadline that stands, the
    exchange is cancelled (its verified chunks stay in ``verifier``) and a transport failure (-1) is returned.
    Cancelling this coroutine cancels the exchange.
    """
    try:
        while True:
            remaining = due.at - time.monotonic()
            if remaining > 0:
                done, _ = await asyncio.wait({exchange}, timeout=remaining)
                if done:
                    return exchange.result()
            elif not due.extended:
                extend()
            else:
                return FetchResult(-1, detail=f"no complete answer within its deadline ({verifier.next_chunk} of "
                                              f"{verifier.chunks} chunks verified)")
    finally:
        if not exchange.done():
            exchange.cancel()
            with contextlib.suppress(BaseException):
                await exchange


def _carry(late: LatePayloads, p2p: P2P, sender: str, env: Envelope, expect: RoundExpectation, config: FetchLimits,
           stop: asyncio.Event, wire: WireCounter | None, verifier: ChunkVerifier) -> str | None:
    """Offer a payload incomplete at its deadline to ``late``; None when carried, else why not."""
    return late.carry(sender, env, verifier, expect, partial(resume_payload, p2p, env, verifier, config, stop,
                                                            wire=wire))


async def resume_payload(p2p: P2P, env: Envelope, verifier: ChunkVerifier, config: FetchLimits,
                         stop: asyncio.Event, *, wire: WireCounter | None = None
                         ) -> bytes | bytearray | Rejected | str:
    """Continue a carried fetch (``swarm.late``) from ``verifier``'s first unverified chunk until it is complete.

    Its limit is what the slowloris floor allows the rest of the payload, ``I + (b − k) / m`` seconds
    (I = ``fetch_idle_timeout_s``, m = ``min_fetch_bytes_per_s``, b the declared size and k the bytes of the
    verified chunks, in bytes: the unfinished chunk is read again); each exchange
    has the same idle and rate cut-offs as any fetch (``transport.fetch_payload``). The caller cancels it when
    the next round's fetch phase is over.

    Args:
        p2p: our P2P replica.
        env: the sender's checked envelope (its round's payload is asked for).
        verifier: the verifier of the fetch that reached its deadline, holding the chunks verified so far.
        config: the fetch limits.
        stop: set on shutdown.
        wire: counts the answer bytes read (None: not counted).

    Returns:
        The verified payload (``env.payload_bytes`` bytes), a :class:`Rejected` for bytes that failed a check, or
        why it ended without a payload (a sentence). Never raises on network failure or hostile bytes.
    """
    peer = PeerID(env.sender)
    rest = max(0, env.payload_bytes - verifier.resume_offset())
    limit = config.fetch_idle_timeout_s + rest / config.min_fetch_bytes_per_s
    started = time.monotonic()
    deadline = started + limit
    first = verifier.received
    detail = "no answer"
    stalls = 0
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        result = await first_of(fetch_payload(p2p, peer, config.run_id, env.round, verifier, timeout_s=remaining,
                                              idle_timeout_s=config.fetch_idle_timeout_s,
                                              min_bytes_per_s=config.min_fetch_bytes_per_s, wire=wire), stop)
        if result is None:
            break
        if result.status == OK and result.data is not None:
            return result.data
        if result.status == BAD_DATA and result.rejected is not None:
            return result.rejected
        detail = result.detail or f"status {result.status}"
        if result.status == TOO_SLOW and stalls < MAX_STALL_RESUMES and \
                stalled_above_floor(detail, verifier.received - first, time.monotonic() - started, config):
            stalls += 1
            continue
        if result.status == TOO_SLOW:
            return f"{TOO_SLOW_DETAIL} while resuming, stream cut ({detail})"
        if result.status not in (NOT_READY, BUSY, -1):
            return f"sender refused to serve the rest of its payload ({detail})"
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    return f"not complete within the floor's limit of {limit:.1f} s ({verifier.received} of {env.payload_bytes} " \
           f"bytes; {detail})"
