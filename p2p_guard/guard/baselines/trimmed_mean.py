"""Coordinate-wise trimmed mean (Yin et al. 2018)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from p2p_guard.guard.base import AggregationContext, check_int, check_stack, resolve_f
from p2p_guard.guard.linalg import column_blocks

__all__ = ["TrimmedMean", "coordinate_trimmed_mean", "trimmed_mean_block"]


def coordinate_trimmed_mean(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Drop the f largest and f smallest values of each coordinate and average the rest.

    Args:
        updates: ``(n, d)`` float tensor with ``n > 2f``; not mutated.
        f: number of values trimmed at each end, ``>= 0``.

    Returns:
        ``(d,)`` tensor, dtype of ``updates``. Computed one column block at a time
        (:data:`~p2p_guard.guard.linalg.BLOCK`), so the sort's values and int64 indices are one block, not
        ``(n, d)``; the bits are those of the whole-tensor sort and mean (the block is a multiple of 512 columns).
    """
    if f == 0:
        return updates.mean(dim=0)
    out = torch.empty(updates.shape[1], dtype=updates.dtype, device=updates.device)
    for cols in column_blocks(updates.shape[1]):
        out[cols] = trimmed_mean_block(updates[:, cols], f)
    return out


def trimmed_mean_block(block: torch.Tensor, f: int) -> torch.Tensor:
    """The trimmed mean of one column block: sort each column, drop f values at each end, average the rest.

    Args:
        block: ``(n, b)`` float tensor with ``n > 2f``, ``f >= 1``; not mutated.
        f: number of values trimmed at each end.

    Returns:
        ``(b,)`` tensor, dtype of ``block``.
    """
    n = len(block)
    return torch.sort(block, dim=0).values[f : n - f].mean(dim=0)


@dataclass(frozen=True, kw_only=True)
class TrimmedMean:
    """Coordinate-wise trimmed mean; tolerates f < n/2, biased under heterogeneity, weak against ALIE.

    [TM_f(x_1, …, x_n)]_k = 1/(n − 2f) · Σ_{j=f+1}^{n−f} [x_{π_k(j)}]_k

    where
        - x_1, …, x_n are the rows, with n > 2f;
        - f is the number of Byzantine rows tolerated;
        - [·]_k is the k-th coordinate;
        - π_k sorts the k-th coordinates in non-decreasing order.

    Args:
        f: rows trimmed at each end of every coordinate; ``None`` takes ``ctx.f``, else ``default_f(n)``.

    Raises:
        ValueError: when ``f`` is not an integer ``>= 0``.

    Example:
        >>> TrimmedMean(f=1)(torch.tensor([[1.0, 9.0], [2.0, 0.0], [7.0, 4.0], [3.0, 5.0]]), ctx)
        tensor([2.5000, 4.5000])

    References:
        Dong Yin, Yudong Chen, Kannan Ramchandran, Peter Bartlett. Byzantine-Robust Distributed Learning:
        Towards Optimal Statistical Rates. ICML 2018. arXiv:1803.01498.
    """

    f: int | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.f is not None:
            check_int("f", self.f, minimum=0)

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Trim f values at each end of every coordinate and average the rest.

        Args:
            updates: ``(n, d)`` float tensor, not mutated.
            ctx: the round's context (``ctx.f`` when ``f`` is ``None``).

        Returns:
            ``(d,)`` tensor, dtype of ``updates``.

        Raises:
            NotEnoughUpdates: unless ``n > 2f``.
        """
        f = resolve_f(self.f, ctx, len(updates))
        check_stack(updates, f, needed_rows=2 * f + 1, needed="n > 2f")
        return coordinate_trimmed_mean(updates, f)
