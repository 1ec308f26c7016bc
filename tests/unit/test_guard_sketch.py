"""The count sketch of the collusion stage's histories past 2^18 coordinates: exact hashes, preserved cosines,
memory independent of d, a secret seed saved with the history, and the stage's verdicts on sketched rows."""

from __future__ import annotations

import math

import pytest
import torch

from p2p_guard.guard import AggregationContext
from p2p_guard.guard.collusion import CollusionCheck, ResidualHistory
from p2p_guard.guard.sketch import BLOCK, SKETCH_WIDTH, CountSketch, new_seed

MASK = (1 << 64) - 1


def reference_hash(seed: int, width: int, i: int) -> tuple[int, float]:
    """splitmix64 in Python integers at position i of the stream keyed by the seed: the bucket from the top
    log2(width) bits of z, the sign from its lowest bit."""
    from p2p_guard.guard.sketch import _key

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    z = mix((_key(seed) + (i + 1) * 0x9E3779B97F4A7C15) & MASK)
    return z >> (64 - int(math.log2(width))), -1.0 if z & 1 else 1.0


class TestCountSketch:
    def test_hashes_equal_the_python_reference_also_past_2_to_the_31(self) -> None:
        sketch = CountSketch(2**10, 987654321)
        for start in (0, 3 * BLOCK - 5, 2**31 - 3):
            buckets, signs = sketch.hashes(start, start + 8)
            for k in range(8):
                assert (int(buckets[k]), float(signs[k])) == reference_hash(987654321, 2**10, start + k)

    def test_hashes_spread_over_every_bucket_with_balanced_signs(self) -> None:
        buckets, signs = CountSketch(2**8, 5).hashes(0, 2**16)
        counts = torch.bincount(buckets, minlength=2**8)
        assert int(counts.min()) > 0 and int(counts.max()) < 2 * 2**8  # 256 expected per bucket
        assert abs(float(signs.sum())) < 4 * math.sqrt(2**16)

    @pytest.mark.parametrize("period", [1, 2, 64, 512])
    def test_structured_vectors_keep_their_norm(self, period: int) -> None:
        """A constant or periodic v (a push shared by every coordinate, or repeated along a matrix's rows): with
        multiply-shift, ||S(v)||^2 / ||v||^2 was 0.48 at the median seed for a constant v (0.11 at worst of 16)."""
        d, width = 2**20 + 12345, 2**16
        v = torch.randn(period, generator=torch.Generator().manual_seed(period), dtype=torch.float64)
        v = v.repeat(d // period + 1)[:d]
        for seed in range(6):
            buckets, signs = CountSketch(width, seed * 104729 + 3).hashes(0, d)
            sketch = torch.zeros(width, dtype=torch.float64).index_add_(0, buckets, signs * v)
            assert float(sketch.norm() ** 2 / v.norm() ** 2) == pytest.approx(1.0, abs=0.05)

    def test_the_secret_seed_is_not_in_the_repr(self) -> None:
        assert "987654321" not in repr(CountSketch(2**10, 987654321))

    def test_another_seed_is_another_hash(self) -> None:
        a, _ = CountSketch(2**10, 1).hashes(0, 64)
        b, _ = CountSketch(2**10, 2).hashes(0, 64)
        assert not torch.equal(a, b)

    def test_unit_residuals_is_the_dense_sketch_of_the_unit_residual(self) -> None:
        g = torch.Generator().manual_seed(0)
        rows, centre = torch.randn(3, 2 * BLOCK + 7, generator=g), torch.randn(2 * BLOCK + 7, generator=g)
        sketch = CountSketch(2**6, 11)
        out, norms = sketch.unit_residuals(rows, centre)
        buckets, signs = sketch.hashes(0, rows.shape[1])
        for j in range(3):
            residual = rows[j].double() - centre.double()
            assert float(norms[j]) == pytest.approx(float(residual.norm()), rel=1e-12)
            dense = torch.zeros(2**6, dtype=torch.float64).index_add_(0, buckets, signs * residual / residual.norm())
            assert torch.allclose(out[j], dense, rtol=1e-10, atol=1e-12)
        assert torch.equal(rows, rows.clone())  # not mutated (the residual is a fresh block)

    def test_cosines_are_kept_within_a_few_over_root_m(self) -> None:
        g = torch.Generator().manual_seed(1)
        d, m = 200_000, 2**14
        x = torch.randn(4, d, generator=g)
        x[1] = 0.6 * x[0] + 0.8 * x[1]  # cosine 0.6 with row 0
        x[2] = -x[0] + 0.01 * x[2]  # about -1
        out, _ = CountSketch(m, 3).unit_residuals(x, torch.zeros(d))
        cos = out @ out.T / (out.norm(dim=1)[:, None] * out.norm(dim=1)[None, :])
        for j in (1, 2, 3):
            true = float(torch.nn.functional.cosine_similarity(x[0].double(), x[j].double(), dim=0))
            assert abs(float(cos[0, j]) - true) < 4 / math.sqrt(m)

    def test_a_row_equal_to_the_centre_or_not_finite_sketches_to_zero(self) -> None:
        rows = torch.stack([torch.ones(300), torch.full((300,), float("nan")), torch.arange(300.0)])
        out, _ = CountSketch(2**4, 0).unit_residuals(rows, torch.ones(300))
        assert torch.equal(out[0], torch.zeros(16, dtype=torch.float64))
        assert torch.equal(out[1], torch.zeros(16, dtype=torch.float64))
        assert float(out[2].abs().sum()) > 0

    @pytest.mark.parametrize(("width", "seed"), [(0, 1), (3, 1), (2**10, -1), (2**10, 2**63), (True, 1)])
    def test_rejects_bad_parameters(self, width: int, seed: int) -> None:
        with pytest.raises(ValueError, match="width|seed"):
            CountSketch(width, seed)

    def test_new_seeds_are_in_range_and_differ(self) -> None:
        seeds = {new_seed() for _ in range(8)}
        assert len(seeds) == 8 and all(0 <= s < 2**63 for s in seeds)


def ctx(round_: int, n: int, own: int | None = 0) -> AggregationContext:
    return AggregationContext(senders=tuple(f"p{i}" for i in range(n)), round=round_,
                              generator=torch.Generator().manual_seed(0), own_index=own)


def trio_rows(d: int, round_: int) -> torch.Tensor:
    """6 rows around a zero centre: row 0 ours, rows 1-3 share a direction (the trio), rows 4-5 independent."""
    g = torch.Generator().manual_seed(100 + round_)
    rows = torch.randn(6, d, generator=g)
    common = torch.randn(d, generator=torch.Generator().manual_seed(7))
    rows[1:4] = rows[1:4] + 1.5 * common
    return rows


class TestSketchedHistory:
    def test_memory_is_width_not_d(self) -> None:
        h = ResidualHistory(width=2**8, seed=1)
        units = h.units(torch.randn(2, 5000), torch.zeros(5000))
        assert [u.shape for u in units] == [(2**8,), (2**8,)]
        h.add("me", "a", 0, units[0], numel=5000)
        h.add("me", "a", 1, units[1], numel=5000)
        assert h.nbytes == 2 * 2**8 * 8  # previous + current, each 2 KiB, where whole they would be 2 x 40 kB

    def test_whole_up_to_the_width(self) -> None:
        h = ResidualHistory(width=2**8, seed=1)
        rows = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
        units = h.units(rows, torch.zeros(2))
        assert torch.equal(units[0], torch.tensor([0.6, 0.8], dtype=torch.float64))
        assert torch.equal(units[1], torch.zeros(2, dtype=torch.float64))
        assert ResidualHistory().sketch.width == SKETCH_WIDTH == 2**18

    def test_another_d_starts_over(self) -> None:
        h = ResidualHistory(width=2**4, seed=1)
        u = h.units(torch.randn(1, 100), torch.zeros(100))[0]
        h.add("me", "a", 0, u, numel=100)
        assert h.add("me", "a", 1, u, numel=101)[1] == 1

    def test_state_round_trip_keeps_the_seed_and_goes_on_exactly(self) -> None:
        h = ResidualHistory(width=2**6, seed=42)
        rows = torch.randn(2, 1000, generator=torch.Generator().manual_seed(0))
        h.add("me", "a", 0, h.units(rows[:1], torch.zeros(1000))[0], numel=1000)
        state = h.state_dict()
        assert (state["version"], state["width"], state["seed"]) == (4, 2**6, 42)
        g = ResidualHistory(width=2**6)  # another secret seed until loaded
        g.load_state_dict(state, numel=1000)
        assert g.sketch.seed == 42
        later_h = h.add("me", "a", 1, h.units(rows[1:], torch.zeros(1000))[0], numel=1000)[0]
        later_g = g.add("me", "a", 1, g.units(rows[1:], torch.zeros(1000))[0], numel=1000)[0]
        assert torch.equal(later_h, later_g)

    @pytest.mark.parametrize("change", ["width", "seed", "d", "length", "norm", "numel", "width tensor", "d huge",
                                        "d bool", "version tensor", "version float", "H sparse"])
    def test_load_refuses_a_bad_sketched_state(self, change: str) -> None:
        h = ResidualHistory(width=2**6, seed=42)
        h.add("me", "a", 0, h.units(torch.randn(1, 1000), torch.zeros(1000))[0], numel=1000)
        state = h.state_dict()
        entry = state["entries"][0]
        if change == "width":
            state["width"] = 2**7
        elif change == "seed":
            state["seed"] = -3
        elif change == "d":
            entry[5] = 0
        elif change == "length":
            entry[3] = torch.zeros(1000, dtype=torch.float64)  # whole, where d = 1000 > 64 is sketched
        elif change == "norm":
            entry[3] = torch.full((2**6,), 1e6, dtype=torch.float64)
        elif change == "width tensor":  # a RuntimeError ("Boolean value of Tensor ...") escaped the check
            state["width"] = torch.tensor([2**6, 2**6])
        elif change == "d huge":  # math.sqrt(d) raised OverflowError
            entry[5] = 10**400
        elif change == "d bool":
            entry[5] = True
        elif change == "version tensor":
            state["version"] = torch.tensor([4, 4])
        elif change == "version float":
            state["version"] = 4.0
        elif change == "H sparse":  # NotImplementedError from the norm
            entry[3] = entry[3].to_sparse()
        g = ResidualHistory(width=2**6, seed=1)
        with pytest.raises(ValueError, match="collusion history"):
            g.load_state_dict(state, numel=999 if change == "numel" else None if change == "d huge" else 1000)
        assert (len(g), g.sketch.seed) == (0, 1)  # nothing changed

    def test_version_3_loads_when_whole_and_its_sketches_are_refused(self) -> None:
        """Version 3's sketches came from the multiply-shift hash: summed with this hash's they would be noise."""
        e = torch.eye(4, dtype=torch.float64)
        g = ResidualHistory(width=2**4, seed=1)
        g.load_state_dict({"version": 3, "width": 2**4, "seed": 9, "entries": [["me", "a", 0, e[0], 1, 4]]}, numel=4)
        assert torch.equal(g.add("me", "a", 1, e[1])[0], e[0] + e[1])
        old = {"version": 3, "width": 2**4, "seed": 9,
               "entries": [["me", "a", 0, torch.zeros(16, dtype=torch.float64), 1, 100]]}
        with pytest.raises(ValueError, match="sketch of version 3's multiply-shift hash"):
            ResidualHistory(width=2**4, seed=1).load_state_dict(old, numel=100)

    def test_version_2_loads_when_whole_and_is_refused_past_the_width(self) -> None:
        e = torch.eye(4, dtype=torch.float64)
        g = ResidualHistory(width=2**4, seed=1)
        g.load_state_dict({"version": 2, "entries": [["me", "a", 0, e[0], 1]]}, numel=4)
        assert torch.equal(g.add("me", "a", 1, e[1])[0], e[0] + e[1])
        old = {"version": 2, "entries": [["me", "a", 0, torch.zeros(100, dtype=torch.float64), 1]]}
        with pytest.raises(ValueError, match="expected 16"):
            ResidualHistory(width=2**4, seed=1).load_state_dict(old, numel=100)


class TestSketchedStage:
    def test_a_sketched_trio_is_rejected_as_the_whole_one_is(self) -> None:
        d = 20_000
        whole, sketched = CollusionCheck(tau=0.5, min_rounds=2), CollusionCheck(tau=0.5, min_rounds=2)
        sketched.history = ResidualHistory(width=2**11, seed=9)
        outs = []
        for check in (whole, sketched):
            check(trio_rows(d, 0), torch.zeros(d), ctx(0, 6))
            outs.append(check(trio_rows(d, 1), torch.zeros(d), ctx(1, 6)))
        assert sorted(outs[0]) == sorted(outs[1]) == [1, 2, 3]
        assert len(sketched.history) == 6 and sketched.history.nbytes == 6 * 2 * 2**11 * 8
