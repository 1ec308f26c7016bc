"""The signed commit envelope: what a peer publishes about its update before anyone sees the payload.

Wire form (msgpack, version 3)::

    envelope  = msgpack([body, signature])                      # array of 2 bin
    body      = msgpack([protocol_version, run_id, round, sender, base_hash,
                         digest, codec, shapes, n_samples, payload_bytes, base_round])
    signature = Ed25519(sender's key, ENVELOPE_SIGNING_CONTEXT ‖ body)   # 64 bytes, or b"" if unsigned

with the body fields, in this order (see :data:`BODY_FIELDS`):

    ======================  ==========  ===============================================================
    protocol_version        int         :data:`PROTOCOL_VERSION`
    run_id                  str         training run, 1..256 UTF-8 bytes
    round                   int         outer round r, 0 ≤ r < 2**63
    sender                  bin         the signer's PeerID, 1..128 bytes (Ed25519: 38 bytes)
    base_hash               bin (32)    ``state_hash`` of the sender's state the update starts from: a claim,
                                        never a gate (version 2: every peer owns its model)
    digest                  bin (32)    root of the payload's hash tree (``protocol.chunks``: SHA-256 of the
                                        list of per-chunk SHA-256 digests, 1 MiB chunks); version 2 had
                                        the SHA-256 of the whole payload here
    codec                   str         payload codec (``fp32``, ``fp16``, ``int8``, ``int4``, ``topk``...),
                                        1..32 UTF-8 bytes
    shapes                  [[int]]     one shape per parameter tensor; ≤ 4096 tensors, rank ≤ 8
    n_samples               int         samples behind the update (informational, never a weight)
    payload_bytes           int         payload size in bytes, 0 ≤ size < 2**63
    base_round              int         the sender's round when its inner phase started, ≤ round; the
                                        staleness round − base_round only ever lowers the update's weight
    ======================  ==========  ===============================================================

The signature covers the exact body bytes, prefixed by a domain-separation context so that a signature made
for another p2p_guard message (a DHT record, a vote) can never pass as an envelope signature.
:func:`open_envelope` checks size, structure, version and signature, in that order; the round-specific
checks (run, round, base hash, shapes, codec, sizes) are stage 1 of the guard, ``guard/integrity.py``.

References:
    [1] msgpack specification, https://github.com/msgpack/msgpack/blob/master/spec.md
    [2] RFC 8032, "Edwards-Curve Digital Signature Algorithm (EdDSA)", 2017.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import msgpack

from p2p_guard.identity import Identity, verify
from p2p_guard.protocol.digests import DIGEST_BYTES
from p2p_guard.protocol.reasons import RejectReason, Rejected

logger = logging.getLogger(__name__)

#: The wire format version this code writes (3: the envelope's ``digest`` is the payload's hash-tree root, and
#: payloads stream as a digest list then chunks, each checked on arrival).
PROTOCOL_VERSION = 3
#: The versions :func:`open_envelope` accepts (version 1, the lock-step round, is gone: its peers cannot mix
#: with version 2's, whose models are their own; version 2 committed a whole-payload SHA-256, which a version 3
#: receiver cannot check chunk by chunk).
SUPPORTED_VERSIONS: tuple[int, ...] = (3,)
#: Default bound on a serialised envelope (bytes); larger input is rejected before parsing.
MAX_ENVELOPE_BYTES = 64 * 1024
#: Bounds on body fields (UTF-8 bytes for strings).
MAX_RUN_ID_BYTES = 256
MAX_CODEC_BYTES = 32
MAX_SENDER_BYTES = 128
MAX_TENSORS = 4096
MAX_RANK = 8
MAX_INT = 2**63 - 1
#: Prefix of every message an envelope signature covers (domain separation).
ENVELOPE_SIGNING_CONTEXT = b"p2p_guard.envelope\x00"
#: Body field order on the wire.
BODY_FIELDS: tuple[str, ...] = (
    "protocol_version", "run_id", "round", "sender", "base_hash",
    "digest", "codec", "shapes", "n_samples", "payload_bytes", "base_round",
)
_DETAIL_CHARS = 200


@dataclass(frozen=True)
class Envelope:
    """A peer's commitment to its update for one round (fields documented in the module docstring).

    ``shapes`` may be given as lists; it is stored as a tuple of tuples. Every field is checked on
    construction, so an :class:`Envelope` object is always structurally valid (its *round* validity is for
    ``guard.integrity.check_envelope``).

    Raises:
        TypeError: A field has the wrong type (``bool`` is not an ``int``).
        ValueError: A field is out of bounds.
    """

    protocol_version: int
    run_id: str
    round: int
    sender: bytes
    base_hash: bytes
    digest: bytes
    codec: str
    shapes: tuple[tuple[int, ...], ...]
    n_samples: int
    payload_bytes: int
    base_round: int | None = None

    def __post_init__(self) -> None:
        if self.base_round is None:  # a fresh update: computed on the state of its own round
            object.__setattr__(self, "base_round", self.round)
        for name in ("protocol_version", "round", "n_samples", "payload_bytes", "base_round"):
            _check_int(name, getattr(self, name))
        _check_str("run_id", self.run_id, MAX_RUN_ID_BYTES)
        _check_str("codec", self.codec, MAX_CODEC_BYTES)
        _check_bytes("sender", self.sender, 1, MAX_SENDER_BYTES)
        _check_bytes("base_hash", self.base_hash, DIGEST_BYTES, DIGEST_BYTES)
        _check_bytes("digest", self.digest, DIGEST_BYTES, DIGEST_BYTES)
        object.__setattr__(self, "shapes", _normalise_shapes(self.shapes))
        if self.base_round > self.round:  # type: ignore[operator]
            raise ValueError(f"base_round must be <= round, got base_round={self.base_round}, round={self.round}")

    @property
    def staleness(self) -> int:
        """round − base_round ≥ 0: how many rounds older than its round the update's starting state is."""
        return self.round - int(self.base_round)  # type: ignore[arg-type]

    @property
    def numel(self) -> int:
        """Total number of parameters the shapes declare, Σ_k Π shape_k."""
        return sum(math.prod(shape) for shape in self.shapes)


