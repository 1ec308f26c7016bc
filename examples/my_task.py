"""Bring your own model: a user's torch model on a data set of their own, as a p2p_guard task.

The data set is scikit-learn's breast-cancer table (569 tumours, 30 numeric features, 2 classes; it ships inside
scikit-learn, nothing is downloaded). The model is a small MLP ``30 → hidden → 2``. Nothing here is special to
p2p_guard but the method names and shapes of :class:`p2p_guard.tasks.base.Task` (a structural interface: no
base class), and :mod:`p2p_guard.tasks.partition` for the ``iid`` / ``dirichlet:ALPHA`` cuts.

Run it from the repository root (the directory that holds ``examples/``)::

    python -m p2p_guard.cli.main simulate --task examples.my_task:MyTask --honest 2 --byzantine 0 --rounds 2
    python -m p2p_guard.cli.main simulate --task examples.my_task:MyTask:hidden=64 ...

``python -m`` puts the current directory on ``sys.path``; with the ``p2p-guard`` script, or from another
directory, add the directory to ``PYTHONPATH`` (``PYTHONPATH=/path/to/repo p2p-guard simulate --task
examples.my_task:MyTask``). Every peer imports this file, so every peer needs it. See docs/tasks.md.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from p2p_guard.tasks.base import Batch, HParams, Metrics, Shard, TaskKind
from p2p_guard.tasks.partition import make_rng, parse_partition, split_dirichlet, split_holdout, split_iid

__all__ = ["MyTask"]


class MyTask:
    """Breast-cancer classification with an MLP (2 classes, 30 standardised features).

    Args:
        hidden: Width of the hidden layer.
        test_fraction: Share of the 569 rows held out for :meth:`evaluate` (a fixed split, not the run seed).

    Raises:
        ValueError: On an out-of-range option.
    """

    name = "my_task"
    kind: TaskKind = "classification"
    num_classes = 2
    default_hparams = HParams(inner_lr=3e-3, batch_size=32, inner_steps=20)

    def __init__(self, *, hidden: int = 32, test_fraction: float = 0.2) -> None:
        """Check the options; the data is loaded on first use (not here: building a task must be cheap)."""
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"hidden={hidden!r} must be an integer >= 1")
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction={test_fraction!r} must be in (0, 1)")
        self.hidden = hidden
        self.test_fraction = test_fraction

    @cached_property
    def _data(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(x_train, y_train, x_test, y_test)``: float32 ``(N, 30)`` standardised by the training rows, int64."""
        from sklearn.datasets import load_breast_cancer  # the user's own data: any loader will do

        bunch = load_breast_cancer()
        x = np.asarray(bunch.data, dtype=np.float64)
        y = np.asarray(bunch.target, dtype=np.int64)
        order = np.random.default_rng(0).permutation(len(y))  # fixed split: every peer evaluates the same rows
        cut = round(len(y) * self.test_fraction)
        test, train = order[:cut], order[cut:]
        mean, std = x[train].mean(axis=0), x[train].std(axis=0) + 1e-8
        scaled = ((x - mean) / std).astype(np.float32)
        return (torch.from_numpy(scaled[train]), torch.from_numpy(y[train]),
                torch.from_numpy(scaled[test]), torch.from_numpy(y[test]))

    def build_model(self, seed: int) -> nn.Module:
        """MLP ``30 → hidden → 2``; the same seed gives the same parameters, the global RNG is left alone.

        Returns:
            The model on CPU, float32, train mode: input ``(B, 30)`` float32, output ``(B, 2)`` logits.
        """
        generator = torch.Generator().manual_seed(seed)
        model = nn.Sequential(nn.Linear(30, self.hidden), nn.ReLU(), nn.Linear(self.hidden, self.num_classes))
        with torch.no_grad():
            for layer in model:
                if isinstance(layer, nn.Linear):
                    bound = layer.in_features ** -0.5
                    layer.weight.uniform_(-bound, bound, generator=generator)
                    layer.bias.uniform_(-bound, bound, generator=generator)
        return model.train()

    def shard(self, num_shards: int, index: int, partition: str, seed: int) -> Shard:
        """Rows of the training split for peer ``index``, 10% of them kept as its private hold-out.

        Raises:
            ValueError: On a bad partition spec or index.
        """
        if not 0 <= index < num_shards:
            raise ValueError(f"index={index} must be in [0, {num_shards})")
        spec = parse_partition(partition)
        labels = self._data[1].numpy()
        rng = make_rng(seed, 0)  # from the run seed alone: the peers' shards are disjoint
        if spec.alpha is None:
            parts = split_iid(len(labels), num_shards, rng)
        else:
            parts = split_dirichlet(labels, num_shards, spec.alpha, rng)
        train, holdout = split_holdout(parts[index], make_rng(seed, 1, index))
        return Shard(index=index, num_shards=num_shards, partition=str(spec), train=torch.from_numpy(train),
                     holdout=torch.from_numpy(holdout), num_samples=len(train))

    def _draw(self, rows: Tensor, batch_size: int, generator: torch.Generator) -> Batch:
        if batch_size < 1 or rows.numel() == 0:
            raise ValueError(f"cannot draw {batch_size} rows from {rows.numel()}")
        picked = rows[torch.randint(rows.numel(), (batch_size,), generator=generator)]
        x_train, y_train, _, _ = self._data
        return x_train[picked], y_train[picked]

    def sample_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """``(x, y)``: float32 ``(B, 30)`` and int64 ``(B,)`` rows of the shard's training part."""
        return self._draw(shard.train, batch_size, generator)

    def holdout_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """As :meth:`sample_batch`, from the shard's private hold-out."""
        return self._draw(shard.holdout, batch_size, generator)

    def loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy (a float32 scalar with autograd)."""
        return F.cross_entropy(model(x), y)

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """Loss and accuracy on the fixed test rows, without autograd; the model's mode is restored."""
        _, _, x, y = self._data
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(x.to(device)).float()
                loss = float(F.cross_entropy(logits, y.to(device)))
                accuracy = float((logits.argmax(dim=1) == y.to(device)).float().mean())
        finally:
            model.train(was_training)
        return Metrics(loss=loss, accuracy=accuracy, perplexity=None)
