"""The semantic guard's noise stage (FLAME's Gaussian noise on the aggregate; off by default)."""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.guard import AggregationContext, SemanticGuard
from p2p_guard.guard.noise import add_noise


def make_ctx(n: int, seed: int = 0, **kwargs: object) -> AggregationContext:
    return AggregationContext(
        senders=tuple(f"peer{i}" for i in range(n)),
        round=1,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,  # type: ignore[arg-type]
    )


class TestAddNoise:
    def test_adds_level_times_median_norm_times_a_standard_normal(self) -> None:
        aggregate = torch.tensor([1.0, -2.0, 0.5, 0.0])
        out = add_noise(aggregate, 2.0, 0.25, torch.Generator().manual_seed(7))
        z = torch.randn(4, generator=torch.Generator().manual_seed(7), dtype=torch.float32)
        assert torch.equal(out, aggregate + 0.5 * z)  # σ = λ·m = 0.25 · 2
        assert torch.equal(aggregate, torch.tensor([1.0, -2.0, 0.5, 0.0]))  # not mutated

    @pytest.mark.parametrize(("level", "median_norm"), [(0.0, 3.0), (0.1, 0.0)])
    def test_zero_sigma_returns_the_aggregate_and_leaves_the_generator(self, level: float,
                                                                        median_norm: float) -> None:
        aggregate = torch.tensor([1.0, 2.0])
        generator = torch.Generator().manual_seed(3)
        state = generator.get_state()
        assert add_noise(aggregate, median_norm, level, generator) is aggregate
        assert torch.equal(generator.get_state(), state)

    def test_keeps_dtype_and_device(self) -> None:
        out = add_noise(torch.zeros(5, dtype=torch.float64), 1.0, 1.0, torch.Generator().manual_seed(0))
        assert out.dtype == torch.float64
        z = torch.randn(5, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
        assert torch.equal(out, z.to(torch.float64))

    def test_standard_deviation(self) -> None:
        out = add_noise(torch.zeros(200_000), 4.0, 0.5, torch.Generator().manual_seed(1))
        assert math.isclose(float(out.std()), 2.0, rel_tol=0.01)
        assert abs(float(out.mean())) < 0.02

    @pytest.mark.parametrize(("level", "median_norm", "name"),
                             [(-0.1, 1.0, "level"), (math.nan, 1.0, "level"), (0.1, -1.0, "median_norm"),
                              (0.1, math.inf, "median_norm")])
    def test_bad_values(self, level: float, median_norm: float, name: str) -> None:
        with pytest.raises(ValueError, match=name):
            add_noise(torch.zeros(2), median_norm, level, torch.Generator())


class TestSemanticNoise:
    ROWS = torch.tensor([[3.0, 4.0, 0.0], [0.0, 5.0, 0.0], [6.0, 8.0, 0.0], [1.0, 1.0, 1.0]])

    def test_off_by_default(self) -> None:
        assert SemanticGuard().noise == 0.0
        ctx_a, ctx_b = make_ctx(4, seed=5), make_ctx(4, seed=5)
        plain = SemanticGuard(anchoring=False)(self.ROWS, ctx_a)
        assert torch.equal(SemanticGuard(anchoring=False, noise=0.0)(self.ROWS, ctx_b), plain)
        assert torch.equal(ctx_a.generator.get_state(), torch.Generator().manual_seed(5).get_state())

    def test_noise_is_added_to_the_aggregate_before_anchoring(self) -> None:
        plain = SemanticGuard(anchoring=False)(self.ROWS, make_ctx(4, seed=5))
        noisy = SemanticGuard(anchoring=False, noise=0.1)(self.ROWS, make_ctx(4, seed=5))
        # median of the raw norms 5, 5, 10, √3 is 5: σ = 0.1 · 5
        z = torch.randn(3, generator=torch.Generator().manual_seed(5), dtype=torch.float32)
        assert torch.equal(noisy, plain + 0.5 * z)

    def test_anchoring_still_bounds_the_noisy_step(self) -> None:
        ctx = make_ctx(4, seed=2, own_index=3)
        out = SemanticGuard(noise=100.0)(self.ROWS, ctx)
        own = self.ROWS[3]
        assert float(torch.linalg.vector_norm(out - own)) <= 2.0 * float(torch.linalg.vector_norm(own)) * 1.0001

    def test_bad_level(self) -> None:
        with pytest.raises(ValueError, match="noise"):
            SemanticGuard(noise=-1.0)
