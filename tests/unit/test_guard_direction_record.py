"""The semantic guard's direction record (``guard.verdict.DirectionRecord``) and the rows it spares the ramp.

A sender whose mean cosine with the centre, over the rounds this receiver judged it, is at least ``cos_record``
weighs 1 in the aggregate whatever this round's cosine; one whose mean is below ``cos_record_floor`` weighs 0.
"""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.semantic import SemanticGuard
from p2p_guard.guard.verdict import DirectionRecord, direction_weights


class TestDirectionRecord:
    def test_the_mean_over_rounds(self) -> None:
        record = DirectionRecord()
        assert record.add("r", "s", 0, 0.6) == pytest.approx(0.6)
        assert record.add("r", "s", 1, -0.2) == pytest.approx(0.2)
        assert record.add("r", "s", 3, -0.1) == pytest.approx(0.1)  # a skipped round adds no term
        assert record.add("r", "t", 3, -0.1) == pytest.approx(-0.1)  # pairs are apart
        assert record.add("q", "s", 3, 0.9) == pytest.approx(0.9)  # receivers too
        assert len(record) == 3

    def test_a_second_call_in_a_round_replaces_its_term(self) -> None:
        record = DirectionRecord()
        record.add("r", "s", 0, 0.6)
        assert record.add("r", "s", 1, -0.2) == pytest.approx(0.2)
        assert record.add("r", "s", 1, 0.2) == pytest.approx(0.4)  # (0.6 + 0.2) / 2, not (0.6 - 0.2 + 0.2) / 3
        assert record.add("r", "s", 2, 0.1) == pytest.approx(0.3)  # the replaced term stays replaced

    def test_a_stale_round_is_ignored(self) -> None:
        record = DirectionRecord()
        record.add("r", "s", 5, 0.4)
        assert record.add("r", "s", 4, -1.0) == pytest.approx(0.4)
        assert record.add("r", "s", 6, 0.0) == pytest.approx(0.2)

    def test_a_nan_cosine_adds_no_term(self) -> None:
        record = DirectionRecord()
        assert math.isnan(record.add("r", "s", 0, math.nan))
        assert record.add("r", "s", 1, 0.3) == pytest.approx(0.3)
        assert record.add("r", "s", 2, math.nan) == pytest.approx(0.3)

    def test_bounded(self) -> None:
        record = DirectionRecord(max_entries=2)
        record.add("r", "a", 0, 0.5)
        record.add("r", "b", 0, 0.5)
        record.add("r", "a", 1, 0.5)  # a is now the most recently updated
        record.add("r", "c", 1, -0.5)  # b is forgotten
        assert len(record) == 2
        assert record.add("r", "b", 2, -0.3) == pytest.approx(-0.3)  # b starts over
        with pytest.raises(ValueError, match="max_entries"):
            DirectionRecord(max_entries=0)


