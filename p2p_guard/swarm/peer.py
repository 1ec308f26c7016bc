"""A volunteer peer from start to clean exit: join the DHT, run outer rounds, linger, shut down.

``run_peer`` is what ``p2p-guard peer`` calls. The peer:

1. starts a watchdog (``swarm.reaper``) so its ``p2pd`` dies with it even on SIGKILL;
2. starts a hivemind DHT node in its own event loop with its Ed25519 identity (its clock offset against the
   initial peers corrected) and serves payloads and its θ over P2P streams;
3. announces itself (signed presence record) and waits for ``start_peers`` (default ``min_peers``);
4. resumes from its own checkpoint, and catches up (robust centre of sampled states) if the swarm is far ahead;
5. runs outer rounds (version 2: :class:`Peer`, ``docs/protocol.md`` §7) until ``rounds`` are done or it is
   stopped (SIGINT/SIGTERM), pausing whenever fewer than ``min_peers`` are present;
6. keeps serving its last payload until the other peers have moved on, writes its state, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ipaddress
import json
import logging
import math
import os
import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.utils import get_dht_time as hivemind_time
from tqdm import tqdm

from p2p_guard.attacks import load_attack
from p2p_guard.attacks.apply import AttackFailed, attacked_update
from p2p_guard.attacks.base import AttackContext
from p2p_guard.attacks.wire import CommitDraft, WireBehaviour, seal, wire_behaviour
from p2p_guard.guard import build_guard
from p2p_guard.guard.apply import judge_stacked, stack_rows
from p2p_guard.guard.integrity import RoundExpectation, check_payload
from p2p_guard.identity import Identity, peer_id_to_b58
from p2p_guard.protocol import CODECS, PROTOCOL_VERSION, Envelope, Rejected, RejectReason, encode_update, \
    expected_payload_bytes, open_envelope, payload_cap_bytes, payload_digest, sign_envelope
from p2p_guard.protocol.proof import EquivocationDetector, EquivocationProof, verify_proof
from p2p_guard.protocol.records import sign_record
from p2p_guard.protocol.states import decode_state, rounding_noise, state_bytes
from p2p_guard.swarm.allowlist import filter_allowed, load_allowlist
from p2p_guard.swarm.config import MAX_MIX_STEPS, PeerConfig
from p2p_guard.swarm.dht import NetworkOptions, SwarmDHT, is_relayed, relay_of, start_dht
from p2p_guard.swarm.events import EventLog
from p2p_guard.swarm.file_errors import naming
from p2p_guard.swarm.metrics import PeerMetrics, start_metrics
from p2p_guard.swarm.reaper import start_reaper, stop_reaper_if_clean
from p2p_guard.swarm.checkpoint import Checkpoint, last_committed, load_resumable, mark_committed, save_checkpoint
from p2p_guard.swarm.guard_state import capture as capture_guard_state
from p2p_guard.swarm.guard_state import restore as restore_guard_state
from p2p_guard.swarm.late import LatePayloads
from p2p_guard.swarm.pacing import RateBook, fetch_deadline_s
from p2p_guard.swarm.mix_schedule import MixSchedule
from p2p_guard.swarm.mixing import MOMENTUM_MIX_RADIUS, clipped_gossip, gossip_steps, robust_centre
from p2p_guard.swarm.model_match import ModelMismatch, ShapeWatch
from p2p_guard.swarm.records import COMMIT_TTL_S, PRESENCE_TTL_S, SHARD_TTL_S, commit_key, presence_key, \
    presence_stored_at, publish_leave, publish_proof, read_closes, read_presence, read_proofs
from p2p_guard.swarm.rounds import TOO_SLOW_DETAIL, UNREACHABLE_DETAIL, Departures, IntegrityVerdict, await_commits, \
    check_rows, first_of, late_commits, open_commits, reveal_after_close, revealed_payloads
from p2p_guard.swarm.sampling import sample_senders, staleness_weight
from p2p_guard.swarm.shard_claims import SHARD_REFRESH_S, ShardChoice, ShardClaim, choose_shard, \
    coverage_warnings, describe_choice, present_claims, present_shard_claims, publish_shard_claim, rebalance
from p2p_guard.swarm.start_identity import StartIdentity
from p2p_guard.swarm.slowloris import server_for, start_slow_client
from p2p_guard.swarm.suspects import Suspects
from p2p_guard.swarm.upload import upload_cap_warning
from p2p_guard.swarm.stragglers import gather_unless_straggling
from p2p_guard.swarm.standing import VoteBook
from p2p_guard.swarm.status import lower_median
from p2p_guard.swarm.transport import (
    BAD_REQUEST,
    OK,
    TOO_SLOW,
    PayloadServer,
    WireCounter,
    fetch,
    is_deadline_cut,
    is_no_answer,
)
from p2p_guard.swarm.validator import RecordValidator
from p2p_guard.swarm.verdicts import SenderVerdict, finite_or_none
from p2p_guard.tasks import Task, load_task
from p2p_guard.tasks.guarded import TaskFailed, guard_user_task
from p2p_guard.training.error_feedback import ErrorFeedback
from p2p_guard.training.inner import InnerPhaseStopped, autocast_dtype
from p2p_guard.training.local import LocalModel, pick_device, round_generator
from p2p_guard.training.streams import PeerStream, peer_stream
from p2p_guard.training.params import raw_bytes
from p2p_guard.training.outer import dense_outer_lr

__all__ = ["EarlierSessionCommit", "Peer", "ahead_and_alone", "check_model_fits", "choose_commit_round",
           "linger_seconds", "run_peer"]

#: A peer that finished its rounds keeps serving for this many of its last round's durations at most
#: (:func:`linger_seconds`), and never longer than MAX_LINGER_S seconds.
LINGER_ROUNDS = 2.0
MAX_LINGER_S = 600.0
#: How many round starts in a row may retry a catch-up that found no state to adopt while our θ is known to miss
#: outer steps (restarted, resumed, or our update jumped rounds).
MAX_CATCH_UP_RETRIES = 2
#: How many rounds past the sources' median presence round a catch-up follows their close records (one DHT read
#: each): a presence record lags its peer by up to PRESENCE_REFRESH_S, several short rounds.
CLOSED_ROUNDS_READ = 8
#: Largest |value| of our θ and outer momentum with which a mixing asks for float16 states (float16's largest
#: finite value is 65504; half of it leaves room for the neighbours' states, which differ from ours a little).
HALF_SAFE = 32768.0

logger = logging.getLogger(__name__)

_Phase = TypeVar("_Phase")  # what one part of an inner phase returns (InnerResult or PhaseHead)

#: Seconds between two stores of our presence record (it lives ``PRESENCE_TTL_S``, 30 s).
PRESENCE_REFRESH_S = 5.0
#: How long a starting peer waits for the presence and shard keys before it takes the shard of its PeerID.
SHARD_READ_TIMEOUT_S = 10.0
#: Seconds between two reads of the presence key while waiting for peers (each read walks the DHT).
WAIT_POLL_S = 2.0
#: How often the peer asks ``p2pd`` for its addresses and connections (``network`` events), in seconds.
NETWORK_POLL_S = 5.0
#: How often the peer pings its --initial-peers, in seconds: a bootstrap node restarted after a crash knows nobody,
#: and a newcomer joining through it found no swarm (it waited alone) until the peers that were there pinged it.
REJOIN_POLL_S = 30.0
#: On the way out, the leave record's store and the announcer's last store are each given this long (seconds).
LEAVE_TIMEOUT_S = 3.0
#: An equivocating attacker stores its second envelope this long after the first (seconds).
EQUIVOCATION_DELAY_S = 1.0
#: Why we no longer take a sender's updates (:meth:`Peer._unwelcome`): verdict details and late-drop reasons.
BANNED_DETAIL = "banned: equivocation proof"
EXCLUDED_DETAIL = "excluded by our reputation"
LEFT_DETAIL = "left the swarm"


#: The round the log lines of the current asyncio task are about, where that is not the loop's round (None: it
#: is). An overlapped round r communicates and finishes while the loop is already at r + 1 (its head runs), so
#: its lines read ``[… r37] round 36``; :func:`_lines_about` sets it for them. A ContextVar: each task sees its own.
_LINE_ROUND: contextvars.ContextVar[int | None] = contextvars.ContextVar("p2p_guard_line_round", default=None)


@contextlib.contextmanager
def _lines_about(round_: int) -> Iterator[None]:
    """Tag the lines logged in this block (and in tasks it starts) with ``round_`` instead of ``Peer.round``."""
    token = _LINE_ROUND.set(round_)
    try:
        yield
    finally:
        _LINE_ROUND.reset(token)


class _PeerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Prefixes every line with the short PeerID and the round it is about.

    That is the current round, or the one :func:`_lines_about` set for the task that logs it (an overlapped
    round's communication and report).
    """

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        about = _LINE_ROUND.get()
        return f"[{self.extra['peer']} r{self.extra['round'] if about is None else about}] {msg}", kwargs


@dataclass
class RoundOutcome:
    """What one round produced, for the event stream and the progress line.

    Attributes:
        round: the round r our update was committed into.
        verdicts: one :class:`~p2p_guard.swarm.verdicts.SenderVerdict` per judged or rejected sender.
        aggregate: ``(d,)`` float32 to apply with the outer step, or None (no other peer's update arrived:
            the model is left as it is, never trained alone).
        mix: run a mixing step after the outer step (``Peer.mix``).
        train_loss: mean inner-phase loss.
        compute_s: inner-phase wall time, seconds.
        fetched: payloads fetched (sampled senders that answered); bytes_received: their declared sizes
            (``payload_bytes``; late rows' when taken), plus the states (θ and momentum) the mixing step decoded:
            the bytes used, not wire bytes (no chunk digests or status bytes, nothing of a failed, cut or repeated
            fetch; ``docs/metrics.md``); the wire bytes read are the round event's ``wire_bytes_received``.
        mixed_from: how many peers' states the mixing step used (0: no mixing this round).
        mix_distance: the mixing step's largest ‖θ_j − θ_i‖ / ‖θ_i‖ over those states, before mixing (None: none).
        skipped: the outcome of the round before, when we skipped it (our update went into this one:
            ``Peer.receive``); its aggregate is applied before this round's.
        overlapped: its communication ran beside the next round's inner phase (its head), and its step came
            between the head and the tail (``--overlap``, or the automatic overlap chose it).
        late_applied: rows of earlier rounds carried over (``swarm.late``) that the guard accepted this round.
        judged: rows the guard judged, our own included (0: the guard did not run).
        rows: the judged rows by sender, kept only for a peer with an ``update`` attack (``known_previous``); an
            honest peer's stay empty, so the ``(n, d)`` stack is freed before the mixing step (770 MB at n = 8,
            d = 25M).
    """

    round: int
    verdicts: list[SenderVerdict] = field(default_factory=list)
    aggregate: torch.Tensor | None = None
    mix: bool = False
    train_loss: float | None = None
    compute_s: float = 0.0
    fetched: int = 0
    bytes_received: int = 0
    mixed_from: int = 0
    mix_distance: float | None = None
    rows: dict[str, torch.Tensor] = field(default_factory=dict)
    skipped: RoundOutcome | None = None
    overlapped: bool = False
    late_applied: int = 0
    judged: int = 0


@dataclass
class MixCorrection:
    """What one mixing computed (``Peer.mixing``), to add to θ and the outer momentum b (``Peer.apply_mix``).

    Attributes:
        round: the round r whose post-step states were mixed.
        theta: ``(d,)`` float32, θ_mixed − θ_post-step.
        momentum: ``(d,)`` float32 move of b, or None (no momentum yet, or nobody answered).
        mixed_from: the most states one gossip step used.
        distance: the first step's largest ‖θ_j − θ_i‖ / ‖θ_i‖ before mixing (None: no state arrived).
        median_distance: the first step's median of the same (None: no state arrived); drives the adaptive
            schedule (``swarm.mix_schedule``).
        bytes_received: bytes of the θ and b vectors fetched, as they came (2·d each in float16, 4·d in float32).
    """

    round: int
    theta: torch.Tensor
    momentum: torch.Tensor | None = None
    mixed_from: int = 0
    distance: float | None = None
    median_distance: float | None = None
    bytes_received: int = 0

    def count_received(self, size: int) -> None:
        """Add one fetched state's ``size`` (bytes) to :attr:`bytes_received`."""
        self.bytes_received += size


@dataclass
class InnerResult:
    """The inner phase's output: Δ = θ_start − θ_after_H of round ``base_round``, its loss and wall time."""

    base_round: int
    delta: torch.Tensor
    loss: float
    compute_s: float


@dataclass
class PhaseHead:
    """The first τ inner steps of an overlapped round, run while the previous round's communication goes on.

    Attributes:
        round: the round r whose inner phase this is.
        start: ``(d,)`` float32, where the head started: the end of the previous inner phase (the phase continues
            the local trajectory) or θ (after a catch-up, or in the first overlapped round).
        end: ``(d,)`` float32, where the head's τ steps ended.
        steps: τ, the head's inner steps (``1 <= τ <= H``).
        loss: mean inner loss over the head (nats).
        generator: the round's batch generator; the tail continues its stream.
        compute_s: the head's wall time, seconds.
    """

    round: int
    start: torch.Tensor
    end: torch.Tensor
    steps: int
    loss: float
    generator: torch.Generator
    compute_s: float


class EarlierSessionCommit(RuntimeError):
    """Another session of our identity (running now or earlier) committed to this round: a second would equivocate."""


async def choose_commit_round(round_: int, presence_rounds: Sequence[int],
                              closed: Callable[[int], Awaitable[bool]]) -> int:
    """The round a peer at ``round_`` commits into, given the others' presence rounds.

    The swarm's round s is the median of the others' self-reported presence rounds (a Byzantine minority cannot
    move it). A presence round is the round a peer commits next, so peers at s have committed s − 1, whose commit
    phase stays open until they close it. A peer behind commits into the oldest round in [round_, s] of
    {s − 1, s} that no other peer has closed, else into s + 1. A commit thus lands in a round whose commit phase
    is still open for most peers: made before any honest payload of that round is served (unique computation),
    and counted instead of dropped as ``late_commit``. (Taking s at once, as until stop 16, split a 4-peer
    ``--overlap`` swarm in two: two peers jumped to s while the other two waited for their commits in s − 1, each
    pair until the 60 s commit deadline.)

    Args:
        round_: the round we would commit into.
        presence_rounds: the others' presence rounds (any order; empty: we are alone).
        closed: ``await closed(r)`` tells whether another peer has published its close record for round r.

    Returns:
        The round to commit into, ≥ ``round_``.
    """
    if not presence_rounds:
        return round_
    swarm = lower_median(presence_rounds)
    if swarm <= round_:
        return round_
    for target in (swarm - 1, swarm):
        if target >= round_ and not await closed(target):
            return target
    return swarm + 1


def ahead_and_alone(round_: int, me: str, commits: Collection[str], presence_rounds: Sequence[int]) -> bool:
    """True when our commit phase of ``round_`` closed with no other commit while the swarm is still behind us.

    The swarm's round is the median of the others' presence rounds (as in :func:`choose_commit_round`: a
    Byzantine minority cannot move it). A peer whose own round is short (it fetches from fast peers while its
    slow uplink holds up everyone else's round) commits round r while the others still work on r − 1; at
    ``commit_timeout_s`` its phase closed with only its own commit, it applied nothing, and it did the same in
    every later round, never falling back into step (docs/networking.md, one slow uplink in a swarm). Such a
    peer waits for the others' commits once more (:meth:`Peer.communicate`).

    Args:
        round_: the round of our commit phase.
        me: our PeerID (base58).
        commits: the senders whose commits the phase returned.
        presence_rounds: the others' presence rounds (suspects left out).

    Returns:
        True when no sender but us committed, some other peer is present and the others' median round is
        below ``round_``.
    """
    if set(commits) - {me} or not presence_rounds:
        return False
    return lower_median(presence_rounds) < round_


