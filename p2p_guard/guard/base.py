"""Types shared by every aggregation rule: the round's context, the plugin Protocols, verdicts, errors.

An aggregation rule is a small callable, shaped as in byzfl: the keyword-only constructor takes and checks
the hyper-parameters, and ``__call__(updates, ctx)`` takes the data. ``updates`` is an ``(n, d)`` stack of
pseudo-gradients, one row per sender in the order of ``ctx.senders``; the result is one ``(d,)`` vector of
the same dtype and device. A rule never mutates its input and keeps no state between calls: whatever carries
over between rounds (the previous aggregate) travels in the :class:`AggregationContext`, and randomness comes
only from ``ctx.generator``.

A rule that needs more rows than it was given raises :class:`NotEnoughUpdates`, and only that; the
:class:`~p2p_guard.guard.guard.Guard` wrapper catches it and falls back to the coordinate-wise median.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

__all__ = [
    "AggregationContext",
    "Aggregator",
    "GuardResult",
    "JudgingAggregator",
    "NotEnoughUpdates",
    "Verdict",
    "breakdown_f",
    "check_int",
    "check_real",
    "check_stack",
    "default_f",
    "resolve_f",
]


class NotEnoughUpdates(Exception):
    """Raised when a rule is given too few rows for the Byzantine count it must tolerate.

    Args:
        n: number of rows the rule was given.
        f: number of Byzantine rows the rule was asked to tolerate.
        needed: the precondition, in words (for example ``"n > 2f"``).
    """

    def __init__(self, n: int, f: int, needed: str = "n >= 1") -> None:
        """Record the figures and build the message."""
        super().__init__(f"not enough updates: need {needed}; got n={n}, f={f}")
        self.n = n
        self.f = f
        self.needed = needed


@dataclass(frozen=True, kw_only=True, eq=False)  # eq=False: it holds tensors, whose == is elementwise
class AggregationContext:
    """What a rule may know about the round besides the rows themselves.

    Args:
        senders: PeerIDs (base58 text) of the rows, in row order; unique.
        round: the outer round number, ``>= 0``.
        generator: the only source of randomness a rule may use (seeded from run, round and peer).
        own_index: index of this peer's own row in ``senders``, or ``None`` when it has none. The ``semantic``
            guard trusts that row (it is never rejected, and the self-anchoring stage clips the aggregate
            around it); the baselines never read it, except ``own_update``.
        previous_aggregate: ``(d,)`` aggregate this peer applied in the previous round, or ``None``.
        f: configured number of Byzantine rows to tolerate (f̂), an expert override (``--assumed-byzantine``).
            Rules constructed without an explicit ``f`` use it; when both are ``None``, the ``semantic``
            guard takes :func:`breakdown_f` and every rule that needs f takes :func:`default_f`.
        loss_at: the receiver's private loss, ``loss_at(delta: (d,) float32) -> float``: its loss on a fresh
            batch of its own held-out data at θ_i − η·delta (η chosen by the caller). ``None``: the
            ``semantic`` guard skips its loss stage (:mod:`p2p_guard.guard.loss_score`).
        own_reference: ``(d,)`` float tensor, the receiver's own pseudo-gradient Δ_i of this round as it computed
            it, before its codec and error feedback (dense), or ``None``. With a lossy codec the own row is what
            the others decode (for ``topk``, 1-5 % of the coordinates); this is the dense update it came from.
            The ``semantic`` guard judges sparse rows against it (:func:`~p2p_guard.guard.verdict.
            support_outliers`); ``None``: that test is skipped. The baselines never read it.

    Raises:
        ValueError: on an out-of-range ``own_index``, ``round`` or ``f``, on duplicate senders, or on an
            ``own_reference`` that is not a 1-D floating-point tensor.
    """

    senders: tuple[str, ...]
    round: int
    generator: torch.Generator
    own_index: int | None = None
    previous_aggregate: torch.Tensor | None = None
    f: int | None = None
    loss_at: Callable[[torch.Tensor], float] | None = None
    own_reference: torch.Tensor | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.loss_at is not None and not callable(self.loss_at):
            raise ValueError(f"loss_at must be callable, got {self.loss_at!r}")
        if len(set(self.senders)) != len(self.senders):
            raise ValueError(f"senders must be unique, got {self.senders!r}")
        if self.own_index is not None and not 0 <= self.own_index < len(self.senders):
            raise ValueError(f"own_index must index senders (n={len(self.senders)}), got {self.own_index}")
        check_int("round", self.round, minimum=0)
        if self.f is not None:
            check_int("f", self.f, minimum=0)
        ref = self.own_reference
        if ref is not None and (not isinstance(ref, torch.Tensor) or ref.dim() != 1 or not ref.is_floating_point()):
            shape = tuple(ref.shape) if isinstance(ref, torch.Tensor) else type(ref).__name__
            raise ValueError(f"own_reference must be a (d,) floating-point tensor, got {shape}")


@dataclass(frozen=True)
class Verdict:
    """One receiving peer's judgement of one sender in one round.

    Args:
        sender: the sender's PeerID (base58 text).
        accepted: whether the sender's row entered the aggregate.
        reason: ``None`` when accepted; otherwise a short machine-readable word (``"outlier"``,
            ``"non_finite"``, or a reason from an extension check).
        detail: human-readable explanation with the figures that decided.
        norm: Euclidean norm of the sender's raw row (``nan`` for a non-finite row).
        cosine: cosine between the raw row and the reference the rule judged against: the robust centre
            for ``semantic``, the returned aggregate for the baselines (``nan`` for a non-finite row, 0 for
            a zero row).
        loss_score: the semantic stage's score of the row, (ℓ_0 − ℓ_j) / our own gain (1: lowers our private
            loss as much as our own update; below 0: raises it); ``None`` when the stage did not run.
        record: the sender's direction record at this receiver, its mean cosine with the reference over the
            rounds this receiver judged it, this one included (``guard.verdict.DirectionRecord``); ``None`` when
            the rule keeps none (every rule but ``semantic``, or no ``own_index``), for the receiver's own row, and
            for a non-finite row.
    """

    sender: str
    accepted: bool
    reason: str | None
    detail: str
    norm: float
    cosine: float
    loss_score: float | None = None
    record: float | None = None


@dataclass(frozen=True, eq=False)  # eq=False: it holds a tensor, whose == is elementwise
class GuardResult:
    """What a guard returns for one round: the aggregate and one verdict per sender.

    Args:
        aggregate: ``(d,)`` vector to hand to the outer optimizer.
        verdicts: one :class:`Verdict` per row, in the order of ``ctx.senders``.
    """

    aggregate: torch.Tensor
    verdicts: tuple[Verdict, ...]


@runtime_checkable
class Aggregator(Protocol):
    """An aggregation rule: ``(n, d)`` rows in, one ``(d,)`` vector out."""

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Aggregate the rows.

        Args:
            updates: ``(n, d)`` float tensor, one row per sender in the order of ``ctx.senders``; not mutated.
            ctx: the round's context.

        Returns:
            ``(d,)`` tensor of the dtype and device of ``updates``.

        Raises:
            NotEnoughUpdates: when ``n`` is too small for the rule's f.
        """
        ...


