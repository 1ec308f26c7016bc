"""Dense quantized codecs: ``int8`` and ``int4``, symmetric, one float32 absmax scale per chunk.

The flat update x of length d is cut into m = ⌈d / C⌉ chunks of C consecutive values (the last one holds
L = d − (m − 1)·C values). For chunk j with values x_j, and q_max = 127 (int8) or 7 (int4)::

    s_j = max_i |x_j,i| / q_max                       (float32; 0 for an all-zero chunk)
    q_j,i = clamp(round_half_even(x_j,i / s_j), −q_max, q_max)     (0 where s_j = 0)
    decode: x̂_j,i = q_j,i · s_j                       (float32)

so |x − x̂| ≤ s_j / 2 per value. Payload layout and size (bytes, exact):

    int8 (C = 1024): scales: m × float32 LE ‖ codes: d × int8            → 4·m + d
    int4 (C = 64):   scales: m × float32 LE ‖ codes: ⌈d / 2⌉ bytes      → 4·m + ⌈d/2⌉

An int4 code is stored as the nibble u = q + 7 ∈ [0, 14]; value 2t is the low nibble of byte t, value 2t + 1
its high nibble; for odd d the high nibble of the last byte is padding and must be 0.

A decoder rejects (never raises): a non-finite scale (``NON_FINITE``), a negative scale, an int8 code −128,
an int4 nibble 15 or non-zero padding (``DECODE_ERROR``): none of them comes from an honest encoder. A NaN or
±Inf in the input makes its chunk's scale non-finite (its codes are 0), so the receiver rejects the update.

References:
    Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs", NeurIPS 2023, arXiv:2305.14314
    (blockwise absmax quantization, blocks of 64 for 4 bits).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from p2p_guard.protocol.reasons import Rejected, RejectReason

__all__ = [
    "INT4_CHUNK",
    "INT8_CHUNK",
    "INT8_QMAX",
    "chunk_count",
    "decode_int4",
    "decode_int8",
    "encode_int4",
    "encode_int8",
    "int4_payload_bytes",
    "int8_payload_bytes",
]

logger = logging.getLogger(__name__)

INT8_CHUNK = 1024
"""Values per scale of ``int8`` (scale overhead 4/1024 ≈ 0.4 %)."""
INT4_CHUNK = 64
"""Values per scale of ``int4`` (QLoRA's block size; scale overhead 4/64 = 1/16 byte per value)."""
INT8_QMAX = 127
"""q_max of ``int8``: codes in [−127, 127], s_j = max_i |x_j,i| / 127."""
_INT4_QMAX = 7
_INT4_FORBIDDEN = 15


def int8_payload_bytes(numel: int) -> int:
    """Exact ``int8`` payload size: 4·⌈d/1024⌉ + d bytes for d = ``numel`` (≥ 0)."""
    return 4 * chunk_count(numel, INT8_CHUNK) + numel


def int4_payload_bytes(numel: int) -> int:
    """Exact ``int4`` payload size: 4·⌈d/64⌉ + ⌈d/2⌉ bytes for d = ``numel`` (≥ 0)."""
    return 4 * chunk_count(numel, INT4_CHUNK) + (numel + 1) // 2


def encode_int8(vector: torch.Tensor) -> bytes:
    """Encode a flat float32 CPU ``(d,)`` tensor as ``int8`` (layout in the module docstring)."""
    scales, codes = _absmax_quantize(vector, INT8_CHUNK, INT8_QMAX)
    return scales.astype("<f4").tobytes() + codes.numpy().tobytes()


def encode_int4(vector: torch.Tensor) -> bytes:
    """Encode a flat float32 CPU ``(d,)`` tensor as ``int4`` (layout in the module docstring)."""
    scales, codes = _absmax_quantize(vector, INT4_CHUNK, _INT4_QMAX)
    nibbles = (codes + _INT4_QMAX).to(torch.uint8).numpy()
    if nibbles.size % 2:
        nibbles = np.concatenate([nibbles, np.zeros(1, dtype=np.uint8)])  # padding nibble 0
    packed: np.ndarray = nibbles[0::2] | (nibbles[1::2] << 4)
    return bytes(scales.astype("<f4").tobytes() + packed.tobytes())


def decode_int8(payload: bytes | bytearray | memoryview, numel: int) -> torch.Tensor | Rejected:
    """Decode an ``int8`` payload of exactly ``int8_payload_bytes(numel)`` bytes into ``(numel,)`` float32.

    Returns:
        A new CPU tensor, or :class:`Rejected` (reasons in the module docstring). Never raises.
    """
    m = chunk_count(numel, INT8_CHUNK)
    if len(payload) != int8_payload_bytes(numel):
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"int8 payload for {numel} values must be "
            f"{int8_payload_bytes(numel)} bytes, got {len(payload)}",
        )
    scales = np.frombuffer(payload, dtype="<f4", count=m)
    problem = check_scales(scales, "int8")
    if problem is not None:
        return problem
    codes = np.frombuffer(payload, dtype=np.int8, offset=4 * m, count=numel)
    if bool((codes == -128).any()):
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"{int((codes == -128).sum())} int8 codes are -128 " f"(the range is [-127, 127])",
        )
    return _dequantize(codes.astype(np.float32), scales, INT8_CHUNK)


