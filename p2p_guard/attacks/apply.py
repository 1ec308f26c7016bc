"""Applying an update attack the same way everywhere (networked peer and in-process benchmark)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from p2p_guard.attacks.base import AttackContext

__all__ = ["attacked_update"]


def attacked_update(
    attack: object, honest_delta: torch.Tensor, known_previous: Sequence[torch.Tensor], ctx: AttackContext
) -> torch.Tensor:
    """Return what an adversarial peer sends instead of its honest pseudo-gradient.

    Args:
        attack: an object from ``load_attack``. An ``kind == "update"`` attack replaces the vector; a
            ``kind == "data"`` attack (which acted during the inner steps) may carry ``boost`` (model
            replacement, e.g. ``backdoor:boost=10``), by which the Δ is multiplied; wire attacks act on the
            envelope and leave the vector as it is.
        honest_delta: ``(d,)`` float32, the Δ the peer computed this round (on its corrupted data for a data
            attack).
        known_previous: ``(d,)`` rows the peer received in the previous round (commit-before-reveal lets it
            see no more of the current round).
        ctx: round, swarm size n, colluding f, generator, guard name.

    Returns:
        ``(d,)`` float32 update to commit.
    """
    kind = getattr(attack, "kind", None)
    if kind == "data":
        boost = getattr(attack, "boost", 1.0)
        return honest_delta if boost == 1.0 else honest_delta * float(boost)
    if kind != "update":
        return honest_delta
    known = torch.stack([honest_delta, *known_previous])
    return attack(known, ctx).to(torch.float32)  # type: ignore[operator,no-any-return]
