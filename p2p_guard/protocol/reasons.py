"""The result of every check on network input: :class:`Accepted` or :class:`Rejected` with a reason.

A check never raises on hostile input; it returns one of these. Reasons are an Enum so that they can be
counted, written to the event stream (``reason.value``) and acted on (provable faults ban at once).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

logger = logging.getLogger(__name__)


class RejectReason(Enum):
    """Why a peer's envelope, payload or record was rejected. Values are lower snake case strings."""

    #: The envelope carries an empty signature.
    UNSIGNED = "unsigned"
    #: The signature does not verify against the sender's PeerID (or the PeerID holds no Ed25519 key).
    BAD_SIGNATURE = "bad_signature"
    #: The envelope's protocol version is not one this peer speaks.
    UNSUPPORTED_VERSION = "unsupported_version"
    #: The envelope belongs to another training run.
    WRONG_RUN = "wrong_run"
    #: The envelope is for another outer round (a replay or a clock skew).
    WRONG_ROUND = "wrong_round"
    #: The update was computed from another model state than this round's θ_r.
    STALE_BASE = "stale_base"
    #: The bytes do not parse, a field has the wrong type or bound, or the codec is unknown or not allowed.
    DECODE_ERROR = "decode_error"
    #: The declared tensor shapes differ from the model's.
    SHAPE_MISMATCH = "shape_mismatch"
    #: More bytes than allowed or than declared.
    OVERSIZE = "oversize"
    #: The decoded update holds NaN or ±Inf.
    NON_FINITE = "non_finite"
    #: The decoded update is all zeros: no computation behind it (a free rider).
    ZERO_UPDATE = "zero_update"
    #: The served payload's digest differs from the signed, committed digest.
    DIGEST_MISMATCH = "digest_mismatch"
    #: Two valid signatures by one sender on different digests for the same round.
    EQUIVOCATION = "equivocation"
    #: The payload or record did not arrive before the deadline, or its sender stalled or trickled it.
    TIMEOUT = "timeout"
    #: The sender could not be reached or refused to serve its payload.
    UNAVAILABLE = "unavailable"
    #: This peer's reputation excludes the sender: our own guard rejected it persistently and the votes we
    #: weigh agree (``guard.reputation``). Not a fault of this update: the sender is not judged at all.
    EXCLUDED = "excluded"
    #: The commit appeared only after this peer's commit phase had closed (it may be adapted to, or copied
    #: from, payloads revealed since); it is never fetched nor applied.
    LATE_COMMIT = "late_commit"


CIRCUMSTANTIAL_REASONS = frozenset(r.value for r in (
    RejectReason.WRONG_ROUND, RejectReason.STALE_BASE, RejectReason.TIMEOUT, RejectReason.UNAVAILABLE,
    RejectReason.EXCLUDED, RejectReason.LATE_COMMIT,
))
"""Rejection reasons that say when, or whether, an update arrived, not what it holds.

A slow, loaded, restarted or clock-skewed honest volunteer earns them; none is evidence that an update is
malicious, so the reputation counts none of them against its sender, in our own verdicts and in others' votes
(``swarm.standing``, ``protocol.votes.Votes.as_map``): such a sender is treated as not judged that round.
Withholding peers are handled where it hurts, in the fetch (``swarm.suspects``, the unreachable give-up)."""

COPYABLE_REASONS = frozenset(("duplicate", "colluding"))
"""Guard rejections that other senders can cause by copying the sender's update: not evidence against it.

``duplicate`` (``guard.duplicates.DUPLICATE``) rejects every row within a small distance of another sender's
row, the original with its copies; ``colluding`` (``guard.collusion.COLLUDING``) rejects a sender whose history
of residuals aligns with two others', which it does when two senders keep copying it (``mimic``). Byzantine
peers that copy an honest peer thereby get its rows rejected; were these rejections strikes, they could get it
excluded (issue 9, rule 5: an honest peer is never excluded because Byzantine peers act against it). The rows
stay rejected (out of the aggregate); the reputation treats their senders as not judged that round, like the
circumstantial reasons. A copying attacker is therefore never excluded for its copies: it has to be caught by
some other evidence (a norm, direction or loss rejection, an edge row), or its copies are all it does."""

QUOTA_REASONS = frozenset(("not_selected",))
"""Rejections by a rule that keeps a fixed number of rows (``guard.verdict.NOT_SELECTED``: Multi-Krum keeps the m
best-scored of n): some rows are left out every round whatever they hold, so they are no evidence against their
senders. Counted as evidence they got honest senders excluded: in the digits acceptance cells of 3bfe864
(``p2p-guard bench robustness --acceptance digits``), where every peer runs the reputation, ``multi_krum``'s honest
receivers excluded honest senders in 48 of its 58 cells, 9 times in the cell without attackers."""

NOT_EVIDENCE_REASONS = CIRCUMSTANTIAL_REASONS | COPYABLE_REASONS | QUOTA_REASONS
"""Rejection reasons the reputation never counts against a sender, in our own verdicts and in others' votes
(``protocol.votes.judged_map``): :data:`CIRCUMSTANTIAL_REASONS`, :data:`COPYABLE_REASONS` and
:data:`QUOTA_REASONS`."""


@dataclass(frozen=True)
class Accepted:
    """A check passed."""

    @property
    def ok(self) -> bool:
        """Always True (so that ``result.ok`` works on both result types)."""
        return True


@dataclass(frozen=True)
class Rejected:
    """A check failed.

    Args:
        reason: Why.
        detail: A short human-readable explanation with the offending values (never key material or payloads).
        evidence: For faults a third party can verify (equivocation): the signed bytes that prove it, e.g.
            both signed envelopes. Empty otherwise. A bad signature proves nothing about the claimed sender
            (anyone can forge one in its name), and a digest mismatch is only attributable to the peer that
            served the bytes over an authenticated stream, so neither carries evidence.

    Raises:
        TypeError: ``reason`` is not a :class:`RejectReason` or ``detail`` not a string (a local bug).
    """

    reason: RejectReason
    detail: str = ""
    evidence: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.reason, RejectReason):
            raise TypeError(f"reason must be a RejectReason, got {type(self.reason).__name__}")
        if not isinstance(self.detail, str):
            raise TypeError(f"detail must be a str, got {type(self.detail).__name__}")

    @property
    def ok(self) -> bool:
        """Always False."""
        return False