def decode_int4(payload: bytes | bytearray | memoryview, numel: int) -> torch.Tensor | Rejected:
    """Decode an ``int4`` payload of exactly ``int4_payload_bytes(numel)`` bytes into ``(numel,)`` float32.

    Returns:
        A new CPU tensor, or :class:`Rejected` (reasons in the module docstring). Never raises.
    """
    m = chunk_count(numel, INT4_CHUNK)
    if len(payload) != int4_payload_bytes(numel):
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"int4 payload for {numel} values must be "
            f"{int4_payload_bytes(numel)} bytes, got {len(payload)}",
        )
    scales = np.frombuffer(payload, dtype="<f4", count=m)
    problem = check_scales(scales, "int4")
    if problem is not None:
        return problem
    packed = np.frombuffer(payload, dtype=np.uint8, offset=4 * m)
    nibbles = np.empty(2 * packed.size, dtype=np.uint8)
    nibbles[0::2] = packed & 0x0F
    nibbles[1::2] = packed >> 4
    if numel % 2 and nibbles[-1] != 0:
        return Rejected(RejectReason.DECODE_ERROR, f"int4 padding nibble is {int(nibbles[-1])}, must be 0")
    nibbles = nibbles[:numel]
    bad = int((nibbles == _INT4_FORBIDDEN).sum())
    if bad:
        return Rejected(RejectReason.DECODE_ERROR, f"{bad} int4 codes are 15 (the range is [0, 14])")
    return _dequantize(nibbles.astype(np.float32) - _INT4_QMAX, scales, INT4_CHUNK)


def check_scales(scales: np.ndarray, codec: str) -> Rejected | None:
    """Reject non-finite (``NON_FINITE``) or negative (``DECODE_ERROR``) per-chunk scales; else None."""
    finite = np.isfinite(scales)
    if not bool(finite.all()):
        return Rejected(
            RejectReason.NON_FINITE, f"{int((~finite).sum())} of {scales.size} {codec} scales are NaN or ±Inf"
        )
    if bool((scales < 0).any()):
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"{int((scales < 0).sum())} of {scales.size} {codec} scales are negative",
        )
    return None


def chunk_count(numel: int, chunk: int) -> int:
    """The number of chunks m = ⌈d / C⌉ (one scale each) of d = ``numel`` values (≥ 0), C = ``chunk`` a chunk."""
    return -(-numel // chunk)


def _absmax_quantize(vector: torch.Tensor, chunk: int, qmax: int) -> tuple[np.ndarray, torch.Tensor]:
    """Per-chunk scales ``(m,)`` float32 and codes ``(d,)`` int8 in [−qmax, qmax]."""
    d = vector.numel()
    m = chunk_count(d, chunk)
    padded = torch.zeros(m * chunk, dtype=torch.float32)
    padded[:d] = vector
    rows = padded.view(m, chunk)
    absmax = rows.abs().amax(dim=1) if m else torch.zeros(0)  # NaN propagates into the scale
    scales = absmax / qmax
    usable = torch.isfinite(scales) & (scales > 0)
    rows.div_(torch.where(usable, scales, torch.ones_like(scales))[:, None]).round_().clamp_(-qmax, qmax)
    if not bool(usable.all()):  # a zero, NaN or ±Inf scale: its codes are 0
        rows[~usable] = 0.0
    return scales.numpy(), padded[:d].to(torch.int8)


def _dequantize(codes: np.ndarray, scales: np.ndarray, chunk: int) -> torch.Tensor:
    """x̂ = q · s per chunk; ``codes`` is ``(d,)`` float32, ``scales`` ``(m,)`` float32."""
    d = codes.size
    m = scales.size
    flat = np.zeros(m * chunk, dtype=np.float32)
    flat[:d] = codes
    rows = flat.reshape(m, chunk)
    with np.errstate(over="ignore"):  # q·s beyond float32: ±Inf, which the integrity stage rejects
        rows *= scales.astype(np.float32)[:, None]
    return torch.from_numpy(np.ascontiguousarray(flat[:d]))