class Peer:
    """One peer's rounds over a started DHT and P2P replica (built by :func:`run_peer`).

    Version 2 of the round (``docs/protocol.md`` §4): the peer owns its model. One round r, as methods named after
    its states::

        inner  → H AdamW steps from our θ (in a thread; overlaps round r − 1's communication)
        step   → apply round r − 1's aggregate (outer Nesterov) and mixing correction, checkpoint
        commit → sign and store the envelope of Δ in the swarm's open round
        communicate (background task): close → reveal → sample k → fetch → take late rows of r − 1 → judge → mix

    A sequential round awaits ``communicate`` before the next inner phase. An overlapped round (``overlap``; by
    default automatic, :func:`overlap_pays`) splits the next inner phase into :meth:`inner_head`, run while
    ``communicate`` finishes, and :meth:`inner_tail`, run after the step from the stepped θ.
    """

    def __init__(self, config: PeerConfig, identity: Identity, local: LocalModel, dht: SwarmDHT, p2p: P2P,
                 server: PayloadServer, events: EventLog, allowed: frozenset[str] | None = None) -> None:
        """Wire the parts together; nothing starts until :meth:`run`.

        ``allowed`` is the permissioned swarm's allow-list (our own PeerID included), None for an open swarm.
        """
        self.allowed = allowed
        self.config = config
        self.identity = identity
        self.me = identity.peer_id_b58
        self.stream = peer_stream(config.peer_index, self.me, config.num_peers)  # our shard and generators' key
        self.local = local
        self.dht = dht
        self.p2p = p2p
        self.wire_in = WireCounter()  # answer-body bytes our fetches read off the wire (payloads, states)
        self.server = server
        self.events = events
        self.guard = build_guard(config.guard)
        self.attack = load_attack(config.attack) if config.attack else None
        self.round = 0
        self.known_previous: list[torch.Tensor] = []
        self.detector = EquivocationDetector()
        self.banned: dict[str, EquivocationProof] = {}
        self.log = _PeerLog(logger, {"peer": self.me[-8:], "round": 0})
        self.inner_steps = config.inner_steps or local.task.default_hparams.inner_steps
        self.wire = wire_behaviour(self.attack)
        self.error_feedback = ErrorFeedback(config.codec, local.numel, config.resolved_ef_decay, local.shapes)
        self.votes = _vote_book(config, identity, dht, self.wire, allowed) if config.reputation else None
        self.rng = random.SystemRandom()
        # (θ, where our last inner phase ended): an overlapped round's head continues from there while θ is unchanged
        self._continue: tuple[torch.Tensor, torch.Tensor] | None = None
        self.paused = False
        self.resumed = False  # set when a pause (not the first join) ended; _maybe_catch_up clears it
        self.jumped = False  # set when our update went into a round catch_up_behind or more past its base
        self.catch_up_retries = 0  # failed catch-ups in a row that set ``jumped`` again (_maybe_catch_up)
        self.metrics: PeerMetrics | None = None  # the Prometheus endpoint's (``metrics_port``); None: off
        self.departures = Departures(dht, config.run_id)  # peers that left (signed leave records)
        self.suspects = Suspects()  # peers we could not reach lately (killed ones): not waited for, not mixed with
        self.shape_watch = ShapeWatch()  # stops us when the swarm's updates keep being for another model
        self.mix_schedule = MixSchedule(every=config.mix_every, adaptive=config.adaptive_mixing)
        self.rates = RateBook()  # each sender's measured payload rate: its next fetch deadline (swarm.pacing)
        # payloads still streaming at their deadline, applied one round late (swarm.late): at most k held
        self.late = LatePayloads(capacity=config.fanout, max_staleness=config.max_staleness)
        # set once a stop is requested (_relay_stop): the inner phase's thread stops at its next step boundary
        self.halt = threading.Event()
        self.codec_warned: set[str] = set()  # senders whose update in a codec other than ours we warned of
        self.shard_warnings: tuple[str, ...] = ()  # the data-shard coverage warnings last logged (note_coverage)
        # the shard to move to (note_coverage's rebalance), applied by the round loop before an inner phase starts
        self.pending_shard: int | None = None
        self.claim_due = False  # our shard changed: the announcer stores our claim at its next beat

    @property
    def attack_kind(self) -> str | None:
        """``update``, ``data``, ``wire`` or None for an honest peer."""
        return getattr(self.attack, "kind", None) if self.attack is not None else None

    def _generator(self, round_: int, salt: int) -> torch.Generator:
        return round_generator(self.config.run_id, self.config.seed, self.stream.key, round_, salt)

    def _set_round(self, round_: int) -> None:
        self.round = round_
        self.log.extra["round"] = round_

    async def announce(self, stop: asyncio.Event) -> None:
        """Refresh this peer's signed presence record every few seconds until ``stop``.

        Our shard claim too (:meth:`claim_shard`): at once, then every ``SHARD_REFRESH_S``, each time with a look
        at the others' claims (the first time only for a shard shared: the others may not have joined yet).
        """
        next_claim = time.monotonic()
        first = True
        while not stop.is_set():
            record = sign_record("presence", self.config.run_id, self.round, self.round, self.identity)
            await self.dht.store(presence_key(self.config.run_id), self.me, record, PRESENCE_TTL_S)
            if time.monotonic() >= next_claim or self.claim_due:
                next_claim = time.monotonic() + SHARD_REFRESH_S
                self.claim_due = False
                await self.claim_shard(uncovered=not first)
                first = False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), PRESENCE_REFRESH_S)

    async def claim_shard(self, *, uncovered: bool = True) -> None:
        """Store our signed shard claim (``swarm.shard_claims``), then look at the other present peers' claims.

        Logs the coverage warnings when they changed (:meth:`note_coverage`; ``uncovered``: also of the shards no
        present peer trains, and maybe moves to one of them).

        Never raises but on cancellation, and takes at most ``SHARD_READ_TIMEOUT_S``: the announcer that calls it
        keeps our presence alive, and a claim is only informational (a failure is logged at DEBUG).
        """
        config = self.config

        async def claim_and_look() -> dict[str, ShardClaim]:
            await publish_shard_claim(self.dht, self.identity, config.run_id, self.round, self.stream.shard_index,
                                      config.num_peers, SHARD_TTL_S)
            return await present_shard_claims(self.dht, config.run_id, me=self.me, allowed=self.allowed,
                                              exclude=self.banned)

        try:
            claims = await asyncio.wait_for(claim_and_look(), SHARD_READ_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - informational; presence must go on
            self.log.debug("shard claim not refreshed: %s", e or type(e).__name__)
            return
        others = {p: c.shard for p, c in claims.items() if c.num_shards == config.num_peers}
        foreign = {p: c.num_shards for p, c in claims.items() if c.num_shards != config.num_peers}
        self.note_coverage(others, uncovered=uncovered, foreign=foreign)

    def note_coverage(self, others: Mapping[str, int], *, uncovered: bool = True,
                      foreign: Mapping[str, int] | None = None) -> None:
        """Log the data-shard coverage warnings (``swarm.shard_claims.coverage_warnings``) when they changed.

        With ``uncovered``, no ``foreign`` claims and no move pending, a peer that chose its shard itself and
        finds it shared while another is trained by nobody may be the one to move (``shard_claims.rebalance``):
        one INFO line, and :attr:`pending_shard` is set for the round loop (:meth:`apply_pending_shard`).

        Args:
            others: ``{PeerID: claimed shard}`` of the other present peers.
            uncovered: also warn of shards no present peer trains (False at start: the others may not have joined
                yet).
            foreign: ``{PeerID: its num_shards}`` of the other present peers claiming for another number of shards.
        """
        by_index = self.config.peer_index is not None
        num_shards = self.config.num_peers
        if uncovered and not foreign and self.pending_shard is None:
            move = rebalance(self.me, self.stream.shard_index, others, num_shards, by_index=by_index)
            if move is not None:
                self.log.info("data shard %d of %d is also trained by %s; moving to shard %d, which no present peer "
                              "trains", move.shard, num_shards, ", ".join(p[-8:] for p in move.sharing), move.to)
                self.pending_shard = move.to
        kept = tuple(coverage_warnings(self.me, self.stream.shard_index, others, num_shards, uncovered=uncovered,
                                       by_index=by_index, foreign=foreign))
        if kept == self.shard_warnings:
            return
        for warning in kept:
            self.log.warning("%s", warning)
        if not kept and self.shard_warnings:
            self.log.info("data shards: each of the %d is now trained by a present peer, ours by us alone",
                          self.config.num_peers)
        self.shard_warnings = kept

    def use_shard(self, index: int) -> None:
        """Train data shard ``index`` from now on (our batches stay keyed as before). Only between inner phases.

        Raises:
            ValueError: the new shard makes our envelopes exceed ``--max-envelope-bytes`` (``check_model_fits``);
                nothing is changed then.
        """
        config, local = self.config, self.local
        shard = local.task.shard(config.num_peers, index, config.partition, config.seed)
        check_model_fits(config, local.numel, local.shapes, shard.num_samples, self.identity)
        local.shard = shard
        self.stream = PeerStream(index, self.stream.key, self.stream.derived)

    def apply_pending_shard(self) -> None:
        """Move to :attr:`pending_shard`, if any, and have the announcer store our new claim at its next beat.

        The round loop calls it before an inner phase starts: no worker thread uses the shard then.
        """
        index, self.pending_shard = self.pending_shard, None
        if index is None or index == self.stream.shard_index:
            return
        try:
            self.use_shard(index)
        except ValueError as e:
            self.log.warning("data shard %d not taken, we stay on %d: %s", index, self.stream.shard_index, e)
            return
        self.claim_due = True

    async def others_present(self) -> dict[str, int]:
        """``{PeerID: self-reported round}`` of the other present, allowed, unbanned peers."""
        present = filter_allowed(await read_presence(self.dht, self.config.run_id), self.allowed)
        return {p: r for p, r in present.items() if p != self.me and p not in self.banned}

    async def unreachable_suspects(self) -> frozenset[str]:
        """Our unreachable suspects now, less those that stored their presence again since (``swarm.suspects``).

        Reads the presence key's expirations only when there is a suspect (no extra DHT read otherwise).
        """
        now = time.monotonic()
        if not self.suspects.unreachable(now):
            return frozenset()
        stored = await presence_stored_at(self.dht, self.config.run_id)
        cleared = self.suspects.clear_refreshed(stored, time.monotonic(), hivemind_time())
        if cleared:
            self.log.info("no longer suspected unreachable (stored their presence since): %s",
                          ", ".join(p[-8:] for p in cleared))
        return self.suspects.unreachable(time.monotonic())

    async def wait_for_peers(self, stop: asyncio.Event, *, timeout_s: float | None) -> dict[str, int]:
        """Wait until ``min_peers`` (self included) are present; return the others with their rounds.

        Every round calls this, not only the first: with too few others a peer pauses (one line, one ``pause``
        event, and the progress display says so) and resumes when they return; it never trains alone. A peer we
        could not reach lately (an unreachable suspect: killed, frozen, cut off) does not count, although its
        presence record lives on for up to 30 s: without this, a peer whose only partner was killed ran through
        dozens of empty rounds (no update to apply) within those seconds.

        Args:
            stop: set on shutdown (returns what is present then).
            timeout_s: give up after this long (seconds; the first join), None: wait as long as it takes.

        Raises:
            TimeoutError: if ``timeout_s`` passes first.
        """
        started = time.monotonic()
        needed = self.config.min_peers
        if timeout_s is not None and self.config.start_peers is not None:  # the first join
            needed = self.config.start_peers
        while True:
            unreachable = await self.unreachable_suspects()
            others = {p: r for p, r in (await self.others_present()).items() if p not in unreachable}
            if len(others) + 1 >= needed or stop.is_set():
                if self.paused and not stop.is_set():  # stopping while paused is not a resume
                    paused_s = time.monotonic() - started
                    if timeout_s is None:
                        self.log.info("resuming: %d other peer(s) present again (paused %.0f s)", len(others),
                                      paused_s)
                        self.events.emit("resume", round=self.round, paused_s=paused_s)
                        self.resumed = True
                    self.paused = False
                return others
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TimeoutError(f"only {len(others) + 1} of {needed} peers joined within {timeout_s:g} s; "
                                   "check --initial-peers")
            if not self.paused:
                self.paused = True
                what = "waiting for peers" if timeout_s is not None else "paused"
                self.log.info("%s: %d of %d peers present (self included); not training alone", what,
                              len(others) + 1, needed)
                if timeout_s is None:  # the first join is not a pause
                    self.events.emit("pause", round=self.round, present=len(others) + 1, needed=needed)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), WAIT_POLL_S)

    # -- inner ---------------------------------------------------------------------------------------------------

    async def inner(self, round_: int) -> InnerResult:
        """H inner AdamW steps from our θ (a sequential round: the previous round's step is applied)."""
        started = time.monotonic()
        end, loss = await self._train(self.local.theta, self.inner_steps, self._generator(round_, 1))
        self._continue = None
        return InnerResult(round_, self.local.theta - end, loss, time.monotonic() - started)

    async def inner_head(self, round_: int, steps: int) -> PhaseHead:
        """The first ``steps`` (τ) inner steps of an overlapped round, beside the previous round's communication.

        The head continues the local trajectory from where our previous inner phase ended, when θ is still the θ
        that phase was measured from (no catch-up since); else it starts from θ. :meth:`inner_tail` moves what
        the head learned onto θ after the previous round's step and runs the other H − τ steps (Streaming DiLoCo's
        overlap of τ inner steps with the outer communication, Douillard et al. 2025, arXiv:2501.18512).
        """
        steps = max(1, min(steps, self.inner_steps))
        start = self.local.theta
        if self._continue is not None and self._continue[0] is self.local.theta:
            start = self._continue[1]
        generator = self._generator(round_, 1)
        started = time.monotonic()
        end, loss = await self._train(start, steps, generator)
        return PhaseHead(round_, start, end, steps, loss, generator, time.monotonic() - started)

    async def inner_tail(self, head: PhaseHead) -> InnerResult:
        """The other H − τ steps of an overlapped round, from θ + (head end − head start); Δ is measured from θ.

        θ here is after the previous round's step (and any mixing correction applied with it), so the round's
        pseudo-gradient Δ = θ − θ_after is measured from the model every receiver's aggregate will be applied to,
        and only the head's τ steps were computed on the older base (their progress is kept, rebased onto θ).
        """
        theta = self.local.theta
        rest = self.inner_steps - head.steps
        started = time.monotonic()
        end, loss = await self._train(theta + (head.end - head.start), rest, head.generator)
        compute_s = head.compute_s + time.monotonic() - started
        self._continue = (theta, end)
        mean = head.loss if rest == 0 else (head.loss * head.steps + loss * rest) / self.inner_steps
        return InnerResult(head.round, theta - end, mean, compute_s)

    async def _train(self, start: torch.Tensor, steps: int, generator: torch.Generator
                     ) -> tuple[torch.Tensor, float]:
        """``LocalModel.train_from`` in a thread (the event loop goes on serving and fetching meanwhile).

        Raises:
            InnerPhaseStopped: a stop was requested (``self.halt``); the partial phase is no update.
        """
        data_attack = self.attack if self.attack_kind == "data" else None
        started = time.monotonic()
        end, loss = await asyncio.to_thread(self.local.train_from, start, steps, generator, data_attack,
                                            halt=self.halt)
        slowdown = _read_slowdown(self.config.control_file)
        # fault injection (simulations): an F times slower volunteer; a stop request during the slowdown is one
        # during the phase (no update)
        if slowdown > 1.0 and await _sleep_unless_halted(self.halt, (slowdown - 1.0) * (time.monotonic() - started)):
            raise InnerPhaseStopped(steps)
        return end, loss

    # -- step ----------------------------------------------------------------------------------------------------

    def step(self, outcome: RoundOutcome) -> None:
        """Outer Nesterov step on the round's aggregate; serve the new θ as ``["theta", r + 1]`` (before mixing).

        A peer with an ``update`` attack also keeps the round's other rows for its next commit (``known_previous``);
        any other peer keeps none of them past the round (an honest peer held k ``(d,)`` float32 rows through the
        whole next round for nothing: 28 bytes per parameter at k = 7).
        """
        if outcome.aggregate is not None:
            self.local.apply(outcome.aggregate)
            if self.attack_kind == "update":  # only an update attack reads them (attacks.apply): (n − 1)·4·d bytes
                self.known_previous = [row for s, row in sorted(outcome.rows.items()) if s != self.me]
        self.serve_state(outcome.round + 1, mixing=outcome.mix)

    def serve_state(self, round_: int, *, mixing: bool = True) -> None:
        """Serve our θ and outer momentum as ``["theta", round_]`` and ``["momentum", round_]``.

        Without ``mixing`` (we do not mix this round) our θ also answers every gossip step of the others' mixing.
        """
        theta = self.local.theta_bytes()
        self.server.publish_theta(round_, theta)
        self.server.publish_momentum(round_, self.local.momentum_bytes())
        if not mixing:
            self.server.publish_unmixed(round_, theta)

    async def mix(self, outcome: RoundOutcome, stop: asyncio.Event) -> None:
        """Run :meth:`mixing` for the round of ``outcome`` and apply it at once (sequential rounds)."""
        correction = await self.mixing(outcome.round, stop)
        if correction is not None and not stop.is_set():
            self.apply_mix(correction, outcome)

    def apply_mix(self, correction: MixCorrection, outcome: RoundOutcome) -> None:
        """θ += the θ correction, b += the momentum correction; the mixing's figures go into ``outcome``.

        Raises:
            ValueError: a non-finite correction (``LocalModel.shift``); never from honest mixing, which only
                moves toward finite states.
        """
        self.local.shift(correction.theta)
        if correction.momentum is not None:
            self.local.shift_momentum(correction.momentum)
        outcome.mixed_from = max(outcome.mixed_from, correction.mixed_from)
        outcome.bytes_received += correction.bytes_received
        outcome.mix_distance = correction.distance
        before = self.mix_schedule.interval
        after = self.mix_schedule.observe(correction.round, correction.median_distance)
        if after != before:
            self.log.info("mixing every %d round(s) now (median distance %s after round %d)", after,
                          "-" if correction.median_distance is None else f"{correction.median_distance:.2e}",
                          correction.round)

    async def mixing(self, round_: int, stop: asyncio.Event) -> MixCorrection | None:
        """ClippedGossip toward a few sampled peers' states after the step of ``round_`` (``swarm.mixing``).

        Computes on copies of our θ and b and returns the corrections (None: nobody to mix with, or stopped);
        :meth:`apply_mix` applies them. With ``--overlap`` this runs beside the next inner phase and is applied
        at the next round's end, before its step (``_finish``), so that mixing waits for no neighbour on the
        round's critical path; our θ and b do not change meanwhile (only ``_finish`` changes them).

        Every peer mixes its post-step θ of round r toward the others' post-step θ of the same round (what each
        served as ``["theta", r + 1]`` before mixing), so the step's disagreement is contracted in the same round,
        and its outer momentum b toward theirs (``["momentum", r + 1]``, clipped at :data:`MOMENTUM_MIX_RADIUS`
        times ‖b‖), so that the momentum does not re-inject the disagreement in the next rounds (measured in one
        process: ``docs/scripts/consensus_sampling.py``). A neighbour not there yet is asked again for up to
        2·``grace_s``; the mixing uses those that answered. Suspects (``swarm.suspects``: unreachable, silent, or
        cut as too slow, e.g. a slowloris) are not sampled, and a neighbour that gave no state in one gossip step
        is not sampled in the later steps of the same mixing, so it costs one wait per mixing, not one per step.

        In the first ``early_mix_rounds`` rounds the θ mixing runs ``early_mix_steps`` gossip steps, and in a swarm
        of more than 2(m + 1) peers more (``mixing.gossip_steps``): after step s we serve our θ as
        ``["mixed", [r + 1, s]]`` and step s + 1 mixes toward a fresh sample's θ after their step s (iterated gossip
        contracts the disagreement geometrically; each step's move is clipped as the first's). Our final state is
        served for every later step too, for peers that see a larger swarm and run more steps.
        """
        others = self._mixable(await self.others_present())
        if not others:
            return None
        steps = gossip_steps(len(others) + 1, self.config.mix_peers, early=round_ < self.config.early_mix_rounds,
                             early_steps=self.config.early_mix_steps, max_steps=MAX_MIX_STEPS)
        start = own = self.local.theta  # θ is replaced, never modified in place: no copy needed
        # θ's correction is set at the end (own − start); a zero (d,) placeholder would cost 4·d bytes meanwhile.
        result = MixCorrection(round=round_, theta=start.new_empty(0))
        precision = self._mix_precision()
        missed: set[str] = set()
        noise: dict[str, float] = {}  # E‖rounding noise‖² of each received state (int8 only; fetch_thetas)
        for step in range(steps):
            if step > 0:
                self.server.publish_mixed(round_ + 1, step, raw_bytes(own))  # own is replaced, never changed
                # A neighbour without its state in an earlier step of this mixing (cut as too slow or silent, or
                # still "not found" after wait_s: it lags) is not asked again in it: it costs one wait per mixing,
                # not one per gossip step.
                others = {p: r for p, r in self._mixable(others).items() if p not in missed}
            chosen = sample_senders(others, self.config.mix_peers, self.rng) if others else []
            states = await self.fetch_thetas(chosen, stop, round_=round_ + 1, wait_s=self.config.grace_s * 2,
                                             kind="theta" if step == 0 else "mixed", step=step,
                                             precision=precision, keep_half=True,
                                             received=result.count_received, noise=noise)
            if stop.is_set():
                return None
            missed.update(p for p in chosen if p not in states)
            if not states:
                continue
            if step == 0:
                result.momentum = await self._momentum_correction(round_, list(states), stop, result,
                                                                  precision=precision)
            # In a thread: seconds of CPU at d = 25M, during which the event loop keeps serving our states.
            gossip = await asyncio.to_thread(clipped_gossip, own, list(states.values()),
                                             max_radius=self.config.mix_radius,
                                             noise=[noise.get(p, 0.0) for p in states])
            norm = max(float(own.norm()), 1e-12)
            distance = max(gossip.distances, default=0.0) / norm
            own = own + gossip.correction
            result.mixed_from = max(result.mixed_from, len(states))
            if step == 0:
                result.distance = distance
                result.median_distance = statistics.median(gossip.distances) / norm
            self.events.emit("mix", round=round_, step=step + 1, sources=len(states), tau=gossip.tau,
                             tau_rel=gossip.tau / norm, clipped=gossip.clipped, distance=distance,
                             moved=float(gossip.correction.norm()) / norm)
        self.server.publish_mixed(round_ + 1, steps, raw_bytes(own), last=True)
        result.theta = own - start
        return result

    def _mix_precision(self) -> str:
        """The precision this mixing fetches states in: ``mix_precision`` (``fp16`` by default), or ``fp32``.

        ``fp16`` (2·d bytes per state, not 4·d) only while our θ and b lie well inside float16's range
        (|x| ≤ :data:`HALF_SAFE`): a model with larger values mixes in float32. The rounding (relative
        2⁻¹¹ ≈ 4.9e-4 per coordinate) sits far below the honest disagreement the mixing corrects and below its
        clipping radius. ``int8`` (4·⌈d/1024⌉ + d bytes) has a float32 scale per 1024 values, so no range limit;
        its error, at most half a scale (1/254 of a chunk's largest |θ|) per coordinate, is larger
        (docs/protocol.md §7.8 measures both).
        """
        precision = self.config.mix_precision
        if precision == "fp16" and not all(float(x.abs().max()) <= HALF_SAFE
                                           for x in (self.local.theta, self.local.momentum) if x.numel()):
            return "fp32"
        return precision

    def _mixable(self, others: Mapping[str, int]) -> dict[str, int]:
        """``others`` (PeerID → presence round) less our suspects and the peers our reputation excludes.

        For a mixing sample: suspects are ``swarm.suspects``'s, exclusions :meth:`_exclusions`'s
        (:meth:`others_present` already leaves banned peers out). Read again before each gossip step, so that a
        peer cut as too slow or silent in one step is not sampled in the next: one slowloris then costs a mixing
        at most one ``fetch_idle_timeout_s``, not one per step. A peer whose updates we no longer aggregate is not
        mixed with either: clipping bounds its θ's pull to τ/(m + 1) a step, but that pull came every round, from
        the same side (``bench.mixing``, which the in-process cell runs with the same rule).
        """
        unwelcome = self.suspects.current(time.monotonic()) | self._exclusions()
        return {p: r for p, r in others.items() if p not in unwelcome}

    async def _momentum_correction(self, round_: int, sources: list[str], stop: asyncio.Event,
                                   result: MixCorrection, *, precision: str = "fp32") -> torch.Tensor | None:
        """The move of our outer momentum toward ``sources``' (``["momentum", r + 1]``), or None.

        Clipped at MOMENTUM_MIX_RADIUS·‖b‖; None while our momentum is still zero or nobody answered. A zero b
        (no outer momentum, μ = 0: the ``topk`` codecs' default; or no step yet) fetches nothing: the states,
        4·d bytes from each source, would be thrown away (digits, 4 peers, topk 2 %: a quarter of the bytes a peer
        sent per round; docs/protocol.md §7.8).
        """
        momentum = self.local.momentum
        if not bool(momentum.any()):
            return None
        noise: dict[str, float] = {}
        momenta = await self.fetch_thetas(sources, stop, round_=round_ + 1, kind="momentum", precision=precision,
                                          received=result.count_received, noise=noise, keep_half=True)
        if not momenta:
            return None
        gossip = await asyncio.to_thread(clipped_gossip, momentum, list(momenta.values()),
                                         max_radius=MOMENTUM_MIX_RADIUS, noise=[noise.get(p, 0.0) for p in momenta])
        return gossip.correction

    # -- commit --------------------------------------------------------------------------------------------------

    async def open_round(self, round_: int) -> int:
        """The round to commit into: ours, or the swarm's open round if we fell behind (a slow volunteer).

        See :func:`choose_commit_round`; a round counts as closed when a peer other than us (and not banned) has
        published its close record for it.
        """
        others = await self.others_present()

        async def closed(target: int) -> bool:
            return bool(await read_closes(self.dht, self.config.run_id, target) - {self.me} - set(self.banned))

        return await choose_commit_round(round_, list(others.values()), closed)

    async def commit(self, round_: int, inner: InnerResult) -> tuple[bytes, bytes, torch.Tensor]:
        """Sign and store the envelope of our update of ``round_``.

        The update goes through our codec with error feedback (what a lossy codec did not send carries over to
        the next round, ``training.error_feedback``).

        Returns:
            (sealed envelope, payload to serve, ``(d,)`` float32 update as the receivers will decode it, which
            is our own row in our guard).
        """
        update = self._attacked(inner.delta, round_)
        try:  # encoding d values (a top-k selection at d = 25M: seconds): in a thread, so that we keep serving
            payload, sent = await asyncio.to_thread(self.error_feedback.compress, update)
        except ValueError as e:  # a non-finite Δ (only an attack or a local fault makes one): sent as it is
            self.log.error("error feedback refused our update (%s); sending it without", e)
            payload, sent = encode_update(update, self.config.codec, self.local.shapes), update
        # SHA-256 of 12·d bytes (seconds at d = 25M on a loaded machine): in a thread, so that we keep serving
        base_hash = await asyncio.to_thread(self.local.state_hash)
        envelope = Envelope(protocol_version=PROTOCOL_VERSION, run_id=self.config.run_id, round=round_,
                            sender=self.identity.peer_id, base_hash=base_hash,
                            digest=await asyncio.to_thread(payload_digest, payload), codec=self.config.codec,
                            shapes=self.local.shapes,
                            n_samples=self.local.shard.num_samples, payload_bytes=len(payload),
                            base_round=min(inner.base_round, round_))
        draft = CommitDraft(envelope=envelope, digest_payload=payload, serve_payload=payload)
        draft = self.wire.mutate(draft, self._generator(round_, 2))
        poll = partial(revealed_payloads, self.p2p, self.dht, self.config.commit_phase, self.config.fetch_limits,
                       round_, self.me)
        draft = await self.wire.before_commit(draft, poll, timeout_s=self.config.commit_timeout_s)
        sealed = self.wire.replay(seal(draft, self.identity))
        await self._refuse_equivocation(round_, sealed)
        if self.config.checkpoint_dir:  # before it can reach anyone: a restart never commits this round again
            mark_committed(self.config.checkpoint_dir, round_)
        await self.dht.store(commit_key(self.config.run_id, round_), self.me, sealed, COMMIT_TTL_S)
        self.events.emit("commit", round=round_, base_round=envelope.base_round, payload_bytes=len(payload))
        self.log.debug("committed %d-byte envelope", len(sealed))
        second = self.wire.second_commit(draft, self._generator(round_, 2))
        if second is not None:  # equivocation: a conflicting envelope, stored later
            await asyncio.sleep(EQUIVOCATION_DELAY_S)
            await self.dht.store(commit_key(self.config.run_id, round_), self.me, seal(second, self.identity),
                                 COMMIT_TTL_S + 1)
        return sealed, draft.serve_payload, sent

    async def _refuse_equivocation(self, round_: int, sealed: bytes) -> None:
        """Stop rather than sign a second, different commit for ``round_`` (an equivocation: everyone bans us).

        Within a session a peer commits once per round, and with a ``checkpoint_dir`` a restart knows its last
        commit (``last_commit``). Without one, an earlier session of the same identity and run id (a re-run of
        the same command within the commits' 10-minute TTL) left its commits in the DHT; an honest peer
        re-running found itself banned for equivocation by every other peer (user test, stop 19). So we read the
        round's commits first; an identical envelope (a deterministic re-run) is no conflict.

        Raises:
            EarlierSessionCommit: our PeerID already has a different commit under this round's key.
        """
        existing = (await self.dht.read(commit_key(self.config.run_id, round_))).get(self.me)
        if existing is not None and existing != sealed:
            raise EarlierSessionCommit(
                f"this identity already signed a different commit for run {self.config.run_id!r} round {round_} "
                f"in another session of this identity (running now or earlier; commits stay in the DHT for "
                f"{COMMIT_TTL_S // 60:.0f} min); signing a second would be an equivocation and every peer would ban "
                "us. Stop the other session if it still runs; to go on, resume that session with its "
                "--checkpoint-dir, or start a new run with another --run-id")

    # -- communicate: close, reveal, sample, fetch, judge, mix ---------------------------------------------------

    async def communicate(self, round_: int, own_update: torch.Tensor, sealed: bytes, serve: bytes,
                          stop: asyncio.Event, *, mix: bool,
                          own_reference: torch.Tensor | None = None) -> RoundOutcome:
        """Round ``round_``'s communication after our commit; returns what to apply (never applies it itself).

        Args:
            round_: the round we committed into.
            own_update: ``(d,)`` float32, our Δ (the trusted root of our guard).
            sealed: our signed envelope.
            serve: the payload we reveal after the close gate.
            stop: set on shutdown (a partial round is never applied).
            mix: run a mixing step this round.
            own_reference: ``(d,)`` float32, our Δ before our codec and error feedback (dense); our guard judges
                sparse (``topk``) rows against it. None: that test is skipped.
        """
        outcome = RoundOutcome(round_)
        suspects = await self.unreachable_suspects()  # slow suspects still commit in time: waited for
        commits, withheld = await await_commits(self.dht, self.config.commit_phase, round_, self.me, stop,
                                                on_poll=self._watch_commits, exclude=frozenset(self.banned),
                                                allowed=self.allowed, not_waited=suspects)
        alone = not set(commits) - {self.me}  # the presence read below only then, not every round
        others = [r for p, r in (await self.others_present()).items() if p not in suspects] if alone else []
        if not stop.is_set() and ahead_and_alone(round_, self.me, commits, others):
            self.log.info("round %d: no other commit within %.0f s and the swarm is behind (its round %d): waiting "
                          "once more for its commits", round_, self.config.commit_phase.commit_timeout_s,
                          lower_median(others))
            commits, withheld = await await_commits(self.dht, self.config.commit_phase, round_, self.me, stop,
                                                    on_poll=self._watch_commits, exclude=frozenset(self.banned),
                                                    allowed=self.allowed, not_waited=suspects)
        await self._collect_proofs(round_)
        outcome.verdicts += [SenderVerdict.rejected(s, round_, RejectReason.EQUIVOCATION, BANNED_DETAIL)
                             for s in commits if s in self.banned]
        excluded = await self._fold_votes(round_)
        outcome.verdicts += [SenderVerdict.rejected(s, round_, RejectReason.EXCLUDED, EXCLUDED_DETAIL)
                             for s in sorted(commits) if s in excluded]
        # senders that left stay until the close gate, which does not wait for them; _drop_departed drops them
        commits = {s: raw for s, raw in commits.items() if self._unwelcome(s, excluded, departed=False) is None}
        await reveal_after_close(self.dht, self.server, self.identity, self.config.commit_phase, round_, commits,
                                 serve, stop, self.departures)
        self._drop_departed(commits, round_)
        commits[self.me] = sealed
        # A present peer that withheld its commit may commit the moment it fetches a revealed payload (a copycat):
        # give such a commit grace_s to land before the one re-read, so that it is reported.
        watch_s = self.config.grace_s if withheld - {self.me} - set(self.banned) - suspects else 0.0
        not_before = time.monotonic() + watch_s
        envelopes, rejected = open_commits({s: raw for s, raw in commits.items() if s != self.me},
                                           self.config.commit_phase)
        rows, more = await self._fetch_sample(round_, envelopes, stop, outcome)
        late = await late_commits(self.dht, self.config.commit_phase, round_, commits, not_before=not_before,
                                  stop=stop, exclude=frozenset(self.banned) | excluded, allowed=self.allowed,
                                  departures=self.departures)
        if stop.is_set():
            return outcome
        self._record_rejections(rejected + more + late, round_, outcome)
        staleness = {s: envelopes[s].staleness for s in rows}
        late_rows = self._take_late(round_, rows, staleness, excluded, outcome)
        await self._aggregate(rows, staleness, own_update, own_reference, outcome)
        self._count_late(late_rows, outcome)
        disturbed = self.mix_schedule.disturbed([(v.sender, v.accepted, v.reason) for v in outcome.verdicts],
                                                rejected_us=0 if self.votes is None else self.votes.rejected_us)
        outcome.mix = mix or disturbed
        return outcome

    async def receive(self, round_: int, own_update: torch.Tensor, stop: asyncio.Event,
                      own_reference: torch.Tensor | None = None) -> RoundOutcome:
        """The aggregate of a round we skipped: our update went into round ``round_ + 1`` (we were slow).

        The others applied round ``round_``'s aggregate; without it our θ would lack one outer step of theirs
        (measured: a peer that skipped one round of a 4-peer Shakespeare swarm sat 0.18 away in consensus distance,
        and the clipped mixing closes about 0.04 a round). Its commit phase is over and its payloads are revealed,
        so we read its commits once, sample k, fetch and judge them with our own update as the trusted root, as in
        :meth:`communicate`; we commit, reveal and vote nothing in it. Reading happens after our own commit, so our
        update cannot depend on these payloads (and they are of an earlier round anyway).

        Args:
            round_: the skipped round.
            own_update: ``(d,)`` float32, our update as committed into ``round_ + 1`` (our guard's trusted root).
            stop: set on shutdown.
            own_reference: ``(d,)`` float32, our dense Δ (see :meth:`communicate`).

        Returns:
            The round's outcome (aggregate None: nothing arrived, nothing to apply).
        """
        outcome = RoundOutcome(round_)
        raw = await self.dht.read(commit_key(self.config.run_id, round_))
        self._watch_commits(raw)
        excluded = self._exclusions()
        commits = {s: r for s, r in filter_allowed(raw, self.allowed).items()
                   if s != self.me and self._unwelcome(s, excluded) is None}
        envelopes, rejected = open_commits(commits, self.config.commit_phase)
        rows, more = await self._fetch_sample(round_, envelopes, stop, outcome)
        if stop.is_set():
            return outcome
        self._record_rejections(rejected + more, round_, outcome)
        if not rows:
            return outcome
        await self._aggregate(rows, {s: envelopes[s].staleness for s in rows}, own_update, own_reference, outcome)
        return outcome

    async def _fetch_sample(self, round_: int, envelopes: dict[str, Envelope], stop: asyncio.Event,
                            outcome: RoundOutcome) -> tuple[dict[str, torch.Tensor], list[IntegrityVerdict]]:
        """Sample k of the round's opened commits with our private randomness, fetch and check their payloads."""
        expect = RoundExpectation(run_id=self.config.run_id, round=round_, shapes=self.local.shapes, codecs=CODECS,
                                  max_payload_bytes=max(payload_cap_bytes(c, self.config.max_parameters)
                                                        for c in CODECS),
                                  max_staleness=self.config.max_staleness)
        sampled = sample_senders(envelopes, self.config.fanout, self.rng) if envelopes else []
        rows, more = await check_rows(self.p2p, {s: envelopes[s] for s in sampled}, expect,
                                      self.config.fetch_limits, {}, stop, self.departures, self.rates, self.late,
                                      wire=self.wire_in)
        self._note_reachability(rows, more)
        self._note_codecs({s: envelopes[s].codec for s in rows})
        outcome.fetched = len(rows)
        outcome.bytes_received = sum(envelopes[s].payload_bytes for s in rows)
        return rows, more

    def _take_late(self, round_: int, rows: dict[str, torch.Tensor], staleness: dict[str, int],
                   excluded: frozenset[str], outcome: RoundOutcome) -> dict[str, int]:
        """Add to ``rows`` the carried payloads of earlier rounds that arrived in full (``swarm.late``).

        Each goes through ``check_payload`` against its own round's expectation, and its staleness
        (``round_ − base_round``) into ``staleness``. A sender with a fresh row in ``rows`` keeps only that one. A
        carried payload whose continued fetch found bad bytes is rejected here. Returns ``{sender: its round}`` of
        the late rows added.
        """
        taken, dropped = self.late.take(round_, partial(self._unwelcome, excluded=excluded))
        added: dict[str, int] = {}
        for d in dropped:
            self.log.info("late update of %s (round %d) dropped: %s", d.sender[-8:], d.round, d.reason)
            if d.rejected is not None:
                self._record_rejections([IntegrityVerdict(d.sender, d.rejected.reason, d.rejected.detail)], round_,
                                        outcome)
        for late in taken:
            if late.sender in rows:
                self.log.info("late update of %s (round %d) dropped: its round %d update arrived", late.sender[-8:],
                              late.envelope.round, round_)
                continue
            row = check_payload(late.envelope, late.payload, late.expect)
            if isinstance(row, Rejected):
                self._record_rejections([IntegrityVerdict(late.sender, row.reason, row.detail)], round_, outcome)
                continue
            self._note_codecs({late.sender: late.envelope.codec})
            rows[late.sender] = row
            staleness[late.sender] = late.staleness
            added[late.sender] = late.envelope.round
            outcome.bytes_received += late.envelope.payload_bytes
        return added

    def _unwelcome(self, sender: str, excluded: Collection[str] = frozenset(), *, departed: bool = True) -> str | None:
        """Why we no longer take ``sender``'s updates, or None when we do.

        Args:
            sender: base58 PeerID.
            excluded: the senders our reputation excludes this round (``_fold_votes``).
            departed: also refuse a sender that has left the swarm (its signed ``leave`` record).

        Returns:
            :data:`BANNED_DETAIL` (equivocation proof), :data:`EXCLUDED_DETAIL`, :data:`LEFT_DETAIL`, in that order
            of precedence, or None.
        """
        if sender in self.banned:
            return BANNED_DETAIL
        if sender in excluded:
            return EXCLUDED_DETAIL
        if departed and sender in self.departures.left:
            return LEFT_DETAIL
        return None

    def _count_late(self, late_rows: Mapping[str, int], outcome: RoundOutcome) -> None:
        """Log each late row the guard accepted and count it in ``outcome.late_applied``."""
        for v in outcome.verdicts:
            if v.sender in late_rows and v.accepted:
                outcome.late_applied += 1
                self.log.info("late update of %s (round %d) applied in round %d, weight %.2f", v.sender[-8:],
                              late_rows[v.sender], outcome.round, v.weight)

    async def _aggregate(self, rows: dict[str, torch.Tensor], staleness: Mapping[str, int],
                         own_update: torch.Tensor, own_reference: torch.Tensor | None, outcome: RoundOutcome) -> None:
        """Weight the rows by staleness (rounds, by sender), add our own row and run the guard, into ``outcome``.

        ``rows`` is the caller's, and is changed in place: its values become the rows of the one ``(n, d)`` stack
        the guard reads (views), so the separately decoded rows are freed before the guard runs (at k = 7 and
        d = 25M they and their stack were 1.4 GB held twice).
        """
        weights = {s: staleness_weight(staleness[s]) for s in rows}
        for s, w in weights.items():
            if w < 1.0:
                rows[s] = rows[s] * w
        if not self.wire.leaves_own_row_out:  # a slowloris is cut by others: it leaves its own row out too
            rows[self.me] = own_update
        if any(s != self.me for s in rows):
            senders, stacked = await asyncio.to_thread(stack_rows, rows)  # n·d copies: off the event loop
            rows.update(zip(senders, stacked, strict=True))
            await asyncio.to_thread(self._judge, senders, stacked, weights, staleness, outcome, own_reference)
            outcome.judged = len(senders)
            if self.attack_kind == "update":  # only its attack reads them next round (Peer.step)
                outcome.rows = rows
        else:
            self.log.warning("no other peer's update arrived in round %d; the model is left unchanged", outcome.round)

    def _note_codecs(self, codecs: Mapping[str, str]) -> None:
        """Warn once per sender whose update, decoded and about to be judged, came in a codec other than ours.

        Every known codec is decoded (``RoundExpectation.codecs`` is all of ``protocol.CODECS``), so peers started
        with different ``--codec`` train together without a word; a lossy sender's rows carry its codec's error, and
        the receiver's own error feedback does not apply to them. One WARNING per sender for the peer's life, not
        per round. An unknown or malformed codec never gets here: the envelope check rejects it (``DECODE_ERROR``,
        ``unknown codec ...``).

        Args:
            codecs: ``{sender: the codec its envelope declares}`` of the rows that passed the integrity checks.
        """
        for sender, codec in sorted(codecs.items()):
            if codec == self.config.codec or sender in self.codec_warned:
                continue
            self.codec_warned.add(sender)
            self.log.warning("%s sends its updates in codec %s, ours is %s: accepted and decoded as usual (every "
                             "known codec is); check that the peers' --codec settings agree (warned once per sender)",
                             sender[-8:], codec, self.config.codec)

    def _note_reachability(self, rows: Mapping[str, object], verdicts: Sequence[IntegrityVerdict]) -> None:
        """Senders whose payload came are no suspects; senders given up as unreachable are (``swarm.suspects``).

        So are senders that never answered at all (not even the status byte within ``fetch_idle_timeout_s``):
        a frozen or sleeping peer keeps its connections open, so its fetches time out instead of failing.
        Senders we cut while reading because they stalled or trickled (``TOO_SLOW_DETAIL``, our own measurement)
        become slow suspects: not sampled for mixing for a while. A sender that only missed its fetch deadline
        while streaming above the rate floor (a large payload) does not.
        """
        for sender in rows:
            self.suspects.delivered(sender)
        now = time.monotonic()
        for v in verdicts:
            if (v.reason is RejectReason.UNAVAILABLE and v.detail.startswith(UNREACHABLE_DETAIL)) or \
                    (v.reason is RejectReason.TIMEOUT and is_no_answer(v.detail)):
                self.suspects.failed(v.sender, now)
            elif v.reason is RejectReason.TIMEOUT and v.detail.startswith(TOO_SLOW_DETAIL):
                self.suspects.too_slow(v.sender, now)

    def _drop_departed(self, commits: dict[str, bytes], round_: int) -> None:
        """Drop the commits of senders that have left the swarm since (never fetched, no verdict: they are gone)."""
        gone = sorted(s for s in commits if s in self.departures.left and s != self.me)
        for sender in gone:
            del commits[sender]
        if gone:
            self.log.info("not fetching %d sender(s) that left the swarm: %s", len(gone),
                          ", ".join(s[-8:] for s in gone))
            self.events.emit("departed", round=round_, senders=gone)

    def _record_rejections(self, rejected: list[IntegrityVerdict], round_: int, outcome: RoundOutcome) -> None:
        for v in rejected:
            if v.reason is not None:
                outcome.verdicts.append(SenderVerdict.rejected(v.sender, round_, v.reason, v.detail))
                if v.sender != self.me:
                    self.log.warning("rejected %s: %s (%s)", v.sender[-8:], v.reason.value, v.detail)

    def _judge(self, senders: tuple[str, ...], stacked: torch.Tensor, weights: dict[str, float],
               staleness: Mapping[str, int], outcome: RoundOutcome, own_reference: torch.Tensor | None = None) -> None:
        result = judge_stacked(self.guard, senders, stacked, me=self.me, round_=outcome.round,
                               previous_aggregate=self.local.previous_aggregate, f=self.config.assumed_byzantine,
                               generator=self._generator(outcome.round, 4),
                               own_reference=own_reference if self.me in senders else None)
        for verdict in result.verdicts:
            outcome.verdicts.append(SenderVerdict.judged(
                verdict.sender, outcome.round, verdict.accepted, verdict.reason, verdict.detail, verdict.norm,
                verdict.cosine, weights.get(verdict.sender, 1.0), staleness.get(verdict.sender, 0), verdict.record))
            if not verdict.accepted and verdict.sender != self.me:
                self.log.warning("rejected %s: %s (%s)", verdict.sender[-8:], verdict.reason, verdict.detail)
        outcome.aggregate = result.aggregate

    async def fetch_thetas(self, peers: list[str], stop: asyncio.Event, *, round_: int = -1, wait_s: float = 0.0,
                           kind: str = "theta", step: int = 0, precision: str = "fp32",
                           received: Callable[[int], None] | None = None,
                           noise: dict[str, float] | None = None, keep_half: bool = False
                           ) -> dict[str, torch.Tensor]:
        """Fetch each of ``peers``' θ (``kind="momentum"``: outer momentum) at the start of ``round_``, bounded reads.

        ``kind="mixed"``: their θ after ``step`` gossip steps of the mixing that ends at the start of ``round_``.
        ``round_`` -1 asks for their latest. A peer not at ``round_`` yet (``NOT_FOUND``) is asked again every
        0.5 s for up to ``wait_s`` seconds. ``precision`` (``protocol.states.STATE_PRECISIONS``) is asked as
        ``[kind, key, precision]`` (``fp32``: ``[kind, key]``); a peer of an earlier release that refuses it
        (``BAD_REQUEST``) is asked again in float32. Every answer is hostile: it is decoded in the precision it
        was asked in (``protocol.states.decode_state``: its length checked against the exact size first, then
        its scales and values), and one that is rejected is logged with the reason and left out, as if that peer
        had not answered. Returns ``(d,)`` float32 CPU tensors, all finite (with ``keep_half``, an answer in
        ``fp16`` stays float16, 2·d bytes instead of 4·d: ``decode_state``'s ``keep_half``, for the mixing, whose
        ``clipped_gossip`` widens each block itself). ``received`` is called with the size
        in bytes of each state returned, as it came. ``noise``, if given, gets each returned state's expected
        squared rounding error in the precision its answer was actually decoded in
        (``protocol.states.rounding_noise``: from the decoded values alone, nonzero for int8 only; a peer that
        answered in float32 after a ``BAD_REQUEST`` gets 0), for ``swarm.mixing.clipped_gossip`` to debias with.
        Once more than half of the peers' states are in, a state still streaming past twice their time (at least
        ``max(fetch_timeout_s, wait_s)``) is not waited for (``swarm.stragglers``): each fetch's own deadline
        grows with the state's size, and one slow or Byzantine neighbour must not hold the mixing that long.
        """
        watch = self.departures.watching(stop) if peers else contextlib.nullcontext()
        async with watch:
            key: int | list[int] = [round_, step] if kind == "mixed" else round_
            results = await gather_unless_straggling(
                [self._fetch_vector(kind, p, key, wait_s, stop, precision=precision) for p in peers],
                floor_s=max(self.config.fetch_timeout_s, wait_s))
        states: dict[str, torch.Tensor] = {}
        for i, p in enumerate(peers[:len(results)]):
            answer, results[i] = results[i], None  # each answer's bytes are freed once decoded, not held to the end
            if stop.is_set() or answer is None:
                self.log.debug("state of %s at round %d not used (no answer, or a straggler)", p[-8:], round_)
                continue
            data, asked = answer
            answer = None
            theta = await asyncio.to_thread(decode_state, data, asked, self.local.numel, keep_half=keep_half)
            size, data = len(data), b""
            if isinstance(theta, Rejected):
                self.log.warning("%s state of %s at round %d rejected: %s (%s)", asked, p[-8:], round_,
                                 theta.reason.value, theta.detail)
                continue
            states[p] = theta
            if noise is not None:
                noise[p] = rounding_noise(theta, asked)
            if received is not None:
                received(size)
        return states

    async def _fetch_vector(self, kind: str, peer: str, key: int | list[int], wait_s: float, stop: asyncio.Event,
                            *, precision: str = "fp32") -> tuple[bytes | bytearray, str] | None:
        """One peer's state answer and the precision it was asked in (the last ask), or None (no answer).

        At most ``state_bytes(precision, d) + 1`` bytes are read (``fetch``), so an oversized answer is cut and
        then rejected by its length. Each ask's deadline comes from the state's exact size and the peer's
        measured rate, as a payload's does (``swarm.pacing.fetch_deadline_s``; the rate book is shared with the
        payloads, since both cross the same uplink), and a state that arrives whole updates that rate (one cut at
        its deadline while it streamed records ``size / deadline``, a bound that lengthens the next ask). With one
        ``fetch_timeout_s`` for every state, a 25M-parameter model's float16 θ (50.7 MB) from a 20 Mbit/s uplink
        serving 7 neighbours (about 0.36 MB/s each) was always cut at 30 s, so mixing never completed.
        """
        size = state_bytes(precision, self.local.numel)
        request: list[object] = [kind, key] if precision == "fp32" else [kind, key, precision]
        deadline = time.monotonic() + wait_s
        gone = self.departures.event(peer)  # cut at once when it leaves, or when we stop
        failures = 0
        while not stop.is_set() and not gone.is_set():
            timeout_s = fetch_deadline_s(size, self.rates.rate(peer), fetch_timeout_s=self.config.fetch_timeout_s,
                                         idle_timeout_s=self.config.fetch_idle_timeout_s,
                                         min_bytes_per_s=self.config.min_fetch_bytes_per_s)
            asked_at = time.monotonic()
            result = await first_of(fetch(self.p2p, PeerID.from_base58(peer), self.config.run_id, request,
                                          max_bytes=size, timeout_s=timeout_s,
                                          idle_timeout_s=self.config.fetch_idle_timeout_s,
                                          min_bytes_per_s=self.config.min_fetch_bytes_per_s, wire=self.wire_in),
                                    stop, gone)
            if result is None:
                return None
            streaming = result.status == -1 and is_deadline_cut(result.detail)
            if streaming:
                # Still streaming at its deadline, so under ``size`` bytes in ``timeout_s``: record that bound on its
                # rate (an over-estimate), so the next ask gets MARGIN times as long (up to the floor's bound). With
                # nothing recorded, a sender never measured was cut at the same deadline in every mixing. It
                # answered and streamed above the floor: a slow uplink, no unreachable suspect.
                self.rates.record(peer, size, timeout_s)
            silent = result.status == TOO_SLOW and is_no_answer(result.detail)
            if streaming:
                self.suspects.answered(peer)
                failures += 1
                if failures >= 2:
                    return None
            elif result.status == -1 or silent:  # no answer at all: a killed or frozen peer is not waited for
                self.suspects.failed(peer, time.monotonic())
                if silent:
                    return None
                failures += 1
                if failures >= 2:
                    return None
            elif result.status == TOO_SLOW:  # it answered, then stalled or trickled: cut by us, not sampled again
                self.suspects.answered(peer)
                self.suspects.too_slow(peer, time.monotonic())
                return None
            else:
                self.suspects.answered(peer)
                failures = 0
            if result.status == OK:
                self.suspects.delivered(peer)
                if result.data is not None and len(result.data) == size:
                    self.rates.record(peer, size, time.monotonic() - asked_at)
                return (result.data, precision) if result.data is not None else None
            if result.status == BAD_REQUEST and len(request) == 3:  # a peer of an earlier release: float32, now
                precision = "fp32"
                request, size = [kind, key], state_bytes(precision, self.local.numel)
                continue
            if time.monotonic() + 0.5 > deadline:
                return None
            await asyncio.sleep(0.5)
        return None

    async def _first_open_round(self, round_: int) -> int:
        """The first round from ``round_`` on that no other peer has closed yet (at most ``CLOSED_ROUNDS_READ`` on).

        A closed round's peers are about to serve, or serve, their state of the next one. Presence rounds lag their
        peers by up to ``PRESENCE_REFRESH_S`` (5 s), five rounds of 1 s on digits: a restarted peer asked for
        states of a round its sources no longer kept (``MAX_KEPT_ROUNDS``), waited ``reveal_wait_s`` +
        2·``grace_s`` (14 s) for them, and fell back to their latest states (user test).
        """
        for _ in range(CLOSED_ROUNDS_READ):
            if not await read_closes(self.dht, self.config.run_id, round_) - {self.me} - set(self.banned):
                break
            round_ += 1
        return round_

    async def catch_up(self, others: dict[str, int], stop: asyncio.Event, *, min_round: int = 0) -> int | None:
        """Adopt the coordinate-wise median of several sampled peers' states and our own (late join, far behind).

        Never one peer's word: at least two other states are needed, and our own θ is a third vote.

        The round to continue from is the swarm's open round r (:meth:`open_round`'s rule on the sampled sources:
        the median of their presence rounds, plus one if some peer already published its close record for it), and
        the states adopted are theirs at the start of exactly that round (``["theta", r]``, asked again for up to
        ``reveal_wait_s`` + 2·``grace_s`` while a source is still finishing round r − 1), so that θ and the round
        it is labelled with agree even when a presence record lags its peer by a round, and our first update is
        computed on the state the swarm is committing on; only if fewer than two sources have it are their latest
        states (``["theta", -1]``) used, labelled with the median of their presence rounds.

        The outer momentum is not restarted at 0 but taken from the same sources: in DiLoCo's outer Nesterov
        step most of a round's displacement is momentum (θ_r − θ_{r−1} ≈ −η·b), so a peer rejoining with b = 0
        takes much shorter steps than the swarm and drifts away from it for rounds (measured in
        ``tests/integration/test_partition_netns.py``: the distance grew from 0.009 to 0.075 in two rounds; in the
        chaos soak of stop 16 a restarted peer whose exact-round fetch timed out rejoined with b = 0 and stood 0.2
        to 0.27 away for 7 rounds). It is the coordinate-wise median of the sources' served momenta
        (``["momentum", r]``, or their latest with their latest θ) and our own; with fewer than two of those, the
        median of (θ_j,r−1 − θ_j,r)/η over the sources that still serve round r − 1 and ours; else 0.

        ``min_round`` is the first round we may take part in: a peer restarted after committing round c continues
        in c + 1 (never a second envelope for c), so it waits up to one more commit phase for the states of
        c + 1 rather than adopt those of c and skip c's step (in stop 16's chaos soak that left a restarted peer
        one outer step, 0.115, from the swarm).

        The peers our reputation excludes (:meth:`_exclusions`) are no sources, as they are no mixing neighbours
        (:meth:`_mixable`): a peer restarted from its checkpoint keeps its exclusions, and its catch-up used to
        sample them (live: 3 honest peers and one ``sign_flip:scale=1``, an honest one SIGKILLed and restarted
        with ``--checkpoint-dir``, caught up on the median of the 3 others' states, the attacker it still
        excluded among them); with fewer than two other sources left we keep our model.

        Returns:
            The round to continue from, or None if fewer than two states of a round ≥ ``min_round`` could be
            fetched (we keep our model).
        """
        excluded = self._exclusions()
        trusted = {p: r for p, r in others.items() if p not in excluded}
        if len(trusted) < 2 <= len(others):
            self.log.warning("catch-up: %d of the %d peers present are excluded by our reputation: too few sources "
                             "left; keeping our model", len(others) - len(trusted), len(others))
            return None
        others = trusted
        chosen = sample_senders(others, self.config.catch_up_peers, self.rng)
        median = lower_median([others[p] for p in chosen]) if chosen else 0
        target = await self._first_open_round(median)
        wait_s = self.config.reveal_wait_s + 2 * self.config.grace_s
        if target < min_round:  # we cannot take part in an earlier round (we committed it before a restart)
            target, wait_s = min_round, wait_s + self.config.commit_timeout_s
        # Only a source already in round target - 1 or later (by its presence record, or by the close records
        # that moved target past it) is waited for; one further behind (another peer that was paused with us)
        # cannot serve that state in time and is asked once.
        # The round a source must have reached to be waited for: target - 1, or median, whichever is lower (a
        # target far past the median came from close records; the sources at the median are waited for then).
        waited_from = min(target - 1, median)
        near = [p for p in chosen if others[p] >= waited_from]
        far = [p for p in chosen if p not in near]  # each source asked once (near and far could overlap)
        fetched = await asyncio.gather(self.fetch_thetas(near, stop, round_=target, wait_s=wait_s),
                                       self.fetch_thetas(far, stop, round_=target))
        states = {**fetched[0], **fetched[1]}
        exact = len(states) >= 2
        if not exact and not stop.is_set():
            states = await self.fetch_thetas(chosen, stop)
        if stop.is_set():  # Ctrl+C: the fetches gave up, no peer failed us
            return None
        if len(states) < 2:
            self.log.warning("catch-up: only %d peer state(s) could be fetched; keeping our model", len(states))
            return None
        if not exact:
            target = lower_median([others[p] for p in states])
            if target < min_round:
                self.log.warning("catch-up: the sampled peers serve states of round %d, before our round %d; "
                                 "keeping our model (mixing closes the gap)", target, min_round)
                return None
        centre = robust_centre([*states.values(), self.local.theta])
        momentum = await self._catch_up_momentum(states, target, exact, stop) if self.local.outer.momentum else None
        self.local.adopt(centre, momentum)
        self.serve_state(target)
        adopted = "estimated" if momentum is not None else "restarted at 0" if self.local.outer.momentum else "none"
        self.log.info("caught up: median of %d peers' states and ours at round %d; momentum %s; continuing at "
                      "round %d", len(states), target, adopted, target)
        self.events.emit("catch_up", round=target, from_round=self.round, sources=len(states),
                         exact_round=exact, momentum_estimated=momentum is not None)
        return target

    async def _catch_up_momentum(self, states: Mapping[str, torch.Tensor], target: int, exact: bool,
                                 stop: asyncio.Event) -> torch.Tensor | None:
        """The outer momentum a catch-up adopts with ``states`` (their round ``target``, or their latest), or None.

        The coordinate-wise median of the sources' served momenta and ours; without two of those, at an exact
        round, estimated from their states of the round before, (θ_{r−1} − θ_r)/η; else None (restart at 0).
        Only called with outer momentum (μ > 0): with μ = 0 the peer keeps no b and fetching 4·d bytes per
        source would be waste.
        """
        momenta = await self.fetch_thetas(list(states), stop, round_=target if exact else -1, kind="momentum")
        if len(momenta) >= 2:
            return robust_centre([*momenta.values(), self.local.momentum])
        if exact and target > 0:
            previous = await self.fetch_thetas(list(states), stop, round_=target - 1)
            lr = self.local.outer.lr
            estimates = [(previous[p] - states[p]) / lr for p in previous]
            if len(estimates) >= 2:
                return robust_centre([*estimates, self.local.momentum])
        return None

    async def _fold_votes(self, round_: int) -> frozenset[str]:
        """Fold last round's votes into the reputation; return the senders to drop before aggregation."""
        if self.votes is None:
            return frozenset()
        update = await self.votes.fold(round_ - 1, ignore=frozenset(self.banned)) if round_ > 0 else None
        enforced = self.config.reputation_exclusion
        if update is not None:
            for sender in update.newly_excluded:
                st = update.standings[sender]
                recent = self.votes.reputation.recent(sender)
                self.log.log(logging.WARNING if enforced else logging.INFO,
                             "%s %s: reputation %.2f, %d of our last %d verdicts struck it (%d rejections; oldest "
                             "first: %s)",
                             "excluding from now on" if enforced else "reputation would exclude (exclusion off)",
                             sender[-8:], st.score, st.own_strikes, self.votes.reputation.window,
                             st.own_rejections, ", ".join(recent))
                self.events.emit("exclude" if enforced else "exclude_candidate", sender=sender, round=round_,
                                 score=st.score, own_rejections=st.own_rejections, own_strikes=st.own_strikes,
                                 verdicts=list(recent))
            for sender in update.readmitted:
                self.log.info("readmitting %s for a fresh trial", sender[-8:])
                self.events.emit("readmit", sender=sender, round=round_)
            self.events.emit("standing", round=round_ - 1,
                             scores={s: round(st.score, 4) for s, st in update.standings.items()},
                             strikes={s: st.own_strikes for s, st in update.standings.items()},
                             voter_weights={v: round(w, 4) for v, w in (update.voter_weights or {}).items()},
                             excluded=sorted(update.excluded), enforced=enforced)
        return self._exclusions()

    def _exclusions(self) -> frozenset[str]:
        """The senders (base58 PeerIDs) our reputation excludes now; empty when exclusion is off or votes are."""
        if self.votes is None or not self.config.reputation_exclusion:
            return frozenset()
        return frozenset(self.votes.excluded)

    def _watch_commits(self, commits: dict[str, bytes]) -> None:
        """Feed every envelope seen to the equivocation detector; ban on a conflict."""
        for subkey, raw in commits.items():
            env = open_envelope(raw, max_bytes=self.config.max_envelope_bytes)
            if isinstance(env, Rejected) or peer_id_to_b58(env.sender) != subkey or env.run_id != self.config.run_id:
                continue
            proof = self.detector.observe(raw, env)
            if proof is not None:
                self._ban(proof, "seen in our own DHT reads")

    async def _collect_proofs(self, round_: int) -> None:
        """Ban senders proven to equivocate: by our DHT node's validator or by proofs other peers published."""
        report = self.dht.validator_report()
        for raw in report.proofs:
            proof = verify_proof(raw)
            if not isinstance(proof, Rejected) and proof.run_id == self.config.run_id:
                self._ban(proof, "caught by our DHT node")
        for proof in (await read_proofs(self.dht, self.config.run_id)).values():
            self._ban(proof, "published by another peer")
        for proof in self.banned.values():  # keep every proof we know alive in the DHT (TTL)
            await publish_proof(self.dht, self.config.run_id, proof)

    def _ban(self, proof: EquivocationProof, how: str) -> None:
        accused = proof.sender_b58
        if accused in self.banned or accused == self.me:
            return
        self.banned[accused] = proof
        folder = self.config.resolved_proof_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{accused}.proof"
        path.write_bytes(proof.to_bytes())
        self.log.warning("banned %s for equivocation in round %d (%s); proof: %s", accused[-8:], proof.round,
                         how, path)
        self.events.emit("ban", sender=accused, round=self.round, proof_round=proof.round,
                         reason=RejectReason.EQUIVOCATION.value, proof=str(path), how=how)

    def _attacked(self, delta: torch.Tensor, round_: int) -> torch.Tensor:
        if self.attack is None:
            return delta
        ctx = AttackContext(round=round_, n=self.config.num_peers, f=max(1, self.config.byzantine_count),
                            generator=self._generator(round_, 3), guard_name=self.config.guard,
                            guard_f=self.config.assumed_byzantine)
        return attacked_update(self.attack, delta, self.known_previous, ctx)


