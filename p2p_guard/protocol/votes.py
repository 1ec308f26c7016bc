"""Signed ``votes`` records: the verdicts one peer gave on the senders of one round.

A ``votes`` record is a signed record of ``protocol.records`` (same wire form, same signing context) whose
``kind`` is ``"votes"`` and whose ``value`` is the list of the voter's verdicts:

    wire      = msgpack array(2) [ body: bin, signature: bin ]                  (≤ MAX_VOTES_BYTES = 64 KiB)
    body      = msgpack array(6) [ "votes", protocol_version: int, run_id: str, round: int, voter: bin,
                                   verdicts ]
    verdicts  = msgpack array(≤ 256) of array(3) [ sender: bin(38), accepted: bool, reason: str(≤ 64 B) ]
    signature = Ed25519-sign(voter's key, "p2p_guard.record\\0" ‖ body)

``sender`` is the Ed25519 PeerID (38 bytes) of a peer whose commit the voter judged in ``round``;
``accepted`` is whether the voter aggregated that sender's update; ``reason`` is the voter's reason string
(``accepted``, ``outlier``, a :class:`~p2p_guard.protocol.reasons.RejectReason` value, ``excluded`` …),
informational only. A sender appears at most once. :func:`sign_votes` writes the verdicts sorted by
sender bytes, so a voter's record is a deterministic function of its verdicts.

Domain separation: the body starts with the kind, so a ``votes`` signature never verifies as a ``presence``
or ``state`` record, and the record context ``p2p_guard.record\\0`` differs from the envelope context, so it
never verifies as a commit either. The DHT validator (``swarm.validator``) authenticates these records with
:func:`~p2p_guard.protocol.records.open_signed_record` (structure, version, signature; the value is not
judged there); readers open them with :func:`open_votes`, which also checks the kind, run, round and value.

A vote is an opinion, never evidence: anyone can accuse anyone. ``guard.reputation`` decides what votes
may change (they never exclude a sender on their own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from p2p_guard.identity import PEER_ID_BYTES, PEER_ID_PREFIX, Identity, peer_id_to_b58
from p2p_guard.protocol.envelope import PROTOCOL_VERSION
from p2p_guard.protocol.reasons import NOT_EVIDENCE_REASONS, Rejected, RejectReason
from p2p_guard.protocol.records import RECORD_SIGNING_CONTEXT, open_signed_record

__all__ = [
    "EDGE_REASON",
    "OPPOSED_REASON",
    "STRIKE_REASONS",
    "MAX_VOTE_REASON_BYTES",
    "MAX_VOTES_BYTES",
    "MAX_VOTES_SENDERS",
    "VOTES_KIND",
    "VoteVerdict",
    "Votes",
    "evidence_map",
    "judged_map",
    "open_votes",
    "sign_votes",
]

#: The reason of an accepted verdict on an edge row (``guard.reputation.edge_rows``): aggregated, but at the edge
#: of what the guard lets through; it counts as a strike, not as an acceptance, in :func:`evidence_map`.
EDGE_REASON = "edge"
#: The reason of an accepted verdict on an opposed row (``guard.reputation.opposed_rows``): aggregated, but pointing
#: away from the guard's reference; a strike, like an edge row, in :func:`evidence_map`.
OPPOSED_REASON = "opposed"
#: The reasons of accepted verdicts that count as strikes (not as acceptances) in :func:`evidence_map`.
STRIKE_REASONS = frozenset({EDGE_REASON, OPPOSED_REASON})
#: The ``kind`` field of a votes record.
VOTES_KIND = "votes"
#: Most verdicts one record may carry (one per sender of the round).
MAX_VOTES_SENDERS = 256
#: Longest reason string (UTF-8 bytes).
MAX_VOTE_REASON_BYTES = 64
#: Largest votes record on the wire; equal to ``swarm.validator.DEFAULT_MAX_VOTES_BYTES``. A full record
#: (256 verdicts with 64-byte reasons) takes about 28 KiB.
MAX_VOTES_BYTES = 64 * 1024
_MAX_RUN_BYTES = 256
_MAX_ROUND = 2**63 - 1


@dataclass(frozen=True)
class VoteVerdict:
    """One verdict inside a votes record.

    Attributes:
        sender: The judged sender's Ed25519 PeerID (38 bytes).
        accepted: Whether the voter aggregated the sender's update.
        reason: The voter's reason (informational; at most :data:`MAX_VOTE_REASON_BYTES` UTF-8 bytes).
    """

    sender: bytes
    accepted: bool
    reason: str = ""

    @property
    def sender_b58(self) -> str:
        """The sender's PeerID as base58 text."""
        return peer_id_to_b58(self.sender)


