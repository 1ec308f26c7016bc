"""The swarm's mixing step in the in-process cell (``bench.mixing``): the swarm's function, the swarm's defaults."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
import torch

from p2p_guard.bench import cell as cell_module
from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.bench.mixing import CellMixing, mix_peers_once
from p2p_guard.guard import Guard
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.mixing import MOMENTUM_MIX_RADIUS, clipped_gossip


class _Model:
    """The part of ``LocalModel`` that mixing touches: θ, b and the two shifts."""

    def __init__(self, theta: list[float], momentum: list[float] | None = None) -> None:
        self.theta = torch.tensor(theta, dtype=torch.float32)
        self.momentum = torch.tensor(momentum or [0.0] * len(theta), dtype=torch.float32)

    def shift(self, correction: torch.Tensor) -> None:
        self.theta = self.theta + correction

    def shift_momentum(self, correction: torch.Tensor) -> None:
        self.momentum = self.momentum + correction


NAMES = ["peer00", "peer01", "peer02"]
LATE = CellMixing(early_mix_rounds=0)  # one gossip step in every round


def _mix(models: list[_Model], round_: int = 0, settings: CellMixing = LATE) -> int:
    samplers = [random.Random(i) for i in range(len(models))]
    return mix_peers_once(models, NAMES[: len(models)], round_, samplers, settings)  # type: ignore[arg-type]


def test_defaults_are_the_peers() -> None:
    peer = {f.name: f.default for f in dataclasses.fields(PeerConfig)}
    assert CellMixing() == CellMixing(mix_peers=8, mix_radius=0.05, early_mix_rounds=5, early_mix_steps=3)
    assert {k: getattr(CellMixing(), k) for k in ("mix_peers", "mix_radius", "early_mix_rounds",
                                                  "early_mix_steps")} == {
        k: peer[k] for k in ("mix_peers", "mix_radius", "early_mix_rounds", "early_mix_steps")}


def test_one_step_moves_each_theta_by_its_clipped_gossip() -> None:
    # a = (10, 0), b = (10, 0.3), c = (10, -0.1); caps 0.05·‖θ‖ ≈ 0.5 do not bind.
    # a: distances 0.3, 0.1 → τ = 0.1: (0, 0.3) clipped to (0, 0.1), plus (0, −0.1): no move.
    # b: distances 0.3, 0.4 → τ = 0.3: (0, −0.3) + (0, −0.3) over 3 → b moves by (0, −0.2).
    # c: distances 0.1, 0.4 → τ = 0.1: (0, 0.1) + (0, 0.1) over 3 → c moves by (0, 0.2/3).
    models = [_Model([10.0, 0.0]), _Model([10.0, 0.3]), _Model([10.0, -0.1])]
    before = [m.theta for m in models]
    assert _mix(models) == 1
    assert [m.theta.tolist() for m in models] == [
        pytest.approx([10.0, 0.0], abs=1e-6), pytest.approx([10.0, 0.1], abs=1e-6),
        pytest.approx([10.0, -0.1 + 0.2 / 3], abs=1e-6)]
    for i, m in enumerate(models):  # bit for bit what the swarm's function gives (Peer.mixing's arithmetic)
        expected = before[i] + clipped_gossip(before[i], [b for j, b in enumerate(before) if j != i],
                                              max_radius=0.05).correction
        assert torch.equal(m.theta, before[i] + (expected - before[i]))
    assert all(not m.momentum.any() for m in models)  # a zero momentum is not mixed


def test_early_rounds_iterate_the_gossip_and_mix_the_momentum_once() -> None:
    models = [_Model([10.0, 0.0], [1.0, 0.0]), _Model([10.0, 0.3], [1.0, 1.0]), _Model([10.0, -0.1], [0.0, 1.0])]
    thetas = [m.theta for m in models]
    momenta = [m.momentum for m in models]
    assert _mix(models, round_=4, settings=CellMixing()) == 3  # rounds 0-4: early_mix_steps
    for _ in range(3):
        thetas = [t + clipped_gossip(t, [u for j, u in enumerate(thetas) if j != i], max_radius=0.05).correction
                  for i, t in enumerate(thetas)]
    for i, m in enumerate(models):
        assert torch.allclose(m.theta, thetas[i], atol=1e-6)
        move = clipped_gossip(momenta[i], [b for j, b in enumerate(momenta) if j != i],
                              max_radius=MOMENTUM_MIX_RADIUS).correction
        assert torch.equal(m.momentum, momenta[i] + move)
    # b_0 = (1, 0): distances to (1, 1) and (0, 1) are 1 and √2 → τ = 1, (0, 1) + (−1, 1)/√2·1 over 3
    assert models[0].momentum.tolist() == pytest.approx([1 - 2**-0.5 / 3, (1 + 2**-0.5) / 3], abs=1e-6)
    assert _mix(models, round_=5, settings=CellMixing()) == 1


def test_a_far_neighbour_moves_us_by_at_most_tau_over_m_plus_1() -> None:
    models = [_Model([10.0, 0.0]), _Model([10.0, 0.3]), _Model([1e6, -1e6])]  # peer02 serves a wild θ
    _mix(models)
    # peer00: distances 0.3 and ~1.4e6 → τ = 0.3, capped at 0.05·10 = 0.5 → τ = 0.3; moves ≤ 2·0.3/3
    assert float((models[0].theta - torch.tensor([10.0, 0.0])).norm()) <= 0.2 + 1e-6


def test_a_peer_never_samples_those_its_reputation_excludes() -> None:
    # peer00 excludes peer02, which serves a wild θ: it mixes with peer01 only (m = 1: τ = 0.3, (0, 0.3)/2).
    models = [_Model([10.0, 0.0]), _Model([10.0, 0.3]), _Model([1e6, -1e6])]
    samplers = [random.Random(i) for i in range(3)]
    mix_peers_once(models, NAMES, 0, samplers, LATE, excluded=[{"peer02"}, set(), set()])  # type: ignore[arg-type]
    assert models[0].theta.tolist() == pytest.approx([10.0, 0.15], abs=1e-6)
    alone = [_Model([10.0, 0.0]), _Model([10.0, 0.3])]  # everyone excluded: no neighbour, no move
    mix_peers_once(alone, NAMES[:2], 0, samplers[:2], LATE, excluded=[{"peer01"}, set()])  # type: ignore[arg-type]
    assert alone[0].theta.tolist() == [10.0, 0.0]
    with pytest.raises(ValueError, match="3 models need 3 exclusion sets"):
        mix_peers_once(models, NAMES, 0, samplers, LATE, excluded=[set()])  # type: ignore[arg-type]


def test_names_and_samplers_must_match() -> None:
    with pytest.raises(ValueError, match="3 models need 3 names"):
        mix_peers_once([_Model([1.0])] * 3, NAMES[:2], 0, [random.Random(0)] * 3)  # type: ignore[list-item]


def _spec(**changes: Any) -> CellSpec:
    base = CellSpec(task="digits", guard="mean", attack=None, n=3, f=0, partition="iid", seed=0, rounds=2,
                    inner_steps=2)
    return dataclasses.replace(base, **changes)


def test_a_shared_theta_cell_is_the_same_with_and_without_mixing() -> None:
    on, off = run_cell(_spec(every_receiver=False)), run_cell(_spec(every_receiver=False, mixing=False))
    assert on["shared_theta"] is True
    assert on["state_hash"] == off["state_hash"]
    assert [r["spread"] for r in on["rounds"]] == [0.0, 0.0]


@dataclasses.dataclass(frozen=True)
class _SelfishMean:
    """A receiver-dependent rule: the mean plus a tenth of the receiver's own row (models part without mixing)."""

    def __call__(self, updates: torch.Tensor, ctx: Any) -> torch.Tensor:
        out = updates.mean(dim=0)
        return out + 0.1 * updates[ctx.own_index] if ctx.own_index is not None else out


