"""A read-only view of a swarm from its DHT records: who is present, what each one claims, bans and votes.

:func:`collect_status` reads the records of one run (``docs/protocol.md`` §4-§5) and opens every value with the
protocol's own openers, exactly as a peer does: presence and close records with
:func:`~p2p_guard.protocol.records.open_record`, commit envelopes with
:func:`~p2p_guard.protocol.envelope.open_envelope`, votes with :func:`~p2p_guard.protocol.votes.open_votes` and
proofs with :func:`~p2p_guard.protocol.proof.verify_proof`, shard claims with
:func:`~p2p_guard.swarm.shard_claims.open_shard_claims`. A value is kept only if it opens, is for this run
(and round, where the key names one) and is signed by the PeerID of its subkey (for a proof: accuses it);
everything else is counted in :attr:`SwarmStatus.skipped` and otherwise ignored. Nothing read is trusted: the
result is what the records *say* (self-reported rounds, claimed base hashes), never a judgement of a peer.

Which rounds are read: a presence round is self-reported, so a hostile peer can announce any round up to
2⁶³ − 1. The view is anchored at the swarm's round, the lower median of the presence rounds (a Byzantine minority
cannot move it, the rule of ``protocol.md`` §7.2), and reads the commit, close and votes keys of the rounds
``swarm_round + 1`` down to ``swarm_round − depth`` (at least 0).

Shard coverage (:attr:`SwarmStatus.shards`) is taken over the present peers' claims, for the number of shards most
of them claim (a claim names its own, and ``status`` has none): which shards they train, which several of them
share and which none trains. Claims are the peers' own word (``swarm.shard_claims``); peers of older versions
publish none.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from p2p_guard.identity import peer_id_to_b58
from p2p_guard.protocol.envelope import open_envelope
from p2p_guard.protocol.proof import verify_proof
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.protocol.records import open_record
from p2p_guard.protocol.votes import open_votes
from p2p_guard.swarm.records import close_key, commit_key, presence_key, proofs_key, shards_key, votes_key
from p2p_guard.swarm.shard_claims import Coverage, ShardClaim, coverage, open_shard_claims

__all__ = ["DEFAULT_DEPTH", "CloseClaim", "CommitClaim", "DHTReader", "PeerStatus", "ProofInfo", "SwarmStatus",
           "VoteCounts", "collect_status", "lower_median", "shard_coverage", "swarm_round"]

#: Rounds read below the swarm's round (the peers serve their last ``MAX_KEPT_ROUNDS`` = 3 rounds).
DEFAULT_DEPTH = 3
#: Hex digits of a hash shown in the table (the JSON has all 64).
SHORT_HASH_CHARS = 8


class DHTReader(Protocol):
    """What :func:`collect_status` needs of a DHT: ``read(key) -> {subkey: raw bytes}`` (``SwarmDHT.read``)."""

    async def read(self, key: str) -> dict[str, bytes]:
        """Every ``subkey -> bytes`` value under ``key``, unverified ({} if none or on failure)."""
        ...


@dataclass(frozen=True)
class CommitClaim:
    """What a peer's latest valid commit envelope claims (all of it self-reported).

    Attributes:
        round: the round it was committed into.
        base_round: the round of the state the update was computed on (≤ ``round``).
        base_hash: hex SHA-256 ``state_hash`` of that state, as claimed.
        codec: the payload codec named in the envelope (unparsed text).
        payload_bytes: the announced payload size, in bytes.
        n_samples: samples behind the update (informational).
    """

    round: int
    base_round: int
    base_hash: str
    codec: str
    payload_bytes: int
    n_samples: int


@dataclass(frozen=True)
class CloseClaim:
    """A peer's latest valid ``close`` record: its commit phase of ``round`` closed with ``commits`` commits."""

    round: int
    commits: int


@dataclass(frozen=True)
class VoteCounts:
    """A voter's latest valid votes record: how many senders of ``round`` it accepted and rejected."""

    round: int
    accepted: int
    rejected: int


