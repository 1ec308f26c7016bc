"""Unit tests of ``guard/reputation.py``: known answers, exclusion, the vote_smear property, persistence.

The hard requirement (issue 3, item 6): votes can never ban anyone on their own. The simulations below run
5 honest peers against 4 Byzantine voters (a Byzantine majority of the other voters) for 20 rounds and
check that no honest peer ever excludes an honest sender.
"""

from __future__ import annotations

import json

import pytest

from p2p_guard.guard.reputation import Reputation, ReputationUpdate, Standing

S = "sender"
VOTERS = [f"voter{i}" for i in range(5)]


def trusted_voters_round(rep: Reputation, round_: int, own: dict[str, bool],
                         ballots: dict[str, bool] | None = None) -> ReputationUpdate:
    """One round in which we accept every voter's own update (weight 1) and each votes ``ballots``."""
    judged = {v: True for v in VOTERS} | own
    votes = {v: dict(ballots) for v in VOTERS} if ballots is not None else {}
    return rep.update(round_, judged, votes)


class TestKnownAnswers:
    def test_first_acceptance(self) -> None:
        rep = Reputation()
        update = rep.update(0, {S: True}, {})
        assert update.standings[S] == Standing(score=0.75, own_standing=1.0, below_streak=0, own_rejections=0,
                                               excluded=False)

    def test_own_rejections_only(self) -> None:
        """R: 0.5 → 0.25 → 0.125 → 0.0625; excluded once below θ for k = 3 rounds with 3 ≥ m rejections."""
        rep = Reputation()
        scores, excluded = [], []
        for r in range(3):
            update = rep.update(r, {S: False}, {})
            scores.append(update.standings[S].score)
            excluded.append(update.newly_excluded)
        assert scores == [0.25, 0.125, 0.0625]
        assert excluded == [(), (), (S,)]
        assert rep.is_excluded(S)
        assert rep.excluded == frozenset({S})
        assert rep.standing(S) == Standing(0.0625, 0.0, 3, 3, True, excluded_at=2)

    def test_own_standing_is_an_average_of_own_verdicts(self) -> None:
        rep = Reputation()
        rep.update(0, {S: False}, {})
        rep.update(1, {S: True}, {})
        rep.update(2, {S: True}, {})
        assert rep.voter_weight(S) == 0.75  # 0 → 0.5 → 0.75

    def test_votes_speed_up_exclusion_when_own_evidence_is_mixed(self) -> None:
        """Own verdicts reject, accept, reject (2 of 3); five trusted voters reject every round.

        With votes: e = 0, 1/6, 0 → R = 0.25, 0.208333…, 0.104166… (below θ three times) → excluded.
        Without votes: R = 0.25, 0.625, 0.3125 → the streak breaks → not excluded.
        """
        with_votes, alone = Reputation(), Reputation()
        for r, own in enumerate([False, True, False]):
            update = trusted_voters_round(with_votes, r, {S: own}, {S: False})
            alone_update = alone.update(r, {S: own}, {})
        assert update.standings[S].score == pytest.approx((0.25 / 2 + (1 / 6) / 2) / 2, rel=1e-12)
        assert update.newly_excluded == (S,)
        assert alone_update.standings[S].score == 0.3125
        assert not alone.is_excluded(S)

    def test_trusted_voters_lower_confidence(self) -> None:
        """Our guard rejects S every round, everyone we trust accepts it: e = 5/6, S is never excluded."""
        rep = Reputation()
        for r in range(10):
            update = trusted_voters_round(rep, r, {S: False}, {S: True})
        assert update.standings[S].score == pytest.approx(5 / 6, abs=1e-3)
        assert update.standings[S].own_rejections == 3
        assert not rep.is_excluded(S)

    def test_voter_we_rejected_weighs_nothing(self) -> None:
        rep = Reputation()
        rep.update(0, {S: True, "liar": False}, {"liar": {S: False}})
        assert rep.voter_weight("liar") == 0.0
        assert rep.score(S) == 0.75  # only our acceptance counted

    def test_unknown_voters_and_unknown_senders(self) -> None:
        """A voter we never judged weighs 0 (Sybils); votes about senders we never judged are ignored."""
        rep = Reputation()
        update = rep.update(0, {S: True}, {f"sybil{i}": {S: False, "stranger": False} for i in range(100)})
        assert update.standings[S].score == 0.75
        assert rep.standing("stranger") is None
        assert rep.score("stranger") == 0.5  # the prior
        assert rep.voter_weight("sybil0") == 0.0

    def test_self_votes_own_row_me_and_ignored_voters(self) -> None:
        rep = Reputation(me="me")
        rep.update(0, {"me": False, S: True, "friend": True}, {})
        assert rep.standing("me") is None  # our own row is never tracked
        assert rep.voter_weight("me") == 0.0
        votes = {"me": {S: False}, S: {S: True}, "friend": {S: False}}
        update = rep.update(1, {}, votes, ignore={"friend"})
        assert S not in update.standings  # no usable evidence: votes by us, by S on S, by an ignored voter
        update = rep.update(2, {}, votes)
        assert update.standings[S].score == 0.75 * 0.5  # only friend's vote counted: e = 0

    def test_absent_sender_keeps_its_state(self) -> None:
        rep = Reputation()
        rep.update(0, {S: False}, {})
        rep.update(5, {"other": True}, {})
        assert rep.standing(S) == Standing(0.25, 0.0, 1, 1, False)

    def test_readmission_by_trusted_votes(self) -> None:
        """Excluded at R = 0.0625; trusted voters accept it, we no longer judge it: 0.53 → 0.77 ≥ θ_in."""
        rep = Reputation()
        for r in range(3):
            trusted_voters_round(rep, r, {S: False}, {S: False})
        assert rep.is_excluded(S)
        update = trusted_voters_round(rep, 3, {}, {S: True})
        assert update.standings[S].score == 0.53125
        assert rep.is_excluded(S)
        update = trusted_voters_round(rep, 4, {}, {S: True})
        assert update.readmitted == (S,)
        assert update.standings[S] == Standing(0.765625, 0.0, 0, 0, False)

    def test_excluded_stays_excluded_while_voted_down(self) -> None:
        rep = Reputation(max_exclusion_rounds=None)
        for r in range(20):
            trusted_voters_round(rep, r, {S: False} if r < 3 else {}, {S: False})
        assert rep.is_excluded(S)

    def test_exclusion_lapses_after_t_rounds_then_a_fresh_trial(self) -> None:
        """Excluded by the update of round 2; with T = 10 retried at round 12, excluded again at round 14.

        Round 12's own verdict was not given (S was still excluded while we judged), so the new trial holds
        two own rejections (rounds 13 and 14), enough with m = 2.
        """
        rep = Reputation()
        events = []
        for r in range(16):
            update = trusted_voters_round(rep, r, {S: False} if not rep.is_excluded(S) else {}, {S: False})
            events += [(r, "out")] * len(update.newly_excluded) + [(r, "in")] * len(update.readmitted)
        assert events == [(2, "out"), (12, "in"), (14, "out")]
        assert rep.standing(S) == Standing(rep.score(S), 0.0, 4, 2, True, excluded_at=14)


