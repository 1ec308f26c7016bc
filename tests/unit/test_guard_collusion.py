"""The collusion stage: per-(receiver, sender) residual histories across rounds, and its rejections."""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.guard import AggregationContext, SemanticGuard
from p2p_guard.guard.collusion import COLLUDING, CollusionCheck, ResidualHistory, group_score


def ctx(round_: int, n: int = 4, own: int | None = 0) -> AggregationContext:
    return AggregationContext(senders=tuple(f"p{i}" for i in range(n)), round=round_,
                              generator=torch.Generator().manual_seed(0), own_index=own)


E = torch.eye(4, dtype=torch.float64)


class TestResidualHistory:
    def test_sum_then_decay(self) -> None:
        h = ResidualHistory(decay=0.5)
        out, terms = h.add("me", "a", 0, E[0])
        assert torch.equal(out, E[0])
        assert terms == 1
        out, terms = h.add("me", "a", 1, E[1])  # 0.5·e0 + e1
        assert torch.equal(out, torch.tensor([0.5, 1.0, 0.0, 0.0], dtype=torch.float64))
        assert terms == 2

    def test_second_call_in_a_round_replaces_that_rounds_term(self) -> None:
        h = ResidualHistory()
        h.add("me", "a", 0, E[0])
        h.add("me", "a", 1, E[1])
        out, terms = h.add("me", "a", 1, E[2])  # e0 + e2, not e0 + e1 + e2
        assert torch.equal(out, E[0] + E[2])
        assert terms == 2
        out, terms = h.add("me", "a", 0, E[3])  # a stale round changes nothing
        assert torch.equal(out, E[0] + E[2])
        assert terms == 2

    def test_first_round_called_twice(self) -> None:
        h = ResidualHistory()
        h.add("me", "a", 3, E[0])
        out, terms = h.add("me", "a", 3, E[1])
        assert torch.equal(out, E[1])
        assert terms == 1

    def test_keyed_by_receiver_and_sender(self) -> None:
        h = ResidualHistory()
        h.add("r1", "a", 0, E[0])
        out, _ = h.add("r2", "a", 0, E[1])
        assert torch.equal(out, E[1])
        assert len(h) == 2

    def test_bounded_least_recent_forgotten(self) -> None:
        h = ResidualHistory(max_entries=2)
        h.add("me", "a", 0, E[0])
        h.add("me", "b", 0, E[1])
        h.add("me", "a", 1, E[0])  # a is now the most recent
        h.add("me", "c", 1, E[2])  # b goes
        assert len(h) == 2
        out, terms = h.add("me", "b", 2, E[3])
        assert torch.equal(out, E[3])
        assert terms == 1

    def test_state_dict_round_trip(self) -> None:
        h = ResidualHistory()
        h.add("me", "a", 0, E[0])
        h.add("me", "a", 1, E[1])
        g = ResidualHistory()
        g.load_state_dict(h.state_dict())
        # a later round goes on exactly; the history before round 1 was not saved, so round 1 again changes nothing
        assert torch.equal(g.add("me", "a", 1, E[2])[0], E[0] + E[1])
        out, terms = g.add("me", "a", 2, E[3])
        assert torch.equal(out, E[0] + E[1] + E[3])
        assert terms == 3
        with pytest.raises(ValueError, match="version"):
            g.load_state_dict({"version": 99, "entries": []})

    def test_bounded_in_bytes_least_recent_forgotten(self) -> None:
        # a (4,) float64 vector is 32 bytes: one pair after one round 32, after two rounds 64 (previous + current)
        h = ResidualHistory(max_bytes=96)
        h.add("me", "a", 0, E[0])
        h.add("me", "b", 0, E[1])
        h.add("me", "c", 0, E[2])
        assert (len(h), h.nbytes) == (3, 96)
        h.add("me", "a", 1, E[0])  # a now holds 64 bytes and is the most recent: the oldest, b, goes (128 → 96)
        assert (len(h), h.nbytes) == (2, 96)
        out, terms = h.add("me", "c", 1, E[2])  # c grows to 64 bytes: a, now the oldest, goes (128 → 64)
        assert (len(h), h.nbytes, terms) == (1, 64, 2)
        assert torch.equal(out, 2 * E[2])

    def test_newest_pair_kept_above_max_bytes(self) -> None:
        h = ResidualHistory(max_bytes=16)
        out, terms = h.add("me", "a", 0, E[0])
        assert (len(h), h.nbytes, terms) == (1, 32, 1)
        assert torch.equal(out, E[0])
        h.add("me", "b", 0, E[1])
        assert len(h) == 1
        assert h.add("me", "a", 1, E[1])[1] == 1  # a was forgotten: its history starts again

    def test_load_state_dict_applies_the_byte_bound(self) -> None:
        h = ResidualHistory()
        for sender in "abc":
            h.add("me", sender, 0, E[0])
        g = ResidualHistory(max_bytes=64)
        g.load_state_dict(h.state_dict())
        assert (len(g), g.nbytes) == (2, 64)
        assert g.add("me", "a", 1, E[1])[1] == 1  # the oldest, a, went

    @pytest.mark.parametrize(("kwargs", "name"), [({"decay": 0.0}, "decay"), ({"decay": 1.5}, "decay"),
                                                  ({"max_entries": 0}, "max_entries"), ({"max_bytes": 0}, "max_bytes")])
    def test_rejects_bad_parameters(self, kwargs: dict[str, float], name: str) -> None:
        with pytest.raises(ValueError, match=name):
            ResidualHistory(**kwargs)  # type: ignore[arg-type]