def _vote_book(config: PeerConfig, identity: Identity, dht: SwarmDHT, wire: WireBehaviour,
               allowed: frozenset[str] | None) -> VoteBook:
    """Our :class:`VoteBook`; a ``vote_smear`` attacker publishes its smear (colluders: itself only)."""
    colluders = frozenset({identity.peer_id_b58})

    def smear(votes: Any) -> Any:
        smeared = wire.smear(votes, colluders)
        return votes if smeared is None else smeared

    return VoteBook(dht, config.run_id, identity, allowed=allowed, smear=smear)


def network_options(config: PeerConfig) -> NetworkOptions:
    """The relay, UPnP and reachability options of ``p2pd`` from the peer's settings.

    A peer that listens on a loopback address only (a local test, ``--host 127.0.0.1``) never asks the router for a
    port (UPnP / NAT-PMP traffic on the LAN for a port nobody outside can reach) and does not look for relays unless
    ``relays`` names some.
    """
    local = _is_loopback(config.host)
    return NetworkOptions(use_relay=config.use_relay,
                          use_auto_relay=config.use_auto_relay and (not local or bool(config.relays)),
                          nat_port_map=config.nat_port_map and not local, reachability=config.reachability,
                          relays=config.relays)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _watch_network(dht: SwarmDHT, events: EventLog, stop: asyncio.Event) -> None:
    """Report this peer's announced addresses and its relayed connections whenever they change.

    Every ``NETWORK_POLL_S`` it asks ``p2pd`` for its addresses (relayed ``/p2p-circuit`` ones appear once a
    relay took a reservation for us) and for its open connections; on a change it logs one INFO line and emits a
    ``network`` event: ``maddrs``, ``relays`` (PeerIDs of the relays in our addresses), ``connections`` and
    ``relayed`` (``[PeerID, remote multiaddr]`` of the connections that go through a relay).
    """
    last: tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None = None
    while not stop.is_set():
        try:
            maddrs = tuple(sorted(await dht.visible_maddrs(latest=True)))
            conns = await dht.connections()
        except Exception as e:  # noqa: BLE001 - p2pd going away at shutdown; report and stop watching
            logger.debug("network watch stopped: %s", e)
            return
        relayed = tuple(sorted((p, a) for p, a in conns if is_relayed(a)))
        if (maddrs, relayed) != last:
            relays = sorted({r for m in maddrs if (r := relay_of(m)) is not None})
            if relays and (last is None or not any(relay_of(m) for m in last[0])):
                logger.info("reachable through relay %s: %s", ", ".join(relays),
                            ", ".join(m for m in maddrs if relay_of(m)))
            events.emit("network", maddrs=list(maddrs), relays=relays, connections=len(conns),
                        relayed=[list(c) for c in relayed])
            last = (maddrs, relayed)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), NETWORK_POLL_S)


