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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from p2p_guard.tasks._common import (
    DeferredLinear,
    check_batch_size,
    evaluating,
    init_generator,
    linear_default_,
)
from p2p_guard.tasks.base import Batch, HParams, Metrics, Shard, TaskKind
from p2p_guard.tasks.partition import (
    check_shard_args,
    make_rng,
    parse_partition,
    split_dirichlet,
    split_holdout,
    split_iid,
)

__all__ = ["DigitsTask"]

logger = logging.getLogger(__name__)

_NUM_PIXELS = 64
_PIXEL_MAX = 16.0


@dataclass(frozen=True, eq=False)
class _DigitsData:
    x_train: Tensor  # (N_train, 64) float32 in [0, 1]
    y_train: Tensor  # (N_train,) int64
    x_test: Tensor  # (N_test, 64) float32 in [0, 1]
    y_test: Tensor  # (N_test,) int64


class DigitsTask:
    """scikit-learn digits, MLP 64-64-10: the small classification task.

    Args:
        test_fraction: Share of the 1,797 images held out for :meth:`evaluate`, in (0, 1).
        split_seed: Seed of the fixed stratified train/test split (not the run seed).
        hidden: Width of the hidden layer.

    Raises:
        ValueError: On an out-of-range option.
    """

    name = "digits"
    kind: TaskKind = "classification"
    num_classes = 10
    default_hparams = HParams(
        inner_lr=3e-3, batch_size=32, inner_steps=20, weight_decay=0.1, betas=(0.9, 0.95)
    )

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
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        bunch = load_digits()
        x = torch.as_tensor(bunch.data, dtype=torch.float32) / _PIXEL_MAX
        y = torch.as_tensor(bunch.target, dtype=torch.int64)
        train_idx, test_idx = train_test_split(
            list(range(len(y))),
            test_size=self.test_fraction,
            random_state=self.split_seed,
            stratify=bunch.target,
        )
        train = torch.as_tensor(sorted(train_idx), dtype=torch.int64)
        test = torch.as_tensor(sorted(test_idx), dtype=torch.int64)
        logger.debug("digits: %d train, %d test images", len(train), len(test))
        return _DigitsData(x[train], y[train], x[test], y[test])

    @property
    def num_train(self) -> int:
        """Number of images in the training split."""
        return int(self._data.y_train.shape[0])

    def build_model(self, seed: int) -> nn.Module:
        """MLP 64 → hidden → 10 (ReLU), parameters drawn from ``seed`` only.

        Args:
            seed: Initialisation seed.

        Returns:
            The model on CPU, float32, train mode. Input ``(B, 64)`` float32, output logits ``(B, 10)``.

        Raises:
            ValueError: If ``seed`` is not an integer.
        """
        generator = init_generator(seed)
        model = nn.Sequential(
            DeferredLinear(_NUM_PIXELS, self.hidden), nn.ReLU(), DeferredLinear(self.hidden, self.num_classes)
        )
        with torch.no_grad():
            for layer in model.modules():
                if isinstance(layer, nn.Linear):
                    linear_default_(layer, generator)
        return model.train()

    def shard(self, num_shards: int, index: int, partition: str, seed: int) -> Shard:
        """Shard ``index`` of the training images, 10% of it kept as the peer's private hold-out.

        Args:
            num_shards: Number of shards, ``>= 1``.
            index: Which shard, in ``[0, num_shards)``.
            partition: ``"iid"`` or ``"dirichlet:ALPHA"`` (label skew, Hsu et al. 2019).
            seed: Partition seed, the same on every peer.

        Returns:
            A :class:`Shard` whose ``train`` / ``holdout`` are ``int64`` indices into the training split.

        Raises:
            ValueError: On bad arguments, or if the training split cannot be cut that finely.
        """
        check_shard_args(num_shards, index)
        spec = parse_partition(partition)
        rng = make_rng(seed, 0)
        labels = self._data.y_train.numpy()
        if spec.kind == "iid":
            parts = split_iid(len(labels), num_shards, rng)
        else:
            if spec.alpha is None:
                raise ValueError(f"partition {partition!r} has no alpha")
            parts = split_dirichlet(labels, num_shards, spec.alpha, rng)
        train, holdout = split_holdout(parts[index], make_rng(seed, 1, index))
        return Shard(
            index=index,
            num_shards=num_shards,
            partition=str(spec),
            train=torch.from_numpy(train),
            holdout=torch.from_numpy(holdout),
            num_samples=len(train),
        )

    def _batch(self, units: Tensor, batch_size: int, generator: torch.Generator) -> Batch:
        check_batch_size(batch_size)
        if units.numel() == 0:
            raise ValueError("the shard has no examples to draw from")
        pick = torch.randint(int(units.numel()), (batch_size,), generator=generator)
        rows = units.index_select(0, pick)
        data = self._data
        return data.x_train.index_select(0, rows), data.y_train.index_select(0, rows)

    def sample_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw ``batch_size`` training images (with replacement) from the shard.

        Args:
            shard: A shard made by :meth:`shard`.
            batch_size: Images per batch.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``x`` ``(B, 64)`` float32 in [0, 1] and ``y`` ``(B,)`` int64, on CPU.

        Raises:
            ValueError: If ``batch_size < 1``.
        """
        return self._batch(shard.train, batch_size, generator)

    def holdout_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw ``batch_size`` images (with replacement) from the shard's private hold-out.

        Args:
            shard: A shard made by :meth:`shard`.
            batch_size: Images per batch.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``x`` ``(B, 64)`` float32 and ``y`` ``(B,)`` int64, on CPU.

        Raises:
            ValueError: If ``batch_size < 1``.
        """
        return self._batch(shard.holdout, batch_size, generator)

    def loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy of the logits ``model(x)`` against labels ``y``.

        Args:
            model: The MLP.
            x: ``(B, 64)`` float32 inputs.
            y: ``(B,)`` int64 labels.

        Returns:
            Scalar float32 loss in nats per example.
        """
        return F.cross_entropy(model(x), y)

    def test_split(self) -> Batch:
        """The fixed test split: ``x`` ``(360, 64)`` float32 in [0, 1], ``y`` ``(360,)`` int64 (not copies).

        Used by the benchmark to measure a backdoor's success rate on triggered test images.
        """
        return self._data.x_test, self._data.y_test

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
