"""DHT keys and subkeys of a run, and reading the signed records stored under them.

| key                               | subkey            | value                                   | TTL   |
|-----------------------------------|-------------------|-----------------------------------------|-------|
| ``p2p_guard/<run>/presence``      | sender PeerID b58 | signed ``presence`` record (its round), or | 30 s  |
|                                   |                   | its signed ``leave`` record once it left |       |
| ``p2p_guard/<run>/<round>/commit``| sender PeerID b58 | signed envelope (``protocol.envelope``) | 10 min|
| ``p2p_guard/<run>/<round>/close`` | sender PeerID b58 | signed ``close`` record (its commit count) | 10 min|
| ``p2p_guard/<run>/<round>/votes`` | voter PeerID b58  | signed ``votes`` record (its verdicts)  | 10 min|
| ``p2p_guard/<run>/proofs``        | ACCUSED PeerID b58| equivocation proof (``protocol.proof``) | 10 min|
| ``p2p_guard/<run>/shards``        | sender PeerID b58 | signed ``shard`` record (its data shard)| 3 min |

A subkey is only a claim: every value is verified against the key inside the PeerID it names, and a value
signed by a different key than its subkey names is rejected as impersonation. Under ``proofs`` the subkey
names the accused, whose two signatures are inside the proof, so anyone may publish it and nobody can forge
it. DHT nodes enforce the same rules on store (``swarm.validator.RecordValidator``); readers check again.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import hivemind.utils

from p2p_guard.identity import Identity, peer_id_to_b58
from p2p_guard.protocol.proof import EquivocationProof, verify_proof
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.protocol.records import SignedRecord, open_record, sign_record
from p2p_guard.swarm.dht import SwarmDHT

__all__ = ["CLOSE_TTL_S", "COMMIT_TTL_S", "KEY_PREFIX", "LEAVE_VALID_S", "PRESENCE_TTL_S", "PROOF_TTL_S",
           "SHARD_TTL_S", "VOTES_TTL_S", "Roster", "close_key", "commit_key", "presence_key", "proofs_key",
           "publish_close", "presence_stored_at", "publish_leave", "publish_proof", "read_closes", "read_presence",
           "read_proofs", "read_roster", "shards_key", "votes_key"]

logger = logging.getLogger(__name__)

#: Every key of ours starts with this (the DHT only ever sees the SHA-1 of the whole key).
KEY_PREFIX = "p2p_guard/"
#: Presence lives 30 s, refreshed every 5 s (``swarm.peer.PRESENCE_REFRESH_S``): under load a refresh can take
#: seconds, and with 12 s a 32-peer simulation on two cores never saw more than 22 of its peers at once.
PRESENCE_TTL_S = 30.0
COMMIT_TTL_S = 600.0
CLOSE_TTL_S = 600.0
VOTES_TTL_S = 600.0
#: A proof expires like any record; every honest peer that holds one republishes it each round.
PROOF_TTL_S = 600.0
#: A shard claim lives 3 min, refreshed every minute (``swarm.shard_claims.SHARD_REFRESH_S``); readers count it
#: only while its sender is present, so it need not expire with the peer.
SHARD_TTL_S = 180.0
#: A leave record counts only while its signed leave time is within this many seconds of our DHT time (the
#: validators' cap on a presence-key value's lifetime): an old one replayed later is ignored.
LEAVE_VALID_S = 60.0


def commit_key(run_id: str, round_: int) -> str:
    """DHT key under which the signed envelopes of ``round_`` are committed."""
    return f"p2p_guard/{run_id}/{round_}/commit"


def close_key(run_id: str, round_: int) -> str:
    """DHT key under which each peer announces that its commit phase of ``round_`` has closed."""
    return f"p2p_guard/{run_id}/{round_}/close"


def presence_key(run_id: str) -> str:
    """DHT key under which peers announce that they are alive, and at which round."""
    return f"p2p_guard/{run_id}/presence"


def votes_key(run_id: str, round_: int) -> str:
    """DHT key under which each peer publishes its signed verdicts of ``round_`` (subkey: the voter)."""
    return f"p2p_guard/{run_id}/{round_}/votes"


def proofs_key(run_id: str) -> str:
    """DHT key under which equivocation proofs of the run are published (subkey: the ACCUSED PeerID)."""
    return f"p2p_guard/{run_id}/proofs"


def shards_key(run_id: str) -> str:
    """DHT key under which each peer states the data shard it trains (subkey: its PeerID; ``swarm.shard_claims``)."""
    return f"p2p_guard/{run_id}/shards"


async def publish_proof(dht: SwarmDHT, run_id: str, proof: EquivocationProof,
                        ttl_s: float = PROOF_TTL_S) -> bool:
    """Store a verified proof under the run's ``proofs`` key, subkey = the accused PeerID (base58).

    Args:
        dht: the DHT to write.
        run_id: the run (must be ``proof.run_id``).
        proof: a proof from :func:`~p2p_guard.protocol.proof.verify_proof` or an ``EquivocationDetector``.
        ttl_s: lifetime in seconds (at most the validators' cap for ``proofs``).

    Returns:
        True if at least one DHT node accepted it.

    Raises:
        ValueError: the proof is for another run (a local bug).
    """
    if proof.run_id != run_id:
        raise ValueError(f"proof is for run {proof.run_id!r}, not {run_id!r}")
    return await dht.store(proofs_key(run_id), proof.sender_b58, proof.to_bytes(), ttl_s)


async def read_proofs(dht: SwarmDHT, run_id: str) -> dict[str, EquivocationProof]:
    """Return ``{accused PeerID b58: proof}`` for every valid proof of this run found under ``proofs``.

    A value is kept only if it verifies (:func:`~p2p_guard.protocol.proof.verify_proof`), is for ``run_id``,
    and accuses exactly the PeerID of its subkey.

    Args:
        dht: the DHT to read.
        run_id: the run.

    Returns:
        The accused peers with their proofs (each is enough to ban that peer).
    """
    proofs: dict[str, EquivocationProof] = {}
    for subkey, raw in (await dht.read(proofs_key(run_id))).items():
        proof = verify_proof(raw)
        if isinstance(proof, Rejected):
            logger.debug("proof under %s rejected: %s", subkey[:16], proof.detail)
        elif proof.run_id == run_id and proof.sender_b58 == subkey:
            proofs[subkey] = proof
    return proofs


async def publish_close(dht: SwarmDHT, identity: Identity, run_id: str, round_: int, commits: int,
                        ttl_s: float = CLOSE_TTL_S) -> bool:
    """Store our signed ``close`` record of ``round_`` (subkey = our PeerID): our commit phase has closed.

    Args:
        dht: the DHT to write.
        identity: our key.
        run_id: the run.
        round_: the round whose commit phase closed.
        commits: how many commits our closed set holds, ours included (informational, >= 0).
        ttl_s: lifetime in seconds.

    Returns:
        True if at least one DHT node accepted it.
    """
    record = sign_record("close", run_id, round_, commits, identity)
    return await dht.store(close_key(run_id, round_), identity.peer_id_b58, record, ttl_s)


async def read_closes(dht: SwarmDHT, run_id: str, round_: int) -> set[str]:
    """Return the PeerIDs (base58) with a valid ``close`` record for ``round_``.

    A record counts only if it opens as a ``close`` record of ``run_id`` (signature included), names
    ``round_``, and is signed by the PeerID of its subkey.

    Args:
        dht: the DHT to read.
        run_id: the run.
        round_: the round.

    Returns:
        The senders whose commit phase of ``round_`` has closed, by their own signed word.
    """
    closed: set[str] = set()
    for subkey, raw in (await dht.read(close_key(run_id, round_))).items():
        record = open_record(raw, kind="close", run_id=run_id)
        if isinstance(record, Rejected):
            logger.debug("close record under %s rejected: %s", subkey[:16], record.detail)
        elif record.round == round_ and _owner_matches(record, subkey):
            closed.add(subkey)
    return closed


class Roster(NamedTuple):
    """What the presence key says: who is present (with its self-reported round) and who has left.

    Attributes:
        present: ``{PeerID b58: round}`` of every validly signed presence record.
        left: PeerIDs whose latest value is their own signed ``leave`` record, left at most
            :data:`LEAVE_VALID_S` ago.
    """

    present: dict[str, int]
    left: frozenset[str]


async def publish_leave(dht: SwarmDHT, identity: Identity, run_id: str, round_: int,
                        ttl_s: float = PRESENCE_TTL_S) -> bool:
    """Store our signed ``leave`` record under the presence key (subkey = our PeerID): we have left the swarm.

    It replaces our presence record (the DHT keeps the value with the later expiration under a subkey, and
    this one expires ``ttl_s`` from now, after every presence record we stored before it), so every reader
    stops counting us at its next read, instead of up to :data:`PRESENCE_TTL_S` later. Only our key can sign
    it: nobody can make another peer leave.

    Args:
        dht: the DHT to write.
        identity: our key.
        run_id: the run.
        round_: the round we were in (informational).
        ttl_s: lifetime in seconds (at most the validators' cap for the presence key, 60 s).

    Returns:
        True if at least one DHT node accepted it.
    """
    record = sign_record("leave", run_id, round_, int(hivemind.utils.get_dht_time()), identity)
    return await dht.store(presence_key(run_id), identity.peer_id_b58, record, ttl_s)


async def read_roster(dht: SwarmDHT, run_id: str) -> Roster:
    """Read the presence key once: the present peers and those that announced their leave.

    A value counts only if it opens as a ``presence`` or ``leave`` record of ``run_id`` (signature included)
    signed by the PeerID of its subkey; a leave record only if its signed leave time is within
    :data:`LEAVE_VALID_S` of our DHT time (older: the peer is neither present nor known to have left).

    Args:
        dht: the DHT to read.
        run_id: the run.

    Returns:
        The :class:`Roster`.
    """
    present: dict[str, int] = {}
    left: set[str] = set()
    now = hivemind.utils.get_dht_time()
    for subkey, raw in (await dht.read(presence_key(run_id))).items():
        record = open_record(raw, kind=("presence", "leave"), run_id=run_id)
        if isinstance(record, Rejected):
            logger.debug("presence record under %s rejected: %s", subkey[:16], record.detail)
            continue
        if not _owner_matches(record, subkey):
            continue
        if record.kind == "presence":
            present[subkey] = int(record.value)
        elif abs(now - int(record.value)) <= LEAVE_VALID_S:
            left.add(subkey)
    return Roster(present, frozenset(left))


async def presence_stored_at(dht: SwarmDHT, run_id: str) -> dict[str, float]:
    """When each value under the presence key was last stored, in DHT time (seconds).

    That is its expiration less :data:`PRESENCE_TTL_S`. A live peer stores its presence every few seconds, so
    this moves on while it lives and stops when it is killed or frozen. The time is the storer's own claim
    (unsigned, and a replayed record can carry a new one): it may only ever shorten a suspicion
    (``swarm.suspects``), never count as evidence.

    Args:
        dht: the DHT to read.
        run_id: the run.

    Returns:
        ``{subkey: DHT time of the last store}``, unverified (the records themselves are checked by
        :func:`read_roster`).
    """
    return {subkey: expiration - PRESENCE_TTL_S
            for subkey, expiration in (await dht.read_expirations(presence_key(run_id))).items()}


async def read_presence(dht: SwarmDHT, run_id: str) -> dict[str, int]:
    """Return ``{PeerID b58: round}`` for every validly signed, unexpired presence record.

    A peer whose value is its ``leave`` record is not present (:func:`read_roster`).

    Args:
        dht: the DHT to read.
        run_id: the run.

    Returns:
        The present peers and the round each says it is in (self-reported: a hint, never trusted).
    """
    return (await read_roster(dht, run_id)).present


def _owner_matches(record: SignedRecord, subkey: str) -> bool:
    return peer_id_to_b58(record.sender) == subkey