async def _rejoin_initial_peers(dht: SwarmDHT, initial_peers: Sequence[str], stop: asyncio.Event,
                                poll_s: float = REJOIN_POLL_S) -> None:
    """Ping each of ``initial_peers`` every ``poll_s`` seconds (``SwarmDHT.ping``) until ``stop``.

    A bootstrap node that was restarted (an empty routing table) then knows us again and introduces newcomers to
    the swarm; a ping that fails (the node is still down) is tried again next period.
    """
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), poll_s)
        if stop.is_set():
            return
        for maddr in initial_peers:
            try:
                await dht.ping(maddr)
            except Exception as e:  # noqa: BLE001 - best effort: a bootstrap node that is down stays down for now
                logger.debug("ping of initial peer %s failed: %s", maddr, e)


def _log_task_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("background task failed", exc_info=task.exception())


def linger_seconds(fetch_timeout_s: float, last_round_s: float) -> float:
    """How long a peer that finished its rounds keeps serving, at most (seconds).

    ``min(MAX_LINGER_S, max(fetch_timeout_s, LINGER_ROUNDS · last_round_s))``: long enough for a peer one round
    behind (a slow volunteer, a loaded machine) to fetch our last payload and mix with our last θ. With only
    ``fetch_timeout_s`` (30 s), the slowest of 32 peers on one loaded 2-core machine (rounds of 75 s) found every
    other peer gone: it fetched 3 payloads instead of 8, could not mix, and ended 0.063 from the others (measured:
    ``simulate --honest 32 --byzantine 0 --rounds 4``, the last round).
    """
    return min(MAX_LINGER_S, max(fetch_timeout_s, LINGER_ROUNDS * max(0.0, last_round_s)))


