"""The :class:`Guard`: one aggregation rule made safe to call on a round's rows, with a verdict per sender.

What the wrapper adds to a bare rule:

- a canonical row order (by sender PeerID), so that two peers that received the same rows in different orders
  compute the same aggregate bit for bit;
- non-finite rows rejected (reason ``"non_finite"``) before the rule sees them (integrity already rejects
  them; this is the last line, since one NaN row would poison every rule);
- a fallback to the coordinate-wise median when the rule raises
  :class:`~p2p_guard.guard.base.NotEnoughUpdates` (too few rows for its f); the median needs one row;
- one :class:`~p2p_guard.guard.base.Verdict` per sender, in the caller's order: the rule's own verdicts for a
  judging rule (``semantic``, ``multi_krum``), otherwise every finite row accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from p2p_guard.guard.base import (
    AggregationContext,
    Aggregator,
    GuardResult,
    JudgingAggregator,
    NotEnoughUpdates,
    Verdict,
)
from p2p_guard.guard.baselines.median import CoordinateMedian
from p2p_guard.guard.linalg import cosines_to, row_norms
from p2p_guard.guard.state import GuardStateError, version_of
from p2p_guard.guard.verdict import make_verdicts

logger = logging.getLogger(__name__)

__all__ = ["NON_FINITE", "Guard"]

NON_FINITE = "non_finite"
"""Reason given to a row holding NaN or an infinity."""

_STATE_VERSION = 1


class _BadAggregate(ValueError):
    """A rule returned something other than one ``(d,)`` row of the rows' dtype."""


