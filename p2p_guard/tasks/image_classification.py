"""Shared base of the flat-image MLP classification tasks (``digits``, ``fashion-mnist``).

:class:`ImageClassificationTask` holds what those tasks do alike: the MLP ``num_pixels → hidden → 10``,
sharding of the training split, batch sampling from a shard, the cross-entropy loss and the test split.
A subclass supplies the data (a lazily loaded ``_data`` with ``x_train``, ``y_train``, ``x_test``,
``y_test``),
``name``, ``num_pixels``, ``hidden`` and :meth:`~ImageClassificationTask.evaluate`; it may override
:meth:`~ImageClassificationTask._train_images` to convert stored training images to float32.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from p2p_guard.tasks._common import DeferredLinear, check_batch_size, init_generator, linear_default_
from p2p_guard.tasks.base import Batch, HParams, Metrics, Shard, TaskKind
from p2p_guard.tasks.partition import (
    check_shard_args,
    make_rng,
    parse_partition,
    split_dirichlet,
    split_holdout,
    split_iid,
)

__all__ = ["ImageClassificationTask"]


class _ImageData(Protocol):
    """The loaded splits: flat images ``(N, num_pixels)`` and ``int64`` labels ``(N,)``."""

    @property
    def x_train(self) -> Tensor: ...

    @property
    def y_train(self) -> Tensor: ...

    @property
    def x_test(self) -> Tensor: ...

    @property
    def y_test(self) -> Tensor: ...


class ImageClassificationTask:
    """Base of the flat-image classification tasks: an MLP ``num_pixels → hidden → num_classes``.

    Not a task by itself: a subclass sets ``name``, ``num_pixels`` and ``hidden``, loads ``_data`` (e.g. as a
    ``cached_property``) and implements :meth:`evaluate`.

    Attributes:
        num_pixels: Pixels per flat image (the model's input width).
        hidden: Width of the hidden layer.
    """

    name: str
    kind: TaskKind = "classification"
    num_classes = 10
    num_pixels: int
    hidden: int
    default_hparams = HParams(
        inner_lr=3e-3, batch_size=32, inner_steps=20, weight_decay=0.1, betas=(0.9, 0.95)
    )
    _data: _ImageData

    @property
    def num_train(self) -> int:
        """Number of images in the training split."""
        return int(self._data.y_train.shape[0])

    def build_model(self, seed: int) -> nn.Module:
        """MLP num_pixels → hidden → 10 (ReLU), parameters drawn from ``seed`` only.

        Args:
            seed: Initialisation seed.

        Returns:
            The model on CPU, float32, train mode. Input ``(B, num_pixels)`` float32, output logits
            ``(B, 10)``.

        Raises:
            ValueError: If ``seed`` is not an integer.
        """
        generator = init_generator(seed)
        model = nn.Sequential(
            DeferredLinear(self.num_pixels, self.hidden),
            nn.ReLU(),
            DeferredLinear(self.hidden, self.num_classes),
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

    def _train_images(self, rows: Tensor) -> Tensor:
        """Training images ``rows``: ``(len(rows), num_pixels)`` float32 in [0, 1] (stored so here)."""
        return self._data.x_train.index_select(0, rows)

    def _batch(self, units: Tensor, batch_size: int, generator: torch.Generator) -> Batch:
        check_batch_size(batch_size)
        if units.numel() == 0:
            raise ValueError("the shard has no examples to draw from")
        pick = torch.randint(int(units.numel()), (batch_size,), generator=generator)
        rows = units.index_select(0, pick)
        return self._train_images(rows), self._data.y_train.index_select(0, rows)

    def sample_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw ``batch_size`` training images (with replacement) from the shard.

        Args:
            shard: A shard made by :meth:`shard`.
            batch_size: Images per batch.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``x`` ``(B, num_pixels)`` float32 in [0, 1] and ``y`` ``(B,)`` int64, on CPU.

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
            ``x`` ``(B, num_pixels)`` float32 in [0, 1] and ``y`` ``(B,)`` int64, on CPU.

        Raises:
            ValueError: If ``batch_size < 1``.
        """
        return self._batch(shard.holdout, batch_size, generator)

    def loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy of the logits ``model(x)`` against labels ``y``.

        Args:
            model: The MLP.
            x: ``(B, num_pixels)`` float32 inputs.
            y: ``(B,)`` int64 labels.

        Returns:
            Scalar float32 loss in nats per example.
        """
        return F.cross_entropy(model(x), y)

    def test_split(self) -> Batch:
        """The whole test split: ``x`` ``(N, num_pixels)`` float32 in [0, 1], ``y`` ``(N,)`` int64 (no copy).

        Used by the benchmark to measure a backdoor's success rate on triggered test images.
        """
        return self._data.x_test, self._data.y_test

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """Loss and accuracy on the test split; each subclass implements it.

        Args:
            model: The MLP, already on ``device``.
            device: Where to evaluate.

        Returns:
            ``Metrics(loss, accuracy, perplexity=None)``.

        Raises:
            NotImplementedError: Always, here.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement evaluate()")