async def _linger(peer: Peer, last_round: int, stop: asyncio.Event, *, linger_s: float) -> None:
    """Keep serving our last payload and θ until every peer of the last round has moved past it (``linger_s``)."""
    deadline = time.monotonic() + linger_s
    committers = set(filter_allowed(await peer.dht.read(commit_key(peer.config.run_id, last_round)), peer.allowed))
    while not stop.is_set() and time.monotonic() < deadline:
        present = filter_allowed(await read_presence(peer.dht, peer.config.run_id), peer.allowed)
        waiting = [p for p in committers if p != peer.me and present.get(p, last_round + 1) <= last_round]
        if not waiting:
            return
        await asyncio.sleep(0.5)


def check_model_fits(
    config: PeerConfig, numel: int, shapes: tuple[tuple[int, ...], ...], n_samples: int, identity: Identity
) -> None:
    """Refuse to start when our own updates could never pass our limits (and so every peer's with the same).

    Args:
        config: the peer's settings (``max_parameters``, ``max_envelope_bytes``, ``codec``, ``run_id``).
        numel: d, our model's parameter count.
        shapes: our model's parameter shapes (``training.params.param_shapes``), as the envelope carries them.
        n_samples: the samples behind our updates (the envelope's ``n_samples``; a larger number may take a
            few more bytes: the CLI's pre-start check passes 0, the peer its shard's size).
        identity: our key (the envelope is signed as it will be).

    Raises:
        ValueError: d exceeds ``max_parameters``, or a signed envelope of our model (of any round) exceeds
            ``max_envelope_bytes``; the message gives both numbers.
    """
    if numel > config.max_parameters:
        raise ValueError(f"the task's model has {numel:,} parameters, more than --max-parameters "
                         f"{config.max_parameters:,}: every peer with this limit (this one too) would reject our "
                         "updates")
    late = 1 << 40  # a round number of the widest encoding: later rounds' envelopes are no longer than this one
    envelope = Envelope(protocol_version=PROTOCOL_VERSION, run_id=config.run_id, round=late, base_round=late,
                        sender=identity.peer_id, base_hash=bytes(32), digest=bytes(32), codec=config.codec,
                        shapes=shapes, n_samples=n_samples,
                        payload_bytes=expected_payload_bytes(config.codec, numel, shapes))
    size = len(sign_envelope(envelope, identity))
    if size > config.max_envelope_bytes:
        raise ValueError(f"our signed envelope is {size:,} bytes (the model's {len(shapes)} tensor shapes), "
                         f"more than --max-envelope-bytes {config.max_envelope_bytes:,}: every peer with this "
                         "limit would reject our commits")


