"""Unit tests: int8 rounding noise is subtracted from mixing distances (``protocol.states.int8_rounding_noise``,
``swarm.mixing.debiased_distance`` and ``clipped_gossip(noise=...)``).

A state received in int8 is θ̂ = θ + e with E‖e‖² = Σ_c k_c·s_c²/12 (s_c: the chunk's step, taken from the decoded
values' own absmax; k_c: its values not coded 0 or ±127). τ and the reported distances use
d̂ = sqrt(max(0, d² − E‖e‖²)); the clipping keeps the raw norm, so one neighbour still moves us by at most τ/(m+1).
"""

from __future__ import annotations

import asyncio
import math
import struct
from typing import Any

import numpy as np
import pytest
import torch

import p2p_guard.swarm.peer as peer_module
from p2p_guard.protocol.states import decode_state, encode_state, int8_rounding_noise, rounding_noise
from p2p_guard.swarm.mixing import clipped_gossip, debiased_distance
from p2p_guard.swarm.peer import Peer
from p2p_guard.swarm.transport import HALF, INT8, PayloadServer
from tests.unit.test_mix_int8 import _peer, _serving
from tests.unit.test_mix_suspects import FAST, SLOW


def _int8(state: torch.Tensor) -> torch.Tensor:
    decoded = decode_state(encode_state(state.numpy().tobytes(), "int8"), "int8", state.numel())
    assert isinstance(decoded, torch.Tensor)
    return decoded


# -- the estimate ---------------------------------------------------------------------------------------------

def test_the_noise_is_k_times_the_step_squared_over_12_per_chunk() -> None:
    """Chunk 0: step 2⁻⁷ (absmax 127·2⁻⁷), 1024 values of which one is the absmax and one is 0: k = 1022.
    Chunk 1 (partial, 10 values): step 2⁻⁹, two values at ±absmax, eight inside: k = 8. Chunk 2: all zero."""
    first = torch.full((1024,), 5 * 2.0**-7)
    first[0], first[1] = 127 * 2.0**-7, 0.0
    second = torch.full((10,), -3 * 2.0**-9)
    second[3], second[7] = 127 * 2.0**-9, -127 * 2.0**-9
    state = torch.cat([first, second])
    assert int8_rounding_noise(state) == pytest.approx(1022 * 2.0**-14 / 12 + 8 * 2.0**-18 / 12, rel=1e-12)
    assert int8_rounding_noise(torch.cat([state, torch.zeros(2048)])) == int8_rounding_noise(state)
    assert int8_rounding_noise(torch.zeros(3000)) == 0.0
    assert int8_rounding_noise(torch.zeros(0)) == 0.0


def test_the_estimate_cuts_chunks_as_the_codec_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """helper-48: ``int8_rounding_noise`` computed ⌈d/1024⌉ itself; it now asks ``quantized.chunk_count``, the
    function the codec's size formula and encoder use, so the two cannot drift apart."""
    import p2p_guard.protocol.quantized as quantized
    import p2p_guard.protocol.states as states

    assert [quantized.chunk_count(d, 1024) for d in (0, 1, 1024, 1025, 2048)] == [0, 1, 1, 2, 2]
    assert quantized.int8_payload_bytes(1025) == 4 * 2 + 1025
    assert (states.INT8_QMAX, states.chunk_count) == (127, quantized.chunk_count)
    asked: list[tuple[int, int]] = []

    def counting(numel: int, chunk: int) -> int:
        asked.append((numel, chunk))
        return quantized.chunk_count(numel, chunk)

    monkeypatch.setattr(states, "chunk_count", counting)
    assert int8_rounding_noise(torch.full((1025,), 0.5)) == 0.0  # every value is its chunk's absmax: exact
    assert asked == [(1025, 1024)]


def test_a_constant_chunk_has_no_noise() -> None:
    """Every value codes to ±127 (a chunk of LayerNorm gains at 1.0): decoded exactly, nothing to subtract."""
    state = torch.full((3000,), 1 + 2.0**-10)
    assert int8_rounding_noise(_int8(state)) == 0.0
    assert torch.allclose(_int8(state), state, rtol=1e-6, atol=0)


