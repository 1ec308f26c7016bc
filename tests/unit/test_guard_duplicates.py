"""The semantic guard's duplicate stage (``guard/duplicates.py``) and the white-box attacks' jitter."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from p2p_guard.attacks.base import AttackContext
from p2p_guard.attacks.whitebox import COPY_JITTER, jitter_copy
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.centre import robust_centre
from p2p_guard.guard.duplicates import DUPLICATE, DUPLICATE_RATIO, find_duplicates, typical_distance
from p2p_guard.guard.linalg import cosines_to, pairwise_distances, row_norms
from p2p_guard.guard.semantic import SemanticGuard

SENDERS = tuple(f"p{i}" for i in range(8))


def duplicate_rows(updates: torch.Tensor, senders: Sequence[str], own_index: int | None, *,
                   ratio: float = DUPLICATE_RATIO) -> dict[int, str]:
    """The rows :func:`find_duplicates` rejects, with their details."""
    return find_duplicates(updates, senders, own_index, ratio=ratio).rejected


def honest(n: int, d: int = 500, seed: int = 0) -> torch.Tensor:
    """N independent rows around one mean (pairwise distances concentrate near their median)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, generator=g) + torch.randn(n, d, generator=g)


class TestDuplicateRows:
    def test_independent_rows_are_never_grouped(self) -> None:
        for seed in range(5):
            assert duplicate_rows(honest(8, seed=seed), SENDERS, None) == {}

    def test_copies_and_near_copies_are_all_rejected(self) -> None:
        rows = honest(8)
        rows[5] = rows[6] = rows[7] = rows[4].neg() * 3  # three copies of one vector
        rows[7] += 0.01  # a near copy
        found = duplicate_rows(rows, SENDERS, None)
        assert sorted(found) == [5, 6, 7]
        assert "p6" in found[5] and "p7" in found[5]

    def test_the_own_row_is_kept(self) -> None:
        rows = honest(8)
        rows[3] = rows[0]
        assert sorted(duplicate_rows(rows, SENDERS, 0)) == [3]
        assert sorted(duplicate_rows(rows, SENDERS, None)) == [0, 3]

    def test_a_row_equal_to_our_own_says_the_peer_index_is_probably_shared(self) -> None:
        """Two honest peers on one --peer-index send the same Δ (same batches, same θ); the only log line said
        'one vector from several senders', nothing about the setting to fix (helper-63)."""
        rows = honest(8)
        rows[3] = rows[0]  # bit-identical to our own row
        rows[5] = rows[0] + 0.01  # a near copy of it: no hint
        found = duplicate_rows(rows, SENDERS, 0)
        assert sorted(found) == [3, 5]
        assert found[3].endswith("; bit-identical to our own update: that peer most likely set our "
                                 "--peer-index (the same data shard and batches); give every peer its own "
                                 "--peer-index, or leave it unset")
        assert "--peer-index" not in found[5]
        assert all("--peer-index" not in detail for detail in duplicate_rows(rows, SENDERS, None).values())

    def test_far_rows_do_not_make_honest_rows_look_alike(self) -> None:
        # 3 of 8 rows at 10x the honest scale, each different: the median over all pairs would be a far pair
        rows = honest(8)
        rows[5:] = -10 * rows[5:]
        assert duplicate_rows(rows, SENDERS, None) == {}

    def test_ratio_zero_groups_only_identical_rows(self) -> None:
        rows = honest(8)
        rows[1] = rows[2] + 1e-3
        rows[6] = rows[7]
        assert sorted(duplicate_rows(rows, SENDERS, None, ratio=0.0)) == [6, 7]

    def test_copies_are_the_rows_of_each_group_beyond_one(self) -> None:
        rows = honest(8)
        rows[5] = rows[6] = rows[7] = rows[4].neg() * 3  # a group of three
        rows[2] = rows[1]  # and a pair
        found = find_duplicates(rows, SENDERS, None)
        assert found.groups == ((1, 2), (5, 6, 7))
        assert sorted(found.rejected) == [1, 2, 5, 6, 7]
        assert found.copies == 3  # at most one row of a group is honest: 2 + 1 Byzantine for certain
        assert find_duplicates(honest(8), SENDERS, None).copies == 0

    def test_a_group_around_the_own_row_counts_every_other_member(self) -> None:
        rows = honest(8)
        rows[3] = rows[6] = rows[0]
        found = find_duplicates(rows, SENDERS, 0)
        assert sorted(found.rejected) == [3, 6]
        assert found.copies == 2

    def test_typical_distance(self) -> None:
        dist = pairwise_distances(torch.tensor([[0.0], [1.0], [2.0], [100.0]]))
        # each row's median distance to the 3 others: 2, 1, 2, 99 -> their median (2 + 2) / 2
        assert typical_distance(dist) == 2.0

    def test_wrong_sender_count_is_a_local_error(self) -> None:
        with pytest.raises(ValueError, match="senders"):
            duplicate_rows(honest(3), SENDERS, None)


