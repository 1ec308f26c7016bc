"""Equivocation proofs: two envelopes validly signed by one sender for one run and round, different digests.

A sender that signs two different commitments for the same round can show one update to some peers and
another to the rest, which splits the honest models. Its two signatures are proof of the fault that anyone can
check offline, with nothing but the PeerID inside the envelopes (``p2p-guard verify-proof FILE``). A proof
therefore travels: an honest peer that holds one bans the sender and republishes the proof, and every peer
that reads it bans the sender too, without having seen both messages.

Wire form (msgpack, version 1)::

    proof = msgpack([magic: str, version: int, envelope_a: bin, envelope_b: bin])

    magic       "p2p_guard.equivocation"  (:data:`PROOF_MAGIC`)
    version     :data:`PROOF_VERSION` = 1
    envelope_*  the two signed commit envelopes exactly as their sender published them (``protocol.envelope``)

:func:`make_proof` writes the two envelopes in bytewise order, so two peers that catch the same pair write
identical bytes; :func:`verify_proof` accepts either order. A proof is valid when both envelopes open
(``open_envelope``: structure, version, signature against the sender's PeerID), they name the same sender,
run and round, and their payload digests differ.

This module is pure: no I/O, no hivemind. :class:`EquivocationDetector` is the bounded memory a receiver keeps
of the first envelope it saw per (run, round, sender), to turn a conflicting one into a proof.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgpack

from p2p_guard.identity import peer_id_to_b58
from p2p_guard.protocol.envelope import MAX_ENVELOPE_BYTES, Envelope, open_envelope
from p2p_guard.protocol.reasons import Rejected, RejectReason

__all__ = [
    "MAX_PROOF_OVERHEAD_BYTES",
    "PROOF_MAGIC",
    "PROOF_VERSION",
    "EquivocationDetector",
    "EquivocationProof",
    "make_proof",
    "max_proof_bytes",
    "verify_proof",
]

logger = logging.getLogger(__name__)

#: First element of every proof (it keeps a proof from ever parsing as an envelope or a record).
PROOF_MAGIC = "p2p_guard.equivocation"
#: The proof format this code writes and reads.
PROOF_VERSION = 1
SUPPORTED_PROOF_VERSIONS: tuple[int, ...] = (1,)
#: Bytes of a proof beyond its two envelopes: array header, magic, version and two bin headers (≤ 38).
MAX_PROOF_OVERHEAD_BYTES = 64
_DETAIL_CHARS = 200


def max_proof_bytes(max_envelope_bytes: int = MAX_ENVELOPE_BYTES) -> int:
    """Largest proof :func:`verify_proof` reads: two envelopes and the fixed overhead.

    Args:
        max_envelope_bytes: Largest accepted envelope.

    Returns:
        ``2 · max_envelope_bytes + MAX_PROOF_OVERHEAD_BYTES``.
    """
    return 2 * max_envelope_bytes + MAX_PROOF_OVERHEAD_BYTES


@dataclass(frozen=True)
class EquivocationProof:
    """A verified equivocation: one sender's two signed envelopes for one round, with different digests.

    Attributes:
        sender: The accused PeerID bytes (both envelopes are signed by the key inside it).
        run_id: The run both envelopes name.
        round: The round both envelopes name.
        envelope_a: The first signed envelope, wire bytes (the bytewise smaller one from :func:`make_proof`).
        envelope_b: The second signed envelope, wire bytes.
        digest_a: ``envelope_a``'s payload digest (32 bytes).
        digest_b: ``envelope_b``'s payload digest (32 bytes), different from ``digest_a``.
    """

    sender: bytes
    run_id: str
    round: int
    envelope_a: bytes
    envelope_b: bytes
    digest_a: bytes
    digest_b: bytes

    @property
    def sender_b58(self) -> str:
        """The accused PeerID as base58 text (``12D3KooW...``)."""
        return peer_id_to_b58(self.sender)

    def to_bytes(self) -> bytes:
        """The canonical wire form (:func:`make_proof` of the two envelopes)."""
        return _pack(self.envelope_a, self.envelope_b)

    def rejection(self) -> Rejected:
        """The verdict against the sender: ``Rejected(EQUIVOCATION)`` carrying both envelopes as evidence."""
        return Rejected(
            RejectReason.EQUIVOCATION,
            f"{self.sender_b58} signed two digests for run {self.run_id!r} round {self.round}: "
            f"{self.digest_a.hex()[:16]}… and {self.digest_b.hex()[:16]}…",
            evidence=(self.envelope_a, self.envelope_b),
        )


def make_proof(
    env_bytes_a: bytes, env_bytes_b: bytes, *, max_envelope_bytes: int = MAX_ENVELOPE_BYTES
) -> bytes:
    """Build the transferable proof that the sender of two envelopes equivocated.

    Args:
        env_bytes_a: One signed envelope, wire bytes, as received.
        env_bytes_b: The other one.
        max_envelope_bytes: Largest accepted envelope.

    Returns:
        The proof bytes (the envelopes in bytewise order, so the result does not depend on argument order).

    Raises:
        ValueError: The pair does not prove equivocation (the message gives :func:`verify_proof`'s reason);
            a peer only builds a proof from envelopes it has opened itself, so this is a local bug.
    """
    if not isinstance(env_bytes_a, (bytes, bytearray)) or not isinstance(env_bytes_b, (bytes, bytearray)):
        raise ValueError("both envelopes must be bytes")
    data = _pack(bytes(env_bytes_a), bytes(env_bytes_b))
    result = verify_proof(data, max_envelope_bytes=max_envelope_bytes)
    if isinstance(result, Rejected):
        raise ValueError(f"not an equivocation proof: {result.reason.value}: {result.detail}")
    return data


def verify_proof(
    data: object, *, max_envelope_bytes: int = MAX_ENVELOPE_BYTES
) -> EquivocationProof | Rejected:
    """Check an equivocation proof, offline, against nothing but the PeerID inside it.

    Checks, first failure wins: bytes (``DECODE_ERROR``); size ≤ :func:`max_proof_bytes` (``OVERSIZE``);
    structure ``[magic, version, bin, bin]`` (``DECODE_ERROR``); version (``UNSUPPORTED_VERSION``); each
    envelope opens (its own reason: ``DECODE_ERROR``, ``OVERSIZE``, ``UNSUPPORTED_VERSION``, ``UNSIGNED``,
    ``BAD_SIGNATURE``); same sender (``DECODE_ERROR``); same run (``WRONG_RUN``); same round
    (``WRONG_ROUND``); different payload digests (``DECODE_ERROR``).

    Args:
        data: The proof bytes, possibly hostile.
        max_envelope_bytes: Largest accepted envelope (the proof may be twice that plus a small overhead).

    Returns:
        The verified :class:`EquivocationProof`, or :class:`Rejected`. Never raises on any ``data``.

    Raises:
        ValueError: ``max_envelope_bytes`` is not a positive int (a local configuration bug).
    """
    if (
        isinstance(max_envelope_bytes, bool)
        or not isinstance(max_envelope_bytes, int)
        or max_envelope_bytes <= 0
    ):
        raise ValueError(f"max_envelope_bytes must be a positive int, got {max_envelope_bytes!r}")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return Rejected(RejectReason.DECODE_ERROR, f"proof must be bytes, got {type(data).__name__}")
    limit = max_proof_bytes(max_envelope_bytes)
    if len(data) > limit:
        return Rejected(RejectReason.OVERSIZE, f"proof is {len(data)} bytes, limit {limit}")
    fields = _unpack(data, max_envelope_bytes)
    if isinstance(fields, Rejected):
        return fields
    magic, version, raw_a, raw_b = fields
    if version not in SUPPORTED_PROOF_VERSIONS:
        return Rejected(
            RejectReason.UNSUPPORTED_VERSION,
            f"proof version {version}, supported {list(SUPPORTED_PROOF_VERSIONS)}",
        )
    opened: list[Envelope] = []
    for name, raw in (("a", raw_a), ("b", raw_b)):
        env = open_envelope(raw, max_bytes=max_envelope_bytes)
        if isinstance(env, Rejected):
            return Rejected(env.reason, f"envelope {name}: {env.detail}"[:_DETAIL_CHARS])
        opened.append(env)
    env_a, env_b = opened
    if env_a.sender != env_b.sender:
        return Rejected(
            RejectReason.DECODE_ERROR, "the envelopes have different senders: not one sender's equivocation"
        )
    if env_a.run_id != env_b.run_id:
        return Rejected(
            RejectReason.WRONG_RUN,
            f"the envelopes are for different runs ({env_a.run_id[:40]!r}, {env_b.run_id[:40]!r})",
        )
    if env_a.round != env_b.round:
        return Rejected(
            RejectReason.WRONG_ROUND, f"the envelopes are for different rounds ({env_a.round}, {env_b.round})"
        )
    if env_a.digest == env_b.digest:
        return Rejected(
            RejectReason.DECODE_ERROR, "the envelopes commit to the same payload digest: not an equivocation"
        )
    return EquivocationProof(
        sender=env_a.sender,
        run_id=env_a.run_id,
        round=env_a.round,
        envelope_a=raw_a,
        envelope_b=raw_b,
        digest_a=env_a.digest,
        digest_b=env_b.digest,
    )


class EquivocationDetector:
    """Bounded memory of the first envelope seen per (run, round, sender), to catch a conflicting second one.

    Feed it every envelope that :func:`~p2p_guard.protocol.envelope.open_envelope` accepted (from DHT reads,
    from every poll of the commit phase). The first envelope per (run, round, sender) is kept; a later one
    with another digest yields a proof. The memory holds at most ``max_entries`` envelopes; the oldest is
    forgotten first, so an attacker flooding it can make it forget, never grow.

    Args:
        max_entries: How many (run, round, sender) entries to keep (≥ 1).
        max_envelope_bytes: Largest accepted envelope.

    Raises:
        ValueError: ``max_entries`` is not a positive int.
    """

    def __init__(self, *, max_entries: int = 4096, max_envelope_bytes: int = MAX_ENVELOPE_BYTES) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries <= 0:
            raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
        self.max_entries = max_entries
        self.max_envelope_bytes = max_envelope_bytes
        self._first: OrderedDict[tuple[str, int, bytes], tuple[bytes, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._first)

    def observe(self, raw: bytes, env: Envelope) -> EquivocationProof | None:
        """Remember ``env`` if it is the first of its (run, round, sender); return a proof if it conflicts.

        Args:
            raw: The envelope's wire bytes, exactly as received (the evidence).
            env: What ``open_envelope(raw)`` returned (already authenticated).

        Returns:
            The verified proof when an earlier envelope of the same (run, round, sender) committed to another
            digest, else None. A ``raw`` that does not open to ``env`` never yields a proof.
        """
        key = (env.run_id, env.round, env.sender)
        first = self._first.get(key)
        if first is None:
            self._first[key] = (env.digest, bytes(raw))
            while len(self._first) > self.max_entries:
                self._first.popitem(last=False)
            return None
        digest, first_raw = first
        if digest == env.digest:
            return None
        result = verify_proof(_pack(first_raw, bytes(raw)), max_envelope_bytes=self.max_envelope_bytes)
        if isinstance(result, Rejected):
            logger.debug("conflicting envelopes did not make a proof: %s", result.detail)
            return None
        return result


def _pack(env_bytes_a: bytes, env_bytes_b: bytes) -> bytes:
    first, second = sorted((env_bytes_a, env_bytes_b))
    return bytes(msgpack.packb([PROOF_MAGIC, PROOF_VERSION, first, second], use_bin_type=True))


def _unpack(data: Any, max_envelope_bytes: int) -> tuple[str, int, bytes, bytes] | Rejected:
    """Parse ``[magic, version, bin, bin]`` strictly; any parser error becomes ``Rejected(DECODE_ERROR)``."""
    try:
        fields = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_bin_len=max_envelope_bytes,
            max_str_len=len(PROOF_MAGIC),
            max_array_len=4,
            max_map_len=0,
            max_ext_len=0,
        )
    except Exception as error:  # noqa: BLE001 - the parse boundary: any parser failure is a decode error
        return Rejected(RejectReason.DECODE_ERROR, f"msgpack: {type(error).__name__}: {str(error)[:100]}")
    if type(fields) is not list or len(fields) != 4 or fields[0] != PROOF_MAGIC:
        return Rejected(RejectReason.DECODE_ERROR, f"not an array [{PROOF_MAGIC!r}, version, bin, bin]")
    if type(fields[1]) is not int:
        return Rejected(RejectReason.DECODE_ERROR, "proof version is not an int")
    if type(fields[2]) is not bytes or type(fields[3]) is not bytes:
        return Rejected(RejectReason.DECODE_ERROR, "proof envelopes are not bin")
    return fields[0], fields[1], fields[2], fields[3]
