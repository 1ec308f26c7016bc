"""DiLoCo's inner phase: H AdamW steps on the peer's own shard, starting from the round's θ_r.

The caller owns the inner optimiser and keeps it across rounds (DiLoCo keeps each worker's AdamW moments; only
the parameters are reset to θ_{r+1} at the start of a round, with :func:`p2p_guard.training.load_flat`).

Inner optimiser: AdamW with each task's :class:`~p2p_guard.tasks.HParams`: betas (0.9, 0.95) and weight
decay 0.1 as in DiLoCo; learning rate 3e-3 rather than DiLoCo's 4e-4, because the built-in models are tiny and
a round has only H = 20 (digits) or 50 (shakespeare) steps; optional global gradient-norm clipping and a
linear learning-rate warm-up counted over the optimiser's whole life (DiLoCo warms its inner optimiser up too).
The warm-up position is kept in the optimiser's param groups (``"inner_step"``, ``"initial_lr"``), so it
survives across rounds. The optimiser is :class:`~p2p_guard.training.adamw.InnerAdamW`, ``torch.optim.AdamW``'s
update bit for bit without ``torch.optim.Optimizer`` (which imports ``torch._dynamo``, about 70 MiB per peer).

References:
    Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105,
    2023: inner AdamW lr 4e-4, weight decay 0.1, betas (0.9, 0.95); H = 500.
    Loshchilov, Hutter, "Decoupled Weight Decay Regularization" (AdamW), ICLR 2019, arXiv:1711.05101.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from p2p_guard.tasks.base import Shard, Task
from p2p_guard.training.adamw import InnerAdamW

__all__ = [
    "DataTransform",
    "InnerOptimizer",
    "InnerPhaseStopped",
    "autocast_dtype",
    "inner_autocast",
    "make_inner_optimizer",
    "run_inner_steps",
]

logger = logging.getLogger(__name__)


class InnerPhaseStopped(Exception):
    """The inner phase was stopped at a step boundary because a stop was requested (Ctrl+C, SIGTERM).

    What it trained is no round's update: the caller drops it and commits nothing for the round.

    Attributes:
        steps_done: inner steps completed before the stop (0 to H − 1).
    """

    def __init__(self, steps_done: int) -> None:
        super().__init__(f"inner phase stopped after {steps_done} step(s)")
        self.steps_done = steps_done


@runtime_checkable
class DataTransform(Protocol):
    """A data attack (e.g. label flip): rewrites every inner batch before the loss sees it."""

    def transform(self, x: Tensor, y: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
        """Return the batch to train on.

        Args:
            x: Inputs as sampled by the task (CPU).
            y: Labels/targets as sampled by the task (CPU, int64).
            num_classes: The task's number of classes (vocabulary size for a language model).

        Returns:
            ``(x, y)`` of the same shapes and dtypes.
        """
        ...


@runtime_checkable
class InnerOptimizer(Protocol):
    """What :func:`run_inner_steps` needs of an optimiser: ``torch.optim.Optimizer``'s param groups, zero_grad, step.

    :class:`~p2p_guard.training.adamw.InnerAdamW` and any ``torch.optim.Optimizer`` qualify.
    """

    param_groups: list[dict[str, Any]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) the parameters' gradients."""
        ...

    def step(self) -> Any:
        """One update of the parameters from their gradients."""
        ...


def autocast_dtype(device: torch.device | str, mixed_precision: bool) -> torch.dtype | None:
    """The dtype the inner phase's forward pass autocasts to: bfloat16 on CUDA unless turned off, else None.

    bf16 keeps float32's exponent range, so no loss scaling is needed (unlike fp16); the parameters, their
    gradients and the AdamW state stay float32 (autocast casts only inside the ops it lists). On CPU nothing
    changes: the inner phase runs in float32 as before.

    Args:
        device: where the model lives (a ``torch.device`` or its name; only its type is read).
        mixed_precision: the peer's ``bf16_autocast`` setting.

    Returns:
        ``torch.bfloat16`` for a CUDA device with ``mixed_precision``; None (no autocast) otherwise.

    References:
        Micikevicius et al., "Mixed Precision Training", ICLR 2018, arXiv:1710.03740; bf16: Kalamkar et al.,
        "A Study of BFLOAT16 for Deep Learning Training", arXiv:1905.12322, 2019.
    """
    device_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    return torch.bfloat16 if device_type == "cuda" and mixed_precision else None


