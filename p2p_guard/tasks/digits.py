"""``digits``: scikit-learn's 8×8 handwritten digits with a small MLP; seconds per run, for tests and demos.

Data: ``sklearn.datasets.load_digits`` (1,797 images of 8×8 pixels, 10 classes, ships with scikit-learn),
pixels scaled from 0..16 to [0, 1], split once into train / test (80 / 20, stratified, ``split_seed`` 0:
1,437 train and 360 test images). The split does not depend on the run seed, so all runs evaluate on the same
images.

Model: MLP 64 → 64 → 10 with ReLU (4,810 parameters), initialised as PyTorch's ``nn.Linear`` default but from
a local generator.

Defaults (``HParams``): AdamW lr 3e-3, betas (0.9, 0.95), weight decay 0.1, batch 32, H = 20 inner steps. With
DiLoCo's outer Nesterov (lr 0.7, momentum 0.9), 8 peers and 10 rounds reach about 0.95 test accuracy
(measured here over seeds 0-4: iid 0.942-0.956, mean 0.948; dirichlet:1.0 0.931-0.942, mean 0.935); with 2
of 8 peers sending −10 × their own update and a plain mean, accuracy collapses to about 0.10.

scikit-learn runs in a short-lived child process (:func:`_load_digits`): importing ``sklearn`` (and with it
scipy) costs a process about 40 MiB that it never gives back, and a peer needs nothing of it but these arrays.
The child returns the same arrays ``load_digits`` and ``train_test_split`` give in-process.
"""

from __future__ import annotations

import functools
import io
import logging
import signal
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from p2p_guard.tasks._common import evaluating
from p2p_guard.tasks.base import Metrics
from p2p_guard.tasks.image_classification import ImageClassificationTask

__all__ = ["DigitsTask"]

logger = logging.getLogger(__name__)

_NUM_PIXELS = 64
_PIXEL_MAX = 16.0
_LOAD_TIMEOUT_S = 600.0

# Run by _load_digits in a child process: argv[1] test_fraction, argv[2] split_seed; writes an .npz to stdout.
_CHILD = """
import io, sys
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

bunch = load_digits()
train, test = train_test_split(list(range(len(bunch.target))), test_size=float(sys.argv[1]),
                               random_state=int(sys.argv[2]), stratify=bunch.target)
out = io.BytesIO()
np.savez(out, data=bunch.data, target=bunch.target, train=np.array(sorted(train), dtype=np.int64),
         test=np.array(sorted(test), dtype=np.int64))
sys.stdout.buffer.write(out.getvalue())
"""


@functools.lru_cache(maxsize=4)
def _load_digits(test_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits and their stratified split, computed by scikit-learn in a child process.

    Args:
        test_fraction: ``test_size`` of ``train_test_split``, in (0, 1).
        split_seed: its ``random_state``.

    Returns:
        ``(data, target, train, test)``: ``load_digits().data`` ``(1797, 64)`` float64 (pixels 0..16),
        ``.target`` ``(1797,)`` int64, and the sorted train and test row indices (int64). Cached per process;
        treat the arrays as read-only.

    Raises:
        RuntimeError: if the child fails (e.g. scikit-learn is not installed); the message carries its stderr.
        KeyboardInterrupt: the child died of SIGINT (a Ctrl+C sent to the process group while it loaded).
    """
    command = [sys.executable, "-P", "-c", _CHILD, repr(float(test_fraction)), str(int(split_seed))]
    try:
        # our own interpreter, a fixed program, arguments as a list, no shell
        done = subprocess.run(command, capture_output=True, check=False, timeout=_LOAD_TIMEOUT_S)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"digits: could not run scikit-learn to load the data: {e}") from e
    if done.returncode == -signal.SIGINT:  # Ctrl+C reached the child too (the terminal's whole process group)
        raise KeyboardInterrupt
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError("digits: loading scikit-learn's digits failed: " + " | ".join(tail))
    with np.load(io.BytesIO(done.stdout), allow_pickle=False) as arrays:
        return arrays["data"], arrays["target"], arrays["train"], arrays["test"]


@dataclass(frozen=True, eq=False)
class _DigitsData:
    x_train: Tensor  # (N_train, 64) float32 in [0, 1]
    y_train: Tensor  # (N_train,) int64
    x_test: Tensor  # (N_test, 64) float32 in [0, 1]
    y_test: Tensor  # (N_test,) int64


class DigitsTask(ImageClassificationTask):
    """scikit-learn digits, MLP 64-64-10: the small classification task.

    Args:
        test_fraction: Share of the 1,797 images held out for :meth:`evaluate`, in (0, 1).
        split_seed: Seed of the fixed stratified train/test split (not the run seed).
        hidden: Width of the hidden layer.

    Raises:
        ValueError: On an out-of-range option.
    """

    name = "digits"
    num_pixels = _NUM_PIXELS

    def __init__(self, *, test_fraction: float = 0.2, split_seed: int = 0, hidden: int = 64) -> None:
        """Check the options; the data is loaded on first use."""
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction={test_fraction} must be in (0, 1)")
        if isinstance(split_seed, bool) or not isinstance(split_seed, int) or split_seed < 0:
            raise ValueError(f"split_seed={split_seed!r} must be a non-negative integer")
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden={hidden!r} must be an integer >= 1")
        self.test_fraction = test_fraction
        self.split_seed = split_seed
        self.hidden = hidden

    def __repr__(self) -> str:
        """Return the constructor call that rebuilds this task."""
        return (
            f"DigitsTask(test_fraction={self.test_fraction}, split_seed={self.split_seed}, "
            f"hidden={self.hidden})"
        )

    @cached_property
    def _data(self) -> _DigitsData:
        data, target, train_idx, test_idx = _load_digits(self.test_fraction, self.split_seed)
        x = torch.as_tensor(data, dtype=torch.float32) / _PIXEL_MAX
        y = torch.as_tensor(target, dtype=torch.int64)
        train = torch.as_tensor(train_idx, dtype=torch.int64)
        test = torch.as_tensor(test_idx, dtype=torch.int64)
        logger.debug("digits: %d train, %d test images", len(train), len(test))
        return _DigitsData(x[train], y[train], x[test], y[test])

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """Loss and accuracy on the fixed 20% test split (360 images).

        Args:
            model: The MLP, already on ``device``.
            device: Where to evaluate.

        Returns:
            ``Metrics(loss, accuracy, perplexity=None)``.
        """
        data = self._data
        x = data.x_test.to(device)
        y = data.y_test.to(device)
        with evaluating(model):
            logits = model(x).float()
            loss = F.cross_entropy(logits, y)
            accuracy = (logits.argmax(dim=1) == y).float().mean()
        return Metrics(loss=float(loss), accuracy=float(accuracy), perplexity=None)
