"""One typed verdict per sender and round: what the peer decided about a sender's update, and why.

Every place that judges a sender builds a :class:`SenderVerdict`: the integrity checks (refused commit,
digest mismatch, timeout, ...), the ban of an equivocator, the reputation's exclusion, and the guard. The round's
verdicts feed the ``verdict`` events, the ``round`` summary, the signed votes (``swarm.votes``) and the
Prometheus counters (``swarm.metrics``), so they all read the same fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from p2p_guard.guard.verdict import finite_or_none
from p2p_guard.protocol.reasons import RejectReason

__all__ = ["SenderVerdict", "finite_or_none"]


@dataclass(frozen=True)
class SenderVerdict:
    """Our verdict on one sender's update of one round.

    Attributes:
        sender: the sender's PeerID (base58).
        commit_round: the round its update was committed into.
        accepted: True if its row went into our aggregate.
        reason: why it was rejected (a ``RejectReason`` value or a guard stage's reason, such as ``outlier``);
            the guard's reason for an accepted row (``accepted``), or None.
        detail: a human-readable explanation ("" if none).
        norm: the row's L2 norm (None: not judged by the guard, or not finite).
        cosine: its cosine to the guard's reference direction (None: not judged, or not finite).
        weight: the staleness weight its row carried (1.0 for a fresh update).
        staleness: rounds between its base round and ``commit_round`` (0: fresh).
        record: the sender's direction record at our guard (``guard.base.Verdict.record``; None: none kept).
    """

    sender: str
    commit_round: int
    accepted: bool
    reason: str | None = None
    detail: str = ""
    norm: float | None = None
    cosine: float | None = None
    weight: float = 1.0
    staleness: int = 0
    record: float | None = None

    @classmethod
    def rejected(cls, sender: str, commit_round: int, reason: RejectReason, detail: str) -> SenderVerdict:
        """A rejection before the guard (integrity, ban or exclusion), with its protocol reason."""
        return cls(sender=sender, commit_round=commit_round, accepted=False, reason=reason.value, detail=detail)

    @classmethod
    def judged(cls, sender: str, commit_round: int, accepted: bool, reason: str | None, detail: str,
               norm: float, cosine: float, weight: float, staleness: int,
               record: float | None = None) -> SenderVerdict:
        """The guard's verdict on a row; a non-finite ``norm``, ``cosine`` or ``record`` is recorded as None."""
        return cls(sender=sender, commit_round=commit_round, accepted=accepted, reason=reason, detail=detail,
                   norm=finite_or_none(norm), cosine=finite_or_none(cosine), weight=weight, staleness=staleness,
                   record=finite_or_none(record))

    def as_event(self) -> dict[str, Any]:
        """The fields of the ``verdict`` event (JSON-serialisable)."""
        return asdict(self)