class TestInSemanticGuard:
    def ctx(self, own: int | None = 0) -> AggregationContext:
        return AggregationContext(senders=SENDERS, round=0, generator=torch.Generator(), own_index=own)

    def test_copies_neither_pull_the_aggregate_nor_count(self) -> None:
        rows = honest(8)
        rows[5:] = 5.0  # three copies of one vector
        result = SemanticGuard().judge(rows, self.ctx(None))
        assert [v.reason for v in result.verdicts] == [None] * 5 + [DUPLICATE] * 3
        # 3 rejections reach f-hat = 3 of 8 rows: the plain mean of the accepted (honest) rows
        assert torch.allclose(result.aggregate, rows[:5].mean(dim=0))

    def test_switch(self) -> None:
        rows = honest(8)
        rows[6] = rows[7]
        off = SemanticGuard(duplicates=False).judge(rows, self.ctx()).verdicts
        assert all(v.reason != DUPLICATE for v in off)
        with pytest.raises(ValueError, match="duplicate_ratio"):
            SemanticGuard(duplicate_ratio=-1.0)

    @pytest.mark.parametrize(("copies", "with_credit", "without"), [(4, 1, 2), (3, 2, 3)])
    def test_copies_count_against_f_hat_for_the_centre(self, copies: int, with_credit: int, without: int) -> None:
        # 10 rows, the last ones copies of one vector: f-hat = 4; a group of g holds g - 1 Byzantine rows for
        # certain, so the centre of the 10 - g rows left is at min(4 - (g - 1), breakdown_f(10 - g)), where
        # without the credit it is at min(4, breakdown_f(10 - g))
        senders = tuple(f"p{i}" for i in range(10))
        rows = torch.cat([honest(10 - copies, seed=4), torch.full((copies, 500), 0.5)])
        ctx = AggregationContext(senders=senders, round=0, generator=torch.Generator())
        unique = rows[: 10 - copies]

        def cosines(f: int) -> list[float]:
            return cosines_to(unique, robust_centre(unique, f), row_norms(unique)).tolist()

        gap = max(abs(a - b) for a, b in zip(cosines(with_credit), cosines(without), strict=True))
        assert gap > 0.01  # the two centres differ: the test can fail
        for credit, f in ((True, with_credit), (False, without)):
            guard = SemanticGuard() if credit else SemanticGuard(duplicate_credit=False)  # on by default
            verdicts = guard.judge(rows, ctx).verdicts
            assert [v.reason for v in verdicts] == [None] * (10 - copies) + [DUPLICATE] * copies
            assert [v.cosine for v in verdicts[: 10 - copies]] == pytest.approx(cosines(f), abs=1e-6)

    def test_credit_switch_must_be_a_bool(self) -> None:
        with pytest.raises(ValueError, match="duplicate_credit"):
            SemanticGuard(duplicate_credit=1)  # type: ignore[arg-type]

    def test_every_row_a_copy_without_an_own_row_applies_nothing(self) -> None:
        rows = torch.ones(4, 10)
        result = SemanticGuard().judge(rows, AggregationContext(senders=SENDERS[:4], round=0,
                                                                 generator=torch.Generator()))
        assert not any(v.accepted for v in result.verdicts)
        assert torch.equal(result.aggregate, torch.zeros(10))


