"""Votes and reputation in the round loop: publish our verdicts, fold in everyone's, exclude persistent offenders.

Each round r a peer publishes its signed verdicts of r (``swarm.votes``). During round r + 1, once its commit
phase has closed (every honest peer has published its votes of r long before), it reads the votes of r and
folds them, with its own verdicts of r, into its :class:`~p2p_guard.guard.reputation.Reputation`. A sender
the reputation excludes is dropped before aggregation in round r + 1 and later rounds (verdict ``excluded``),
until the reputation readmits it.

Why the one-round lag: votes of round r are complete only after every peer has aggregated r; reading them at
the end of r would see a different subset on different peers. Read during r + 1 they are, as far as the DHT
delivers them, the same set for every honest peer. Each peer owns its model (protocol version 2), so an
exclusion is one peer's own decision: it never needs the others to agree, and honest peers that decide a round
apart do not fork anything.

Votes never exclude anyone on their own (``guard.reputation``: exclusion needs our own rejections), so a
Byzantine majority of voters cannot make an honest peer drop an honest sender.

An accepted row longer than 2.3 times the round's median norm (``guard.reputation.edge_rows``) is published as
accepted with reason ``edge`` (``protocol.votes.EDGE_REASON``) and counts, in our reputation and in every
reader's, as a strike: aggregated, but at the edge of what the guard lets through.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable
from typing import Any

from p2p_guard.guard.reputation import Reputation, ReputationUpdate, edge_rows
from p2p_guard.identity import Identity
from p2p_guard.protocol.votes import EDGE_REASON, VoteVerdict, judged_map
from p2p_guard.swarm.allowlist import filter_allowed
from p2p_guard.swarm.dht import SwarmDHT
from p2p_guard.swarm.verdicts import SenderVerdict
from p2p_guard.swarm.votes import publish_votes, read_votes, vote_verdicts

__all__ = ["VoteBook"]

logger = logging.getLogger(__name__)


class VoteBook:
    """One peer's votes and reputation across rounds.

    Args:
        dht: The DHT to publish and read votes in.
        run_id: The run.
        identity: Our key (votes are signed with it).
        reputation: The reputation to feed (None: a default ``Reputation(me=our PeerID)``).
        smear: Optional ``(verdicts) -> verdicts`` rewriting what we *publish* (the ``vote_smear`` attack);
            our own reputation always uses our true verdicts.
        allowed: The permissioned swarm's allow-list (None: open); votes of others are ignored.
    """

    def __init__(self, dht: SwarmDHT, run_id: str, identity: Identity, reputation: Reputation | None = None,
                 smear: Any = None, allowed: frozenset[str] | None = None) -> None:
        self.dht = dht
        self.run_id = run_id
        self.identity = identity
        self.me = identity.peer_id_b58
        self.reputation = reputation if reputation is not None else Reputation(me=self.me)
        self.smear = smear
        self.allowed = allowed
        self._own: dict[int, tuple[dict[str, bool], frozenset[str]]] = {}
        #: Voters whose signed votes of the last folded round rejected our own update, for any reason (our row
        #: missing from their aggregates: ``swarm.mix_schedule`` mixes then). Byzantine voters can raise it.
        self.rejected_us = 0

    @property
    def excluded(self) -> frozenset[str]:
        """Senders dropped before aggregation (base58 PeerIDs)."""
        return self.reputation.excluded

    async def publish(self, round_: int, verdicts: Iterable[SenderVerdict]) -> list[VoteVerdict]:
        """Remember our verdicts of ``round_`` and publish them, signed (rewritten first by ``smear``).

        Accepted rows longer than 2.3 times the round's median norm are published with reason ``edge``.

        Args:
            round_: The round the verdicts were given in.
            verdicts: The round's verdicts, ours included.

        Returns:
            The votes as published.
        """
        verdicts = list(verdicts)
        edge = edge_rows({v.sender: v.norm for v in verdicts if v.norm is not None},
                         {v.sender for v in verdicts if v.accepted and v.sender != self.me})
        votes = [dataclasses.replace(v, reason=EDGE_REASON) if v.accepted and v.sender_b58 in edge else v
                 for v in vote_verdicts(verdicts, me=self.me)]
        # Only the last round is ever folded; a circumstantial or copyable rejection (late, duplicate) is no evidence.
        self._own = {round_: (judged_map(votes), edge)}
        if self.smear is not None:
            votes = self.smear(votes)
        if not await publish_votes(self.dht, self.run_id, round_, votes, self.identity):
            # hivemind reports the last replica's answer, not "any replica": readers usually still find them
            logger.debug("a DHT replica did not confirm our votes of round %d", round_)
        return votes

    async def fold(self, round_: int, ignore: Collection[str] = ()) -> ReputationUpdate | None:
        """Read every peer's votes of ``round_`` and fold them, with ours, into the reputation.

        Args:
            round_: A round we published verdicts for (the previous one); other rounds are skipped.
            ignore: Voters whose votes do not count (banned equivocators).

        Returns:
            The update, or None if we gave no verdicts in ``round_`` (a joiner's first round).
        """
        mine = self._own.pop(round_, None)
        if mine is None:
            return None
        own, edge = mine
        votes = filter_allowed(await read_votes(self.dht, self.run_id, round_), self.allowed)
        self.rejected_us = sum(any(v.sender_b58 == self.me and not v.accepted for v in vote.verdicts)
                               for voter, vote in votes.items() if voter != self.me)
        ballots = {voter: v.as_map() for voter, v in votes.items()}
        return self.reputation.update(round_, own, ballots, ignore=ignore, edge=edge)