class TestCollusionCheck:
    def test_aligned_pair_rejected_after_min_rounds(self) -> None:
        # residuals from a zero centre: rows 2 and 3 both along e3 (plus their own e0 / e1 part), row 1 along e2
        rows = torch.tensor([[1.0, 0, 0, 0], [0, 0, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1]])
        check = CollusionCheck(tau=0.5, min_rounds=2, group=2)
        assert check(rows, torch.zeros(4), ctx(0)) == {}  # one round of history: nobody compared yet
        out = check(rows, torch.zeros(4), ctx(1))
        # cos(e0 + e3, e1 + e3) = 1/2 ≥ 0.5; row 1 is orthogonal to both; row 0 is ours (never a partner)
        assert sorted(out) == [2, 3]
        assert out[2] == "residual history cosine 0.500 >= 0.5 with p3"

    def test_own_row_never_rejected_nor_a_partner(self) -> None:
        rows = torch.tensor([[0.0, 0, 0, 1], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]])
        out = CollusionCheck(tau=0.5, min_rounds=1, group=2)(rows, torch.zeros(4), ctx(0, own=0))
        assert out == {}  # row 1 agrees only with our own row
        out = CollusionCheck(tau=0.5, min_rounds=1, group=2)(rows, torch.zeros(4), ctx(0, own=None))
        assert sorted(out) == [0, 1]

    def test_below_tau_kept(self) -> None:
        rows = torch.tensor([[1.0, 0, 0, 0], [0, 0, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1]])
        assert CollusionCheck(tau=0.51, min_rounds=1, group=2)(rows, torch.zeros(4), ctx(0)) == {}

    def test_noise_averages_out_across_rounds(self) -> None:
        # per round: a shared direction b plus independent noise of 4× its size; within a round the pair's
        # cosine is ~1/17, after 64 rounds the histories' cosine is ~0.8
        g = torch.Generator().manual_seed(1)
        d = 400
        b = torch.zeros(d)
        b[0] = 1.0
        check = CollusionCheck(tau=0.5, min_rounds=1, group=2)
        first = last = None
        for r in range(64):
            rows = torch.randn(6, d, generator=g) * (4 / math.sqrt(d))
            rows[4:] += b
            out = check(rows, torch.zeros(d), ctx(r, n=6))
            first = out if first is None else first
            last = out
        assert first == {}
        assert sorted(last or {}) == [4, 5]

    def test_rows_equal_to_the_centre_have_zero_history(self) -> None:
        rows = torch.ones(3, 4)
        assert CollusionCheck(tau=0.1, min_rounds=1, group=2)(rows, torch.ones(4), ctx(0, n=3)) == {}

    def test_input_not_mutated(self) -> None:
        rows = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        centre = torch.tensor([0.5, 0.5])
        before = rows.clone(), centre.clone()
        CollusionCheck(min_rounds=1)(rows, centre, ctx(0, n=3))
        assert torch.equal(rows, before[0])
        assert torch.equal(centre, before[1])

    @pytest.mark.parametrize(("kwargs", "name"), [({"tau": 0.0}, "tau"), ({"tau": 1.1}, "tau"),
                                                  ({"min_rounds": 0}, "min_rounds"), ({"decay": 2.0}, "decay"),
                                                  ({"group": 1}, "group"), ({"group": 2.5}, "group")])
    def test_rejects_bad_parameters(self, kwargs: dict[str, float], name: str) -> None:
        with pytest.raises(ValueError, match=name):
            CollusionCheck(**kwargs)  # type: ignore[arg-type]


