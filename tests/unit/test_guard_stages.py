"""The semantic guard's receiver-anchored stages: self-anchoring, the private loss check, f unknown."""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.guard import AggregationContext, SemanticGuard, build_guard
from p2p_guard.guard.anchor import SelfAnchor, anchor_radius, clip_towards
from p2p_guard.guard.apply import judge_rows
from p2p_guard.guard.base import breakdown_f
from p2p_guard.guard.loss_score import LOSS_WORSE, loss_rejections, score_rows


def make_ctx(n: int, **kwargs: object) -> AggregationContext:
    return AggregationContext(
        senders=tuple(f"peer{i}" for i in range(n)),
        round=1,
        generator=torch.Generator().manual_seed(0),
        **kwargs,  # type: ignore[arg-type]
    )


class TestAnchor:
    def test_radius_is_a_multiple_of_the_own_norm(self) -> None:
        assert anchor_radius(torch.tensor([3.0, 4.0]), 0.5) == 2.5
        assert anchor_radius(torch.zeros(3), 1.0) == 0.0

    def test_clip_inside_the_radius_keeps_the_aggregate(self) -> None:
        own, agg = torch.tensor([2.0, 0.0]), torch.tensor([2.0, 1.0])
        out = clip_towards(own, agg, 1.0)
        assert torch.equal(out, agg)
        assert out is not agg

    def test_clip_outside_the_radius(self) -> None:
        # a − o = (−2, 4), |a − o| = √20; τ = 1: o + (−2, 4)/√20
        out = SelfAnchor(c_anchor=0.5)(torch.tensor([0.0, 4.0]), torch.tensor([[2.0, 0.0], [9.0, 9.0]]),
                                       make_ctx(2, own_index=0))
        assert torch.allclose(out, torch.tensor([2 - 2 / math.sqrt(20), 4 / math.sqrt(20)]))

    def test_zero_radius_gives_the_own_row(self) -> None:
        own = torch.tensor([1.0, -1.0])
        assert torch.equal(clip_towards(own, torch.tensor([5.0, 5.0]), 0.0), own)

    def test_without_own_row_the_aggregate_is_unchanged(self) -> None:
        agg = torch.tensor([7.0, 7.0])
        assert SelfAnchor()(agg, torch.ones(3, 2), make_ctx(3)) is agg

    def test_a_byzantine_majority_moves_the_peer_a_bounded_amount(self) -> None:
        own = torch.tensor([1.0, 0.0, 0.0, 0.0])
        far = torch.full((6, 4), -50.0) * torch.arange(1.0, 7.0)[:, None]  # six distinct rows, not copies
        rows = torch.cat([own[None], far, torch.tensor([[0.9, 0.1, 0.0, 0.0]])])
        out = SemanticGuard()(rows, make_ctx(8, own_index=0))
        assert float((out - own).norm()) == pytest.approx(2.0)  # c_anchor = 2, ‖own‖ = 1: the clip binds
        assert not torch.equal(out, own)

    @pytest.mark.parametrize("c", [0.0, -1.0, float("inf")])
    def test_rejects_bad_radius(self, c: float) -> None:
        with pytest.raises(ValueError, match="c_anchor"):
            SelfAnchor(c_anchor=c)


def _linear_loss(delta: torch.Tensor) -> float:
    """loss_at for a toy: L(θ − η·Δ) = 1 − Δ₀ (the first coordinate descends)."""
    return 1.0 - float(delta[0])


