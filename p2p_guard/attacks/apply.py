"""Applying an update attack the same way everywhere (networked peer and in-process benchmark)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from p2p_guard.attacks.base import AttackContext

__all__ = ["AttackFailed", "attacked_update"]


class AttackFailed(RuntimeError):
    """A user's update attack (``--attack MODULE:CLASS``) raised, or returned something other than a ``(d,)`` tensor.

    The peer stops with this one line (``swarm.peer.run_peer``) instead of a traceback from deep in its guard or
    codec. Built-in attacks are not wrapped: their failures are bugs of p2p_guard and keep their traceback.
    """


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

    Raises:
        AttackFailed: a user's update attack (a class outside p2p_guard) raised, or returned anything but a
            floating-point tensor of ``honest_delta``'s shape.
    """
    kind = getattr(attack, "kind", None)
    if kind == "data":
        boost = getattr(attack, "boost", 1.0)
        return honest_delta if boost == 1.0 else honest_delta * float(boost)
    if kind != "update":
        return honest_delta
    known = torch.stack([honest_delta, *known_previous])
    name = type(attack).__name__
    if type(attack).__module__.split(".")[0] == "p2p_guard":
        return attack(known, ctx).to(torch.float32)  # type: ignore[operator,no-any-return]
    try:
        update = attack(known, ctx)  # type: ignore[operator]
    except Exception as e:
        raise AttackFailed(f"attack {name}.__call__ raised {type(e).__name__}: {e}") from e
    if not isinstance(update, torch.Tensor) or not update.is_floating_point() or update.shape != honest_delta.shape:
        got = (f"a {update.dtype} tensor of shape {tuple(update.shape)}" if isinstance(update, torch.Tensor)
               else f"a {type(update).__name__}")
        raise AttackFailed(f"attack {name}.__call__ returned {got}; an update attack returns a floating-point "
                           f"tensor of the model's shape ({honest_delta.numel()},), like known[0]")
    return update.to(torch.float32)
