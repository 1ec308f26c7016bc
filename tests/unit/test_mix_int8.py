"""Unit tests: mixing states in int8 (``mix_precision = "int8"``; ``protocol.states``, ``["theta", key, "int8"]``).

The server encodes its float32 state with the int8 update codec (one float32 absmax scale per 1024 values, then
the codes: 4·⌈d/1024⌉ + d bytes) once per state; the mixing peer asks in int8, checks the answer's length against
that exact size before decoding, decodes to float32, and rejects every hostile answer (wrong length, NaN/±Inf or
negative scale, code −128, values beyond float32) with a logged reason, as if that neighbour had not answered.
The option is a ``PeerConfig`` field (``--mix-precision`` of ``peer`` and ``simulate``); the default stays fp16.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import p2p_guard.swarm.peer as peer_module
from p2p_guard.cli.main import build_parser, main
from p2p_guard.cli import peer_cmd, simulate_cmd
from p2p_guard.protocol.quantized import decode_int8, encode_int8, int8_payload_bytes
from p2p_guard.protocol.reasons import Rejected, RejectReason
from p2p_guard.protocol.states import STATE_PRECISIONS, decode_state, encode_state, state_bytes
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.orchestrator import peer_command
from p2p_guard.swarm.config import MIX_PRECISIONS, PeerConfig, config_from_mapping
from p2p_guard.swarm.peer import Peer
from p2p_guard.swarm.transport import BAD_REQUEST, HALF, INT8, OK, FetchResult, PayloadServer
from tests.unit.test_mix_suspects import FAST, SLOW, _Config, _Local, _Peer

MADDR = "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
D = 3000  # three int8 chunks, the last one partial (952 values)
STATE = torch.linspace(-0.3, 0.5, D) * torch.cos(torch.arange(D, dtype=torch.float32))


# -- the wire format (protocol.states) ------------------------------------------------------------------------

def test_the_state_sizes_are_the_codecs_exact_sizes() -> None:
    assert STATE_PRECISIONS == MIX_PRECISIONS == ("fp32", "fp16", "int8")
    assert [state_bytes(p, D) for p in STATE_PRECISIONS] == [4 * D, 2 * D, 4 * 3 + D]
    assert state_bytes("int8", D) == int8_payload_bytes(D)
    assert state_bytes("int8", 0) == 0
    with pytest.raises(ValueError, match="precision must be one of fp32, fp16, int8; got 'int4'"):
        state_bytes("int4", D)


def test_an_int8_state_round_trips_within_half_a_scale() -> None:
    data = encode_state(STATE.numpy().tobytes(), "int8")
    assert data == encode_int8(STATE)  # the update codec's bytes, unchanged
    decoded = decode_state(data, "int8", D)
    assert isinstance(decoded, torch.Tensor) and decoded.dtype == torch.float32 and decoded.shape == (D,)
    scales = np.frombuffer(data, dtype="<f4", count=3)
    for j, scale in enumerate(scales):
        chunk = slice(1024 * j, 1024 * (j + 1))
        assert float((decoded[chunk] - STATE[chunk]).abs().max()) <= scale / 2 * (1 + 1e-6)


def test_the_precision_asked_decides_the_decoding_not_the_length() -> None:
    """At d = 4 an int8 state (4 + 4 bytes) is as long as a float16 one (2·4): decoded as what was asked."""
    state = torch.tensor([1.0, -2.5, 1e-3, 3.14159265])
    data = encode_state(state.numpy().tobytes(), "int8")
    assert len(data) == state_bytes("fp16", 4) == 8
    decoded = decode_state(data, "int8", 4)
    assert isinstance(decoded, torch.Tensor)
    assert torch.allclose(decoded, state, atol=3.14159265 / 254 + 1e-7)


def _with_scale(data: bytes, value: float) -> bytes:
    return struct.pack("<f", value) + data[4:]


GOOD = encode_int8(STATE)
HOSTILE = {
    "one byte short": (GOOD[:-1], RejectReason.DECODE_ERROR, f"a int8 state of {D} values is {len(GOOD)} bytes, "
                                                             f"got {len(GOOD) - 1}"),
    "one byte extra": (GOOD + b"\x00", RejectReason.DECODE_ERROR, f"got {len(GOOD) + 1}"),
    "truncated": (GOOD[:100], RejectReason.DECODE_ERROR, "got 100"),
    "empty": (b"", RejectReason.DECODE_ERROR, "got 0"),
    "float16-sized": (bytes(2 * D), RejectReason.DECODE_ERROR, f"got {2 * D}"),
    "float32-sized": (bytes(4 * D), RejectReason.DECODE_ERROR, f"got {4 * D}"),
    "NaN scale": (_with_scale(GOOD, float("nan")), RejectReason.NON_FINITE, "1 of 3 int8 scales are NaN or ±Inf"),
    "inf scale": (_with_scale(GOOD, float("inf")), RejectReason.NON_FINITE, "1 of 3 int8 scales are NaN or ±Inf"),
    "negative scale": (_with_scale(GOOD, -1.0), RejectReason.DECODE_ERROR, "1 of 3 int8 scales are negative"),
    "code -128": (GOOD[:12] + b"\x80" + GOOD[13:], RejectReason.DECODE_ERROR, "1 int8 codes are -128"),
    "values beyond float32": (_with_scale(GOOD, 3e38), RejectReason.NON_FINITE, "values of a int8 state are NaN"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_int8_state_is_rejected_with_a_reason(case: str) -> None:
    data, reason, detail = HOSTILE[case]
    decoded = decode_state(data, "int8", D)
    assert isinstance(decoded, Rejected)
    assert decoded.reason is reason
    assert detail in decoded.detail


def test_the_int8_decoder_is_the_update_codecs() -> None:
    """What decode_state accepts, decode_int8 decodes to the same values (no second int8 format)."""
    ours, theirs = decode_state(GOOD, "int8", D), decode_int8(GOOD, D)
    assert isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor)
    assert torch.equal(ours, theirs)


# -- the server ---------------------------------------------------------------------------------------------

def test_the_server_answers_theta_momentum_and_mixed_states_in_int8_when_asked() -> None:
    server = PayloadServer("run")
    theta, momentum = STATE.numpy().tobytes(), (2 * STATE).numpy().tobytes()
    server.publish_theta(4, theta)
    server.publish_momentum(4, momentum)
    server.publish_mixed(4, 1, theta, last=True)
    for request, source in ((["theta", 4, INT8], STATE), (["theta", -1, INT8], STATE),
                            (["momentum", 4, INT8], 2 * STATE), (["mixed", [4, 1], INT8], STATE),
                            (["mixed", [4, 3], INT8], STATE)):
        status, body = server._answer(request)
        assert status == OK and body is not None
        assert body[0] == encode_int8(source)
        assert len(body[0]) == int8_payload_bytes(D)
    assert server._answer(["theta", 4])[1] == (theta,)  # float32 unless asked
    assert server._answer(["theta", 4, HALF])[1] == (STATE.numpy().astype("<f2").tobytes(),)  # fp16 as before
    assert server._answer(["state", b"h", INT8])[0] == BAD_REQUEST  # states of version 1: float32 only


def test_the_int8_answer_is_encoded_once_per_state() -> None:
    server = PayloadServer("run")
    server.publish_theta(4, STATE.numpy().tobytes())
    first = server._answer(["theta", 4, INT8])[1]
    again = server._answer(["theta", 4, INT8])[1]
    assert first is not None and again is not None
    assert first[0] is again[0]
    half = server._answer(["theta", 4, HALF])[1]
    assert half is not None and half[0] != first[0]  # one cache per precision


# -- the mixing peer ----------------------------------------------------------------------------------------

def _peer(precision: str = "int8", d: int = D, theta: torch.Tensor | None = None,
          momentum: torch.Tensor | None = None) -> _Peer:
    local = _Local(theta=torch.zeros(d) if theta is None else theta,
                   momentum=torch.zeros(d) if momentum is None else momentum, numel=d)
    return _Peer(config=_Config(mix_precision=precision), local=local)


def _serving(server: PayloadServer, asked: list[tuple[str, list[Any], int]],
             hostile: dict[str, bytes] | None = None) -> Any:
    """A ``transport.fetch`` answered by ``server._answer`` (the request's round trip), or ``hostile[peer]``."""
    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        name = peer.to_base58()
        asked.append((name, request, kwargs["max_bytes"]))
        if hostile and name in hostile:
            return FetchResult(OK, data=hostile[name])
        status, body = server._answer(request)
        return FetchResult(status, data=b"".join(bytes(part) for part in body) if body is not None else None)
    return fetch


def test_an_int8_state_request_and_answer_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    server = PayloadServer("run")
    server.publish_theta(1, STATE.numpy().tobytes())
    asked: list[tuple[str, list[Any], int]] = []
    monkeypatch.setattr(peer_module, "fetch", _serving(server, asked))
    sizes: list[int] = []
    peer = _peer()
    states = asyncio.run(Peer.fetch_thetas(peer, [FAST[0]], asyncio.Event(), round_=1,  # type: ignore[arg-type]
                                           precision=INT8, received=sizes.append))
    assert asked == [(FAST[0], ["theta", 1, "int8"], int8_payload_bytes(D))]  # the precision is in the request
    assert sizes == [int8_payload_bytes(D)]
    assert set(states) == {FAST[0]}
    state = states[FAST[0]]
    assert state.dtype == torch.float32
    assert torch.equal(state, decode_int8(encode_int8(STATE), D))  # type: ignore[arg-type]
    assert float((state - STATE).abs().max()) <= float(STATE.abs().max()) / 254 * (1 + 1e-6)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_int8_answer_is_logged_and_not_used(case: str, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    data, reason, _ = HOSTILE[case]
    server = PayloadServer("run")
    server.publish_theta(1, STATE.numpy().tobytes())
    asked: list[tuple[str, list[Any], int]] = []
    monkeypatch.setattr(peer_module, "fetch", _serving(server, asked, hostile={SLOW: data}))
    with caplog.at_level(logging.WARNING, logger="test"):
        states = asyncio.run(Peer.fetch_thetas(_peer(), [SLOW, FAST[0]], asyncio.Event(),  # type: ignore[arg-type]
                                               round_=1, precision=INT8))
    assert set(states) == {FAST[0]}  # the hostile neighbour counts as not answering; the honest one is used
    lines = [r.getMessage() for r in caplog.records if SLOW[-8:] in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith(f"int8 state of {SLOW[-8:]} at round 1 rejected: {reason.value} (")


def test_a_hostile_neighbour_is_left_out_of_the_mixing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its NaN-scale state is never applied, it is not asked again in the later gossip steps, and the others'
    int8 states move θ as their decoded values do."""
    server = PayloadServer("run")
    target = torch.full((D,), 1 + 2.0**-10)  # int8: every code 127, every scale target / 127
    server.publish_theta(1, target.numpy().tobytes())
    server.publish_mixed(1, 1, target.numpy().tobytes(), last=True)
    asked: list[tuple[str, list[Any], int]] = []
    monkeypatch.setattr(peer_module, "fetch", _serving(server, asked, hostile={SLOW: HOSTILE["NaN scale"][0]}))
    peer = _peer(theta=torch.ones(D))
    result = asyncio.run(Peer.mixing(peer, 0, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None
    assert all(request[2:] == ["int8"] for _, request, _ in asked)
    assert all(size == int8_payload_bytes(D) for _, _, size in asked)
    assert [request[0] for name, request, _ in asked if name == SLOW] == ["theta"]  # step 0 only
    assert result.bytes_received == int8_payload_bytes(D) * len(FAST) * 3  # 3 early gossip steps, 3 honest
    assert bool(torch.isfinite(result.theta).all())
    # from 1 toward 3 states at 1 + e (e = 2**-10; not clipped: τ is their common distance): 3/4 of the gap per
    # step, 3 steps; the int8 round trip of 1 + e is exact to a float32 rounding (1e-7, 1e-4 of e)
    assert torch.allclose(result.theta, torch.full((D,), (1 - 0.25**3) * 2**-10), rtol=1e-3, atol=0)


def test_mixing_fetches_the_momentum_in_int8_too(monkeypatch: pytest.MonkeyPatch) -> None:
    server = PayloadServer("run")
    server.publish_theta(1, STATE.numpy().tobytes())
    server.publish_momentum(1, STATE.numpy().tobytes())
    server.publish_mixed(1, 1, STATE.numpy().tobytes(), last=True)
    asked: list[tuple[str, list[Any], int]] = []
    monkeypatch.setattr(peer_module, "fetch", _serving(server, asked))
    peer = _peer(momentum=torch.full((D,), 0.1))
    result = asyncio.run(Peer.mixing(peer, 0, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None and result.momentum is not None
    assert {request[0] for _, request, _ in asked} == {"theta", "momentum", "mixed"}
    assert all(request[2:] == ["int8"] for _, request, _ in asked)


def test_int8_has_no_float16_range_limit() -> None:
    big = torch.full((4,), 1e6)
    assert Peer._mix_precision(_peer("int8", 4, theta=big)) == "int8"  # type: ignore[arg-type]
    assert Peer._mix_precision(_peer("fp16", 4, theta=big)) == "fp32"  # type: ignore[arg-type]
    assert Peer._mix_precision(_peer("fp16", 4)) == "fp16"  # type: ignore[arg-type]
    assert Peer._mix_precision(_peer("fp32", 4)) == "fp32"  # type: ignore[arg-type]


def test_a_peer_that_refuses_the_int8_request_is_asked_again_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer of an earlier release answers ``[kind, key, "int8"]`` BAD_REQUEST: its float32 state is decoded as
    float32 (by the precision asked last, not by its length)."""
    server = PayloadServer("run")
    server.publish_theta(1, STATE.numpy().tobytes())
    asked: list[tuple[str, list[Any], int]] = []
    serve = _serving(server, asked)

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        if peer.to_base58() == SLOW and request[2:] == [INT8]:
            asked.append((SLOW, request, kwargs["max_bytes"]))
            return FetchResult(BAD_REQUEST)
        return await serve(p2p, peer, run_id, request, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(peer_module, "fetch", fetch)
    sizes: list[int] = []
    states = asyncio.run(Peer.fetch_thetas(_peer(), [SLOW, FAST[0]], asyncio.Event(), round_=1,  # type: ignore[arg-type]
                                           precision=INT8, received=sizes.append))
    assert [(request, size) for name, request, size in asked if name == SLOW] == [
        (["theta", 1, "int8"], int8_payload_bytes(D)), (["theta", 1], 4 * D)]
    assert torch.equal(states[SLOW], STATE)
    assert sorted(sizes) == [int8_payload_bytes(D), 4 * D]


# -- the option -----------------------------------------------------------------------------------------------

def test_the_default_stays_fp16() -> None:
    assert PeerConfig().mix_precision == "fp16"
    assert SimulationConfig().mix_precision == "fp16"
    assert peer_cmd.resolve_config(build_parser().parse_args(["peer", "--initial-peers", MADDR])).mix_precision \
        == "fp16"


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_the_option_is_parsed_from_flags_and_config_files(precision: str, tmp_path: Path) -> None:
    args = build_parser().parse_args(["peer", "--initial-peers", MADDR, "--mix-precision", precision])
    assert peer_cmd.resolve_config(args).mix_precision == precision
    path = tmp_path / "peer.toml"
    path.write_text(f'[peer]\nmix_precision = "{precision}"\n')
    args = build_parser().parse_args(["peer", "--config", str(path), "--initial-peers", MADDR])
    assert peer_cmd.resolve_config(args).mix_precision == precision
    assert config_from_mapping({"initial_peers": [MADDR], "mix_precision": precision}).mix_precision == precision
    assert simulate_cmd._config(build_parser().parse_args(["simulate", "--mix-precision", precision])) \
        .mix_precision == precision
    path.write_text(f'[simulate]\nmix_precision = "{precision}"\n')
    assert simulate_cmd._config(build_parser().parse_args(["simulate", "--config", str(path)])) \
        .mix_precision == precision


def test_simulate_passes_the_option_to_every_peer(tmp_path: Path) -> None:
    for precision in ("int8", "fp16"):
        command = peer_command(SimulationConfig(mix_precision=precision), 0, [MADDR], tmp_path)
        assert command[command.index("--mix-precision") + 1] == precision


@pytest.mark.parametrize("value", ["int4", "FP16", "", "bf16"])
def test_a_bad_value_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=r"^mix_precision must be one of fp32, fp16, int8; got mix_precision="):
        PeerConfig(mix_precision=value)
    with pytest.raises(ValueError, match=r"^mix_precision must be one of fp32, fp16, int8; got mix_precision="):
        SimulationConfig(mix_precision=value)


@pytest.mark.parametrize("command", ["peer", "simulate"])
def test_a_bad_value_on_the_command_line_is_one_line_and_exit_2(command: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, "--mix-precision", "int4"]
    argv += ["--initial-peers", MADDR] if command == "peer" else ["--workdir", str(tmp_path / "w")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"p2p-guard {command}: error: command line: mix_precision must be one of fp32, fp16, int8; "
                   "got mix_precision='int4'\n")


def test_mix_fp16_is_gone() -> None:
    """``mix_precision`` replaces the boolean ``mix_fp16`` (on: fp16, off: fp32): one setting, not two."""
    with pytest.raises(TypeError):
        PeerConfig(mix_fp16=False)  # type: ignore[call-arg]
