"""VoteBook: what a peer publishes, what it folds, and that a smear changes only what is published."""

from __future__ import annotations

import asyncio

import pytest

from p2p_guard.attacks.wire import VoteSmear
from p2p_guard.guard.reputation import Reputation
from p2p_guard.identity import Identity
from p2p_guard.protocol.reasons import RejectReason
from p2p_guard.protocol.votes import EDGE_REASON, OPPOSED_REASON, Votes, open_votes, sign_votes
from p2p_guard.swarm.records import votes_key
from p2p_guard.swarm.standing import VoteBook, rejected_by
from p2p_guard.swarm.verdicts import SenderVerdict
from p2p_guard.swarm.votes import vote_verdicts

RUN = "run-a"


class MemoryDHT:
    """The two SwarmDHT calls VoteBook uses, in memory."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, bytes]] = {}

    async def store(self, key: str, subkey: str, value: bytes, ttl_s: float) -> bool:
        self.values.setdefault(key, {})[subkey] = value
        return True

    async def read(self, key: str) -> dict[str, bytes]:
        return dict(self.values.get(key, {}))


def _ids(count: int) -> list[Identity]:
    return [Identity.from_seed(bytes([i + 1]) * 32) for i in range(count)]


def _verdicts(accepted: dict[str, bool]) -> list[SenderVerdict]:
    return [SenderVerdict(s, 0, a, "accepted" if a else "outlier") for s, a in accepted.items()]


def test_published_votes_are_signed_ours_and_exclude_our_own_row() -> None:
    me, a, b = _ids(3)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    asyncio.run(book.publish(4, _verdicts({me.peer_id_b58: True, a.peer_id_b58: True, b.peer_id_b58: False})))
    stored = dht.values[votes_key(RUN, 4)]
    assert list(stored) == [me.peer_id_b58]
    expected = vote_verdicts(_verdicts({a.peer_id_b58: True, b.peer_id_b58: False}))
    assert stored[me.peer_id_b58] == sign_votes(RUN, 4, expected, me)


def test_smear_rewrites_only_what_is_published() -> None:
    me, a, b = _ids(3)
    dht = MemoryDHT()
    smear = VoteSmear()
    book = VoteBook(dht, RUN, me, smear=lambda v: smear.smear_votes(v, {me.peer_id_b58}))  # type: ignore[arg-type]
    published = asyncio.run(book.publish(0, _verdicts({a.peer_id_b58: True, b.peer_id_b58: True})))
    assert [(v.sender_b58, v.accepted) for v in published] == sorted(
        [(a.peer_id_b58, False), (b.peer_id_b58, False)])
    update = asyncio.run(book.fold(0))
    assert update is not None
    assert update.standings[a.peer_id_b58].own_standing == 1.0  # our true verdicts, not the smear


def test_fold_uses_last_rounds_votes_and_excludes_after_the_window() -> None:
    me, honest, attacker = _ids(3)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    other = VoteBook(dht, RUN, honest)  # type: ignore[arg-type]
    verdicts = _verdicts({me.peer_id_b58: True, honest.peer_id_b58: True, attacker.peer_id_b58: False})
    excluded_after = []
    for r in range(4):
        asyncio.run(other.publish(r, verdicts))
        asyncio.run(book.publish(r, verdicts))
        update = asyncio.run(book.fold(r))
        assert update is not None and update.round == r
        excluded_after.append(sorted(update.excluded))
    # prior 0.5, decay 0.5: scores 0.25, 0.125, 0.0625, 0.03125 (< 0.5 four rounds running, 4 own rejections).
    assert excluded_after == [[], [], [], [attacker.peer_id_b58]]
    assert book.excluded == frozenset({attacker.peer_id_b58})
    assert honest.peer_id_b58 not in book.excluded


def test_fold_of_a_round_we_did_not_vote_in_is_none_and_changes_nothing() -> None:
    me, a = _ids(2)
    book = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    assert asyncio.run(book.fold(3)) is None
    asyncio.run(book.publish(5, _verdicts({a.peer_id_b58: False})))
    assert asyncio.run(book.fold(4)) is None
    assert book.reputation.standing(a.peer_id_b58) is None


def test_votes_outside_the_allow_list_and_of_ignored_voters_do_not_count() -> None:
    me, friend, outsider = _ids(3)
    dht = MemoryDHT()
    allowed = frozenset({me.peer_id_b58, friend.peer_id_b58})
    book = VoteBook(dht, RUN, me, reputation=Reputation(me=me.peer_id_b58), allowed=allowed)  # type: ignore[arg-type]
    # The outsider votes the friend out; we accept the friend and have judged the outsider well once.
    asyncio.run(VoteBook(dht, RUN, outsider).publish(0, _verdicts({friend.peer_id_b58: False})))  # type: ignore[arg-type]
    asyncio.run(book.publish(0, _verdicts({friend.peer_id_b58: True, outsider.peer_id_b58: True})))
    update = asyncio.run(book.fold(0))
    assert update is not None
    assert update.standings[friend.peer_id_b58].score == 0.75  # 0.5 → 0.5·0.5 + 0.5·1 (only our own vote)


def test_late_timed_out_or_stale_honest_peers_are_never_excluded() -> None:
    """A sender we (and the voters) reject only as late, timed out, stale or unavailable is not judged at all."""
    me, voter, slow, attacker = _ids(4)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    other = VoteBook(dht, RUN, voter)  # type: ignore[arg-type]
    reasons = ["late_commit", "timeout", "stale_base", "unavailable", "wrong_round", "late_commit"]
    for r, reason in enumerate(reasons):
        verdicts = [SenderVerdict(voter.peer_id_b58, 0, True, "accepted"),
                    SenderVerdict(slow.peer_id_b58, 0, False, reason),
                    SenderVerdict(attacker.peer_id_b58, 0, False, "outlier")]
        asyncio.run(other.publish(r, verdicts))
        asyncio.run(book.publish(r, verdicts))
        update = asyncio.run(book.fold(r))
        assert update is not None
    assert book.excluded == frozenset({attacker.peer_id_b58})
    assert book.reputation.standing(slow.peer_id_b58) is None  # never judged: no evidence either way


def test_rejections_others_can_cause_by_copying_are_no_evidence_against_the_copied_peer() -> None:
    """``mimic``: two attackers copy an honest peer, so the guard rejects it as ``duplicate`` or ``colluding``.

    Those rows stay rejected, but neither our own verdicts nor the voters' count them: with one sporadic outlier
    rejection among them, the copied peer is struck once (its score below 1/2 for one round) and never excluded,
    where counting them struck it every round and excluded it at round 3 (as the attacker is). The attacker rejected for its
    content is excluded as before.
    """
    me, voter, copied, attacker = _ids(4)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    other = VoteBook(dht, RUN, voter)  # type: ignore[arg-type]
    reasons = ["duplicate", "colluding", "outlier", "colluding", "duplicate", "colluding"]
    for r, reason in enumerate(reasons):
        verdicts = [SenderVerdict(voter.peer_id_b58, 0, True, "accepted"),
                    SenderVerdict(copied.peer_id_b58, 0, False, reason),
                    SenderVerdict(attacker.peer_id_b58, 0, False, "outlier")]
        asyncio.run(other.publish(r, verdicts))
        asyncio.run(book.publish(r, verdicts))
        update = asyncio.run(book.fold(r))
        assert update is not None
        assert (copied.peer_id_b58 in update.standings) == (reason == "outlier")  # judged only for its content
    assert book.excluded == frozenset({attacker.peer_id_b58})
    standing = book.reputation.standing(copied.peer_id_b58)
    assert standing is not None
    assert (standing.score, standing.own_strikes, standing.own_rejections, standing.below_streak) == (0.25, 1, 1, 1)


def _judged(sender: str, accepted: bool, norm: float, cosine: float = 0.5, record: float | None = None) -> SenderVerdict:
    return SenderVerdict.judged(sender, 0, accepted, None if accepted else "outlier", "", norm, cosine, 1.0, 0,
                                cosine if record is None else record)


def test_an_opposed_row_is_published_as_opposed_struck_and_kept_across_a_checkpoint() -> None:
    """Cosines 0.5, −0.2 (accepted, record −0.2: opposed), −0.3 with record 0.2 (accepted: not opposed), −0.9
    (rejected), and −0.6 on an accepted edge row (edge, not opposed).

    The opposed row is published as accepted with reason ``opposed`` (a reader counts it as a strike); our own
    reputation strikes it without a rejection; a checkpoint taken between ``remember`` and ``fold`` carries it.
    """
    me, a, away, rejected, long_row, drifted = _ids(6)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    verdicts = [_judged(me.peer_id_b58, True, 1.0, -0.5), _judged(a.peer_id_b58, True, 1.1),
                _judged(away.peer_id_b58, True, 0.9, -0.2), _judged(rejected.peer_id_b58, False, 1.0, -0.9),
                _judged(long_row.peer_id_b58, True, 2.6, -0.6), _judged(drifted.peer_id_b58, True, 1.0, -0.3, 0.2)]
    published = asyncio.run(book.publish(0, verdicts))
    assert {v.sender_b58: (v.accepted, v.reason) for v in published} == {
        a.peer_id_b58: (True, ""), away.peer_id_b58: (True, OPPOSED_REASON),
        rejected.peer_id_b58: (False, "outlier"), long_row.peer_id_b58: (True, EDGE_REASON),
        drifted.peer_id_b58: (True, "")}
    state = book.state_dict()
    assert state["pending"]["opposed"] == [away.peer_id_b58]
    resumed = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    resumed.load_state_dict(state)
    update = asyncio.run(resumed.fold(0))
    assert update is not None
    struck = update.standings[away.peer_id_b58]
    assert (struck.own_standing, struck.own_strikes, struck.own_rejections, struck.score) == (0.0, 1, 0, 0.25)
    assert update.standings[a.peer_id_b58].own_strikes == 0


def test_a_checkpoint_from_before_opposed_rows_loads_and_a_bad_opposed_list_is_refused() -> None:
    me, a = _ids(2)
    book = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    pending = {"round": 4, "judged": {a.peer_id_b58: True}, "edge": []}
    book.load_state_dict({"version": 1, "reputation": Reputation().state_dict(), "pending": pending})
    assert book.state_dict()["pending"] == {**pending, "opposed": []}
    for bad in ({**pending, "opposed": "x"}, {**pending, "opposed": ["someone we did not accept"]}):
        with pytest.raises(ValueError, match="opposed"):
            book.load_state_dict({"version": 1, "reputation": Reputation().state_dict(), "pending": bad})
    assert book.state_dict()["pending"] == {**pending, "opposed": []}


def test_an_edge_row_is_published_as_edge_and_struck_in_our_reputation() -> None:
    """Norms 1.0 (us), 1.1, 0.9, 2.6 (accepted), 4.0 (rejected): median 1.1, limit 2.53 → the 2.6 row is an edge row.

    It is published as accepted with reason ``edge`` (a reader counts it as a strike), and our own reputation
    strikes it too (own standing 0) without counting a rejection.
    """
    me, a, b, long_row, rejected = _ids(5)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    verdicts = [_judged(me.peer_id_b58, True, 1.0), _judged(a.peer_id_b58, True, 1.1), _judged(b.peer_id_b58, True, 0.9),
                _judged(long_row.peer_id_b58, True, 2.6), _judged(rejected.peer_id_b58, False, 4.0)]
    published = asyncio.run(book.publish(0, verdicts))
    assert {v.sender_b58: (v.accepted, v.reason) for v in published} == {
        a.peer_id_b58: (True, ""), b.peer_id_b58: (True, ""), long_row.peer_id_b58: (True, EDGE_REASON),
        rejected.peer_id_b58: (False, "outlier")}
    votes = open_votes(dht.values[votes_key(RUN, 0)][me.peer_id_b58], run_id=RUN, round_=0)
    assert isinstance(votes, Votes)
    assert votes.as_map() == {a.peer_id_b58: True, b.peer_id_b58: True, long_row.peer_id_b58: False,
                              rejected.peer_id_b58: False}
    update = asyncio.run(book.fold(0))
    assert update is not None
    edge = update.standings[long_row.peer_id_b58]
    assert (edge.own_standing, edge.own_strikes, edge.own_rejections, edge.score) == (0.0, 1, 0, 0.25)
    assert update.standings[a.peer_id_b58].own_strikes == 0
    assert update.standings[rejected.peer_id_b58].own_rejections == 1


def test_rejected_us_counts_every_voter_whose_aggregate_lacks_our_row() -> None:
    """Copyable rejections (``duplicate``, ``colluding``) count, as the circumstantial ones do.

    They are no evidence against us (the reputation leaves them out), but the voter's aggregate lacks our row all
    the same, which is what ``MixSchedule.disturbed`` asks. An accepted edge row, our own vote and an ignored
    voter's do not count, and a fold that folds nothing resets the count.
    """
    me, a, b, c, d, e, banned = _ids(7)
    dht = MemoryDHT()
    book = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    ballots = {a: (False, "duplicate"), b: (False, "colluding"), c: (False, "outlier"), d: (False, "late_commit"),
               e: (True, EDGE_REASON), banned: (False, "outlier")}
    for voter, (accepted, reason) in ballots.items():
        asyncio.run(VoteBook(dht, RUN, voter).publish(  # type: ignore[arg-type]
            0, [SenderVerdict(me.peer_id_b58, 0, accepted, reason)]))
    verdicts = [SenderVerdict(v.peer_id_b58, 0, True, "accepted") for v in ballots]
    asyncio.run(book.publish(0, [SenderVerdict(me.peer_id_b58, 0, False, "outlier"), *verdicts]))
    asyncio.run(book.fold(0, ignore=frozenset({banned.peer_id_b58})))
    assert book.rejected_us == 4  # a, b, c, d
    from p2p_guard.swarm.mix_schedule import MixSchedule
    assert MixSchedule(adaptive=True).disturbed([], rejected_us=book.rejected_us)
    assert asyncio.run(book.fold(1)) is None  # nothing of ours to fold in round 1
    assert book.rejected_us == 0  # not round 0's count again


def test_rejected_by_counts_copyable_reasons_and_leaves_out_ourselves_and_the_ignored() -> None:
    me, a, b = _ids(3)
    votes = [open_votes(sign_votes(RUN, 0, vote_verdicts([SenderVerdict(me.peer_id_b58, 0, False, reason)]), who),
                        run_id=RUN) for who, reason in ((a, "duplicate"), (b, "colluding"), (me, "outlier"))]
    assert all(isinstance(v, Votes) for v in votes)
    assert rejected_by(votes, me.peer_id_b58) == 2  # type: ignore[arg-type]
    assert rejected_by(votes, me.peer_id_b58, ignore={a.peer_id_b58}) == 1  # type: ignore[arg-type]
    assert rejected_by(votes, a.peer_id_b58) == 0  # type: ignore[arg-type]  # nobody judged a


def test_a_row_at_twice_the_median_is_not_an_edge_row() -> None:
    """Norms 1.0 (us), 1.1, 0.9, 2.5 (accepted), 4.0 (rejected): limit 2.3 × 1.1 = 2.53, so the 2.5 row is clean."""
    me, a, b, long_row, rejected = _ids(5)
    book = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    verdicts = [_judged(me.peer_id_b58, True, 1.0), _judged(a.peer_id_b58, True, 1.1), _judged(b.peer_id_b58, True, 0.9),
                _judged(long_row.peer_id_b58, True, 2.5), _judged(rejected.peer_id_b58, False, 4.0)]
    published = asyncio.run(book.publish(0, verdicts))
    assert {v.sender_b58: (v.accepted, v.reason) for v in published}[long_row.peer_id_b58] == (True, "")
    update = asyncio.run(book.fold(0))
    assert update is not None
    st = update.standings[long_row.peer_id_b58]
    assert (st.own_standing, st.own_strikes, st.own_rejections, st.score) == (1.0, 0, 0, 0.75)


def test_a_sender_also_rejected_in_the_round_is_no_opposed_or_edge_row_and_the_checkpoint_loads() -> None:
    """A sender with two verdicts in one round (a carried late payload with bad bytes, rejected, and its fresh row,
    accepted at an opposed cosine or as an edge row) is published as rejected (``vote_verdicts``) and judged as
    rejected; the pending state must not list it as an opposed or edge row, or the checkpoint would not load
    (``load_state_dict`` refuses such rows we did not accept, and the peer's reputation would start empty).
    """
    me, a, b, away, long_row = _ids(5)
    book = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    verdicts = [_judged(me.peer_id_b58, True, 1.0), _judged(a.peer_id_b58, True, 1.1), _judged(b.peer_id_b58, True, 0.9),
                SenderVerdict.rejected(away.peer_id_b58, 0, RejectReason.DIGEST_MISMATCH, "late payload"),
                _judged(away.peer_id_b58, True, 1.0, -0.4),
                SenderVerdict.rejected(long_row.peer_id_b58, 0, RejectReason.DIGEST_MISMATCH, "late payload"),
                _judged(long_row.peer_id_b58, True, 2.6)]
    published = book.remember(0, verdicts)
    assert {v.sender_b58: v.accepted for v in published}[away.peer_id_b58] is False
    state = book.state_dict()
    assert state["pending"]["judged"][away.peer_id_b58] is False
    assert (state["pending"]["opposed"], state["pending"]["edge"]) == ([], [])
    resumed = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
