""""Own update only": the peer applies its own pseudo-gradient and ignores every other row (a lower bar)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from p2p_guard.guard.base import AggregationContext, NotEnoughUpdates, check_stack

__all__ = ["OwnUpdate"]


@dataclass(frozen=True, kw_only=True)
class OwnUpdate:
    """Return the receiver's own row: local training with an outer optimizer, no collaboration.

    Own(x_1, …, x_n) = x_i,   i = ``ctx.own_index``

    It is the bar every robust rule must clear at any Byzantine fraction: a peer can always ignore the swarm.

    Raises:
        NotEnoughUpdates: when ``ctx.own_index`` is ``None`` (the receiver has no row of its own), so the
            :class:`~p2p_guard.guard.guard.Guard` wrapper falls back to the median.
    """

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Return a copy of row ``ctx.own_index``.

        Args:
            updates: ``(n, d)`` float tensor, not mutated.
            ctx: the round's context; ``ctx.own_index`` must be set.

        Returns:
            ``(d,)`` tensor, dtype of ``updates``.

        Raises:
            NotEnoughUpdates: when ``n == 0`` or ``ctx.own_index`` is ``None``.
        """
        check_stack(updates, 0, needed_rows=1, needed="n >= 1")
        if ctx.own_index is None:
            raise NotEnoughUpdates(len(updates), 0, "the receiver's own row")
        return updates[ctx.own_index].clone()
