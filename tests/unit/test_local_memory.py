"""LocalModel keeps no second copy of b and serves an all-zero b from untouched (zeroed) memory, same bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from p2p_guard.tasks import Task, load_task
from p2p_guard.training.local import LocalModel


@pytest.fixture(scope="module")
def digits() -> Task:
    return load_task("digits")


def _model(digits: Task, momentum: float) -> LocalModel:
    return LocalModel(digits, seed=0, num_shards=2, shard_index=0, partition="iid", outer_lr=0.5,
                      outer_momentum=momentum)


def test_momentum_bytes_are_the_tensor_bytes_zero_or_not(digits: Task) -> None:
    model = _model(digits, 0.0)
    assert model.momentum_bytes() == model.momentum.numpy().tobytes() == bytes(4 * model.numel)
    model.apply(torch.full_like(model.theta, 0.25))  # μ = 0: b stays 0
    assert model.momentum_bytes() == bytes(4 * model.numel)
    signed = torch.zeros_like(model.theta)
    signed[3] = -0.0  # equal to 0.0, other bits
    model.momentum = signed
    assert model.momentum_bytes() == signed.numpy().tobytes() != bytes(4 * model.numel)
    model = _model(digits, 0.5)
    model.apply(torch.full_like(model.theta, 0.25))
    assert model.momentum_bytes() == model.momentum.numpy().tobytes() == torch.full_like(model.theta, 0.25
                                                                                         ).numpy().tobytes()


def test_apply_keeps_one_b_and_never_changes_a_b_handed_out(digits: Task) -> None:
    model = _model(digits, 0.5)
    model.apply(torch.full_like(model.theta, 0.25))
    first = model.momentum
    assert first is model.outer.momentum_buffer  # no copy
    kept = first.clone()
    model.apply(torch.full_like(model.theta, 1.0))  # b = 0.5·0.25 + 1
    assert torch.equal(first, kept)  # the b of the last round (served, checkpointed) is unchanged
    assert torch.equal(model.momentum, torch.full_like(model.theta, 1.125))
    assert model.momentum is model.outer.momentum_buffer


def test_raw_bytes_is_a_read_only_view_of_the_tensor_bytes() -> None:
    from p2p_guard.training.params import raw_bytes

    x = torch.randn(1000)
    view = raw_bytes(x)
    assert view == x.numpy().tobytes() and len(view) == 4000 and view.readonly
    assert np.frombuffer(view, dtype="<f4").ctypes.data == x.data_ptr()  # x's memory, no copy
    assert bytes(raw_bytes(torch.zeros(0))) == b""
    with pytest.raises(ValueError, match="contiguous"):
        raw_bytes(torch.randn(10, 4).t())


def test_theta_bytes_serve_theta_without_a_copy(digits: Task) -> None:
    model = _model(digits, 0.5)
    before = model.theta.clone()
    served = model.theta_bytes()
    assert served == before.numpy().tobytes()
    model.apply(torch.full_like(model.theta, 0.25))  # θ replaced: the served bytes keep the old θ
    assert served == before.numpy().tobytes() and model.theta_bytes() == model.theta.numpy().tobytes()
    assert model.momentum_bytes() == model.momentum.numpy().tobytes()


@pytest.mark.parametrize(("kind", "kept"), [(None, False), ("data", False), ("update", True)])
def test_only_an_update_attack_keeps_the_rows_of_the_last_round(kind: str | None, kept: bool) -> None:
    from types import SimpleNamespace

    from p2p_guard.swarm.peer import Peer

    applied: list[torch.Tensor] = []
    served: list[int] = []
    peer = SimpleNamespace(local=SimpleNamespace(apply=applied.append), me="me", attack_kind=kind,
                           known_previous=[], serve_state=lambda r, mixing: served.append(r))
    rows = {"b": torch.ones(3), "me": torch.zeros(3), "a": torch.full((3,), 2.0)}
    outcome = SimpleNamespace(aggregate=torch.ones(3), rows=rows, round=4, mix=True)
    Peer.step(peer, outcome)  # type: ignore[arg-type]
    assert len(applied) == 1 and served == [5]
    assert peer.known_previous == ([rows["a"], rows["b"]] if kept else [])


def test_error_feedback_replaces_its_residual_so_a_captured_one_keeps_its_values() -> None:
    from p2p_guard.training.error_feedback import ErrorFeedback

    ef = ErrorFeedback("topk:density=0.1", 1000)
    g = torch.Generator().manual_seed(0)
    ef.compress(torch.randn(1000, generator=g))
    captured = ef.residual
    kept = captured.clone()
    assert bool(kept.any())
    ef.compress(torch.randn(1000, generator=g))
    assert ef.residual is not captured and torch.equal(captured, kept)


def test_decode_state_keeps_half_values_as_float16_views() -> None:
    from p2p_guard.protocol.reasons import Rejected
    from p2p_guard.protocol.states import decode_state

    values = (torch.randn(2048) * 3).half()
    raw = bytearray(values.numpy().astype("<f2").tobytes())
    wide = decode_state(raw, "fp16", 2048)
    half = decode_state(raw, "fp16", 2048, keep_half=True)
    assert isinstance(wide, torch.Tensor) and isinstance(half, torch.Tensor)
    assert wide.dtype == torch.float32 and half.dtype == torch.float16
    assert torch.equal(half.float(), wide) and torch.equal(half, values)
    assert half.data_ptr() == np.frombuffer(raw, dtype="u1").ctypes.data  # the received bytes, not a copy
    from_bytes = decode_state(bytes(raw), "fp16", 2048, keep_half=True)
    assert isinstance(from_bytes, torch.Tensor) and torch.equal(from_bytes, values)
    raw[2:4] = np.array([np.inf], dtype="<f2").tobytes()
    assert isinstance(decode_state(raw, "fp16", 2048, keep_half=True), Rejected)
    fp32 = decode_state(values.float().numpy().tobytes(), "fp32", 2048, keep_half=True)
    assert isinstance(fp32, torch.Tensor) and fp32.dtype == torch.float32  # only fp16 stays narrow
