"""Coordinate-wise median (Yin et al. 2018); also the guard's fallback when a rule lacks rows."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from p2p_guard.guard.base import AggregationContext, check_stack

__all__ = ["CoordinateMedian", "coordinate_median"]


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Median of each coordinate: the middle value, or the mean of the two middle values when n is even.

    Args:
        updates: ``(n, d)`` float tensor, ``n >= 1``; not mutated.

    Returns:
        ``(d,)`` tensor, dtype of ``updates``.
    """
    n = len(updates)
    ordered = torch.sort(updates, dim=0).values
    if n % 2:
        return ordered[n // 2]
    # Halve before adding: (a + b) / 2 overflows to inf for two values near the float32 maximum.
    return ordered[n // 2 - 1] / 2 + ordered[n // 2] / 2


@dataclass(frozen=True, kw_only=True)
class CoordinateMedian:
    """Coordinate-wise median; breakdown point 1/2, biased under heterogeneity, weak against ALIE.

    [Median(x_1, …, x_n)]_k = median([x_1]_k, …, [x_n]_k)

    where
        - x_1, …, x_n are the rows, n ≥ 1;
        - [·]_k is the k-th coordinate;
        - the median of an even number of scalars is the mean of the two middle ones (``torch.median``
          would return the lower one).

    Example:
        >>> CoordinateMedian()(torch.tensor([[1.0, 9.0], [2.0, 0.0], [7.0, 4.0], [3.0, 5.0]]), ctx)
        tensor([2.5000, 4.5000])

    References:
        Dong Yin, Yudong Chen, Kannan Ramchandran, Peter Bartlett. Byzantine-Robust Distributed Learning:
        Towards Optimal Statistical Rates. ICML 2018. arXiv:1803.01498.
    """

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Take the median of each coordinate.

        Args:
            updates: ``(n, d)`` float tensor, not mutated.
            ctx: the round's context (unused).

        Returns:
            ``(d,)`` tensor, dtype of ``updates``.

        Raises:
            NotEnoughUpdates: when ``n == 0``.
        """
        check_stack(updates, 0, needed_rows=1, needed="n >= 1")
        return coordinate_median(updates)
