"""swarm.checkpoint._digest hashes the tensors in place: the same hex digest as the bytes-copy formula it replaced."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from p2p_guard.swarm import checkpoint
from p2p_guard.swarm.checkpoint import Checkpoint, load_checkpoint, save_checkpoint


def _old_digest(run_id: str, round_: int, tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256(f"{checkpoint.FORMAT}|{run_id}|{round_}".encode())
    for name in sorted(tensors):
        h.update(name.encode() + b"\0")
        h.update(tensors[name].detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 8, generator=g)
    return {"theta": torch.randn(1000, generator=g), "momentum": torch.randn(1000, generator=g),
            "extra.residual": wide[:, ::2],  # not contiguous
            "extra.empty": torch.zeros(0), "extra.scalar": torch.tensor(1.5),
            "extra.double": torch.randn(7, generator=g, dtype=torch.float64),
            "extra.grad": torch.randn(5, generator=g).requires_grad_()}


def test_digest_bytes_are_those_of_the_copying_formula() -> None:
    tensors = _tensors()
    assert checkpoint._digest("run", 7, tensors) == _old_digest("run", 7, tensors)
    assert checkpoint._digest("run", 7, {}) == _old_digest("run", 7, {})


def test_digest_sees_one_flipped_bit() -> None:
    tensors = _tensors()
    before = checkpoint._digest("run", 7, tensors)
    tensors["theta"].view(torch.int32)[500] ^= 1
    assert checkpoint._digest("run", 7, tensors) != before


def test_digest_makes_no_bytes_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    theta = torch.randn(4096)
    calls: list[int] = []
    real = torch.Tensor.numpy

    def watch(self: torch.Tensor, *args: object, **kwargs: object) -> object:
        array = real(self, *args, **kwargs)
        calls.append(array.ctypes.data == theta.data_ptr())
        return array

    monkeypatch.setattr(torch.Tensor, "numpy", watch)
    checkpoint._digest("run", 0, {"theta": theta})
    assert calls == [True]  # the hashed array is θ's own memory


def test_a_checkpoint_written_with_the_old_digest_still_loads(tmp_path: Path) -> None:
    theta, momentum = torch.randn(64), torch.randn(64)
    save_checkpoint(tmp_path, Checkpoint("run", 3, theta, momentum, {"residual": torch.randn(64)}))
    data = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    tensors = {"theta": data["theta"], "momentum": data["momentum"], "extra.residual": data["extra"]["residual"]}
    assert data["digest"] == _old_digest("run", 3, tensors)
    loaded = load_checkpoint(tmp_path, run_id="run", numel=64)
    assert loaded is not None and torch.equal(loaded.theta, theta)


def test_whole_tensors_are_saved_without_a_copy_and_views_compactly(tmp_path: Path) -> None:
    theta = torch.randn(64)
    assert checkpoint._compact(theta) is not None and checkpoint._compact(theta).data_ptr() == theta.data_ptr()
    base = torch.randn(1000)
    view = base[100:164]
    compact = checkpoint._compact(view)
    assert compact.data_ptr() != view.data_ptr() and torch.equal(compact, view)
    assert compact.untyped_storage().nbytes() == 64 * 4
    save_checkpoint(tmp_path, Checkpoint("run", 1, theta, view, {"residual": base[::2][:64]}))
    loaded = load_checkpoint(tmp_path, run_id="run", numel=64)
    assert loaded is not None and torch.equal(loaded.theta, theta) and torch.equal(loaded.momentum, view)
    assert loaded.momentum.untyped_storage().nbytes() == 64 * 4  # the view's elements only, not its base
    assert torch.equal(loaded.extra["residual"], base[::2][:64])


@pytest.mark.parametrize("where", ["theta", "extra", "guard_state"])
@pytest.mark.parametrize("odd", ["sparse", "meta"])
def test_an_edited_file_with_a_sparse_or_meta_tensor_is_refused_not_a_crash(tmp_path: Path, where: str,
                                                                              odd: str) -> None:
    """torch.load(weights_only=True) reads sparse and meta tensors back; hashing them raised RuntimeError or
    NotImplementedError, which load_resumable does not catch (a resuming peer stopped with a traceback)."""
    save_checkpoint(tmp_path, Checkpoint("run", 2, torch.ones(4), torch.zeros(4), {"residual": torch.zeros(4)},
                                         state={"guard": {"h": torch.zeros(4, dtype=torch.float64)}}))
    raw = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    bad = torch.zeros(4).to_sparse() if odd == "sparse" else torch.zeros(4, device="meta")
    if where == "theta":
        raw["theta"] = bad
    elif where == "extra":
        raw["extra"]["residual"] = bad
    else:
        raw["guard_state"]["guard"]["h"] = bad.to(torch.float64)
    torch.save(raw, tmp_path / "checkpoint.pt")
    if where == "guard_state":
        ckpt = load_checkpoint(tmp_path, run_id="run", numel=4)
        assert ckpt is not None and ckpt.state is None
        assert ckpt.state_problem == "guard state holds a tensor that is not a dense CPU one"
        assert torch.equal(ckpt.theta, torch.ones(4))
    else:
        with pytest.raises(checkpoint.CheckpointError, match="malformed tensors"):
            load_checkpoint(tmp_path, run_id="run", numel=4)
        assert checkpoint.load_resumable(tmp_path, run_id="run", numel=4).checkpoint is None