def build_local_model(config: PeerConfig, identity: Identity, task: Task) -> LocalModel:
    """This peer's :class:`LocalModel`: θ_0 from the run seed and our data shard (``training.streams``).

    The shard is ``config.peer_index`` or, when that is None, the one derived from our PeerID.

    Raises:
        ValueError: the task's data cannot be cut into ``config.num_peers`` shards, or ``--device cuda`` without
            a GPU.
    """
    shard_index = peer_stream(config.peer_index, identity.peer_id_b58, config.num_peers).shard_index
    return LocalModel(task, seed=config.seed, num_shards=config.num_peers, shard_index=shard_index,
                      partition=config.partition, outer_lr=config.resolved_outer_lr,
                      outer_momentum=config.resolved_outer_momentum, dense_outer_lr=dense_outer_lr(config.codec),
                      device=pick_device(config.device), mixed_precision=config.bf16_autocast)


async def start_shard(peer: Peer, config: PeerConfig) -> ShardChoice:
    """Pick our data shard now that the DHT is up, train on it, and log which one and how it was chosen.

    ``--peer-index`` if set (nothing read: the announcer's first claim warns if a present peer claims it too).
    Else reads the other present peers' shard claims (``swarm.shard_claims.present_claims``, at most
    :data:`SHARD_READ_TIMEOUT_S`) and takes ``choose_shard``'s pick: the unclaimed shard our PeerID prefers, else
    (every shard claimed, or the claims unreadable) the shard of our PeerID. Our batches stay keyed as before
    (``peer.stream.key``). Warns when another present peer claims our shard; shards nobody trains are warned of
    later, by the announcer (``Peer.note_coverage``), once the others had time to join.

    Raises:
        ValueError: the new shard makes our envelopes exceed ``--max-envelope-bytes`` (``check_model_fits``).
    """
    others: dict[str, int] | None = None
    try:
        if config.peer_index is None:
            others = await asyncio.wait_for(
                present_claims(peer.dht, config.run_id, config.num_peers, me=peer.me, allowed=peer.allowed),
                SHARD_READ_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a read that fails or times out leaves the shard of our PeerID
        peer.log.debug("shard claims not read: %s", e or type(e).__name__)
        others = None
    choice = choose_shard(peer.me, config.num_peers, None if others is None else others.values(), config.peer_index)
    if choice.shard_index != peer.stream.shard_index:
        peer.use_shard(choice.shard_index)
    peer.log.info("%s", describe_choice(choice, config.num_peers))
    if others is not None:
        peer.note_coverage(others, uncovered=False)
    return choice


async def _main(config: PeerConfig, progress: bool, stop: asyncio.Event) -> int:
    # A new key file is written only once the DHT is up: a failed start leaves no peer_identity.key behind.
    start_identity = StartIdentity(config.identity)
    try:
        identity = start_identity.identity
        task = guard_user_task(load_task(config.task), config.task)  # a user's method failing: one TaskFailed
        local = build_local_model(config, identity, task)
        check_model_fits(config, local.numel, local.shapes, local.shard.num_samples, identity)
        events = EventLog(config.events)
        initial_peers = (*config.initial_peers, *_known_peers(config.checkpoint_dir, config.initial_peers))
        dht = await start_dht(identity_path=str(start_identity.key_path), initial_peers=initial_peers,
                              host=config.host, port=config.port, announce_host=config.announce_host,
                              record_validators=[RecordValidator([config.run_id])], network=network_options(config))
    finally:
        start_identity.discard_scratch()  # p2pd has read it (or never will)
    relay: asyncio.Task[None] | None = None
    announcer: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    rejoiner: asyncio.Task[None] | None = None
    slow_client: asyncio.Task[Any] | None = None
    metrics: PeerMetrics | None = None
    peer: Peer | None = None
    other_session = False
    try:
        start_identity.keep()
        metrics = start_metrics(config.metrics_port, config.host)
        p2p = dht.p2p
        allowed = None if config.allow_peers is None else load_allowlist(config.allow_peers) | {identity.peer_id_b58}
        attack = load_attack(config.attack) if config.attack else None
        server = server_for(config, allowed, attack)  # a slowloris attacker's server trickles its answers
        cap_warning = upload_cap_warning(config, local.numel, local.shapes)
        if cap_warning is not None:
            logger.warning("%s", cap_warning)
        await server.attach(p2p)
        peer = Peer(config, identity, local, dht, p2p, server, events, allowed)
        if metrics is not None:
            peer.metrics = metrics
            metrics.bind(round_=lambda: peer.round, paused=lambda: float(peer.paused), banned=lambda: len(peer.banned))
        maddrs = await dht.visible_maddrs()
        autocast = autocast_dtype(local.device, config.bf16_autocast)
        logger.info("peer %s up on %s (task %s, device %s%s, %d parameters)", identity.peer_id_b58,
                    ", ".join(maddrs), config.task, local.device, ", bf16 autocast" if autocast else "", local.numel)
        await start_shard(peer, config)
        events.emit("ready", peer_id=identity.peer_id_b58, byzantine=config.attack is not None,
                    attack=config.attack, maddrs=maddrs, numel=local.numel)
        relay = asyncio.create_task(_relay_stop(stop, peer.halt))
        announcer = asyncio.create_task(peer.announce(stop))
        announcer.add_done_callback(_log_task_failure)
        watcher = asyncio.create_task(_watch_network(dht, events, stop))
        watcher.add_done_callback(_log_task_failure)
        rejoiner = asyncio.create_task(_rejoin_initial_peers(dht, config.initial_peers, stop))
        rejoiner.add_done_callback(_log_task_failure)
        slow_client = start_slow_client(attack, p2p, peer.dht, config, peer.me, stop)  # slowloris attackers only
        return await _round_loop(peer, config, progress, stop, events)
    except EarlierSessionCommit:
        other_session = True  # its leave record would be the live session's too: the others would drop it
        raise
    finally:
        stop.set()
        if rejoiner is not None:
            rejoiner.cancel()  # a ping of a bootstrap node that is down lasts up to DHT_RPC_TIMEOUT_S
        for background in (relay, announcer, watcher, rejoiner, slow_client):
            if background is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(background, LEAVE_TIMEOUT_S)
        if peer is not None:
            await peer.late.close()  # carried fetches (swarm.late) end with us
            await _leave(peer, publish=not other_session)
        await dht.shutdown()
        if metrics is not None:
            metrics.close()
        events.close()
        start_identity.release()


async def _leave(peer: Peer, *, publish: bool = True) -> None:
    """Withdraw from the swarm on the way out: our signed leave record replaces our presence, then we stop serving.

    The leave record comes first, so that a peer fetching from us sees it (and drops us) before our server
    answers ``NOT_FOUND``; our announcer has stopped, so no presence record follows it. Bounded: a DHT that
    does not answer costs :data:`LEAVE_TIMEOUT_S`, and the others then drop us when our presence expires.

    Args:
        peer: the peer leaving.
        publish: store the leave record. False when this session stops because another session of the same
            identity signed this round (:class:`EarlierSessionCommit`): the record names the PeerID, not the
            session, so the others would drop that session, which may be live (a second copy of a running peer
            knocked it out for three rounds; user test, stop 22).
    """
    stored = False
    if publish:
        try:
            stored = await asyncio.wait_for(
                publish_leave(peer.dht, peer.identity, peer.config.run_id, peer.round), LEAVE_TIMEOUT_S)
        except (asyncio.TimeoutError, OSError, P2PDaemonError) as e:
            peer.log.debug("leave record not stored: %s", e)
    peer.server.withdraw()
    peer.events.emit("leave", round=peer.round, stored=stored)
    if not publish:
        peer.log.info("stopped without a leave record: another session of this identity may still be in the swarm")
    elif stored:
        peer.log.info("left the swarm: presence withdrawn (signed leave record), nothing served any more")
    else:
        peer.log.warning("left the swarm without a leave record (the DHT did not take it); nothing served any "
                         "more, and the others drop us when our presence expires (%.0f s)", PRESENCE_TTL_S)


async def _start_round(peer: Peer, config: PeerConfig, stop: asyncio.Event) -> int:
    """Where to start: our own checkpoint if there is one, then a robust catch-up if the swarm is ahead.

    A refused ``checkpoint.pt`` (corrupt, another run) falls back to ``checkpoint.prev.pt``, one round
    older (``swarm.checkpoint.load_resumable``); with neither, the peer starts from the initial model and catches
    up from the swarm like a new late joiner, even when its commit mark puts it at the swarm's round.

    Raises:
        OtherModelCheckpoint: an intact checkpoint of this run is for another model (a mistyped ``--task``): the
            peer stops before any round instead of overwriting it (``p2p-guard peer`` refuses it at start).
    """
    round_ = 0
    ckpt: Checkpoint | None = None
    if config.checkpoint_dir:
        found = load_resumable(config.checkpoint_dir, run_id=config.run_id, numel=peer.local.numel)
        ckpt = found.checkpoint
        for problem in found.problems:
            peer.log.warning("ignoring our checkpoint: %s", problem)
        if found.previous and found.problems:
            peer.log.warning("resuming from our previous checkpoint (round %d) instead", ckpt.round if ckpt else -1)
        elif found.problems:
            peer.log.warning("no usable checkpoint: starting from the initial model, and catching up from the "
                             "swarm's states if it is past round 0")
        if ckpt is not None:
            peer.local.resume(ckpt.theta, ckpt.momentum)
            residual = ckpt.extra.get("ef_residual")
            if residual is not None:
                try:
                    peer.error_feedback.load_state_dict({"codec": config.codec, "numel": peer.local.numel,
                                                         "residual": residual})
                except ValueError as e:
                    peer.log.warning("error-feedback buffer of the checkpoint not used: %s", e)
            round_ = ckpt.round
        committed = last_committed(config.checkpoint_dir)
        if committed is not None and committed >= round_:  # never sign a second envelope for a round (a ban)
            round_ = committed + 1
    peer._set_round(round_)  # before the line below: its prefix is the round we go on from, not [r0]
    if ckpt is not None:
        peer.log.info("resumed from our checkpoint at round %d", ckpt.round)
        peer.events.emit("resume_checkpoint", round=ckpt.round)
        _restore_guard_state(peer, ckpt)
    peer.server.serve_from(round_)  # payloads our earlier process committed died with it: say so at once
    peer.serve_state(round_)
    if 0 < config.rounds <= round_:  # a finished run restarted: waiting for peers (join_timeout_s) would be for nothing
        return round_
    others = await peer.wait_for_peers(stop, timeout_s=config.join_timeout_s)
    return await _maybe_catch_up(peer, round_, others, stop, checkpoint_round=None if ckpt is None else ckpt.round,
                                 fresh=ckpt is None)


def _restore_guard_state(peer: Peer, ckpt: Checkpoint) -> None:
    """Give the guard and the reputation what they knew at the checkpoint (``swarm.guard_state``), or say why not."""
    if ckpt.state_problem is not None:
        peer.log.warning("guard state of the checkpoint not used (%s): the guard's per-sender records and the "
                         "reputation start empty", ckpt.state_problem)
    elif ckpt.state is None:
        peer.log.info("the checkpoint holds no guard state (written by an earlier version): the guard's per-sender "
                      "records and the reputation start empty")
    else:
        restored = restore_guard_state(ckpt.state, peer.guard, peer.votes, numel=peer.local.numel, log=peer.log)
        if restored:
            peer.log.info("restored from the checkpoint: %s", " and ".join(restored))


async def _maybe_catch_up(peer: Peer, round_: int, others: dict[str, int], stop: asyncio.Event, *,
                         checkpoint_round: int | None = None, fresh: bool = False) -> int:
    """Catch up (robust centre of sampled states) if we are far behind; return the round to continue from.

    Far behind: the swarm's median round is ahead of ours by ``catch_up_behind`` [2] rounds or more, or we join
    a swarm already past round 0 with a fresh model (``fresh``: no checkpoint was resumed, whatever round the commit
    mark of an earlier session puts us at; a corrupt checkpoint once left such a peer at the swarm's round with an
    untrained θ, whose updates dragged an honest peer 0.97 away), or we resume from a pause (§7.1) and the swarm went on
    without us, or we restarted from our checkpoint (θ at the start of ``checkpoint_round``) and the swarm is at
    that round or later: the checkpoint's θ missed the outer steps since, and the round we continue in may be
    later still (never a second commit for a round we committed before the crash). In the chaos soak of stop 15
    a peer restarted one round behind without catching up raised the distance to 0.154, 4 rounds under 1e-2.
    A peer that was paused, frozen (SIGSTOP) or cut off applied none of the rounds it missed, so its θ lags by
    as many outer steps, and mixing alone, capped at ``mix_radius`` per round, took many rounds to close such a
    gap: a pair cut off for 4 rounds rejoined at a consensus distance of 1.67
    (``tests/integration/test_partition_netns.py``), and a peer frozen for 60 s in the chaos soak (3 rounds
    behind, within ``max_staleness``) kept the distance above 1e-2 for 6 rounds (0.31 at first). Its update
    of the round it was in is still applied by the others with a staleness weight (``max_staleness``).
    A peer frozen in the middle of its inner phase finds the swarm ahead only when it commits (``open_round``
    jumps): ``peer.jumped`` then makes it catch up at the next round's start, even level with the swarm (in stop
    16's chaos soak a peer frozen for 60 s mid-inner committed base round 5 into round 7 and stood 0.2 from the
    swarm, 5 rounds over 1e-2, mixing capped at ``mix_radius``).
    """
    resumed, peer.resumed = peer.resumed, False
    jumped, peer.jumped = peer.jumped, False
    if not others:
        return round_
    swarm = lower_median(others.values())
    behind = swarm - round_
    # restarted: our checkpoint's θ missed the outer steps since checkpoint_round, when the swarm is there or
    # later, or when our commit mark moved us past it (we committed a round before the crash and continue after it,
    # so that round's step is missing even while the others' presence records still show the round before)
    restarted = checkpoint_round is not None and (swarm >= checkpoint_round or round_ > checkpoint_round)
    untrained = fresh and swarm > 0  # our initial model, at any round (a commit mark may put us at the swarm's)
    if jumped and peer.catch_up_retries and swarm < round_:
        peer.jumped = True  # a retry waits until the others reach our round: before, their states hold nothing newer
        return round_
    if (behind >= peer.config.catch_up_behind or (round_ == 0 and behind > 0) or (resumed and behind > 0) or restarted
            or jumped or untrained):
        if jumped and peer.catch_up_retries and behind < peer.config.catch_up_behind:
            peer.log.info("our state still misses outer steps (the last catch-up found no newer state): catching "
                          "up again (try %d of %d)", peer.catch_up_retries + 1, MAX_CATCH_UP_RETRIES + 1)
        elif jumped and behind < peer.config.catch_up_behind:
            peer.log.info("our last update jumped rounds (we were frozen or slow): our state missed their outer "
                          "steps; catching up")
        elif untrained and behind < peer.config.catch_up_behind:
            peer.log.info("the swarm is at round %d and our model is the initial one: catching up", swarm)
        elif restarted and behind < peer.config.catch_up_behind:
            peer.log.info("the swarm is at round %d and our checkpoint's state at round %d: catching up", swarm,
                          checkpoint_round)
        else:
            peer.log.info("the swarm is at round %d, %d rounds ahead of us: catching up", swarm, behind)
        target = await peer.catch_up(others, stop, min_round=round_)
        if target is not None:
            peer.catch_up_retries = 0
            return max(round_, target)
        if (jumped or restarted or resumed) and peer.catch_up_retries < MAX_CATCH_UP_RETRIES:
            # our θ still misses outer steps (e.g. restarted right after a commit while the others still finish
            # that round: their states are older than our round); mixing alone, capped at mix_radius, took 4
            # rounds to close such a gap (0.149): the next round's start tries again
            peer.catch_up_retries += 1
            peer.jumped = True
    else:
        peer.catch_up_retries = 0
    return round_


def staleness_outcome(base_round: int, target: int, config: PeerConfig) -> tuple[bool, bool]:
    """What our update computed on ``base_round``'s state does when the swarm's open round is ``target``.

    Returns:
        ``(dropped, jumped)``: dropped when ``target − base_round`` exceeds ``max_staleness`` (no one would apply
        it); jumped when it is ``catch_up_behind`` or more, so our state missed the outer steps of the rounds
        between and the next round's start catches up (:func:`_maybe_catch_up`). A dropped update jumped too:
        before this, the drop left ``jumped`` unset, our round moved to the swarm's, and no catch-up ever ran
        (the rule sees no rounds behind), so such a peer's θ lagged every outer step it missed.
    """
    behind = target - base_round
    return behind > config.max_staleness, behind >= config.catch_up_behind


async def _catch_up_after_jump(peer: Peer, round_: int, stop: asyncio.Event) -> tuple[int, bool]:
    """Catch up at once after our update jumped rounds; return (the round to continue from, apply round_'s step).

    A peer frozen (SIGSTOP) or stalled in the middle of its inner phase finds the swarm ahead only when it commits:
    its update of base round b goes into round ``round_`` ≥ b + ``catch_up_behind`` (with a staleness weight at
    the others), but its θ missed the outer steps of rounds b … round_ − 1. Catching up only at the next round's
    start left it to finish ``round_`` on that stale θ: in stop 16's chaos soak (seed 1) the frozen peer's own
    snapshot of round 7 stood 0.202 from the swarm. So the catch-up runs now, beside the round's communication
    (``min_round`` = ``round_``: the states at the start of ``round_``), and the round's step is applied to the
    adopted θ. If the sources already served a later round's states, those hold round_'s step: it is skipped and
    we continue from that round. If the catch-up fails, ``peer.jumped`` stays set and the next round's start
    tries again (:func:`_maybe_catch_up`).
    """
    others = await peer.others_present()
    if not others:
        return round_ + 1, True
    peer.log.info("our update of an earlier round went into round %d (we were frozen or slow): our state missed "
                  "the swarm's outer steps; catching up now", round_)
    adopted = await peer.catch_up(others, stop, min_round=round_)
    if adopted is None:
        return round_ + 1, True
    peer.jumped = False
    if adopted > round_:
        return adopted, False
    return round_ + 1, True


async def _round_loop(peer: Peer, config: PeerConfig, progress: bool, stop: asyncio.Event,
                      events: EventLog) -> int:
    round_ = await _start_round(peer, config, stop)
    last = config.rounds if config.rounds > 0 else None
    bar = tqdm(total=last, initial=min(round_, last or round_), disable=not progress, unit="round",
               dynamic_ncols=True)
    completed = 0
    pending: asyncio.Task[RoundOutcome] | None = None
    pending_inner: InnerResult | None = None
    pending_step = True
    clock = _RoundClock(peer)
    deferred = _DeferredMix()
    reports = _Reports()
    with bar:
        while not stop.is_set() and (last is None or round_ < last):
            with clock.timed("presence"):
                others = await peer.wait_for_peers(stop, timeout_s=None)
                if stop.is_set():
                    break
                before = peer.local.theta
                round_ = await _maybe_catch_up(peer, round_, others, stop)
                if pending is not None and peer.local.theta is not before:
                    pending_step = False  # the adopted state is the swarm's, past the pending round: its step is in it
            peer._set_round(round_)
            peer.apply_pending_shard()  # between inner phases: no worker thread is using the shard
            head: PhaseHead | None = None
            if pending is None:
                whole = await _inner_phase(peer, round_, clock, peer.inner(round_))
                if whole is None:
                    break
                inner = whole
            else:  # overlap: the head of this phase runs beside the previous round's communication
                head = await _inner_phase(peer, round_, clock, peer.inner_head(
                    round_, head_steps(clock.comm_s, clock.step_s, peer.inner_steps)))
                if head is None:
                    break
            if pending is not None:
                completed += await _finish(peer, pending, pending_inner, clock, bar, stop, deferred, reports,
                                           overlapped=True, apply_step=pending_step)
                pending = None
            if stop.is_set() or (last is not None and round_ >= last):
                break
            if head is not None:
                tail = await _inner_phase(peer, round_, clock, peer.inner_tail(head))
                if tail is None:
                    break
                inner = tail
            clock.step_s = inner.compute_s / peer.inner_steps
            with clock.timed("commit"):
                target = await peer.open_round(round_)
            dropped, peer.jumped = staleness_outcome(inner.base_round, target, config)
            if dropped:
                peer.log.info("our update of round %d is too stale for round %d: dropped", inner.base_round, target)
                round_ = target
                continue
            round_ = target
            peer._set_round(round_)
            with clock.timed("commit"):
                sealed, serve, sent = await peer.commit(round_, inner)
            mix = peer.mix_schedule.due(round_, behind=target > inner.base_round + 1)
            skipped = inner.base_round if target == inner.base_round + 1 else None
            pending = clock.time_communication(asyncio.create_task(
                _communication(peer, round_, sent, sealed, serve, stop, mix=mix, own_reference=inner.delta,
                               skipped=skipped)))
            pending_inner = inner
            next_round, pending_step = round_ + 1, True
            if peer.jumped:
                with clock.timed("presence"):
                    next_round, pending_step = await _catch_up_after_jump(peer, round_, stop)
            overlapped = config.overlap if config.overlap is not None else \
                overlap_pays(clock.comm_s, clock.step_s, peer.inner_steps)
            if not overlapped or round_ < config.overlap_warmup_rounds:
                completed += await _finish(peer, pending, pending_inner, clock, bar, stop, deferred, reports,
                                           apply_step=pending_step)
                pending = None
            round_ = next_round
        if pending is not None and not stop.is_set():
            completed += await _finish(peer, pending, pending_inner, clock, bar, stop, deferred, reports,
                                       apply_step=pending_step)
        elif pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        if stop.is_set():
            await deferred.cancel()
        else:
            await deferred.apply(peer, RoundOutcome(round=round_))
        await reports.wait(timeout_s=_Reports.SHUTDOWN_WAIT_S if stop.is_set() else None)
    peer._set_round(round_)
    if completed == 0 and last is not None and round_ >= last and not stop.is_set():
        peer.log.warning("this peer starts at round %d (its checkpoint's, or the swarm's it caught up with), at or "
                         "past --rounds %d: nothing left to train; raise --rounds (0: no limit) to go on", round_, last)
    if not stop.is_set():
        record = sign_record("presence", config.run_id, round_, round_, peer.identity)
        await peer.dht.store(presence_key(config.run_id), peer.me, record, PRESENCE_TTL_S)
        await _linger(peer, round_ - 1, stop, linger_s=linger_seconds(config.fetch_timeout_s, clock.last_round_s))
    _save_state(peer, config, events, completed)
    return completed


async def _inner_phase(peer: Peer, round_: int, clock: _RoundClock, phase: Awaitable[_Phase]) -> _Phase | None:
    """Await one part of an inner phase (timed as ``inner``); None if a stop request stopped it (one line logged).

    A stopped phase is no update: the caller leaves the round loop and commits nothing for ``round_``.
    """
    try:
        with clock.timed("inner"):
            return await phase
    except InnerPhaseStopped as e:
        peer.log.info("inner phase of round %d stopped after %d step(s) for the stop request: nothing committed "
                      "for it", round_, e.steps_done)
        return None


async def _relay_stop(stop: asyncio.Event, halt: threading.Event) -> None:
    """Set ``halt`` (read by the inner phase's thread between steps) once ``stop`` is set."""
    await stop.wait()
    halt.set()


async def _communication(peer: Peer, round_: int, sent: torch.Tensor, sealed: bytes, serve: bytes,
                         stop: asyncio.Event, *, mix: bool, own_reference: torch.Tensor,
                         skipped: int | None) -> RoundOutcome:
    """``Peer.communicate`` for ``round_``, and beside it ``Peer.receive`` for the round we skipped, if any.

    Run as its own task: its lines are tagged ``round_`` (the skipped round's, ``skipped``), not the loop's round.
    """
    with _lines_about(round_):
        return await _communicate_and_receive(peer, round_, sent, sealed, serve, stop, mix=mix,
                                              own_reference=own_reference, skipped=skipped)


async def _receive_skipped(peer: Peer, skipped: int, sent: torch.Tensor, stop: asyncio.Event,
                           own_reference: torch.Tensor) -> RoundOutcome:
    with _lines_about(skipped):
        return await peer.receive(skipped, sent, stop, own_reference)


async def _communicate_and_receive(peer: Peer, round_: int, sent: torch.Tensor, sealed: bytes, serve: bytes,
                                   stop: asyncio.Event, *, mix: bool, own_reference: torch.Tensor,
                                   skipped: int | None) -> RoundOutcome:
    backlog = asyncio.create_task(_receive_skipped(peer, skipped, sent, stop, own_reference)) \
        if skipped is not None else None
    try:
        outcome = await peer.communicate(round_, sent, sealed, serve, stop, mix=mix, own_reference=own_reference)
    except BaseException:
        if backlog is not None:
            backlog.cancel()
            with contextlib.suppress(BaseException):
                await backlog
        raise
    if backlog is not None:
        try:
            outcome.skipped = await backlog
        except Exception as e:  # noqa: BLE001 - the skipped round is a bonus; its failure must not cost this one
            peer.log.warning("could not receive the round %d we skipped (%s)", skipped, e)
    return outcome


class _DeferredMix:
    """With ``--overlap``, the mixing of round r runs beside the next inner phase, off the critical path.

    :meth:`start` begins ``Peer.mixing`` for round r right after the step; :meth:`apply` adds its corrections at
    the next round's end, before that round's step. θ and b do not change in between (only ``_finish`` changes
    them), so this equals mixing at once except that the inner phase that ran meanwhile started from the unmixed
    θ, the same one-round lag as the overlap's own. A correction is dropped if θ was replaced meanwhile (a
    catch-up adopted other states). The θ snapshot of round r (for the consensus-distance report) is θ after the
    mixing, written when it is done.
    """

    def __init__(self) -> None:
        self.task: asyncio.Task[MixCorrection | None] | None = None
        self.base: torch.Tensor | None = None

    def start(self, peer: Peer, round_: int, stop: asyncio.Event) -> None:
        """Begin the mixing of ``round_`` (the previous one must have been applied)."""
        self.base = peer.local.theta
        self.task = asyncio.create_task(self._run(peer, round_, self.base, stop))

    @staticmethod
    async def _run(peer: Peer, round_: int, base: torch.Tensor, stop: asyncio.Event) -> MixCorrection | None:
        correction = await peer.mixing(round_, stop)
        if not stop.is_set():
            await asyncio.to_thread(_write_snapshot, peer.config.snapshot_dir, round_,
                                    base if correction is None else base + correction.theta)
        return correction

    async def apply(self, peer: Peer, outcome: RoundOutcome) -> None:
        """Await the pending mixing, if any, and apply it to θ and b; its figures go into ``outcome``."""
        task, base, self.task, self.base = self.task, self.base, None, None
        if task is None:
            return
        try:
            correction = await task
        except Exception as e:  # noqa: BLE001 - a failed mixing leaves θ as it is; the peer goes on
            peer.log.warning("mixing of round %d failed (%s): not applied", outcome.round - 1, e)
            return
        if correction is None:
            return
        if peer.local.theta is not base:
            peer.log.info("our state was replaced since the mixing of round %d began: its correction is dropped",
                          correction.round)
            return
        peer.apply_mix(correction, outcome)

    async def cancel(self) -> None:
        """Stop a pending mixing (shutdown)."""
        task, self.task, self.base = self.task, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class _RoundClock:
    """Wall time between round events, where it went, and the byte/serve counters' deltas since the last one.

    The byte counters are the server's ``bytes_sent`` and the fetches' wire bytes read (``Peer.wire_in``,
    ``transport.WireCounter``): both are counted as the bytes move, so a round's figure is what moved since the
    last round event (a late payload's continued fetch counts in the round it was read in).

    ``phases`` holds the seconds spent on the round loop's critical path since the last round event, by phase
    (``presence``: waiting for peers and catching up; ``inner``: the inner phase's wall time including its thread
    hand-off; ``wait``: awaiting the previous round's communication; ``mix``: the step and the mixing gossip;
    ``save``: checkpoint, snapshot, known peers and votes; ``eval``: the held-out evaluation; ``commit``: opening
    the round and storing the commit). Their sum is about ``seconds``; what is not ``inner`` is what the overlap
    did not hide (rule 5 of the round issue).
    """

    PHASES = ("presence", "inner", "wait", "mix", "save", "eval", "commit")

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.last = time.monotonic()
        self.sent = peer.server.bytes_sent
        self.received = peer.wire_in.received
        self.served = peer.server.stats.payloads_served
        self.phases = dict.fromkeys(self.PHASES, 0.0)
        self.last_round_s = 0.0  # wall time of the last round (the last lap), in seconds
        self.comm_s: float | None = None  # how long the last round's communication took, seconds (None: none yet)
        self.step_s = 0.0  # wall time of one inner step in the last inner phase, seconds

    def time_communication(self, communication: asyncio.Task[RoundOutcome]) -> asyncio.Task[RoundOutcome]:
        """Keep the duration of a round's communication task in ``comm_s`` once it ends (it sizes the overlap's head).

        A done callback, not a coroutine around the task's: a stop request cancels the task, sometimes before it
        ever ran, and a wrapped coroutine then was never awaited (a ``RuntimeWarning`` on a peer's Ctrl+C).

        Returns:
            ``communication``.
        """
        started = time.monotonic()

        def done(_task: asyncio.Task[RoundOutcome]) -> None:
            self.comm_s = time.monotonic() - started

        communication.add_done_callback(done)
        return communication

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``phases[phase]`` (seconds)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] += time.monotonic() - start

    def lap(self) -> tuple[float, int, int, int, dict[str, float]]:
        """(seconds, bytes sent, wire bytes received, payloads served, phase seconds) since the last lap; resets."""
        now = time.monotonic()
        sent, served = self.peer.server.bytes_sent, self.peer.server.stats.payloads_served
        received = self.peer.wire_in.received
        phases = {k: round(v, 3) for k, v in self.phases.items()}
        lap = (now - self.last, sent - self.sent, received - self.received, served - self.served, phases)
        self.last_round_s = lap[0]
        self.last, self.sent, self.received, self.served = now, sent, received, served
        self.phases = dict.fromkeys(self.PHASES, 0.0)
        return lap


