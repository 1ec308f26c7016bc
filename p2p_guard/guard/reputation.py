r"""Reputation: this peer's own verdicts and other peers' votes, combined into a per-sender score.

Each round, peer *o* (us) judged some senders itself and read the signed votes other peers published about
the same round. For every sender s ≠ o that we have judged at least once:

    o_r(s) = 1 if we accepted s cleanly, 0 if we rejected it for its content or flagged it as an edge or opposed row
    a_s   ← o_r(s)                                   the first time we judge s
    a_s   ← (1 − λ)·a_s + λ·o_r(s)                    each later round in which we judge s
    g_v   ← agree_r(v) the first time, then (1 − λ)·g_v + λ·agree_r(v)   (rounds where v and we judged a common s)
    w_v   = a_v · g_v  if we have judged v, else 0    (a voter's weight: its standing as a sender with us, times
                                                       how often its ballots agree with our own verdicts)
    e_r(s) = ( ω·J_r(s)·o_r(s) + Σ_{v ∈ V_r(s)} w_v·u_r(v, s) ) / ( ω·J_r(s) + Σ_{v ∈ V_r(s)} w_v )
    R_s   ← (1 − λ)·R_s + λ·e_r(s)                    when the denominator is > 0 (else R_s is unchanged)
    b_s   = b_s + 1 if R_s < θ else 0                 (counted on rounds with evidence on s)
    n_s   = strikes (o = 0) among our last k own verdicts on s;  h_s = content rejections among them;
    e_s   = content rejections and edge rows among them (n_s without the opposed rows)

    s becomes excluded   ⇔  b_s ≥ k  and  n_s ≥ m  and  ( h_s ≥ m_h  or  e_s ≥ m_e )
    s is readmitted      ⇔  s is excluded and (R_s ≥ θ_in  or  r − r_s ≥ T)
                            (then b_s = 0 and the own window is cleared: a fresh trial of k rounds)

where
    - r is the round; J_r(s) ∈ {0, 1} says whether we judged s in round r, and is 1 with o_r(s) = 0 for an
      excluded sender we no longer judge in a round with votes on it (our exclusion stands as our rejection:
      below, "Why one voter cannot readmit"). A rejection for a circumstantial
      reason (late, timed out, stale: ``protocol.reasons.CIRCUMSTANTIAL_REASONS``) is not a judgement, nor is
      one that other senders can cause by copying s (``duplicate``, ``colluding``:
      ``protocol.reasons.COPYABLE_REASONS``; under ``mimic`` the copied honest peer is rejected with its
      copies): the caller leaves such senders out (``protocol.votes.evidence_map``);
    - an *edge row* (``suspect``) is one we accepted although it lay at the edge of what the guard lets
      through: longer than ``c_edge`` (2.3) times the round's median norm (:func:`edge_rows`), past the
      radius (2×) at which the guard's magnitude stage clips it and short of the rejection radius (3×). Honest
      rows of non-IID peers stay near the median norm (mostly ≤ 1.5×), but not always: in one of 17 replays
      without attackers in docs/threat-model.md §3.7a (fashion-mnist, Dirichlet 0.05, seed 6) an honest peer's
      rows were 2.0-2.3× for 12 rounds running, and the edge rule with ``c_edge`` = 2 excluded it; a white-box
      attacker that
      passes the verdict (``adaptive``) sits just under the rejection radius (2.5–2.8×) every round. An edge
      row is a *strike* but not a *rejection*: edge rows without a rejection exclude only when they fill the
      window, n_s ≥ m_e (default m_e = k: struck in every one of the sender's last k judged rounds);
    - an *opposed row* (``opposed``) is one we accepted although it points away from the guard's reference,
      from a sender that always did: cosine below ``cos_opposed`` (−0.1) and a direction record (its mean cosine
      over the rounds we judged it) below 0 (:func:`opposed_rows`), where the guard weighs it down but does not
      reject it. A strike, but one that excludes only with a rejection in the window (h_s ≥ m_h); opposed rows
      alone never exclude, as honest rows of non-IID peers point away from the centre for rounds at a time
      (below);
    - a_s ∈ [0, 1] is s's *own standing*: an exponential average of our own verdicts only;
    - V_r(s) is the set of voters with a verified vote on s in round r, v ∉ {o, s} (no self-votes), and
      u_r(v, s) ∈ {0, 1} is v's ballot (0 for a rejection, an edge or an opposed row,
      ``protocol.votes.evidence_map``);
    - agree_r(v) ∈ [0, 1] is the fraction of the senders we accepted cleanly in round r (other than v) and v
      voted on, that v accepted too; g_v ∈ [0, 1] is v's *credibility*. A voter that accuses senders we accept
      cleanly (``vote_smear``) loses its weight within a round or two even though its own updates are honest,
      so a smear cannot even move the scores for long. Only accusations cost credibility, never acquittals:
      a voter that accepts a sender our guard rejected keeps its weight, so the voters we trust can still
      outvote our own false positives (below);
    - w_v ∈ [0, 1] is voter v's weight; a voter we never judged has weight 0, so identities that only vote
      (Sybils) weigh nothing;
    - e_r(s) ∈ [0, 1] is the round's evidence: a weighted mean of our verdict (weight ω, ``own_weight``)
      and the voters' ballots;
    - R_s ∈ [0, 1] is s's reputation (the *score*), starting at the prior ρ (``prior``);
    - λ ∈ (0, 1] is ``decay``, θ ∈ (0, 1) is ``threshold``, θ_in ∈ [θ, 1] is ``readmit_threshold``,
      k ≥ 1 is ``window``, 1 ≤ m ≤ k is ``min_own_strikes``, 0 ≤ m_h ≤ m is ``min_own_rejections`` and
      m ≤ m_e ≤ k is ``edge_strikes`` (None: ∞, edge rows alone never exclude, the rule before 2026-12-07);
    - r_s is the round of the update that excluded s, and T ≥ 1 is ``max_exclusion_rounds`` (None: ∞). An
      excluded sender is not judged by us, so without T an honest sender excluded by mistake could stay out
      for good; with T it is retried, and a Byzantine one is excluded again after k more rounds, its rows
      meanwhile going through the guard.

Why votes can never exclude anyone on their own: exclusion requires n_s ≥ m and (h_s ≥ m_h or n_s ≥ m_e), which
depend on our own verdicts only. Whatever the votes (any number of Byzantine voters, any weights, a Byzantine
majority), a sender that our own guard accepted cleanly in more than k − m of its last k judged rounds, or that
it neither rejected in them nor struck in m_e of them, is never excluded. Votes can only *speed up* exclusion
(push R_s below θ sooner when our own evidence is mixed) or *lower confidence* in it (keep R_s above θ, or
readmit an excluded sender, when the voters we trust accept it: an honest sender that only our guard rejects,
because our model or data differ from the others', is kept).

Why one voter cannot readmit (since 2026-12-07): once every honest peer has excluded a sender, none of them judges
it any more, so the only ballots on it come from peers that still do: a peer that restarted or joined late and
has not yet built its own evidence. Before, such a peer's clean acceptances were the whole evidence on the
sender, and two of them readmitted it everywhere: in a live run (``p2p-guard simulate --task digits --honest 8
--byzantine 2 --attack sign_flip:scale=1 --partition dirichlet:0.5 --rounds 12 --seed 0`` with a
``kill_restart`` of peer 3 at round 3) the restarted peer accepted the two attackers in rounds 6-7 (cosines
−0.07 .. +0.12), which took every other honest peer's scores from 0.008 to 0.50 to 0.76 and readmitted both
attackers at round 8, four rounds after their exclusion. Counting our exclusion as a rejection, readmission by
votes needs the trusted voters' weights to reach 3ω in all (Σ w / (ω + Σ w) ≥ θ_in = 0.75): at least three voters
we fully trust, round after round. One voter's ballots reach at most e = 1/2, and the exclusion lapses after T
rounds as before.

Why honest senders are not excluded for differing a little (defaults k = 4, m = 3, m_h = 1, m_e = 4): our guard
must strike the sender in 3 of its last 4 judged rounds and reject it outright at least once, or find it at the
edge in all 4, and the score must stay below θ for 4 rounds, which the clean acceptances of the voters we trust
prevent. Honest false positives are sporadic (≤ 2 % of rows) and honest rows rarely pass 2× the median norm;
a persistent attacker is struck every round and excluded after its 4th judged round (folded with the round lag
of ``swarm.standing``: dropped from its 5th round on).

Why edge rows alone may exclude (m_e, since 2026-12-07): the white-box ``adaptive`` attack aims its norm under
the guard's rejection radius, and in the live swarm it met it: in the 40-round rule-5 run (digits, 10 peers,
Dirichlet 0.5, 2 ``adaptive`` + 1 ``vote_smear``) one adaptive peer's rows sat at 2.5–2.9× the median norm at
every honest receiver for 15 rounds, each an edge row (4 strikes of 4 and a score ≤ 0.03 from round 3), and not
one was rejected, so h_s ≥ m_h kept it in until its first overshoot, in round 15.
An edge row is the sender's own row norm at our receiver: copies of it (``mimic``) are as long as it, and votes
do not touch it. What others can do is shorten the reference, the round's median, with short rows of their
own: with f of the n rows at a receiver near zero the median falls to a lower honest norm. Replayed in-process
with ``scale:factor=0.01`` at 3 and 4 of 10 (``docs/scripts/reputation_replay.py``, docs/threat-model.md §3.7a),
the longest honest row accepted was 1.41–1.88× the median, never an edge row; under ``mimic`` 1.28–1.83×.
A non-IID honest peer whose norm is persistently more than twice its receivers' median is excluded by this
rule, and one was in a replay (fashion-mnist, Dirichlet 0.05 shards, seed 6: a near-single-class peer at 2.0-2.3×
the median, excluded by every other peer at fold 20); ``edge_strikes=None`` turns it off. A cosine test (an edge
row must also point away from the guard's centre) removed that exclusion but failed the live rule-5 run: the
live ``adaptive`` rows had cosines −0.26 to 0.36, as the honest peer's (−0.08 to 0.32).
Why opposed rows (since 2026-12-07): a sign flip of an honest-norm update (``sign_flip:scale=1``,
``null_space``) at 2 of 10 on digits, Dirichlet 0.5, sits at cosines −0.3 .. −0.1 with the centre, where the guard
rejects it in some rounds and accepts it at part weight in the others; with 1 strike in 4 rounds it was never
excluded and cost the honest peers 6.9 points (86.7 % against 92.2 % without the attackers' rows; the digits
acceptance report at f4866e2). Counted as strikes, both attacks are excluded by every honest peer at the fold of
round 3 and the cells end at 91.4 % and 91.7 % (``python docs/scripts/strike_probe.py attack opposed``). Why the
record: without it (every accepted row below −0.1 a strike) honest senders were excluded in 5 cells of the digits
acceptance at 4 of 10 (25 exclusions): once the attackers were out, one honest peer of the 6 (peer04 under
``free_rider``, peer00 under ``sign_flip:scale=10``) drifted from cosines +0.5 .. +0.7 in rounds 0-3 to −0.1 ..
−0.37 from round 5 on, with one outright rejection; its record stayed above 0.12. With the record no honest peer
was excluded in any digits acceptance cell, nor in 40 clean rounds on Dirichlet 0.1 (seeds 0-4: 0 exclusions,
with 0 to 279 honest rejections a cell; ``python docs/scripts/strike_probe.py clean40 opposed --seeds 0 1 2 3
4``), where ``cos_opposed`` = −0.05 without the record excluded 9 honest senders on seed 3. An opposed row that
could exclude without a rejection (the m_e path: ``strike_probe.py``'s ``against``) excluded honest senders in the
attack cells themselves. The record misses a sender that first builds one: ``sleeper`` (honest for 3 rounds) is
not excluded.

Provable faults (equivocation) are not handled here: a proof bans at once (``swarm.peer``).

Only senders we have judged are tracked (votes about others are ignored), at most ``max_tracked`` of them;
past that the least recently judged sender that is not excluded is forgotten.

The object holds no hidden state: everything that carries over between rounds is in :meth:`state_dict`,
and :meth:`update` is a deterministic function of that state and its arguments (senders are processed in
sorted order).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from p2p_guard.guard.state import version_of

__all__ = ["ACCEPT", "EDGE", "OPPOSED", "REJECT", "Reputation", "ReputationUpdate", "Standing", "edge_rows",
           "opposed_rows", "strike_rows"]

_STATE_VERSION = 2
#: Own verdict kinds kept in the window: accepted cleanly, accepted as an edge row (a strike), rejected, accepted as
#: an opposed row (a strike that never excludes without a rejection).
ACCEPT, EDGE, REJECT, OPPOSED = "accept", "edge", "reject", "opposed"
_KINDS = (ACCEPT, EDGE, REJECT, OPPOSED)


def edge_rows(norms: Mapping[str, float], accepted: Collection[str], *, c_edge: float = 2.3) -> frozenset[str]:
    """The accepted rows longer than ``c_edge`` times the round's median norm (the reputation's edge rows).

    edge = {s ∈ accepted : ‖x_s‖₂ > c_edge · median_j ‖x_j‖₂}

    where the median runs over every row in ``norms`` (our own and rejected rows included, as the guard's
    median does).

    Args:
        norms: ``{sender: L2 norm}`` of the rows the guard judged this round (finite norms only).
        accepted: The senders whose rows the guard accepted.
        c_edge: Multiple of the median norm above which an accepted row is an edge row, ``> 0`` (default 2.3,
            between the guard's clipping radius ``c_clip`` = 2 and its rejection radius 3; it was ``c_clip``
            until an honest peer's rows at 2.0-2.3× got it excluded in a replay, docs/threat-model.md §3.7a).

    Returns:
        The edge rows' senders (empty when ``norms`` is empty).

    Raises:
        ValueError: ``c_edge`` is not a finite number > 0.
    """
    _check_real("c_edge", c_edge, low=0.0, high=math.inf, open_low=True, open_high=True)
    if not norms:
        return frozenset()
    limit = c_edge * statistics.median(norms.values())
    return frozenset(s for s in accepted if s in norms and norms[s] > limit)


def opposed_rows(cosines: Mapping[str, float], records: Mapping[str, float], accepted: Collection[str], *,
                 cos_opposed: float = -0.1, record_max: float = 0.0) -> frozenset[str]:
    """The accepted rows that point away from the guard's reference, from senders that always did (opposed rows).

    opposed = {s ∈ accepted : cos(x_s, reference) < cos_opposed  and  m_s < record_max}

    where m_s is the sender's direction record at this receiver: its mean cosine with the reference over the rounds
    the receiver judged it, this one included (``guard.base.Verdict.record``, kept by the ``semantic`` guard).

    The guard accepts such rows at part weight (``guard.semantic``'s direction ramp, between its rejection floor
    ``cos_min`` = −0.3 and ``cos_full``). A sign flip of an honest-norm update lands there round after round, with
    a rejection in some rounds, never in 3 of 4, and its record is negative from its first round. An honest peer
    with data of its own can drift there late in training too (cosines −0.1 .. −0.37 from round 5 on, with 6
    honest peers left of 10), but its record stays positive from the rounds it spent along the others.

    Args:
        cosines: ``{sender: cosine of its row with the guard's reference}`` (finite values only; the verdicts'
            ``cosine``).
        records: ``{sender: direction record}`` (finite values only); a sender without one is never opposed.
        accepted: The senders whose rows the guard accepted.
        cos_opposed: Cosine below which an accepted row may be opposed, in ``[-1, 1]`` (default −0.1).
        record_max: Record below which it is, in ``[-1, 1]`` (default 0).

    Returns:
        The opposed rows' senders.

    Raises:
        ValueError: ``cos_opposed`` or ``record_max`` is not a finite number in ``[-1, 1]``.
    """
    _check_real("cos_opposed", cos_opposed, low=-1.0, high=1.0)
    _check_real("record_max", record_max, low=-1.0, high=1.0)
    return frozenset(s for s in accepted if s in cosines and cosines[s] < cos_opposed
                     and s in records and records[s] < record_max)


def strike_rows(norms: Mapping[str, float], cosines: Mapping[str, float], records: Mapping[str, float],
                accepted: Collection[str]) -> tuple[frozenset[str], frozenset[str]]:
    """A round's accepted rows that are strikes: ``(edge, opposed)``, each sender in at most one of them.

    edge = :func:`edge_rows` (norms, accepted);  opposed = :func:`opposed_rows` (cosines, records, accepted) − edge

    Args:
        norms: ``{sender: L2 norm}`` of the rows judged (finite values only).
        cosines: ``{sender: cosine with the guard's reference}`` (finite values only).
        records: ``{sender: direction record}`` (finite values only).
        accepted: The senders whose rows count as accepted (our own left out).

    Returns:
        The edge rows' and the opposed rows' senders, with the defaults of both functions.
    """
    edge = edge_rows(norms, accepted)
    return edge, opposed_rows(cosines, records, accepted) - edge


@dataclass(frozen=True)
class Standing:
    """Where one sender stands after an update.

    Attributes:
        score: R_s, the combined reputation in [0, 1].
        own_standing: a_s, the average of our own verdicts only, in [0, 1].
        below_streak: b_s, consecutive rounds (with evidence) in which R_s was below the threshold.
        own_rejections: h_s, content rejections among our last ``window`` own verdicts on s.
        excluded: Whether s is excluded before aggregation from the next round on.
        excluded_at: The round of the update that excluded s, or None.
        own_strikes: n_s, rejections, edge and opposed rows among our last ``window`` own verdicts on s.
        credibility: g_v, how often s's ballots as a voter agreed with our own verdicts (1.0 before any).
    """

    score: float
    own_standing: float
    below_streak: int
    own_rejections: int
    excluded: bool
    excluded_at: int | None = None
    own_strikes: int = 0
    credibility: float = 1.0


@dataclass(frozen=True)
class ReputationUpdate:
    """What one :meth:`Reputation.update` changed.

    Attributes:
        round: The round whose verdicts and votes were used.
        standings: ``{sender: Standing}`` for every sender that had evidence this round, sorted by sender.
        excluded: Every sender excluded after this update (to drop before aggregation).
        newly_excluded: Senders excluded by this update, sorted.
        readmitted: Senders readmitted by this update, sorted.
        voter_weights: ``{voter: w_v}`` of this round's voters (after this round's credibility), sorted.
    """

    round: int
    standings: Mapping[str, Standing]
    excluded: frozenset[str]
    newly_excluded: tuple[str, ...]
    readmitted: tuple[str, ...]
    voter_weights: Mapping[str, float] | None = None


@dataclass
class _Sender:
    score: float
    standing: float
    streak: int
    recent: list[str]
    excluded_at: int | None
    last_round: int
    credibility: float | None = None

    @property
    def excluded(self) -> bool:
        return self.excluded_at is not None


class Reputation:
    """Per-sender reputation from own verdicts and others' votes, with exclusion that needs own evidence.

    The rule is in the module docstring. Shape of use, once per round r after reading the votes of r::

        update = reputation.update(r, own={sender: accepted, ...}, votes={voter: {sender: accepted}},
                                   edge=edge_rows(norms, accepted))
        rows = {s: row for s, row in rows.items() if s not in update.excluded}

    Args:
        me: Our own PeerID (base58); never excluded, and votes signed by it are ignored. None: no such id.
        threshold: θ, score below which a round counts towards exclusion (default 0.5).
        readmit_threshold: θ_in ≥ θ, score at which an excluded sender is readmitted (default 0.75).
        window: k, rounds the score must stay below θ, and own verdicts looked at (default 4).
        min_own_strikes: m ≤ k, own strikes (rejections or edge rows) needed among the last k own verdicts
            (default 3).
        min_own_rejections: m_h ≤ m, own content rejections needed among them (default 1).
        edge_strikes: m_e with m ≤ m_e ≤ k, own strikes that exclude without an outright rejection; the default
            ``"window"`` is k (a strike in each of the sender's last k judged rounds); None: never without one.
        decay: λ, weight of the newest round in the averages (default 0.5).
        own_weight: ω > 0, weight of our own verdict against each voter's (weights ≤ 1) (default 1.0).
        prior: ρ, score of a sender before any evidence (default 0.5).
        max_exclusion_rounds: T, rounds after which an exclusion lapses and the sender is retried
            (default 10); None keeps it until the score reaches θ_in.
        max_tracked: Most senders kept (default 4096).

    Raises:
        ValueError: A parameter is out of range (the message names it and its value).
    """

    def __init__(self, *, me: str | None = None, threshold: float = 0.5, readmit_threshold: float = 0.75,
                 window: int = 4, min_own_strikes: int = 3, min_own_rejections: int = 1, decay: float = 0.5,
                 own_weight: float = 1.0, prior: float = 0.5, max_exclusion_rounds: int | None = 10,
                 max_tracked: int = 4096, edge_strikes: int | Literal["window"] | None = "window") -> None:
        if me is not None and not isinstance(me, str):
            raise ValueError(f"me must be a str or None, got {me!r}")
        _check_real("threshold", threshold, low=0.0, high=1.0, open_low=True, open_high=True)
        _check_real("readmit_threshold", readmit_threshold, low=threshold, high=1.0)
        _check_int("window", window, minimum=1)
        _check_int("min_own_strikes", min_own_strikes, minimum=1)
        if min_own_strikes > window:
            raise ValueError(f"min_own_strikes must be <= window, got min_own_strikes={min_own_strikes}, "
                             f"window={window}")
        _check_int("min_own_rejections", min_own_rejections, minimum=0)
        if min_own_rejections > min_own_strikes:
            raise ValueError(f"min_own_rejections must be <= min_own_strikes, got min_own_rejections="
                             f"{min_own_rejections}, min_own_strikes={min_own_strikes}")
        m_e = window if isinstance(edge_strikes, str) and edge_strikes == "window" else edge_strikes
        if m_e is not None:
            _check_int("edge_strikes", m_e, minimum=min_own_strikes)
            if int(m_e) > window:
                raise ValueError(f"edge_strikes must be <= window, got edge_strikes={m_e}, window={window}")
        _check_real("decay", decay, low=0.0, high=1.0, open_low=True)
        _check_real("own_weight", own_weight, low=0.0, high=math.inf, open_low=True, open_high=True)
        _check_real("prior", prior, low=0.0, high=1.0)
        if max_exclusion_rounds is not None:
            _check_int("max_exclusion_rounds", max_exclusion_rounds, minimum=1)
        _check_int("max_tracked", max_tracked, minimum=1)
        self.max_exclusion_rounds = max_exclusion_rounds
        self.me = me
        self.threshold = float(threshold)
        self.readmit_threshold = float(readmit_threshold)
        self.window = window
        self.min_own_strikes = min_own_strikes
        self.min_own_rejections = min_own_rejections
        self.edge_strikes: int | None = None if m_e is None else int(m_e)
        self.decay = float(decay)
        self.own_weight = float(own_weight)
        self.prior = float(prior)
        self.max_tracked = max_tracked
        self._senders: dict[str, _Sender] = {}
        self._last_round: int | None = None

    # -- queries ---------------------------------------------------------------------------------------

    @property
    def excluded(self) -> frozenset[str]:
        """Every sender currently excluded."""
        return frozenset(s for s, st in self._senders.items() if st.excluded)

    def is_excluded(self, sender: str) -> bool:
        """Whether ``sender`` is excluded before aggregation."""
        state = self._senders.get(sender)
        return state is not None and state.excluded

    def score(self, sender: str) -> float:
        """R_s, or the prior for a sender we never judged."""
        state = self._senders.get(sender)
        return state.score if state is not None else self.prior

    def voter_weight(self, voter: str) -> float:
        """w_v = a_v · g_v: the voter's own standing with us times its credibility; 0 if never judged or us."""
        state = self._senders.get(voter)
        if state is None or voter == self.me:
            return 0.0
        return state.standing * (1.0 if state.credibility is None else state.credibility)

    def recent(self, sender: str) -> tuple[str, ...]:
        """Our own verdicts on ``sender`` in its last ``window`` judged rounds, oldest first (empty if untracked).

        Each is :data:`ACCEPT`, :data:`EDGE`, :data:`REJECT` or :data:`OPPOSED`: what an exclusion was decided on.
        """
        state = self._senders.get(sender)
        return () if state is None else tuple(state.recent)

    def standing(self, sender: str) -> Standing | None:
        """The sender's :class:`Standing`, or None if it is not tracked."""
        state = self._senders.get(sender)
        return None if state is None else self._standing(state)

    # -- the update ------------------------------------------------------------------------------------

    def update(self, round_: int, own: Mapping[str, bool], votes: Mapping[str, Mapping[str, bool]], *,
               ignore: Collection[str] = (), edge: Collection[str] = (),
               opposed: Collection[str] = ()) -> ReputationUpdate:
        """Fold one round of own verdicts and verified votes into the reputation.

        Args:
            round_: The round the verdicts and votes belong to; larger than the last update's.
            own: ``{sender: accepted}``, our own verdicts of that round (our own row may be included; it is
                skipped). Senders we did not judge (already excluded, late, timed out) are simply absent.
            votes: ``{voter: {sender: accepted}}``, the verified votes of that round
                (``swarm.votes.read_votes`` → ``Votes.as_map()``, where an edge or opposed row counts as not
                accepted).
                Votes by ``me``, self-votes and votes about senders we never judged are ignored.
            ignore: Voters whose votes are ignored (banned equivocators, peers outside an allow-list).
            edge: Senders we accepted as edge rows (:func:`edge_rows`): each counts as a strike, o_r(s) = 0.
                Senders not accepted in ``own`` are rejections whatever this says.
            opposed: Senders we accepted as opposed rows (:func:`opposed_rows`) and not as edge rows: each counts
                as a strike, o_r(s) = 0, that fills the window only with a rejection (never on the m_e path).

        Returns:
            The :class:`ReputationUpdate`.

        Raises:
            ValueError: ``round_`` is not larger than the last update's, or a verdict is not a bool
                (local bugs: callers pass verified data).
        """
        _check_int("round_", round_, minimum=0)
        if self._last_round is not None and round_ <= self._last_round:
            raise ValueError(f"rounds must increase, got round_={round_} after {self._last_round}")
        _check_verdicts("own", own)
        for voter, ballots in votes.items():
            _check_verdicts(f"votes[{voter!r}]", ballots)
        self._last_round = round_
        lam = self.decay
        kinds = {s: (REJECT if not a else EDGE if s in edge else OPPOSED if s in opposed else ACCEPT)
                 for s, a in own.items() if s != self.me}
        judged = {s: kind == ACCEPT for s, kind in kinds.items()}
        for sender in sorted(judged):  # own standing first: it sets the voters' weights of this round
            state = self._senders.get(sender)
            if state is None:
                state = _Sender(score=self.prior, standing=float(judged[sender]), streak=0, recent=[],
                                excluded_at=None, last_round=round_)
                self._senders[sender] = state
            else:
                state.standing = (1.0 - lam) * state.standing + lam * float(judged[sender])
            state.recent = [*state.recent, kinds[sender]][-self.window:]
            state.last_round = round_
        voters = [v for v in sorted(votes) if v not in ignore and v != self.me]
        for voter in voters:  # credibility: how rarely the voter accuses senders we accepted cleanly
            state = self._senders.get(voter)
            common = [s for s in votes[voter] if judged.get(s) and s != voter]
            if state is None or not common:
                continue
            agree = sum(1 for s in common if votes[voter][s]) / len(common)
            state.credibility = agree if state.credibility is None else (1.0 - lam) * state.credibility + lam * agree
        weights = {v: self.voter_weight(v) for v in voters}
        standings: dict[str, Standing] = {}
        newly: list[str] = []
        readmitted: list[str] = []
        for sender in sorted(self._senders):  # lapsed exclusions first: a fresh trial from this round on
            state = self._senders[sender]
            limit = self.max_exclusion_rounds
            if state.excluded_at is not None and limit is not None and round_ - state.excluded_at >= limit:
                self._readmit(state)
                readmitted.append(sender)
        for sender in sorted(self._senders):
            state = self._senders[sender]
            numerator = denominator = 0.0
            if sender in judged:
                numerator += self.own_weight * float(judged[sender])
                denominator += self.own_weight
            for voter, weight in weights.items():
                ballot = votes[voter].get(sender)
                if ballot is None or voter == sender or weight <= 0.0:
                    continue
                numerator += weight * float(ballot)
                denominator += weight
            if denominator <= 0.0:
                continue
            if sender not in judged and state.excluded:  # our exclusion stands as our rejection (module docstring)
                denominator += self.own_weight
            evidence = min(1.0, max(0.0, numerator / denominator))
            state.score = (1.0 - lam) * state.score + lam * evidence
            state.streak = state.streak + 1 if state.score < self.threshold else 0
            if state.excluded and state.score >= self.readmit_threshold:
                self._readmit(state)
                readmitted.append(sender)
            elif not state.excluded and self._own_evidence(state) and state.streak >= self.window:
                state.excluded_at = round_
                newly.append(sender)
            standings[sender] = self._standing(state)
        self._forget_excess()
        return ReputationUpdate(round=round_, standings=standings, excluded=self.excluded,
                                newly_excluded=tuple(newly), readmitted=tuple(readmitted),
                                voter_weights={v: weights[v] for v in voters if v in self._senders})

    @staticmethod
    def _readmit(state: _Sender) -> None:
        state.excluded_at = None
        state.streak = 0
        state.recent = []

    def _own_evidence(self, state: _Sender) -> bool:
        strikes = sum(1 for kind in state.recent if kind != ACCEPT)
        rejections = sum(1 for kind in state.recent if kind == REJECT)
        if strikes < self.min_own_strikes:
            return False
        if rejections >= self.min_own_rejections:
            return True
        hard = sum(1 for kind in state.recent if kind in (EDGE, REJECT))  # opposed rows never exclude alone
        return self.edge_strikes is not None and hard >= self.edge_strikes

    def _standing(self, state: _Sender) -> Standing:
        return Standing(score=state.score, own_standing=state.standing, below_streak=state.streak,
                        own_rejections=sum(1 for kind in state.recent if kind == REJECT),
                        excluded=state.excluded, excluded_at=state.excluded_at,
                        own_strikes=sum(1 for kind in state.recent if kind != ACCEPT),
                        credibility=1.0 if state.credibility is None else state.credibility)

    def _forget_excess(self) -> None:
        while len(self._senders) > self.max_tracked:
            victim = min(self._senders, key=lambda s: _eviction_key(s, self._senders[s]))
            del self._senders[victim]

    # -- persistence -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything that carries over between rounds, as plain Python values (JSON- and msgpack-safe).

        Returns:
            ``{"version": 2, "last_round": int | None, "senders": {sender: {"score", "standing", "streak",
            "recent", "excluded_at", "last_round", "credibility"}}}`` with senders sorted; ``recent`` holds
            ``"accept"``, ``"edge"``, ``"opposed"`` or ``"reject"`` per own verdict, oldest first; ``credibility``
            is None before the sender's first ballot we could compare.
        """
        return {
            "version": _STATE_VERSION,
            "last_round": self._last_round,
            "senders": {
                s: {"score": st.score, "standing": st.standing, "streak": st.streak,
                    "recent": list(st.recent), "excluded_at": st.excluded_at, "last_round": st.last_round,
                    "credibility": st.credibility}
                for s, st in sorted(self._senders.items())
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the state with one from :meth:`state_dict` (checked first; nothing changes on error).

        Args:
            state: A mapping as :meth:`state_dict` returns.

        Raises:
            ValueError: The mapping is malformed, or holds more senders than ``max_tracked`` or a longer own
                window than ``window``.
        """
        if version_of(state) != _STATE_VERSION:
            raise ValueError(f"not a Reputation state of version {_STATE_VERSION}")
        last = state.get("last_round")
        if last is not None:
            _check_int("last_round", last, minimum=0)
        raw = state.get("senders")
        if not isinstance(raw, Mapping) or len(raw) > self.max_tracked:
            raise ValueError(f"senders must be a mapping of at most max_tracked={self.max_tracked} entries")
        senders: dict[str, _Sender] = {}
        for sender, item in raw.items():
            if not isinstance(sender, str) or not isinstance(item, Mapping):
                raise ValueError(f"bad entry for sender {sender!r}")
            _check_real("score", item.get("score"), low=0.0, high=1.0)
            _check_real("standing", item.get("standing"), low=0.0, high=1.0)
            _check_int("streak", item.get("streak"), minimum=0)
            _check_int("last_round", item.get("last_round"), minimum=0)
            recent = item.get("recent")
            if (not isinstance(recent, list) or len(recent) > self.window
                    or any(x not in _KINDS for x in recent)):
                raise ValueError(f"recent of {sender!r} must be a list of at most window={self.window} of "
                                 f"{_KINDS}")
            excluded_at = item.get("excluded_at")
            if excluded_at is not None:
                _check_int("excluded_at", excluded_at, minimum=0)
            credibility = item.get("credibility")
            if credibility is not None:
                _check_real("credibility", credibility, low=0.0, high=1.0)
            senders[sender] = _Sender(score=float(item["score"]), standing=float(item["standing"]),
                                      streak=int(item["streak"]), recent=list(recent),
                                      excluded_at=excluded_at, last_round=int(item["last_round"]),
                                      credibility=None if credibility is None else float(credibility))
        self._senders = senders
        self._last_round = last

    def __repr__(self) -> str:
        return (f"Reputation(me={self.me!r}, threshold={self.threshold:g}, "
                f"readmit_threshold={self.readmit_threshold:g}, window={self.window}, "
                f"min_own_strikes={self.min_own_strikes}, min_own_rejections={self.min_own_rejections}, "
                f"edge_strikes={self.edge_strikes}, "
                f"decay={self.decay:g}, own_weight={self.own_weight:g}, prior={self.prior:g}, "
                f"max_exclusion_rounds={self.max_exclusion_rounds}, max_tracked={self.max_tracked})")


def _eviction_key(sender: str, state: _Sender) -> tuple[bool, int, str]:
    """Forget non-excluded senders first, the least recently judged first, ties by PeerID."""
    return state.excluded, state.last_round, sender


def _check_verdicts(name: str, verdicts: Mapping[str, bool]) -> None:
    if not isinstance(verdicts, Mapping):
        raise ValueError(f"{name} must be a mapping sender -> bool, got {type(verdicts).__name__}")
    for sender, accepted in verdicts.items():
        if not isinstance(sender, str) or type(accepted) is not bool:
            raise ValueError(f"{name} must map str senders to bools, got {sender!r}: {accepted!r}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {name}={value!r}")


def _check_real(name: str, value: object, *, low: float, high: float, open_low: bool = False,
                open_high: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (v > low if open_low else v >= low) and (v < high if open_high else v <= high)
    if not ok:
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        raise ValueError(f"{name} must be a finite number in {lo}{low:g}, {high:g}{hi}, got {name}={value!r}")
