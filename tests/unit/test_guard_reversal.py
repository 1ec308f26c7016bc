"""Reversals (``guard.reversal``): a sender whose row turns against its previous one restarts its direction record."""

from __future__ import annotations

import pytest
import torch

from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.reversal import ReversalMemory
from p2p_guard.guard.semantic import SemanticGuard
from p2p_guard.guard.verdict import DirectionRecord

SENDERS = ("me", "a", "b")


def _rows(seed: int, d: int = 500) -> torch.Tensor:
    return torch.randn(3, d, generator=torch.Generator().manual_seed(seed))


class TestReversalMemory:
    def test_a_flipped_row_is_a_reversal_with_its_cosine(self) -> None:
        memory = ReversalMemory()
        first = _rows(0)
        assert memory.reversed("me", SENDERS, first, 0, 0) == {}  # nothing to compare yet
        second = first.clone()
        second[2] = -first[2]
        found = memory.reversed("me", SENDERS, second, 0, 1)
        assert list(found) == [2] and found[2] == pytest.approx(-1.0, abs=1e-6)
        # the flipped row is now the one remembered: the same row again is no reversal
        assert memory.reversed("me", SENDERS, second, 0, 2) == {}
        assert len(memory) == 2  # our own row is not remembered

    def test_the_threshold(self) -> None:
        first = _rows(1)
        noise = _rows(2)
        second = first.clone()
        second[1] = -0.4 * first[1] / first[1].norm() + 0.6 * noise[1] / noise[1].norm()
        cosine = float(torch.nn.functional.cosine_similarity(first[1], second[1], dim=0))
        assert -0.7 < cosine < -0.3
        loose, strict = ReversalMemory(cos_reverse=-0.7), ReversalMemory(cos_reverse=-0.3)
        for memory in (loose, strict):
            memory.reversed("me", SENDERS, first, 0, 0)
        assert loose.reversed("me", SENDERS, second, 0, 1) == {}
        assert list(strict.reversed("me", SENDERS, second, 0, 1)) == [1]
        with pytest.raises(ValueError, match="cos_reverse"):
            ReversalMemory(cos_reverse=1.0)
        with pytest.raises(ValueError, match="max_entries"):
            ReversalMemory(max_entries=0)

    def test_same_round_or_older_is_not_compared_and_receivers_are_apart(self) -> None:
        memory = ReversalMemory()
        first = _rows(3)
        memory.reversed("me", SENDERS, first, 0, 5)
        assert memory.reversed("me", SENDERS, -first, 0, 5) == {}  # a second call in round 5 compares nothing
        assert memory.reversed("me", SENDERS, first, 0, 4) == {}  # an older round neither
        assert list(memory.reversed("me", SENDERS, first, 0, 6)) == [1, 2]  # round 5's second call was kept
        assert memory.reversed("other", ("other", "a", "b"), -first, 0, 7) == {}  # another receiver starts empty

    def test_zero_and_non_finite_rows_are_skipped(self) -> None:
        memory = ReversalMemory()
        first = _rows(4)
        memory.reversed("me", SENDERS, first, 0, 0)
        second = -first
        second[1] = 0.0
        second[2, 3] = float("nan")
        assert memory.reversed("me", SENDERS, second, 0, 1) == {}
        assert list(memory.reversed("me", SENDERS, -first, 0, 2)) == [1, 2]  # round 0's rows were kept

    def test_sketched_above_the_width(self) -> None:
        memory = ReversalMemory(width=256, seed=7)
        first = _rows(5, d=5000)
        memory.reversed("me", SENDERS, first, 0, 0)
        second = first.clone()
        second[1] = -first[1]
        second[2] = first[2] + 0.3 * _rows(6, d=5000)[2]
        found = memory.reversed("me", SENDERS, second, 0, 1)
        assert list(found) == [1] and found[1] == pytest.approx(-1.0, abs=1e-5)  # a sketch is linear: −S(x)

    def test_bounded(self) -> None:
        memory = ReversalMemory(max_entries=1)
        first = _rows(7)
        memory.reversed("me", SENDERS, first, 0, 0)
        assert len(memory) == 1
        assert list(memory.reversed("me", SENDERS, -first, 0, 1)) == [2]  # a's row was forgotten, b's kept

    def test_rows_and_senders_must_match(self) -> None:
        with pytest.raises(ValueError, match="one sender per row"):
            ReversalMemory().reversed("me", ("me", "a"), _rows(0), 0, 0)


