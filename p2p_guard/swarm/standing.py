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
reader's, as a strike: aggregated, but at the edge of what the guard lets through. An accepted row whose cosine
with the guard's reference is below −0.1, from a sender whose direction record at our guard is below 0
(``guard.reputation.opposed_rows``), is published with reason ``opposed`` (``protocol.votes.OPPOSED_REASON``), a
strike too, that excludes only with a rejection.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from p2p_guard.guard.reputation import Reputation, ReputationUpdate, strike_rows
from p2p_guard.guard.state import round_of, version_of
from p2p_guard.identity import Identity
from p2p_guard.protocol.votes import EDGE_REASON, MAX_VOTES_SENDERS, OPPOSED_REASON, Votes, VoteVerdict, judged_map
from p2p_guard.swarm.allowlist import filter_allowed
from p2p_guard.swarm.dht import SwarmDHT
from p2p_guard.swarm.verdicts import SenderVerdict
from p2p_guard.swarm.votes import publish_votes, read_votes, vote_verdicts

__all__ = ["VoteBook", "rejected_by"]

logger = logging.getLogger(__name__)

_STATE_VERSION = 1


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
        self._own: dict[int, tuple[dict[str, bool], frozenset[str], frozenset[str]]] = {}
        self._votes: tuple[int, list[VoteVerdict]] | None = None  # the last round remembered and our votes of it
        #: Voters whose signed votes of the last folded round rejected our own update, for any reason (our row
        #: missing from their aggregates: ``swarm.mix_schedule`` mixes then; :func:`rejected_by`). Byzantine voters
        #: can raise it. 0 after a :meth:`fold` that folded nothing.
        self.rejected_us = 0

    @property
    def excluded(self) -> frozenset[str]:
        """Senders dropped before aggregation (base58 PeerIDs)."""
        return self.reputation.excluded

    def remember(self, round_: int, verdicts: Iterable[SenderVerdict]) -> list[VoteVerdict]:
        """Keep our verdicts of ``round_`` for the next :meth:`fold` (and for :meth:`state_dict`); our votes.

        Accepted rows longer than 2.3 times the round's median norm get reason ``edge``; the other accepted rows
        whose cosine with the guard's reference is below −0.1, from senders whose direction record is below 0, get
        reason ``opposed``. The round loop calls it
        when the round's step is done, before the checkpoint captures :meth:`state_dict`.

        Args:
            round_: The round the verdicts were given in.
            verdicts: The round's verdicts, ours included.

        Returns:
            Our votes of the round, before ``smear``.
        """
        verdicts = list(verdicts)
        votes = vote_verdicts(verdicts, me=self.me)
        # A sender with a rejection besides an accepted row this round (a carried late payload with bad bytes) is
        # voted a rejection: it is no edge or opposed row (the pending state lists only senders we accepted).
        edge, opposed = strike_rows({v.sender: v.norm for v in verdicts if v.norm is not None},
                                    {v.sender: v.cosine for v in verdicts if v.cosine is not None},
                                    {v.sender: v.record for v in verdicts if v.record is not None},
                                    {v.sender_b58 for v in votes if v.accepted})
        votes = [_strike(v, edge, opposed) for v in votes]
        # Only the last round is ever folded; a circumstantial or copyable rejection (late, duplicate) is no evidence.
        self._own = {round_: (judged_map(votes), edge, opposed)}
        self._votes = (round_, votes)
        return votes

    async def publish(self, round_: int, verdicts: Iterable[SenderVerdict]) -> list[VoteVerdict]:
        """Publish our verdicts of ``round_``, signed (rewritten first by ``smear``); :meth:`remember` them first.

        When :meth:`remember` already took this round's verdicts they are not taken again (a fold in between
        may have used them: remembering them again would fold them twice).

        Args:
            round_: The round the verdicts were given in.
            verdicts: The round's verdicts, ours included.

        Returns:
            The votes as published.
        """
        if self._votes is not None and self._votes[0] == round_:
            votes = self._votes[1]
        else:
            votes = self.remember(round_, verdicts)
        if self.smear is not None:
            votes = self.smear(votes)
        if not await publish_votes(self.dht, self.run_id, round_, votes, self.identity):
            # hivemind reports the last replica's answer, not "any replica": readers usually still find them
            logger.debug("a DHT replica did not confirm our votes of round %d", round_)
        return votes

    def state_dict(self) -> dict[str, Any]:
        """What carries over between rounds, as plain values (the peer's checkpoint keeps it).

        Returns:
            ``{"version": 1, "reputation": Reputation.state_dict(), "pending": None or {"round": r, "judged":
            {sender: accepted}, "edge": [sender, ...], "opposed": [sender, ...]}}``: ``pending`` holds our verdicts
            of the last round :meth:`remember` took and no :meth:`fold` has used yet, so a peer resumed at round
            r + 1 folds round r with them as the one that never stopped does ("opposed" may be absent in a
            checkpoint written before opposed rows). At most ``max_tracked`` (4096) senders in the
            reputation and :data:`MAX_VOTES_SENDERS` (256) in ``pending``.
        """
        pending = None
        for round_, (judged, edge, opposed) in self._own.items():
            pending = {"round": round_, "judged": dict(sorted(judged.items())), "edge": sorted(edge),
                       "opposed": sorted(opposed)}
        return {"version": _STATE_VERSION, "reputation": self.reputation.state_dict(), "pending": pending}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output, checked first (nothing changes on error).

        Raises:
            ValueError: another version, a malformed ``pending`` (a sender that is not a str, a verdict that is not
                a bool, more than :data:`MAX_VOTES_SENDERS` senders, an edge or opposed row we did not accept), or
                anything :meth:`Reputation.load_state_dict` refuses.
        """
        if version_of(state) != _STATE_VERSION:
            raise ValueError(f"votes: not a state of version {_STATE_VERSION}")
        own: dict[int, tuple[dict[str, bool], frozenset[str], frozenset[str]]] = {}
        pending = state.get("pending")
        if pending is not None:
            if not isinstance(pending, Mapping):
                raise ValueError("votes: pending must be a mapping or None")
            round_ = round_of("votes: pending", pending.get("round"))
            judged, edge = pending.get("judged"), pending.get("edge")
            opposed = pending.get("opposed", [])  # absent in checkpoints written before opposed rows
            if (not isinstance(judged, Mapping) or len(judged) > MAX_VOTES_SENDERS
                    or not all(isinstance(k, str) and type(v) is bool for k, v in judged.items())):
                raise ValueError(f"votes: pending verdicts must map at most {MAX_VOTES_SENDERS} str senders to bools")
            if not isinstance(edge, (list, tuple)) or not all(isinstance(e, str) and judged.get(e) for e in edge):
                raise ValueError("votes: pending edge rows must be a list of senders we accepted")
            if not isinstance(opposed, (list, tuple)) or not all(isinstance(e, str) and judged.get(e) for e in opposed):
                raise ValueError("votes: pending opposed rows must be a list of senders we accepted")
            own[round_] = (dict(judged), frozenset(edge), frozenset(opposed))
        self.reputation.load_state_dict(state.get("reputation"))  # type: ignore[arg-type]  # it checks the type
        self._own = own

    async def fold(self, round_: int, ignore: Collection[str] = ()) -> ReputationUpdate | None:
        """Read every peer's votes of ``round_`` and fold them, with ours, into the reputation.

        Args:
            round_: A round we published verdicts for (the previous one); other rounds are skipped.
            ignore: Voters whose votes do not count (banned equivocators).

        Returns:
            The update, or None if we gave no verdicts in ``round_`` (a joiner's first round).
        """
        self.rejected_us = 0  # a round we did not fold says nothing about the others' aggregates
        mine = self._own.pop(round_, None)
        if mine is None:
            return None
        own, edge, opposed = mine
        votes = filter_allowed(await read_votes(self.dht, self.run_id, round_), self.allowed)
        self.rejected_us = rejected_by(votes.values(), self.me, ignore=ignore)
        ballots = {voter: v.as_map() for voter, v in votes.items()}
        return self.reputation.update(round_, own, ballots, ignore=ignore, edge=edge, opposed=opposed)


def _strike(verdict: VoteVerdict, edge: frozenset[str], opposed: frozenset[str]) -> VoteVerdict:
    """``verdict`` with reason ``edge`` or ``opposed`` when its sender's accepted row is one (else unchanged)."""
    if not verdict.accepted:
        return verdict
    sender = verdict.sender_b58
    reason = EDGE_REASON if sender in edge else OPPOSED_REASON if sender in opposed else None
    return verdict if reason is None else dataclasses.replace(verdict, reason=reason)


def rejected_by(votes: Iterable[Votes], me: str, *, ignore: Collection[str] = ()) -> int:
    """How many other voters' verified votes rejected our update (``VoteBook.rejected_us``), for any reason.

    The count asks whether the voters' aggregates lack our row, which ours holds (``swarm.mix_schedule``'s
    ``disturbed``: mix at once), not whether they hold evidence against it (``protocol.votes.judged_map``). So it
    counts every rejection: circumstantial ones (late, timed out, excluded), and the copyable ones
    (``reasons.COPYABLE_REASONS``: ``duplicate``, ``colluding``) too, which ``judged_map`` leaves out of the
    reputation because another peer can cause them by copying us. Such a rejection still leaves our row out of
    that voter's aggregate: under ``mimic`` the copied peer's new row is a duplicate at every receiver but its
    own, which is what drives the receivers' models apart (docs/threat-model.md §3.7a). An accepted edge row
    is in the voter's aggregate, so it does not count. Our own votes, a voter in ``ignore`` (banned
    equivocators, as in :meth:`Reputation.update`) and verdicts on other senders do not count.

    Args:
        votes: verified votes of one round (``swarm.votes.read_votes``'s values).
        me: our PeerID (base58).
        ignore: voters whose votes do not count.

    Returns:
        The number of voters, ``>= 0``.
    """
    return sum(1 for vote in votes if vote.voter_b58 != me and vote.voter_b58 not in ignore
               and any(v.sender_b58 == me and not v.accepted for v in vote.verdicts))
