"""A volunteer peer from start to clean exit: join the DHT, run outer rounds, linger, shut down.

``run_peer`` is what ``p2p-guard peer`` calls. The peer:

1. starts a watchdog (``swarm.reaper``) so its DHT process and ``p2pd`` die with it even on SIGKILL;
2. starts a hivemind DHT node with its Ed25519 identity and serves payloads over P2P streams;
3. announces itself (signed presence record) and waits for ``min_peers``;
4. joins the swarm's current round (a late joiner listens for one round and adopts the majority state);
5. runs outer rounds (``Peer.run_round``) until ``rounds`` are done or it is stopped (SIGINT/SIGTERM);
6. keeps serving its last payload until the other peers have moved on, writes its state, and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from hivemind.p2p import P2P, P2PDaemonError
from tqdm import tqdm

from p2p_guard.attacks import load_attack
from p2p_guard.attacks.apply import attacked_update
from p2p_guard.attacks.base import AttackContext
from p2p_guard.attacks.wire import CommitDraft, seal
from p2p_guard.guard import build_guard
from p2p_guard.guard.apply import judge_rows
from p2p_guard.guard.integrity import RoundExpectation
from p2p_guard.identity import Identity, peer_id_to_b58
from p2p_guard.protocol import CODECS, PROTOCOL_VERSION, Envelope, Rejected, RejectReason, encode_update, \
    open_envelope, payload_digest, state_hash
from p2p_guard.protocol.proof import EquivocationDetector, EquivocationProof, verify_proof
from p2p_guard.protocol.records import sign_record
from p2p_guard.swarm.allowlist import filter_allowed, load_allowlist
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.dht import SwarmDHT, start_dht
from p2p_guard.swarm.events import EventLog
from p2p_guard.swarm.reaper import start_reaper, stop_reaper_if_clean
from p2p_guard.swarm.records import COMMIT_TTL_S, PRESENCE_TTL_S, commit_key, presence_key, publish_proof, \
    read_presence, read_proofs
from p2p_guard.swarm.rounds import IntegrityVerdict, await_commits, check_rows, fetch_state, late_commits, \
    majority_base, open_commits, reveal_after_close, revealed_payloads
from p2p_guard.swarm.slowloris import server_for, start_slow_client
from p2p_guard.swarm.standing import VoteBook
from p2p_guard.swarm.transport import PayloadServer
from p2p_guard.swarm.validator import RecordValidator
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, pick_device, round_generator

__all__ = ["Peer", "run_peer"]

logger = logging.getLogger(__name__)

PRESENCE_REFRESH_S = 3.0
#: An equivocating attacker stores its second envelope this long after the first (seconds).
EQUIVOCATION_DELAY_S = 1.0


class _PeerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Prefixes every line with the short PeerID and the current round."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.extra['peer']} r{self.extra['round']}] {msg}", kwargs


@dataclass
class RoundOutcome:
    """What one round produced, for the event stream and the progress line."""

    round: int
    rows: dict[str, torch.Tensor] = field(default_factory=dict)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    train_loss: float | None = None


class Peer:
    """One peer's round loop over a started DHT and P2P replica (built by :func:`run_peer`)."""

    def __init__(self, config: PeerConfig, identity: Identity, local: LocalModel, dht: SwarmDHT, p2p: P2P,
                 server: PayloadServer, events: EventLog, allowed: frozenset[str] | None = None) -> None:
        """Wire the parts together; nothing starts until :meth:`run`.

        ``allowed`` is the permissioned swarm's allow-list (our own PeerID included), None for an open swarm.
        """
        self.allowed = allowed
        self.config = config
        self.identity = identity
        self.me = identity.peer_id_b58
        self.local = local
        self.dht = dht
        self.p2p = p2p
        self.server = server
        self.events = events
        self.guard = build_guard(config.guard)
        self.attack = load_attack(config.attack) if config.attack else None
        self.round = 0
        self.known_previous: list[torch.Tensor] = []
        self.detector = EquivocationDetector()
        self.last_sealed: bytes | None = None
        self.banned: dict[str, EquivocationProof] = {}
        self.log = _PeerLog(logger, {"peer": self.me[-8:], "round": 0})
        self.inner_steps = config.inner_steps or local.task.default_hparams.inner_steps
        self.votes = _vote_book(config, identity, dht, self.attack, allowed) if config.reputation else None

    @property
    def attack_kind(self) -> str | None:
        """``update``, ``data``, ``wire`` or None for an honest peer."""
        return getattr(self.attack, "kind", None) if self.attack is not None else None

    def _generator(self, round_: int, salt: int) -> torch.Generator:
        return round_generator(self.config.run_id, self.config.seed, self.config.peer_index, round_, salt)

    async def announce(self, stop: asyncio.Event) -> None:
        """Refresh this peer's signed presence record every few seconds until ``stop``."""
        while not stop.is_set():
            record = sign_record("presence", self.config.run_id, self.round, self.round, self.identity)
            await self.dht.store(presence_key(self.config.run_id), self.me, record, PRESENCE_TTL_S)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), PRESENCE_REFRESH_S)

    async def wait_for_peers(self, stop: asyncio.Event) -> dict[str, int]:
        """Wait until ``min_peers`` (self included) are present; return them with their rounds.

        Raises:
            TimeoutError: if they are not all there within ``join_timeout_s``.
        """
        started = time.monotonic()
        shown = -1
        while not stop.is_set():
            present = filter_allowed(await read_presence(self.dht, self.config.run_id), self.allowed)
            present[self.me] = self.round
            if len(present) >= self.config.min_peers:
                return present
            if len(present) != shown:
                shown = len(present)
                self.log.info("waiting for peers: %d/%d present", shown, self.config.min_peers)
            if time.monotonic() - started > self.config.join_timeout_s:
                raise TimeoutError(f"only {len(present)} of min_peers={self.config.min_peers} peers joined within "
                                   f"{self.config.join_timeout_s:.0f} s; check --initial-peers")
            await asyncio.sleep(1.0)
        return {}

    async def run_round(self, round_: int, contribute: bool, stop: asyncio.Event) -> RoundOutcome:
        """Run outer round ``round_``: inner phase, commit, close, close gate, reveal, check, guard, outer step.

        Args:
            round_: the round number r; the model must hold θ_r.
            contribute: False for a peer that is (re)joining: it only listens and adopts the majority state.
            stop: set on shutdown.
        """
        self.round = round_
        self.log.extra["round"] = round_
        base = self.local.state_hash()
        self.server.publish_state(base, self.local.state_bytes())
        outcome = RoundOutcome(round_)
        own: dict[str, bytes] = {}
        if contribute:
            own = await self._commit(round_, base, outcome)
        commits, withheld = await await_commits(self.dht, self.config, round_, self.me if contribute else None,
                                                stop, on_poll=self._watch_commits, exclude=frozenset(self.banned),
                                                allowed=self.allowed)
        await self._collect_proofs(round_)
        outcome.verdicts += [{"sender": s, "accepted": False, "reason": RejectReason.EQUIVOCATION.value,
                              "detail": "banned: equivocation proof"} for s in commits if s in self.banned]
        excluded = await self._fold_votes(round_)
        outcome.verdicts += [{"sender": s, "accepted": False, "reason": RejectReason.EXCLUDED.value,
                              "detail": "excluded by our reputation"} for s in sorted(commits) if s in excluded]
        commits = {s: raw for s, raw in commits.items() if s not in self.banned and s not in excluded}
        if contribute:
            sealed, serve = own.pop("sealed"), own.pop("serve")
            await reveal_after_close(self.dht, self.server, self.identity, self.config, round_, commits, serve, stop)
            commits[self.me] = sealed
            own = {self.me: serve}
            if getattr(self.attack, "trickles_payload", False):  # slowloris: honest peers cut its payload, so it
                del commits[self.me]  # leaves its own row out too and stays on their base (valid commits next round)
                own = {}
        # A present peer that withheld its commit may commit the moment it fetches a revealed payload (a copycat):
        # give such a commit grace_s to land before the one re-read, so that it is reported.
        watch_s = self.config.grace_s if withheld - {self.me} - set(self.banned) else 0.0
        not_before = time.monotonic() + watch_s
        envelopes, rejected = open_commits(commits, self.config)
        base = await self._agree_on_base(envelopes, round_, base)
        expect = RoundExpectation(run_id=self.config.run_id, round=round_, base_hash=base,
                                  shapes=self.local.shapes, codecs=CODECS,
                                  max_payload_bytes=self.config.max_payload_bytes)
        rows, more = await check_rows(self.p2p, envelopes, expect, self.config, own, stop)
        late = await late_commits(self.dht, self.config, round_, commits, not_before=not_before, stop=stop,
                                  exclude=frozenset(self.banned) | excluded, allowed=self.allowed)
        outcome.rows = rows
        if stop.is_set():
            return outcome  # a partial round is never applied
        self._aggregate_and_step(rows, rejected + more + late, outcome)
        if self.votes is not None and contribute:
            await self.votes.publish(round_, outcome.verdicts)
        return outcome

    async def _fold_votes(self, round_: int) -> frozenset[str]:
        """Fold last round's votes into the reputation; return the senders to drop before aggregation."""
        if self.votes is None:
            return frozenset()
        update = await self.votes.fold(round_ - 1, ignore=frozenset(self.banned)) if round_ > 0 else None
        enforced = self.config.reputation_exclusion
        if update is not None:
            for sender in update.newly_excluded:
                st = update.standings[sender]
                self.log.log(logging.WARNING if enforced else logging.INFO,
                             "%s %s: reputation %.2f, %d of our last %d verdicts rejected it",
                             "excluding from now on" if enforced else "reputation would exclude (exclusion off)",
                             sender[-8:], st.score, st.own_rejections, self.votes.reputation.window)
                self.events.emit("exclude" if enforced else "exclude_candidate", sender=sender, round=round_,
                                 score=st.score, own_rejections=st.own_rejections)
            for sender in update.readmitted:
                self.log.info("readmitting %s for a fresh trial", sender[-8:])
                self.events.emit("readmit", sender=sender, round=round_)
            self.events.emit("standing", round=round_ - 1,
                             scores={s: round(st.score, 4) for s, st in update.standings.items()},
                             excluded=sorted(update.excluded), enforced=enforced)
        return self.votes.excluded if enforced else frozenset()

    async def _commit(self, round_: int, base: bytes, outcome: RoundOutcome) -> dict[str, bytes]:
        data_attack = self.attack if self.attack_kind == "data" else None
        delta, outcome.train_loss = await asyncio.to_thread(
            self.local.train_round, self.inner_steps, self._generator(round_, 1), data_attack)
        update = self._attacked(delta, round_)
        payload = encode_update(update, self.config.codec)
        envelope = Envelope(protocol_version=PROTOCOL_VERSION, run_id=self.config.run_id, round=round_,
                            sender=self.identity.peer_id, base_hash=base, digest=payload_digest(payload),
                            codec=self.config.codec, shapes=self.local.shapes, n_samples=self.local.shard.num_samples,
                            payload_bytes=len(payload))
        draft = CommitDraft(envelope=envelope, digest_payload=payload, serve_payload=payload)
        if self.attack_kind == "wire":
            draft = self.attack.mutate(draft, self._generator(round_, 2))  # type: ignore[union-attr]
        if hasattr(self.attack, "copy_commit"):  # copycat: withhold the commit until someone reveals, copy it
            poll = partial(revealed_payloads, self.p2p, self.dht, self.config, round_, self.me)
            draft = await self.attack.copy_commit(draft, poll, timeout_s=self.config.commit_timeout_s)
        sealed = seal(draft, self.identity)
        if getattr(self.attack, "replays_previous", False):  # replay: last round's envelope, byte for byte
            sealed, self.last_sealed = (self.last_sealed or sealed), sealed
        await self.dht.store(commit_key(self.config.run_id, round_), self.me, sealed, COMMIT_TTL_S)
        self.log.debug("committed %d-byte envelope", len(sealed))
        if hasattr(self.attack, "second_commit"):  # equivocation: a conflicting envelope, stored later
            await asyncio.sleep(EQUIVOCATION_DELAY_S)
            draft = self.attack.second_commit(draft, self._generator(round_, 2))  # type: ignore[union-attr]
            sealed = seal(draft, self.identity)
            await self.dht.store(commit_key(self.config.run_id, round_), self.me, sealed, COMMIT_TTL_S + 1)
        return {"sealed": sealed, "serve": draft.serve_payload}

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

    async def _agree_on_base(self, envelopes: dict[str, Envelope], round_: int, base: bytes) -> bytes:
        majority = majority_base(envelopes, self.config.run_id, round_)
        if majority is None or majority == base:
            return base
        senders = [env.sender for env in envelopes.values() if env.base_hash == majority]
        self.log.warning("our state differs from the majority of %d signers: downloading it", len(senders))
        data = await fetch_state(self.p2p, senders, self.config.run_id, majority, self.local.numel,
                                 self.config.fetch_timeout_s, _state_bytes_hash,
                                 idle_timeout_s=self.config.fetch_idle_timeout_s,
                                 min_bytes_per_s=self.config.min_fetch_bytes_per_s)
        if data is None:
            self.log.warning("could not download the majority state; keeping ours")
            return base
        self.local.load_state_bytes(data)
        self.server.publish_state(majority, data)
        return majority

    def _aggregate_and_step(self, rows: dict[str, torch.Tensor], rejected: list[IntegrityVerdict],
                            outcome: RoundOutcome) -> None:
        for v in rejected:
            if v.reason is not None:
                outcome.verdicts.append({"sender": v.sender, "accepted": False, "reason": v.reason.value,
                                         "detail": v.detail})
                if v.sender != self.me:
                    self.log.warning("rejected %s: %s (%s)", v.sender[-8:], v.reason.value, v.detail)
        if not rows:
            self.log.warning("no update passed integrity; the model is unchanged this round")
            return
        result = judge_rows(self.guard, rows, me=self.me, round_=outcome.round,
                            previous_aggregate=self.local.previous_aggregate, f=self.config.assumed_byzantine,
                            generator=self._generator(outcome.round, 4))
        for verdict in result.verdicts:
            outcome.verdicts.append({"sender": verdict.sender, "accepted": verdict.accepted,
                                     "reason": verdict.reason, "detail": verdict.detail,
                                     "norm": _finite_or_none(verdict.norm),
                                     "cosine": _finite_or_none(verdict.cosine)})
            if not verdict.accepted and verdict.sender != self.me:
                self.log.warning("rejected %s: %s (%s)", verdict.sender[-8:], verdict.reason, verdict.detail)
        self.local.apply(result.aggregate)
        self.known_previous = [rows[s] for s in sorted(rows) if s != self.me]


