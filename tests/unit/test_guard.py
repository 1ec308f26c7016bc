"""The semantic guard, stage by stage, and the Guard wrapper: verdicts, fallback, determinism, and the
robustness targets checked in-process on synthetic pseudo-gradients.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from p2p_guard.attacks import ALittleIsEnough, AttackContext, InnerProductManipulation
from p2p_guard.guard import (
    GUARD_NAMES,
    AggregationContext,
    Guard,
    GuardResult,
    NotEnoughUpdates,
    SemanticGuard,
    TrimmedMean,
    build_guard,
)
from p2p_guard.guard.baselines import coordinate_trimmed_mean
from p2p_guard.guard.centre import robust_centre
from p2p_guard.guard.duplicates import DUPLICATE
from p2p_guard.guard.linalg import row_norms
from p2p_guard.guard.magnitude import clip_rows
from p2p_guard.guard.verdict import make_verdicts, outlier_rows


def make_ctx(n: int, **kwargs: object) -> AggregationContext:
    return AggregationContext(
        senders=tuple(f"peer{i}" for i in range(n)),
        round=3,
        generator=torch.Generator().manual_seed(0),
        **kwargs,  # type: ignore[arg-type]
    )


def honest_rows(n: int, d: int, rho: float, seed: int) -> torch.Tensor:
    """Synthetic honest pseudo-gradients: pairwise cosine about ``rho``, norms varying from 0.7 to 1.4."""
    gen = torch.Generator().manual_seed(seed)
    common = torch.randn(d, generator=gen)
    common = common / common.norm() * rho**0.5
    noise = torch.randn(n, d, generator=gen) * ((1 - rho) / d) ** 0.5
    rows: torch.Tensor = (common + noise) * (0.7 + 0.7 * torch.rand(n, 1, generator=gen))
    return rows


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


class TestMagnitudeStage:
    def test_clips_long_rows_only(self) -> None:
        x = torch.tensor([[3.0, 4.0], [0.0, 1.0], [0.0, 0.0]])
        out = clip_rows(x, row_norms(x), 2.0)
        assert torch.allclose(out, torch.tensor([[1.2, 1.6], [0.0, 1.0], [0.0, 0.0]]))
        assert torch.equal(x, torch.tensor([[3.0, 4.0], [0.0, 1.0], [0.0, 0.0]]))

    def test_no_row_longer_returns_the_rows_themselves_with_the_same_bits(self) -> None:
        x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0))
        norms = row_norms(x)
        threshold = float(norms.max())
        assert clip_rows(x, norms, threshold) is x  # no copy
        assert torch.equal(x * torch.ones(4, 1)[:, :1], x)  # what the scale-1 product gave before
        assert clip_rows(x, norms, threshold * (1 - 1e-6)) is not x

    def test_zero_threshold_zeroes_every_nonzero_row(self) -> None:
        x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
        assert torch.equal(clip_rows(x, row_norms(x), 0.0), torch.zeros(2, 2))


class TestCentreStage:
    X = torch.tensor([[0.0], [1.0], [2.0], [100.0]])

    def test_nnm_then_trimmed_mean(self) -> None:
        assert torch.equal(robust_centre(self.X, 1), torch.tensor([1.0]))

    def test_without_mixing_is_the_trimmed_mean(self) -> None:
        assert torch.equal(robust_centre(self.X, 1, mixing=False), coordinate_trimmed_mean(self.X, 1))


class TestVerdictStage:
    def test_norm_and_direction_tests(self) -> None:
        norms = torch.tensor([1.0, 1.0, 3.5, 1.0, 4.0], dtype=torch.float64)
        cosines = torch.tensor([0.5, -0.2, 0.9, 0.0, -1.0], dtype=torch.float64)
        found = outlier_rows(norms, cosines, 1.0, c_reject=3.0, cos_min=0.0)
        assert sorted(found) == [1, 2, 4]
        assert "cosine" in found[1]
        assert "norm" not in found[1]
        assert "norm 3.5 > 3 x median norm 1" in found[2]
        assert "norm" in found[4]
        assert "cosine" in found[4]

    def test_make_verdicts(self) -> None:
        verdicts = make_verdicts(
            ("a", "b"), torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0]), {1: ("outlier", "why")}, "ok"
        )
        assert [(v.sender, v.accepted, v.reason, v.detail) for v in verdicts] == [
            ("a", True, None, "ok"),
            ("b", False, "outlier", "why"),
        ]
        assert (verdicts[1].norm, verdicts[1].cosine) == (2.0, -1.0)


class TestSemanticGuard:
    def test_rejects_scaled_and_flipped_rows(self) -> None:
        x = torch.tensor(
            [[1.0, 0.0], [1.0, 0.2], [0.9, -0.1], [1.1, 0.1], [1.0, -0.2], [-1.0, 0.0], [30.0, 0.0]]
        )
        result = SemanticGuard(f=2).judge(x, make_ctx(7))
        assert [v.accepted for v in result.verdicts] == [True] * 5 + [False, False]
        assert {v.reason for v in result.verdicts[5:]} == {"outlier"}
        # Two rejections spend the whole budget f = 2: the aggregate is the plain mean of the five others.
        assert torch.allclose(result.aggregate, x[:5].mean(dim=0))

    def test_clips_around_the_centre_while_budget_remains(self) -> None:
        x = honest_rows(8, 50, 0.5, seed=1)
        result = SemanticGuard(f=2).judge(x, make_ctx(8))
        assert all(v.accepted for v in result.verdicts)
        unclipped = SemanticGuard(f=2, clip_remaining=False).judge(x, make_ctx(8)).aggregate
        assert torch.allclose(unclipped, clip_rows(x, row_norms(x), 2 * float(row_norms(x).median())).mean(0))
        assert not torch.equal(result.aggregate, unclipped)

    def test_stages_switch_off(self) -> None:
        x = torch.tensor([[1.0, 0.0], [1.0, 0.2], [0.9, -0.1], [1.1, 0.1], [-1.0, 0.0], [30.0, 0.0]])
        bare = SemanticGuard(f=1, magnitude=False, mixing=False, verdict=False, clip_remaining=False)
        result = bare.judge(x, make_ctx(6))
        assert all(v.accepted for v in result.verdicts)
        assert torch.allclose(result.aggregate, x.mean(dim=0))

    def test_every_row_rejected_gives_the_centre(self) -> None:
        x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
        guard = SemanticGuard(f=1, cos_min=1.0)  # no row is exactly along the centre
        result = guard.judge(x, make_ctx(3))
        assert not any(v.accepted for v in result.verdicts)
        assert torch.equal(result.aggregate, robust_centre(clip_rows(x, row_norms(x), 2.0), 1))

    def test_not_enough_updates(self) -> None:
        with pytest.raises(NotEnoughUpdates, match="n=4, f=2"):
            SemanticGuard(f=2)(torch.zeros(4, 3), make_ctx(4))

    def test_f_from_context(self) -> None:
        with pytest.raises(NotEnoughUpdates, match="n=4, f=2"):
            SemanticGuard()(torch.zeros(4, 3), make_ctx(4, f=2))

    def test_own_index_anchors_only_when_anchoring(self) -> None:
        x = honest_rows(8, 40, 0.5, seed=2)
        plain = SemanticGuard(anchoring=False)
        outs = [plain(x, make_ctx(8, own_index=i)) for i in (None, 0, 5)]
        assert all(torch.equal(outs[0], o) for o in outs[1:])
        anchored = SemanticGuard(c_anchor=0.1)(x, make_ctx(8, own_index=5))
        assert float((anchored - x[5]).norm()) == pytest.approx(0.1 * float(x[5].norm()), rel=1e-5)

    @pytest.mark.parametrize(
        ("kwargs", "name"),
        [
            ({"f": -1}, "f"),
            ({"c_clip": 0.0}, "c_clip"),
            ({"c_reject": -1.0}, "c_reject"),
            ({"cos_min": 1.5}, "cos_min"),
            ({"cos_min": -2.0}, "cos_min"),
            ({"c_radius": 0.0}, "c_radius"),
            ({"magnitude": 1}, "magnitude"),
            ({"verdict": "yes"}, "verdict"),
            ({"checks": (object(),)}, "checks"),
            ({"anchor": 3}, "anchor"),
        ],
    )
    def test_rejects_bad_parameters(self, kwargs: dict[str, object], name: str) -> None:
        with pytest.raises(ValueError, match=f"^{name} must"):
            SemanticGuard(**kwargs)  # type: ignore[arg-type]


class _RejectFirst:
    reason = "loss_delta"

    def __call__(
        self, updates: torch.Tensor, centre: torch.Tensor, ctx: AggregationContext
    ) -> dict[int, str]:
        return {0: "loss rose by 0.3"}


class TestExtensionPoints:
    def test_row_check_adds_its_reason(self) -> None:
        x = honest_rows(8, 30, 0.6, seed=3)
        result = SemanticGuard(checks=(_RejectFirst(),)).judge(x, make_ctx(8))
        assert (result.verdicts[0].accepted, result.verdicts[0].reason) == (False, "loss_delta")
        assert all(v.accepted for v in result.verdicts[1:])

    def test_anchor_maps_the_aggregate(self) -> None:
        x = honest_rows(8, 30, 0.6, seed=3)

        def own_row(aggregate: torch.Tensor, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
            assert ctx.own_index is not None
            return updates[ctx.own_index]

        out = SemanticGuard(anchor=own_row)(x, make_ctx(8, own_index=4))
        assert torch.equal(out, x[4])


class TestGuardWrapper:
    def test_verdicts_in_caller_order_and_non_finite_rejected(self) -> None:
        x = honest_rows(6, 20, 0.6, seed=4)
        x[2, 5] = float("nan")
        x[4, 0] = float("inf")
        ctx = AggregationContext(senders=("z", "b", "y", "a", "c", "x"), round=0, generator=torch.Generator())
        result = build_guard("mean")(x, ctx)
        assert [v.sender for v in result.verdicts] == list(ctx.senders)
        assert [v.reason for v in result.verdicts] == [None, None, "non_finite", None, "non_finite", None]
        assert torch.allclose(result.aggregate, x[[0, 1, 3, 5]].mean(dim=0))
        assert result.verdicts[2].norm != result.verdicts[2].norm  # nan

    def test_falls_back_to_the_median(self) -> None:
        x = torch.tensor([[1.0], [2.0], [10.0], [3.0]])
        result = build_guard("trimmed_mean", f=2)(x, make_ctx(4))
        assert torch.equal(result.aggregate, torch.tensor([2.5]))
        assert all(v.accepted and "fallback" in v.detail for v in result.verdicts)

    def test_semantic_falls_back_to_the_median_with_two_rows(self) -> None:
        x = torch.tensor([[1.0], [3.0]])
        result = build_guard("semantic")(x, make_ctx(2, f=1))
        assert torch.equal(result.aggregate, torch.tensor([2.0]))

    def test_no_finite_row_raises(self) -> None:
        x = torch.full((2, 3), float("nan"))
        with pytest.raises(NotEnoughUpdates):
            build_guard("semantic")(x, make_ctx(2))

    def test_shape_must_match_senders(self) -> None:
        with pytest.raises(ValueError, match="match ctx.senders"):
            build_guard("mean")(torch.zeros(3, 2), make_ctx(4))

    def test_a_user_rule_that_fails_is_one_error_line(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """``simulate --guard mod:WrongShape`` stopped every peer with a traceback from deep in the verdicts."""
        (tmp_path / "failing_rules.py").write_text(_FAILING_RULES)
        monkeypatch.syspath_prepend(str(tmp_path))
        x = honest_rows(3, 5, 0.5, seed=7)
        expected = {
            "WrongShape": "guard 'failing_rules:WrongShape' returned a tensor of shape (4,) and dtype torch.float32, "
                          "not (5,) torch.float32 like the rows",
            "Float64": "guard 'failing_rules:Float64' returned a tensor of shape (5,) and dtype torch.float64, not "
                       "(5,) torch.float32 like the rows",
            "ReturnsNone": "guard 'failing_rules:ReturnsNone' returned NoneType, not a (5,) tensor",
            "JudgesNone": "guard 'failing_rules:JudgesNone' returned NoneType, not a (5,) tensor",
            "Raises": "guard 'failing_rules:Raises' raised RuntimeError in round 3: boom",
            "Exits": "guard 'failing_rules:Exits' raised SystemExit in round 3: 0",
            # was 'peer stopped: aggregate has a non-finite value' from the outer step, naming no guard (helper-68)
            "NonFinite": "guard 'failing_rules:NonFinite' returned an aggregate with 2 of its 5 values NaN or "
                         "infinite (the rows it was given are all finite)",
        }
        for name, message in expected.items():
            guard = build_guard(f"failing_rules:{name}")
            with pytest.raises(ValueError) as info:
                guard(x, make_ctx(3))
            assert str(info.value) == message
        result = build_guard("failing_rules:Mean")(x, make_ctx(3))  # a sound rule is untouched
        assert torch.equal(result.aggregate, x.mean(0)) and all(v.accepted for v in result.verdicts)
        result = build_guard("failing_rules:Few")(x, make_ctx(3))  # NotEnoughUpdates: still the median fallback
        assert torch.equal(result.aggregate, x.median(0).values)
        assert all(v.accepted and "fallback" in v.detail for v in result.verdicts)

    def test_a_built_in_rule_keeps_its_traceback(self, monkeypatch: pytest.MonkeyPatch) -> None:
        guard = build_guard("mean")

        def broken(self: object, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
            raise RuntimeError("a bug of ours")

        monkeypatch.setattr(type(guard.aggregator), "__call__", broken)
        with pytest.raises(RuntimeError, match="^a bug of ours$"):
            guard(honest_rows(3, 5, 0.5, seed=7), make_ctx(3))

    def test_input_not_mutated(self) -> None:
        x = honest_rows(8, 20, 0.5, seed=5)
        x[1] *= -10
        before = x.clone()
        for name in GUARD_NAMES:
            build_guard(name)(x, make_ctx(8, previous_aggregate=torch.ones(20)))
        assert torch.equal(x, before)

    def test_plain_rule_accepts_every_finite_row(self) -> None:
        guard = Guard(name="tm", aggregator=TrimmedMean(f=1))
        result = guard(honest_rows(5, 10, 0.5, seed=6), make_ctx(5))
        assert isinstance(result, GuardResult)
        assert all(v.accepted and v.detail == "accepted by tm" for v in result.verdicts)


class TestRegistry:
    def test_names(self) -> None:
        assert GUARD_NAMES == (
            "mean",
            "median",
            "trimmed_mean",
            "multi_krum",
            "geometric_median",
            "centered_clipping",
            "nnm_trimmed_mean",
            "own_update",
            "semantic",
        )
        assert isinstance(build_guard().aggregator, SemanticGuard)

    def test_parameters_reach_the_rule(self) -> None:
        assert build_guard("trimmed_mean", f=3).aggregator == TrimmedMean(f=3)

    @pytest.mark.parametrize(
        ("name", "params", "match"),
        [
            ("krum", {}, "unknown guard 'krum'"),
            ("trimmed_mean", {"beta": 1}, "^guard 'trimmed_mean': unknown parameter\\(s\\) beta; trimmed_mean takes f$"),
            ("semantic:nosuch=1,c_clip=2", {}, "^guard 'semantic:nosuch=1,c_clip=2': unknown parameter\\(s\\) nosuch; "
                                               "semantic takes f, duplicates, "),
            ("trimmed_mean", {"f": -1}, "f must be"),
        ],
    )
    def test_errors(self, name: str, params: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            build_guard(name, **params)


class TestDeterminism:
    """Every honest peer must compute the same aggregate bit for bit, or honest models drift apart."""

    @pytest.mark.parametrize("name", GUARD_NAMES)
    def test_same_inputs_same_bits(self, name: str) -> None:
        x = honest_rows(8, 300, 0.5, seed=7)
        x[6:] = -3 * x[:6].mean(dim=0)
        a = build_guard(name)(x, make_ctx(8))
        b = build_guard(name)(x.clone(), make_ctx(8))
        assert torch.equal(a.aggregate, b.aggregate)
        assert a.verdicts == b.verdicts

    @pytest.mark.parametrize("name", GUARD_NAMES)
    def test_arrival_order_does_not_matter(self, name: str) -> None:
        x = honest_rows(8, 300, 0.5, seed=8)
        x[7] = 10 * x[0]
        ctx = make_ctx(8)
        perm = torch.randperm(8, generator=torch.Generator().manual_seed(9))
        shuffled = AggregationContext(
            senders=tuple(ctx.senders[i] for i in perm.tolist()), round=ctx.round, generator=ctx.generator
        )
        a = build_guard(name)(x, ctx)
        b = build_guard(name)(x[perm], shuffled)
        assert torch.equal(a.aggregate, b.aggregate)
        assert {v.sender: v for v in a.verdicts} == {v.sender: v for v in b.verdicts}


class TestTargets:
    """The robustness targets of the semantic guard, on synthetic rounds of n = 8 with 2 Byzantine rows."""

    D = 1000

    def round_with(self, byzantine: torch.Tensor, honest: torch.Tensor) -> GuardResult:
        x = torch.cat([honest, byzantine.expand(2, -1)])
        return build_guard("semantic")(x, make_ctx(8))

    @pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
    @pytest.mark.parametrize("seed", range(3))
    def test_minus_ten_times_the_honest_mean(self, rho: float, seed: int) -> None:
        honest = honest_rows(6, self.D, rho, seed)
        result = self.round_with(-10 * honest.mean(dim=0), honest)
        assert cosine(result.aggregate, honest.mean(dim=0)) > 0.9
        assert [v.accepted for v in result.verdicts] == [True] * 6 + [False, False]

    @pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
    @pytest.mark.parametrize("seed", range(3))
    def test_ipm(self, rho: float, seed: int) -> None:
        honest = honest_rows(6, self.D, rho, seed)
        ctx = AttackContext(round=0, n=8, f=2, generator=torch.Generator())
        byzantine = InnerProductManipulation(epsilon=0.1)(honest, ctx)
        result = self.round_with(byzantine, honest)
        assert [v.accepted for v in result.verdicts] == [True] * 6 + [False, False]
        assert [v.reason for v in result.verdicts[6:]] == [DUPLICATE, DUPLICATE]  # two copies of one vector
        # the clipped mean of the 6 honest rows around their own centre (0.9886 at rho 0.3, seed 0)
        assert cosine(result.aggregate, honest.mean(dim=0)) > 0.98

    @pytest.mark.parametrize("z", [None, 1.5])
    @pytest.mark.parametrize("seed", range(3))
    def test_alie(self, z: float | None, seed: int) -> None:
        # Omniscient ALIE (it sees this round's honest rows): harder than what commit-before-reveal allows.
        honest = honest_rows(6, self.D, 0.5, seed)
        ctx = AttackContext(round=0, n=8, f=2, generator=torch.Generator())
        x = torch.cat([honest, ALittleIsEnough(z=z)(honest, ctx).expand(2, -1)])
        mu = honest.mean(dim=0)
        semantic = build_guard("semantic")(x, make_ctx(8)).aggregate
        assert cosine(semantic, mu) > 0.9
        assert relative_error(semantic, mu) < 0.3
        if z is not None:
            assert relative_error(semantic, mu) < relative_error(x.mean(dim=0), mu)
            assert relative_error(semantic, mu) < relative_error(TrimmedMean(f=2)(x, make_ctx(8)), mu)

    @pytest.mark.parametrize("rho", [0.2, 0.3, 0.6, 0.9])
    def test_honest_rows_virtually_never_rejected(self, rho: float) -> None:
        rejected = 0
        for seed in range(40):
            result = build_guard("semantic")(honest_rows(8, 500, rho, 100 + seed), make_ctx(8))
            rejected += sum(not v.accepted for v in result.verdicts)
        assert rejected == 0


_FAILING_RULES = """
import sys

import torch

from p2p_guard.guard.base import GuardResult, NotEnoughUpdates


class Mean:
    def __call__(self, updates, ctx):
        return updates.mean(0)


class WrongShape:
    def __call__(self, updates, ctx):
        return updates.mean(0)[:-1]


class Float64:
    def __call__(self, updates, ctx):
        return updates.mean(0).double()


class ReturnsNone:
    def __call__(self, updates, ctx):
        return None


class JudgesNone(Mean):
    def judge(self, updates, ctx):
        return None


class Raises:
    def __call__(self, updates, ctx):
        raise RuntimeError("boom")


class Exits:
    def __call__(self, updates, ctx):
        sys.exit(0)


class Few:
    def __call__(self, updates, ctx):
        raise NotEnoughUpdates(len(updates), 2, "n > 2f")


class NonFinite:
    def __call__(self, updates, ctx):
        out = updates.mean(0)
        out[1] = float("nan")
        out[3] = float("inf")
        return out
"""
