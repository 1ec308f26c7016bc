"""Keeping honest models together: clipped state gossip and the robust centre a late joiner adopts.

Version 2 of the round lets every peer own its model, so honest models drift apart slowly (their samples and
guards differ). Two restoring mechanisms, both pure functions over flat ``(d,)`` float32 vectors:

- :func:`clipped_gossip`: every ``mix_every`` rounds a peer fetches the states of a few sampled peers and moves
  toward each by the *clipped* difference, x_i ← x_i + 1/(m+1) · Σ_j clip(x_j − x_i, τ). One Byzantine state
  moves it by at most τ/(m+1), however far away it is (ClippedGossip, He, Karimireddy & Jaggi 2022,
  arXiv:2202.01545, with their adaptive τ: the median distance, so half the neighbours are clipped).
- :func:`robust_centre`: a late joiner, or a peer that fell too far behind, takes the coordinate-wise median of
  several sampled peers' states and its own: never one peer's word, never a majority hash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from p2p_guard.guard.linalg import column_blocks, combine_norms

__all__ = [
    "MIX_BLOCK",
    "MOMENTUM_MIX_RADIUS",
    "MixResult",
    "clipped_gossip",
    "consensus_distance",
    "debiased_distance",
    "gossip_steps",
    "robust_centre",
]

MOMENTUM_MIX_RADIUS = 1.0
"""Cap on the clipping radius of the outer momentum's mixing step, relative to ‖b_i‖ (dimensionless).