def envelope_message(env: Envelope) -> bytes:
    """The exact bytes an envelope signature covers: ``ENVELOPE_SIGNING_CONTEXT ‖ body``.

    Args:
        env: The envelope.

    Returns:
        The message to sign or verify.
    """
    return ENVELOPE_SIGNING_CONTEXT + _encode_body(env)


def pack_envelope(env: Envelope, signature: bytes) -> bytes:
    """Serialise an envelope with a given signature (``b""`` for unsigned), without signing.

    :func:`sign_envelope` is the normal path; this is for tests and simulated adversarial peers.

    Args:
        env: The envelope.
        signature: Any bytes to put in the signature slot.

    Returns:
        The wire bytes ``msgpack([body, signature])``.

    Raises:
        TypeError: ``signature`` is not bytes.
    """
    if not isinstance(signature, (bytes, bytearray)):
        raise TypeError(f"signature must be bytes, got {type(signature).__name__}")
    return msgpack.packb([_encode_body(env), bytes(signature)], use_bin_type=True)


def sign_envelope(env: Envelope, identity: Identity) -> bytes:
    """Sign an envelope and serialise it.

    Args:
        env: The envelope; ``env.sender`` must be ``identity.peer_id``.
        identity: The sender's key.

    Returns:
        The wire bytes ``msgpack([body, signature])``.

    Raises:
        ValueError: ``env.sender`` is not the identity's PeerID (the signature could never verify).
    """
    if env.sender != identity.peer_id:
        raise ValueError(f"envelope sender is not {identity.peer_id_b58}; refusing to sign for another peer")
    body = _encode_body(env)
    signature = identity.sign(ENVELOPE_SIGNING_CONTEXT + body)
    return msgpack.packb([body, signature], use_bin_type=True)


