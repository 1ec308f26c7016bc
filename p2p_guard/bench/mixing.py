"""The swarm's mixing step in the in-process cell: every peer's θ and outer momentum after the outer step.

A networked peer (``swarm.peer.Peer.mixing``, version 2 of the round) mixes after every outer step (the default
``mix_every = 1``, ``adaptive_mixing`` off): it samples ``mix_peers`` of the others (``swarm.sampling
.sample_senders``) and moves its post-step θ toward their post-step θ by one ClippedGossip step
(``swarm.mixing.clipped_gossip``, τ capped at ``mix_radius``·‖θ_i‖), and its outer momentum b toward the same
sources' momenta (capped at ``MOMENTUM_MIX_RADIUS``·‖b_i‖, skipped while b_i is zero). In the first
``early_mix_rounds`` rounds a mixing runs ``early_mix_steps`` gossip steps (more in larger swarms,
``swarm.mixing.gossip_steps``), each toward a fresh sample's θ after their previous step. :func:`mix_peers_once`
runs exactly that for every model of a cell, with these functions, as if every neighbour answered at once (a peer
never samples those its reputation excludes, ``Peer._mixable``; the cell passes them as ``excluded``):

    for step s in 0 .. S − 1:     x_i^{s+1} = x_i^s + clipped_gossip(x_i^s, [x_j^s for j in sample_i^s]).correction
    θ_i ← θ_i + (x_i^S − x_i^0);  b_i ← b_i + clipped_gossip(b_i, [b_j for j in sample_i^0]).correction

Two deviations from a swarm, both documented in docs/benchmarks.md (method): states are exact float32 (a swarm
fetches them in float16 by default, a relative rounding of 2⁻¹¹ far below the disagreement mixed), and a
Byzantine peer's θ is its own model stepped with its own guard's aggregate and mixed like an honest one's: what
the simulation's attackers serve (``p2p-guard simulate`` runs them through the same ``Peer``; no attack in
``p2p_guard.attacks`` forges the served θ), not the worst θ an adversary could serve (clipping bounds that one's
pull to τ/(m + 1) a step).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from p2p_guard.swarm.config import MAX_MIX_STEPS, PeerConfig
from p2p_guard.swarm.mixing import MOMENTUM_MIX_RADIUS, clipped_gossip, gossip_steps
from p2p_guard.swarm.sampling import sample_senders
from p2p_guard.training.local import LocalModel

__all__ = ["SALT_MIX", "CellMixing", "mix_peers_once", "mixing_sampler"]

SALT_MIX = 6
"""``round_generator`` salt of a peer's mixing samples in the cell (a swarm peer draws them from the OS)."""

_PEER_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(PeerConfig)}


@dataclass(frozen=True)
class CellMixing:
    """The mixing settings of a cell; every default is ``PeerConfig``'s (what ``p2p-guard peer`` runs).

    Attributes:
        mix_peers: neighbours sampled per gossip step (m ≥ 1).
        mix_radius: cap on τ relative to ‖θ_i‖ (dimensionless, > 0).
        early_mix_rounds: rounds 0 .. early_mix_rounds − 1 run ``early_mix_steps`` gossip steps.
        early_mix_steps: gossip steps of an early mixing (1 .. ``MAX_MIX_STEPS``).
    """

    mix_peers: int = _PEER_DEFAULTS["mix_peers"]
    mix_radius: float = _PEER_DEFAULTS["mix_radius"]
    early_mix_rounds: int = _PEER_DEFAULTS["early_mix_rounds"]
    early_mix_steps: int = _PEER_DEFAULTS["early_mix_steps"]


def mixing_sampler(generator: torch.Generator) -> random.Random:
    """A ``random.Random`` for ``sample_senders``, seeded from ``generator`` (one 62-bit draw)."""
    return random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))  # noqa: S311 (reproducible draws)


def mix_peers_once(models: Sequence[LocalModel], names: Sequence[str], round_: int,
                   samplers: Sequence[random.Random], settings: CellMixing | None = None,
                   excluded: Sequence[Collection[str]] | None = None) -> int:
    """Mix every model with a sample of the others, as each swarm peer does after the step of ``round_``.

    Args:
        models: every peer's model, honest and Byzantine, after its outer step (θ and b are replaced).
        names: their names, in the same order (sampling sorts candidates by name, as by PeerID in a swarm).
        round_: the round whose post-step states are mixed (early rounds run more steps).
        samplers: one ``random.Random`` per model, that model's draws of neighbours.
        settings: the mixing settings (None: ``CellMixing()``, the swarm's defaults).
        excluded: per model, the names its reputation excludes, never sampled by it (``Peer._mixable``); None:
            none.

    Returns:
        The number of gossip steps run (``gossip_steps`` for the swarm of ``len(models)`` peers).

    Raises:
        ValueError: if ``names``, ``samplers`` or ``excluded`` do not match ``models`` in length.
    """
    settings = settings or CellMixing()
    n = len(models)
    if len(names) != n or len(samplers) != n:
        raise ValueError(f"{n} models need {n} names and samplers; got {len(names)} and {len(samplers)}")
    if excluded is not None and len(excluded) != n:
        raise ValueError(f"{n} models need {n} exclusion sets; got {len(excluded)}")
    if n < 2:
        return 0
    index = {name: i for i, name in enumerate(names)}
    steps = gossip_steps(n, settings.mix_peers, early=round_ < settings.early_mix_rounds,
                         early_steps=settings.early_mix_steps, max_steps=MAX_MIX_STEPS)
    start = [m.theta for m in models]
    current = list(start)
    momentum_moves: list[torch.Tensor | None] = [None] * n
    for step in range(steps):
        moved = []
        for i in range(n):
            unwelcome = excluded[i] if excluded is not None else ()
            candidates = [s for s in names if s != names[i] and s not in unwelcome]
            chosen = [index[s] for s in sample_senders(candidates, settings.mix_peers, samplers[i])]
            if step == 0 and bool(models[i].momentum.any()):
                momentum_moves[i] = clipped_gossip(models[i].momentum, [models[j].momentum for j in chosen],
                                                   max_radius=MOMENTUM_MIX_RADIUS).correction
            gossip = clipped_gossip(current[i], [current[j] for j in chosen], max_radius=settings.mix_radius)
            moved.append(current[i] + gossip.correction)
        current = moved  # synchronous: step s + 1 sees the others' states after their step s
    for i, model in enumerate(models):
        model.shift(current[i] - start[i])
        move = momentum_moves[i]
        if move is not None:
            model.shift_momentum(move)
    return steps
