"""Small signed records published in the DHT beside commits: presence, commit-phase close and state hashes.

Wire form (msgpack): ``[body, signature]`` where ``body`` is the msgpack encoding of
``[kind, protocol_version, run_id, round, sender, value]`` and ``signature`` is the Ed25519 signature of
``RECORD_SIGNING_CONTEXT + body`` by the key inside the PeerID ``sender``.

- ``kind == "state"``: ``value`` is the 32-byte hash of (θ_round, outer momentum) that the sender holds at
  the start of outer round ``round``. Peers that fell behind download a state whose hash a majority agrees on.
- ``kind == "presence"``: ``value`` is the round the sender is working on (a hint only: it is self-reported
  and never trusted for anything but deciding how long to wait for commits).
- ``kind == "close"``: the sender's commit phase of round ``round`` has closed; ``value`` is the number of
  commits in its closed set, its own included (informational). Peers reveal their payload only once every
  other sender of their own closed set has published one (or after a bounded wait).
- ``kind == "leave"``: the sender has left the swarm (a clean stop: Ctrl+C, SIGTERM, or its last round done);
  stored under the presence key in place of its presence record. ``round`` is the round it was in and
  ``value`` the DHT time (whole seconds since the epoch) at which it left; readers honour it for
  ``LEAVE_VALID_S`` only, so an old leave record replayed later says nothing.
- ``kind == "shard"``: ``value`` is ``[shard_index, num_shards]``, two ints in [0, 2⁶³): the data shard the sender
  trains, out of the ``num_shards`` it cuts the data into; ``round`` is the round it was in when it signed.
  Stored under its own key (``swarm.records.shards_key``), never under the presence key: older readers take a
  presence value for a round and refuse any other type. Informational only (``swarm.shard_claims``): a reader
  checks the range itself and never trusts the number for anything but choosing a shard and showing coverage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from p2p_guard.identity import Identity, verify
from p2p_guard.protocol.envelope import PROTOCOL_VERSION
from p2p_guard.protocol.reasons import Rejected, RejectReason

__all__ = ["RECORD_KINDS", "SignedRecord", "open_record", "open_signed_record", "sign_record"]

RECORD_KINDS = ("state", "presence", "close", "leave", "shard")
#: Domain separation: a record signature can never be replayed as an envelope signature, or vice versa.
RECORD_SIGNING_CONTEXT = b"p2p_guard.record\x00"
MAX_RECORD_BYTES = 1024
_MAX_STR = 256
_MAX_INT64 = 2**63 - 1
#: Bounds :func:`open_signed_record` puts on the kind and run strings (UTF-8 bytes) and on the round.
MAX_KIND_BYTES = 64
_MAX_ROUND = 2**63 - 1


@dataclass(frozen=True)
class SignedRecord:
    """A verified record: who signed what, for which run and round.

    Attributes:
        kind: ``"state"``, ``"presence"``, ``"close"``, ``"leave"`` or ``"shard"``.
        run_id: the run the record belongs to.
        round: the outer round it refers to.
        sender: the signer's PeerID bytes (its public key is inside).
        value: ``bytes`` (32-byte state hash) for ``state``; ``int`` for ``presence`` (round), ``close``
            (commits in the closed set) and ``leave`` (DHT time it left, whole seconds); ``[shard_index,
            num_shards]`` (two ints) for ``shard``.
    """

    kind: str
    run_id: str
    round: int
    sender: bytes
    value: Any


def sign_record(kind: str, run_id: str, round_: int, value: Any, identity: Identity) -> bytes:
    """Sign and serialise a record.

    Args:
        kind: one of :data:`RECORD_KINDS`.
        run_id: run name.
        round_: outer round number (>= 0).
        value: 32 bytes for ``state``; a non-negative int for ``presence``, ``close`` and ``leave``;
            ``[shard_index, num_shards]`` for ``shard``.
        identity: the signer.

    Returns:
        The wire bytes (at most :data:`MAX_RECORD_BYTES`).

    Raises:
        ValueError: if ``kind`` is unknown.
    """
    if kind not in RECORD_KINDS:
        raise ValueError(f"kind must be one of {RECORD_KINDS}; got kind={kind!r}")
    body = msgpack.packb([kind, PROTOCOL_VERSION, run_id, int(round_), identity.peer_id, value], use_bin_type=True)
    return msgpack.packb([body, identity.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)


def open_record(data: object, *, kind: str | tuple[str, ...], run_id: str) -> SignedRecord | Rejected:
    """Parse and verify a record read from the DHT. Never raises on hostile bytes.

    Args:
        data: whatever the DHT returned (expected ``bytes``).
        kind: the expected record kind, or a tuple of accepted kinds (``("presence", "leave")`` under the
            presence key); the record's own kind is in the result.
        run_id: the expected run.

    Returns:
        The verified :class:`SignedRecord`, or :class:`Rejected` with the reason.
    """
    if not isinstance(data, bytes):
        return Rejected(RejectReason.DECODE_ERROR, f"record is {type(data).__name__}, not bytes")
    if len(data) > MAX_RECORD_BYTES:
        return Rejected(RejectReason.OVERSIZE, f"record of {len(data)} bytes > {MAX_RECORD_BYTES}")
    parsed = _unpack(data)
    if isinstance(parsed, Rejected):
        return parsed
    if len(parsed) != 2:
        return Rejected(RejectReason.DECODE_ERROR, "record is not an array [body, signature]")
    body, signature = parsed
    fields = _unpack(body)
    if isinstance(fields, Rejected):
        return fields
    return _check_fields(fields, body, signature, kind=kind, run_id=run_id)


def _unpack(data: bytes) -> list[Any] | Rejected:
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=MAX_RECORD_BYTES,
                                max_str_len=_MAX_STR, max_array_len=8, max_map_len=0, max_ext_len=0)
    except Exception as e:  # noqa: BLE001 - any parser failure on hostile bytes is a rejection
        return Rejected(RejectReason.DECODE_ERROR, f"msgpack: {type(e).__name__}")
    if not isinstance(value, list):
        return Rejected(RejectReason.DECODE_ERROR, "record is not a msgpack array")
    return value


def _check_fields(fields: list[Any], body: Any, signature: Any, *, kind: str | tuple[str, ...], run_id: str
                  ) -> SignedRecord | Rejected:
    if len(fields) != 6 or not isinstance(body, bytes) or not isinstance(signature, bytes):
        return Rejected(RejectReason.DECODE_ERROR, "record has the wrong structure")
    r_kind, version, r_run, r_round, sender, value = fields
    if type(version) is not int or version != PROTOCOL_VERSION:
        return Rejected(RejectReason.UNSUPPORTED_VERSION, f"protocol version {version!r}")
    if not isinstance(r_kind, str) or (r_kind not in kind if isinstance(kind, tuple) else r_kind != kind):
        return Rejected(RejectReason.DECODE_ERROR, f"record kind {str(r_kind)[:64]!r}, expected {kind!r}")
    if not isinstance(sender, bytes):
        return Rejected(RejectReason.DECODE_ERROR, "sender is not bytes")
    if not signature:
        return Rejected(RejectReason.UNSIGNED, "empty signature")
    if not verify(sender, RECORD_SIGNING_CONTEXT + body, signature):
        return Rejected(RejectReason.BAD_SIGNATURE, "signature does not match the sender's PeerID")
    if r_run != run_id:
        return Rejected(RejectReason.WRONG_RUN, f"run {r_run!r}")
    if not isinstance(r_round, int) or isinstance(r_round, bool) or not 0 <= r_round <= _MAX_INT64:
        return Rejected(RejectReason.DECODE_ERROR, f"round {r_round!r}")
    if r_kind == "state":
        valid_value = isinstance(value, bytes) and len(value) == 32
    elif r_kind == "shard":
        valid_value = isinstance(value, list) and len(value) == 2 and all(_is_count(v) for v in value)
    else:
        valid_value = _is_count(value)
    if not valid_value:
        return Rejected(RejectReason.DECODE_ERROR, f"bad {r_kind} value")
    return SignedRecord(kind=r_kind, run_id=r_run, round=r_round, sender=sender, value=value)


def _is_count(value: Any) -> bool:
    """An int in [0, 2⁶³) that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT64


