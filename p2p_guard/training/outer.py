"""DiLoCo's outer step: Nesterov SGD on the aggregated pseudo-gradient, over flat vectors.

With pseudo-gradient (aggregate) ``g_r`` (Δ = θ_start − θ_after_H, so it points along a gradient), momentum
``μ`` and learning rate ``η``, as ``torch.optim.SGD(nesterov=True, dampening=0, weight_decay=0)``::

    b_0 = g_0,            b_r = μ · b_{r−1} + g_r     (r ≥ 1)
    θ_{r+1} = θ_r − η · (g_r + μ · b_r)

The arithmetic is the same sequence of float32 tensor operations as PyTorch's single-tensor SGD, so the result
is bit-identical to ``torch.optim.SGD`` and, on one machine type, between peers: honest peers that apply the
same aggregate to the same θ and momentum buffer get the same θ_{r+1} bit for bit (which their published state
hashes check). Element-wise CPU kernels are deterministic; across CPU architectures a differently vectorised
kernel could in principle round differently, which the state-hash vote would expose.

Which (η, μ) a peer uses depends on its codec (:func:`outer_defaults`): DiLoCo's (0.7, 0.9) for ``fp32``,
``fp16``, ``int8`` and ``int4``; for ``topk`` μ = 0 and η = :data:`TOPK_OUTER_LR`, as in SparseLoCo, whose
sender-side error feedback with decay β (``training.error_feedback``) is the momentum: with μ = 0 this step is
plain SGD, θ_{r+1} = θ_r − η · g_r, and no momentum buffer is kept. Keeping μ = 0.9 on top of the decayed
accumulator would apply two momenta to the same pseudo-gradients.

References:
    Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105,
    2023: outer SGD with Nesterov momentum, lr 0.7, momentum 0.9.
    Sarfi, Thérien, Lidin, Belilovsky, "Communication Efficient LLM Pre-training with SparseLoCo",
    arXiv:2508.15706, 2025: no outer momentum; the error-feedback accumulator e ← β·e + Δ replaces it.
    Sutskever, Martens, Dahl, Hinton, "On the importance of initialization and momentum in deep learning",
    ICML 2013 (Nesterov momentum in this form).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import Tensor

from p2p_guard.protocol.codecs import codec_spec

__all__ = ["DILOCO_OUTER_LR", "DILOCO_OUTER_MOMENTUM", "TOPK_DENSE_OUTER_LR", "TOPK_OUTER_LR", "TOPK_OUTER_MOMENTUM",
           "OuterNesterov", "dense_outer_lr", "outer_defaults"]

logger = logging.getLogger(__name__)

DILOCO_OUTER_LR = 0.7
"""Outer learning rate (Douillard et al., arXiv:2311.08105, 2023)."""

DILOCO_OUTER_MOMENTUM = 0.9
"""Outer Nesterov momentum (Douillard et al., arXiv:2311.08105, 2023)."""

TOPK_OUTER_LR = 3.0
"""Outer learning rate α of the ``topk`` codecs (SparseLoCo's θ ← θ − α · mean(Δ̂)), chosen with ``p2p-guard bench
wire --topk-ef-decay β --topk-outer-lr α --topk-outer-momentum 0`` over β ∈ {0.9, 0.95, 1}, α ∈ {0.7, 1, 2, 3},
topk 1/2/5 %, seeds 0 and 1 (digits, 8 workers, 20 rounds): accuracy rose with α up to 3 at every density, and
α = 3 with β = 0.95 had the best mean over the seeds at 1 and 2 % (quality −1.4 and 0.0 points vs fp32, guard
worst case −2.6 and −1.5; α = 0.7: −6.9 and −3.3, guard −8.3 and −4.4 on seed 0). Without momentum the step is
θ ← θ − α·g, where DiLoCo's Nesterov (0.7, 0.9) moves up to 0.7 / (1 − 0.9) = 7 times a steady g. On
Shakespeare (``--task shakespeare --codecs fp32 topk --rounds 18 --eval-every 6 --guard-attacks none``, 8 workers,
seed 0; perplexity at rounds 6 / 12 / 18, fp32 9.81 / 7.56 / 6.62) α = 3 was also the best of those tried: α = 2
13.98 / 9.38, α = 3 7.17 at round 20 (+9.4 % against fp32's 6.55), α = 4 13.25 / 9.43, α = 6 13.95 / 9.51 / 7.78;
β = 1 at α = 3 12.53 / 9.05 (docs/protocol.md §2)."""

TOPK_DENSE_OUTER_LR = 1.0
"""Outer learning rate of the dense set of a ``topk:…,dense=head`` codec (its 1-D tensors and output layer, sent
as float16): those coordinates arrive from every sender, undiluted by the top-k, so they take the plain mean
(θ ← θ − 1 · mean) where the top-k coordinates take α = :data:`TOPK_OUTER_LR`. Measured with ``python
docs/scripts/topk_dense.py --dense-lr L`` (Shakespeare, 8 workers, 20 rounds, seed 0; perplexity after round 20,
fp32 6.5500, plain topk 2 % 7.1772): lr 1 6.7098 (+2.4 %), α = 3 7.7497 (+18.3 %, worse than plain topk), DiLoCo's
Nesterov (0.7, 0.9) on the dense coordinates 6.9411 (+6.0 %). The set (``--set``, lr 1): the output layer alone
7.0037, the 1-D tensors alone 6.8251, both (the codec) 6.7098."""

TOPK_OUTER_MOMENTUM = 0.0
"""No outer momentum with ``topk``: the error feedback's decayed accumulator replaces it (SparseLoCo, Sarfi et
al., arXiv:2508.15706, 2025)."""


def outer_defaults(codec: str) -> tuple[float, float]:
    """The outer step's (lr η, momentum μ) for a codec when the configuration names none.

    ``topk`` (any density): (:data:`TOPK_OUTER_LR`, 0), SparseLoCo's plain step after a decayed error feedback;
    every other codec: DiLoCo's (0.7, 0.9).

    Raises:
        ValueError: Unknown or malformed codec string.
    """
    if codec_spec(codec).name == "topk":
        return TOPK_OUTER_LR, TOPK_OUTER_MOMENTUM
    return DILOCO_OUTER_LR, DILOCO_OUTER_MOMENTUM


def dense_outer_lr(codec: str) -> float | None:
    """The outer lr of a codec's dense set: :data:`TOPK_DENSE_OUTER_LR` for ``topk:…,dense=head``, else None.

    Raises:
        ValueError: Unknown or malformed codec string.
    """
    return TOPK_DENSE_OUTER_LR if codec_spec(codec).dense else None


class OuterNesterov:
    """Nesterov SGD on flat float32 vectors, matching ``torch.optim.SGD(nesterov=True)`` bit for bit.

    Args:
        lr: Outer learning rate η, finite and ``> 0``.
        momentum: Momentum coefficient μ, in ``[0, 1)``; with 0 this is plain SGD.
        dense: Optional ``(mask, η_dense)``: the coordinates where the ``(d,)`` bool ``mask`` is True step with
            η_dense instead of η (a ``topk:…,dense=head`` codec's dense set, :func:`dense_outer_lr`).

    Attributes:
        lr: η.
        momentum: μ (the coefficient; the buffer is :attr:`momentum_buffer`).
        momentum_buffer: ``(d,)`` float32 CPU tensor b_r after the last step, or None before the first.

    Raises:
        ValueError: On an out-of-range ``lr`` or ``momentum``.

    References:
        Douillard et al., arXiv:2311.08105, 2023.
    """

    def __init__(self, lr: float = DILOCO_OUTER_LR, momentum: float = DILOCO_OUTER_MOMENTUM,
                 dense: tuple[Tensor, float] | None = None) -> None:
        """Check and store the hyper-parameters; the buffer starts empty."""
        if dense is not None:
            mask, dense_lr = dense
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.dim() != 1:
                raise ValueError("dense mask must be a (d,) bool tensor")
            OuterNesterov(lr=dense_lr)  # the same range check as lr
        self.dense = dense
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0.0:
            raise ValueError(f"lr={lr!r} must be a finite number > 0")
        if (
            isinstance(momentum, bool)
            or not isinstance(momentum, (int, float))
            or not math.isfinite(momentum)
            or not 0.0 <= momentum < 1.0
        ):
            raise ValueError(f"momentum={momentum!r} must be a number in [0, 1)")
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.momentum_buffer: Tensor | None = None

    def __repr__(self) -> str:
        """Return the hyper-parameters and whether the buffer is set."""
        state = "empty" if self.momentum_buffer is None else f"d={self.momentum_buffer.numel()}"
        return f"OuterNesterov(lr={self.lr}, momentum={self.momentum}, buffer={state})"

    def step(self, theta: Tensor, aggregate: Tensor) -> Tensor:
        """Apply one outer step.

        Args:
            theta: ``(d,)`` float32 CPU, θ_r (not modified).
            aggregate: ``(d,)`` float32 CPU, the robust aggregate of the pseudo-gradients (not modified).

        Returns:
            ``(d,)`` float32 CPU, θ_{r+1} (a new tensor). The momentum buffer is updated.

        Raises:
            ValueError: If the shapes, dtypes or devices are wrong, ``aggregate`` has a non-finite value, or
                ``d`` differs from the buffer's.
        """
        _check_vector("theta", theta)
        _check_vector("aggregate", aggregate)
        if theta.shape != aggregate.shape:
            raise ValueError(
                f"theta {tuple(theta.shape)} and aggregate {tuple(aggregate.shape)} differ in shape"
            )
        if not bool(torch.isfinite(aggregate).all()):
            raise ValueError("aggregate has a non-finite value")
        grad = aggregate
        if self.momentum != 0.0:
            buf = self.momentum_buffer
            if buf is None:
                buf = torch.clone(grad).detach()
            else:
                if buf.shape != grad.shape:
                    raise ValueError(
                        f"aggregate {tuple(grad.shape)} does not match the buffer {tuple(buf.shape)}"
                    )
                buf = buf.mul(self.momentum).add_(grad)
            self.momentum_buffer = buf
            grad = grad.add(buf, alpha=self.momentum)
        if self.dense is None:
            return theta.detach().clone().add_(grad, alpha=-self.lr)
        mask, dense_lr = self.dense
        if mask.shape != grad.shape:
            raise ValueError(f"aggregate {tuple(grad.shape)} does not match the dense mask {tuple(mask.shape)}")
        step = grad * self.lr
        step[mask] = grad[mask] * dense_lr
        return theta.detach().clone().sub_(step)

    def state_dict(self) -> dict[str, Any]:
        """The optimiser state, to ship to a late joiner or checkpoint.

        Returns:
            ``{"lr": float, "momentum": float, "momentum_buffer": Tensor (d,) float32 | None}``; the
            buffer is a copy.
        """
        buf = self.momentum_buffer
        return {
            "lr": self.lr,
            "momentum": self.momentum,
            "momentum_buffer": None if buf is None else buf.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the buffer is copied).

        Args:
            state: As returned by :meth:`state_dict`.

        Raises:
            ValueError: If a key is missing, a hyper-parameter is out of range, or the buffer is not a finite
                1-D float32 CPU tensor.
        """
        missing = {"lr", "momentum", "momentum_buffer"} - set(state)
        if missing:
            raise ValueError(f"state_dict lacks {sorted(missing)}")
        fresh = OuterNesterov(lr=state["lr"], momentum=state["momentum"])
        buf = state["momentum_buffer"]
        if buf is not None:
            if not isinstance(buf, Tensor):
                raise ValueError(f"momentum_buffer must be a Tensor or None, got {type(buf).__name__}")
            _check_vector("momentum_buffer", buf)
            if not bool(torch.isfinite(buf).all()):
                raise ValueError("momentum_buffer has a non-finite value")
            buf = buf.detach().clone()
        self.lr, self.momentum, self.momentum_buffer = fresh.lr, fresh.momentum, buf


def _check_vector(name: str, vector: Tensor) -> None:
    if not isinstance(vector, Tensor) or vector.dim() != 1 or vector.dtype != torch.float32:
        shape = tuple(vector.shape) if isinstance(vector, Tensor) else None
        dtype = vector.dtype if isinstance(vector, Tensor) else type(vector).__name__
        raise ValueError(f"{name} must be a (d,) float32 tensor, got {dtype} {shape}")
    if vector.device.type != "cpu":
        raise ValueError(f"{name} must be on CPU, got {vector.device}")
