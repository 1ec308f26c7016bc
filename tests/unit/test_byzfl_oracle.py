"""Cross-check the baseline rules and the update attacks against byzfl 0.0.11 (LPD-EPFL) on small inputs.

byzfl is a test-only oracle: ``pip install --no-deps byzfl==0.0.11``. ``import byzfl`` imports its benchmark
code, which needs torchvision, matplotlib, seaborn and pandas; the aggregators and attacks need only torch,
numpy and scipy, so those four are stubbed for the import, inside this module only, and the stubs are removed
again afterwards.

Where the semantics differ, the comparison is set up where they coincide (each docstring below says how):
- MultiKrum: byzfl scores with the mean over n − f − 1 neighbours; we use the papers' sum over n − f − 2.
  Compared on rounds whose f outliers are far from the rest, where both keep the same rows.
- GeometricMedian: byzfl starts at 0 and runs T steps; we start at the mean and stop on convergence. Compared
  at convergence (byzfl with T = 2000).
- CenteredClipping: byzfl keeps its centre in ``self.m`` (and rejects any ``m`` given to its constructor);
  we take it from ``ctx.previous_aggregate``. Compared with a fixed τ, setting byzfl's ``m`` by hand.
- ALIE: byzfl returns μ + τσ; REFERENCE.md's form is μ − zσ, so z = −τ.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from unittest import mock

import pytest
import torch

from p2p_guard.attacks import ALittleIsEnough, AttackContext, InnerProductManipulation, SignFlip
from p2p_guard.guard import (
    AggregationContext,
    CenteredClipping,
    CoordinateMedian,
    GeometricMedian,
    Mean,
    MultiKrum,
    NNMTrimmedMean,
    TrimmedMean,
)
from p2p_guard.guard.baselines import nearest_neighbour_mixing

pytestmark = pytest.mark.oracle

_STUBBED = (
    "torchvision",
    "torchvision.datasets",
    "torchvision.transforms",
    "matplotlib",
    "matplotlib.pyplot",
    "seaborn",
    "pandas",
)


@pytest.fixture(scope="module")
def byzfl() -> ModuleType:
    if importlib.util.find_spec("byzfl") is None:
        pytest.skip("byzfl not installed (pip install --no-deps byzfl==0.0.11)")
    with pytest.MonkeyPatch.context() as patch:
        for name in _STUBBED:
            if name not in sys.modules:
                patch.setitem(sys.modules, name, mock.MagicMock())
        return importlib.import_module("byzfl")


def make_ctx(n: int, **kwargs: object) -> AggregationContext:
    return AggregationContext(
        senders=tuple(f"p{i}" for i in range(n)),
        round=0,
        generator=torch.Generator().manual_seed(0),
        **kwargs,  # type: ignore[arg-type]
    )


def random_rows(seed: int, n: int = 7, d: int = 5) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def with_outliers(seed: int, n: int = 9, f: int = 2, d: int = 6) -> torch.Tensor:
    x = random_rows(seed, n, d)
    x[n - f :] += 50.0 * torch.arange(1, f + 1, dtype=torch.float32)[:, None]
    return x


SEEDS = range(3)


@pytest.mark.parametrize("seed", SEEDS)
class TestAgainstByzfl:
    def test_mean(self, byzfl: ModuleType, seed: int) -> None:
        x = random_rows(seed)
        assert torch.allclose(Mean()(x, make_ctx(7)), byzfl.Average()(x), atol=1e-6)

    @pytest.mark.parametrize("n", [6, 7])
    def test_median(self, byzfl: ModuleType, seed: int, n: int) -> None:
        x = random_rows(seed, n)
        assert torch.allclose(CoordinateMedian()(x, make_ctx(n)), byzfl.Median()(x), atol=1e-6)

    @pytest.mark.parametrize("f", [0, 1, 3])
    def test_trimmed_mean(self, byzfl: ModuleType, seed: int, f: int) -> None:
        x = random_rows(seed)
        assert torch.allclose(TrimmedMean(f=f)(x, make_ctx(7)), byzfl.TrMean(f=f)(x), atol=1e-6)

    @pytest.mark.parametrize("f", [1, 2])
    def test_multi_krum_with_separated_outliers(self, byzfl: ModuleType, seed: int, f: int) -> None:
        x = with_outliers(seed, f=f)
        assert torch.allclose(MultiKrum(f=f)(x, make_ctx(9)), byzfl.MultiKrum(f=f)(x), atol=1e-6)

    def test_krum_with_a_central_row(self, byzfl: ModuleType, seed: int) -> None:
        # Row 0 at distance 1 from six rows that are sqrt(2) from each other, two outliers far away: both
        # scores pick row 0.
        centre = random_rows(seed, 1, 6)[0]
        x = torch.cat([centre[None], centre + torch.eye(6), centre + torch.tensor([[60.0] * 6, [-90.0] * 6])])
        ours = MultiKrum(f=2, m=1)(x, make_ctx(9))
        assert torch.equal(ours, x[0])
        assert torch.allclose(ours, byzfl.Krum(f=2)(x), atol=1e-6)

    def test_geometric_median_at_convergence(self, byzfl: ModuleType, seed: int) -> None:
        x = random_rows(seed)
        ours = GeometricMedian(nu=0.1, max_iter=2000, tol=0.0)(x, make_ctx(7))
        theirs = byzfl.GeometricMedian(nu=0.1, T=2000)(x)
        assert torch.allclose(ours, theirs, atol=1e-4)

    @pytest.mark.parametrize(("tau", "iters"), [(0.5, 1), (2.0, 3), (100.0, 1)])
    def test_centered_clipping(self, byzfl: ModuleType, seed: int, tau: float, iters: int) -> None:
        x = random_rows(seed)
        assert torch.allclose(
            CenteredClipping(tau=tau, iters=iters)(x, make_ctx(7)),
            byzfl.CenteredClipping(L=iters, tau=tau)(x),
            atol=1e-6,
        )
        previous = torch.randn(5, generator=torch.Generator().manual_seed(100 + seed))
        oracle = byzfl.CenteredClipping(L=iters, tau=tau)
        oracle.m = previous.clone()  # byzfl's constructor rejects m (TypeError); its state is settable
        ours = CenteredClipping(tau=tau, iters=iters)(x, make_ctx(7, previous_aggregate=previous))
        assert torch.allclose(ours, oracle(x), atol=1e-6)

    @pytest.mark.parametrize("f", [1, 2, 3])
    def test_nnm(self, byzfl: ModuleType, seed: int, f: int) -> None:
        x = random_rows(seed)
        assert torch.allclose(nearest_neighbour_mixing(x, f), byzfl.NNM(f=f)(x), atol=1e-6)

    @pytest.mark.parametrize("f", [1, 2, 3])
    def test_nnm_trimmed_mean(self, byzfl: ModuleType, seed: int, f: int) -> None:
        x = random_rows(seed)
        theirs = byzfl.TrMean(f=f)(byzfl.NNM(f=f)(x))
        assert torch.allclose(NNMTrimmedMean(f=f)(x, make_ctx(7)), theirs, atol=1e-6)

    def test_sign_flip(self, byzfl: ModuleType, seed: int) -> None:
        # byzfl flips the mean of the honest vectors it is given; ours flips the attacker's own row.
        x = random_rows(seed, 1)
        ctx = AttackContext(round=0, n=8, f=2, generator=torch.Generator())
        assert torch.allclose(SignFlip()(x, ctx), byzfl.SignFlipping()(x), atol=1e-6)

    def test_ipm(self, byzfl: ModuleType, seed: int) -> None:
        x = random_rows(seed)
        ctx = AttackContext(round=0, n=8, f=2, generator=torch.Generator())
        ours = InnerProductManipulation(epsilon=0.1)(x, ctx)
        assert torch.allclose(ours, byzfl.InnerProductManipulation(tau=0.1)(x), atol=1e-6)

    def test_alie(self, byzfl: ModuleType, seed: int) -> None:
        x = random_rows(seed)
        ctx = AttackContext(round=0, n=8, f=2, generator=torch.Generator())
        ours = ALittleIsEnough(z=1.5)(x, ctx)
        assert torch.allclose(ours, byzfl.ALittleIsEnough(tau=-1.5)(x), atol=1e-5)