def test_for_an_honest_state_the_decoded_absmax_gives_the_wire_scale() -> None:
    gen = torch.Generator().manual_seed(1)
    state = torch.randn(5000, generator=gen) * 0.1
    data = encode_state(state.numpy().tobytes(), "int8")
    scales = np.frombuffer(data, dtype="<f4", count=5).astype(np.float64)
    codes = np.frombuffer(data, dtype=np.int8, offset=20).astype(np.int64)
    padded = np.zeros(5 * 1024, dtype=np.int64)
    padded[:5000] = codes
    inner = ((np.abs(padded) > 0) & (np.abs(padded) < 127)).reshape(5, 1024).sum(axis=1)
    assert int8_rounding_noise(_int8(state)) == pytest.approx(float((inner * scales**2 / 12).sum()), rel=1e-6)


def test_the_estimate_matches_the_actual_rounding_error() -> None:
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        state = torch.randn(20_000, generator=gen) * 0.05
        actual = float((_int8(state) - state).double().norm() ** 2)
        assert int8_rounding_noise(_int8(state)) == pytest.approx(actual, rel=0.05)


def test_only_int8_has_rounding_noise_to_subtract() -> None:
    state = torch.linspace(-1, 1, 3000)
    assert rounding_noise(state, "fp32") == 0.0
    assert rounding_noise(state, "fp16") == 0.0  # float16's ~2e-4 relative error is left in
    assert rounding_noise(state, "int8") == int8_rounding_noise(state) > 0
    with pytest.raises(ValueError, match="precision must be one of"):
        rounding_noise(state, "int4")


# -- the distance ---------------------------------------------------------------------------------------------

def test_debiased_distance_exact_values() -> None:
    assert debiased_distance(5.0, 9.0) == 4.0
    assert debiased_distance(3.0, 16.0) == 0.0  # all noise: clamped at 0
    assert debiased_distance(2.0, 0.0) == 2.0  # exact states: unchanged, bit for bit
    assert debiased_distance(0.1 + 0.2, 0.0) == 0.1 + 0.2


def test_the_debiased_distance_is_close_to_the_true_one_where_the_raw_one_is_not() -> None:
    """Two models at a true distance about the int8 noise's size (late in a run, §7.8)."""
    gen = torch.Generator().manual_seed(3)
    own = torch.randn(20_000, generator=gen) * 0.05
    for _ in range(3):
        theirs = own + torch.randn(20_000, generator=gen) * 0.05 * 0.004
        received = _int8(theirs)
        true = float((theirs - own).double().norm())
        raw = float((received - own).double().norm())
        debiased = debiased_distance(raw, int8_rounding_noise(received))
        assert raw > 1.3 * true  # the noise inflates the plain distance by over 30 %
        assert debiased == pytest.approx(true, rel=0.05)


# -- the gossip step ------------------------------------------------------------------------------------------

def test_tau_uses_the_debiased_median_and_the_clipping_the_raw_norm() -> None:
    own = torch.tensor([0.0, 0.0, 10.0])
    diffs = [torch.tensor([3.0, 4.0, 0.0]), torch.tensor([0.0, 2.0, 0.0]), torch.tensor([6.0, 8.0, 0.0])]
    neighbours = [own + v for v in diffs]
    result = clipped_gossip(own, neighbours, max_radius=1.0, noise=[9.0, 0.0, 36.0])
    assert result.raw_distances == (5.0, 2.0, 10.0)
    assert result.distances == (4.0, 2.0, 8.0)
    assert result.tau == 4.0  # the median of 4, 2, 8 (raw: 5)
    assert result.clipped == 2  # raw 5 and 10 > τ = 4: each moved by τ = 4 at most
    expected = (diffs[0] * 0.8 + diffs[1] + diffs[2] * 0.4) / 4
    assert torch.allclose(result.correction, expected, rtol=1e-6, atol=0)
    plain = clipped_gossip(own, neighbours, max_radius=1.0)
    assert plain.tau == 5.0 and plain.distances == plain.raw_distances == (5.0, 2.0, 10.0)
    assert torch.equal(clipped_gossip(own, neighbours, max_radius=1.0, noise=[0.0] * 3).correction,
                       plain.correction)  # no noise: the plain step, bit for bit


