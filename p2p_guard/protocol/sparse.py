"""The ``topk`` codec: chunk-wise top-k by magnitude, 2-bit values, two float32 levels per chunk.

The flat update x of length d is cut into m = ⌈d / C⌉ chunks of C = 4096 consecutive values (the last one
holds L = d − (m − 1)·C). With density ρ ∈ (0, 1] (codec ``topk:density=ρ``, default 0.02)::

    k      = ⌈ρ · C⌉                         values kept per full chunk (C is a power of two, so ρ·C is
                                               exact in float64 and every implementation gets the same k)
    k_last = ⌈k · L / C⌉ (integer arithmetic)  values kept in a last, shorter chunk (L < C)
    K      = Σ_j k_j                          values kept in all

In chunk j the encoder keeps the k_j values of largest |x| (ties: any), and quantizes their magnitudes to
two levels lo_j ≤ hi_j: the optimal 1-D 2-means split of the sorted magnitudes (the top t to hi_j, the
rest to lo_j, t minimising the squared error), each level the mean of its group. A kept value decodes to
``±lo_j`` or ``±hi_j``; every other value decodes to 0.

Payload layout and size (bytes, exact; computable from (d, ρ) before any byte is read)::

    levels:  m × (lo_j, hi_j) float32 LE                                  8·m
    indices: K × uint16 LE, chunk by chunk, the positions inside the chunk,  2·K
             strictly increasing within a chunk, each < C (< L in the last)
    codes:   K 2-bit codes, four per byte, code t at bits 2(t mod 4)…+1 of   ⌈K / 4⌉
             byte ⌊t/4⌋; bit 0 = sign (1: negative), bit 1 = level (1: hi); the padding bits are 0

    size = 8·m + 2·K + ⌈K/4⌉       (ρ = 0.02: k = 82, about 0.047 bytes per parameter)

A decoder rejects (never raises): a non-finite level (``NON_FINITE``); a negative level, an index out of its
chunk, indices of a chunk that are not strictly increasing (duplicates, unsorted), non-zero padding bits
(``DECODE_ERROR``).

The dense set (``topk:density=ρ,dense=head``): the D coordinates of every tensor with at most one dimension
(biases, norm scales) and of the output layer (the last tensor with two or more dimensions and every tensor after
it, in flattening order) are sent exactly, as float16, and the other d − D through the layout above::

    payload = topk payload of the d − D other values (in flattening order)  topk_payload_bytes(d − D, ρ)
            + the D dense values, float16 LE, in flattening order          2·D

The set is a function of the model's parameter shapes alone (:func:`dense_mask`), which the envelope carries and
the receiver has checked against its own model before it decodes. A dense value that is not finite (fp16
overflow) is rejected (``NON_FINITE``). Why: on non-IID shards and on the char-GPT, the top-k of a flat update
starves the small tensors that differ most between peers (measured in ``docs/protocol.md`` §2).

References:
    Sarfi, Thérien, Lidin, Belilovsky, "Communication Efficient LLM Pre-training with SparseLoCo",
    arXiv:2508.15706, 2025 (chunk-wise top-k at 1–3 % density, 2-bit values, error feedback).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import torch

from p2p_guard.protocol.quantized import check_scales
from p2p_guard.protocol.reasons import Rejected, RejectReason

__all__ = [
    "TOPK_CHUNK",
    "TOPK_DEFAULT_DENSITY",
    "decode_topk",
    "decode_topk_dense",
    "dense_mask",
    "encode_topk",
    "encode_topk_dense",
    "topk_kept",
    "topk_payload_bytes",
    "topk_dense_payload_bytes",
    "topk_per_chunk",
]

logger = logging.getLogger(__name__)

TOPK_CHUNK = 4096
"""Values per chunk (indices fit in 12 bits, stored as uint16)."""
TOPK_DEFAULT_DENSITY = 0.02
"""Default density ρ: SparseLoCo's 1–3 % (Sarfi et al., arXiv:2508.15706, 2025)."""