# residuals from a zero centre, 6 senders, row 0 ours: rows 1-3 share e5 (each with its own e1 / e2 / e3 part:
# pairwise cosine exactly 1/2), rows 4 and 5 share e4 (each with its own e0 / ... part: cosine 1/2 as a pair)
TRIO_AND_PAIR = torch.tensor([
    [1.0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 0, 1, 0, 0],
    [0, 0, 1, 0, 0, 1, 0, 0],
    [0, 0, 0, 1, 0, 1, 0, 0],
    [0, 0, 0, 0, 1, 0, 1, 0],
    [0, 0, 0, 0, 1, 0, 0, 1],
])


class TestGroup:
    def test_trio_rejected_pair_kept_with_group_3(self) -> None:
        out = CollusionCheck(tau=0.5, min_rounds=1, group=3)(TRIO_AND_PAIR, torch.zeros(8), ctx(0, n=6))
        assert sorted(out) == [1, 2, 3]  # each has two partners at 1/2; rows 4 and 5 have one each
        assert out[1] == "residual history cosine 0.500 >= 0.5 with p2, p3"

    def test_group_2_rejects_the_pair_too(self) -> None:
        out = CollusionCheck(tau=0.5, min_rounds=1, group=2)(TRIO_AND_PAIR, torch.zeros(8), ctx(0, n=6))
        assert sorted(out) == [1, 2, 3, 4, 5]
        assert out[4] == "residual history cosine 0.500 >= 0.5 with p5"

    def test_own_row_never_counts_as_a_partner(self) -> None:
        # rows 0 (ours), 1 and 2 share e3: with the own row as a partner rows 1 and 2 would each have two
        rows = torch.tensor([[1.0, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1], [1, 0, 0, 0]])
        assert CollusionCheck(tau=0.5, min_rounds=1, group=3)(rows, torch.zeros(4), ctx(0, own=0)) == {}
        out = CollusionCheck(tau=0.5, min_rounds=1, group=3)(rows, torch.zeros(4), ctx(0, own=None))
        assert sorted(out) == [0, 1, 2]  # no own row: the trio is three senders
        assert sorted(CollusionCheck(tau=0.5, min_rounds=1, group=2)(rows, torch.zeros(4), ctx(0, own=0))) == [1, 2]

    def test_second_partner_below_tau_kept(self) -> None:
        # row 3 = 2·e3 + e5: its cosine with rows 1 and 2 is 1/(√2·√5) ≈ 0.316 < τ, so rows 1 and 2 are a pair
        # (one partner each at 1/2) and nobody has two partners at τ
        rows = TRIO_AND_PAIR.clone()
        rows[3, 3] = 2.0
        out = CollusionCheck(tau=0.5, min_rounds=1, group=3)(rows, torch.zeros(8), ctx(0, n=6))
        assert out == {}
        assert sorted(CollusionCheck(tau=0.5, min_rounds=1, group=2)(rows, torch.zeros(8), ctx(0, n=6))) == [1, 2, 4, 5]

    def test_group_score_needs_g_minus_1_partners(self) -> None:
        unit = E[0]
        assert group_score(unit, [unit, E[0], None, None], exclude=(0, None), group=3) == (-math.inf, [1])
        assert group_score(unit, [unit, E[0], E[1], None], exclude=(0, None), group=3) == (0.0, [1, 2])
        assert group_score(unit, [unit, E[0], E[1], E[0]], exclude=(0, 3), group=2) == (1.0, [1])


