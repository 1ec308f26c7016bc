"""Publishing this peer's signed verdicts of a round, and reading every other peer's.

Votes live under ``votes_key(run, round)`` (``p2p_guard/<run>/<round>/votes``), subkey = the voter's PeerID
(base58), value = a signed ``votes`` record (``protocol.votes``), TTL ``VOTES_TTL_S`` (600 s). The DHT
validator (``swarm.validator``) already refuses a votes record whose signer is not its subkey, or whose run or
round does not match its key; :func:`read_votes` checks all of it again, since a node that does not run our
validator can return anything.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from p2p_guard.identity import Identity, peer_id_from_b58, peer_id_to_b58
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.protocol.votes import (
    MAX_VOTE_REASON_BYTES,
    MAX_VOTES_SENDERS,
    Votes,
    VoteVerdict,
    open_votes,
    sign_votes,
)
from p2p_guard.swarm.dht import SwarmDHT
from p2p_guard.swarm.records import VOTES_TTL_S, votes_key
from p2p_guard.swarm.verdicts import SenderVerdict

__all__ = ["publish_votes", "read_votes", "vote_verdicts"]

logger = logging.getLogger(__name__)


def vote_verdicts(verdicts: Iterable[SenderVerdict], *, me: str | None = None) -> list[VoteVerdict]:
    """Turn a round's verdicts (``RoundOutcome.verdicts``) into this peer's votes.

    A sender that appears more than once gets one vote, a rejection if any of its verdicts is one (the first
    rejection's reason). Our own row (``me``) and senders that are not Ed25519 PeerIDs are left out; reasons are
    cut to :data:`MAX_VOTE_REASON_BYTES`; at most :data:`MAX_VOTES_SENDERS` votes are kept (sorted by PeerID).

    Args:
        verdicts: The verdicts of one round.
        me: Our PeerID (base58), left out.

    Returns:
        The votes, ready for :func:`publish_votes`.
    """
    chosen: dict[bytes, VoteVerdict] = {}
    for item in verdicts:
        if item.sender == me:
            continue
        sender = peer_id_from_b58(item.sender)
        if sender is None or peer_id_to_b58(sender) != item.sender:
            continue
        vote = VoteVerdict(sender=sender, accepted=item.accepted, reason=_cut(str(item.reason or "")))
        previous = chosen.get(sender)
        if previous is None or (previous.accepted and not vote.accepted):
            chosen[sender] = vote
    return [chosen[s] for s in sorted(chosen)][:MAX_VOTES_SENDERS]


async def publish_votes(dht: SwarmDHT, run_id: str, round_: int, verdicts: Iterable[VoteVerdict],
                        identity: Identity, ttl_s: float = VOTES_TTL_S) -> bool:
    """Sign this peer's verdicts of ``round_`` and store them under the round's votes key (subkey: us).

    Args:
        dht: The DHT to write.
        run_id: The run.
        round_: The round the verdicts were given in.
        verdicts: One verdict per judged sender (see :func:`vote_verdicts`).
        identity: Our key.
        ttl_s: Lifetime in seconds (at most the validator's cap, 660 s).

    Returns:
        True if at least one DHT node accepted the record.

    Raises:
        ValueError: A verdict is malformed (a local bug; see ``protocol.votes.sign_votes``).
    """
    record = sign_votes(run_id, round_, verdicts, identity)
    return await dht.store(votes_key(run_id, round_), identity.peer_id_b58, record, ttl_s)


async def read_votes(dht: SwarmDHT, run_id: str, round_: int) -> dict[str, Votes]:
    """Return ``{voter PeerID b58: Votes}`` for every valid votes record of ``round_``.

    A value is kept only if it opens (:func:`~p2p_guard.protocol.votes.open_votes`: signature, kind, run
    and round) and its signer is the PeerID of its subkey; anything else is dropped (logged at DEBUG).

    Args:
        dht: The DHT to read.
        run_id: The run.
        round_: The round.

    Returns:
        The verified votes by voter; feed ``{v: votes.as_map()}`` to ``Reputation.update``.
    """
    found: dict[str, Votes] = {}
    for subkey, raw in (await dht.read(votes_key(run_id, round_))).items():
        votes = open_votes(raw, run_id=run_id, round_=round_)
        if isinstance(votes, Rejected):
            logger.debug("votes under %s rejected: %s (%s)", subkey[:16], votes.reason.value, votes.detail)
        elif votes.voter_b58 != subkey:
            logger.debug("votes under %s signed by %s: impersonation", subkey[:16], votes.voter_b58[:16])
        else:
            found[subkey] = votes
    return found


def _cut(reason: str) -> str:
    """``reason`` cut to at most MAX_VOTE_REASON_BYTES of UTF-8 (never mid-character)."""
    data = reason.encode("utf-8", "replace")[:MAX_VOTE_REASON_BYTES]
    return data.decode("utf-8", "ignore")
