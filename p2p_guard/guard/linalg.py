"""Vector geometry shared by the rules: norms, distances, cosines and scalar medians, in float64.

Every quantity that decides something (a clipping factor, a neighbour, a verdict) is computed here in float64,
so that it does not depend on the summation order of a float32 kernel and so that an ``(n, d)`` stack is never
copied whole to float64. Ties between equal distances are broken by row index, so every peer picks the same
neighbours.

**Column blocks.** A row of a real model is 10⁷ floats or more (40 MB), far beyond the CPU caches, so every
function here walks the rows in blocks of :data:`BLOCK` columns: each block is read once from memory and worked
on in cache, and the float64 temporaries are one block, not one row. A norm over a whole row is the norm of
its blocks' norms, ‖x‖₂ = ‖(‖x_b‖₂)_b‖₂, and a dot product the sum of its blocks' dot products, each block's
value taken in float64. For ``d <= BLOCK`` (one block) this is exactly the single float64 reduction over the
row (‖(a)‖₂ = |a| in IEEE arithmetic), so small inputs give the same bits as a plain float64 reduction; for
larger d the last bits of a float64 figure may differ from a one-pass reduction (relative 1e-13 or less), which
no threshold of the guard can see. The cost is linear in d: n·d for norms and cosines, n(n − 1)/2 · d for the
pairwise distances (the only quadratic stage, in the k + 1 rows a round samples, never in the swarm's size).

:data:`BLOCK` is a multiple of 512 columns, so a column reduction over a block (a mean, a trimmed mean) uses
the same vector lanes as over the whole row and gives the same float32 bits (checked in
``tests/unit/test_guard_cost.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

__all__ = [
    "BLOCK",
    "column_blocks",
    "combine_norms",
    "cosines_to",
    "pairwise_distances",
    "row_norms",
    "scalar_median",
    "stable_argsort",
    "support_cosines",
]

BLOCK = 65536
"""Columns per block (256 KiB of float32 per row): a multiple of 512, so column reductions keep their bits."""

_PAIR_ELEMENTS = 1 << 22
"""Float32 elements of row differences held at once by :func:`pairwise_distances` (16 MiB)."""


def column_blocks(d: int, block: int | None = None) -> Iterator[slice]:
    """The column slices ``[0, block), [block, 2·block), …`` covering ``range(d)`` (one empty slice for d = 0).

    Args:
        d: number of columns, ``>= 0``.
        block: columns per slice, ``>= 1`` (None: :data:`BLOCK`, read at each call).

    Raises:
        ValueError: when ``block < 1`` or ``d < 0``.
    """
    if block is None:
        block = BLOCK
    if block < 1 or d < 0:
        raise ValueError(f"column_blocks needs d >= 0 and block >= 1; got d={d}, block={block}")
    if d == 0:
        yield slice(0, 0)
        return
    for start in range(0, d, block):
        yield slice(start, min(start + block, d))


def combine_norms(partials: list[torch.Tensor]) -> torch.Tensor:
    """The norms of whole rows from the norms of their column blocks: ‖(p_1, …, p_B)‖₂, elementwise.

    Args:
        partials: B float64 tensors of one shape ``(m,)``, block b's norms of m rows, ``B >= 1``.

    Returns:
        ``(m,)`` float64 tensor; exactly ``partials[0]`` when B = 1.
    """
    return torch.linalg.vector_norm(torch.stack(partials), dim=0)


def row_norms(updates: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of each row, in float64, block by block.

    Args:
        updates: ``(n, d)`` float tensor; not mutated.

    Returns:
        ``(n,)`` float64 tensor, ``‖x_i‖₂``.
    """
    if len(updates) == 0:
        return torch.zeros(0, dtype=torch.float64)
    partials = [
        torch.linalg.vector_norm(updates[:, cols], dim=1, dtype=torch.float64)
        for cols in column_blocks(updates.shape[1])
    ]
    return combine_norms(partials)