def test_a_neighbour_credited_with_noise_still_moves_us_by_at_most_tau_over_m_plus_1() -> None:
    own = torch.tensor([0.0, 0.0, 10.0])
    far = own + torch.tensor([30.0, 40.0, 0.0])  # raw 50, credited 2400: debiased 10
    near = [own + torch.tensor([1.0, 0.0, 0.0]), own + torch.tensor([0.0, 1.0, 0.0])]
    result = clipped_gossip(own, [far, *near], max_radius=1.0, noise=[2400.0, 0.0, 0.0])
    assert result.distances == (10.0, 1.0, 1.0) and result.tau == 1.0
    assert float(result.correction.norm()) <= 3 * 1.0 / 4 * (1 + 1e-6)
    captured = clipped_gossip(own, [far] * 3, max_radius=1.0, noise=[2400.0] * 3)  # a sample of three such states
    assert captured.tau == 10.0 and captured.clipped == 3
    assert float(captured.correction.norm()) == pytest.approx(3 * 10.0 / 4, rel=1e-6)  # m·τ/(m+1), not m·50/(m+1)


def test_bad_noise_values_are_refused() -> None:
    own, other = torch.ones(3), torch.zeros(3)
    for noise, message in (([1.0, 2.0], "2 noise values for 1 neighbours"), ([-1.0], "finite and >= 0"),
                           ([math.nan], "finite and >= 0"), ([math.inf], "finite and >= 0")):
        with pytest.raises(ValueError, match=message):
            clipped_gossip(own, [other], max_radius=1.0, noise=noise)


# -- a hostile sender -----------------------------------------------------------------------------------------

def test_an_inflated_wire_scale_earns_no_noise_credit() -> None:
    """A sender that declares 100 times its honest scales (small codes) would claim 10⁴ times the noise by the
    wire scales; from its decoded values it gets less than an honest encoding of the same state."""
    gen = torch.Generator().manual_seed(4)
    state = torch.randn(3000, generator=gen) * 0.1
    honest = encode_state(state.numpy().tobytes(), "int8")
    scales = np.frombuffer(honest, dtype="<f4", count=3) * 100
    codes = np.clip(np.round(state.numpy() / np.repeat(scales, 1024)[:3000]), -127, 127).astype(np.int8)
    hostile = struct.pack("<3f", *scales) + codes.tobytes()
    decoded = decode_state(hostile, "int8", 3000)
    assert isinstance(decoded, torch.Tensor)
    claimed_by_wire = float((1023 * scales.astype(np.float64) ** 2 / 12).sum())
    credited = int8_rounding_noise(decoded)
    assert credited <= int8_rounding_noise(_int8(state))
    assert credited < claimed_by_wire / 1e4


def test_spikes_that_raise_the_credit_cost_more_distance_than_they_earn() -> None:
    """Our own state with one spike of 127·S per chunk where ours is small: credited up to 1022·S²/12 per chunk,
    it pays (127·S)² per chunk; its debiased distance stays within 1 % of its true distance."""
    gen = torch.Generator().manual_seed(5)
    own = torch.randn(4096, generator=gen) * 0.01
    for big in (0.1, 1.0, 100.0):
        spiked = own.clone()
        spiked[::1024] = 127 * big  # makes every chunk's step `big`
        received = _int8(spiked)
        true = float((spiked - own).double().norm())
        debiased = debiased_distance(float((received - own).double().norm()), int8_rounding_noise(received))
        assert debiased >= 0.99 * true


# -- the peer -------------------------------------------------------------------------------------------------

def test_fetch_thetas_reports_the_noise_of_each_state_in_the_precision_it_was_decoded_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(6)
    state = torch.randn(3000, generator=gen) * 0.1
    server = PayloadServer("run")
    server.publish_theta(1, state.numpy().tobytes())
    asked: list[tuple[str, list[Any], int]] = []
    monkeypatch.setattr(peer_module, "fetch", _serving(server, asked))
    for precision, expected in ((INT8, int8_rounding_noise(_int8(state))), (HALF, 0.0), ("fp32", 0.0)):
        noise: dict[str, float] = {}
        states = asyncio.run(Peer.fetch_thetas(_peer(), [SLOW, FAST[0]], asyncio.Event(),  # type: ignore[arg-type]
                                               round_=1, precision=precision, noise=noise))
        assert set(states) == set(noise) == {SLOW, FAST[0]}
        assert noise[SLOW] == noise[FAST[0]] == expected
    assert expected == 0.0 < int8_rounding_noise(_int8(state))
