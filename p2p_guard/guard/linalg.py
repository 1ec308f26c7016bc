"""Vector geometry shared by the rules: norms, distances, cosines and scalar medians, in float64.

Every quantity that decides something (a clipping factor, a neighbour, a verdict) is computed here in float64,
one row at a time, so that it does not depend on the summation order of a float32 kernel and so that an
``(n, d)`` stack is never copied whole to float64 (at most one ``(d,)`` float64 temporary lives at a time).
Ties between equal distances are broken by row index, so every peer picks the same neighbours.
"""

from __future__ import annotations

import torch

__all__ = ["cosines_to", "pairwise_distances", "row_norms", "scalar_median", "stable_argsort"]


def row_norms(updates: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of each row.

    Args:
        updates: ``(n, d)`` float tensor.

    Returns:
        ``(n,)`` float64 tensor, ``‖x_i‖₂``.
    """
    if len(updates) == 0:
        return torch.zeros(0, dtype=torch.float64)
    return torch.stack([torch.linalg.vector_norm(row, dtype=torch.float64) for row in updates])


def pairwise_distances(updates: torch.Tensor) -> torch.Tensor:
    """Euclidean distance between every pair of rows, computed from the differences (no Gram-matrix trick).

    Args:
        updates: ``(n, d)`` float tensor.

    Returns:
        ``(n, n)`` symmetric float64 tensor with a zero diagonal, ``D[i, j] = ‖x_i − x_j‖₂``.
    """
    n = len(updates)
    dist = torch.zeros((n, n), dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            dist[i, j] = dist[j, i] = torch.linalg.vector_norm(updates[i] - updates[j], dtype=torch.float64)
    return dist


def cosines_to(updates: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of each row with a reference vector; 0 where either vector is zero.

    cos_i = ⟨x_i, r⟩ / (‖x_i‖₂ ‖r‖₂)

    Args:
        updates: ``(n, d)`` float tensor.
        reference: ``(d,)`` float tensor.

    Returns:
        ``(n,)`` float64 tensor in ``[-1, 1]``.
    """
    ref = reference.to(torch.float64)
    ref_norm = torch.linalg.vector_norm(ref)
    out = torch.zeros(len(updates), dtype=torch.float64)
    for i, row in enumerate(updates):
        row64 = row.to(torch.float64)
        denom = torch.linalg.vector_norm(row64) * ref_norm
        if denom > 0:
            out[i] = torch.clamp(torch.dot(row64, ref) / denom, -1.0, 1.0)
    return out


def scalar_median(values: torch.Tensor) -> float:
    """Median of a 1-D tensor: the middle value, or the mean of the two middle values for even length.

    (``torch.median`` returns the lower of the two middle values, which is not what the rules cite.)

    Args:
        values: ``(n,)`` tensor, ``n >= 1``.

    Returns:
        The median as a Python float.

    Raises:
        ValueError: when ``values`` is empty.
    """
    n = len(values)
    if n == 0:
        raise ValueError("median of an empty tensor")
    ordered = torch.sort(values).values
    if n % 2:
        return float(ordered[n // 2])
    return float((ordered[n // 2 - 1] + ordered[n // 2]) / 2)


def stable_argsort(values: torch.Tensor) -> torch.Tensor:
    """Indices that sort ``values`` ascending, equal values kept in index order (deterministic ties)."""
    return torch.sort(values, stable=True).indices
