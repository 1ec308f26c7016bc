"""The swarm's reputation in the in-process cell: every peer's ``Reputation``, fed as a networked peer feeds it.

A networked peer (``swarm.peer.Peer``; ``PeerConfig.reputation_exclusion`` is on by default) keeps its verdicts of
round r (``swarm.standing.VoteBook.remember``: an accepted row longer than 2.3 × the round's median norm is an *edge
row*, ``guard.reputation.edge_rows``; one whose cosine with the guard's reference is below −0.1, from a sender whose
direction record is below 0, an *opposed row*, ``guard.reputation.opposed_rows``), publishes them as signed votes,
and when round r + 1 aggregates it folds them with every other peer's votes of r into its
``guard.reputation.Reputation`` (``VoteBook.fold``). The senders its reputation then excludes are dropped before its
guard from round r + 1 on; each gets the verdict ``excluded`` (``protocol.reasons.RejectReason.EXCLUDED``), which is
no evidence in later rounds. A rejection for a reason in ``protocol.reasons.NOT_EVIDENCE_REASONS`` (circumstantial
or copyable) is no evidence either: the sender counts as not judged (``protocol.votes.judged_map``); a voter's
ballot counts an edge or opposed row as a rejection (``protocol.votes.evidence_map``).

:class:`CellStanding` runs exactly that for every peer of a cell, as if every vote arrived: :meth:`fold` after
each round's guard calls, :meth:`excluded` before the next. Byzantine peers vote as ``p2p-guard simulate``'s
attackers do: their ballots are their own guard's verdicts (no update or data attack rewrites votes;
``vote_smear`` is a wire attack, out of scope in-process). The functions are the swarm's (``Reputation``,
``edge_rows``, ``opposed_rows``, the reason sets); what differs is the transport: no signatures, no DHT, no lost votes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from p2p_guard.guard.base import Verdict
from p2p_guard.guard.reputation import Reputation, strike_rows
from p2p_guard.protocol.reasons import NOT_EVIDENCE_REASONS, RejectReason

__all__ = ["EXCLUDED", "CellStanding", "ballot", "not_judged"]

EXCLUDED = RejectReason.EXCLUDED.value
"""The verdict reason of a sender the receiver's reputation excludes (its row is not judged)."""


def not_judged(sender: str, reason: str) -> Verdict:
    """A rejection that never reached the guard (``reason``: ``excluded``, ``non_finite``, ``zero_update``)."""
    return Verdict(sender=sender, accepted=False, reason=reason, detail=reason, norm=math.nan, cosine=math.nan)


def ballot(verdicts: Iterable[Verdict], me: str) -> tuple[dict[str, bool], frozenset[str], frozenset[str]]:
    """What one peer's verdicts of a round say about each sender: ``(judged, edge, opposed)``, as ``VoteBook.remember``.

    judged  = {s ≠ me : accepted_s, for every s accepted or rejected for a reason that is evidence}
    edge    = the accepted rows (other than ours) longer than 2.3 × the median norm of the finite rows judged
    opposed = the other accepted rows (other than ours) whose cosine with the guard's reference is below −0.1 and
              whose sender's direction record is below 0

    Args:
        verdicts: the peer's verdicts of the round (``Verdict.norm`` ``nan`` for a row the guard never saw).
        me: the peer's own name (its own row is left out).

    Returns:
        ``judged`` (``{sender: accepted}``, the peer's own evidence for ``Reputation.update``), ``edge`` (its
        edge rows) and ``opposed`` (its opposed rows). As a vote, an edge or opposed row counts as a rejection:
        ``{s: a and s not in edge | opposed}``.
    """
    verdicts = list(verdicts)
    edge, opposed = strike_rows({v.sender: v.norm for v in verdicts if math.isfinite(v.norm)},
                                {v.sender: v.cosine for v in verdicts if math.isfinite(v.cosine)},
                                {v.sender: v.record for v in verdicts if v.record is not None},
                                {v.sender for v in verdicts if v.accepted and v.sender != me})
    judged = {v.sender: v.accepted for v in verdicts
              if v.sender != me and (v.accepted or (v.reason or "") not in NOT_EVIDENCE_REASONS)}
    return judged, edge, opposed


class CellStanding:
    """Every peer's reputation in one cell, folded round by round as the swarm folds it.

    Args:
        names: the peers' names, by index (each gets ``Reputation(me=name)``, the peer's default).
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.reputations = {name: Reputation(me=name) for name in names}

    def excluded(self, name: str) -> frozenset[str]:
        """The senders peer ``name`` drops before its guard in the coming round (empty before the first fold)."""
        return self.reputations[name].excluded

    def fold(self, round_: int, verdicts: Mapping[str, Sequence[Verdict]]) -> dict[str, tuple[str, ...]]:
        """Fold round ``round_``: each receiver's own verdicts with every other receiver's ballots.

        Args:
            round_: the round the verdicts were given in (increasing from call to call).
            verdicts: ``{receiver name: its verdicts of the round}``, every receiver that judged this round;
                a sender it did not judge (excluded, dropped before the guard) carries a :func:`not_judged`
                verdict.

        Returns:
            ``{receiver: senders it excluded in this fold}``, only for receivers that excluded someone.

        Raises:
            KeyError: a receiver not named at construction.
        """
        ballots = {name: ballot(vs, name) for name, vs in verdicts.items()}
        votes = {name: {s: a and s not in edge and s not in opposed for s, a in judged.items()}
                 for name, (judged, edge, opposed) in ballots.items()}
        newly: dict[str, tuple[str, ...]] = {}
        for name, (judged, edge, opposed) in ballots.items():  # Reputation.update ignores the receiver's own ballot
            update = self.reputations[name].update(round_, judged, votes, edge=edge, opposed=opposed)
            if update.newly_excluded:
                newly[name] = update.newly_excluded
        return newly
