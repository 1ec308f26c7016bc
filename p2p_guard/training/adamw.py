"""The inner AdamW: ``torch.optim.AdamW``'s own update, without ``torch.optim.Optimizer`` (and so without dynamo).

``torch.optim.Optimizer`` imports ``torch._dynamo`` (and with it sympy, torch.fx, torch._inductor, ...) the
first time a parameter group is added and on every ``step()``: ``add_param_group`` is wrapped in
``torch._disable_dynamo`` and ``step`` in ``_use_grad_for_differentiable``, both of which import it, whatever
the ``foreach`` / ``fused`` settings. In a peer process that import costs about 70 MiB of private memory, for
a model of a few thousand parameters, and nothing else a peer runs needs it.

:class:`InnerAdamW` keeps the optimiser state itself (the same per-parameter tensors ``step`` (0-d float32),
``exp_avg`` and ``exp_avg_sq`` as ``torch.optim.AdamW``) and calls PyTorch's public functional update
``torch.optim.adamw.adamw``, the very function ``torch.optim.AdamW.step`` calls, with the same arguments
(``foreach=None``, so PyTorch picks the same single-tensor or multi-tensor kernel as ``AdamW`` does by
default). The arithmetic is therefore PyTorch's own, and the result is bit-identical to ``torch.optim.AdamW``
(``tests/unit/test_training.py`` checks it step by step, with weight decay and a changing learning rate).

Only what the inner phase uses is there: one parameter group, ``amsgrad=False``, ``maximize=False``, no
closure, dense gradients.

References:
    Loshchilov, Hutter, "Decoupled Weight Decay Regularization" (AdamW), ICLR 2019, arXiv:1711.05101.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adamw import adamw

__all__ = ["InnerAdamW"]


class InnerAdamW:
    """AdamW over one group of parameters, bit-identical to ``torch.optim.AdamW`` with the same settings.

    Args:
        params: The parameters to update (floating-point tensors with ``requires_grad``), in a fixed order.
        lr: Learning rate, finite and ``>= 0``; may be changed between steps through ``param_groups[0]["lr"]``.
        betas: ``(beta1, beta2)``, each in ``[0, 1)``.
        eps: Term added to the denominator, ``>= 0``.
        weight_decay: Decoupled weight-decay coefficient, ``>= 0``.

    Attributes:
        param_groups: ``[group]``, one dict with ``params``, ``lr``, ``betas``, ``eps``, ``weight_decay`` (as in
            ``torch.optim``; the inner phase also keeps its warm-up position there).
        state: ``param -> {"step": 0-d float32 tensor, "exp_avg": like param, "exp_avg_sq": like param}``,
            filled at a parameter's first step with a gradient.

    Raises:
        ValueError: On an out-of-range hyper-parameter, or no parameters.
    """

    def __init__(self, params: Iterable[Tensor], *, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        """Check the hyper-parameters as ``torch.optim.AdamW`` does; no state until the first step."""
        if not (math.isfinite(lr) and lr >= 0.0):
            raise ValueError(f"Invalid learning rate: {lr}")
        if not eps >= 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        param_list = list(params)
        if not param_list:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups: list[dict[str, Any]] = [
            {"params": param_list, "lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        ]
        self.state: dict[Tensor, dict[str, Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (``set_to_none``) or zero every parameter's gradient, as ``torch.optim.Optimizer.zero_grad``."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step on every parameter that has a gradient (the others, and their state, are left alone).

        Raises:
            RuntimeError: On a sparse gradient.
        """
        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            exp_avgs: list[Tensor] = []
            exp_avg_sqs: list[Tensor] = []
            steps: list[Tensor] = []
            has_complex = False
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                has_complex |= torch.is_complex(p)
                state = self.state.get(p)
                if state is None:
                    # as torch.optim.Adam._init_group (capturable and fused off): step on the CPU
                    scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
                    state = {
                        "step": torch.tensor(0.0, dtype=scalar),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
                    self.state[p] = state
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            beta1, beta2 = group["betas"]
            adamw(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=None, capturable=False,
                  differentiable=False, fused=None, grad_scale=None, found_inf=None, has_complex=has_complex,
                  amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"],
                  eps=group["eps"], maximize=False)