MAX_HEAD_FRACTION = 0.5
"""With ``--overlap``, at most this fraction of the H inner steps runs before the previous round's step arrives."""

HEAD_MARGIN = 1.25
"""The head is sized to last this many times the previous round's communication."""


def head_steps(comm_s: float | None, step_s: float, inner_steps: int) -> int:
    """τ, the inner steps an overlapped round runs beside the previous round's communication.

    Enough steps to outlast the last round's communication (``HEAD_MARGIN`` × ``comm_s`` ÷ ``step_s``), so that its
    step is there when the head ends, but at most ``MAX_HEAD_FRACTION`` of H: the head's progress is computed on
    the base before that step, and the more of the phase runs there the more of it is stale (Shakespeare, 4 peers
    in one process, 12 rounds: τ = 10 of 50 trailed the sequential rounds' loss by 0.02-0.04, τ = 25 by 0.03-0.06).
    When the communication outlasts the cap, the rest of it is waited for.

    Args:
        comm_s: the last round's communication time, seconds (None: none measured yet: H/4).
        step_s: the last inner phase's wall time per step, seconds (<= 0: none yet: H/4).
        inner_steps: H.

    Returns:
        τ with ``1 <= τ <= ceil(MAX_HEAD_FRACTION · H)``.
    """
    cap = max(1, math.ceil(MAX_HEAD_FRACTION * inner_steps))
    if comm_s is None or step_s <= 0.0 or not math.isfinite(comm_s):
        return max(1, min(cap, inner_steps // 4))
    return max(1, min(cap, math.ceil(HEAD_MARGIN * comm_s / step_s)))


MIN_HIDDEN_FRACTION = 0.1
"""The automatic overlap runs a round overlapped when it hides at least this fraction of a sequential round."""


def overlap_pays(comm_s: float | None, step_s: float, inner_steps: int) -> bool:
    """The automatic overlap (``PeerConfig.overlap`` unset): is the communication a head can hide worth it?

    The head (:func:`head_steps`, at most ``MAX_HEAD_FRACTION`` × H steps) hides min(``comm_s``, its own length)
    of the communication; a sequential round lasts about ``comm_s`` + H · ``step_s``. Overlap when the hidden part
    is at least ``MIN_HIDDEN_FRACTION`` of that: compute-heavy rounds gain a tenth or more of their time (4-peer
    Shakespeare on this machine: compute utilization 78 % sequential, 94 % overlapped), while in
    communication-bound rounds (digits: 4 s of communication against 0.1 s of inner phase) the head hides almost
    nothing and its steps on the older base cost accuracy (measured: −0.8 points on digits, 12 rounds).

    Args:
        comm_s: the last round's communication time, seconds (None: not measured yet: False).
        step_s: the last inner phase's wall time per step, seconds.
        inner_steps: H.
    """
    if comm_s is None or step_s <= 0.0 or not math.isfinite(comm_s):
        return False
    head_s = head_steps(comm_s, step_s, inner_steps) * step_s
    return min(comm_s, head_s) >= MIN_HIDDEN_FRACTION * (comm_s + inner_steps * step_s)


async def _finish(peer: Peer, pending: asyncio.Task[RoundOutcome], inner: InnerResult | None, clock: _RoundClock,
                  bar: tqdm, stop: asyncio.Event, deferred: _DeferredMix, reports: _Reports, *,  # type: ignore[type-arg]
                  overlapped: bool = False, apply_step: bool = True) -> int:
    """Await a round's communication, apply it (outer step + mixing), checkpoint, snapshot, report. 1 if done.

    Without ``apply_step`` the round's aggregate is not applied: a catch-up after a jump
    (:func:`_catch_up_after_jump`) adopted the swarm's state of a later round, which holds this round's step.

    ``overlapped``: we are between the head and the tail of the next round's inner phase (``--overlap``). Then the
    round's mixing is deferred (:class:`_DeferredMix`: it runs beside the tail and is applied at the next round's
    end, before that round's step), and its checkpoint, evaluation and events run in the background
    (:class:`_Reports`), so that only the step itself sits between the head and the tail.
    """
    with clock.timed("wait"):
        outcome = await pending
    if stop.is_set():
        return 0
    with _lines_about(outcome.round):  # overlapped: the loop is at the next round already
        _check_model_match(peer, outcome)
        outcome.overlapped = overlapped
        deferring = overlapped and outcome.mix
        with clock.timed("mix"):
            await deferred.apply(peer, outcome)
            if apply_step:
                _apply_skipped(peer, outcome.skipped)
                peer.step(outcome)
            if deferring:
                deferred.start(peer, outcome.round, stop)
            elif outcome.mix:
                await peer.mix(outcome, stop)
        if stop.is_set():
            return 0
        if inner is not None:
            outcome.train_loss, outcome.compute_s = inner.loss, inner.compute_s
        if peer.votes is not None:  # before the capture: the checkpoint keeps these verdicts until they are folded
            peer.votes.remember(outcome.round, outcome.verdicts)
        # hashes 12·d bytes and copies the guard's state: in a thread, so that the event loop keeps serving
        record = await asyncio.to_thread(_RoundRecord.capture, peer, snapshot=not deferring)
        with clock.timed("save"):
            await reports.wait()  # the previous round's report first: events stay in round order
        if overlapped:
            reports.start(_report(peer, outcome, record, bar, clock, lap=clock.lap()))
        else:
            await _report(peer, outcome, record, bar, clock)
        return 1


def _check_model_match(peer: Peer, outcome: RoundOutcome) -> None:
    """Warn, then stop, when the swarm's updates keep having other shapes than our model (``swarm.model_match``).

    Raises:
        ModelMismatch: after ``MISMATCH_ROUNDS`` such rounds in a row; ``run_peer`` exits 1 with its message.
    """
    said = peer.shape_watch.observe(outcome.verdicts, peer.me)
    if said is None:
        return
    stop, message = said
    if stop:
        raise ModelMismatch(message)
    peer.log.warning(message)


def _apply_skipped(peer: Peer, skipped: RoundOutcome | None) -> None:
    """The outer step of a round we skipped (``Peer.receive``), before the step of the round our update went into."""
    if skipped is None:
        return
    for verdict in skipped.verdicts:
        peer.events.emit("verdict", round=skipped.round, **verdict.as_event())
    applied = skipped.aggregate is not None
    if skipped.aggregate is not None:
        peer.local.apply(skipped.aggregate)
    peer.log.info("round %d, which we skipped (our update went into the next): %s", skipped.round,
                  f"applied its aggregate of {skipped.judged} rows" if applied else "nothing arrived; not applied")
    peer.events.emit("skipped_round", round=skipped.round, fetched=skipped.fetched, applied=applied)


@dataclass(frozen=True)
class _RoundRecord:
    """What a finished round leaves on disk and in its event, captured when its step is done.

    ``theta``, ``momentum`` and ``ef_residual`` are the peer's own ``(d,)`` float32 tensors, not copies: θ, b and
    the error-feedback residual are replaced, never changed in place (``ErrorFeedback.compress`` sets a new
    residual), so they keep the values of this round while the next one runs. ``guard_state`` is what the
    guard and reputation know now (``swarm.guard_state.capture``; None without a checkpoint folder), taken before
    the next round's guard runs (in a thread) or its votes are folded.
    """

    theta: torch.Tensor
    momentum: torch.Tensor
    ef_residual: torch.Tensor
    state_hash: str
    snapshot: bool
    guard_state: dict[str, Any] | None = None

    @classmethod
    def capture(cls, peer: Peer, *, snapshot: bool) -> _RoundRecord:
        state = capture_guard_state(peer.guard, peer.votes) if peer.config.checkpoint_dir else None
        return cls(peer.local.theta, peer.local.momentum, peer.error_feedback.residual,
                   peer.local.state_hash().hex(), snapshot, state)


async def _report(peer: Peer, outcome: RoundOutcome, record: _RoundRecord, bar: tqdm,  # type: ignore[type-arg]
                  clock: _RoundClock, lap: tuple[float, int, int, int, dict[str, float]] | None = None) -> None:
    """Checkpoint, snapshot, evaluation and events of a finished round.

    With ``lap`` (the round's figures, taken when its step was done) this runs in the background beside the next
    inner phase, evaluating on the model's second copy (``LocalModel.evaluate_at``); without, it runs on the round
    loop's critical path and its time goes into the ``save`` and ``eval`` phases.
    """
    timed = clock.timed if lap is None else (lambda _phase: contextlib.nullcontext())
    with timed("save"):
        snapshot = await _save_round(peer, outcome, record)
    with timed("eval"):
        if lap is None:
            metrics = await asyncio.to_thread(peer.local.evaluate)
        else:
            metrics = await asyncio.to_thread(peer.local.evaluate_at, record.theta)
    seconds, sent, received, served, phases = lap if lap is not None else clock.lap()
    _emit_round(peer, peer.events, outcome, metrics, seconds, sent, served, snapshot, phases, record.state_hash,
                wire_bytes_received=received)
    bar.update(1)
    bar.set_postfix_str(_metric_text(metrics))


class _Reports:
    """The background report (:func:`_report`) of the last overlapped round: at most one at a time."""

    SHUTDOWN_WAIT_S = 10.0  # how long a stopping peer waits for the last report (its checkpoint) before dropping it

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    def start(self, report: Coroutine[Any, Any, None]) -> None:
        """Run ``report`` in the background (the previous one must have been awaited)."""
        self.task = asyncio.create_task(report)

    async def wait(self, timeout_s: float | None = None) -> None:
        """Await the pending report, if any; one that fails is logged, one past ``timeout_s`` is cancelled."""
        task, self.task = self.task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(task, timeout_s)
        except asyncio.TimeoutError:
            logger.warning("the last round's report did not finish within %.0f s; dropped", timeout_s)
        except TaskFailed:  # a user's evaluate() is broken: every later report would fail the same way
            raise
        except Exception as e:  # noqa: BLE001 - a failed report (disk full, DHT down) must not stop the rounds
            logger.warning("the report of a round failed (%s); training goes on", e)


async def _save_round(peer: Peer, outcome: RoundOutcome, record: _RoundRecord) -> str | None:
    """Checkpoint (round + 1), θ snapshot, known peers and our votes of the finished round; the snapshot's path.

    Without ``record.snapshot`` the deferred mixing writes the snapshot when it is done (:class:`_DeferredMix`).
    """
    config = peer.config
    if config.checkpoint_dir:
        await asyncio.to_thread(save_checkpoint, config.checkpoint_dir,
                                Checkpoint(config.run_id, outcome.round + 1, record.theta, record.momentum,
                                           {"ef_residual": record.ef_residual}, record.guard_state))
    # torch.save of 4·d bytes (seconds at d = 25M on a loaded machine): in a thread, so that we keep serving
    path = (await asyncio.to_thread(_write_snapshot, config.snapshot_dir, outcome.round, record.theta)
            if record.snapshot else _snapshot_path(config.snapshot_dir, outcome.round))
    if config.checkpoint_dir:
        await _remember_peers(peer, config.checkpoint_dir)
    if peer.votes is not None:
        await peer.votes.publish(outcome.round, outcome.verdicts)
    return path


KNOWN_PEERS_FILE = "known_peers.txt"
MAX_KNOWN_PEERS = 16


async def _remember_peers(peer: Peer, folder: str) -> None:
    """Write up to 16 multiaddrs of peers we are connected to (a restart can rejoin without the bootstrap)."""
    try:
        infos = await peer.p2p.list_peers()
    except Exception as e:  # noqa: BLE001 - the daemon's client raises many types; best effort only
        peer.log.debug("could not list connected peers: %s", e)
        return
    lines = [f"{info.addrs[0]}/p2p/{info.peer_id.to_base58()}" for info in infos if info.addrs][:MAX_KNOWN_PEERS]
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f".{KNOWN_PEERS_FILE}.tmp"
    with naming(path / KNOWN_PEERS_FILE):
        tmp.write_text("".join(f"{line}\n" for line in lines))
    os.replace(tmp, path / KNOWN_PEERS_FILE)


def _known_peers(folder: str | None, given: tuple[str, ...]) -> list[str]:
    """Multiaddrs remembered in our checkpoint folder (checked like --initial-peers), minus those given.

    A damaged file (bytes that are not UTF-8) gives its readable lines only: it is a hint, and stopping the peer
    on it (as a ``UnicodeDecodeError`` did) would keep it from restarting until the file is removed by hand.
    """
    if not folder:
        return []
    try:
        lines = (Path(folder) / KNOWN_PEERS_FILE).read_bytes().decode("utf-8", errors="replace").split()
    except OSError:
        return []
    from p2p_guard.swarm.addresses import check_initial_peers

    known = []
    for line in lines[:MAX_KNOWN_PEERS]:
        try:
            check_initial_peers([line])
        except ValueError:
            continue
        if line not in given:
            known.append(line)
    return known


def _snapshot_path(folder: str | None, round_: int) -> str | None:
    """``folder/rNNNNN.npy``, where round ``round_``'s θ snapshot goes (None without a folder).

    The name the simulation reads back (``simulation.snapshots.snapshot_path``); the swarm does not import the
    simulation package, so the rule is written on both sides.
    """
    return str(Path(folder) / f"r{round_:05d}.npy") if folder else None


def _write_snapshot(folder: str | None, round_: int, theta: torch.Tensor) -> str | None:
    """Write θ to ``folder/rNNNNN.npy`` atomically (for consensus-distance reports); return the path."""
    path = _snapshot_path(folder, round_)
    if path is None:
        return None
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp")
    with naming(final), open(tmp, "wb") as fh:
        np.save(fh, theta.numpy())
    os.replace(tmp, final)
    return str(final)


async def _sleep_unless_halted(halt: threading.Event, seconds: float, poll_s: float = 0.1) -> bool:
    """Sleep ``seconds``, or less once ``halt`` is set (looked at every ``poll_s``); True if it was.

    The slowdown of a slow-peer fault (``{"slowdown": 1000}``: 999 times the inner phase's compute time) was one
    ``asyncio.sleep``: Ctrl+C was answered "finishing cleanly" and the peer then slept on for minutes.
    """
    end = time.monotonic() + seconds
    while not halt.is_set():
        left = end - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(poll_s, left))
    return True


def _read_slowdown(path: str | None) -> float:
    """The ``slowdown`` factor in the control file (fault injection), 1.0 if absent or unreadable."""
    if not path:
        return 1.0
    try:
        value = json.loads(Path(path).read_text()).get("slowdown", 1.0)
    except (OSError, ValueError, AttributeError):
        return 1.0
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value >= 1.0 else 1.0


def _metric_text(metrics: Any) -> str:
    if metrics.accuracy is not None:
        return f"loss {metrics.loss:.3f} acc {metrics.accuracy:.3f}"
    return f"loss {metrics.loss:.3f} ppl {metrics.perplexity:.2f}"


def _emit_round(peer: Peer, events: EventLog, outcome: RoundOutcome, metrics: Any, seconds: float,
                bytes_sent: int, served: int, snapshot: str | None, phases: dict[str, float],
                state_hash: str, *, wire_bytes_received: int = 0) -> None:
    for verdict in outcome.verdicts:
        events.emit("verdict", round=outcome.round, **verdict.as_event())
    others = [v for v in outcome.verdicts if v.sender != peer.me]
    accepted = sum(1 for v in others if v.accepted)
    reasons = sorted({str(v.reason) for v in others if not v.accepted})
    events.emit("round", round=outcome.round, loss=metrics.loss, accuracy=metrics.accuracy,
                perplexity=metrics.perplexity, accepted=accepted, rejected=len(others) - accepted,
                seconds=seconds, compute_s=outcome.compute_s, bytes_sent=bytes_sent,
                bytes_received=outcome.bytes_received, wire_bytes_received=wire_bytes_received,
                fetched=outcome.fetched, served=served,
                mixed_from=outcome.mixed_from, applied=outcome.aggregate is not None,
                state_hash=state_hash, peers_seen=len(outcome.verdicts),
                train_loss=outcome.train_loss, snapshot=snapshot, phases=phases, overlapped=outcome.overlapped,
                late_applied=outcome.late_applied)
    if peer.metrics is not None:
        peer.metrics.observe_round(
            verdicts=outcome.verdicts, me=peer.me, applied=outcome.aggregate is not None, fetched=outcome.fetched,
            served=served, bytes_sent=bytes_sent, bytes_received=outcome.bytes_received,
            wire_bytes_received=wire_bytes_received, seconds=seconds,
            compute_s=outcome.compute_s, mix_distance=outcome.mix_distance, mixed_from=outcome.mixed_from,
            loss=finite_or_none(metrics.loss), accuracy=metrics.accuracy, late_applied=outcome.late_applied)
    with _lines_about(outcome.round):  # an overlapped round reports while the loop is at the next one
        peer.log.info("round %d: %s | fetched %d | accepted %d%s | rejected %d%s | compute %.1f of %.1f s%s",
                      outcome.round, _metric_text(metrics), outcome.fetched, accepted,
                      f" ({outcome.late_applied} late)" if outcome.late_applied else "", len(others) - accepted,
                      f" ({', '.join(reasons)})" if reasons else "", outcome.compute_s, seconds,
                      " | overlapped" if outcome.overlapped else "")


def _save_state(peer: Peer, config: PeerConfig, events: EventLog, completed: int) -> None:
    if config.state_out:
        # its missing folders are created, as the start-up check promises (preflight.check_output_file) and the event
        # file's are: torch.save raised "Parent directory ... does not exist" after the whole run, state lost
        Path(config.state_out).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"theta": peer.local.theta.clone(), "momentum": peer.local.momentum.clone(),
                    "state_hash": peer.local.state_hash().hex(), "round": peer.round}, config.state_out)
    events.emit("final", rounds_completed=completed, state_path=config.state_out,
                state_hash=peer.local.state_hash().hex())


