"""Running a guard over one round's integrity-checked rows, the same way everywhere."""

from __future__ import annotations

import torch

from p2p_guard.guard.base import AggregationContext, GuardResult

__all__ = ["judge_rows"]


def judge_rows(guard: object, rows: dict[str, torch.Tensor], *, me: str | None, round_: int,
               previous_aggregate: torch.Tensor | None, f: int | None,
               generator: torch.Generator) -> GuardResult:
    """Aggregate ``rows`` with ``guard`` in sender order, so every peer with the same rows gets the same bits.

    Args:
        guard: a ``Guard`` from ``build_guard``.
        rows: ``{sender PeerID (base58): (d,) float32}``, non-empty.
        me: our PeerID, marking our own row (``ctx.own_index``), or None.
        round_: the outer round.
        previous_aggregate: ``(d,)`` aggregate applied last round, or None.
        f: configured f̂ (None: the guard's default).
        generator: the round's generator.

    Returns:
        The guard's aggregate and one verdict per sender (in sorted sender order).

    Raises:
        ValueError: if ``rows`` is empty.
    """
    if not rows:
        raise ValueError("judge_rows needs at least one row")
    senders = tuple(sorted(rows))
    ctx = AggregationContext(senders=senders, round=round_, generator=generator,
                             own_index=senders.index(me) if me in rows else None,
                             previous_aggregate=previous_aggregate, f=f)
    return guard(torch.stack([rows[s] for s in senders]), ctx)  # type: ignore[operator,no-any-return]