class TestLossStage:
    def test_scores_and_losses(self) -> None:
        rows = torch.tensor([[0.5, 0.0], [0.25, 9.0], [-0.25, 0.0], [-2.0, 0.0]])
        s = score_rows(rows, 0, _linear_loss)
        assert s.base == 1.0
        assert s.own == 0.5
        assert s.gain == 0.5
        assert s.losses.tolist() == [0.5, 0.75, 1.25, 3.0]
        assert s.scores.tolist() == [1.0, 0.5, -0.5, -4.0]

    def test_rejects_rows_worse_than_one_own_gain_and_the_other_rows(self) -> None:
        rows = torch.tensor([[0.5, 0.0], [0.25, 9.0], [-0.25, 0.0], [-2.0, 0.0]])
        s = score_rows(rows, 0, _linear_loss)
        # losses 0.5, 0.75, 1.25, 3.0: lower median 0.75, MAD 0.25, robust spread 0.370 65
        # limit = max(ℓ_0 + c · gain, 0.75 + c_mad · 0.370 65) = max(1.5, 1.861 95): only row 3 (3.0)
        assert sorted(loss_rejections(s, 0, c_loss=1.0)) == [3]
        assert sorted(loss_rejections(s, 0, c_loss=0.4)) == [3]
        # c_loss = 0.4, c_mad = 0.5: limit max(1.2, 0.935) = 1.2: rows 2 (1.25) and 3
        assert sorted(loss_rejections(s, 0, c_loss=0.4, c_mad=0.5)) == [2, 3]
        # c_mad = 8: limit 0.75 + 2.965 = 3.715: none
        assert loss_rejections(s, 0, c_loss=1.0, c_mad=8.0) == {}

    def test_own_row_never_rejected_and_non_finite_loss_rejected(self) -> None:
        rows = torch.tensor([[-1.0, 0.0], [0.5, 0.0]])
        s = score_rows(rows, 0, lambda d: float("nan") if d[0] > 0.4 else _linear_loss(d))
        assert s.gain == 1e-12  # own update raised the loss
        found = loss_rejections(s, 0, c_loss=1.0)
        assert list(found) == [1]
        assert "nan" in found[1]
        assert math.isnan(float(s.scores[1]))

    def test_guard_rejects_with_the_loss_reason(self) -> None:
        rows = torch.tensor([[0.5, 0.1], [0.6, 0.2], [0.4, 0.0], [0.45, 0.1], [-0.5, 0.1]])

        def loss_at(d: torch.Tensor) -> float:
            return 1.0 - float(d[0]) + 50 * max(float(d[1]) - 0.15, 0.0)

        # losses 0.5 (own), 2.9, 0.6, 0.55, 1.5; ℓ_0 = 1, gain 0.5; limit max(1.5, 0.6 + 3 · 0.148) = 1.5
        # duplicates off: in 2 dimensions rows 0 and 3 are as close as copies (that stage has its own tests)
        result = SemanticGuard(loss_check=True, duplicates=False).judge(rows, make_ctx(5, own_index=0, loss_at=loss_at))
        assert [v.reason for v in result.verdicts] == [None, LOSS_WORSE, None, None, "outlier"]
        assert [v.loss_score for v in result.verdicts] == pytest.approx([1.0, -3.8, 0.8, 0.9, -1.0])

    def test_loss_stage_off_or_absent(self) -> None:
        rows = torch.tensor([[0.5, 0.1], [0.6, 0.2], [0.4, 0.0]])
        calls: list[int] = []

        def loss_at(d: torch.Tensor) -> float:
            calls.append(1)
            return 0.0

        SemanticGuard(loss_check=False).judge(rows, make_ctx(3, own_index=0, loss_at=loss_at))
        assert calls == []
        SemanticGuard().judge(rows, make_ctx(3, own_index=0, loss_at=loss_at))  # off by default
        assert calls == []
        verdicts = SemanticGuard(loss_check=True).judge(rows, make_ctx(3, own_index=0)).verdicts
        assert all(v.loss_score is None for v in verdicts)
        SemanticGuard(loss_check=True).judge(rows, make_ctx(3, own_index=0, loss_at=loss_at))
        assert len(calls) == 4  # ℓ_0 and one per row

    def test_judge_rows_passes_loss_at(self) -> None:
        rows = {"b": torch.tensor([1.0, 0.0]), "a": torch.tensor([0.9, 0.1]), "c": torch.tensor([-3.0, 0.0])}
        result = judge_rows(build_guard("semantic:loss_check=true"), rows, me="a", round_=0, previous_aggregate=None, f=None,
                            generator=torch.Generator(), loss_at=_linear_loss)
        assert [v.sender for v in result.verdicts] == ["a", "b", "c"]
        assert [v.loss_score for v in result.verdicts] == pytest.approx([1.0, 1.0 / 0.9, -3.0 / 0.9])

    def test_rejects_bad_tolerance(self) -> None:
        with pytest.raises(ValueError, match="c_loss"):
            SemanticGuard(c_loss=0.0)
        with pytest.raises(ValueError, match="c_mad"):
            SemanticGuard(c_mad=-1.0)