def _ctx(round_: int) -> AggregationContext:
    return AggregationContext(senders=tuple(f"p{i}" for i in range(8)), round=round_,
                              generator=torch.Generator().manual_seed(round_), own_index=0)


def _sleeper_rounds() -> list[torch.Tensor]:
    """Rows along a shared mean for 3 rounds; from round 3, row 7 sends the flip of what it would have sent."""
    g = torch.Generator().manual_seed(11)
    mean = torch.randn(2000, generator=g)
    own = 0.5 * torch.randn(8, 2000, generator=g)  # each sender's own, persistent direction (its shard): non-IID
    rounds = []
    for r in range(5):
        rows = 0.25 * mean + own + 0.3 * torch.randn(8, 2000, generator=g)
        if r >= 3:
            rows[7] = -rows[7]  # a sign flip: cosines with the centre just above the floor
        rounds.append(rows)
    return rounds


def test_a_sleeper_loses_its_record_when_it_turns() -> None:
    guard = SemanticGuard(f=0, anchoring=False, collusion=False)
    keep = SemanticGuard(f=0, anchoring=False, collusion=False, reject_reversed=False)
    plain = SemanticGuard(f=0, anchoring=False, collusion=False, reversal=False)
    assert guard.reversal and guard.reject_reversed and guard.cos_reverse == -0.5  # the defaults
    assert plain._reversals is None
    results = [(guard.judge(rows, _ctx(r)), keep.judge(rows, _ctx(r)), plain.judge(rows, _ctx(r)))
               for r, rows in enumerate(_sleeper_rounds())]
    assert all(v.accepted for result in results[:3] for run in result for v in run.verdicts)  # honest rounds
    rejected, restarted, without = results[3]
    cosine = restarted.verdicts[7].cosine
    assert guard.cos_min < cosine < 0.0 and restarted.verdicts[7].accepted and without.verdicts[7].accepted
    assert not rejected.verdicts[7].accepted and rejected.verdicts[7].reason == "outlier"
    assert "reverses its previous row (cosine -0." in rejected.verdicts[7].detail
    assert [v.accepted for v in rejected.verdicts[:7]] == [True] * 7
    for run in (rejected, restarted):
        assert run.verdicts[7].record == pytest.approx(cosine)  # restarted at the flip round
    assert without.verdicts[7].record > guard.cos_record  # the honest rounds' record spares it the ramp
    assert restarted.verdicts[6].record == pytest.approx(without.verdicts[6].record)  # honest senders: unchanged
    # round 4: no reversal (the flipped row follows a flipped row); the record holds rounds 3 and 4 only
    four = results[4][1].verdicts[7]
    assert four.accepted and four.record == pytest.approx((cosine + four.cosine) / 2)
    assert results[4][0].verdicts[7].accepted
    assert not torch.equal(restarted.aggregate, without.aggregate)  # row 7 weighs less with the ramp


def test_the_record_restart() -> None:
    record = DirectionRecord()
    record.add("r", "s", 0, 0.8)
    record.add("r", "s", 1, 0.6)
    record.restart("r", "s")
    record.restart("r", "unknown")  # nothing to forget: no error
    assert record.add("r", "s", 2, -0.2) == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="cos_reverse"):
        SemanticGuard(cos_reverse=-2.0)
    with pytest.raises(ValueError, match="reversal"):
        SemanticGuard(reversal=1)  # type: ignore[arg-type]
