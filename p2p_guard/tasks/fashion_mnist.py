"""``fashion-mnist``: Zalando's Fashion-MNIST (60,000 train / 10,000 test 28×28 images, 10 classes), an MLP.

Data: the four standard IDX files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each raw or gzip-compressed with a ``.gz`` suffix)
in ``data_dir``. On Debian they come from package ``dataset-fashion-mnist``
(``/usr/share/datasets/fashion-mnist``, the default); nothing is downloaded. The headers are checked
strictly (magic, element type, rank, sizes, exact payload length, label range), and a file that fails a check
raises ``ValueError`` naming the file and the figure. Images are kept as ``uint8`` and scaled to [0, 1] per
batch; an image is a flat row-major vector of 784 pixels (``x.view(-1, 28, 28)`` recovers the picture, so a
trigger may address pixels by row and column). Training uses the whole 60k train split (cut into shards),
evaluation the whole 10k test split.

Model: MLP 784 → ``hidden`` → 10 with ReLU (``hidden`` = 32 by default: 25,450 parameters), small so that
the robustness benchmark (about 900 runs of a 10-peer swarm) fits in an hour on two CPU cores. Measured here
(10 peers, ``dirichlet:1``, 20 outer rounds of H = 20, plain mean, seed 0, one torch thread): hidden 16 / 32 /
64 reach 0.817 / 0.822 / 0.837 test accuracy in 2.7 / 3.0 / 3.5 s per run; per-step overhead dominates, so
width costs little time but enlarges d, which the O(n²d) rules pay for. Initialised as PyTorch's
``nn.Linear`` default, from a local generator.

Defaults (``HParams``): AdamW lr 3e-3, betas (0.9, 0.95), weight decay 0.1, batch 32, H = 20 inner steps
(the figures of ``digits``).

References:
    Han Xiao, Kashif Rasul, Roland Vollgraf. Fashion-MNIST: a Novel Image Dataset for Benchmarking Machine
    Learning Algorithms. arXiv:1708.07747, 2017.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from p2p_guard.tasks import fashion_mnist_files
from p2p_guard.tasks._common import evaluating
from p2p_guard.tasks.base import Metrics
from p2p_guard.tasks.fashion_mnist_files import DEFAULT_DATA_DIR, FILES, check_data_dir, find_file
from p2p_guard.tasks.image_classification import ImageClassificationTask

__all__ = ["DEFAULT_DATA_DIR", "FILES", "FashionMnistTask", "read_idx"]

logger = logging.getLogger(__name__)

_SIDE = 28
_NUM_PIXELS = _SIDE * _SIDE
_NUM_CLASSES = 10
_UBYTE = 0x08
_GZIP_MAGIC = b"\x1f\x8b"
_EVAL_CHUNK = 5000


def read_idx(path: Path, *, ndim: int) -> np.ndarray:
    """Read an IDX file of unsigned bytes (raw or gzip), checking its header strictly.

    Format: two zero bytes, the element type (``0x08`` = unsigned byte, the only one accepted), the rank, then
    one big-endian ``uint32`` per dimension, then exactly ``prod(dims)`` bytes of data.

    Args:
        path: The file; gzip-compressed when its first two bytes are ``1f 8b``.
        ndim: The rank the caller expects (3 for images, 1 for labels).

    Returns:
        A ``uint8`` array of the header's shape.

    Raises:
        ValueError: On a short or malformed header, another element type or rank, a zero dimension, or a
            payload that is shorter or longer than the header says; the message names the file.
        OSError: If the file cannot be read.
    """
    with open(path, "rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as stream:
            header = stream.read(4)
            if len(header) < 4:
                raise ValueError(f"{path}: not an IDX file: {len(header)}-byte header, need 4")
            if header[0] != 0 or header[1] != 0:
                raise ValueError(f"{path}: not an IDX file: magic starts {header[:2].hex()}, expected 0000")
            if header[2] != _UBYTE:
                raise ValueError(
                    f"{path}: element type 0x{header[2]:02x}; only unsigned bytes (0x08) are read"
                )
            if header[3] != ndim:
                raise ValueError(f"{path}: rank {header[3]}, expected {ndim}")
            dims_bytes = stream.read(4 * ndim)
            if len(dims_bytes) < 4 * ndim:
                raise ValueError(f"{path}: truncated header: {len(dims_bytes)} of {4 * ndim} dimension bytes")
            dims = tuple(int(v) for v in np.frombuffer(dims_bytes, dtype=">u4"))
            if any(v == 0 for v in dims):
                raise ValueError(f"{path}: a dimension is zero: {dims}")
            count = int(np.prod(dims, dtype=np.int64))
            data = stream.read(count)
            if len(data) < count:
                raise ValueError(f"{path}: truncated data: {len(data)} of {count} bytes for shape {dims}")
            if stream.read(1):
                raise ValueError(f"{path}: trailing bytes after the {count} bytes of shape {dims}")
    except (EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: corrupt gzip stream: {exc}") from exc
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


@dataclass(frozen=True, eq=False)
class _FashionData:
    x_train: Tensor  # (60000, 784) uint8
    y_train: Tensor  # (60000,) int64
    x_test: Tensor  # (10000, 784) float32 in [0, 1]
    y_test: Tensor  # (10000,) int64


def load_fashion_mnist(data_dir: Path) -> _FashionData:
    """Read and check the four IDX files of ``data_dir``.

    Args:
        data_dir: Directory holding the files (raw or ``.gz``).

    Returns:
        Train images (``uint8``, flat) and labels, test images (float32 in [0, 1], flat) and labels.

    Raises:
        FileNotFoundError: If a file is missing (the message says how to get them).
        ValueError: If a file is malformed, images are not 28×28, counts of images and labels differ, or a
            label is outside [0, 10).
    """
    arrays = {}
    for key, base in FILES.items():
        arrays[key] = read_idx(find_file(data_dir, base), ndim=3 if key.endswith("images") else 1)
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.shape[1:] != (_SIDE, _SIDE):
            raise ValueError(f"fashion-mnist {split} images are {images.shape[1:]}, expected (28, 28)")
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"fashion-mnist {split}: {images.shape[0]} images but {labels.shape[0]} labels")
        if int(labels.max()) >= _NUM_CLASSES:
            raise ValueError(f"fashion-mnist {split}: label {int(labels.max())} outside [0, {_NUM_CLASSES})")
    x_train = torch.from_numpy(arrays["train_images"].reshape(-1, _NUM_PIXELS).copy())
    x_test = torch.from_numpy(arrays["test_images"].reshape(-1, _NUM_PIXELS).astype(np.float32) / 255.0)
    logger.debug("fashion-mnist: %d train, %d test images from %s", len(x_train), len(x_test), data_dir)
    return _FashionData(
        x_train=x_train,
        y_train=torch.from_numpy(arrays["train_labels"].astype(np.int64)),
        x_test=x_test,
        y_test=torch.from_numpy(arrays["test_labels"].astype(np.int64)),
    )


class FashionMnistTask(ImageClassificationTask):
    """Fashion-MNIST, MLP 784-hidden-10: the benchmark's classification task.

    Args:
        data_dir: Directory holding the four IDX files (raw or ``.gz``); default :data:`DEFAULT_DATA_DIR`.
        hidden: Width of the hidden layer, ``>= 1``.

    Raises:
        ValueError: On an out-of-range option. A missing directory or file is reported on first use (the data
            is read lazily), as ``FileNotFoundError``.
    """

    name = "fashion-mnist"
    num_classes = _NUM_CLASSES
    num_pixels = _NUM_PIXELS

    def __init__(self, *, data_dir: str | Path | None = None, hidden: int = 32) -> None:
        """Check the options; the data is read on first use."""
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden={hidden!r} must be an integer >= 1")
        if data_dir is not None and not isinstance(data_dir, (str, Path)):
            raise ValueError(f"data_dir={data_dir!r} must be a path")
        # read at call time from fashion_mnist_files, the one place the CLI's early check reads it too
        self.data_dir = Path(data_dir) if data_dir is not None else fashion_mnist_files.DEFAULT_DATA_DIR
        self.hidden = hidden

    def __repr__(self) -> str:
        """Return the constructor call that rebuilds this task."""
        return f"FashionMnistTask(data_dir={str(self.data_dir)!r}, hidden={self.hidden})"

    @cached_property
    def _data(self) -> _FashionData:
        check_data_dir(self.data_dir)
        return load_fashion_mnist(self.data_dir)

    def check_data(self) -> None:
        """Read the data now (it is otherwise read on first use), so that a missing file fails early.

        Raises:
            FileNotFoundError: If the directory or a file is missing.
            ValueError: If a file is malformed.
        """
        _ = self._data

    def _train_images(self, rows: Tensor) -> Tensor:
        """Training images ``rows`` as ``(len(rows), 784)`` float32 in [0, 1] (stored as ``uint8``)."""
        return self._data.x_train.index_select(0, rows).to(torch.float32).div_(255.0)

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """Loss and accuracy on the whole test split (10,000 images), in batches of 5,000.

        Args:
            model: The MLP, already on ``device``.
            device: Where to evaluate.

        Returns:
            ``Metrics(loss, accuracy, perplexity=None)``.
        """
        data = self._data
        total_loss = 0.0
        correct = 0
        count = int(data.y_test.shape[0])
        with evaluating(model):
            for start in range(0, count, _EVAL_CHUNK):
                x = data.x_test[start : start + _EVAL_CHUNK].to(device)
                y = data.y_test[start : start + _EVAL_CHUNK].to(device)
                logits = model(x).float()
                total_loss += float(F.cross_entropy(logits, y, reduction="sum"))
                correct += int((logits.argmax(dim=1) == y).sum())
        return Metrics(loss=total_loss / count, accuracy=correct / count, perplexity=None)