class TestOwnEvidenceIsRequired:
    def test_accusations_alone_never_exclude(self) -> None:
        """Everyone we trust accuses S for 50 rounds, our guard accepts S: score far below θ, not excluded."""
        rep = Reputation(own_weight=0.01)
        for r in range(50):
            update = trusted_voters_round(rep, r, {S: True}, {S: False})
            assert S not in update.excluded
        assert update.standings[S].score < 0.01
        assert update.standings[S].below_streak == 50

    def test_one_false_positive_per_window_is_not_enough(self) -> None:
        rep = Reputation(own_weight=0.01)
        for r in range(30):
            trusted_voters_round(rep, r, {S: r % 3 != 0}, {S: False})
            assert not rep.is_excluded(S)


def simulate(*, rounds: int, honest: int, smearers: int, bad_senders: int, own_weight: float,
             false_positives: bool) -> tuple[list[str], list[str], list[str], dict[str, Reputation]]:
    """A swarm's reputations over ``rounds``, with honest guards that accept honest and smearers' updates.

    - honest peers h0…: their guards accept every honest sender and every smearer (whose updates are
      honest, so their votes get full weight: the strongest smear), and reject the bad senders;
      with ``false_positives``, honest peer i also rejects honest sender (i + r) mod honest in rounds
      r ≡ 0 (mod 3): a sporadic guard error, never two within one window for the same pair;
    - smearers z0…: vote_smear: accuse every non-Byzantine sender, accept every Byzantine one;
    - bad senders x0…: send updates every honest guard rejects, and smear too.
    """
    hon = [f"h{i}" for i in range(honest)]
    smear = [f"z{i}" for i in range(smearers)]
    bad = [f"x{i}" for i in range(bad_senders)]
    byzantine = set(smear) | set(bad)
    senders = hon + smear + bad
    reps = {h: Reputation(me=h, own_weight=own_weight) for h in hon}
    for r in range(rounds):
        own = {}
        for i, h in enumerate(hon):
            verdicts = {s: s not in bad for s in senders}
            if false_positives and r % 3 == 0:
                victim = hon[(i + r) % honest]
                if victim != h:
                    verdicts[victim] = False
            own[h] = verdicts
        votes = {h: {s: a for s, a in own[h].items() if s != h} for h in hon}
        votes |= {z: {s: s in byzantine for s in senders if s != z} for z in smear + bad}
        for h in hon:
            reps[h].update(r, own[h], votes)
    return hon, smear, bad, reps


