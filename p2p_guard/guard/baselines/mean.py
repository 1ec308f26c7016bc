"""The undefended mean: the rule plain DiLoCo applies."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from p2p_guard.guard.base import AggregationContext, check_stack

__all__ = ["Mean"]


@dataclass(frozen=True, kw_only=True)
class Mean:
    """Average of the rows; breakdown point 0 (one row moves it anywhere).

    Mean(x_1, …, x_n) = (1/n) Σ_{i=1}^{n} x_i

    where
        - x_1, …, x_n are the rows (pseudo-gradients), n ≥ 1.

    Example:
        >>> Mean()(torch.tensor([[1.0, 2.0], [3.0, 6.0]]), ctx)
        tensor([2., 4.])
    """

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Average the rows.

        Args:
            updates: ``(n, d)`` float tensor, not mutated.
            ctx: the round's context (unused).

        Returns:
            ``(d,)`` tensor, dtype of ``updates``.

        Raises:
            NotEnoughUpdates: when ``n == 0``.
        """
        check_stack(updates, 0, needed_rows=1, needed="n >= 1")
        return updates.mean(dim=0)
