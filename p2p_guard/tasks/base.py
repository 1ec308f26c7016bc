"""The task interface: bring your own model and data.

A *task* is everything p2p_guard needs to know about a learning problem, and nothing about the network. A peer
builds the model from a seed shared by the whole run (so every peer starts from the same θ_0), takes its shard
of the training data, samples inner-step batches from it with its own ``torch.Generator``, and evaluates a
model on the task's held-out split. The semantic guard additionally scores candidate updates on a small
*private* batch from the peer's own shard that is never used for training (``holdout_batch``).

To train your own model, write a class that satisfies the :class:`Task` Protocol (a structural type: no base
class is needed) and name it where a task is asked for: ``--task my_module:MyTask[:key=value,...]`` (the
constructor gets the options as keywords), the same in a TOML config, or ``load_task("my_module:MyTask")``;
``docs/tasks.md`` and ``examples/my_task.py`` walk through one. The built-in
tasks (:mod:`p2p_guard.tasks.digits`, :mod:`p2p_guard.tasks.shakespeare`) are complete, small examples; the
partition helpers in :mod:`p2p_guard.tasks.partition` give the same ``iid`` / ``dirichlet:ALPHA`` semantics to
any labelled dataset.

Contract, in short:

* ``build_model(seed)`` is deterministic: the same seed gives bit-identical parameters in any process, and the
  global torch RNG is neither read nor advanced (use a local ``torch.Generator``).
* ``shard(num_shards, index, partition, seed)`` computes the partition of the *whole* training split from
  ``seed`` alone and returns part ``index``: peers that pass the same ``(num_shards, partition, seed)`` get
  disjoint shards that together cover the training split.
* ``sample_batch`` and ``holdout_batch`` draw only from the given generator, so a peer's data order is
  reproducible from its seed. They return CPU tensors.
* ``loss`` returns a scalar float tensor with autograd attached; ``evaluate`` runs without autograd, leaves
  the model's train/eval mode as it found it, and returns plain Python floats.

References:
    Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105,
    2023 (the inner/outer optimisation the tasks are used in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

__all__ = ["Batch", "HParams", "Metrics", "Shard", "Task", "TaskKind"]

TaskKind = Literal["classification", "lm"]
"""``"classification"``: one label per input. ``"lm"``: next-token prediction, one label per position."""

Batch = tuple[Tensor, Tensor]
"""``(x, y)``: inputs and targets of one batch, on CPU."""


@dataclass(frozen=True)
class Metrics:
    """Quality of a model on a task's held-out split.

    Attributes:
        loss: Mean cross-entropy per prediction (per example for classification, per token for language
            models), in nats.
        accuracy: Fraction of correct arg-max predictions in [0, 1]; None for language models (they report
            perplexity) and wherever the task has no such notion.
        perplexity: ``exp(loss)`` for language models; None for classification.
    """

    loss: float
    accuracy: float | None
    perplexity: float | None


@dataclass(frozen=True)
class HParams:
    """Default inner-loop hyper-parameters of a task (the outer loop is DiLoCo's, the same for every task).

    Attributes:
        inner_lr: AdamW learning rate of the inner steps.
        batch_size: Examples (classification) or windows (language model) per inner step.
        inner_steps: H, the number of inner steps per outer round.
        weight_decay: AdamW decoupled weight decay.
        betas: AdamW ``(beta1, beta2)``.
        grad_clip_norm: Global gradient-norm clip applied before each inner step, or None for no clipping.
        warmup_steps: Linear inner learning-rate warm-up over this many inner steps, counted over the whole
            run (the inner optimiser lives across rounds); 0 for none.

    References:
        Douillard et al., arXiv:2311.08105, 2023: inner AdamW with betas (0.9, 0.95), weight decay 0.1.
    """

    inner_lr: float
    batch_size: int
    inner_steps: int
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip_norm: float | None = None
    warmup_steps: int = 0


@dataclass(frozen=True, eq=False)
class Shard:
    """One peer's part of a task's training split.

    The meaning of ``train`` and ``holdout`` belongs to the task that made the shard: for classification they
    are 1-D ``int64`` tensors of example indices into the training split; for text they are ``(k, 2)``
    ``int64`` tensors of ``[start, stop)`` character spans into the encoded corpus. ``holdout`` (about 10% of
    the shard) is never used for training; it feeds :meth:`Task.holdout_batch`.

    Attributes:
        index: This shard's position, in ``[0, num_shards)``.
        num_shards: How many shards the training split was cut into.
        partition: The partition spec that produced it (``"iid"`` or ``"dirichlet:ALPHA"``).
        train: Training units (see above), CPU ``int64``.
        holdout: Private held-out units (see above), CPU ``int64``.
        num_samples: Training examples (classification) or training characters (text) in the shard; the
            ``n_samples`` a peer announces with its update.
        groups: Names of the natural groups the shard holds (the works, for text); empty otherwise.
    """

    index: int
    num_shards: int
    partition: str
    train: Tensor
    holdout: Tensor
    num_samples: int
    groups: tuple[str, ...] = ()


@runtime_checkable
class Task(Protocol):
    """A learning problem: model, data shards, batches, loss and held-out evaluation.

    The four attributes may be plain class attributes or read-only properties.
    """

    @property
    def name(self) -> str:
        """Short registry name (``"digits"``)."""
        ...

    @property
    def kind(self) -> TaskKind:
        """``"classification"`` or ``"lm"``."""
        ...

    @property
    def num_classes(self) -> int:
        """Number of classes; the vocabulary size for a language model.

        Label-flip attacks map a label ``y`` to ``num_classes - 1 - y``.
        """
        ...

    @property
    def default_hparams(self) -> HParams:
        """Inner-loop defaults (learning rate, batch size, H) known to work for this task."""
        ...

    def build_model(self, seed: int) -> nn.Module:
        """Build the model with parameters drawn from ``seed``, on CPU, in float32.

        Args:
            seed: Initialisation seed; the same seed gives bit-identical parameters. The global torch RNG
                is not used.

        Returns:
            A freshly initialised module in train mode.
        """
        ...

    def shard(self, num_shards: int, index: int, partition: str, seed: int) -> Shard:
        """Return shard ``index`` of the training split cut into ``num_shards`` parts.

        Args:
            num_shards: Number of parts (peers), ``>= 1``.
            index: Which part, in ``[0, num_shards)``.
            partition: ``"iid"`` or ``"dirichlet:ALPHA"`` (``ALPHA > 0``; smaller is more skewed).
            seed: Partition seed; must be the same on every peer for the shards to be disjoint.

        Returns:
            The shard, with about 10% of it reserved as a private hold-out.

        Raises:
            ValueError: On a bad ``num_shards``, ``index`` or ``partition``, or when the data cannot be cut
                that finely.
        """
        ...

    def sample_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw a training batch (with replacement) from the shard's training part.

        Args:
            shard: A shard made by this task.
            batch_size: Number of examples (or windows), ``>= 1``.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``(x, y)`` on CPU. Classification: ``x`` float32 ``(B, ...)``, ``y`` int64 ``(B,)``. Language
            model: ``x`` and ``y`` int64 ``(B, T)``, ``y`` being ``x`` shifted by one position.
        """
        ...

    def holdout_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """Draw a batch from the shard's private hold-out (never used for training).

        Args:
            shard: A shard made by this task.
            batch_size: Number of examples (or windows), ``>= 1``.
            generator: CPU generator; the only source of randomness.

        Returns:
            ``(x, y)`` shaped as in :meth:`sample_batch`.
        """
        ...

    def loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy of ``model`` on a batch.

        Args:
            model: The task's model, on the device of ``x``.
            x: Inputs, as returned by :meth:`sample_batch`.
            y: Targets, as returned by :meth:`sample_batch`.

        Returns:
            A scalar float32 tensor with autograd attached (nats per example, or per token).
        """
        ...

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """Evaluate ``model`` on the task's fixed held-out split, without autograd.

        Args:
            model: The task's model, already on ``device``.
            device: Where to run the evaluation.

        Returns:
            The held-out :class:`Metrics`; the same model gives the same numbers every time.
        """
        ...
