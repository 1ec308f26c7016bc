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

__all__ = ["MOMENTUM_MIX_RADIUS", "MixResult", "clipped_gossip", "consensus_distance", "gossip_steps", "robust_centre"]

MOMENTUM_MIX_RADIUS = 1.0
"""Cap on the clipping radius of the outer momentum's mixing step, relative to ‖b_i‖ (dimensionless).

Honest momenta differ by tens of percent (they sum a round's per-receiver aggregates), so the cap sits far above
θ's ``mix_radius``; a Byzantine majority in one sample still moves b_i by at most ‖b_i‖·m/(m+1) per round. In
one process on digits it cost nothing against an uncapped radius (0.5 and 1.0 gave the same distances).
"""


@dataclass(frozen=True)
class MixResult:
    """What one clipped-gossip step did.

    Attributes:
        correction: ``(d,)`` float32 to add to our θ.
        tau: the clipping radius used (L2, same units as θ).
        clipped: how many neighbour differences were clipped.
        distances: ‖x_j − x_i‖ per neighbour, in input order.
    """

    correction: torch.Tensor
    tau: float
    clipped: int
    distances: tuple[float, ...]


def clipped_gossip(own: torch.Tensor, neighbours: Sequence[torch.Tensor], *, max_radius: float) -> MixResult:
    """One ClippedGossip step of ``own`` toward ``neighbours``.

    correction = 1/(m+1) · Σ_j clip(x_j − x_i, τ),  clip(v, τ) = v · min(1, τ/‖v‖),
    τ = min(median_j ‖x_j − x_i‖, max_radius · ‖x_i‖)

    where m = len(neighbours) and the median is the lower one, or the upper one when the lower is 0 (for an even
    m with half the sample at our own state: with τ = 0 two equal halves of a split swarm would never move
    toward each other). The cap ``max_radius`` bounds τ even when most sampled states are Byzantine (then the
    median distance is theirs).

    Args:
        own: ``(d,)`` float32, x_i.
        neighbours: states x_j, each ``(d,)`` float32 and finite (the caller rejects others).
        max_radius: cap on τ relative to ‖x_i‖ (dimensionless, > 0).

    Returns:
        The :class:`MixResult` (a zero correction when there are no neighbours).

    Raises:
        ValueError: on a shape mismatch or a non-positive ``max_radius``.

    References:
        He, Karimireddy, Jaggi, "Byzantine-robust decentralized learning via ClippedGossip", arXiv:2202.01545.
    """
    if max_radius <= 0:
        raise ValueError(f"max_radius must be > 0; got {max_radius}")
    if not neighbours:
        return MixResult(torch.zeros_like(own), 0.0, 0, ())
    diffs = []
    for x in neighbours:
        if x.shape != own.shape:
            raise ValueError(f"neighbour shape {tuple(x.shape)} != own {tuple(own.shape)}")
        diffs.append(x.to(torch.float64) - own.to(torch.float64))
    norms = torch.stack([d.norm() for d in diffs])
    ordered = sorted(norms.tolist())
    centre = ordered[(len(ordered) - 1) // 2]
    if centre == 0.0:  # half the sample coincides with us: the upper median, else two equal halves never meet
        centre = ordered[len(ordered) // 2]
    tau = float(min(centre, max_radius * float(own.to(torch.float64).norm())))
    total = torch.zeros_like(diffs[0])
    clipped = 0
    for d, n in zip(diffs, norms.tolist(), strict=False):
        if n > tau:
            clipped += 1
            total += d * (tau / n) if n > 0 else d
        else:
            total += d
    correction = (total / (len(neighbours) + 1)).to(own.dtype)
    return MixResult(correction, tau, clipped, tuple(float(n) for n in norms.tolist()))


def robust_centre(states: Sequence[torch.Tensor]) -> torch.Tensor:
    """Coordinate-wise median of ``states`` (lower median for an even count, as ``torch.median``).

    Args:
        states: at least one ``(d,)`` float32 tensor, all the same shape.

    Returns:
        ``(d,)`` float32.

    Raises:
        ValueError: if ``states`` is empty or shapes differ.
    """
    if not states:
        raise ValueError("robust_centre needs at least one state")
    if any(s.shape != states[0].shape for s in states):
        raise ValueError("states must all have the same shape")
    return torch.stack(list(states)).median(dim=0).values.clone()


def consensus_distance(states: Sequence[torch.Tensor]) -> float:
    """max_{i≠j} ‖x_i − x_j‖ / ‖x_i‖ over the given states (0.0 for fewer than two).

    Args:
        states: ``(d,)`` float tensors.

    Returns:
        The relative consensus distance (dimensionless); inf if some ‖x_i‖ is 0 while another state differs.
    """
    worst = 0.0
    for i, a in enumerate(states):
        norm = float(a.to(torch.float64).norm())
        for j, b in enumerate(states):
            if i == j:
                continue
            dist = float((a.to(torch.float64) - b.to(torch.float64)).norm())
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
