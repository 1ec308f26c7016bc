"""Model states sent for mixing: a flat float32 θ (or outer momentum b) ⇄ the bytes of a state answer.

A mixing peer asks its neighbours for their states in one of :data:`STATE_PRECISIONS` (the third element of a
``["theta" | "momentum" | "mixed", key, PRECISION]`` request; two elements mean ``fp32``; docs/protocol.md §6,
§7.8). The answer's body, for d = ``numel`` values, is exactly (bytes):

    fp32    float32 LE                                             4·d
    fp16    float16 LE, round to nearest even                      2·d
    int8    the ``int8`` codec of ``protocol.quantized``:          4·⌈d/1024⌉ + d
            one float32 absmax scale per 1024 values, then d int8 codes

so the receiver knows the size from d and the precision it asked for, before it reads a byte, and never from
the answer's length (at d = 4 the float16 and int8 sizes coincide). The int8 form reuses the update codec's
encoder, decoder and size formula unchanged: a state and a pseudo-gradient in int8 are the same bytes.

:func:`decode_state` treats the bytes as hostile: a wrong length (``DECODE_ERROR``), a NaN, ±Inf (``NON_FINITE``)
or negative scale, an int8 code −128, or a decoded value that is not finite (a float16 ±Inf, or q·s beyond
float32) is returned as :class:`~p2p_guard.protocol.reasons.Rejected`, never raised.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from p2p_guard.protocol.quantized import (
    INT8_CHUNK,
    INT8_QMAX,
    chunk_count,
    decode_int8,
    encode_int8,
    int8_payload_bytes,
)
from p2p_guard.protocol.reasons import Rejected, RejectReason

__all__ = ["STATE_PRECISIONS", "decode_state", "encode_state", "int8_rounding_noise", "rounding_noise", "state_bytes"]

logger = logging.getLogger(__name__)

#: Precisions a state can be asked in (``PeerConfig.mix_precision``; ``swarm.config.MIX_PRECISIONS`` repeats
#: them, since that module imports no torch).
STATE_PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
_WIDTHS = {"fp32": "<f4", "fp16": "<f2"}


def _check_precision(precision: str) -> None:
    if precision not in STATE_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(STATE_PRECISIONS)}; got {precision!r}")


def state_bytes(precision: str, numel: int) -> int:
    """Exact size in bytes of a state answer of d = ``numel`` values in ``precision`` (module docstring).

    Args:
        precision: one of :data:`STATE_PRECISIONS`.
        numel: d, the model's parameter count (≥ 0).

    Returns:
        4·d (fp32), 2·d (fp16) or 4·⌈d/1024⌉ + d (int8) bytes.

    Raises:
        ValueError: an unknown precision or a negative or non-int ``numel`` (local configuration, never wire data).
    """
    _check_precision(precision)
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        raise ValueError(f"numel must be a non-negative int, got {numel!r}")
    if precision == "int8":
        return int8_payload_bytes(numel)
    return np.dtype(_WIDTHS[precision]).itemsize * numel


def encode_state(data: bytes | bytearray | memoryview, precision: str) -> bytes:
    """Our state as served in ``precision``.

    Args:
        data: the state as raw little-endian float32, 4·d bytes (d values; our own, finite).
        precision: one of :data:`STATE_PRECISIONS`.

    Returns:
        ``state_bytes(precision, d)`` bytes: ``data`` itself as bytes (fp32), float16 rounded to nearest (a value
        beyond ±65504 becomes ±Inf, which the asking peer rejects), or the ``int8`` codec's payload.

    Raises:
        ValueError: an unknown precision, or ``data`` not a whole number of float32 values.
    """
    _check_precision(precision)
    if len(data) % 4:
        raise ValueError(f"a float32 state is a multiple of 4 bytes, got {len(data)}")
    values = np.frombuffer(data, dtype="<f4")
    if precision == "fp32":
        return bytes(data)
    if precision == "fp16":
        with np.errstate(over="ignore"):
            return values.astype("<f2").tobytes()
    return encode_int8(torch.from_numpy(values.copy()))


def decode_state(data: bytes | bytearray | memoryview, precision: str, numel: int, *,
                 keep_half: bool = False) -> torch.Tensor | Rejected:
    """Decode a state answer (hostile bytes) asked in ``precision`` into a ``(numel,)`` float32 CPU tensor.

    The length is checked against :func:`state_bytes` before any byte is read.

    Args:
        data: the answer's body as received.
        precision: the precision we asked in (one of :data:`STATE_PRECISIONS`), not one guessed from the length.
        numel: d, our model's parameter count.
        keep_half: for ``fp16``, return the float16 values themselves (2·d bytes: a view of ``data`` when it is a
            bytearray, else a copy) instead of widening them to float32 (4·d); every float16 is a float32, so a
            caller that widens blockwise (``swarm.mixing.clipped_gossip``) computes on the same values.

    Returns:
        A float32 tensor (float16 with ``keep_half`` for ``fp16``) whose values are all finite, or
        :class:`Rejected`: ``DECODE_ERROR`` (wrong length,
        a negative int8 scale or an int8 code −128) or ``NON_FINITE`` (a NaN/±Inf scale, or a decoded value
        that is not finite). Never raises on hostile bytes.

    Raises:
        ValueError: an unknown precision or a bad ``numel`` (local configuration).
    """
    expected = state_bytes(precision, numel)
    if len(data) != expected:
        return Rejected(RejectReason.DECODE_ERROR,
                        f"a {precision} state of {numel} values is {expected} bytes, got {len(data)}")
    if precision == "int8":
        decoded = decode_int8(data, numel)
        if isinstance(decoded, Rejected):
            return decoded
        state = decoded
    elif keep_half and precision == "fp16":
        values = np.frombuffer(data, dtype=_WIDTHS[precision])
        state = torch.from_numpy(values if values.flags.writeable else values.copy())
    else:
        state = torch.from_numpy(np.frombuffer(data, dtype=_WIDTHS[precision]).astype(np.float32))
    finite = torch.isfinite(state)
    if not bool(finite.all()):
        return Rejected(RejectReason.NON_FINITE,
                        f"{int((~finite).sum())} of {numel} values of a {precision} state are NaN or ±Inf")
    return state


def int8_rounding_noise(state: torch.Tensor) -> float:
    """Expected squared norm E‖θ̂ − θ‖² of the int8 rounding in a decoded int8 state θ̂, from θ̂ alone.

    The int8 codec (``protocol.quantized``) cuts θ into chunks c of C = 1024 values, sets
    s_c = max_k |θ_c,k| / 127 and sends q = round(θ/s_c); the receiver gets θ̂ = q·s_c. Each rounding error
    θ̂ − θ lies in [−s_c/2, s_c/2] and, for values spread over many steps (model weights are), is close to
    uniform there, with variance s_c²/12 (the additive quantization-noise model: Widrow & Kollár, "Quantization
    Noise", Cambridge University Press 2008, ch. 4-5; Sheppard's correction)::

        E‖θ̂ − θ‖² = Σ_c k_c · s_c² / 12,    s_c = max_k |θ̂_c,k| / 127,    k_c = #{k : 0 < |θ̂_c,k| < 127·s_c}

    Values coded 0 or ±127 are left out of k_c: they may be exact (the chunk's largest |θ| always is; a
    zero-initialised bias, or a chunk of LayerNorm gains all 1.0, codes with no error at all), and crediting noise
    that is not there would make a neighbour look closer than it is. For spread-out weights this leaves out a
    little real noise (the digits MLP at initialisation: 0.965 of the actual ‖θ̂ − θ‖², against 0.975 counting
    every value; a 2-layer char-GPT at initialisation, with its exact zeros and ones: 0.84, against 1.35).

    The step s_c is taken from the **decoded values' own per-chunk absmax**, not from the scale the sender put
    on the wire. For an honest sender the two are equal (its absmax codes to ±127, so max|θ̂_c| = 127·s_c); a
    hostile sender can declare a larger scale with small codes, which would inflate the noise it claims and so
    make its state look closer than it is once the noise is subtracted (``swarm.mixing.clipped_gossip``), but it
    cannot raise max|θ̂_c| without moving its state by that much: a value of 127·s in a chunk where our own state
    is small costs (127·s)² in the squared distance and earns at most 1022·s²/12 ≈ (9.2·s)² of discount. So a
    hostile state looks closer than it is by at most the rounding noise of an honest int8 state about as large as
    ours (it can put its largest values where our θ already is large), and the clipping, which uses the raw
    distance, bounds its pull whatever it is credited.

    Args:
        state: ``(d,)`` float32, a state as ``decode_state(..., "int8", d)`` returned it (finite).

    Returns:
        E‖θ̂ − θ‖² in θ's units squared (float, ≥ 0; 0.0 for d = 0).
    """
    d = state.numel()
    if d == 0:
        return 0.0
    m = chunk_count(d, INT8_CHUNK)  # the codec's own chunks
    padded = torch.zeros(m * INT8_CHUNK, dtype=torch.float64)  # padding decodes to 0: never counted
    padded[:d] = state.detach().reshape(-1).to(torch.float64).abs()
    rows = padded.view(m, INT8_CHUNK)
    absmax = rows.amax(dim=1, keepdim=True)
    inner = ((rows > 0) & (rows < absmax)).sum(dim=1).to(torch.float64)
    steps = absmax.squeeze(1) / INT8_QMAX
    return float((inner * steps.square() / 12).sum())


def rounding_noise(state: torch.Tensor, precision: str) -> float:
    """E‖θ̂ − θ‖² that a mixing subtracts from a squared distance to ``state``, received in ``precision``.

    :func:`int8_rounding_noise` for ``int8``; 0.0 for ``fp32`` (exact) and ``fp16``, whose rounding (relative
    2⁻¹¹ per value, about 2e-4 of ‖θ‖) is far below the honest distances and is left in (docs/protocol.md §7.8).

    Args:
        state: ``(d,)`` float32, as :func:`decode_state` returned it for ``precision``.
        precision: the precision the state was asked and decoded in (one of :data:`STATE_PRECISIONS`).

    Returns:
        The expected squared rounding error, in θ's units squared (≥ 0).

    Raises:
        ValueError: an unknown precision.
    """
    _check_precision(precision)
    return int8_rounding_noise(state) if precision == "int8" else 0.0