class TestInSemanticGuard:
    def test_switch_and_reason(self) -> None:
        g = torch.Generator().manual_seed(2)
        base = torch.randn(6, 50, generator=g)
        shared = torch.randn(50, generator=g)
        # duplicates off: rows 4 and 5 share most of their vector (that stage has its own tests)
        on = SemanticGuard(collusion=True, c_collusion=0.5, collusion_rounds=1, collusion_group=2, duplicates=False)
        off = SemanticGuard(collusion=False, duplicates=False)
        rows = base.clone()
        rows[4:] = base[4:] * 0.1 + shared  # two rows with the same residual direction
        senders = tuple(f"p{i}" for i in range(6))
        c = AggregationContext(senders=senders, round=0, generator=g, own_index=0)
        result = on.judge(rows, c)
        reasons = {v.sender: v.reason for v in result.verdicts if not v.accepted}
        assert reasons == {"p4": COLLUDING, "p5": COLLUDING}
        assert all(v.accepted or v.reason != COLLUDING for v in off.judge(rows, c).verdicts)

    def test_each_guard_has_its_own_history(self) -> None:
        a, b = SemanticGuard(collusion=True), SemanticGuard(collusion=True)
        assert a._collusion is not None
        assert b._collusion is not None
        assert a._collusion.history is not b._collusion.history

    def test_group_and_decay_reach_the_stage(self) -> None:
        guard = SemanticGuard(collusion=True, collusion_group=3, collusion_decay=0.5)
        assert guard._collusion is not None
        assert guard._collusion.group == 3
        assert guard._collusion.history.decay == 0.5
        default = SemanticGuard()._collusion  # on by default, groups of three (collusion.py's docstring)
        assert default is not None
        assert (default.group, default.tau, default.min_rounds, default.history.decay) == (3, 0.6, 3, 1.0)
        assert SemanticGuard(collusion=False)._collusion is None

    @pytest.mark.parametrize(("kwargs", "name"), [({"c_collusion": 0.0}, "tau"),
                                                  ({"collusion_rounds": 0}, "min_rounds"),
                                                  ({"collusion_group": 1}, "group"),
                                                  ({"collusion_decay": 0.0}, "decay"),
                                                  ({"collusion": 1}, "collusion")])
    def test_rejects_bad_parameters(self, kwargs: dict[str, object], name: str) -> None:
        with pytest.raises(ValueError, match=name):
            SemanticGuard(**kwargs)  # type: ignore[arg-type]


class TestDefault:
    @staticmethod
    def rounds(guard: SemanticGuard) -> list[dict[str, str]]:
        """Three rounds of 8 rows, row 0 ours: rows 5-7 share one extra direction, rows 3 and 4 another."""
        g = torch.Generator().manual_seed(3)
        d = 64
        mean, trio, pair = (torch.randn(d, generator=g) for _ in range(3))
        senders = tuple(f"p{i}" for i in range(8))
        out = []
        for r in range(3):
            rows = mean + 0.5 * torch.randn(8, d, generator=g)
            rows[5:] += trio
            rows[3:5] += pair
            result = guard.judge(rows, AggregationContext(senders=senders, round=r, generator=g, own_index=0))
            out.append({v.sender: v.reason for v in result.verdicts if not v.accepted})
        return out

    def test_trio_rejected_from_the_third_round_aligned_pair_kept(self) -> None:
        # the default waits for 3 rounds of history and needs two partners at τ = 0.6
        assert self.rounds(SemanticGuard()) == [{}, {}, {"p5": COLLUDING, "p6": COLLUDING, "p7": COLLUDING}]

    def test_groups_of_two_would_take_the_pair(self) -> None:
        # the former rule (g = 2) also rejects the pair: under Dirichlet 0.1 honest pairs align like this one
        assert self.rounds(SemanticGuard(collusion_group=2))[2] == {
            "p3": COLLUDING, "p4": COLLUDING, "p5": COLLUDING, "p6": COLLUDING, "p7": COLLUDING}


