"""swarm.mixing streams over column blocks: same results as the whole-row float64 formulas, no (d,) float64 copy.

The reference functions below are the formulas as they were before the blocks (one float64 ``(d,)`` difference
per neighbour): the blocked code must give their bits for d ≤ one block (the correction for any d), and agree
within 1e-12 relative beyond.
"""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.swarm import mixing
from p2p_guard.swarm.mixing import clipped_gossip, consensus_distance, debiased_distance, robust_centre


def _old_gossip(own: torch.Tensor, neighbours: list[torch.Tensor], max_radius: float,
                noise: list[float] | None = None) -> tuple[torch.Tensor, float, int, tuple[float, ...],
                                                           tuple[float, ...]]:
    noises = [0.0] * len(neighbours) if noise is None else noise
    diffs = [x.to(torch.float64) - own.to(torch.float64) for x in neighbours]
    norms = [float(d.norm()) for d in diffs]
    debiased = [debiased_distance(n, e) for n, e in zip(norms, noises, strict=True)]
    ordered = sorted(debiased)
    centre = ordered[(len(ordered) - 1) // 2]
    if centre == 0.0:
        centre = ordered[len(ordered) // 2]
    tau = float(min(centre, max_radius * float(own.to(torch.float64).norm())))
    total = torch.zeros_like(diffs[0])
    clipped = 0
    for d, n in zip(diffs, norms, strict=True):
        if n > tau:
            clipped += 1
            total += d * (tau / n) if n > 0 else d
        else:
            total += d
    return (total / (len(neighbours) + 1)).to(own.dtype), tau, clipped, tuple(debiased), tuple(norms)


def _old_consensus(states: list[torch.Tensor]) -> float:
    worst = 0.0
    for i, a in enumerate(states):
        norm = float(a.to(torch.float64).norm())
        for j, b in enumerate(states):
            if i == j:
                continue
            dist = float((a.to(torch.float64) - b.to(torch.float64)).norm())
            worst = max(worst, dist / norm if norm > 0 else (float("inf") if dist > 0 else 0.0))
    return worst


def _states(d: int, m: int, seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    own = torch.randn(d, generator=g)
    scales = [0.01 * (k + 1) ** 2 for k in range(m)]  # spread distances: some clipped, some not
    return own, [own + s * torch.randn(d, generator=g) for s in scales]


@pytest.mark.parametrize(("d", "m", "noise"), [(1, 1, None), (1000, 3, None), (4096, 8, [0.0, 0.5, 0.01, 0.0,
                                                                                           2.0, 0.0, 0.1, 0.0]),
                                                (1 << 18, 4, None)])
def test_gossip_is_the_whole_row_formula_bit_for_bit_in_one_block(d: int, m: int, noise: list[float] | None
                                                                   ) -> None:
    own, neighbours = _states(d, m, seed=d + m)
    new = clipped_gossip(own, neighbours, max_radius=0.5, noise=noise)
    correction, tau, clipped, distances, raw = _old_gossip(own, neighbours, 0.5, noise)
    assert torch.equal(new.correction, correction)
    assert new.correction.dtype == torch.float32
    assert (new.tau, new.clipped, new.distances, new.raw_distances) == (tau, clipped, distances, raw)
    assert 0 < clipped < m or m == 1


def test_gossip_over_several_blocks_agrees_with_the_whole_row_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    d, m = 10_000, 5
    own, neighbours = _states(d, m, seed=3)
    correction, tau, clipped, _, raw = _old_gossip(own, neighbours, 0.5)
    monkeypatch.setattr(mixing, "MIX_BLOCK", 1536)  # 7 blocks, the last one short
    new = clipped_gossip(own, neighbours, max_radius=0.5)
    assert new.clipped == clipped
    assert math.isclose(new.tau, tau, rel_tol=1e-12, abs_tol=0.0)
    for a, b in zip(new.raw_distances, raw, strict=True):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    assert torch.allclose(new.correction.double(), correction.double(), rtol=1e-6, atol=0.0)


def test_gossip_blocks_give_the_same_correction_when_tau_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # All neighbours inside τ (max_radius large, median clipping aside): nothing depends on the norms' last bits.
    own, neighbours = _states(5000, 1, seed=5)
    whole = clipped_gossip(own, neighbours, max_radius=10.0)
    monkeypatch.setattr(mixing, "MIX_BLOCK", 1024)
    blocked = clipped_gossip(own, neighbours, max_radius=10.0)
    assert whole.clipped == blocked.clipped == 0
    assert torch.equal(whole.correction, blocked.correction)


def test_gossip_holds_no_row_sized_float64_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    d, block = 8192, 1024
    own, neighbours = _states(d, 4, seed=7)
    monkeypatch.setattr(mixing, "MIX_BLOCK", block)
    largest: list[int] = []
    real_zeros_like, real_to = torch.zeros_like, torch.Tensor.to

    def watch_to(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        out = real_to(self, *args, **kwargs)
        if out.dtype == torch.float64:
            largest.append(out.numel())
        return out

    def watch_zeros_like(t: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        out = real_zeros_like(t, *args, **kwargs)
        if out.dtype == torch.float64:
            largest.append(out.numel())
        return out

    monkeypatch.setattr(torch.Tensor, "to", watch_to)
    monkeypatch.setattr(torch, "zeros_like", watch_zeros_like)
    result = clipped_gossip(own, neighbours, max_radius=0.5)
    assert largest and max(largest) == block  # float64 temporaries are one block
    assert result.correction.shape == (d,)


def test_gossip_keeps_shape_checks_and_empty_sample() -> None:
    own = torch.ones(4)
    with pytest.raises(ValueError, match="neighbour shape"):
        clipped_gossip(own, [torch.ones(4), torch.ones(5)], max_radius=1.0)
    empty = clipped_gossip(own, [], max_radius=1.0)
    assert torch.equal(empty.correction, torch.zeros(4)) and empty.tau == 0.0


def test_gossip_takes_float16_neighbours_as_their_float32_values() -> None:
    own, neighbours = _states(3000, 3, seed=11)
    half = [x.half() for x in neighbours]
    a = clipped_gossip(own, half, max_radius=0.5)
    b = clipped_gossip(own, [x.float() for x in half], max_radius=0.5)
    assert torch.equal(a.correction, b.correction) and a.raw_distances == b.raw_distances


@pytest.mark.parametrize("block", [None, 100])
def test_robust_centre_is_the_stacked_median(monkeypatch: pytest.MonkeyPatch, block: int | None) -> None:
    if block is not None:
        monkeypatch.setattr(mixing, "MIX_BLOCK", block)
    g = torch.Generator().manual_seed(1)
    for k in (1, 2, 3, 4):
        states = [torch.randn(1000, generator=g) for _ in range(k)]
        states[0][:10] = 1.0  # ties
        expected = torch.stack(states).median(dim=0).values
        assert torch.equal(robust_centre(states), expected)


def test_consensus_distance_is_the_whole_row_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    own, others = _states(3000, 3, seed=13)
    states = [own, *others, torch.zeros(3000)]
    assert consensus_distance(states) == _old_consensus(states) == float("inf")
    assert consensus_distance(states[:4]) == _old_consensus(states[:4])
    assert consensus_distance([torch.zeros(5), torch.zeros(5)]) == 0.0
    assert consensus_distance([own]) == 0.0
    monkeypatch.setattr(mixing, "MIX_BLOCK", 512)
    assert math.isclose(consensus_distance(states[:4]), _old_consensus(states[:4]), rel_tol=1e-12)
