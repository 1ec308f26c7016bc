"""Digests: of a payload (what a sender commits to) and of the model state (what honest peers agree on).

    payload_digest(b) = root(b), the root of b's two-level hash tree (``protocol.chunks``, protocol version 3)
    state_hash(v_1, ..., v_k) = SHA-256("p2p_guard.state.v1\\0" ‖ u64(k) ‖ u64(numel v_1) ‖ f32le(v_1) ‖ ... )

where ``u64`` is an unsigned 64-bit little-endian integer and ``f32le`` the raw IEEE-754 float32
little-endian bytes of a flat tensor. Mixing in the count and the lengths makes ``state_hash(a, b)`` differ
from ``state_hash(concat(a, b))`` and from any other split. The hash is over bits: ``-0.0`` and ``0.0``, or
two NaN payloads, hash differently, which is what "bit-for-bit identical models" means.

References:
    [1] NIST, "Secure Hash Standard (SHS)", FIPS 180-4, 2015 (SHA-256).
"""

from __future__ import annotations

import hashlib
import logging
import struct

import numpy as np
import torch

from p2p_guard.protocol.chunks import payload_root

logger = logging.getLogger(__name__)

#: Length in bytes of every digest and hash in the protocol.
DIGEST_BYTES = 32
_STATE_HASH_CONTEXT = b"p2p_guard.state.v1\x00"


def payload_digest(data: bytes | bytearray | memoryview) -> bytes:
    """The hash-tree root of a payload: what an envelope's ``digest`` commits to.

    A receiver checks a streamed payload chunk by chunk against the same root with
    :class:`p2p_guard.protocol.chunks.ChunkVerifier`; this function hashes a payload held whole.

    Args:
        data: The payload bytes (bytes, bytearray or memoryview).

    Returns:
        The 32-byte root (formula in ``protocol.chunks``).
    """
    return payload_root(data)


def state_hash(*vectors: torch.Tensor) -> bytes:
    """Hash flat float32 vectors (the model θ, the outer momentum, ...) in order, lengths mixed in.

    Args:
        *vectors: Flat ``(d_k,)`` ``torch.float32`` tensors, on any device.

    Returns:
        The 32-byte SHA-256 hash (formula in the module docstring).

    Raises:
        TypeError: A vector is not a float32 tensor.
        ValueError: A vector is not 1-D.
    """
    hasher = hashlib.sha256(_STATE_HASH_CONTEXT)
    hasher.update(struct.pack("<Q", len(vectors)))
    for index, vector in enumerate(vectors):
        if not isinstance(vector, torch.Tensor) or vector.dtype != torch.float32:
            raise TypeError(f"vector {index} must be a torch.float32 tensor, got {_describe(vector)}")
        if vector.dim() != 1:
            raise ValueError(f"vector {index} must be flat (d,), got shape {tuple(vector.shape)}")
        array = np.ascontiguousarray(vector.detach().cpu().numpy(), dtype="<f4")
        hasher.update(struct.pack("<Q", array.size))
        hasher.update(memoryview(array).cast("B"))
    return hasher.digest()


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    return type(value).__name__