class TestMergeCopies:
    def test_a_group_of_copies_counts_as_one_partner(self) -> None:
        # rows 1-3 of TRIO_AND_PAIR share e5; with rows 2 and 3 declared one group of copies, row 1 has one
        # partner (the group) and rows 2 and 3 one each (row 1): nobody has two at τ
        check = CollusionCheck(tau=0.5, min_rounds=1, group=3)
        assert check(TRIO_AND_PAIR, torch.zeros(8), ctx(0, n=6), ((2, 3),)) == {}
        # without the groups the trio is rejected (TestGroup), and a group elsewhere changes nothing
        out = CollusionCheck(tau=0.5, min_rounds=1, group=3)(TRIO_AND_PAIR, torch.zeros(8), ctx(0, n=6), ((4, 5),))
        assert sorted(out) == [1, 2, 3]

    def test_group_score_takes_a_group_once_by_its_most_aligned_member(self) -> None:
        unit = E[0]
        rows = [unit, E[0], 0.9 * E[0] + math.sqrt(1 - 0.81) * E[1], E[2]]
        assert group_score(unit, rows, exclude=(0, None), group=3) == (pytest.approx(0.9), [1, 2])
        assert group_score(unit, rows, exclude=(0, None), group=3, same={1: 0, 2: 0}) == (0.0, [1, 3])

    @staticmethod
    def mimic_rounds(guard: SemanticGuard) -> list[dict[str, str]]:
        """Five rounds of 8 rows, row 0 ours: rows 6 and 7 send row 5's row of the previous round (mimic)."""
        g = torch.Generator().manual_seed(5)
        d = 64
        mean = torch.randn(d, generator=g)
        skews = torch.randn(8, d, generator=g)  # each sender's persistent residual (its label skew)
        senders = tuple(f"p{i}" for i in range(8))
        out = []
        previous = None
        for r in range(5):
            rows = mean + skews + 0.7 * torch.randn(8, d, generator=g)
            if previous is not None:
                rows[6] = rows[7] = previous
            previous = rows[5].clone()
            result = guard.judge(rows, AggregationContext(senders=senders, round=r, generator=g, own_index=0))
            out.append({v.sender: v.reason for v in result.verdicts if not v.accepted})
        return out

    def test_the_mimicked_peer_is_rejected_as_colluding_unless_copies_merge(self) -> None:
        before = self.mimic_rounds(SemanticGuard(collusion_merge_copies=False))
        assert before[-1] == {"p5": COLLUDING, "p6": "duplicate", "p7": "duplicate"}
        after = self.mimic_rounds(SemanticGuard(collusion_merge_copies=True))
        assert all(v == "duplicate" for out in after for v in out.values())
        assert after[-1] == {"p6": "duplicate", "p7": "duplicate"}

    def test_on_by_default(self) -> None:
        # the default guard does not reject the mimicked peer (docs/threat-model.md §3.7a)
        assert SemanticGuard().collusion_merge_copies is True
        assert self.mimic_rounds(SemanticGuard())[-1] == {"p6": "duplicate", "p7": "duplicate"}

    def test_flag_checked(self) -> None:
        with pytest.raises(ValueError, match="collusion_merge_copies"):
            SemanticGuard(collusion_merge_copies=1)  # type: ignore[arg-type]
