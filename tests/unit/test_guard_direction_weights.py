"""The semantic guard's direction weights (``guard.verdict.direction_weights``) and the weighted centered clip."""

from __future__ import annotations

import pytest
import torch

from p2p_guard.attacks.whitebox import guard_thresholds
from p2p_guard.guard import build_guard
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.baselines.centered_clipping import centered_clip
from p2p_guard.guard.semantic import SemanticGuard
from p2p_guard.guard.verdict import direction_weights


def test_the_ramp() -> None:
    cos = torch.tensor([-0.2, -0.1, 0.0, 0.5, -0.05], dtype=torch.float64)
    w = direction_weights(cos, None, cos_min=-0.2, cos_full=0.0)
    assert w.tolist() == pytest.approx([0.0, 0.5, 1.0, 1.0, 0.75])
    assert direction_weights(cos, 0, cos_min=-0.2, cos_full=0.0)[0] == 1.0  # our own row weighs 1
    assert direction_weights(torch.tensor([-0.2, -0.3], dtype=torch.float64), None, cos_min=-0.2,
                             cos_full=0.0).tolist() == [1.0, 1.0]  # nothing to weigh by: all equal


def test_equal_weights_give_centered_clipping() -> None:
    g = torch.Generator().manual_seed(0)
    x, c = torch.randn(7, 300, generator=g), torch.randn(300, generator=g)
    assert torch.allclose(centered_clip(x, c, None, 1, torch.ones(7, dtype=torch.float64)),
                          centered_clip(x, c, None, 1), atol=1e-6)
    w = torch.tensor([1.0, 1, 1, 1, 1, 1, 0], dtype=torch.float64)  # a zero weight drops a row's pull
    dist = torch.linalg.vector_norm(x - c, dim=1)
    tau = float(dist.median()) if len(dist) % 2 else None
    assert tau is not None
    pulls = (x - c) * torch.clamp(tau / dist, max=1.0)[:, None]
    assert torch.allclose(centered_clip(x, c, None, 1, w), c + pulls[:6].sum(dim=0) / 6, atol=1e-6)


def test_the_radius_scale_multiplies_the_median_distance() -> None:
    g = torch.Generator().manual_seed(2)
    x, c = torch.randn(7, 300, generator=g), torch.randn(300, generator=g)
    dist = torch.linalg.vector_norm(x - c, dim=1)
    tau = 1.5 * float(dist.median())  # 7 rows: the median is one of the distances
    pulls = (x - c) * torch.clamp(tau / dist, max=1.0)[:, None]
    assert torch.allclose(centered_clip(x, c, None, 1, radius_scale=1.5), c + pulls.mean(dim=0), atol=1e-6)
    assert torch.equal(centered_clip(x, c, None, 1, radius_scale=1.0), centered_clip(x, c, None, 1))
    # a radius beyond every distance clips nothing: the step lands on the rows' mean
    assert torch.allclose(centered_clip(x, c, None, 1, radius_scale=1e9), x.mean(dim=0), atol=1e-6)


def test_the_defaults_measured_on_dirichlet_0_1() -> None:
    # docs/scripts/het_cells.py: cos_min -0.3 and radius 1.5 x the median distance meet the heterogeneity rule
    guard = SemanticGuard()
    assert (guard.cos_min, guard.cos_full, guard.c_radius, guard.direction_weights) == (-0.3, 0.0, 1.5, True)


def test_the_guard_weighs_accepted_rows_by_their_cosine() -> None:
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(200, generator=g)
    rows = mean + 0.8 * torch.randn(8, 200, generator=g)
    rows[7] = -0.15 * mean + torch.randn(200, generator=g)  # a row just above the floor
    ctx = AggregationContext(senders=tuple(f"p{i}" for i in range(8)), round=0, generator=g)
    guard = SemanticGuard(f=0, anchoring=False)  # f = 0: the plain (weighted) mean of the accepted rows
    result = guard.judge(rows, ctx)
    cos = torch.tensor([v.cosine for v in result.verdicts], dtype=torch.float64)
    assert all(v.accepted for v in result.verdicts)
    assert guard.cos_min < float(cos[7]) < 0.0
    w = direction_weights(cos, None, cos_min=guard.cos_min, cos_full=0.0)
    assert float(w[7]) < 1.0
    assert torch.allclose(result.aggregate, (w.float()[:, None] * rows).sum(dim=0) / float(w.sum()), atol=1e-6)
    plain = SemanticGuard(f=0, anchoring=False, direction_weights=False).judge(rows, ctx).aggregate
    assert torch.allclose(plain, rows.mean(dim=0), atol=1e-6)


def test_parameters_and_what_a_white_box_attacker_reads() -> None:
    with pytest.raises(ValueError, match="cos_full"):
        SemanticGuard(cos_full=1.5)
    assert guard_thresholds(build_guard("semantic")).cos_full == 0.0
    assert guard_thresholds(build_guard("semantic", direction_weights=False)).cos_full == -0.3
    assert guard_thresholds(build_guard("semantic", cos_min=0.3)).cos_full == 0.3  # an expert's higher floor


def test_the_weighted_mean_does_not_overflow_where_the_mean_does_not() -> None:
    rows = torch.full((3, 4), 40000.0, dtype=torch.float16)  # the sum of two rows overflows float16, their mean not
    rows[1] *= 0.99
    rows[2] *= 0.98
    ctx = AggregationContext(senders=("a", "b", "c"), round=0, generator=torch.Generator())
    guard = SemanticGuard(f=0, anchoring=False, mixing=False)  # f = 0: the weighted mean of the accepted rows
    result = guard.judge(rows, ctx)
    assert all(v.accepted for v in result.verdicts)
    assert torch.isfinite(result.aggregate).all()
    assert torch.allclose(result.aggregate.double(), rows.double().mean(dim=0), rtol=1e-3)


def test_a_nan_cosine_weighs_nothing() -> None:
    # the verdict's tests are False on NaN, so such a row is accepted; its weight must still be in [0, 1]
    cos = torch.tensor([0.5, float("nan"), -0.1], dtype=torch.float64)
    assert direction_weights(cos, None, cos_min=-0.2, cos_full=0.0).tolist() == [1.0, 0.0, 0.5]
    assert direction_weights(cos[1:2], None, cos_min=-0.2, cos_full=0.0).tolist() == [1.0]