def open_signed_record(data: object, *, max_bytes: int = MAX_RECORD_BYTES) -> SignedRecord | Rejected:
    """Authenticate a record of any kind and run, without judging its value. Never raises on hostile bytes.

    For a DHT record validator, which must tell who signed a record and for which run and round before any
    reader looks at it, including kinds it does not know (``votes``). A reader still opens the record with
    :func:`open_record` (or the opener of its kind), which also checks the value.

    Checks, first failure wins: ``bytes`` (``DECODE_ERROR``); ``len(data) ≤ max_bytes`` (``OVERSIZE``); the
    structure ``[body: bin, signature: bin]`` and ``body = [kind, version, run_id, round, sender, value]``
    with any msgpack value (``DECODE_ERROR``); ``version == 1`` as an int (``UNSUPPORTED_VERSION``);
    ``kind`` a str of 1..64 UTF-8 bytes, ``run_id`` a str of 1..256, ``round`` an int in [0, 2**63),
    ``sender`` bin (``DECODE_ERROR``); a non-empty signature (``UNSIGNED``) that verifies against ``sender`` over
    ``RECORD_SIGNING_CONTEXT ‖ body`` (``BAD_SIGNATURE``).

    Args:
        data: the raw record, possibly hostile.
        max_bytes: largest accepted record (bytes).

    Returns:
        The authenticated :class:`SignedRecord` (``value`` as parsed, unchecked), or :class:`Rejected`.
    """
    if not isinstance(data, bytes):
        return Rejected(RejectReason.DECODE_ERROR, f"record is {type(data).__name__}, not bytes")
    if len(data) > max_bytes:
        return Rejected(RejectReason.OVERSIZE, f"record of {len(data)} bytes > {max_bytes}")
    outer = _unpack_bounded(data, max_bytes)
    if isinstance(outer, Rejected):
        return outer
    if len(outer) != 2 or type(outer[0]) is not bytes or type(outer[1]) is not bytes:
        return Rejected(RejectReason.DECODE_ERROR, "record is not an array [body: bin, signature: bin]")
    body, signature = outer
    fields = _unpack_bounded(body, max_bytes)
    if isinstance(fields, Rejected):
        return fields
    if len(fields) != 6:
        return Rejected(RejectReason.DECODE_ERROR, f"record body has {len(fields)} fields, expected 6")
    r_kind, version, r_run, r_round, sender, value = fields
    if type(version) is not int or version != PROTOCOL_VERSION:
        return Rejected(RejectReason.UNSUPPORTED_VERSION, f"protocol version {str(version)[:20]}")
    if type(r_kind) is not str or not 1 <= len(r_kind.encode("utf-8")) <= MAX_KIND_BYTES:
        return Rejected(RejectReason.DECODE_ERROR, "record kind is not a str of 1..64 bytes")
    if type(r_run) is not str or not 1 <= len(r_run.encode("utf-8")) <= _MAX_STR:
        return Rejected(RejectReason.DECODE_ERROR, "record run_id is not a str of 1..256 bytes")
    if type(r_round) is not int or not 0 <= r_round <= _MAX_ROUND:
        return Rejected(RejectReason.DECODE_ERROR, "record round is not an int in [0, 2**63)")
    if type(sender) is not bytes:
        return Rejected(RejectReason.DECODE_ERROR, "sender is not bytes")
    if not signature:
        return Rejected(RejectReason.UNSIGNED, "empty signature")
    if not verify(sender, RECORD_SIGNING_CONTEXT + body, signature):
        return Rejected(RejectReason.BAD_SIGNATURE, "signature does not match the sender's PeerID")
    return SignedRecord(kind=r_kind, run_id=r_run, round=r_round, sender=sender, value=value)


def _unpack_bounded(data: bytes, max_bytes: int) -> list[Any] | Rejected:
    """A msgpack array (maps with str or bin keys allowed inside, no ext types); errors → DECODE_ERROR."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True, max_bin_len=max_bytes,
                                max_str_len=max_bytes, max_array_len=max_bytes, max_map_len=max_bytes,
                                max_ext_len=0)
    except Exception as e:  # noqa: BLE001 - any parser failure on hostile bytes is a rejection
        return Rejected(RejectReason.DECODE_ERROR, f"msgpack: {type(e).__name__}")
    if type(value) is not list:
        return Rejected(RejectReason.DECODE_ERROR, "record is not a msgpack array")
    return value
