"""Update attacks that evade a defence by time or by geometry rather than by size.

- :class:`Drift`: a small push along one fixed direction, every round (time-coupled);
- :class:`NullSpace`: a reversal hidden in the null space of a fixed public projection (sketch evasion);
- :class:`Sleeper`: honest for k rounds, then a sign flip.

Same shape as :mod:`~p2p_guard.attacks.update`: a keyword-only constructor that checks the parameters, and
``__call__(known (m, d), ctx) -> (d,)`` of the dtype of ``known``, which is never mutated. The fixed
directions are drawn from a per-attack ``seed`` (not from ``ctx.generator``), so that they are the same every
round and for every colluder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from p2p_guard.attacks.base import AttackContext, check_known
from p2p_guard.guard.base import check_int, check_real

__all__ = ["PROJECTION_BLOCK", "Drift", "NullSpace", "Sleeper", "fixed_direction", "public_projection"]

PROJECTION_BLOCK = 1 << 16
"""Columns of the public projection drawn at a time (bounds memory to k × 65,536 float64 values)."""


def fixed_direction(d: int, seed: int) -> torch.Tensor:
    """A unit vector that depends only on ``(d, seed)``: a standard Gaussian draw, normalised.

    Returns:
        ``(d,)`` float64 tensor of norm 1.
    """
    g = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    norm = float(torch.linalg.vector_norm(g))
    return g / norm


def _projection_blocks(d: int) -> list[tuple[int, int]]:
    return [(start, min(start + PROJECTION_BLOCK, d)) for start in range(0, d, PROJECTION_BLOCK)]


def public_projection(d: int, *, k: int = 32, seed: int = 0) -> torch.Tensor:
    """The public random projection that :class:`NullSpace` evades, built whole (for small d and tests).

    P = [P_1 | P_2 | …],  P_b ~ N(0, 1)^{k × B_b}

    where the column blocks P_b (B_b = :data:`PROJECTION_BLOCK` columns, the last one shorter) are drawn in
    order from one generator seeded with ``seed``. A defence that scores sketches P·x with this P (the seed
    project's public demo used k = 32) sees no difference between an honest Δ and :class:`NullSpace`'s row.

    Returns:
        ``(k, d)`` float64 tensor.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks = [
        torch.randn(k, stop - start, generator=gen, dtype=torch.float64)
        for start, stop in _projection_blocks(d)
    ]
    return torch.cat(blocks, dim=1)


def _null_component(g: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """Return g − Pᵀ (P Pᵀ)⁺ P g for the public P, computed block by block (P is never held whole)."""
    d = len(g)
    blocks = _projection_blocks(d)
    gram = torch.zeros(k, k, dtype=torch.float64)
    pg = torch.zeros(k, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    for start, stop in blocks:
        p = torch.randn(k, stop - start, generator=gen, dtype=torch.float64)
        gram += p @ p.T
        pg += p @ g[start:stop]
    alpha = torch.linalg.pinv(gram, hermitian=True) @ pg
    out = g.clone()
    gen = torch.Generator().manual_seed(seed)
    for start, stop in blocks:
        p = torch.randn(k, stop - start, generator=gen, dtype=torch.float64)
        out[start:stop] -= p.T @ alpha
    return out


@dataclass(frozen=True, kw_only=True)
class Drift:
    """Time-coupled drift: the honest update plus a small push along one fixed direction, every round.

    a = Δ_own + ε · ‖Δ_own‖₂ · u

    where
        - Δ_own = ``known[0]``, the attacker's honest Δ of this round (the only row used);
        - u = :func:`fixed_direction` ``(d, seed)``, a unit vector that is the same every round and for every
          colluder (same seed);
        - ε = ``epsilon``: the push is a fraction of the honest norm, well inside the honest spread, so no
          per-round test sees it; the f colluders' pushes add up, round after round, along the same u.

    Knowledge: only its own honest Δ. It needs no knowledge of the guard: it relies on per-round defences
    forgetting the past (a defence with memory, such as centered clipping around the previous aggregate or a
    reputation across rounds, is what it tests).

    Args:
        epsilon: the relative size ε of the push, ``> 0`` (0.1).
        seed: seed of u, ``>= 0``.

    Raises:
        ValueError: on a parameter out of range (the message names it).

    References:
        Sai Praneeth Karimireddy, Lie He, Martin Jaggi. Learning from History for Byzantine Robust
        Optimization. ICML 2021. arXiv:2012.10333 (time-coupled attacks, small biases that accumulate).
    """

    kind: ClassVar[str] = "update"
    epsilon: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("epsilon", self.epsilon, minimum=0.0)
        check_int("seed", self.seed, minimum=0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``Δ_own + ε ‖Δ_own‖ u``, a ``(d,)`` tensor of the dtype of ``known``."""
        check_known(known)
        own = known[0].to(torch.float64)
        u = fixed_direction(len(own), self.seed)
        push = self.epsilon * float(torch.linalg.vector_norm(own))
        return (own + push * u).to(known.dtype)


@dataclass(frozen=True, kw_only=True)
class NullSpace:
    """Null-space evasion: reverse the update inside the null space of a fixed public projection.

    a = Δ_own + λ · ‖Δ_own‖₂ · n̂,   n̂ = N(−Δ_own) / ‖N(−Δ_own)‖₂,   N(g) = g − Pᵀ (P Pᵀ)⁺ P g

    where
        - Δ_own = ``known[0]`` (the only row used);
        - P is the public ``(k, d)`` projection of :func:`public_projection` (``k``, ``seed``), and N the
          orthogonal projector onto its null space, so P·a = P·Δ_own exactly: in the sketch the row is the
          honest one;
        - λ = ``scale``; for k ≪ d, N(−Δ_own) ≈ −Δ_own, so a ≈ (1 − λ)·Δ_own: λ = 2 (default) is a sign flip
          of the honest norm, invisible to a sketch and to a norm test; larger λ adds size.

    When the null space holds none of −Δ_own (d ≤ k), the attacker sends Δ_own.

    Our guard uses no fixed projection: it takes norms and cosines on the full vector, where this row is a
    plain sign flip. The attack is here to show that (DESIGN.md: the seed demo's fixed public 32-D projection
    was defeated this way).

    Knowledge: its own honest Δ and the public projection (its seed and k); not this round's other rows.

    Args:
        scale: λ, ``> 0`` (2).
        k: rows of the projection, ``>= 1`` (32, the seed demo's).
        seed: seed of the projection, ``>= 0``.

    Raises:
        ValueError: on a parameter out of range (the message names it).
    """

    kind: ClassVar[str] = "update"
    scale: float = 2.0
    k: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("scale", self.scale, minimum=0.0)
        check_int("k", self.k, minimum=1)
        check_int("seed", self.seed, minimum=0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``Δ_own + λ ‖Δ_own‖ n̂``, a ``(d,)`` tensor of the dtype of ``known``."""
        check_known(known)
        own = known[0].to(torch.float64)
        own_norm = float(torch.linalg.vector_norm(own))
        null = _null_component(-own, self.k, self.seed)
        null_norm = float(torch.linalg.vector_norm(null))
        if own_norm == 0 or null_norm <= 1e-9 * own_norm:
            return known[0].clone()
        return (own + self.scale * own_norm * null / null_norm).to(known.dtype)


@dataclass(frozen=True, kw_only=True)
class Sleeper:
    """Sleeper: honest for the first k rounds, then a sign flip.

    a = Δ_own                if r < k
    a = −s · Δ_own           otherwise

    where
        - Δ_own = ``known[0]`` (the only row used) and r = ``ctx.round``, the swarm's outer round (a late
          joiner counts from the swarm's round, not its own first);
        - k = ``k`` honest rounds, s = ``scale`` (``sleeper:k=3,scale=10`` strikes with a ×10 sign flip).

    It tests defences that learn trust: a reputation earned in k honest rounds must not buy the attack a pass.

    Knowledge: only its own honest Δ and the round number.

    Args:
        k: honest rounds before the attack, ``>= 0`` (3).
        scale: the sign flip's factor s, ``> 0`` (1, as ``sign_flip``).

    Raises:
        ValueError: on a parameter out of range (the message names it).
    """

    kind: ClassVar[str] = "update"
    k: int = 3
    scale: float = 1.0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_int("k", self.k, minimum=0)
        check_real("scale", self.scale, minimum=0.0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``known[0]`` (a copy) before round k, ``−scale · known[0]`` from then on."""
        check_known(known)
        if ctx.round < self.k:
            return known[0].clone()
        return known[0] * -self.scale