class TestVoteSmear:
    @pytest.mark.parametrize("own_weight", [1.0, 0.1])
    @pytest.mark.parametrize("false_positives", [False, True])
    def test_byzantine_majority_of_voters_excludes_no_honest_peer(self, own_weight: float,
                                                                   false_positives: bool) -> None:
        """4 Byzantine voters vs 5 honest peers, 20 rounds: no honest sender excluded by any honest peer."""
        hon, smear, _, reps = simulate(rounds=20, honest=5, smearers=4, bad_senders=0, own_weight=own_weight,
                                       false_positives=false_positives)
        for h in hon:
            assert reps[h].excluded.isdisjoint(hon), f"{h} excluded {sorted(reps[h].excluded)}"
            assert reps[h].excluded == frozenset()  # the smearers' own updates are honest, too
        if own_weight == 0.1:
            # The smear does drag honest scores below θ for the whole run: only own evidence saves them.
            # For h0 judging h1: e = (0.1 + 3 honest accepts) / (0.1 + 7) ≈ 0.44 < 0.5.
            standing = reps["h0"].standing("h1")
            assert standing is not None
            assert standing.score < reps["h0"].threshold
            assert standing.below_streak >= 17

    def test_byzantine_senders_are_excluded_and_honest_kept(self) -> None:
        """2 bad senders among 4 smearers: every honest peer excludes exactly the bad ones, after 3 rounds."""
        hon, _, bad, reps = simulate(rounds=3, honest=5, smearers=2, bad_senders=2, own_weight=1.0,
                                     false_positives=False)
        for h in hon:
            assert reps[h].excluded == frozenset(bad)
        hon, _, bad, reps = simulate(rounds=20, honest=5, smearers=2, bad_senders=2, own_weight=1.0,
                                     false_positives=True)
        for h in hon:
            assert reps[h].excluded == frozenset(bad)
            assert all(reps[h].voter_weight(x) == 0.0 for x in bad)


def entry(**changes: object) -> dict[str, object]:
    """A valid sender entry of a state dict, with ``changes``."""
    valid: dict[str, object] = {"score": 0.5, "standing": 0.0, "streak": 0, "recent": [],
                                "excluded_at": None, "last_round": 0}
    return valid | changes