@dataclass(frozen=True)
class Votes:
    """A verified votes record.

    Attributes:
        run_id: The run.
        round: The outer round the verdicts were given in.
        voter: The signer's PeerID bytes.
        verdicts: The verdicts, sorted by sender bytes, one per sender.
    """

    run_id: str
    round: int
    voter: bytes
    verdicts: tuple[VoteVerdict, ...]

    @property
    def voter_b58(self) -> str:
        """The voter's PeerID as base58 text."""
        return peer_id_to_b58(self.voter)

    def as_map(self) -> dict[str, bool]:
        """``{sender PeerID b58: accepted}``, the shape :meth:`Reputation.update` takes per voter.

        Rejections for a reason in ``reasons.NOT_EVIDENCE_REASONS`` (circumstantial: late, timed out, stale...;
        copyable: ``duplicate``, ``colluding``) are left out: they are not evidence against the sender's update, so
        the voter counts as not having judged it.
        """
        return evidence_map(self.verdicts)


def judged_map(verdicts: Iterable[VoteVerdict]) -> dict[str, bool]:
    """``{sender PeerID b58: accepted}`` of ``verdicts``, without rejections that are no evidence against the sender.

    A rejection whose reason is in ``reasons.CIRCUMSTANTIAL_REASONS`` (late, timed out, stale, unreachable...)
    says nothing about the sender's update; one in ``reasons.COPYABLE_REASONS`` (``duplicate``, ``colluding``)
    other senders can cause by copying it. Either way the sender counts as not judged (``guard.reputation``);
    the row itself stays rejected.
    """
    return {v.sender_b58: v.accepted for v in verdicts if v.accepted or v.reason not in NOT_EVIDENCE_REASONS}


def evidence_map(verdicts: Iterable[VoteVerdict]) -> dict[str, bool]:
    """:func:`judged_map` with edge and opposed rows (:data:`STRIKE_REASONS`) counted as not accepted: the ballots.

    ``guard.reputation`` counts an edge row as a strike against its sender: aggregated, but at the edge of what
    the guard lets through (longer than 2.3 times the round's median norm); and an opposed row, aggregated but
    pointing away from the guard's reference (cosine below −0.1).
    """
    return {v.sender_b58: v.accepted and v.reason not in STRIKE_REASONS
            for v in verdicts if v.accepted or v.reason not in NOT_EVIDENCE_REASONS}