@dataclass(frozen=True)
class ProofInfo:
    """A valid equivocation proof found under the run's ``proofs`` key (every honest peer bans the accused)."""

    accused: str
    round: int
    digest_a: str
    digest_b: str


@dataclass
class PeerStatus:
    """Everything the records say about one PeerID (base58). Fields are None where no valid record was found.

    Attributes:
        peer_id: the PeerID, base58.
        presence_round: the round of its live presence record (None: not present).
        commit: its latest commit envelope in the rounds read.
        close: its latest close record in the rounds read.
        votes: its latest votes record in the rounds read.
        banned: a valid equivocation proof accuses it.
        left: its latest presence value is its own signed leave record (it stopped cleanly).
        shard: its valid shard claim (the data shard it says it trains, of how many).
    """

    peer_id: str
    presence_round: int | None = None
    commit: CommitClaim | None = None
    close: CloseClaim | None = None
    votes: VoteCounts | None = None
    banned: bool = False
    left: bool = False
    shard: ShardClaim | None = None

    @property
    def short_id(self) -> str:
        """The last 8 characters of the PeerID (what peers' log lines show)."""
        return self.peer_id[-8:]


@dataclass
class SwarmStatus:
    """One snapshot of a run's records (:func:`collect_status`).

    Attributes:
        run_id: the run.
        swarm_round: lower median of the presence rounds (None: nobody present).
        rounds_read: the rounds whose commit, close and votes keys were read, ascending.
        peers: one entry per PeerID with any valid record, sorted by PeerID.
        proofs: valid equivocation proofs, sorted by accused PeerID.
        base_hash_claims: ``{round: {base_hash hex: senders}}`` over the latest commits: how many distinct
            starting states the peers claim (version 2 models differ a little; a claim, never a gate).
        skipped: ``{record kind: count}`` of values that did not open or were not signed by their subkey (a shard
            claim also: a shard out of its own range).
        shards: the present peers' shard coverage (:func:`shard_coverage`; None: no present peer claims a shard).
        shard_other: present peers whose claim is for another number of shards than ``shards.num_shards``.
    """

    run_id: str
    swarm_round: int | None
    rounds_read: list[int]
    peers: list[PeerStatus] = field(default_factory=list)
    proofs: list[ProofInfo] = field(default_factory=list)
    base_hash_claims: dict[int, dict[str, int]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    shards: Coverage | None = None
    shard_other: int = 0

    @property
    def present(self) -> list[PeerStatus]:
        """The peers with a live presence record."""
        return [p for p in self.peers if p.presence_round is not None]

    def to_json(self) -> dict[str, Any]:
        """The snapshot as plain JSON values (``p2p-guard status --json``); keys are stable for scripts."""
        return {
            "run_id": self.run_id,
            "swarm_round": self.swarm_round,
            "rounds_read": list(self.rounds_read),
            "present": len(self.present),
            "peers": [
                {"peer_id": p.peer_id, "short_id": p.short_id, "presence_round": p.presence_round,
                 "commit": None if p.commit is None else vars(p.commit).copy(),
                 "close": None if p.close is None else vars(p.close).copy(),
                 "votes": None if p.votes is None else vars(p.votes).copy(),
                 "banned": p.banned, "left": p.left, "shard": None if p.shard is None else vars(p.shard).copy()}
                for p in self.peers],
            "proofs": [vars(proof).copy() for proof in self.proofs],
            "base_hash_claims": {str(r): dict(claims) for r, claims in sorted(self.base_hash_claims.items())},
            "skipped": dict(sorted(self.skipped.items())),
            "shards": None if self.shards is None else {
                "num_shards": self.shards.num_shards,
                "claimed": {str(s): list(peers) for s, peers in self.shards.peers_by_shard.items()},
                "uncovered": list(self.shards.uncovered), "uncovered_count": self.shards.uncovered_count,
                "other_num_shards": self.shard_other},
        }


def lower_median(rounds: Collection[int]) -> int:
    """The lower median of some rounds (the swarm's round of ``protocol.md`` §7.2).

    A Byzantine minority cannot move it; peers, ``status`` and the catch-up all take it.

    Raises:
        ValueError: ``rounds`` is empty.
    """
    if not rounds:
        raise ValueError("lower_median needs at least one round")
    ordered = sorted(rounds)
    return ordered[(len(ordered) - 1) // 2]


def shard_coverage(claims: Mapping[str, ShardClaim]) -> tuple[Coverage | None, int]:
    """The coverage of some peers' shard claims, for the number of shards most of them claim (ties: the smallest).

    Args:
        claims: ``{PeerID: claim}``, e.g. of the present peers.

    Returns:
        (the :class:`~p2p_guard.swarm.shard_claims.Coverage`, or None when ``claims`` is empty; how many claims
        are for another number of shards and left out).
    """
    if not claims:
        return None, 0
    counts = Counter(c.num_shards for c in claims.values())
    num_shards = min(counts, key=lambda n: (-counts[n], n))
    kept = {p: c.shard for p, c in claims.items() if c.num_shards == num_shards}
    return coverage(kept, num_shards), len(claims) - len(kept)


def swarm_round(presence: Mapping[str, int]) -> int | None:
    """The lower median of the presence rounds (``protocol.md`` §7.2), None if there are none."""
    return lower_median(presence.values()) if presence else None


async def collect_status(dht: DHTReader, run_id: str, *, depth: int = DEFAULT_DEPTH) -> SwarmStatus:
    """Read and verify the records of ``run_id`` and return what they say.

    Args:
        dht: anything with ``async read(key) -> {subkey: bytes}`` (a started ``SwarmDHT``).
        run_id: the run whose keys are read.
        depth: rounds read below the swarm's round (>= 0); see the module docstring.

    Returns:
        The snapshot. Never raises on what the DHT returns: invalid values are counted in ``skipped``.

    Raises:
        ValueError: ``depth`` is negative.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0; got {depth}")
    skipped: Counter[str] = Counter()
    presence_raw, proofs_raw, shards_raw = await asyncio.gather(
        dht.read(presence_key(run_id)), dht.read(proofs_key(run_id)), dht.read(shards_key(run_id)))
    presence, left = _open_presence(presence_raw, run_id, skipped)
    anchor = swarm_round(presence)
    rounds = [] if anchor is None else list(range(max(0, anchor - depth), anchor + 2))
    reads = await asyncio.gather(*(dht.read(key(run_id, r)) for r in rounds
                                   for key in (commit_key, close_key, votes_key)))
    peers: dict[str, PeerStatus] = {}

    def entry(peer_id: str) -> PeerStatus:
        return peers.setdefault(peer_id, PeerStatus(peer_id))

    for peer_id, round_ in presence.items():
        entry(peer_id).presence_round = round_
    for peer_id in left:
        entry(peer_id).left = True
    shard_read = open_shard_claims(shards_raw, run_id)
    if shard_read.ignored:
        skipped["shards"] += len(shard_read.ignored)
    for peer_id, claim in shard_read.claims.items():
        entry(peer_id).shard = claim
    shards, shard_other = shard_coverage({p: c for p, c in shard_read.claims.items() if p in presence})
    for i, round_ in enumerate(rounds):  # ascending: a later round's record replaces an earlier one
        commits, closes, votes = reads[3 * i: 3 * i + 3]
        for peer_id, commit in _open_commits(commits, run_id, round_, skipped).items():
            entry(peer_id).commit = commit
        for peer_id, close in _open_closes(closes, run_id, round_, skipped).items():
            entry(peer_id).close = close
        for peer_id, counts in _open_votes(votes, run_id, round_, skipped).items():
            entry(peer_id).votes = counts
    proofs = _open_proofs(proofs_raw, run_id, skipped)
    for proof in proofs:
        entry(proof.accused).banned = True
    claims: dict[int, Counter[str]] = {}
    for p in peers.values():
        if p.commit is not None:
            claims.setdefault(p.commit.round, Counter())[p.commit.base_hash] += 1
    return SwarmStatus(
        run_id=run_id, swarm_round=anchor, rounds_read=rounds, peers=[peers[k] for k in sorted(peers)],
        proofs=sorted(proofs, key=lambda p: p.accused),
        base_hash_claims={r: dict(sorted(c.items())) for r, c in sorted(claims.items())},
        skipped=dict(skipped), shards=shards, shard_other=shard_other)


def _signer_is(sender: bytes, subkey: str) -> bool:
    try:
        return peer_id_to_b58(sender) == subkey
    except Exception:  # noqa: BLE001 - a hostile sender field must never crash the view
        return False


def _open_presence(raw: Mapping[str, bytes], run_id: str,
                   skipped: Counter[str]) -> tuple[dict[str, int], set[str]]:
    present: dict[str, int] = {}
    left: set[str] = set()
    for subkey, value in raw.items():
        # A peer's signed leave record replaces its presence on a clean stop: it is valid, just not present.
        record = open_record(value, kind=("presence", "leave"), run_id=run_id)
        if isinstance(record, Rejected) or not _signer_is(record.sender, subkey):
            skipped["presence"] += 1
        elif record.kind == "presence":
            present[subkey] = int(record.value)
        else:
            left.add(subkey)
    return present, left


def _open_commits(raw: Mapping[str, bytes], run_id: str, round_: int,
                  skipped: Counter[str]) -> dict[str, CommitClaim]:
    found: dict[str, CommitClaim] = {}
    for subkey, value in raw.items():
        env = open_envelope(value)
        if (isinstance(env, Rejected) or env.run_id != run_id or env.round != round_
                or not _signer_is(env.sender, subkey)):
            skipped["commit"] += 1
            continue
        base_round = env.round if env.base_round is None else int(env.base_round)
        found[subkey] = CommitClaim(round=env.round, base_round=base_round,
                                    base_hash=env.base_hash.hex(), codec=env.codec,
                                    payload_bytes=env.payload_bytes, n_samples=env.n_samples)
    return found


def _open_closes(raw: Mapping[str, bytes], run_id: str, round_: int,
                 skipped: Counter[str]) -> dict[str, CloseClaim]:
    found: dict[str, CloseClaim] = {}
    for subkey, value in raw.items():
        record = open_record(value, kind="close", run_id=run_id)
        if isinstance(record, Rejected) or record.round != round_ or not _signer_is(record.sender, subkey):
            skipped["close"] += 1
        else:
            found[subkey] = CloseClaim(round=round_, commits=int(record.value))
    return found


def _open_votes(raw: Mapping[str, bytes], run_id: str, round_: int,
                skipped: Counter[str]) -> dict[str, VoteCounts]:
    found: dict[str, VoteCounts] = {}
    for subkey, value in raw.items():
        votes = open_votes(value, run_id=run_id, round_=round_)
        if isinstance(votes, Rejected) or not _signer_is(votes.voter, subkey):
            skipped["votes"] += 1
            continue
        accepted = sum(1 for v in votes.verdicts if v.accepted)
        found[subkey] = VoteCounts(round=round_, accepted=accepted, rejected=len(votes.verdicts) - accepted)
    return found


def _open_proofs(raw: Mapping[str, bytes], run_id: str, skipped: Counter[str]) -> list[ProofInfo]:
    found: list[ProofInfo] = []
    for subkey, value in raw.items():
        proof = verify_proof(value)
        if isinstance(proof, Rejected) or proof.run_id != run_id or not _signer_is(proof.sender, subkey):
            skipped["proofs"] += 1
        else:
            found.append(ProofInfo(accused=subkey, round=proof.round, digest_a=proof.digest_a.hex(),
                                   digest_b=proof.digest_b.hex()))
    return found