def run_peer(config: PeerConfig, *, progress: bool = True) -> int:
    """Run a peer until its rounds are done or SIGINT/SIGTERM/SIGHUP (not under ``nohup``); return the exit code.

    Args:
        config: resolved settings.
        progress: show a progress bar on stderr.

    Returns:
        0 after the configured rounds or a requested stop, 1 on a local error (logged), among them a method of a
        user's ``MODULE:CLASS`` task that raised (one line naming the task, its class, the method and the error:
        ``tasks.guarded.TaskFailed``; the traceback at DEBUG), after the same clean shutdown as a stop.
    """
    reaper = start_reaper()
    code = asyncio.run(_run_with_signals(config, progress))
    stop_reaper_if_clean(reaper)  # on any other way out, the watchdog outlives us and kills what is left
    return code


def _stop_signals() -> tuple[signal.Signals, ...]:
    """SIGINT, SIGTERM and SIGHUP (a closed terminal, a dropped ssh session), unless SIGHUP is ignored (``nohup``).

    SIGHUP used to end the peer at once (exit 129, no leave record: the others waited for its presence to expire);
    one started under ``nohup`` keeps ignoring it, as ``nohup`` promises.
    """
    hangup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hangup)


async def _run_with_signals(config: PeerConfig, progress: bool) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = _stop_signals()
    for sig in signals:
        loop.add_signal_handler(sig, _request_stop, stop, sig)
    try:
        completed = await _main(config, progress, stop)
    except (TimeoutError, ValueError, OSError, P2PDaemonError, EarlierSessionCommit, ModelMismatch,
            AttackFailed) as e:
        logger.error("peer stopped: %s", e)
        return 1
    except TaskFailed as e:  # a user's task method raised: one line, its traceback at DEBUG
        debug = logger.isEnabledFor(logging.DEBUG)
        hint = "" if debug else (" (p2p-guard --log-level DEBUG peer ..., or simulate --peer-log-level DEBUG, "
                                 "logs its traceback)")
        logger.error("peer stopped: %s%s", e, hint)
        logger.debug("traceback of the task's failure", exc_info=e)
        return 1
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    logger.info("peer finished after %d round(s)", completed)
    return 0


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    """The first SIGINT/SIGTERM/SIGHUP stops the peer cleanly (``stop``); a second ends the process at once.

    The clean stop interrupts the inner phase at its next step boundary (``Peer.halt``), leaves the swarm (signed
    leave record) and shuts the DHT down, within seconds. A second signal does not wait for any of it: the
    process exits with status 130 (``os._exit``), and the watchdog (``swarm.reaper``) stops our ``p2pd``.
    """
    if not stop.is_set():
        logger.info("%s received: finishing cleanly (send again to force)", sig.name)
        stop.set()
    else:
        _force_exit(sig)


def _force_exit(sig: signal.Signals) -> None:
    """End the process now with status 130 after a second stop signal (log lines flushed first)."""
    logger.warning("%s received again: exiting now, without a leave record (the others drop us when our presence "
                   "expires, %.0f s)", sig.name, PRESENCE_TTL_S)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(130)