def pairwise_distances(updates: torch.Tensor) -> torch.Tensor:
    """Euclidean distance between every pair of rows, computed from the differences (no Gram-matrix trick).

    D[i, j] = ‖x_i − x_j‖₂, each difference taken in the rows' dtype and its norm in float64, block by block.
    The pairs are worked on in groups whose differences hold at most 16 MiB, so memory stays bounded at any n.

    Args:
        updates: ``(n, d)`` float tensor; not mutated.

    Returns:
        ``(n, n)`` symmetric float64 tensor with a zero diagonal, ``D[i, j] = ‖x_i − x_j‖₂``.
    """
    n, d = len(updates), int(updates.shape[1]) if updates.dim() == 2 else 0
    dist = torch.zeros((n, n), dtype=torch.float64)
    if n < 2:
        return dist
    first, second = torch.triu_indices(n, n, offset=1)
    partials = []
    for cols in column_blocks(d):
        block = updates[:, cols]
        group = max(1, _PAIR_ELEMENTS // max(1, cols.stop - cols.start))
        partials.append(
            torch.cat(
                [
                    torch.linalg.vector_norm(
                        block[first[p : p + group]] - block[second[p : p + group]], dim=1, dtype=torch.float64
                    )
                    for p in range(0, len(first), group)
                ]
            )
        )
    values = combine_norms(partials)
    dist[first, second] = values
    dist[second, first] = values
    return dist


def cosines_to(updates: torch.Tensor, reference: torch.Tensor, norms: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine similarity of each row with a reference vector; 0 where either vector is zero.

    cos_i = ⟨x_i, r⟩ / (‖x_i‖₂ ‖r‖₂), the dot product summed in float64 block by block.

    Args:
        updates: ``(n, d)`` float tensor; not mutated.
        reference: ``(d,)`` float tensor; not mutated.
        norms: ``(n,)`` float64 row norms already computed with :func:`row_norms` (None: computed here).

    Returns:
        ``(n,)`` float64 tensor in ``[-1, 1]``.
    """
    n = len(updates)
    out = torch.zeros(n, dtype=torch.float64)
    if n == 0:
        return out
    row_norm = row_norms(updates) if norms is None else norms
    dots = torch.zeros(n, dtype=torch.float64)
    ref_partials = []
    for cols in column_blocks(updates.shape[1]):
        ref = reference[cols].to(torch.float64)
        ref_partials.append(torch.linalg.vector_norm(ref).reshape(1))
        block = updates[:, cols].to(torch.float64)
        dots += torch.stack([torch.dot(row, ref) for row in block])
    ref_norm = combine_norms(ref_partials)[0]
    for i in range(n):
        denom = row_norm[i] * ref_norm
        if denom > 0:
            out[i] = torch.clamp(dots[i] / denom, -1.0, 1.0)
    return out


def support_cosines(updates: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine of each row with the reference restricted to the row's own support, and each row's support size.

    c_i = ⟨x_i, r ⊙ 1[x_i ≠ 0]⟩ / (‖x_i‖₂ ‖r ⊙ 1[x_i ≠ 0]‖₂) = ⟨x_i, r⟩ / (‖x_i‖₂ ‖r ⊙ 1[x_i ≠ 0]‖₂)

    (0 where either factor of the denominator is 0). For a dense row this is the plain cosine; for a sparse row
    (a decoded ``topk`` payload) it measures whether the values the sender chose to send agree with the
    reference on those coordinates, whatever the coordinates are, so that a support that differs from the
    reference's does not drag it to 0. Dot products and norms in float64, block by block (module docstring).

    Args:
        updates: ``(n, d)`` float tensor; not mutated.
        reference: ``(d,)`` float tensor; not mutated.

    Returns:
        ``(c, nnz)``: ``(n,)`` float64 cosines in ``[-1, 1]`` and ``(n,)`` int64 counts of non-zero entries.
    """
    n = len(updates)
    dots = torch.zeros(n, dtype=torch.float64)
    nnz = torch.zeros(n, dtype=torch.int64)
    row_partials, ref_partials = [], []
    for cols in column_blocks(updates.shape[1] if updates.dim() == 2 else 0):
        block = updates[:, cols].to(torch.float64)
        ref = reference[cols].to(torch.float64)
        support = block != 0
        nnz += support.sum(dim=1)
        dots += block @ ref
        row_partials.append(torch.linalg.vector_norm(block, dim=1))
        ref_partials.append(torch.linalg.vector_norm(torch.where(support, ref, 0.0), dim=1))
    out = torch.zeros(n, dtype=torch.float64)
    if n == 0:
        return out, nnz
    denom = combine_norms(row_partials) * combine_norms(ref_partials)
    positive = denom > 0
    out[positive] = torch.clamp(dots[positive] / denom[positive], -1.0, 1.0)
    return out, nnz


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