def sign_votes(run_id: str, round_: int, verdicts: Iterable[VoteVerdict], identity: Identity) -> bytes:
    """Sign and serialise this peer's verdicts of one round.

    Args:
        run_id: The run (1..256 UTF-8 bytes).
        round_: The outer round the verdicts were given in, ``0 ≤ round_ < 2**63``.
        verdicts: At most :data:`MAX_VOTES_SENDERS` verdicts, one per sender (any order; written sorted
            by sender bytes).
        identity: The voter.

    Returns:
        The wire bytes (at most :data:`MAX_VOTES_BYTES`).

    Raises:
        ValueError: A field is out of bounds, a sender is not an Ed25519 PeerID, or a sender repeats
            (all local bugs: a peer votes only on senders it judged).
    """
    if type(run_id) is not str or not 1 <= len(run_id.encode("utf-8")) <= _MAX_RUN_BYTES:
        raise ValueError(f"run_id must be a str of 1..{_MAX_RUN_BYTES} UTF-8 bytes, got {run_id!r}")
    if type(round_) is not int or not 0 <= round_ <= _MAX_ROUND:
        raise ValueError(f"round_ must be an int in [0, 2**63), got {round_!r}")
    items = list(verdicts)
    if len(items) > MAX_VOTES_SENDERS:
        raise ValueError(f"at most {MAX_VOTES_SENDERS} verdicts per record, got {len(items)}")
    seen: set[bytes] = set()
    for item in items:
        problem = _verdict_problem(item.sender, item.accepted, item.reason)
        if problem:
            raise ValueError(f"bad verdict: {problem}")
        if item.sender in seen:
            raise ValueError(f"sender {peer_id_to_b58(item.sender)} appears twice")
        seen.add(item.sender)
    value = [[v.sender, v.accepted, v.reason] for v in sorted(items, key=lambda v: v.sender)]
    body = msgpack.packb([VOTES_KIND, PROTOCOL_VERSION, run_id, round_, identity.peer_id, value],
                         use_bin_type=True)
    return msgpack.packb([body, identity.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)


def open_votes(data: object, *, run_id: str, round_: int | None = None,
               max_bytes: int = MAX_VOTES_BYTES) -> Votes | Rejected:
    """Parse and verify a votes record read from the DHT. Never raises on hostile input.

    Checks, first failure wins: everything :func:`~p2p_guard.protocol.records.open_signed_record` checks
    (``DECODE_ERROR``, ``OVERSIZE``, ``UNSUPPORTED_VERSION``, ``UNSIGNED``, ``BAD_SIGNATURE``); the kind is
    ``"votes"`` (``DECODE_ERROR``); ``run_id`` (``WRONG_RUN``); ``round_`` when given (``WRONG_ROUND``); the
    value is an array of at most :data:`MAX_VOTES_SENDERS` entries ``[sender, accepted, reason]`` with an
    Ed25519 PeerID, a bool and a str of at most :data:`MAX_VOTE_REASON_BYTES` bytes, no sender twice
    (``DECODE_ERROR``). The subkey check (voter = subkey) is the reader's (``swarm.votes.read_votes``).

    Args:
        data: The raw record (expected ``bytes``).
        run_id: The expected run.
        round_: The expected round, or None to accept any.
        max_bytes: Largest accepted record (bytes).

    Returns:
        The verified :class:`Votes`, or :class:`Rejected` with the reason.
    """
    record = open_signed_record(data, max_bytes=max_bytes)
    if isinstance(record, Rejected):
        return record
    if record.kind != VOTES_KIND:
        return Rejected(RejectReason.DECODE_ERROR, f"record kind {record.kind[:64]!r}, expected 'votes'")
    if record.run_id != run_id:
        return Rejected(RejectReason.WRONG_RUN, f"run {record.run_id[:64]!r}")
    if round_ is not None and record.round != round_:
        return Rejected(RejectReason.WRONG_ROUND, f"round {record.round}, expected {round_}")
    verdicts = _parse_verdicts(record.value)
    if isinstance(verdicts, Rejected):
        return verdicts
    return Votes(run_id=record.run_id, round=record.round, voter=record.sender, verdicts=verdicts)


def _parse_verdicts(value: Any) -> tuple[VoteVerdict, ...] | Rejected:
    if type(value) is not list:
        return Rejected(RejectReason.DECODE_ERROR, "votes value is not an array")
    if len(value) > MAX_VOTES_SENDERS:
        return Rejected(RejectReason.DECODE_ERROR, f"{len(value)} verdicts > {MAX_VOTES_SENDERS}")
    out: dict[bytes, VoteVerdict] = {}
    for index, entry in enumerate(value):
        if type(entry) is not list or len(entry) != 3:
            return Rejected(RejectReason.DECODE_ERROR, f"verdict {index} is not [sender, accepted, reason]")
        sender, accepted, reason = entry
        problem = _verdict_problem(sender, accepted, reason)
        if problem:
            return Rejected(RejectReason.DECODE_ERROR, f"verdict {index}: {problem}")
        if sender in out:
            return Rejected(RejectReason.DECODE_ERROR, f"verdict {index}: sender appears twice")
        out[sender] = VoteVerdict(sender=sender, accepted=accepted, reason=reason)
    return tuple(out[s] for s in sorted(out))


def _verdict_problem(sender: object, accepted: object, reason: object) -> str:
    """Why one verdict is malformed, or ``""``."""
    if type(sender) is not bytes or len(sender) != PEER_ID_BYTES or not sender.startswith(PEER_ID_PREFIX):
        return "sender is not an Ed25519 PeerID (38 bytes)"
    if type(accepted) is not bool:
        return "accepted is not a bool"
    if type(reason) is not str or _utf8_length(reason) > MAX_VOTE_REASON_BYTES:
        return f"reason is not a str of at most {MAX_VOTE_REASON_BYTES} UTF-8 bytes"
    return ""


def _utf8_length(text: str) -> int:
    """Length of ``text`` in UTF-8; a string that has no UTF-8 form (lone surrogates) counts as too long."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return MAX_VOTE_REASON_BYTES + 1