Honest momenta differ by tens of percent (they sum a round's per-receiver aggregates), so the cap sits far above
θ's ``mix_radius``; a Byzantine majority in one sample still moves b_i by at most ‖b_i‖·m/(m+1) per round. In
one process on digits it cost nothing against an uncapped radius (0.5 and 1.0 gave the same distances).
"""


MIX_BLOCK = 1 << 20
"""Coordinates per column block of :func:`clipped_gossip`, :func:`robust_centre` and :func:`consensus_distance`.

Their float64 temporaries are one block (8 MiB each), never a whole ``(d,)`` row: a 25M-parameter model's
float64 differences to 8 neighbours were 64 bytes per parameter. A multiple of ``guard.linalg.BLOCK``; a model
of at most this many parameters is one block, and its figures are exactly those of a single float64 reduction
over the row (``guard.linalg``'s module docstring); a larger one's norms may differ in the last bits (relative
1e-13 or less), which no clipping radius can see.
"""


@dataclass(frozen=True)
class MixResult:
    """What one clipped-gossip step did.

    Attributes:
        correction: ``(d,)`` float32 to add to our θ.
        tau: the clipping radius used (L2, same units as θ).
        clipped: how many neighbour differences were clipped.
        distances: per neighbour, in input order, ‖x_j − x_i‖ less the expected rounding noise of the received
            x_j: sqrt(max(0, ‖x̂_j − x_i‖² − N_j)) (:func:`debiased_distance`; the plain distance when N_j = 0).
        raw_distances: ‖x̂_j − x_i‖ per neighbour as received, in input order (what the clipping uses).
    """

    correction: torch.Tensor
    tau: float
    clipped: int
    distances: tuple[float, ...]
    raw_distances: tuple[float, ...] = ()


def debiased_distance(raw: float, noise: float) -> float:
    """‖x_j − x_i‖ estimated from the distance ‖x̂_j − x_i‖ to a received x̂_j = x_j + e_j with E‖e_j‖² = ``noise``.

    For rounding noise e_j of mean zero, independent of x_j − x_i (the int8 rounding of a state:
    ``protocol.states.int8_rounding_noise``), E‖x̂_j − x_i‖² = ‖x_j − x_i‖² + E‖e_j‖², so::

        d̂ = sqrt(max(0, raw² − noise))

    is the square root of an unbiased estimate of the squared distance, clamped at 0 (a neighbour at our own
    state reads 0 or a little above). Its error is small where d is large: the cross term 2⟨x_j − x_i, e_j⟩ has a
    standard deviation of 2·d·s/√12 for a uniform step s, and ‖e_j‖² one of about 0.9/√d of its mean.

    Args:
        raw: ‖x̂_j − x_i‖ (≥ 0, θ's units).
        noise: E‖e_j‖² (≥ 0, θ's units squared); 0 leaves ``raw`` unchanged.

    Returns:
        d̂ (≥ 0, θ's units), at most ``raw``.
    """
    if noise <= 0.0:
        return raw
    return math.sqrt(max(0.0, raw * raw - noise))


def clipped_gossip(own: torch.Tensor, neighbours: Sequence[torch.Tensor], *, max_radius: float,
                   noise: Sequence[float] | None = None) -> MixResult:
    """One ClippedGossip step of ``own`` toward ``neighbours``.

    correction = 1/(m+1) · Σ_j clip(x̂_j − x_i, τ),  clip(v, τ) = v · min(1, τ/‖v‖),
    τ = min(median_j d̂_j, max_radius · ‖x_i‖),  d̂_j = sqrt(max(0, ‖x̂_j − x_i‖² − N_j))

    where m = len(neighbours), x̂_j is x_j as received and N_j = E‖x̂_j − x_j‖² its expected rounding noise
    (``noise``; 0 for exact states, :func:`debiased_distance`), and the median is the lower one, or the upper one
    when the lower is 0 (for an even m with half the sample at our own state: with τ = 0 two equal halves of a
    split swarm would never move toward each other). The cap ``max_radius`` bounds τ even when most sampled states
    are Byzantine (then the median distance is theirs).

    Without the debiasing, int8 states (``protocol.states``) late in a run are mostly rounding noise: the median
    distance, hence τ and what one Byzantine neighbour may pull, grew by about 45 % (docs/protocol.md §7.8). τ and
    the reported ``distances`` therefore use d̂; the **clipping keeps the raw norm** ‖x̂_j − x_i‖: what is added to
    x_i is x̂_j − x_i, noise included, so clipping it by its own norm keeps the bound of one neighbour's move at
    τ/(m+1) exact, whatever N_j it is credited with. Clipping by d̂ would let a move reach sqrt(τ² + N_j)/(m+1)
    (a state at d̂_j ≤ τ is not clipped at all), i.e. give back the inflation the debiasing removes. The cost is
    on honest neighbours: one whose raw distance exceeds τ is shortened to τ, so the mixing moves less toward
    noisy states (the noise is moved less too). On digits with int8 states this took τ from 45 % to 13 % above
    the exact states' and left the honest models 1.7 to 3.4 times as far apart (still far under the 0.01 bound).

    Memory: two passes over the columns in blocks of :data:`MIX_BLOCK` (``guard.linalg.column_blocks``): the
    first takes each ‖x̂_j − x_i‖ and ‖x_i‖ in float64 block by block (combined as ``guard.linalg.combine_norms``),
    the second sums the clipped differences of one block in float64 and writes its float32 correction. Beyond
    the ``(d,)`` output only a few float64 blocks are held (about 32 MiB), whatever d and m; the correction has the
    bits of a whole-row float64 sum, and for d ≤ :data:`MIX_BLOCK` so do τ and the distances.

    Args:
        own: ``(d,)`` float32, x_i.
        neighbours: states x̂_j, each ``(d,)`` float32 and finite (the caller rejects others). A neighbour may
            also be float16 (a state as received in ``fp16``): each block is widened to float64 exactly, so the
            result is that of the same values in float32.
        max_radius: cap on τ relative to ‖x_i‖ (dimensionless, > 0).
        noise: N_j per neighbour (θ's units squared, ≥ 0; ``protocol.states.rounding_noise``), or None: all 0,
            the plain ClippedGossip step.

    Returns:
        The :class:`MixResult` (a zero correction when there are no neighbours).

    Raises:
        ValueError: on a shape mismatch, a non-positive ``max_radius``, or ``noise`` of another length than
            ``neighbours`` or with a negative or non-finite entry.

    References:
        He, Karimireddy, Jaggi, "Byzantine-robust decentralized learning via ClippedGossip", arXiv:2202.01545.
    """
    if max_radius <= 0:
        raise ValueError(f"max_radius must be > 0; got {max_radius}")
    noises = [0.0] * len(neighbours) if noise is None else [float(n) for n in noise]
    if len(noises) != len(neighbours):
        raise ValueError(f"{len(noises)} noise values for {len(neighbours)} neighbours")
    if any(not math.isfinite(n) or n < 0 for n in noises):
        raise ValueError(f"noise values must be finite and >= 0; got {noises}")
    if not neighbours:
        return MixResult(torch.zeros_like(own), 0.0, 0, (), ())
    for x in neighbours:
        if x.shape != own.shape:
            raise ValueError(f"neighbour shape {tuple(x.shape)} != own {tuple(own.shape)}")
    flat_own = own.reshape(-1)
    flats = [x.reshape(-1) for x in neighbours]
    blocks = list(column_blocks(flat_own.numel(), MIX_BLOCK))
    # Pass 1: ‖x̂_j − x_i‖ and ‖x_i‖, block by block in float64 (no (d,) difference kept).
    own_partials: list[torch.Tensor] = []
    partials: list[list[torch.Tensor]] = [[] for _ in flats]
    for cols in blocks:
        own64 = flat_own[cols].to(torch.float64)
        own_partials.append(torch.linalg.vector_norm(own64).reshape(1))
        for x, parts in zip(flats, partials, strict=True):
            parts.append(torch.linalg.vector_norm(x[cols].to(torch.float64) - own64).reshape(1))
    norms = [float(combine_norms(parts)[0]) for parts in partials]
    own_norm = float(combine_norms(own_partials)[0])
    debiased = [debiased_distance(n, e) for n, e in zip(norms, noises, strict=True)]
    ordered = sorted(debiased)
    centre = ordered[(len(ordered) - 1) // 2]
    if centre == 0.0:  # half the sample coincides with us: the upper median, else two equal halves never meet
        centre = ordered[len(ordered) // 2]
    tau = float(min(centre, max_radius * own_norm))
    # The raw norms clip: one neighbour moves us by at most τ/(m+1). None: not clipped.
    scales = [(tau / n if n > 0 else None) if n > tau else None for n in norms]
    clipped = sum(n > tau for n in norms)
    # Pass 2: the clipped sum, block by block, in the same order per coordinate as a whole-row sum (same bits).
    correction = torch.empty_like(flat_own)
    for cols in blocks:
        own64 = flat_own[cols].to(torch.float64)
        total = torch.zeros_like(own64)
        for x, scale in zip(flats, scales, strict=True):
            diff = x[cols].to(torch.float64) - own64
            total += diff * scale if scale is not None else diff
        correction[cols] = (total / (len(neighbours) + 1)).to(own.dtype)
    return MixResult(correction.reshape(own.shape), tau, clipped, tuple(debiased), tuple(norms))


def robust_centre(states: Sequence[torch.Tensor]) -> torch.Tensor:
    """Coordinate-wise median of ``states`` (lower median for an even count, as ``torch.median``).

    Memory: the states are stacked one block of :data:`MIX_BLOCK` coordinates at a time, so beyond the ``(d,)``
    output only ``len(states)`` blocks are held (not a ``(k, d)`` stack and a ``(d,)`` int64 index vector).

    Args:
        states: at least one ``(d,)`` float32 tensor, all the same shape.

    Returns:
        ``(d,)`` float32, a new tensor.

    Raises:
        ValueError: if ``states`` is empty or shapes differ.
    """
    if not states:
        raise ValueError("robust_centre needs at least one state")
    if any(s.shape != states[0].shape for s in states):
        raise ValueError("states must all have the same shape")
    flats = [s.reshape(-1) for s in states]
    out = torch.empty_like(flats[0])
    for cols in column_blocks(out.numel(), MIX_BLOCK):
        out[cols] = torch.stack([s[cols] for s in flats]).median(dim=0).values
    return out.reshape(states[0].shape)


def consensus_distance(states: Sequence[torch.Tensor]) -> float:
    """max_{i≠j} ‖x_i − x_j‖ / ‖x_i‖ over the given states (0.0 for fewer than two).

    Norms in float64, block by block over :data:`MIX_BLOCK` coordinates (``guard.linalg.combine_norms``): no
    ``(d,)`` float64 copy is made; for d ≤ :data:`MIX_BLOCK` the figure is that of a whole-row float64 norm.

    Args:
        states: ``(d,)`` float tensors, all the same shape.

    Returns:
        The relative consensus distance (dimensionless); inf if some ‖x_i‖ is 0 while another state differs.
    """
    flats = [s.reshape(-1) for s in states]
    n = len(flats)
    if n < 2:
        return 0.0
    own: list[list[torch.Tensor]] = [[] for _ in flats]
    # ‖x_i − x_j‖ = ‖x_j − x_i‖ bit for bit (a negation is exact): each unordered pair once.
    pair: dict[tuple[int, int], list[torch.Tensor]] = {(i, j): [] for i in range(n) for j in range(i + 1, n)}
    for cols in column_blocks(flats[0].numel(), MIX_BLOCK):
        blocks = [f[cols].to(torch.float64) for f in flats]
        for i, block in enumerate(blocks):
            own[i].append(torch.linalg.vector_norm(block).reshape(1))
        for (i, j), parts in pair.items():
            parts.append(torch.linalg.vector_norm(blocks[i] - blocks[j]).reshape(1))
    worst = 0.0
    for i in range(n):
        norm = float(combine_norms(own[i])[0])
        for j in range(n):
            if i == j:
                continue
            dist = float(combine_norms(pair[(min(i, j), max(i, j))])[0])
            worst = max(worst, dist / norm if norm > 0 else (float("inf") if dist > 0 else 0.0))
    return worst


def gossip_steps(present: int, mix_peers: int, *, early: bool, early_steps: int, max_steps: int) -> int:
    """Gossip steps of one mixing for a swarm of ``present`` peers (us included) sampling ``mix_peers`` each.

    One step with m sampled neighbours contracts the honest disagreement by a factor of about 3 (measured on
    digits, ``docs/scripts/consensus_options.py``), while a round with n > m + 1 peers adds disagreement that grows
    with n/(m + 1) (each peer aggregates its own sample of senders). So the steps grow with log₂ of the swarm size
    over twice the fan-out: extra = max(0, ⌈log₂(n / (2(m + 1)))⌉), 0 up to n = 18 at m = 8, 1 up to 36, 2 up to
    72. A mixing runs 1 + extra steps, or ``early_steps`` + 2·extra in the early rounds, never more than
    ``max_steps``. At 32 peers this took the worst distance of 10 rounds in one process from 0.033 (3 early steps
    then 1, 6 rounds) to 0.0054 (5, then 2); ``docs/protocol.md`` §7.8.

    Args:
        present: peers in the swarm as we see it, us included (≥ 1).
        mix_peers: the fan-out m of one step (≥ 1).
        early: whether this round is one of the early mixing rounds.
        early_steps: steps of an early mixing at n ≤ 2(m + 1).
        max_steps: the cap (``MAX_MIX_STEPS``).

    Returns:
        The number of steps, in [1, max_steps].
    """
    ratio = present / (2 * (max(1, mix_peers) + 1))
    extra = max(0, math.ceil(math.log2(ratio))) if ratio > 1 else 0
    steps = early_steps + 2 * extra if early else 1 + extra
    return max(1, min(max_steps, steps))