@dataclass(frozen=True)
class Guard:
    """An aggregation rule wrapped with canonical ordering, a non-finite filter, a fallback and verdicts.

    Args:
        name: the rule's registry name (for logs and events).
        aggregator: the rule; a :class:`~p2p_guard.guard.base.JudgingAggregator` supplies its own verdicts.
        fallback: rule used when ``aggregator`` raises ``NotEnoughUpdates`` (coordinate-wise median).
        plugin: True for a user's ``module:Class`` rule: anything else it raises is reported as a ``ValueError``
            naming the spec (one line where the peer stops), not a traceback.
    """

    name: str
    aggregator: Aggregator
    fallback: Aggregator = field(default_factory=CoordinateMedian)
    plugin: bool = False

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> GuardResult:
        """Judge and aggregate one round's rows.

        Args:
            updates: ``(n, d)`` float tensor, one row per sender in the order of ``ctx.senders``; not mutated.
            ctx: the round's context.

        Returns:
            The ``(d,)`` aggregate (dtype of ``updates``) and one verdict per sender, in the order of
            ``ctx.senders``.

        Raises:
            ValueError: when ``updates`` is not ``(len(ctx.senders), d)`` (a local bug), when the rule returns
                anything but a finite ``(d,)`` tensor of the rows' dtype, or when a user's rule (``plugin``) raises
                anything but ``NotEnoughUpdates``.
            NotEnoughUpdates: when no finite row is left, so even the fallback has nothing to aggregate;
                the round logic then falls back to the peer's own update.
        """
        if updates.dim() != 2 or updates.shape[0] != len(ctx.senders):
            raise ValueError(
                f"updates must be ({len(ctx.senders)}, d) to match ctx.senders, got {tuple(updates.shape)}"
            )
        order = sorted(range(len(ctx.senders)), key=lambda i: ctx.senders[i])
        finite = [i for i in order if bool(torch.isfinite(updates[i]).all())]
        rows = updates if finite == list(range(len(updates))) else updates[finite]  # no copy when in order
        sub_ctx = replace(
            ctx,
            senders=tuple(ctx.senders[i] for i in finite),
            own_index=finite.index(ctx.own_index) if ctx.own_index in finite else None,
        )
        try:
            try:
                if isinstance(self.aggregator, JudgingAggregator):
                    result = self.aggregator.judge(rows, sub_ctx)
                    self._check_aggregate(getattr(result, "aggregate", result), rows)
                else:
                    aggregate = self.aggregator(rows, sub_ctx)
                    self._check_aggregate(aggregate, rows)
                    result = GuardResult(aggregate, self._all_accepted(rows, sub_ctx, aggregate, self.name))
            except (NotEnoughUpdates, _BadAggregate):
                raise
            except (Exception, SystemExit) as exc:
                if not self.plugin:  # a built-in rule failing is a bug of ours: keep its traceback
                    raise
                raise ValueError(f"guard {self.name!r} raised {type(exc).__name__} in round {ctx.round}: {exc}") \
                    from exc
        except NotEnoughUpdates as exc:
            logger.warning(
                "round %d: %s: %s; falling back to the coordinate-wise median", ctx.round, self.name, exc
            )
            aggregate = self.fallback(rows, sub_ctx)
            result = GuardResult(aggregate, self._all_accepted(rows, sub_ctx, aggregate, f"fallback ({exc})"))

        by_sender = {v.sender: v for v in result.verdicts}
        nan = float("nan")
        for sender in ctx.senders:
            if sender not in by_sender:
                by_sender[sender] = Verdict(
                    sender, False, NON_FINITE, "row holds NaN or infinite values", nan, nan
                )
        verdicts = tuple(by_sender[s] for s in ctx.senders)
        # DEBUG only: the round logic logs each rejection once, at WARNING, with its peer prefix.
        for v in verdicts:
            if not v.accepted:
                logger.debug(
                    "round %d: %s rejected %s (%s): %s", ctx.round, self.name, v.sender, v.reason, v.detail
                )
        return GuardResult(aggregate=result.aggregate, verdicts=verdicts)

    def state_dict(self) -> dict[str, Any]:
        """The state the rule keeps across rounds, for the peer's checkpoint (plain values and tensors).

        Returns:
            ``{"version": 1, "rule": name, "state": the rule's state_dict() or None}``: None for a rule that keeps
            no state, and for a user's rule (``plugin``: its state is its own business, and a checkpoint holds
            only what ``torch.load(weights_only=True)`` reads back). The ``semantic`` rule's is
            :meth:`~p2p_guard.guard.semantic.SemanticGuard.state_dict`.
        """
        method = getattr(self.aggregator, "state_dict", None)
        state = method() if callable(method) and not self.plugin else None
        return {"version": _STATE_VERSION, "rule": self.name, "state": state}

    def load_state_dict(self, state: Mapping[str, Any], *, numel: int | None = None) -> bool:
        """Restore :meth:`state_dict`'s output into the rule (checked first; nothing changes on error).

        Args:
            state: as :meth:`state_dict` returns (possibly saved under another ``--guard`` spec: a rule of the same
                kind takes it, whatever its parameters).
            numel: d of the model when known (state tensors must then be ``(numel,)``).

        Returns:
            True when the rule took the state; False when there was none to take, or the rule keeps none.

        Raises:
            GuardStateError: (a ``ValueError``) the state is malformed (the message says which part and why).
        """
        if version_of(state) != _STATE_VERSION:
            got = state.get("version") if isinstance(state, Mapping) else type(state).__name__
            raise GuardStateError(f"guard: not a state of version {_STATE_VERSION} (got {got!r})")
        if not isinstance(state.get("rule"), str):
            raise GuardStateError(f"guard: rule must be a str, got {state.get('rule')!r:.80}")
        method = getattr(self.aggregator, "load_state_dict", None)
        if state.get("state") is None or self.plugin or not callable(method):
            return False
        method(state["state"], numel=numel)
        return True

    def _check_aggregate(self, aggregate: object, rows: torch.Tensor) -> None:
        """Raise :class:`_BadAggregate` unless ``aggregate`` is a finite ``(d,)`` tensor of the rows' dtype.

        A user's rule that returned another shape stopped the peer with a traceback from deep in the verdicts
        (``guard badguards:WrongShape``: "inconsistent tensor size").
        """
        d = rows.shape[1]
        if not isinstance(aggregate, torch.Tensor):
            raise _BadAggregate(f"guard {self.name!r} returned {type(aggregate).__name__}, not a ({d},) tensor")
        if tuple(aggregate.shape) != (d,) or aggregate.dtype != rows.dtype:
            raise _BadAggregate(f"guard {self.name!r} returned a tensor of shape {tuple(aggregate.shape)} and dtype "
                                f"{aggregate.dtype}, not ({d},) {rows.dtype} like the rows")
        bad = int((~torch.isfinite(aggregate)).sum())
        if bad:  # the rows are the finite ones: the rule made these (the outer step refused them, naming no guard)
            raise _BadAggregate(f"guard {self.name!r} returned an aggregate with {bad} of its {d} values NaN or "
                                "infinite (the rows it was given are all finite)")

    @staticmethod
    def _all_accepted(
        rows: torch.Tensor, ctx: AggregationContext, aggregate: torch.Tensor, how: str
    ) -> tuple[Verdict, ...]:
        return make_verdicts(
            ctx.senders, row_norms(rows), cosines_to(rows, aggregate), {}, f"accepted by {how}"
        )