class TestPersistence:
    def run(self, rep: Reputation, rounds: range) -> list[ReputationUpdate]:
        return [trusted_voters_round(rep, r, {S: r % 2 == 0, "t": r % 5 != 0}, {S: False, "t": True})
                for r in rounds]

    def test_round_trip_continues_identically(self) -> None:
        a = Reputation()
        self.run(a, range(4))
        state = json.loads(json.dumps(a.state_dict()))  # plain values only
        b = Reputation()
        b.load_state_dict(state)
        assert b.state_dict() == a.state_dict()
        assert self.run(a, range(4, 9)) == self.run(b, range(4, 9))
        assert a.state_dict() == b.state_dict()
        with pytest.raises(ValueError, match="rounds must increase"):
            b.update(8, {}, {})

    def test_determinism_independent_of_input_order(self) -> None:
        a, b = Reputation(), Reputation()
        for r in range(6):
            own = {S: r % 2 == 0, "t": True, "u": r != 3}
            votes = {"t": {S: False, "u": True}, "u": {S: True, "t": False}}
            ua = a.update(r, own, votes)
            ub = b.update(r, dict(reversed(own.items())),
                          {v: dict(reversed(x.items())) for v, x in reversed(votes.items())})
            assert ua == ub
            assert list(ua.standings) == sorted(ua.standings)
        assert a.state_dict() == b.state_dict()

    @pytest.mark.parametrize(
        "state",
        [
            {},
            {"version": 2, "last_round": None, "senders": {}},
            {"version": 1, "last_round": -1, "senders": {}},
            {"version": 1, "last_round": None, "senders": []},
            {"version": 1, "last_round": 0, "senders": {S: entry(score=1.5)}},
            {"version": 1, "last_round": 0, "senders": {S: entry(recent=[True] * 4)}},
            {"version": 1, "last_round": 0, "senders": {S: entry(recent=[1])}},
            {"version": 1, "last_round": 0, "senders": {S: entry(excluded_at=-1)}},
            {"version": 1, "last_round": 0, "senders": {S: entry(excluded_at=True)}},
            {"version": 1, "last_round": 0, "senders": {S: entry(streak=-1)}},
        ],
        ids=["empty", "version", "round", "senders-list", "score", "window", "recent-int",
             "excluded-negative", "excluded-bool", "streak"],
    )
    def test_load_refuses_malformed_and_keeps_state(self, state: dict[str, object]) -> None:
        rep = Reputation()
        self.run(rep, range(2))
        before = rep.state_dict()
        with pytest.raises(ValueError):  # noqa: PT011 - one message per field
            rep.load_state_dict(state)
        assert rep.state_dict() == before

    def test_max_tracked_forgets_least_recent_non_excluded(self) -> None:
        rep = Reputation(max_tracked=2)
        for r in range(3):
            rep.update(r, {"bad": False}, {})
        rep.update(3, {"a": True}, {})
        rep.update(4, {"b": True}, {})
        assert set(rep.state_dict()["senders"]) == {"bad", "b"}
        assert rep.is_excluded("bad")


class TestChecks:
    @pytest.mark.parametrize(
        "kwargs",
        [
            {"me": 3},
            {"threshold": 0.0},
            {"threshold": 1.0},
            {"threshold": float("nan")},
            {"readmit_threshold": 0.4},
            {"readmit_threshold": 1.1},
            {"window": 0},
            {"window": 2.0},
            {"min_own_rejections": 0},
            {"min_own_rejections": 4},
            {"decay": 0.0},
            {"decay": 1.5},
            {"own_weight": 0.0},
            {"own_weight": float("inf")},
            {"prior": -0.1},
            {"prior": True},
            {"max_tracked": 0},
            {"max_exclusion_rounds": 0},
        ],
    )
    def test_constructor_rejects(self, kwargs: dict[str, object]) -> None:
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=name):
            Reputation(**kwargs)  # type: ignore[arg-type]

    def test_defaults_and_repr(self) -> None:
        rep = Reputation(me="me")
        assert repr(rep) == ("Reputation(me='me', threshold=0.5, readmit_threshold=0.75, window=3, "
                             "min_own_rejections=2, decay=0.5, own_weight=1, prior=0.5, "
                             "max_exclusion_rounds=10, max_tracked=4096)")

    @pytest.mark.parametrize(
        ("own", "votes"),
        [({S: 1}, {}), ({3: True}, {}), ({}, {"v": {S: None}}), ({}, {"v": [S]})],
        ids=["int-verdict", "int-sender", "none-vote", "list-votes"],
    )
    def test_update_rejects_bad_verdicts(self, own: dict[object, object], votes: dict[str, object]) -> None:
        with pytest.raises(ValueError):  # noqa: PT011
            Reputation().update(0, own, votes)  # type: ignore[arg-type]

    def test_update_rejects_bad_round(self) -> None:
        rep = Reputation()
        with pytest.raises(ValueError, match="round_"):
            rep.update(-1, {}, {})
        rep.update(2, {}, {})
        with pytest.raises(ValueError, match="rounds must increase"):
            rep.update(2, {}, {})