def topk_per_chunk(density: float) -> int:
    """K = ⌈ρ·C⌉ for a full chunk, in [1, C].

    Raises:
        ValueError: ``density`` is not a finite number in (0, 1].
    """
    if isinstance(density, bool) or not isinstance(density, int | float) or not 0.0 < density <= 1.0:
        raise ValueError(f"density must be a number in (0, 1], got {density!r}")
    return max(1, min(TOPK_CHUNK, math.ceil(float(density) * TOPK_CHUNK)))


def topk_kept(numel: int, density: float) -> list[int]:
    """k_j of every chunk j (``[k, …, k, k_last]``) for d = ``numel``."""
    k = topk_per_chunk(density)
    full, last = divmod(numel, TOPK_CHUNK)
    return [k] * full + ([(k * last + TOPK_CHUNK - 1) // TOPK_CHUNK] if last else [])


def topk_payload_bytes(numel: int, density: float) -> int:
    """Exact ``topk`` payload size 8·m + 2·K + ⌈K/4⌉ for d = ``numel`` and density ρ."""
    k = topk_per_chunk(density)
    full, last = divmod(numel, TOPK_CHUNK)
    m = full + (1 if last else 0)
    kept = full * k + ((k * last + TOPK_CHUNK - 1) // TOPK_CHUNK if last else 0)
    return 8 * m + 2 * kept + (kept + 3) // 4


def encode_topk(vector: torch.Tensor, density: float) -> bytes:
    """Encode a flat float32 CPU ``(d,)`` tensor as ``topk`` with density ρ (layout: module docstring)."""
    k = topk_per_chunk(density)
    d = vector.numel()
    full, last = divmod(d, TOPK_CHUNK)
    parts = []
    if full:
        parts.append(_encode_rows(vector[: full * TOPK_CHUNK].view(full, TOPK_CHUNK), k))
    if last:
        parts.append(
            _encode_rows(vector[full * TOPK_CHUNK :].view(1, last), (k * last + TOPK_CHUNK - 1) // TOPK_CHUNK)
        )
    if not parts:
        return b""
    levels = np.concatenate([p[0] for p in parts])
    indices = np.concatenate([p[1] for p in parts])
    codes = np.concatenate([p[2] for p in parts])
    return levels.astype("<f4").tobytes() + indices.astype("<u2").tobytes() + _pack2(codes).tobytes()


def decode_topk(
    payload: bytes | bytearray | memoryview, numel: int, density: float
) -> torch.Tensor | Rejected:
    """Decode a ``topk`` payload of exactly ``topk_payload_bytes(numel, density)`` bytes into float32.

    Returns:
        A new CPU tensor, or :class:`Rejected` (reasons in the module docstring). Never raises.
    """
    expected = topk_payload_bytes(numel, density)
    if len(payload) != expected:
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"topk payload for {numel} values must be {expected} bytes, got {len(payload)}",
        )
    k = topk_per_chunk(density)
    full, last = divmod(numel, TOPK_CHUNK)
    k_last = (k * last + TOPK_CHUNK - 1) // TOPK_CHUNK if last else 0
    m = full + (1 if last else 0)
    kept = full * k + k_last
    levels = np.frombuffer(payload, dtype="<f4", count=2 * m)
    problem = check_scales(levels, "topk")
    if problem is not None:
        return problem
    indices = np.frombuffer(payload, dtype="<u2", offset=8 * m, count=kept).astype(np.int64)
    problem = _check_indices(indices[: full * k].reshape(full, k), TOPK_CHUNK, 0)
    if problem is None and last:
        problem = _check_indices(indices[full * k :].reshape(1, k_last), last, full)
    if problem is not None:
        return problem
    codes = _unpack2(np.frombuffer(payload, dtype=np.uint8, offset=8 * m + 2 * kept), kept)
    if isinstance(codes, Rejected):
        return codes
    chunk_of = np.repeat(np.arange(m), [k] * full + ([k_last] if last else []))
    pairs = levels.reshape(m, 2).astype(np.float32)
    values = np.where(codes & 2, pairs[chunk_of, 1], pairs[chunk_of, 0])
    values = np.where(codes & 1, -values, values).astype(np.float32)
    out = np.zeros(numel, dtype=np.float32)
    out[chunk_of * TOPK_CHUNK + indices] = values
    return torch.from_numpy(out)


def dense_mask(shapes: Sequence[Sequence[int]]) -> torch.Tensor:
    """The dense set of a model with these parameter shapes (flattening order), as a ``(d,)`` bool CPU tensor.

    True on every tensor with at most one dimension and on the output layer: the last tensor with two or more
    dimensions and every tensor after it (a model with none: the 1-D tensors only). Module docstring.
    """
    shapes = [tuple(int(n) for n in shape) for shape in shapes]
    last_matrix = max((i for i, shape in enumerate(shapes) if len(shape) >= 2), default=len(shapes))
    parts = [torch.full((math.prod(shape),), len(shape) <= 1 or i >= last_matrix, dtype=torch.bool)
             for i, shape in enumerate(shapes)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)


def topk_dense_payload_bytes(numel: int, density: float, dense: int) -> int:
    """Exact ``topk:…,dense=head`` payload size ``topk_payload_bytes(d − D, ρ) + 2·D`` (D = ``dense`` ≤ d)."""
    return topk_payload_bytes(numel - dense, density) + 2 * dense


def encode_topk_dense(vector: torch.Tensor, density: float, mask: torch.Tensor) -> bytes:
    """Encode a flat float32 CPU ``(d,)`` tensor: top-k of ``vector[~mask]``, then ``vector[mask]`` as float16.

    ``mask`` is :func:`dense_mask` of the model (``(d,)`` bool). A dense value beyond ±65504 becomes ±Inf, which a
    receiver rejects (``NON_FINITE``): the error feedback's encoder refuses such an update first.
    """
    runs = _runs(mask)
    with np.errstate(over="ignore"):
        dense = _gather(vector, runs, True).numpy().astype("<f2").tobytes()
    return encode_topk(_gather(vector, runs, False), density) + dense


def decode_topk_dense(
    payload: bytes | bytearray | memoryview, numel: int, density: float, mask: torch.Tensor
) -> torch.Tensor | Rejected:
    """Decode a ``topk:…,dense=head`` payload of exactly ``topk_dense_payload_bytes`` bytes into float32.

    Args:
        payload: the received bytes, possibly hostile.
        numel: d.
        density: ρ.
        mask: :func:`dense_mask` of the receiver's model (``(d,)`` bool; the envelope's shapes matched it).

    Returns:
        A new ``(d,)`` CPU tensor, or :class:`Rejected` (module docstring). Never raises.
    """
    if mask.numel() != numel:
        return Rejected(RejectReason.DECODE_ERROR, f"the model's dense set covers {mask.numel()} values, not {numel}")
    dense = int(mask.sum())
    expected = topk_dense_payload_bytes(numel, density, dense)
    if len(payload) != expected:
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"topk payload with {dense} dense values of {numel} must be {expected} bytes, got {len(payload)}",
        )
    split = expected - 2 * dense
    sparse = decode_topk(memoryview(payload)[:split], numel - dense, density)
    if isinstance(sparse, Rejected):
        return sparse
    exact = np.frombuffer(payload, dtype="<f2", offset=split, count=dense).astype(np.float32)
    if not bool(np.isfinite(exact).all()):
        return Rejected(RejectReason.NON_FINITE, "a dense value of the topk payload is NaN or ±Inf")
    out = torch.empty(numel, dtype=torch.float32)
    taken = {False: 0, True: 0}
    parts = {False: sparse, True: torch.from_numpy(exact)}
    for start, stop, is_dense in _runs(mask):  # slices, not a boolean index: 10× faster at d = 10⁷
        out[start:stop] = parts[is_dense][taken[is_dense] : taken[is_dense] + stop - start]
        taken[is_dense] += stop - start
    return out


def _runs(mask: torch.Tensor) -> list[tuple[int, int, bool]]:
    """The maximal runs ``(start, stop, value)`` of a ``(d,)`` bool mask, in order (one per tensor or fewer)."""
    values = mask.numpy()
    if values.size == 0:
        return []
    edges = [0, *(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist(), values.size]
    return [(a, b, bool(values[a])) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _gather(vector: torch.Tensor, runs: list[tuple[int, int, bool]], dense: bool) -> torch.Tensor:
    """The values of ``vector`` in the runs whose value is ``dense``, in order, as one contiguous tensor."""
    pieces = [vector[a:b] for a, b, value in runs if value == dense]
    return torch.cat(pieces) if pieces else vector.new_zeros(0)


def _check_indices(rows: np.ndarray, length: int, first_chunk: int) -> Rejected | None:
    """Each row (one chunk's indices) strictly increasing and < ``length``."""
    if rows.size == 0:
        return None
    if bool((rows >= length).any()):
        chunk = first_chunk + int(np.nonzero((rows >= length).any(axis=1))[0][0])
        return Rejected(RejectReason.DECODE_ERROR, f"topk chunk {chunk}: an index is >= its length {length}")
    steps = np.diff(rows, axis=1)
    if bool((steps <= 0).any()):
        chunk = first_chunk + int(np.nonzero((steps <= 0).any(axis=1))[0][0])
        kind = "repeats an index" if bool((steps == 0).any()) else "is not sorted"
        return Rejected(
            RejectReason.DECODE_ERROR, f"topk chunk {chunk} {kind} (indices must strictly increase)"
        )
    return None


def _encode_rows(rows: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levels ``(r·2,)`` float32, indices ``(r·k,)`` and 2-bit codes ``(r·k,)`` of ``(r, L)`` rows, k ≤ L."""
    values, order = torch.topk(rows.abs(), k, dim=1, largest=True, sorted=True)  # magnitudes, descending
    signed = torch.gather(rows, 1, order)
    lo, hi, split = _two_levels(values.double())
    level_bit = (torch.arange(k)[None, :] < split[:, None]).to(torch.uint8) << 1
    codes = level_bit | (signed < 0).to(torch.uint8)
    positions, by_index = torch.sort(order, dim=1)
    codes = torch.gather(codes, 1, by_index)
    levels = torch.stack([lo, hi], dim=1).to(torch.float32)
    return levels.reshape(-1).numpy(), positions.reshape(-1).numpy(), codes.reshape(-1).numpy()


def _two_levels(mags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Optimal 2-means of each row of descending magnitudes ``(r, k)`` float64.

    Returns:
        ``(lo (r,), hi (r,), t (r,))``: the top t values of a row go to hi (t ≥ 1), the rest to lo (lo = hi
        when t = k).
    """
    k = mags.shape[1]
    top = torch.cumsum(mags, dim=1)  # top[:, t-1] = sum of the top t
    total = top[:, -1:]
    counts = torch.arange(1, k + 1, dtype=torch.float64)[None, :]
    rest = (k - counts).clamp(min=1)
    gain = top**2 / counts + torch.where(counts < k, (total - top) ** 2 / rest, torch.zeros_like(top))
    gain = torch.nan_to_num(gain, nan=-math.inf)  # a NaN row keeps t = 1; its levels stay NaN
    split = torch.argmax(gain, dim=1) + 1  # maximising the explained sum of squares = minimising the error
    hi = torch.gather(top, 1, (split - 1)[:, None])[:, 0] / split
    lo_sum = total[:, 0] - torch.gather(top, 1, (split - 1)[:, None])[:, 0]
    lo = torch.where(split < k, lo_sum / (k - split).clamp(min=1), hi)
    return lo, hi, split


def _pack2(codes: np.ndarray) -> np.ndarray:
    """Pack 2-bit codes four per byte, the first code in the low bits; zero padding."""
    padded = np.zeros(-(-codes.size // 4) * 4, dtype=np.uint8)
    padded[: codes.size] = codes
    quads = padded.reshape(-1, 4)
    return quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4) | (quads[:, 3] << 6)


def _unpack2(packed: np.ndarray, count: int) -> np.ndarray | Rejected:
    """Unpack ``count`` 2-bit codes; padding bits must be 0."""
    codes = np.empty(4 * packed.size, dtype=np.uint8)
    for shift in range(4):
        codes[shift::4] = (packed >> (2 * shift)) & 3
    if bool(codes[count:].any()):
        return Rejected(RejectReason.DECODE_ERROR, "topk code padding bits are not zero")
    return codes[:count]