def test_mixing_pulls_receiver_dependent_models_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cell_module, "build_guard", lambda name, **_: Guard(name="selfish", aggregator=_SelfishMean()))
    on, off = run_cell(_spec(rounds=3)), run_cell(_spec(rounds=3, mixing=False))
    assert on["shared_theta"] is False and off["shared_theta"] is False
    assert on["state_hash"] != off["state_hash"]
    assert all(a["spread"] < b["spread"] for a, b in zip(on["rounds"], off["rounds"], strict=True))


def test_own_update_never_mixes_it_is_the_lone_peer_floor() -> None:
    on, off = run_cell(_spec(guard="own_update", rounds=3)), run_cell(_spec(guard="own_update", rounds=3, mixing=False))
    assert on["shared_theta"] is False  # each peer steps its own row: the models part
    assert on["state_hash"] == off["state_hash"]
    assert [r["spread"] for r in on["rounds"]] == [r["spread"] for r in off["rounds"]]
    assert on["rounds"][-1]["spread"] > 0.0


def test_every_receiver_judges_every_peer_from_round_zero() -> None:
    result, shortcut = run_cell(_spec()), run_cell(_spec(every_receiver=False))
    assert result["shared_theta"] is False
    assert result["timing"]["guard_calls"] == 3 * 2
    assert shortcut["timing"]["guard_calls"] == 2 * 2  # first honest receiver and the probe
    # the mean gives every receiver the same bits: the models stay equal, so mixing moves nothing either way
    assert result["state_hash"] == shortcut["state_hash"]
    assert [r["spread"] for r in result["rounds"]] == [0.0, 0.0]
    assert run_cell(_spec(), check_shared=False)["timing"]["guard_calls"] == 2  # one θ assumed: one call a round
