"""The guard's blockwise geometry (``guard/linalg.py``) gives the one-pass results: same bits or same verdicts.

Rows here span a full column block and a tail (d = BLOCK + 777), so every blockwise path is taken. The
references are the one-pass formulas the functions replaced, written out in the tests.
"""

from __future__ import annotations

import pytest
import torch

from p2p_guard.guard import linalg
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.baselines import (
    centered_clip,
    coordinate_trimmed_mean,
    mixed_trimmed_mean,
    nearest_neighbour_mixing,
)
from p2p_guard.guard.linalg import (
    BLOCK,
    column_blocks,
    combine_norms,
    cosines_to,
    pairwise_distances,
    row_norms,
    stable_argsort,
)
from p2p_guard.guard.registry import build_guard

D = BLOCK + 777


def _rows(n: int, d: int = D, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    mean = torch.randn(d, generator=generator)
    scales = torch.rand(n, 1, generator=generator) + 0.5
    return (mean + 1.5 * torch.randn(n, d, generator=generator)) * scales


def _one_pass_norms(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.linalg.vector_norm(row, dtype=torch.float64) for row in x])


def _one_pass_mixing(x: torch.Tensor, f: int) -> torch.Tensor:
    n = len(x)
    dist = torch.zeros((n, n), dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            dist[i, j] = dist[j, i] = torch.linalg.vector_norm(x[i] - x[j], dtype=torch.float64)
    return torch.stack(
        [x[torch.sort(stable_argsort(dist[i])[: n - f]).values].mean(dim=0) for i in range(n)]
    )


class TestColumnBlocks:
    def test_cover_in_order(self) -> None:
        assert list(column_blocks(10, 4)) == [slice(0, 4), slice(4, 8), slice(8, 10)]
        assert list(column_blocks(0, 4)) == [slice(0, 0)]
        assert list(column_blocks(3)) == [slice(0, 3)]

    def test_block_is_read_at_call_time(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(linalg, "BLOCK", 2)
        assert list(column_blocks(3)) == [slice(0, 2), slice(2, 3)]

    @pytest.mark.parametrize(("d", "block"), [(-1, 4), (3, 0)])
    def test_rejects(self, d: int, block: int) -> None:
        with pytest.raises(ValueError, match=f"got d={d}, block={block}"):
            list(column_blocks(d, block))

    def test_block_is_a_multiple_of_512(self) -> None:
        assert BLOCK % 512 == 0

    def test_combine_norms_of_one_block_is_exact(self) -> None:
        p = torch.tensor([1.2345678901234567, 0.0, 3e-300], dtype=torch.float64)
        assert torch.equal(combine_norms([p]), p)
        assert torch.allclose(combine_norms([torch.tensor([3.0]), torch.tensor([4.0])]), torch.tensor([5.0]))


class TestSameBitsWithinOneBlock:
    """For d <= BLOCK the blockwise functions are the one-pass float64 reductions, bit for bit."""

    def test_norms_distances_cosines(self) -> None:
        x = _rows(5, d=3000)
        assert torch.equal(row_norms(x), _one_pass_norms(x))
        dist = pairwise_distances(x)
        assert dist[1, 3] == torch.linalg.vector_norm(x[1] - x[3], dtype=torch.float64)
        ref = x[0].to(torch.float64)
        cos = float(torch.dot(x[2].to(torch.float64), ref) / (torch.linalg.vector_norm(x[2].to(torch.float64))
                                                               * torch.linalg.vector_norm(ref)))
        assert float(cosines_to(x, x[0])[2]) == cos


class TestBlockwiseAcrossBlocks:
    def test_float32_results_keep_their_bits(self) -> None:
        x = _rows(9)
        f = 4
        mixed = _one_pass_mixing(x, f)
        assert torch.equal(nearest_neighbour_mixing(x, f), mixed)
        assert torch.equal(coordinate_trimmed_mean(x, f), torch.sort(x, dim=0).values[f : 9 - f].mean(dim=0))
        assert torch.equal(mixed_trimmed_mean(x, f), torch.sort(mixed, dim=0).values[f : 9 - f].mean(dim=0))
        centre = x.mean(dim=0)
        diffs = x - centre
        dists = row_norms(diffs)
        radius = float(dists.median())  # odd n: the middle value
        scale = torch.where(dists > radius, radius / dists, 1.0).to(x.dtype)
        assert torch.equal(centered_clip(x, centre, None, 1), centre + (scale[:, None] * diffs).mean(dim=0))

    def test_float64_figures_within_1e_12_of_one_pass(self) -> None:
        x = _rows(6)
        assert torch.allclose(row_norms(x), _one_pass_norms(x), rtol=1e-12, atol=0)
        dist = pairwise_distances(x)
        assert torch.equal(dist, dist.T) and not dist.diagonal().any()
        assert abs(float(dist[0, 5]) / float(torch.linalg.vector_norm(x[0] - x[5], dtype=torch.float64)) - 1) < 1e-12
        ref = x[0].to(torch.float64)
        one_pass = torch.stack([torch.dot(r.to(torch.float64), ref) for r in x]) / (_one_pass_norms(x) * ref.norm())
        assert torch.allclose(cosines_to(x, x[0]), one_pass, rtol=1e-12, atol=1e-15)

    def test_inputs_not_mutated(self) -> None:
        x = _rows(5)
        copy = x.clone()
        pairwise_distances(x), mixed_trimmed_mean(x, 2), centered_clip(x, x[0], None, 2), cosines_to(x, x[1])
        assert torch.equal(x, copy)

    @pytest.mark.parametrize("attack", ["none", "sign_flip", "scaled"])
    def test_semantic_guard_verdicts_and_aggregate_as_with_one_block(
        self, monkeypatch: pytest.MonkeyPatch, attack: str
    ) -> None:
        x = _rows(9, seed=3)
        if attack == "sign_flip":
            x[6:] = -10 * x[:3].mean(dim=0)
        elif attack == "scaled":
            x[7:] = 20 * x[7:]
        senders = tuple(f"peer{i}" for i in range(9))
        ctx = AggregationContext(senders=senders, round=0, generator=torch.Generator(), own_index=0)
        guard = build_guard("semantic")
        blocked = guard(x, ctx)
        monkeypatch.setattr(linalg, "BLOCK", D)  # one block: the one-pass reductions the guard used to run
        whole = guard(x, ctx)
        assert [v.accepted for v in blocked.verdicts] == [v.accepted for v in whole.verdicts]
        assert [v.reason for v in blocked.verdicts] == [v.reason for v in whole.verdicts]
        assert sum(not v.accepted for v in blocked.verdicts) == {"none": 0, "sign_flip": 3, "scaled": 2}[attack]
        assert torch.allclose(blocked.aggregate, whole.aggregate, rtol=0, atol=1e-6)