def open_envelope(data: bytes, *, max_bytes: int = MAX_ENVELOPE_BYTES) -> Envelope | Rejected:
    """Parse and authenticate a serialised envelope from the network.

    Checks, cheapest first: size (``OVERSIZE``), msgpack structure and field types and bounds
    (``DECODE_ERROR``), protocol version (``UNSUPPORTED_VERSION``), empty signature (``UNSIGNED``), signature
    against the key inside the sender's PeerID (``BAD_SIGNATURE``; also when the sender is not an Ed25519
    PeerID).

    Args:
        data: The received bytes, possibly hostile.
        max_bytes: Largest accepted input in bytes.

    Returns:
        The authenticated :class:`Envelope`, or :class:`Rejected`. Never raises on any ``data``.

    Raises:
        ValueError: ``max_bytes`` is not a positive int (a local configuration bug).
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return Rejected(RejectReason.DECODE_ERROR, f"envelope must be bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        return Rejected(RejectReason.OVERSIZE, f"envelope is {len(data)} bytes, limit {max_bytes}")
    outer = _unpack(data, max_bin_len=max_bytes, max_array_len=2)
    if isinstance(outer, Rejected):
        return outer
    if type(outer) is not list or len(outer) != 2 or not all(type(item) is bytes for item in outer):
        return Rejected(RejectReason.DECODE_ERROR, "envelope is not an array [body: bin, signature: bin]")
    body, signature = outer
    env = _decode_body(body)
    if isinstance(env, Rejected):
        return env
    if not signature:
        return Rejected(RejectReason.UNSIGNED, "empty signature")
    if not verify(env.sender, ENVELOPE_SIGNING_CONTEXT + body, signature):
        # No evidence attached: anyone can forge a bad signature in another peer's name, so this is a fault
        # of whoever delivered the bytes, not provably of ``env.sender``.
        return Rejected(RejectReason.BAD_SIGNATURE, "signature does not verify against the sender's PeerID")
    return env


def _decode_body(body: bytes) -> Envelope | Rejected:
    """Parse the signed body into an :class:`Envelope` (version first, then every field)."""
    version = _peek_version(body)
    if isinstance(version, Rejected):
        return version
    if version not in SUPPORTED_VERSIONS:
        return Rejected(RejectReason.UNSUPPORTED_VERSION,
                        f"protocol version {version}, supported {list(SUPPORTED_VERSIONS)}")
    fields = _unpack(body, max_bin_len=MAX_SENDER_BYTES, max_array_len=MAX_TENSORS,
                     max_str_len=max(MAX_RUN_ID_BYTES, MAX_CODEC_BYTES))
    if isinstance(fields, Rejected):
        return fields
    if type(fields) is not list or len(fields) != len(BODY_FIELDS):
        return Rejected(RejectReason.DECODE_ERROR, f"body is not an array of {len(BODY_FIELDS)} fields")
    try:
        return Envelope(*fields)
    except (TypeError, ValueError) as error:
        return Rejected(RejectReason.DECODE_ERROR, str(error)[:_DETAIL_CHARS])


def _peek_version(body: bytes) -> int | Rejected:
    """Read only the array header and first element of a body: the version, whatever layout follows."""
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=True, max_buffer_size=max(len(body), 1), max_bin_len=0, max_str_len=0,
        max_array_len=2**31, max_map_len=0, max_ext_len=0,
    )
    try:
        unpacker.feed(body)
        # An empty array has no version: without this check the byte after it was read as one (fuzzer, stop 14).
        version = unpacker.unpack() if unpacker.read_array_header() >= 1 else None
    except Exception:  # noqa: BLE001 - the parse boundary: any parser failure is a decode error
        version = None
    if type(version) is not int:
        return Rejected(RejectReason.DECODE_ERROR, "body is not an array starting with an int version")
    return version


def _unpack(data: bytes, *, max_bin_len: int, max_array_len: int, max_str_len: int = 0) -> Any:
    """``msgpack.unpackb`` with strict limits; every parser error becomes ``Rejected(DECODE_ERROR)``."""
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, use_list=True, max_bin_len=max_bin_len,
            max_str_len=max_str_len, max_array_len=max_array_len, max_map_len=0, max_ext_len=0,
        )
    except Exception as error:  # noqa: BLE001 - the parse boundary: any parser failure is a decode error
        return Rejected(RejectReason.DECODE_ERROR, f"msgpack: {type(error).__name__}: {str(error)[:100]}")


def _encode_body(env: Envelope) -> bytes:
    """msgpack the body fields in :data:`BODY_FIELDS` order."""
    fields = [getattr(env, name) for name in BODY_FIELDS]
    fields[BODY_FIELDS.index("shapes")] = [list(shape) for shape in env.shapes]
    return msgpack.packb(fields, use_bin_type=True)


def _check_int(name: str, value: object) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_INT:
        raise ValueError(f"{name} must be in [0, 2**63), got {value}")


def _check_str(name: str, value: object, max_bytes: int) -> None:
    if type(value) is not str:
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    size = len(value.encode("utf-8"))
    if not 1 <= size <= max_bytes:
        raise ValueError(f"{name} must be 1..{max_bytes} UTF-8 bytes, got {size}")


def _check_bytes(name: str, value: object, min_len: int, max_len: int) -> None:
    if type(value) is not bytes:
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    if not min_len <= len(value) <= max_len:
        bound = str(min_len) if min_len == max_len else f"{min_len}..{max_len}"
        raise ValueError(f"{name} must be {bound} bytes, got {len(value)}")


def _normalise_shapes(shapes: object) -> tuple[tuple[int, ...], ...]:
    """Check shapes (a sequence of ≤ MAX_TENSORS shapes of rank ≤ MAX_RANK, dims in [0, 2**63)) → tuples."""
    if not isinstance(shapes, (list, tuple)):
        raise TypeError(f"shapes must be a list of shapes, got {type(shapes).__name__}")
    if len(shapes) > MAX_TENSORS:
        raise ValueError(f"at most {MAX_TENSORS} tensors, got {len(shapes)}")
    normalised = []
    for index, shape in enumerate(shapes):
        if not isinstance(shape, (list, tuple)):  # torch.Size is a tuple; an ExtType fails the int check
            raise TypeError(f"shapes[{index}] must be a list of ints, got {type(shape).__name__}")
        if len(shape) > MAX_RANK:
            raise ValueError(f"shapes[{index}] has rank {len(shape)}, at most {MAX_RANK}")
        for dim in shape:
            _check_int(f"shapes[{index}] dimension", dim)
        normalised.append(tuple(shape))
    return tuple(normalised)