class TestJitter:
    def test_two_attackers_copies_escape_the_stage(self) -> None:
        known = honest(6)
        plan = known.mean(dim=0)
        a = jitter_copy(plan, known, torch.Generator().manual_seed(1))
        b = jitter_copy(plan, known, torch.Generator().manual_seed(2))
        scale = typical_distance(pairwise_distances(known))
        assert float((a - plan).norm()) == pytest.approx(COPY_JITTER * scale, rel=1e-5)
        rows = torch.cat([honest(6, seed=3), torch.stack([a, b])])
        assert duplicate_rows(rows, SENDERS, None) == {}
        assert sorted(duplicate_rows(torch.cat([honest(6, seed=3), torch.stack([plan, plan])]), SENDERS, None)) \
            == [6, 7]

    def test_one_known_row_is_returned_as_is(self) -> None:
        row = torch.ones(5)
        assert torch.equal(jitter_copy(row, row[None], torch.Generator()), row)

    def test_white_box_attacks_jitter_their_copies(self) -> None:
        from p2p_guard.attacks import load_attack

        known = honest(6)
        for spec in ("alie:z=search", "adaptive"):
            attack = load_attack(spec)
            rows = [attack(known, AttackContext(round=2, n=8, f=2, generator=torch.Generator().manual_seed(i)))
                    for i in range(2)]
            assert not torch.equal(rows[0], rows[1]), spec


class TestHalfFar:
    """Odd n = 2k + 1 with k far rows: each honest row has k far rows among its 2k others."""

    @pytest.mark.parametrize(("n", "f"), [(9, 4), (7, 3), (5, 2)])
    def test_far_rows_at_half_the_others_do_not_make_honest_rows_copies(self, n: int, f: int) -> None:
        g = torch.Generator().manual_seed(0)
        rows = torch.cat([honest(n - f, d=2000), 30 * torch.randn(f, 2000, generator=g)])
        senders = tuple(f"p{i}" for i in range(n))
        dist = pairwise_distances(rows)
        assert typical_distance(dist) <= float(dist[: n - f, : n - f].max())  # set by the honest rows
        assert duplicate_rows(rows, senders, 0) == {}
        result = SemanticGuard().judge(rows, AggregationContext(senders=senders, round=0,
                                                                generator=torch.Generator(), own_index=0))
        assert [v.reason for v in result.verdicts] == [None] * (n - f) + ["outlier"] * f

    def test_typical_distance_takes_each_rows_lower_median(self) -> None:
        dist = pairwise_distances(torch.tensor([[0.0], [1.0], [3.0]]))
        # each row's 2 distances: (1, 3), (1, 2), (2, 3) -> lower medians 1, 1, 2 -> their median 1
        assert typical_distance(dist) == 1.0


def test_overflowing_differences_do_not_make_every_row_a_copy() -> None:
    # float16 rows of +-40000: most differences overflow to inf, so m = inf; no limit of inf x 0.25
    g = torch.Generator().manual_seed(0)
    rows = (40000 * torch.randint(0, 2, (6, 50), generator=g).mul(2).sub(1)).to(torch.float16)
    rows[5] = rows[4]
    assert torch.isfinite(rows).all()
    assert typical_distance(pairwise_distances(rows)) == float("inf")
    assert sorted(duplicate_rows(rows, SENDERS[:6], None)) == [4, 5]  # only the identical rows


def test_few_coordinates_group_only_identical_rows() -> None:
    from p2p_guard.guard.duplicates import MIN_DIMENSION

    g = torch.Generator().manual_seed(0)
    low = torch.randn(9, MIN_DIMENSION - 1, generator=g)
    low[1] = low[0] + 1e-4  # close, not identical
    low[3] = low[2]
    assert sorted(duplicate_rows(low, tuple(f"p{i}" for i in range(9)), None)) == [2, 3]
    high = torch.randn(9, MIN_DIMENSION, generator=g)
    high[1] = high[0] + 1e-4
    assert sorted(duplicate_rows(high, tuple(f"p{i}" for i in range(9)), None)) == [0, 1]