@runtime_checkable
class JudgingAggregator(Aggregator, Protocol):
    """An aggregation rule that also decides, per row, whether the row was used (and why not)."""

    def judge(self, updates: torch.Tensor, ctx: AggregationContext) -> GuardResult:
        """Aggregate the rows and return one verdict per row, in the order of ``ctx.senders``.

        Raises:
            NotEnoughUpdates: when ``n`` is too small for the rule's f.
        """
        ...


def default_f(n: int) -> int:
    """Default number of Byzantine rows to tolerate among ``n``: a quarter, at least one, always feasible.

    f̂(n) = min(⌊(n − 1) / 2⌋, max(1, ⌊n / 4⌋))

    A quarter covers the 20 %-Byzantine operating point of the literature (f = 5 of n = 25 in Karimireddy et
    al. 2021) with one row of margin at n = 8 (f̂ = 2), and the outer ``min`` keeps ``2f̂ < n`` so a trimmed
    mean is always defined (f̂ = 0 for n ≤ 2, 1 for n = 3..7, 2 for n = 8..11).

    Args:
        n: number of rows, ``>= 0``.

    Returns:
        f̂, with ``0 <= 2 f̂ < max(n, 1)``.
    """
    return max(0, min((n - 1) // 2, max(1, n // 4)))


def breakdown_f(n: int) -> int:
    """The largest f̂ with 2f̂ < n: what a rule tolerates when it is not told f (no oracle).

    f̂(n) = ⌊(n − 1) / 2⌋  (0 for n ≤ 2)

    With f unknown, the only safe assumption for a robust centre is the breakdown point itself: a smaller
    f̂ (the former default ⌊n/4⌋) lets nearest-neighbour mixing blend attacker rows into every honest row as
    soon as f > f̂ (measured: chance accuracy at 3 of 9), while f̂ = ⌊(n − 1)/2⌋ is correct for every f < n/2.

    Args:
        n: number of rows, ``>= 0``.
    """
    return max(0, (n - 1) // 2)


def resolve_f(f: int | None, ctx: AggregationContext, n: int) -> int:
    """The f a rule uses this call: its own ``f`` if set, else ``ctx.f``, else :func:`default_f` of ``n``."""
    if f is not None:
        return f
    if ctx.f is not None:
        return ctx.f
    return default_f(n)


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Check that a hyper-parameter is an int (not a bool) ``>= minimum``.

    Raises:
        ValueError: naming the parameter and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_real(name: str, value: object, *, minimum: float, inclusive: bool = False) -> float:
    """Check that a hyper-parameter is a finite real number above ``minimum`` (or equal, if ``inclusive``).

    Raises:
        ValueError: naming the parameter and the value.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or (value < minimum if inclusive else value <= minimum)
    ):
        bound = ">=" if inclusive else ">"
        raise ValueError(f"{name} must be a finite number {bound} {minimum}, got {value!r}")
    return float(value)


def check_stack(updates: torch.Tensor, f: int, *, needed_rows: int, needed: str) -> int:
    """Check a stack of rows against a rule's precondition and return its number of rows.

    Args:
        updates: the rows given to the rule, expected ``(n, d)``.
        f: the Byzantine count the rule uses this call.
        needed_rows: the least ``n`` the rule accepts.
        needed: the precondition in words, for the error (``"n > 2f"``).

    Returns:
        ``n``.

    Raises:
        ValueError: when ``updates`` is not 2-D (a local bug, not a peer's fault).
        NotEnoughUpdates: when ``n < needed_rows``.
    """
    if updates.dim() != 2:
        raise ValueError(f"updates must be (n, d), got shape {tuple(updates.shape)}")
    n = int(updates.shape[0])
    if n < needed_rows:
        raise NotEnoughUpdates(n, f, needed)
    return n
