"""protocol: the wire format. Pure functions and frozen dataclasses; no I/O, no hivemind.

Module map:
    reasons.py: :class:`RejectReason` (Enum) and the check results :class:`Accepted` /
        :class:`Rejected` ``(reason, detail, evidence)``.
    envelope.py: :data:`PROTOCOL_VERSION`, the signed commit :class:`Envelope`, :func:`sign_envelope`,
        :func:`open_envelope` (size → structure → version → signature; never raises),
        :func:`envelope_message` and :func:`pack_envelope` (for tests and simulated attackers).
    codecs.py: :data:`CODECS` (``fp32``, ``fp16``, ``int8``, ``int4``, ``topk``), :func:`parse_codec` (a codec
        string such as ``topk:density=0.05`` → :class:`CodecSpec`), :func:`encode_update`,
        :func:`decode_update`, :func:`expected_payload_bytes` (exact size from codec and d),
        :func:`payload_cap_bytes` (the per-codec hard cap: the size of :data:`MAX_PARAMETERS` parameters).
    quantized.py / sparse.py: the int8 / int4 and top-k codecs (layouts and size formulas).
    chunks.py: the payload hash tree (1 MiB chunks, a SHA-256 per chunk, the root over the digest list) and
        :class:`ChunkVerifier`, which checks a streamed payload chunk by chunk against the committed root.
    digests.py: :func:`payload_digest` (the hash-tree root of a payload) and :func:`state_hash` (SHA-256 of
        the flat model state, lengths mixed in).
    records.py: the small signed DHT records beside commits (presence, state hash); import from the module.

The checks that depend on the round (run, round, base hash, shapes, codec, sizes, digest, finiteness) are
stage 1 of the guard: ``p2p_guard.guard.integrity``.
"""

from p2p_guard.protocol.chunks import PAYLOAD_CHUNK_BYTES, ChunkVerifier, payload_root
from p2p_guard.protocol.codecs import (
    CODECS,
    LOSSLESS_CODECS,
    MAX_PARAMETERS,
    CodecSpec,
    codec_spec,
    decode_update,
    encode_update,
    expected_payload_bytes,
    parse_codec,
    payload_cap_bytes,
)
from p2p_guard.protocol.digests import DIGEST_BYTES, payload_digest, state_hash
from p2p_guard.protocol.envelope import (
    BODY_FIELDS,
    ENVELOPE_SIGNING_CONTEXT,
    MAX_ENVELOPE_BYTES,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Envelope,
    envelope_message,
    open_envelope,
    pack_envelope,
    sign_envelope,
)
from p2p_guard.protocol.reasons import Accepted, Rejected, RejectReason

__all__ = [
    "BODY_FIELDS",
    "CODECS",
    "DIGEST_BYTES",
    "ENVELOPE_SIGNING_CONTEXT",
    "MAX_ENVELOPE_BYTES",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "LOSSLESS_CODECS",
    "MAX_PARAMETERS",
    "PAYLOAD_CHUNK_BYTES",
    "Accepted",
    "ChunkVerifier",
    "CodecSpec",
    "Envelope",
    "RejectReason",
    "Rejected",
    "codec_spec",
    "decode_update",
    "encode_update",
    "envelope_message",
    "expected_payload_bytes",
    "open_envelope",
    "pack_envelope",
    "parse_codec",
    "payload_digest",
    "payload_cap_bytes",
    "payload_root",
    "sign_envelope",
    "state_hash",
]
