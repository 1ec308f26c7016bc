"""Unit tests: mixing fetches float16 states (``["theta" | "momentum" | "mixed", key, "fp16"]``, 2·d bytes).

The server converts its float32 state (round to nearest, cached per state); the mixing peer asks for float16 while
``mix_precision`` is fp16 (the default) and its θ and momentum lie within ``HALF_SAFE``, decodes into float32 and counts 2·d bytes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch

import p2p_guard.swarm.peer as peer_module
from p2p_guard.swarm.peer import HALF_SAFE, Peer
from p2p_guard.swarm.transport import BAD_REQUEST, HALF, NOT_FOUND, OK, FetchResult, PayloadServer
from tests.unit.test_mix_suspects import FAST, SLOW, _Config, _Local, _Peer

THETA = np.array([1.0, -2.5, 1e-3, 3.14159265], dtype="<f4")


def test_the_server_answers_theta_momentum_and_mixed_states_in_float16_when_asked() -> None:
    server = PayloadServer("run")
    theta, momentum = THETA.tobytes(), (THETA * 2).tobytes()
    server.publish_theta(4, theta)
    server.publish_momentum(4, momentum)
    server.publish_mixed(4, 1, theta, last=True)
    for request, source in ((["theta", 4, HALF], THETA), (["theta", -1, HALF], THETA),
                            (["momentum", 4, HALF], THETA * 2), (["mixed", [4, 1], HALF], THETA),
                            (["mixed", [4, 3], HALF], THETA)):
        status, body = server._answer(request)
        assert status == OK
        assert body is not None
        assert body[0] == source.astype("<f2").tobytes()  # round to nearest, 2·d bytes
    assert server._answer(["theta", 4])[1] == (theta,)  # float32 unless asked
    assert server._answer(["theta", 5, HALF]) == (NOT_FOUND, None)


def test_the_float16_answer_is_converted_once_per_state() -> None:
    server = PayloadServer("run")
    theta = THETA.tobytes()
    server.publish_theta(4, theta)
    first = server._answer(["theta", 4, HALF])[1]
    again = server._answer(["theta", 4, HALF])[1]
    assert first is not None
    assert again is not None
    assert first[0] is again[0]


@pytest.mark.parametrize("request_", [["theta", 4, "fp8"], ["theta", 4, HALF, 0], ["state", b"h", HALF],
                                      ["payload", 4, HALF], ["theta", 4, None], ["momentum", True, HALF]])
def test_other_third_elements_are_bad_requests(request_: list[Any]) -> None:
    server = PayloadServer("run")
    server.publish_theta(4, THETA.tobytes())
    assert server._answer(request_)[0] == BAD_REQUEST


def _half_fetch(asked: list[tuple[str, list[Any]]]) -> Any:
    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        asked.append((peer.to_base58(), request))
        width = "<f2" if request[-1] == HALF else "<f4"
        assert kwargs["max_bytes"] == (2 if request[-1] == HALF else 4) * 4
        return FetchResult(OK, data=np.full(4, 1.0009765625, dtype=width).tobytes())  # 1 + 2**-10: exact in both
    return fetch


def _mix(peer: _Peer, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[tuple[str, list[Any]]]]:
    asked: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(peer_module, "fetch", _half_fetch(asked))
    result = asyncio.run(Peer.mixing(peer, 0, asyncio.Event()))  # type: ignore[arg-type]
    return result, asked


def test_mixing_asks_for_float16_states_and_counts_two_bytes_each(monkeypatch: pytest.MonkeyPatch) -> None:
    peer = _Peer(config=_Config(mix_precision="fp16"), local=_Local(momentum=torch.full((4,), 0.5)))
    result, asked = _mix(peer, monkeypatch)
    assert result is not None
    assert {tuple(request[:1] + request[2:]) for _, request in asked} == {("theta", HALF), ("momentum", HALF),
                                                                         ("mixed", HALF)}
    senders = len(FAST) + 1  # SLOW answers too here
    assert {name for name, _ in asked} == {SLOW, *FAST}
    assert result.bytes_received == 2 * 4 * senders * 4  # θ in 3 gossip steps and b, 2 bytes per coordinate
    # from 1 toward 4 states at 1 + e (e = 2**-10; no difference clipped): 4/5 of the gap per step, 3 steps
    assert torch.allclose(result.theta, torch.full((4,), (1 - 0.2**3) * 2**-10), rtol=1e-4, atol=0)


def test_mixing_asks_for_float32_when_off_or_out_of_float16_range(monkeypatch: pytest.MonkeyPatch) -> None:
    for peer in (_Peer(config=_Config(mix_precision="fp32")),
                 _Peer(config=_Config(mix_precision="fp16"), local=_Local(theta=torch.tensor([1.0, 1.0, HALF_SAFE * 2, 1.0])))):
        result, asked = _mix(peer, monkeypatch)
        assert result is not None
        assert all(len(request) == 2 for _, request in asked)
        assert result.bytes_received == 4 * 4 * (len(FAST) + 1) * 3  # θ in 3 gossip steps, 4 bytes per coordinate


def test_a_peer_that_refuses_the_float16_request_is_asked_again_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer of an earlier release answers ``[kind, key, "fp16"]`` with BAD_REQUEST: the same state in float32."""
    asked: list[tuple[str, list[Any]]] = []

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        name = peer.to_base58()
        asked.append((name, request))
        if name == SLOW and request[-1] == HALF:
            return FetchResult(BAD_REQUEST)
        width = "<f2" if request[-1] == HALF else "<f4"
        return FetchResult(OK, data=np.full(4, 1.0009765625, dtype=width).tobytes())

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer(config=_Config(mix_precision="fp16"))
    states = asyncio.run(Peer.fetch_thetas(peer, [SLOW, FAST[0]], asyncio.Event(), round_=1,  # type: ignore[arg-type]
                                           precision=HALF))
    assert [request for name, request in asked if name == SLOW] == [["theta", 1, HALF], ["theta", 1]]
    assert [request for name, request in asked if name == FAST[0]] == [["theta", 1, HALF]]
    assert {name: state.tolist() for name, state in states.items()} == {SLOW: [1.0009765625] * 4,
                                                                        FAST[0]: [1.0009765625] * 4}
    assert all(state.dtype == torch.float32 for state in states.values())
    sizes: list[int] = []
    asyncio.run(Peer.fetch_thetas(peer, [SLOW, FAST[0]], asyncio.Event(), round_=1, precision=HALF,  # type: ignore[arg-type]
                                  received=sizes.append))
    assert sorted(sizes) == [2 * 4, 4 * 4]  # counted as they came: the refusing peer's state in float32