class TestNoOracle:
    @pytest.mark.parametrize(("n", "f"), [(0, 0), (1, 0), (2, 0), (3, 1), (8, 3), (9, 4), (10, 4)])
    def test_breakdown_f(self, n: int, f: int) -> None:
        assert breakdown_f(n) == f

    def test_default_f_is_the_breakdown_point(self) -> None:
        assert SemanticGuard().resolved_f(make_ctx(9), 9) == 4
        assert SemanticGuard().resolved_f(make_ctx(9, f=2), 9) == 2
        assert SemanticGuard(f=1).resolved_f(make_ctx(9, f=2), 9) == 1

    def test_three_flipped_rows_of_nine_are_rejected_without_f(self) -> None:
        gen = torch.Generator().manual_seed(0)
        honest = torch.randn(1, 50, generator=gen) + 0.3 * torch.randn(6, 50, generator=gen)
        rows = torch.cat([honest, -10 * honest.mean(0).expand(3, -1)])
        result = SemanticGuard().judge(rows, make_ctx(9))
        assert [v.accepted for v in result.verdicts] == [True] * 6 + [False] * 3
        assert float(torch.dot(result.aggregate, honest.mean(0))) > 0

    def test_own_row_is_never_rejected(self) -> None:
        rows = torch.tensor([[-1.0, 0.0], [1.0, 0.1], [1.0, -0.1], [1.1, 0.0], [0.9, 0.0]])
        assert SemanticGuard().judge(rows, make_ctx(5)).verdicts[0].accepted is False
        assert SemanticGuard().judge(rows, make_ctx(5, own_index=0)).verdicts[0].accepted is True


class _NoCall:
    def judge(self, updates: torch.Tensor, ctx: AggregationContext) -> None:
        return None


class _Halve:
    def __init__(self, *, factor: float = 0.5) -> None:
        self.factor = factor

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        return updates.mean(dim=0) * self.factor


class TestGuardSpecs:
    def test_builtin_with_parameters(self) -> None:
        from p2p_guard.guard import TrimmedMean

        guard = build_guard("trimmed_mean:f=2")
        assert guard.aggregator == TrimmedMean(f=2)
        assert guard.name == "trimmed_mean:f=2"
        assert build_guard("semantic:c_anchor=0.5,loss_check=false").aggregator == SemanticGuard(
            c_anchor=0.5, loss_check=False
        )

    def test_user_class(self) -> None:
        guard = build_guard(f"{__name__}:_Halve:factor=0.25")
        out = guard(torch.tensor([[4.0, 0.0], [0.0, 8.0]]), make_ctx(2))
        assert torch.equal(out.aggregate, torch.tensor([0.5, 1.0]))
        assert [v.accepted for v in out.verdicts] == [True, True]

    @pytest.mark.parametrize(
        ("spec", "params", "match"),
        [
            ("krum", {}, "unknown guard 'krum'"),
            ("trimmed_mean:2", {}, "parameters are key=value"),
            ("trimmed_mean:f=2", {"f": 3}, r"parameter\(s\) \['f'\] given both"),
            ("trimmed_mean:f=-1", {}, "f must be an integer >= 0"),
            ("no_such_module_x:Rule", {}, "cannot import module 'no_such_module_x'"),
            (f"{__name__}:Missing", {}, "has no class 'Missing'"),
            (f"{__name__}:_NoCall", {}, r"has no method __call__\(updates, ctx\) -> Tensor"),
            (f"{__name__}:_Halve:scale=2", {}, r"unknown parameter\(s\) scale; test_guard_stages:_Halve takes factor$"),
            ("a:b:c:d", {}, "too many ':'"),
        ],
    )
    def test_errors(self, spec: str, params: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            build_guard(spec, **params)

    def test_attack_specs_still_parse_the_same(self) -> None:
        from p2p_guard.attacks.registry import parse_attack_spec

        assert parse_attack_spec("sign_flip:scale=10") == ("sign_flip", {"scale": 10})
        assert parse_attack_spec("m.x:C:a=true,b=0.5,c=s") == ("m.x:C", {"a": True, "b": 0.5, "c": "s"})
        with pytest.raises(ValueError, match="bad attack spec 'sign_flip:10'"):
            parse_attack_spec("sign_flip:10")
