"""Codecs: a flat float32 update ⇄ the payload bytes a peer serves.

    fp32: payload = float32 little-endian bytes of Δ                (4 bytes per parameter)
    fp16: payload = float16 little-endian bytes of Δ (round to nearest even)  (2 bytes per parameter)

An fp16 value above 65504 in magnitude becomes ±Inf, which a receiver rejects as ``NON_FINITE``: an honest
sender clips or uses fp32. Decoding always returns float32.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from p2p_guard.protocol.reasons import RejectReason, Rejected

logger = logging.getLogger(__name__)

#: Names of the codecs this protocol version speaks.
CODECS: tuple[str, ...] = ("fp32", "fp16")
_NUMPY_DTYPES = {"fp32": "<f4", "fp16": "<f2"}


def expected_payload_bytes(codec: str, numel: int) -> int:
    """Exact payload size for ``numel`` parameters in ``codec``.

    Args:
        codec: A name from :data:`CODECS`.
        numel: Number of parameters d (≥ 0).

    Returns:
        Size in bytes: 4·d for fp32, 2·d for fp16.

    Raises:
        ValueError: Unknown codec or negative ``numel``.
    """
    dtype = _numpy_dtype(codec)
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        raise ValueError(f"numel must be a non-negative int, got {numel!r}")
    return np.dtype(dtype).itemsize * numel


def encode_update(vector: torch.Tensor, codec: str) -> bytes:
    """Encode a flat update.

    Args:
        vector: ``(d,)`` floating-point tensor on any device (NaN/Inf are encoded as they are).
        codec: A name from :data:`CODECS`.

    Returns:
        ``expected_payload_bytes(codec, d)`` bytes.

    Raises:
        ValueError: Unknown codec, or ``vector`` is not a flat floating-point tensor.
    """
    dtype = _numpy_dtype(codec)
    if not isinstance(vector, torch.Tensor) or not vector.is_floating_point() or vector.dim() != 1:
        raise ValueError(f"vector must be a flat (d,) floating-point tensor, got {_describe(vector)}")
    array = vector.detach().to(device="cpu", dtype=torch.float32).numpy()
    with np.errstate(over="ignore"):  # fp16 overflow to ±Inf is documented; the receiver rejects it
        return array.astype(dtype, copy=False).tobytes()


def decode_update(payload: bytes, codec: str, numel: int) -> torch.Tensor | Rejected:
    """Decode a payload into a flat float32 update.

    Args:
        payload: The received bytes (bytes, bytearray or memoryview), possibly hostile.
        codec: The codec named in the (already checked) envelope.
        numel: Number of parameters d the model has.

    Returns:
        A new ``(numel,)`` ``torch.float32`` CPU tensor (it may hold NaN/Inf; the guard checks that), or
        ``Rejected(DECODE_ERROR)`` for an unknown codec or a payload whose length is not exactly
        ``expected_payload_bytes(codec, numel)``. Never raises on a hostile payload.
    """
    if not isinstance(codec, str) or codec not in _NUMPY_DTYPES:
        return Rejected(RejectReason.DECODE_ERROR, f"unknown codec {str(codec)[:32]!r}")
    expected = expected_payload_bytes(codec, numel)
    if len(payload) != expected:
        return Rejected(RejectReason.DECODE_ERROR,
                        f"{codec} payload for {numel} parameters is {expected} bytes, got {len(payload)}")
    array = np.frombuffer(payload, dtype=_NUMPY_DTYPES[codec]).astype(np.float32)
    return torch.from_numpy(array)


def _numpy_dtype(codec: str) -> str:
    dtype = _NUMPY_DTYPES.get(codec) if isinstance(codec, str) else None
    if dtype is None:
        raise ValueError(f"unknown codec {codec!r}; known: {', '.join(CODECS)}")
    return dtype


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
