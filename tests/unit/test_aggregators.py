"""Baseline aggregation rules: hand-worked answers on tiny inputs (one class per rule), constructor and call
checks, and the properties every rule keeps (input not mutated, dtype kept, permutation invariance)."""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.guard import (
    AggregationContext,
    CenteredClipping,
    CoordinateMedian,
    GeometricMedian,
    Mean,
    MultiKrum,
    NNMTrimmedMean,
    NotEnoughUpdates,
    TrimmedMean,
    default_f,
)
from p2p_guard.guard.baselines import coordinate_median, krum_scores, nearest_neighbour_mixing
from p2p_guard.guard.linalg import cosines_to, pairwise_distances, row_norms, scalar_median


def make_ctx(n: int, **kwargs: object) -> AggregationContext:
    return AggregationContext(
        senders=tuple(f"peer{i}" for i in range(n)),
        round=0,
        generator=torch.Generator().manual_seed(0),
        **kwargs,  # type: ignore[arg-type]
    )


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


class TestContext:
    def test_defaults(self) -> None:
        ctx = make_ctx(3)
        assert ctx.own_index is None
        assert ctx.previous_aggregate is None
        assert ctx.f is None

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"own_index": 3}, "own_index"),
            ({"own_index": -1}, "own_index"),
            ({"f": -1}, "f must be"),
            ({"f": 1.5}, "f must be"),
        ],
    )
    def test_rejects_bad_fields(self, kwargs: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            make_ctx(3, **kwargs)

    def test_rejects_duplicate_senders_and_negative_round(self) -> None:
        gen = torch.Generator()
        with pytest.raises(ValueError, match="unique"):
            AggregationContext(senders=("a", "a"), round=0, generator=gen)
        with pytest.raises(ValueError, match="round"):
            AggregationContext(senders=("a",), round=-1, generator=gen)


class TestDefaultF:
    @pytest.mark.parametrize(
        ("n", "f"), [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (7, 1), (8, 2), (11, 2), (12, 3), (25, 6)]
    )
    def test_values(self, n: int, f: int) -> None:
        assert default_f(n) == f

    def test_always_feasible_for_trimmed_mean(self) -> None:
        assert all(2 * default_f(n) < n for n in range(1, 200))


class TestLinalg:
    def test_scalar_median_odd_even(self) -> None:
        assert scalar_median(torch.tensor([3.0, 1.0, 2.0])) == 2.0
        assert scalar_median(torch.tensor([4.0, 1.0, 3.0, 2.0])) == 2.5
        with pytest.raises(ValueError, match="empty"):
            scalar_median(torch.zeros(0))

    def test_norms_distances_cosines(self) -> None:
        x = t([[3.0, 4.0], [0.0, 0.0], [-3.0, -4.0]])
        assert row_norms(x).tolist() == [5.0, 0.0, 5.0]
        assert row_norms(x).dtype == torch.float64
        dist = pairwise_distances(x)
        assert dist.tolist() == [[0.0, 5.0, 10.0], [5.0, 0.0, 5.0], [10.0, 5.0, 0.0]]
        assert cosines_to(x, torch.tensor([3.0, 4.0])).tolist() == [1.0, 0.0, -1.0]
        assert cosines_to(x, torch.zeros(2)).tolist() == [0.0, 0.0, 0.0]


class TestMean:
    def test_known_answer(self) -> None:
        assert torch.equal(Mean()(t([[1.0, 2.0], [3.0, 6.0]]), make_ctx(2)), torch.tensor([2.0, 4.0]))

    def test_no_rows(self) -> None:
        with pytest.raises(NotEnoughUpdates, match="n=0"):
            Mean()(torch.zeros(0, 3), make_ctx(0))

    def test_rejects_non_matrix(self) -> None:
        with pytest.raises(ValueError, match=r"\(n, d\)"):
            Mean()(torch.zeros(3), make_ctx(3))


class TestCoordinateMedian:
    def test_odd(self) -> None:
        x = t([[1.0, 9.0], [2.0, 0.0], [7.0, 4.0]])
        assert torch.equal(CoordinateMedian()(x, make_ctx(3)), torch.tensor([2.0, 4.0]))

    def test_even_averages_the_two_middle_values(self) -> None:
        x = t([[1.0, 9.0], [2.0, 0.0], [7.0, 4.0], [3.0, 5.0]])
        assert torch.equal(CoordinateMedian()(x, make_ctx(4)), torch.tensor([2.5, 4.5]))

    def test_even_does_not_overflow(self) -> None:
        big = torch.finfo(torch.float32).max
        assert torch.equal(coordinate_median(t([[big], [big]])), torch.tensor([big]))

    def test_no_rows(self) -> None:
        with pytest.raises(NotEnoughUpdates):
            CoordinateMedian()(torch.zeros(0, 2), make_ctx(0))


class TestTrimmedMean:
    def test_known_answer(self) -> None:
        x = t([[1.0, 9.0], [2.0, 0.0], [7.0, 4.0], [3.0, 5.0], [100.0, -50.0]])
        # coordinate 0 sorted 1 2 3 7 100 -> mean(2, 3, 7); coordinate 1 sorted -50 0 4 5 9 -> mean(0, 4, 5)
        assert torch.allclose(TrimmedMean(f=1)(x, make_ctx(5)), torch.tensor([4.0, 3.0]))

    def test_f_zero_is_the_mean(self) -> None:
        x = t([[1.0], [2.0], [6.0]])
        assert torch.equal(TrimmedMean(f=0)(x, make_ctx(3)), torch.tensor([3.0]))

    def test_f_from_context_then_default(self) -> None:
        x = t([[0.0], [0.0], [0.0], [1.0], [2.0], [10.0], [20.0], [100.0]])
        assert torch.equal(TrimmedMean()(x, make_ctx(8, f=3)), torch.tensor([1.5]))  # mean of 1, 2
        assert torch.equal(TrimmedMean()(x, make_ctx(8)), torch.tensor([3.25]))  # default_f(8) = 2
        assert torch.equal(TrimmedMean(f=1)(x, make_ctx(8, f=3)), torch.tensor([33.0 / 6]))  # own f wins

    def test_not_enough(self) -> None:
        with pytest.raises(NotEnoughUpdates, match=r"n > 2f; got n=4, f=2"):
            TrimmedMean(f=2)(torch.zeros(4, 2), make_ctx(4))

    @pytest.mark.parametrize("f", [-1, 1.5, True, "1"])
    def test_rejects_bad_f(self, f: object) -> None:
        with pytest.raises(ValueError, match=f"f must be an integer >= 0, got {f!r}"):
            TrimmedMean(f=f)  # type: ignore[arg-type]


class TestMultiKrum:
    X = t([[0.0], [1.0], [2.0], [3.0], [100.0]])

    def test_scores(self) -> None:
        # Sum of squared distances to the n - f - 2 = 2 nearest other rows.
        assert krum_scores(self.X, 1).tolist() == [5.0, 2.0, 2.0, 5.0, 97.0**2 + 98.0**2]

    def test_multi_krum_known_answer(self) -> None:
        assert torch.equal(MultiKrum(f=1)(self.X, make_ctx(5)), torch.tensor([1.5]))

    def test_krum_ties_broken_by_index(self) -> None:
        assert torch.equal(MultiKrum(f=1, m=1)(self.X, make_ctx(5)), torch.tensor([1.0]))
        assert torch.equal(MultiKrum(f=1, m=2)(self.X, make_ctx(5)), torch.tensor([1.5]))

    def test_judge_rejects_rows_not_selected(self) -> None:
        rule = MultiKrum(f=1, m=3)
        judged = rule.judge(self.X, make_ctx(5))
        assert torch.equal(judged.aggregate, rule(self.X, make_ctx(5)))
        assert torch.equal(judged.aggregate, torch.tensor([1.0]))
        assert [v.accepted for v in judged.verdicts] == [True, True, True, False, False]
        assert {v.reason for v in judged.verdicts if not v.accepted} == {"not_selected"}  # a quota, not evidence
        assert "Krum score" in judged.verdicts[4].detail

    def test_not_enough(self) -> None:
        with pytest.raises(NotEnoughUpdates, match=r"n > 2f \+ 2; got n=4, f=1"):
            MultiKrum(f=1)(torch.zeros(4, 2), make_ctx(4))
        with pytest.raises(NotEnoughUpdates, match="m <= n - f"):
            MultiKrum(f=1, m=5)(self.X, make_ctx(5))

    @pytest.mark.parametrize(("kwargs", "name"), [({"f": -1}, "f"), ({"m": 0}, "m"), ({"m": 2.0}, "m")])
    def test_rejects_bad_parameters(self, kwargs: dict[str, object], name: str) -> None:
        with pytest.raises(ValueError, match=f"^{name} must be"):
            MultiKrum(**kwargs)  # type: ignore[arg-type]


class TestGeometricMedian:
    def test_diagonals_cross(self) -> None:
        # For four points in convex position the geometric median is where the diagonals cross.
        x = t([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [50.0, 50.0]])
        out = GeometricMedian(nu=1e-6, max_iter=1000, tol=0.0)(x, make_ctx(4))
        assert torch.allclose(out, torch.tensor([0.5, 0.5]), atol=1e-3)

    def test_collinear_is_the_median(self) -> None:
        x = t([[0.0], [1.0], [2.0], [3.0], [1000.0]])
        assert torch.allclose(GeometricMedian(nu=1e-6)(x, make_ctx(5)), torch.tensor([2.0]), atol=1e-3)

    def test_large_nu_is_the_mean(self) -> None:
        x = t([[0.0], [1.0], [8.0]])
        assert torch.allclose(GeometricMedian(nu=100.0)(x, make_ctx(3)), torch.tensor([3.0]))

    def test_one_row(self) -> None:
        assert torch.equal(GeometricMedian()(t([[1.0, -2.0]]), make_ctx(1)), torch.tensor([1.0, -2.0]))

    @pytest.mark.parametrize(
        ("kwargs", "name"),
        [
            ({"nu": 0.0}, "nu"),
            ({"nu": -1.0}, "nu"),
            ({"nu": math.nan}, "nu"),
            ({"nu": "0.1"}, "nu"),
            ({"max_iter": 0}, "max_iter"),
            ({"max_iter": 2.5}, "max_iter"),
            ({"tol": -1e-3}, "tol"),
        ],
    )
    def test_rejects_bad_parameters(self, kwargs: dict[str, object], name: str) -> None:
        with pytest.raises(ValueError, match=f"^{name} must be"):
            GeometricMedian(**kwargs)  # type: ignore[arg-type]


class TestCenteredClipping:
    X = t([[1.0, 0.0], [0.0, 1.0], [30.0, 40.0]])

    def test_known_answer_from_zero(self) -> None:
        # Third row clipped from norm 50 to 1: (0.6, 0.8). Mean of the three.
        out = CenteredClipping(tau=1.0)(self.X, make_ctx(3))
        assert torch.allclose(out, torch.tensor([1.6 / 3, 1.8 / 3]))

    def test_centre_is_the_previous_aggregate(self) -> None:
        prev = torch.tensor([30.0, 40.0])
        # Around (30, 40): rows 0 and 1 are ~49 away and clipped to length 1 towards themselves.
        out = CenteredClipping(tau=1.0)(self.X, make_ctx(3, previous_aggregate=prev))
        d0 = (self.X[0] - prev) / torch.linalg.vector_norm(self.X[0] - prev)
        d1 = (self.X[1] - prev) / torch.linalg.vector_norm(self.X[1] - prev)
        assert torch.allclose(out, prev + (d0 + d1) / 3)

    def test_adaptive_tau_is_the_median_distance(self) -> None:
        # Distances from 0 are 1, 1, 50: tau = 1, as in the fixed-tau case.
        assert torch.allclose(
            CenteredClipping()(self.X, make_ctx(3)), CenteredClipping(tau=1.0)(self.X, make_ctx(3))
        )

    def test_more_iterations_move_further(self) -> None:
        x = t([[10.0], [10.0], [10.0]])
        assert torch.allclose(CenteredClipping(tau=1.0, iters=3)(x, make_ctx(3)), torch.tensor([3.0]))

    def test_rejects_wrong_previous_shape(self) -> None:
        with pytest.raises(ValueError, match="previous_aggregate"):
            CenteredClipping()(self.X, make_ctx(3, previous_aggregate=torch.zeros(3)))

    @pytest.mark.parametrize(
        ("kwargs", "name"), [({"tau": 0.0}, "tau"), ({"tau": -1.0}, "tau"), ({"iters": 0}, "iters")]
    )
    def test_rejects_bad_parameters(self, kwargs: dict[str, object], name: str) -> None:
        with pytest.raises(ValueError, match=f"^{name} must be"):
            CenteredClipping(**kwargs)  # type: ignore[arg-type]


class TestNNMTrimmedMean:
    X = t([[0.0], [1.0], [2.0], [100.0]])

    def test_mixing_known_answer(self) -> None:
        mixed = nearest_neighbour_mixing(self.X, 1)
        assert torch.allclose(mixed, torch.tensor([[1.0], [1.0], [1.0], [103.0 / 3]]))
        assert torch.equal(nearest_neighbour_mixing(self.X, 0), torch.full((4, 1), 103.0 / 4))

    def test_known_answer(self) -> None:
        assert torch.equal(NNMTrimmedMean(f=1)(self.X, make_ctx(4)), torch.tensor([1.0]))

    def test_not_enough(self) -> None:
        with pytest.raises(NotEnoughUpdates, match="n=2, f=1"):
            NNMTrimmedMean(f=1)(self.X[:2], make_ctx(2))

    def test_rejects_bad_f(self) -> None:
        with pytest.raises(ValueError, match="^f must be"):
            NNMTrimmedMean(f=-2)


RULES = [
    Mean(),
    CoordinateMedian(),
    TrimmedMean(f=2),
    MultiKrum(f=2),
    GeometricMedian(),
    CenteredClipping(),
    CenteredClipping(tau=0.5, iters=3),
    NNMTrimmedMean(f=2),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: repr(r))
class TestProperties:
    def rows(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(9, 17, generator=torch.Generator().manual_seed(1), dtype=dtype)

    def test_input_not_mutated(self, rule: object) -> None:
        x = self.rows()
        before = x.clone()
        rule(x, make_ctx(9, previous_aggregate=torch.ones(17)))  # type: ignore[operator]
        assert torch.equal(x, before)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_shape_and_dtype_kept(self, rule: object, dtype: torch.dtype) -> None:
        out = rule(self.rows(dtype), make_ctx(9))  # type: ignore[operator]
        assert out.shape == (17,)
        assert out.dtype == dtype

    def test_permutation_invariant(self, rule: object) -> None:
        x = self.rows()
        perm = torch.randperm(9, generator=torch.Generator().manual_seed(2))
        a = rule(x, make_ctx(9))  # type: ignore[operator]
        b = rule(x[perm], make_ctx(9))  # type: ignore[operator]
        assert torch.allclose(a, b, atol=1e-6)

    def test_deterministic(self, rule: object) -> None:
        x = self.rows()
        assert torch.equal(rule(x, make_ctx(9)), rule(x.clone(), make_ctx(9)))  # type: ignore[operator]

    def test_repr_shows_parameters(self, rule: object) -> None:
        text = repr(rule)
        for name in ("f", "m", "nu", "tau", "iters", "max_iter", "tol"):
            if hasattr(rule, name):
                assert f"{name}=" in text

