"""Duplicate stage: rows that several senders sent (nearly) alike are rejected, all of them.

    D_ij     = ‖x_i − x_j‖₂,      m = median_i lowmed_{j≠i} D_ij     (:func:`typical_distance`)
    i ~ j    ⇔  D_ij ≤ ρ · m                       (ρ = ``ratio``; joined transitively into groups)
    reject i ⇔  i is in a group of two or more  and  i ≠ o

where x_i is sender i's raw row and o the receiver's own row (``ctx.own_index``; never rejected, so when rows
sit on ours every other one is rejected and ours is kept).

Why: honest pseudo-gradients never come close to one another. Each honest peer trains on its own shard with its
own inner batches (generators salted with its PeerID), so two honest rows differ by their minibatch noise at
least, and in high dimension those distances concentrate near their median; commit-before-reveal stops a peer
from copying a row of the same round. Several senders sending one vector is what colluding attacks do when they
do not bother to hide it: ALIE, IPM, min-max and min-sum compute one vector from what the group knows (each
attacker's own update makes the copies differ a little), and ``mimic`` replays one honest row of the previous
round from every attacker, which under non-IID data over-represents one peer's label mix.

Measured on digits (10 peers, 12 rounds, seed 0, the default guard, every receiver's rows of every round, each
distance over the round's typical distance m): the closest two honest rows were 0.65 × m with Dirichlet 0.5
shards, 0.75 × with IID shards and 0.42 × with Dirichlet 0.1 (the tightest), while the copies of ``min_max`` at 3
of 10 sat at a median 0.06 × (IPM and ALIE copies at 0.01 and 0.10 × the median pairwise distance, a scale
within a few per cent of m when most rows are honest). ρ = 0.25 sits between. Before this stage, 4 ``mimic``
copies of 10 took the guard to 65.6 % (clean 93.6 %), the copies' cosine with the robust centre being
0.6-0.99, so no other stage saw them; with it, 86.6 %.

Counting one vector several times also pulls the robust centre, so this stage runs *before* it: the centre, the
median norm and the aggregate see each group not at all. All members are rejected, not all but one: no copy can
be told apart from another, and keeping one would let a copier keep a place that an honest sender of the same
(stale) row then loses. What a group says is kept for the centre: at most one of its g rows can be honest, so
the semantic guard counts g − 1 of them against f̂ when it trims the rows left (:attr:`Duplicates.copies`; stage 2
of :mod:`~p2p_guard.guard.semantic`, with its measurement).

What it does not do: an attacker who adds noise of the honest spread to its copies escapes this stage; its rows
then look like independent rows, and meet the other stages (the centered clipping caps each accepted row's pull).

Cost: one pairwise distance matrix, O(n²·d) for n rows of d coordinates (the nearest-neighbour mixing of the
robust centre takes another); at the round's fan-out n ≤ k + 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from p2p_guard.guard.linalg import pairwise_distances, scalar_median

__all__ = ["DUPLICATE", "DUPLICATE_RATIO", "MIN_DIMENSION", "SAME_SHARD_HINT", "Duplicates",
           "find_duplicates", "typical_distance"]

DUPLICATE = "duplicate"
"""Reason recorded in the verdict of a row rejected by this stage."""

DUPLICATE_RATIO = 0.25
"""ρ: rows closer than ρ × the median pairwise distance are one group (module docstring for the measurement)."""

SAME_SHARD_HINT = ("bit-identical to our own update: that peer most likely set our --peer-index (the same "
                   "data shard and batches); give every peer its own --peer-index, or leave it unset")
"""Added to the detail of a row equal to the receiver's own: two honest peers that set one ``--peer-index`` draw
the same inner batches (``training.local.round_generator`` is keyed by a set index; only a peer that sets none
keys it by its PeerID, ``training.streams``), so they send the same Δ while their models agree, reject each
other, and leave the round to whoever else sent a row (helper-63: in a swarm of two such peers and one
attacker, round 0 applied the attacker's update)."""

MIN_DIMENSION = 16
"""Below this many coordinates only bit-identical rows are copies: the stage rests on honest distances
concentrating near their median, which needs dimension (helper-18 measured, among 9 independent Gaussian rows,
5.45 rejected on average at d = 1, 2.1 at d = 2, 0.05 at d = 5 and 0 from d = 10 up; every real model has
thousands of parameters)."""


@dataclass(frozen=True)
class Duplicates:
    """What the duplicate stage found.

    Attributes:
        rejected: row index → detail for each rejected row (every member of a group but the own row).
        groups: the groups of two or more rows, each sorted, own row included where it is a member.
    """

    rejected: dict[int, str]
    groups: tuple[tuple[int, ...], ...]

    @property
    def copies(self) -> int:
        """The rows the groups hold beyond one each: k = Σ_g (|g| − 1).

        At most one row of a group can be honest (honest rows never come that close, the module's premise), so
        at least k of the rows found are Byzantine: :class:`~p2p_guard.guard.semantic.SemanticGuard` counts
        them against f̂ for the robust centre of the rows that are left (its ``duplicate_credit``).
        """
        return sum(len(group) - 1 for group in self.groups)


def find_duplicates(
    updates: torch.Tensor, senders: Sequence[str], own_index: int | None, *, ratio: float = DUPLICATE_RATIO
) -> Duplicates:
    """Find every row that sits within ``ratio`` × the median pairwise distance of another (the module's rule).

    Args:
        updates: ``(n, d)`` float rows in the order of ``senders``; not mutated.
        senders: the ``n`` PeerIDs, in row order.
        own_index: the receiver's row (never rejected), or None.
        ratio: ρ ``>= 0`` (0: only bit-identical rows are grouped; so too when m is not finite or the rows
            have fewer than :data:`MIN_DIMENSION` coordinates).

    Returns:
        The rejected rows (row index → detail: the other senders of the group and the distances; rows in no
        group are absent) and the groups. Fewer than 2 rows: none.

    Raises:
        ValueError: when ``senders`` does not have one entry per row (a local bug).
    """
    n = int(updates.shape[0])
    if len(senders) != n:
        raise ValueError(f"senders must have {n} entries, got {len(senders)}")
    if n < 2:
        return Duplicates(rejected={}, groups=())
    dist = pairwise_distances(updates)
    median = typical_distance(dist)
    # m is inf when the differences overflowed the rows' dtype (float16 rows past ±32752): no scale, only
    # bit-identical rows are copies (with limit = inf every row would be one group)
    limit = ratio * median if math.isfinite(median) and updates.shape[1] >= MIN_DIMENSION else 0.0
    groups = _groups(dist <= limit)
    rejected: dict[int, str] = {}
    for group in groups:
        for i in group:
            if i != own_index:
                others = ", ".join(f"{senders[j]} ({float(dist[i, j]):.4g})" for j in group if j != i)
                rejected[i] = (
                    f"within {ratio:g} x the typical distance {median:.4g} of {others}: one vector from "
                    "several senders (honest rows never come that close)"
                )
                if own_index is not None and own_index in group and float(dist[i, own_index]) == 0.0:
                    rejected[i] += f"; {SAME_SHARD_HINT}"
    return Duplicates(rejected=rejected, groups=tuple(tuple(group) for group in groups))


def typical_distance(dist: torch.Tensor) -> float:
    """M = median_i lowmed_{j≠i} D_ij: the distance between two typical rows, robust to far rows.

    lowmed of the n − 1 distances of row i is their ⌈(n − 1)/2⌉-th smallest (the middle one for odd n − 1, the
    lower of the two middle ones for even n − 1); the outer median is :func:`~p2p_guard.guard.linalg.
    scalar_median` (the mean of the two middle values for even n).

    The median of all pairs would not do: with f far rows (a ×10 sign flip) among n, about 2f(n − f) of the
    n(n − 1) pairs are honest-to-far, so for f near n/3 the median pair is one of them and every honest pair
    would look close. Each row's lower median distance to the others is set by the rows near it as long as at
    most half of the others are far; the median of those over the rows is then set by the majority's, so
    M ≤ the largest honest pairwise distance for every f < n/2. The lower median matters at odd n = 2k + 1 with
    f = k far rows: an honest row then has k far rows among its 2k others, and the mean of the two middle
    distances, (near + far) / 2, made every honest pair look like a copy (all honest rows rejected, the far rows
    kept as the majority of the rest).

    Args:
        dist: ``(n, n)`` float64 symmetric distances with a zero diagonal, ``n >= 2``.

    Returns:
        m, in the rows' units (float).
    """
    n = len(dist)
    off = ~torch.eye(n, dtype=torch.bool)
    middle = (n - 2) // 2  # the lower median of each row's n − 1 distances
    per_row = torch.stack([torch.sort(dist[i][off[i]]).values[middle] for i in range(n)]).to(torch.float64)
    return scalar_median(per_row)


def _groups(close: torch.Tensor) -> list[list[int]]:
    """Connected components (of two or more rows) of the ``(n, n)`` boolean relation ``close``."""
    n = len(close)
    seen = [False] * n
    groups = []
    for start in range(n):
        if seen[start]:
            continue
        seen[start] = True
        group, frontier = [start], [start]
        while frontier:
            i = frontier.pop()
            for j in torch.nonzero(close[i]).flatten().tolist():
                if not seen[j]:
                    seen[j] = True
                    group.append(j)
                    frontier.append(j)
        if len(group) >= 2:
            groups.append(sorted(group))
    return groups
