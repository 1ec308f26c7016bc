"""Codecs: a flat float32 update ⇄ the payload bytes a peer serves.

A codec string is a name from :data:`CODECS`, optionally with parameters (only ``topk`` has them)::

    fp32                  float32 LE of Δ                                     4·d bytes       lossless
    fp16                  float16 LE of Δ (round to nearest even)             2·d
    int8                  absmax int8, one float32 scale per 1024 values      4·⌈d/1024⌉ + d
    int4                  absmax 4-bit, one float32 scale per 64 values       4·⌈d/64⌉ + ⌈d/2⌉
    topk[:density=ρ]      top-k per 4096 values, 2-bit values (ρ = 0.02)      8·m + 2·K + ⌈K/4⌉
    topk:…,dense=head     the same on d − D values; D (1-D tensors and the     topk(d − D) + 2·D
                          output layer) as float16

(layouts in :mod:`p2p_guard.protocol.quantized` and :mod:`p2p_guard.protocol.sparse`; ``docs/protocol.md``
§2). The receiver computes the exact size from the envelope's codec string and the model's d before it
reads a byte (:func:`expected_payload_bytes`), and every decoder returns ``Rejected`` on hostile bytes. A
``dense=head`` codec also needs the model's parameter shapes (the envelope's, already checked against the
receiver's model): its dense set D is a function of them (``protocol.sparse.dense_mask``).

Hard caps are per codec: a receiver never reads more than ``payload_cap_bytes(codec, P)``, the codec's exact size
for P = ``max_parameters`` parameters (:data:`MAX_PARAMETERS` = 2**28 ≈ 268M by default), so a 100M-parameter
update crosses in every codec and no codec's cap lets a sender declare more than P parameters' worth of bytes.

An fp16 value above 65504 in magnitude becomes ±Inf, which a receiver rejects as ``NON_FINITE``: an honest
sender clips or uses fp32. Decoding always returns float32. Every codec but fp32 loses information; a sender
keeps what was not sent in an error-feedback buffer (``training.error_feedback.ErrorFeedback``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from p2p_guard.protocol.quantized import (
    decode_int4,
    decode_int8,
    encode_int4,
    encode_int8,
    int4_payload_bytes,
    int8_payload_bytes,
)
from p2p_guard.protocol.reasons import Rejected, RejectReason
from p2p_guard.protocol.sparse import (
    TOPK_CHUNK,
    TOPK_DEFAULT_DENSITY,
    decode_topk,
    decode_topk_dense,
    dense_mask,
    encode_topk,
    encode_topk_dense,
    topk_dense_payload_bytes,
    topk_payload_bytes,
)

__all__ = [
    "CODECS",
    "LOSSLESS_CODECS",
    "MAX_PARAMETERS",
    "MIN_LOCAL_TOPK_DENSITY",
    "CodecSpec",
    "check_local_codec",
    "codec_spec",
    "decode_update",
    "encode_update",
    "expected_payload_bytes",
    "parse_codec",
    "payload_cap_bytes",
]

logger = logging.getLogger(__name__)

#: Names of the codecs this protocol version speaks (a codec string starts with one of them).
CODECS: tuple[str, ...] = ("fp32", "fp16", "int8", "int4", "topk")
#: Codecs whose decoded update is bit-identical to the encoded one (no error feedback needed).
LOSSLESS_CODECS: tuple[str, ...] = ("fp32",)
#: The smallest ``topk`` density a peer may send with (:func:`check_local_codec`): one value per 4096-value chunk.
MIN_LOCAL_TOPK_DENSITY = 1 / TOPK_CHUNK
#: Default parameter cap P of the per-codec payload caps (:func:`payload_cap_bytes`): 2**28 ≈ 268M parameters
#: (fp32 1 GiB, fp16 512 MiB, int8 ≈ 257 MiB, int4 ≈ 144 MiB, topk at 2% ≈ 12 MiB).
MAX_PARAMETERS = 1 << 28
_NUMPY_DTYPES = {"fp32": "<f4", "fp16": "<f2"}
_MAX_CODEC_CHARS = 32
_DENSITY = re.compile(r"density=([0-9]{1,3}(?:\.[0-9]{1,12})?(?:[eE]-?[0-9]{1,3})?)")
_DENSE = "dense=head"
Shapes = Sequence[Sequence[int]]


@dataclass(frozen=True)
class CodecSpec:
    """A parsed codec string.

    Attributes:
        name: The codec, one of :data:`CODECS`.
        density: ρ of ``topk`` (fraction of values kept, in (0, 1]; 0.02 when the string names none); None
            for the others.
        dense: ``topk`` only: the dense set (1-D tensors and the output layer) is sent as float16
            (``dense=head``; ``protocol.sparse``).
    """

    name: str
    density: float | None = None
    dense: bool = False

    @property
    def lossless(self) -> bool:
        """True when decode(encode(x)) == x bit for bit (``fp32``)."""
        return self.name in LOSSLESS_CODECS

    def payload_bytes(self, numel: int, shapes: Shapes | None = None) -> int:
        """Exact payload size in bytes for d = ``numel`` (formulas in the module docstring).

        Raises:
            ValueError: a ``dense=head`` codec without ``shapes``, or shapes that do not hold ``numel`` values.
        """
        if self.dense:
            dense = int(_dense_mask(numel, shapes).sum())
            return topk_dense_payload_bytes(numel, self.density or TOPK_DEFAULT_DENSITY, dense)
        if self.name in _NUMPY_DTYPES:
            return np.dtype(_NUMPY_DTYPES[self.name]).itemsize * numel
        if self.name == "int8":
            return int8_payload_bytes(numel)
        if self.name == "int4":
            return int4_payload_bytes(numel)
        return topk_payload_bytes(numel, self.density or TOPK_DEFAULT_DENSITY)


def parse_codec(codec: object) -> CodecSpec | Rejected:
    """Parse a codec string (from a config or from a hostile envelope).

    Grammar: ``NAME`` for a name of :data:`CODECS`, or ``topk:density=ρ`` with ρ a decimal (at most 3 integer
    and 12 fraction digits, optional exponent) in (0, 1], ``topk:density=ρ,dense=head`` or ``topk:dense=head``.
    At most 32 characters.

    Returns:
        The :class:`CodecSpec`, or ``Rejected(DECODE_ERROR)`` naming what is wrong. Never raises.
    """
    if not isinstance(codec, str):
        return Rejected(RejectReason.DECODE_ERROR, f"codec must be a str, got {type(codec).__name__}")
    if len(codec) > _MAX_CODEC_CHARS:
        return Rejected(
            RejectReason.DECODE_ERROR, f"codec {codec[:32]!r}… is over {_MAX_CODEC_CHARS} characters"
        )
    name, colon, params = codec.partition(":")
    if name not in CODECS:
        return Rejected(RejectReason.DECODE_ERROR, f"unknown codec {codec!r}; known: {', '.join(CODECS)}")
    if not colon:
        return CodecSpec(name, TOPK_DEFAULT_DENSITY if name == "topk" else None)
    if name != "topk":
        return Rejected(RejectReason.DECODE_ERROR, f"codec {name} takes no parameters, got {codec!r}")
    dense = params == _DENSE or params.endswith("," + _DENSE)
    if params == _DENSE:
        return CodecSpec(name, TOPK_DEFAULT_DENSITY, dense=True)
    match = _DENSITY.fullmatch(params.removesuffix("," + _DENSE))
    density = float(match.group(1)) if match else math.nan
    if not 0.0 < density <= 1.0:
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"codec {codec!r}: expected topk:density=ρ with ρ in (0, 1], optionally followed by ,{_DENSE}",
        )
    return CodecSpec(name, density, dense=dense)


def codec_spec(codec: str) -> CodecSpec:
    """:func:`parse_codec` for local configuration: raises instead of rejecting.

    Raises:
        ValueError: An unknown or malformed codec string (the message says why).
    """
    spec = parse_codec(codec)
    if isinstance(spec, Rejected):
        raise ValueError(spec.detail)
    return spec


def check_local_codec(codec: str) -> CodecSpec:
    """:func:`codec_spec` for the codec this peer sends with; also refuses a ``topk`` density under 1/4096.

    Every ``topk`` chunk keeps k = max(1, ⌈ρ·4096⌉) values, so any ρ < 1/4096 (:data:`MIN_LOCAL_TOPK_DENSITY`)
    would silently send 1/4096 of the values, not ρ. The wire grammar (:func:`parse_codec`, for received
    envelopes) is unchanged: ρ in (0, 1].

    Raises:
        ValueError: an unknown or malformed codec string, or ``topk`` with ρ < 1/4096 (the message gives the
            valid range [1/4096, 1]).
    """
    spec = codec_spec(codec)
    if spec.density is not None and spec.density < MIN_LOCAL_TOPK_DENSITY:
        raise ValueError(f"codec {codec!r}: density {spec.density!r} keeps less than one value of a "
                         f"{TOPK_CHUNK}-value chunk, and every chunk sends at least one (the wire would use "
                         f"1/{TOPK_CHUNK} = {MIN_LOCAL_TOPK_DENSITY!r}); use topk:density=ρ with ρ in "
                         f"[{MIN_LOCAL_TOPK_DENSITY!r}, 1] (docs/protocol.md, Codecs)")
    return spec


def expected_payload_bytes(codec: str, numel: int, shapes: Shapes | None = None) -> int:
    """Exact payload size for ``numel`` parameters in ``codec``.

    Args:
        codec: A codec string (see :func:`parse_codec`).
        numel: Number of parameters d (≥ 0).
        shapes: The model's parameter shapes in flattening order (needed by ``dense=head`` codecs only).

    Returns:
        Size in bytes (formulas in the module docstring): 4·d for fp32, 2·d for fp16, ...

    Raises:
        ValueError: Unknown codec, negative ``numel``, or a ``dense=head`` codec without matching ``shapes``.
    """
    spec = codec_spec(codec)
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        raise ValueError(f"numel must be a non-negative int, got {numel!r}")
    return spec.payload_bytes(numel, shapes)


def payload_cap_bytes(codec: str, max_parameters: int = MAX_PARAMETERS) -> int:
    """The hard cap on one payload in ``codec``: its exact size for ``max_parameters`` parameters.

    ``cap(c, P) = payload_bytes(c, P)`` (formulas in the module docstring); every size formula grows with d,
    so a payload within the cap declares at most P parameters. A ``dense=head`` codec's size also depends on the
    dense set D ≤ P: its cap is ``topk_payload_bytes(P, ρ) + 2·P``, at least its size for any D. At P = 2**28:
    fp32 1,073,741,824 B, fp16 536,870,912, int8 269,484,032, int4 150,994,944, topk (ρ = 0.02) by its formula.

    Args:
        codec: A codec string (see :func:`parse_codec`).
        max_parameters: P, the largest model accepted (parameters, > 0).

    Returns:
        The cap in bytes.

    Raises:
        ValueError: Unknown codec or ``max_parameters`` not a positive int (local configuration).
    """
    if isinstance(max_parameters, bool) or not isinstance(max_parameters, int) or max_parameters <= 0:
        raise ValueError(f"max_parameters must be a positive int, got {max_parameters!r}")
    spec = codec_spec(codec)
    if spec.dense:  # any split of P into top-k and float16 values: at most both payloads
        return topk_payload_bytes(max_parameters, spec.density or TOPK_DEFAULT_DENSITY) + 2 * max_parameters
    return spec.payload_bytes(max_parameters)


def encode_update(vector: torch.Tensor, codec: str, shapes: Shapes | None = None) -> bytes:
    """Encode a flat update.

    Args:
        vector: ``(d,)`` floating-point tensor on any device. NaN/Inf are encoded as they are by fp32/fp16;
            the other codecs give their chunk a non-finite scale, so a receiver rejects it (``NON_FINITE``).
        codec: A codec string (see :func:`parse_codec`).
        shapes: The model's parameter shapes in flattening order (needed by ``dense=head`` codecs only).

    Returns:
        ``expected_payload_bytes(codec, d, shapes)`` bytes.

    Raises:
        ValueError: Unknown codec, ``vector`` is not a flat floating-point tensor, or a ``dense=head`` codec
            without ``shapes`` that hold d values.
    """
    spec = codec_spec(codec)
    if not isinstance(vector, torch.Tensor) or not vector.is_floating_point() or vector.dim() != 1:
        raise ValueError(f"vector must be a flat (d,) floating-point tensor, got {_describe(vector)}")
    flat = vector.detach().to(device="cpu", dtype=torch.float32).contiguous()
    if spec.name in _NUMPY_DTYPES:
        with np.errstate(over="ignore"):  # fp16 overflow to ±Inf is documented; the receiver rejects it
            return flat.numpy().astype(_NUMPY_DTYPES[spec.name], copy=False).tobytes()
    if spec.name == "int8":
        return encode_int8(flat)
    if spec.name == "int4":
        return encode_int4(flat)
    if spec.dense:
        return encode_topk_dense(flat, spec.density or TOPK_DEFAULT_DENSITY, _dense_mask(flat.numel(), shapes))
    return encode_topk(flat, spec.density or TOPK_DEFAULT_DENSITY)


def decode_update(
    payload: bytes | bytearray | memoryview, codec: str, numel: int, shapes: Shapes | None = None
) -> torch.Tensor | Rejected:
    """Decode a payload into a flat float32 update.

    Args:
        payload: The received bytes (bytes, bytearray or memoryview), possibly hostile.
        codec: The codec string named in the (already checked) envelope.
        numel: Number of parameters d the model has.
        shapes: The model's parameter shapes in flattening order (``dense=head`` codecs: without them, or with
            shapes that do not hold d values, the payload is rejected).

    Returns:
        A new ``(numel,)`` ``torch.float32`` CPU tensor (fp32/fp16 may hold NaN/Inf; the guard checks that),
        or ``Rejected``: ``DECODE_ERROR`` for an unknown codec, a payload whose length is not exactly
        ``expected_payload_bytes(codec, numel)`` (checked before any byte is read), or bytes no honest encoder
        writes; ``NON_FINITE`` for a NaN/Inf scale. Never raises on a hostile payload.
    """
    spec = parse_codec(codec)
    if isinstance(spec, Rejected):
        return spec
    if spec.dense:
        try:
            mask = _dense_mask(numel, shapes)
        except ValueError as e:
            return Rejected(RejectReason.DECODE_ERROR, str(e))
        return decode_topk_dense(payload, numel, spec.density or TOPK_DEFAULT_DENSITY, mask)
    expected = spec.payload_bytes(numel)
    if len(payload) != expected:
        return Rejected(
            RejectReason.DECODE_ERROR,
            f"{codec} payload for {numel} parameters is {expected} bytes, got {len(payload)}",
        )
    if spec.name in _NUMPY_DTYPES:
        array = np.frombuffer(payload, dtype=_NUMPY_DTYPES[spec.name]).astype(np.float32)
        return torch.from_numpy(array)
    if spec.name == "int8":
        return decode_int8(payload, numel)
    if spec.name == "int4":
        return decode_int4(payload, numel)
    return decode_topk(payload, numel, spec.density or TOPK_DEFAULT_DENSITY)


def _dense_mask(numel: int, shapes: Shapes | None) -> torch.Tensor:
    """``protocol.sparse.dense_mask(shapes)`` after checking that the shapes hold ``numel`` values.

    Raises:
        ValueError: no shapes, or shapes whose sizes do not add up to ``numel``.
    """
    if shapes is None:
        raise ValueError(f"a topk {_DENSE} codec needs the model's parameter shapes")
    held = sum(math.prod(int(n) for n in shape) for shape in shapes)
    if held != numel:
        raise ValueError(f"the parameter shapes hold {held} values, not {numel}")
    return dense_mask(shapes)


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
