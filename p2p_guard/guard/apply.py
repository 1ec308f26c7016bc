"""Running a guard over one round's integrity-checked rows, the same way everywhere."""

from __future__ import annotations

from collections.abc import Callable

import torch

from p2p_guard.guard.base import AggregationContext, GuardResult

__all__ = ["judge_rows", "judge_stacked", "stack_rows"]


def judge_rows(guard: object, rows: dict[str, torch.Tensor], *, me: str | None, round_: int,
               previous_aggregate: torch.Tensor | None, f: int | None,
               generator: torch.Generator,
               loss_at: Callable[[torch.Tensor], float] | None = None,
               own_reference: torch.Tensor | None = None) -> GuardResult:
    """Aggregate ``rows`` with ``guard`` in sender order.

    Args:
        guard: a ``Guard`` from ``build_guard``.
        rows: ``{sender PeerID (base58): (d,) float32}``, non-empty; our own row under ``me``.
        me: our PeerID, marking our own row (``ctx.own_index``; the ``semantic`` guard trusts it and anchors
            on it), or None.
        round_: the outer round.
        previous_aggregate: ``(d,)`` aggregate applied last round, or None.
        f: f̂, the expert override ``--assumed-byzantine`` (None: no oracle; the guard's own default).
        generator: the round's generator.
        loss_at: our private loss, ``loss_at(delta: (d,) float32) -> float``: the loss of θ_i − η·delta on a
            batch of our own held-out data drawn fresh for this round (the same batch for every call of the
            round; η e.g. outer_lr / len(rows)); the model must be restored to θ_i afterwards by the caller.
            None: the ``semantic`` guard skips its loss stage.
        own_reference: ``(d,)`` float32, our own pseudo-gradient before our codec and error feedback (dense);
            the ``semantic`` guard judges sparse (``topk``) rows against it. None: that test is skipped.

    Returns:
        The guard's aggregate and one verdict per sender (in sorted sender order).

    Raises:
        ValueError: if ``rows`` is empty.
    """
    if not rows:
        raise ValueError("judge_rows needs at least one row")
    senders, updates = stack_rows(rows)
    return judge_stacked(guard, senders, updates, me=me, round_=round_, previous_aggregate=previous_aggregate, f=f,
                         generator=generator, loss_at=loss_at, own_reference=own_reference)


def stack_rows(rows: dict[str, torch.Tensor]) -> tuple[tuple[str, ...], torch.Tensor]:
    """The senders in sorted order and their rows stacked in that order, a copy; ``rows`` is not changed.

    Args:
        rows: ``{sender PeerID: (d,) tensor}``, all of one shape and dtype, non-empty.

    Returns:
        ``(senders, updates)``: the sorted PeerIDs and the ``(n, d)`` stacked rows.

    Raises:
        ValueError: if ``rows`` is empty.
    """
    if not rows:
        raise ValueError("stack_rows needs at least one row")
    senders = tuple(sorted(rows))
    return senders, torch.stack([rows[s] for s in senders])


def judge_stacked(guard: object, senders: tuple[str, ...], updates: torch.Tensor, *, me: str | None, round_: int,
                  previous_aggregate: torch.Tensor | None, f: int | None, generator: torch.Generator,
                  loss_at: Callable[[torch.Tensor], float] | None = None,
                  own_reference: torch.Tensor | None = None) -> GuardResult:
    """:func:`judge_rows` on rows already stacked by :func:`stack_rows`.

    A peer that then drops its separately held rows keeps one copy of them through the guard, not two.

    Args:
        guard: a ``Guard`` from ``build_guard``.
        senders: the PeerIDs of ``updates``' rows, in row order (sorted).
        updates: ``(n, d)`` float32 rows; not mutated.
        me: our PeerID, marking our own row, or None (:func:`judge_rows`).
        round_: the outer round.
        previous_aggregate: ``(d,)`` aggregate applied last round, or None.
        f: f̂, the expert override ``--assumed-byzantine`` (None: no oracle).
        generator: the round's generator.
        loss_at: our private loss (:func:`judge_rows`), or None.
        own_reference: ``(d,)`` float32, our dense pseudo-gradient (:func:`judge_rows`), or None.

    Returns:
        The guard's aggregate and one verdict per sender (in ``senders`` order).

    Raises:
        ValueError: if ``senders`` does not name the rows one to one.
    """
    if len(senders) != len(updates) or len(set(senders)) != len(senders):
        raise ValueError(f"{len(senders)} senders for {len(updates)} rows, or a sender twice")
    ctx = AggregationContext(senders=senders, round=round_, generator=generator,
                             own_index=senders.index(me) if me in senders else None,
                             previous_aggregate=previous_aggregate, f=f, loss_at=loss_at,
                             own_reference=own_reference)
    return guard(updates, ctx)  # type: ignore[operator,no-any-return]
