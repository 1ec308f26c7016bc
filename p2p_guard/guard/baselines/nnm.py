"""Nearest-neighbour mixing (Allouah et al. 2023) and the NNM + trimmed mean rule built on it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from p2p_guard.guard.base import AggregationContext, check_int, check_stack, resolve_f
from p2p_guard.guard.baselines.trimmed_mean import coordinate_trimmed_mean, trimmed_mean_block
from p2p_guard.guard.linalg import column_blocks, pairwise_distances, stable_argsort

__all__ = ["NNMTrimmedMean", "mix_block", "mixed_trimmed_mean", "nearest_neighbour_mixing", "nearest_neighbours"]


def nearest_neighbour_mixing(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Replace each row by the mean of its n − f nearest rows (itself included).

    NNM(x)_i = 1/(n − f) Σ_{j ∈ N_i} x_j

    where N_i is the set of the n − f rows nearest to x_i in Euclidean distance, x_i included; ties are
    broken by row index, and each mean sums its rows in row order (so every peer gets the same bits). The
    means are taken one column block at a time (:data:`~p2p_guard.guard.linalg.BLOCK`), so no ``(n − f, d)``
    copy of the neighbours is made; the cost is n(n − 1)/2 · d for the distances plus n(n − f) · d for the
    means, linear in d.

    Args:
        updates: ``(n, d)`` float tensor with ``n > f``; not mutated.
        f: number of Byzantine rows tolerated, ``>= 0``.

    Returns:
        ``(n, d)`` tensor, dtype of ``updates``.

    References:
        Youssef Allouah, Sadegh Farhadkhani, Rachid Guerraoui, Nirupam Gupta, Rafaël Pinot, John Stephan.
        Fixing by Mixing: A Recipe for Optimal Byzantine ML under Heterogeneity. AISTATS 2023.
        arXiv:2302.01772.
    """
    n = len(updates)
    if f == 0:
        return updates.mean(dim=0, keepdim=True).expand(n, -1).clone()
    neighbours = nearest_neighbours(updates, f)
    mixed = torch.empty_like(updates)
    for cols in column_blocks(updates.shape[1]):
        mixed[:, cols] = mix_block(updates[:, cols], neighbours)
    return mixed


def nearest_neighbours(updates: torch.Tensor, f: int) -> list[torch.Tensor]:
    """The n − f rows nearest to each row (itself included), in row order; ties broken by row index.

    Args:
        updates: ``(n, d)`` float tensor with ``n > f``; not mutated.
        f: number of Byzantine rows tolerated, ``>= 0``.

    Returns:
        n ascending int64 index tensors of length n − f, N_i for each row i.
    """
    n = len(updates)
    dist = pairwise_distances(updates)
    return [torch.sort(stable_argsort(dist[i])[: n - f]).values for i in range(n)]


def mix_block(block: torch.Tensor, neighbours: list[torch.Tensor]) -> torch.Tensor:
    """NNM on one block of columns: row i becomes the mean of rows N_i (summed in row order).

    Args:
        block: ``(n, b)`` float tensor, a column block of the rows (a view is fine); not mutated.
        neighbours: N_i per row, as :func:`nearest_neighbours` returns them.

    Returns:
        ``(n, b)`` new tensor, dtype of ``block``; the same bits as the columns ``cols`` of
        ``updates[N_i].mean(dim=0)`` whenever the block starts at a multiple of 512 columns.
    """
    return torch.stack([block[rows].mean(dim=0) for rows in neighbours])


def mixed_trimmed_mean(updates: torch.Tensor, f: int) -> torch.Tensor:
    """TM_f(NNM_f(x_1, …, x_n)), one column block at a time: the mixed rows are never held whole.

    Equal, bit for bit, to ``coordinate_trimmed_mean(nearest_neighbour_mixing(updates, f), f)``; per block it
    holds the ``(n, b)`` mixed block and its sort instead of the ``(n, d)`` mixed rows and an ``(n, d)`` int64
    sort index (2.6 GB at n = 33, d = 10⁷).

    Args:
        updates: ``(n, d)`` float tensor with ``n > 2f``; not mutated.
        f: number of Byzantine rows tolerated, ``>= 0``.

    Returns:
        ``(d,)`` tensor, dtype of ``updates``.
    """
    if f == 0:
        return coordinate_trimmed_mean(nearest_neighbour_mixing(updates, 0), 0)
    neighbours = nearest_neighbours(updates, f)
    out = torch.empty(updates.shape[1], dtype=updates.dtype, device=updates.device)
    for cols in column_blocks(updates.shape[1]):
        out[cols] = trimmed_mean_block(mix_block(updates[:, cols], neighbours), f)
    return out


@dataclass(frozen=True, kw_only=True)
class NNMTrimmedMean:
    """Nearest-neighbour mixing, then the coordinate-wise trimmed mean; tolerates f < n/2 under heterogeneity.

    NNM-TM_f(x_1, …, x_n) = TM_f(NNM_f(x_1, …, x_n))

    where
        - x_1, …, x_n are the rows, with n > 2f;
        - NNM_f replaces each row by the mean of its n − f nearest rows (itself included);
        - TM_f is the coordinate-wise trimmed mean dropping f values at each end.

    Args:
        f: Byzantine rows tolerated; ``None`` takes ``ctx.f``, else ``default_f(n)``.

    Raises:
        ValueError: when ``f`` is not an integer ``>= 0``.

    Example:
        >>> x = torch.tensor([[0.0], [1.0], [2.0], [100.0]])
        >>> NNMTrimmedMean(f=1)(x, ctx)   # NNM rows 1, 1, 1, 34.33; trimmed mean of those
        tensor([1.])

    References:
        Youssef Allouah, Sadegh Farhadkhani, Rachid Guerraoui, Nirupam Gupta, Rafaël Pinot, John Stephan.
        Fixing by Mixing: A Recipe for Optimal Byzantine ML under Heterogeneity. AISTATS 2023.
        arXiv:2302.01772.
    """

    f: int | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.f is not None:
            check_int("f", self.f, minimum=0)

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Mix each row with its nearest neighbours, then take the trimmed mean.

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
        return mixed_trimmed_mean(updates, f)
