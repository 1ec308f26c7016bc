"""``fashion-mnist``: strict IDX reading (raw, gzip) on tiny synthetic files, shards, batches, evaluation."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from p2p_guard.tasks import Task, load_task
from p2p_guard.tasks.fashion_mnist import DEFAULT_DATA_DIR, FILES, read_idx

N_TRAIN, N_TEST = 60, 20


def _idx_bytes(array: np.ndarray, *, type_code: int = 0x08, zeros: bytes = b"\x00\x00") -> bytes:
    header = zeros + bytes([type_code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write(path: Path, data: bytes, *, compress: bool) -> Path:
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "train_images": rng.integers(0, 256, size=(N_TRAIN, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(N_TRAIN) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, size=(N_TEST, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(N_TEST) % 10).astype(np.uint8),
    }


def _dataset(directory: Path, *, compress: bool = True, **override: np.ndarray) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    arrays = _arrays() | override
    for key, base in FILES.items():
        _write(directory / base, _idx_bytes(arrays[key]), compress=compress)
    return directory


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return load_task("fashion-mnist", data_dir=_dataset(tmp_path / "fm"))


def test_reads_gzip_and_raw_alike(tmp_path: Path) -> None:
    arrays = _arrays()
    gz = _write(tmp_path / "a", _idx_bytes(arrays["train_images"]), compress=True)
    raw = _write(tmp_path / "b", _idx_bytes(arrays["train_images"]), compress=False)
    assert np.array_equal(read_idx(gz, ndim=3), arrays["train_images"])
    assert np.array_equal(read_idx(raw, ndim=3), arrays["train_images"])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x00\x00", "2-byte header, need 4"),
        (b"\x01\x00\x08\x01" + struct.pack(">I", 3) + b"abc", "magic"),
        (b"\x00\x00\x0d\x01" + struct.pack(">I", 3) + b"abc", "element type 0x0d"),
        (b"\x00\x00\x08\x02" + struct.pack(">II", 1, 3) + b"abc", "rank 2, expected 1"),
        (b"\x00\x00\x08\x01" + b"\x00\x00", "truncated header"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 0), "dimension is zero"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"abc", "truncated data: 3 of 5"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 2) + b"abc", "trailing bytes"),
    ],
)
@pytest.mark.parametrize("compress", [False, True])
def test_bad_headers_raise_naming_the_file(tmp_path: Path, data: bytes, match: str, compress: bool) -> None:
    path = _write(tmp_path / "labels", data, compress=compress)
    with pytest.raises(ValueError, match=match) as info:
        read_idx(path, ndim=1)
    assert str(path) in str(info.value)


def test_corrupt_gzip_raises(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros(50, dtype=np.uint8)))[:-12])
    with pytest.raises(ValueError, match="gzip|truncated"):
        read_idx(path, ndim=1)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"train_labels": np.zeros(N_TRAIN - 1, dtype=np.uint8)}, "60 images but 59 labels"),
        ({"test_labels": np.full(N_TEST, 10, dtype=np.uint8)}, "label 10 outside"),
        ({"test_images": np.zeros((N_TEST, 27, 28), dtype=np.uint8)}, r"\(27, 28\), expected \(28, 28\)"),
    ],
)
def test_inconsistent_files_raise(tmp_path: Path, override: dict[str, np.ndarray], match: str) -> None:
    task = load_task("fashion-mnist", data_dir=_dataset(tmp_path / "fm", **override))
    with pytest.raises(ValueError, match=match):
        task.check_data()  # type: ignore[attr-defined]


def test_missing_directory_or_file_says_how_to_get_the_data(tmp_path: Path) -> None:
    task = load_task("fashion-mnist", data_dir=tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist.*--task fashion-mnist:data_dir=DIR"):
        task.check_data()  # type: ignore[attr-defined]
    directory = _dataset(tmp_path / "fm")
    (directory / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"t10k-labels-idx1-ubyte\[\.gz\] not found.*--task fashion-mnist:data_dir=DIR"):
        load_task("fashion-mnist", data_dir=directory).check_data()  # type: ignore[attr-defined]


def test_raw_files_are_found_too(tmp_path: Path) -> None:
    task = load_task("fashion-mnist", data_dir=_dataset(tmp_path / "raw", compress=False))
    assert task.num_train == N_TRAIN  # type: ignore[attr-defined]


def test_bad_options_raise() -> None:
    with pytest.raises(ValueError, match="hidden"):
        load_task("fashion-mnist", hidden=0)
    with pytest.raises(ValueError, match="data_dir"):
        load_task("fashion-mnist", data_dir=3)
    assert load_task("fashion-mnist").data_dir == DEFAULT_DATA_DIR  # type: ignore[attr-defined]


def test_task_protocol_model_and_batches(task: Task) -> None:
    assert isinstance(task, Task)
    assert (task.name, task.kind, task.num_classes) == ("fashion-mnist", "classification", 10)
    a, b = task.build_model(3), task.build_model(3)
    assert sum(p.numel() for p in a.parameters()) == 784 * 32 + 32 + 32 * 10 + 10
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    shard = task.shard(3, 1, "iid", seed=0)
    x, y = task.sample_batch(shard, 8, torch.Generator().manual_seed(0))
    assert x.shape == (8, 784) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert set(y.tolist()) <= set(range(10))
    hx, _ = task.holdout_batch(shard, 4, torch.Generator().manual_seed(0))
    assert hx.shape == (4, 784)
    assert task.loss(a, x, y).requires_grad


def test_shards_partition_the_training_split(task: Task) -> None:
    for partition in ("iid", "dirichlet:1"):
        shards = [task.shard(3, i, partition, seed=4) for i in range(3)]
        units = torch.cat([torch.cat([s.train, s.holdout]) for s in shards])
        assert sorted(units.tolist()) == list(range(N_TRAIN))


def test_evaluate_is_batched_and_exact(task: Task) -> None:
    model = task.build_model(0)
    metrics = task.evaluate(model)
    x, y = task.test_split()  # type: ignore[attr-defined]
    with torch.no_grad():
        logits = model(x)
    assert metrics.accuracy == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert metrics.loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-5)
    assert metrics.perplexity is None
    assert model.training  # mode restored


@pytest.mark.skipif(
    not DEFAULT_DATA_DIR.is_dir(), reason="Debian package dataset-fashion-mnist not installed"
)
def test_real_dataset_is_complete() -> None:
    task = load_task("fashion-mnist")
    assert task.num_train == 60_000  # type: ignore[attr-defined]
    x, y = task.test_split()  # type: ignore[attr-defined]
    assert x.shape == (10_000, 784) and y.shape == (10_000,)
    assert torch.bincount(y).tolist() == [1000] * 10
