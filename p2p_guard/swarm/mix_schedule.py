"""When a peer mixes: every ``mix_every`` rounds, or (adaptive) less often while the honest models agree.

Mixing (``swarm.mixing.clipped_gossip``) fetches dense θ and outer-momentum states, 4·d bytes each, from up to
``mix_peers`` neighbours. At d = 25M that is most of what a round sends, even when the models already agree to
0.15 % (stop 20: 101 MB of the 156 MB a peer sent per round with ``topk``). The adaptive schedule mixes less often
while the disagreement it measures is small, and at once again when it grows:

    δ_r  = median_j ‖θ_j − θ_i‖ / ‖θ_i‖      over the states of mixing r's first gossip step, before moving
    I    ← min(2·I, max_every)   if δ_r ≤ bound / 4
    I    ← 1                     if δ_r > bound / 2
    I    unchanged               otherwise
    next mixing: round r + I     (a round behind the swarm mixes anyway: ``due(..., behind=True)``)
    and also any round in which we rejected an update for when it arrived, not what it held
    (``DISTURBING_REASONS``: late, timed out, unavailable, stale, wrong round), or in which a sender changed
    standing since the previous round (accepted, rejected, excluded), or after one in which other peers' signed
    votes rejected our own update: ``disturbed``

where ``bound`` is the consensus-distance target (1e-2, issue 8's rule 1). Between two mixings the disagreement
grows about linearly with the rounds, so the next δ measured tells whether I was too long, and one δ above
bound / 2 returns to mixing every round. A disturbed round is a sudden step away from the others (our aggregate
lacks an honest row that theirs hold): measured with ``--adaptive-mixing`` and no such rule, one ``late_commit``
in round 1 put one peer 0.067 away from the others for a round, because nobody mixed in round 1, and without
the verdict-flip rule the honest models drifted to 0.0101 in the 4 rounds after a change of verdicts.

The median, not the largest distance, drives the schedule: a Byzantine minority of the sample cannot make us skip
mixings by serving states equal to ours (it can make us mix more often, which is the fixed schedule's cost). A
neighbour that is not mixing in a round answers the gossip steps with its post-step θ
(``PayloadServer.publish_unmixed``), so peers on different intervals never wait for each other.

Nothing here is measured from a self-reported number: δ comes from the states we fetched ourselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from p2p_guard.protocol.reasons import CIRCUMSTANTIAL_REASONS, RejectReason

__all__ = ["CONSENSUS_BOUND", "DISTURBING_REASONS", "MAX_ADAPTIVE_EVERY", "MixSchedule"]

CONSENSUS_BOUND = 1e-2
"""The honest consensus distance the adaptive schedule keeps under (max ‖θ_i − θ_j‖ / ‖θ_i‖; issue 8, rule 1)."""

MAX_ADAPTIVE_EVERY = 4
"""Longest interval of the adaptive schedule, in rounds (mixing traffic falls to at most a quarter of every round's)."""


DISTURBING_REASONS = CIRCUMSTANTIAL_REASONS - {RejectReason.EXCLUDED.value}
"""Rejections that make the adaptive schedule mix in that round: circumstantial ones that can hit an honest sender
(``reasons.CIRCUMSTANTIAL_REASONS`` less ``excluded``, which repeats every round once an attacker is excluded)."""


def _standing(accepted: bool, reason: object) -> str:
    """``accepted``, ``excluded`` (dropped before our guard by our reputation) or ``rejected``."""
    if accepted:
        return "accepted"
    return "excluded" if reason == RejectReason.EXCLUDED.value else "rejected"


@dataclass
class MixSchedule:
    """A peer's mixing schedule (one per peer; mutable).

    Attributes:
        every: the fixed period in rounds (0: never mix, in either schedule); with ``adaptive`` the first
            interval (the first mixing is in round 0).
        adaptive: adapt the period to the measured disagreement (module docstring).
        bound: consensus-distance target (dimensionless, > 0).
        max_every: longest adaptive period, in rounds (>= 1).
        interval: the current period, in rounds.
        next_round: the first round at which the adaptive schedule mixes again.
    """

    every: int = 1
    adaptive: bool = False
    bound: float = CONSENSUS_BOUND
    max_every: int = MAX_ADAPTIVE_EVERY
    interval: int = field(default=1, init=False)
    next_round: int = field(default=0, init=False)
    _last: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.every < 0:
            raise ValueError(f"every must be >= 0; got every={self.every}")
        if not self.bound > 0:
            raise ValueError(f"bound must be > 0; got bound={self.bound}")
        if self.max_every < 1:
            raise ValueError(f"max_every must be >= 1; got max_every={self.max_every}")
        self.interval = max(1, self.every)

    def due(self, round_: int, *, behind: bool = False) -> bool:
        """Whether to mix after the step of ``round_``.

        Args:
            round_: the round whose post-step states would be mixed.
            behind: our update went into a later round than the one it was computed on (we were slow): mix then
                in any schedule except ``every = 0``, as the fixed schedule always did.
        """
        if self.every == 0:
            return False
        if behind:
            return True
        if self.adaptive:
            return round_ >= self.next_round
        return round_ % self.every == 0

    def disturbed(self, verdicts: Iterable[tuple[str, bool, object]], *, rejected_us: int = 0) -> bool:
        """Whether the adaptive schedule mixes in a round with these verdicts; it remembers them for the next round.

        A round is disturbed when we rejected an update for a reason in ``DISTURBING_REASONS``, or when a sender
        we judged in the previous round too changed standing (accepted, rejected by the guard, or excluded by our
        reputation before the guard saw it): either way our aggregate stepped away from what the others' hold (an
        honest row they took and we did not, e.g. one of our guard's false positives; or a Byzantine row that
        left our guard's input, which moves its robust centre, in a round in which others still had it). A
        Byzantine sender rejected, or excluded, every round changes nothing.

        Also when ``rejected_us`` > 0: other peers' signed votes of the previous round rejected our own update, so
        their aggregates lack our row and ours holds it (an honest peer whose row the others' guards struck is the
        one that drifts; it cannot see that in its own verdicts). Any reason counts, ``duplicate`` and
        ``colluding`` too (``swarm.standing.rejected_by``): copiers cause them, but the row is out of the voters'
        aggregates all the same. Byzantine voters can force such mixings, which only costs what the fixed schedule
        costs.

        Args:
            verdicts: ``(sender PeerID, accepted, reason)`` per judged sender (reason: enum, value or None).
            rejected_us: how many other peers rejected our update in the previous round (their votes).

        Returns:
            False for the fixed schedule and for ``every = 0``.
        """
        if not self.adaptive or self.every == 0:  # the default: nothing to remember, every round mixes anyway
            return False
        now = {sender: (accepted, getattr(reason, "value", reason)) for sender, accepted, reason in verdicts}
        before, self._last = self._last, {sender: _standing(*verdict) for sender, verdict in now.items()}
        late = any(not accepted and reason in DISTURBING_REASONS for accepted, reason in now.values())
        flipped = any(before[sender] != self._last[sender] for sender in now if sender in before)
        return late or flipped or rejected_us > 0

    def observe(self, round_: int, distance: float | None) -> int:
        """Take the median relative distance δ of the mixing of ``round_``; return the interval it sets.

        Args:
            round_: the mixed round.
            distance: δ (dimensionless, >= 0), or None when no neighbour answered (then the next round mixes).

        Returns:
            The interval in rounds until the next mixing (1 for the fixed schedule).
        """
        if not self.adaptive:
            return self.interval
        if distance is None or math.isnan(distance) or distance > self.bound / 2:  # None: nobody answered
            self.interval = 1
        elif distance <= self.bound / 4:
            self.interval = min(2 * self.interval, self.max_every)
        self.next_round = round_ + self.interval
        return self.interval