def _rounds(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round 0: every row along the mean; round 1: rows 6 and 7 just above the floor (cosines -0.3 .. 0)."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(2000, generator=g)
    first = mean + 0.5 * torch.randn(8, 2000, generator=g)
    second = mean + 0.5 * torch.randn(8, 2000, generator=g)
    for i in (6, 7):
        second[i] = -0.3 * mean + torch.randn(2000, generator=g)
    first[7] = -0.3 * mean + torch.randn(2000, generator=g)  # row 7's sender pointed against the centre before too
    return first, second, mean


def _ctx(round_: int) -> AggregationContext:
    return AggregationContext(senders=tuple(f"p{i}" for i in range(8)), round=round_,
                              generator=torch.Generator().manual_seed(round_), own_index=0)


def test_a_sender_with_a_record_along_the_centre_weighs_one() -> None:
    first, second, _ = _rounds()
    guard = SemanticGuard(f=0, anchoring=False, collusion=False)  # f = 0: the plain (weighted) mean
    assert guard.direction_record and guard.cos_record == 0.1 and guard.cos_record_floor == -1.0  # the defaults
    r0 = guard.judge(first, _ctx(0))
    cos0 = [v.cosine for v in r0.verdicts]
    assert cos0[6] > 0.1 > cos0[7]
    r1 = guard.judge(second, _ctx(1))
    cos = torch.tensor([v.cosine for v in r1.verdicts], dtype=torch.float64)
    assert all(v.accepted for v in r1.verdicts)
    assert guard.cos_min < float(cos[6]) < 0.0 and guard.cos_min < float(cos[7]) < 0.0
    assert (cos0[6] + float(cos[6])) / 2 >= 0.1 > -0.05 > (cos0[7] + float(cos[7])) / 2
    w = direction_weights(cos, 0, cos_min=guard.cos_min, cos_full=guard.cos_full)
    assert 0.0 < float(w[7]) < 1.0
    w[6] = 1.0  # spared by its record; row 7 keeps its ramp weight (the floor is off by default)
    assert torch.allclose(r1.aggregate, (w.float()[:, None] * second).sum(dim=0) / float(w.sum()), atol=1e-6)
    # with a floor of -0.05, row 7's sender, whose record is below it, weighs nothing whatever the ramp gave
    floor = SemanticGuard(f=0, anchoring=False, collusion=False, cos_record_floor=-0.05)
    floor.judge(first, _ctx(0))
    w[7] = 0.0
    assert torch.allclose(floor.judge(second, _ctx(1)).aggregate,
                          (w.float()[:, None] * second).sum(dim=0) / float(w.sum()), atol=1e-6)
    # without the record, this round's cosine alone decides (the ramp of stage 4c)
    plain = SemanticGuard(f=0, anchoring=False, collusion=False, direction_record=False)
    plain.judge(first, _ctx(0))
    ramp = direction_weights(cos, 0, cos_min=guard.cos_min, cos_full=guard.cos_full)
    assert float(ramp[6]) < 1.0
    assert torch.allclose(plain.judge(second, _ctx(1)).aggregate,
                          (ramp.float()[:, None] * second).sum(dim=0) / float(ramp.sum()), atol=1e-6)


def test_the_threshold_and_its_check() -> None:
    first, second, _ = _rounds()
    # no record reaches 1 nor falls below -1: the ramp alone
    strict = SemanticGuard(f=0, anchoring=False, collusion=False, cos_record=1.0, cos_record_floor=-1.0)
    plain = SemanticGuard(f=0, anchoring=False, collusion=False, direction_record=False)
    for guard in (strict, plain):
        guard.judge(first, _ctx(0))
    assert torch.equal(strict.judge(second, _ctx(1)).aggregate, plain.judge(second, _ctx(1)).aggregate)
    with pytest.raises(ValueError, match="cos_record"):
        SemanticGuard(cos_record=1.5)
    with pytest.raises(ValueError, match=r"cos_record_floor must be in \[-1, cos_record = 0.1\], got 0.2"):
        SemanticGuard(cos_record_floor=0.2)
    with pytest.raises(ValueError, match="cos_record_floor must be a finite number >= -1.0"):
        SemanticGuard(cos_record_floor=-1.5)
    with pytest.raises(ValueError, match="direction_record"):
        SemanticGuard(direction_record=1)  # type: ignore[arg-type]


def test_no_record_without_an_own_row() -> None:
    first, second, _ = _rounds()
    ctx0 = AggregationContext(senders=tuple(f"p{i}" for i in range(8)), round=0, generator=torch.Generator())
    ctx1 = AggregationContext(senders=tuple(f"p{i}" for i in range(8)), round=1, generator=torch.Generator())
    guard = SemanticGuard(f=0, anchoring=False, collusion=False)
    guard.judge(first, ctx0)
    result = guard.judge(second, ctx1)
    cos = torch.tensor([v.cosine for v in result.verdicts], dtype=torch.float64)
    w = direction_weights(cos, None, cos_min=guard.cos_min, cos_full=guard.cos_full)
    assert float(w[6]) < 1.0  # the ramp, as without the record: there is no receiver to key it on
    assert torch.allclose(result.aggregate, (w.float()[:, None] * second).sum(dim=0) / float(w.sum()), atol=1e-6)


def test_a_decayed_record() -> None:
    record = DirectionRecord(decay=0.5)
    assert record.add("r", "s", 0, 1.0) == pytest.approx(1.0)
    assert record.add("r", "s", 1, 0.0) == pytest.approx(0.5 / 1.5)  # (0.5·1 + 0) / (0.5 + 1)
    assert record.add("r", "s", 2, 0.0) == pytest.approx(0.25 / 1.75)  # (0.25·1 + 0.5·0 + 0) / (0.25 + 0.5 + 1)
    assert record.add("r", "s", 2, 1.0) == pytest.approx(1.25 / 1.75)  # a second call replaces round 2's term
    assert DirectionRecord().add("r", "s", 0, 0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="decay"):
        DirectionRecord(decay=0.0)
    with pytest.raises(ValueError, match="record_decay"):
        SemanticGuard(record_decay=1.5)
    assert SemanticGuard(record_decay=0.8)._record is not None
    assert SemanticGuard(record_decay=0.8)._record.decay == 0.8  # type: ignore[union-attr]


def test_each_verdict_carries_its_senders_record_and_none_for_our_own_row_or_without_one() -> None:
    """``Verdict.record`` is the mean of the sender's cosines over the rounds this receiver judged it (the
    reputation's opposed rows read it); our own row, a guard without the record and a call without
    ``own_index`` give None."""
    first, second, _ = _rounds()
    guard = SemanticGuard(f=0, anchoring=False, collusion=False)
    r0 = guard.judge(first, _ctx(0))
    r1 = guard.judge(second, _ctx(1))
    assert r0.verdicts[0].record is None and r1.verdicts[0].record is None
    for i in range(1, 8):
        assert r0.verdicts[i].record == pytest.approx(r0.verdicts[i].cosine)
        assert r1.verdicts[i].record == pytest.approx((r0.verdicts[i].cosine + r1.verdicts[i].cosine) / 2)
    assert r1.verdicts[7].record < 0.0 < r1.verdicts[6].record
    plain = SemanticGuard(f=0, anchoring=False, collusion=False, direction_record=False)
    assert all(v.record is None for v in plain.judge(first, _ctx(0)).verdicts)
    anonymous = AggregationContext(senders=tuple(f"p{i}" for i in range(8)), round=0,
                                   generator=torch.Generator().manual_seed(0))
    assert all(v.record is None for v in SemanticGuard(f=0).judge(first, anonymous).verdicts)