def inner_autocast(device: torch.device | str, mixed_precision: bool) -> contextlib.AbstractContextManager[Any]:
    """The context the forward pass and loss run in: ``torch.autocast("cuda", bfloat16)`` or a no-op.

    Args:
        device: where the model lives.
        mixed_precision: the peer's ``bf16_autocast`` setting.

    Returns:
        ``torch.autocast(device_type="cuda", dtype=torch.bfloat16)`` when :func:`autocast_dtype` says so,
        else ``contextlib.nullcontext()``.
    """
    dtype = autocast_dtype(device, mixed_precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def make_inner_optimizer(model: nn.Module, task: Task, *, lr: float | None = None) -> InnerAdamW:
    """The inner AdamW for ``model`` with the task's default hyper-parameters.

    Args:
        model: The model whose parameters it updates (already on its training device).
        task: Supplies ``default_hparams`` (lr, betas, weight decay).
        lr: Overrides the task's inner learning rate.

    Returns:
        A fresh :class:`~p2p_guard.training.adamw.InnerAdamW` (bit-identical to ``torch.optim.AdamW`` with
        the same settings).

    Raises:
        ValueError: If ``lr`` is not finite and positive.
    """
    hparams = task.default_hparams
    inner_lr = hparams.inner_lr if lr is None else lr
    if not math.isfinite(inner_lr) or inner_lr <= 0.0:
        raise ValueError(f"lr={inner_lr} must be finite and > 0")
    return InnerAdamW(
        model.parameters(),
        lr=inner_lr,
        betas=hparams.betas,
        weight_decay=hparams.weight_decay,
    )


def run_inner_steps(
    model: nn.Module,
    task: Task,
    shard: Shard,
    steps: int,
    optimizer: InnerOptimizer,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
    data_attack: DataTransform | None = None,
    *,
    batch_size: int | None = None,
    mixed_precision: bool = True,
    halt: threading.Event | None = None,
) -> float:
    """Run ``steps`` optimiser steps on batches from ``shard``; the model is updated in place.

    Each step: ``(x, y) = task.sample_batch(shard, B, generator)``; if ``data_attack`` is given,
    ``(x, y) = data_attack.transform(x, y, task.num_classes)``; the warm-up learning rate
    ``lr_k = initial_lr · (k + 1) / warmup_steps`` while the optimiser's step ``k < warmup_steps``; then the
    loss, backward, optional gradient clipping (``task.default_hparams.grad_clip_norm``) and
    ``optimizer.step()``.

    Args:
        model: The task's model, on ``device``; left in train mode.
        task: The task (sampling, loss, hyper-parameters).
        shard: This peer's shard.
        steps: H, the number of inner steps, ``>= 1``.
        optimizer: The inner optimiser over ``model``'s parameters (kept by the caller across rounds).
        generator: CPU generator for batch sampling; advanced by the sampling.
        device: Where the model lives; batches are moved there.
        data_attack: Optional batch rewrite (a simulated data-poisoning peer).
        batch_size: Overrides ``task.default_hparams.batch_size``.
        mixed_precision: on a CUDA ``device``, run the forward pass and the loss under bf16 autocast
            (:func:`inner_autocast`); the backward pass and the optimiser step stay outside it. No effect on CPU.
        halt: checked before every step (one ``Event.is_set``, no effect on the results): once set, the phase
            stops at the next step boundary. Set it from another thread (the event loop, on a stop request).

    A step whose loss is NaN or infinite is skipped: no backward, no optimiser step (its batch is still drawn and
    it counts among the ``steps``), with a warning naming the step and the value. Training on it would make every
    gradient, then every weight, NaN for good: the peer's own model, the trusted root of its guard.

    Returns:
        Mean training loss over the steps whose loss was finite (nats; on the attacked labels when
        ``data_attack`` is set); NaN if none was (the model did not move; logged as a warning).

    Raises:
        ValueError: If ``steps < 1`` or ``batch_size < 1``.
        InnerPhaseStopped: ``halt`` was set; the model and the optimiser hold the steps done so far.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")
    hparams = task.default_hparams
    size = hparams.batch_size if batch_size is None else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"batch_size={size!r} must be an integer >= 1")
    clip = hparams.grad_clip_norm
    warmup = hparams.warmup_steps
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
        group.setdefault("inner_step", 0)
    model.train()
    losses: list[float] = []
    for step in range(steps):
        if halt is not None and halt.is_set():
            raise InnerPhaseStopped(step)
        x, y = task.sample_batch(shard, size, generator)
        if data_attack is not None:
            x, y = data_attack.transform(x, y, task.num_classes)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        for group in optimizer.param_groups:
            if group["inner_step"] < warmup:
                group["lr"] = group["initial_lr"] * (group["inner_step"] + 1) / warmup
            group["inner_step"] += 1
        optimizer.zero_grad(set_to_none=True)
        with inner_autocast(device, mixed_precision):
            loss = task.loss(model, x, y)
        value = float(loss.detach())  # one device sync per step: a non-finite loss must not reach the weights
        if not math.isfinite(value):  # its backward makes every gradient, then every weight, NaN for good
            if len(losses) == step:  # the first of this phase; the others are counted at its end
                logger.warning("inner step %d of %d: task %r: loss returned %s; step skipped (no backward, no "
                               "optimizer step)", step + 1, steps, task.name, value)
            continue
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(value)
    if not losses:
        logger.warning("inner phase: every one of its %d steps had a non-finite loss; the model did not move "
                       "(a zero update)", steps)
        return math.nan
    if steps - len(losses) > 1:
        logger.warning("inner phase: %d of its %d steps skipped for a non-finite loss", steps - len(losses), steps)
    return math.fsum(losses) / len(losses)