def test_a_state_of_neither_size_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        return FetchResult(OK, data=b"\x00" * 12)  # 3 bytes per coordinate: neither float16 nor float32

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer(config=_Config(mix_precision="fp16"))
    assert asyncio.run(Peer.fetch_thetas(peer, FAST, asyncio.Event(), round_=1, precision=HALF)) == {}  # type: ignore[arg-type]


def test_the_converted_forms_of_states_no_longer_served_are_dropped() -> None:
    from p2p_guard.swarm.transport import INT8, MAX_KEPT_ROUNDS

    server = PayloadServer("run")
    states = {r: np.arange(2048, dtype="<f4").tobytes() + bytes([r]) * 4 for r in range(MAX_KEPT_ROUNDS + 1)}
    server.publish_theta(0, states[0])
    server.publish_momentum(0, states[0])  # the same object under two names: one conversion
    server.publish_mixed(0, 1, states[0], last=True)
    half = server._answer(["theta", 0, HALF])[1]
    assert server._answer(["momentum", 0, HALF])[1] == half and server._answer(["mixed", [0, 1], INT8])[0] == OK
    assert len(server._half) == len(server._int8) == 1
    for r in range(1, MAX_KEPT_ROUNDS):
        server.publish_theta(r, states[r])
        server._answer(["theta", r, HALF])
    assert len(server._half) == MAX_KEPT_ROUNDS and len(server._int8) == 1  # round 0 still served (momentum)
    server.publish_theta(MAX_KEPT_ROUNDS, states[MAX_KEPT_ROUNDS])  # θ of round 0 dropped, its momentum kept
    assert len(server._half) == MAX_KEPT_ROUNDS
    for r in range(1, MAX_KEPT_ROUNDS + 1):
        server.publish_momentum(r, states[r])
        server.publish_mixed(r, 1, states[r], last=True)
    assert server._answer(["theta", 0, HALF])[0] == NOT_FOUND
    assert [data for data, _ in server._half.values()] == [states[r] for r in range(1, MAX_KEPT_ROUNDS)]
    assert not server._int8  # nothing of round 0 is served any more


def test_mixing_keeps_float16_states_narrow_with_the_same_correction(monkeypatch: pytest.MonkeyPatch) -> None:
    """θ and b states asked in fp16 reach clipped_gossip as float16 (2·d bytes each, not 4·d): same result."""
    seen: list[torch.dtype] = []
    real = peer_module.clipped_gossip

    def watch(own: torch.Tensor, neighbours: list[torch.Tensor], **kwargs: Any) -> Any:
        seen.extend(x.dtype for x in neighbours)
        wide = real(own, [x.float() for x in neighbours], **kwargs)
        narrow = real(own, neighbours, **kwargs)
        assert torch.equal(wide.correction, narrow.correction) and wide.tau == narrow.tau
        return narrow

    monkeypatch.setattr(peer_module, "clipped_gossip", watch)
    peer = _Peer(config=_Config(mix_precision="fp16"), local=_Local(momentum=torch.full((4,), 0.5)))
    result, _ = _mix(peer, monkeypatch)
    assert result is not None and result.momentum is not None
    assert seen and set(seen) == {torch.float16}


def test_mixed_states_are_kept_for_the_latest_two_mixings_theta_for_three_rounds() -> None:
    from p2p_guard.swarm.transport import MAX_KEPT_MIXED_ROUNDS, MAX_KEPT_ROUNDS

    assert (MAX_KEPT_MIXED_ROUNDS, MAX_KEPT_ROUNDS) == (2, 3)
    server = PayloadServer("run")
    states = {r: np.full(16, r, dtype="<f4").tobytes() for r in range(3)}
    for r in range(3):
        server.publish_theta(r, states[r])
        server.publish_mixed(r, 1, states[r], last=True)
    assert server._answer(["mixed", [0, 1]])[0] == NOT_FOUND  # a mixing two rounds back: dropped
    assert server._answer(["mixed", [1, 1]]) == (OK, (states[1],))
    assert server._answer(["mixed", [2, 5]]) == (OK, (states[2],))  # a later step gets the last state
    assert server._answer(["theta", 0]) == (OK, (states[0],))  # θ still for three rounds