def _vote_book(config: PeerConfig, identity: Identity, dht: SwarmDHT, attack: Any,
               allowed: frozenset[str] | None) -> VoteBook:
    """Our :class:`VoteBook`; a ``vote_smear`` attacker publishes its smear (colluders: itself only)."""
    smear = getattr(attack, "smear_votes", None)
    colluders = frozenset({identity.peer_id_b58})
    return VoteBook(dht, config.run_id, identity, allowed=allowed,
                    smear=None if smear is None else (lambda votes: smear(votes, colluders)))


def _log_task_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("background task failed", exc_info=task.exception())


def _finite_or_none(x: float) -> float | None:
    return float(x) if x == x and abs(x) != float("inf") else None


def _state_bytes_hash(data: bytes) -> bytes:
    flat = torch.frombuffer(bytearray(data), dtype=torch.float32)
    return state_hash(*flat.split(flat.numel() // 3))


async def _linger(peer: Peer, last_round: int, stop: asyncio.Event) -> None:
    """Keep serving our last payload until every peer of the last round has moved past it (bounded)."""
    deadline = time.monotonic() + peer.config.fetch_timeout_s
    committers = set(filter_allowed(await peer.dht.read(commit_key(peer.config.run_id, last_round)), peer.allowed))
    while not stop.is_set() and time.monotonic() < deadline:
        present = filter_allowed(await read_presence(peer.dht, peer.config.run_id), peer.allowed)
        waiting = [p for p in committers if p != peer.me and present.get(p, last_round + 1) <= last_round]
        if not waiting:
            return
        await asyncio.sleep(0.5)


async def _main(config: PeerConfig, progress: bool, stop: asyncio.Event) -> int:
    identity = Identity.load_or_create(config.identity)
    task = load_task(config.task)
    local = LocalModel(task, seed=config.seed, num_shards=config.num_peers, shard_index=config.peer_index,
                       partition=config.partition, outer_lr=config.outer_lr, outer_momentum=config.outer_momentum,
                       device=pick_device(config.device))
    events = EventLog(config.events)
    dht = await start_dht(identity_path=str(config.identity), initial_peers=config.initial_peers,
                          host=config.host, port=config.port, announce_host=config.announce_host,
                          record_validators=[RecordValidator([config.run_id])])
    announcer: asyncio.Task[None] | None = None
    slow_client: asyncio.Task[Any] | None = None
    try:
        p2p = dht.p2p
        allowed = None if config.allow_peers is None else load_allowlist(config.allow_peers) | {identity.peer_id_b58}
        attack = load_attack(config.attack) if config.attack else None
        server = server_for(config, allowed, attack)  # a slowloris attacker's server trickles its answers
        await server.attach(p2p)
        peer = Peer(config, identity, local, dht, p2p, server, events, allowed)
        maddrs = await dht.visible_maddrs()
        logger.info("peer %s up on %s (device %s, %d parameters)", identity.peer_id_b58, ", ".join(maddrs),
                    local.device, local.numel)
        events.emit("ready", peer_id=identity.peer_id_b58, byzantine=config.attack is not None,
                    attack=config.attack, maddrs=maddrs, numel=local.numel)
        announcer = asyncio.create_task(peer.announce(stop))
        announcer.add_done_callback(_log_task_failure)
        slow_client = start_slow_client(attack, p2p, peer.dht, config, peer.me, stop)  # slowloris attackers only
        return await _round_loop(peer, config, progress, stop, events)
    finally:
        stop.set()
        for background in (announcer, slow_client):
            if background is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(background, 5.0)
        await dht.shutdown()
        events.close()


async def _round_loop(peer: Peer, config: PeerConfig, progress: bool, stop: asyncio.Event,
                      events: EventLog) -> int:
    present = await peer.wait_for_peers(stop)
    # Presence rounds are self-reported: take the median, so a Byzantine minority cannot move a joiner.
    others = sorted(r for p, r in present.items() if p != peer.me)
    start = others[(len(others) - 1) // 2] if others else 0
    contribute = start == 0
    if not contribute:
        peer.log.info("the swarm is at round %d: listening for one round to catch up", start)
    last = config.rounds if config.rounds > 0 else None
    bar = tqdm(total=last, initial=0, disable=not progress, unit="round", dynamic_ncols=True)
    round_ = start
    completed = 0
    with bar:
        while not stop.is_set() and (last is None or round_ < last):
            started = time.monotonic()
            sent_before = peer.server.bytes_sent
            outcome = await peer.run_round(round_, contribute, stop)
            if stop.is_set():
                break
            metrics = await asyncio.to_thread(peer.local.evaluate)
            _emit_round(peer, events, outcome, metrics, time.monotonic() - started,
                        peer.server.bytes_sent - sent_before)
            bar.update(1)
            bar.set_postfix_str(_metric_text(metrics))
            completed += 1
            round_ += 1
            contribute = True
    peer.round = round_
    if not stop.is_set():
        record = sign_record("presence", config.run_id, round_, round_, peer.identity)
        await peer.dht.store(presence_key(config.run_id), peer.me, record, PRESENCE_TTL_S)
        await _linger(peer, round_ - 1, stop)
    _save_state(peer, config, events, completed)
    return completed


def _metric_text(metrics: Any) -> str:
    if metrics.accuracy is not None:
        return f"loss {metrics.loss:.3f} acc {metrics.accuracy:.3f}"
    return f"loss {metrics.loss:.3f} ppl {metrics.perplexity:.2f}"


def _emit_round(peer: Peer, events: EventLog, outcome: RoundOutcome, metrics: Any, seconds: float,
                bytes_sent: int) -> None:
    for verdict in outcome.verdicts:
        events.emit("verdict", round=outcome.round, **verdict)
    others = [v for v in outcome.verdicts if v["sender"] != peer.me]
    accepted = sum(1 for v in others if v["accepted"])
    reasons = sorted({str(v["reason"]) for v in others if not v["accepted"]})
    events.emit("round", round=outcome.round, loss=metrics.loss, accuracy=metrics.accuracy,
                perplexity=metrics.perplexity, accepted=accepted, rejected=len(others) - accepted,
                seconds=seconds, bytes_sent=bytes_sent, state_hash=peer.local.state_hash().hex(),
                peers_seen=len(outcome.verdicts), train_loss=outcome.train_loss)
    peer.log.info("%s | peers %d | accepted %d | rejected %d%s | %.1f s", _metric_text(metrics),
                  len(outcome.verdicts), accepted, len(others) - accepted,
                  f" ({', '.join(reasons)})" if reasons else "", seconds)


def _save_state(peer: Peer, config: PeerConfig, events: EventLog, completed: int) -> None:
    if config.state_out:
        torch.save({"theta": peer.local.theta.clone(), "momentum": peer.local.momentum.clone(),
                    "state_hash": peer.local.state_hash().hex(), "round": peer.round}, config.state_out)
    events.emit("final", rounds_completed=completed, state_path=config.state_out,
                state_hash=peer.local.state_hash().hex())


def run_peer(config: PeerConfig, *, progress: bool = True) -> int:
    """Run a peer until its rounds are done or SIGINT/SIGTERM; return the process exit code.

    Args:
        config: resolved settings.
        progress: show a progress bar on stderr.

    Returns:
        0 after the configured rounds or a requested stop, 1 on a local error (logged).
    """
    reaper = start_reaper()
    code = asyncio.run(_run_with_signals(config, progress))
    stop_reaper_if_clean(reaper)  # on any other way out, the watchdog outlives us and kills what is left
    return code


async def _run_with_signals(config: PeerConfig, progress: bool) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _request_stop, stop, sig)
    try:
        completed = await _main(config, progress, stop)
    except (TimeoutError, ValueError, OSError, P2PDaemonError) as e:
        logger.error("peer stopped: %s", e)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    logger.info("peer finished after %d round(s)", completed)
    return 0


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    if not stop.is_set():
        logger.info("%s received: finishing cleanly (send again to force)", sig.name)
        stop.set()
    else:
        raise KeyboardInterrupt
