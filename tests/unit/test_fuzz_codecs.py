"""Property-based fuzzing (hypothesis) of the lossy decoders: ``decode_update`` for int8, int4 and topk.

Inputs: random bytes of the exact and of a wrong size; honest payloads mutated by bit flips, byte
replacements, truncations and extensions; honest payloads with one structural field overwritten with a hostile
value (NaN/±Inf/negative/huge scales and levels, int8 code −128, int4 nibble 15, indices at and past the
end of their chunk, 65535, repeated and swapped indices, padding bits set); codec strings valid, malformed
and foreign.

Properties, for every generated input:

- ``decode_update`` never raises; it returns a ``(numel,)`` float32 tensor or ``Rejected`` with a
  :class:`RejectReason`;
- the result equals an independent reference decoder written from ``docs/protocol.md`` §2 with ``struct``
  and Python loops: the same values bit for bit, or the same reason (size, then non-finite scales
  ``NON_FINITE``, then every other fault ``DECODE_ERROR``);
- honest payloads of finite inputs always decode.

Every example is counted; ``test_total_count`` asserts the module reaches 10,000 inputs when it all runs.
Hypothesis runs derandomized without an example database.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.protocol import Rejected, RejectReason, decode_update, encode_update

COUNTS: Counter[str] = Counter()
REASONS_SEEN: Counter[str] = Counter()
PLANNED: dict[str, int] = {}

#: Codec string → the reference's reading of it: (name, values kept per full chunk k) or None (malformed).
CODEC_CASES: dict[str, tuple[str, int] | None] = {
    "int8": ("int8", 0),
    "int4": ("int4", 0),
    "topk": ("topk", 82),
    "topk:density=0.02": ("topk", 82),
    "topk:density=0.001": ("topk", 5),
    "topk:density=1": ("topk", 4096),
    "topk:density=0.5": ("topk", 2048),
    "topk:density=0": None,
    "topk:density=1.01": None,
    "topk:density=nan": None,
    "topk:density=-1": None,
    "int8:density=0.1": None,
    "int16": None,
    "INT8": None,
    "topk:": None,
    "topk:k=4": None,
    "int4 ": None,
}
NUMELS = [0, 1, 2, 3, 5, 63, 64, 65, 127, 129, 1023, 1024, 1025, 4095, 4096, 4097, 4106]
SPECIAL_F32 = [float("nan"), float("inf"), float("-inf"), -1.0, -0.0, 0.0, 1e-45, 3.4e38, -1e-30, 1.0]
SPECIAL_U16 = [0, 1, 9, 10, 4094, 4095, 4096, 4097, 65535]


def fuzz_settings(name: str, examples: int) -> Callable[[Any], Any]:
    PLANNED[name] = examples
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


# --- the reference decoder (docs/protocol.md §2), independent of p2p_guard.protocol ----------------------


def ref_layout(name: str, k: int, d: int) -> tuple[int, list[int]]:
    """(payload size, values kept per chunk) of a codec for d values."""
    if name == "int8":
        m = -(-d // 1024)
        return 4 * m + d, []
    if name == "int4":
        m = -(-d // 64)
        return 4 * m + (d + 1) // 2, []
    kept = [k] * (d // 4096) + ([-(-k * (d % 4096) // 4096)] if d % 4096 else [])
    return 8 * len(kept) + 2 * sum(kept) + -(-sum(kept) // 4), kept


def ref_decode(payload: bytes, codec: str, d: int) -> list[float] | RejectReason:
    case = CODEC_CASES[codec]
    if case is None:
        return RejectReason.DECODE_ERROR
    name, k = case
    size, kept = ref_layout(name, k, d)
    if len(payload) != size:
        return RejectReason.DECODE_ERROR
    if name in ("int8", "int4"):
        chunk = 1024 if name == "int8" else 64
        m = -(-d // chunk)
        scales = list(struct.unpack(f"<{m}f", payload[: 4 * m]))
        if not all(math.isfinite(s) for s in scales):
            return RejectReason.NON_FINITE
        if any(s < 0 for s in scales):
            return RejectReason.DECODE_ERROR
        body = payload[4 * m :]
        if name == "int8":
            codes = list(struct.unpack(f"<{d}b", body))
            if -128 in codes:
                return RejectReason.DECODE_ERROR
        else:
            nibbles = [n for byte in body for n in (byte & 15, byte >> 4)]
            if d % 2 and nibbles[-1] != 0:
                return RejectReason.DECODE_ERROR
            if 15 in nibbles[:d]:
                return RejectReason.DECODE_ERROR
            codes = [n - 7 for n in nibbles[:d]]
        per_value = np.array([scales[i // chunk] for i in range(d)], dtype=np.float32)
        with np.errstate(over="ignore"):
            return list(np.array(codes, dtype=np.float32) * per_value)
    m, total = len(kept), sum(kept)
    levels = struct.unpack(f"<{2 * m}f", payload[: 8 * m])
    if not all(math.isfinite(v) for v in levels):
        return RejectReason.NON_FINITE
    if any(v < 0 for v in levels):
        return RejectReason.DECODE_ERROR
    indices = struct.unpack(f"<{total}H", payload[8 * m : 8 * m + 2 * total])
    bits = payload[8 * m + 2 * total :]
    codes = [(bits[t // 4] >> (2 * (t % 4))) & 3 for t in range(4 * len(bits))]
    if any(codes[total:]):
        return RejectReason.DECODE_ERROR
    out = [0.0] * d
    t = 0
    for j, kj in enumerate(kept):
        length = min(4096, d - 4096 * j)
        chunk_indices = indices[t : t + kj]
        if any(i >= length for i in chunk_indices) or any(
            b <= a for a, b in zip(chunk_indices, chunk_indices[1:], strict=False)
        ):
            return RejectReason.DECODE_ERROR
        for i in chunk_indices:
            level = levels[2 * j + 1] if codes[t] & 2 else levels[2 * j]
            out[4096 * j + i] = -level if codes[t] & 1 else level
            t += 1
    return out


def check(name: str, payload: bytes, codec: str, d: int, kind: type = bytes) -> object:
    result = decode_update(kind(payload), codec, d)
    COUNTS[name] += 1
    want = ref_decode(payload, codec, d)
    if isinstance(want, RejectReason):
        assert isinstance(result, Rejected) and result.reason is want, (codec, d, len(payload), result, want)
        assert result.detail, result
        REASONS_SEEN[result.reason.value] += 1
    else:
        assert isinstance(result, torch.Tensor), (codec, d, result)
        assert result.dtype == torch.float32 and result.shape == (d,)
        assert result.numpy().tobytes() == np.array(want, dtype=np.float32).tobytes(), (codec, d)
    return result


def honest_vector(d: int, seed: int, scale: float) -> torch.Tensor:
    return torch.randn(d, generator=torch.Generator().manual_seed(seed)) * scale


codecs = st.sampled_from(sorted(CODEC_CASES))
valid_codecs = st.sampled_from(sorted(c for c, case in CODEC_CASES.items() if case))
numels = st.one_of(st.integers(0, 140), st.integers(0, 140), st.integers(0, 140), st.sampled_from(NUMELS))
kinds = st.sampled_from([bytes, bytearray, memoryview])


@pytest.mark.timeout(300)
@fuzz_settings("random bytes", 2500)
@given(codecs, numels, st.data(), kinds)
def test_random_bytes(codec: str, d: int, data: st.DataObject, kind: type) -> None:
    case = CODEC_CASES[codec]
    size = ref_layout(*case, d)[0] if case else data.draw(st.integers(0, 64))
    length = data.draw(st.one_of(st.just(size), st.just(size), st.just(size), st.integers(0, size + 8)))
    check("random bytes", data.draw(st.binary(min_size=length, max_size=length)), codec, d, kind)


VARIANTS = 3
"""Inputs derived per hypothesis example in the mutation tests (a numpy generator seeded by the example)."""


def mutate_bytes(data: bytearray, rng: np.random.Generator) -> bytes:
    """1-3 byte-level mutations: bit flips, replaced runs, truncation, extension."""
    for _ in range(int(rng.integers(1, 4))):
        op = rng.choice(["flip", "flip", "replace", "truncate", "extend"])
        if op == "flip" and data:
            data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        elif op == "replace" and data:
            start = int(rng.integers(len(data)))
            new = rng.bytes(int(rng.integers(1, 9)))
            data[start : start + len(new)] = new
        elif op == "truncate":
            del data[int(rng.integers(len(data) + 1)) :]
        elif op == "extend":
            data += rng.bytes(int(rng.integers(1, 9)))
    return bytes(data)


def structural_fault(data: bytearray, name: str, k: int, d: int, rng: np.random.Generator) -> bytes:
    """One or two fields (a scale, a code, an index, the padding) set to a hostile value."""
    size, kept = ref_layout(name, k, d)
    m = len(kept) if name == "topk" else -(-d // (1024 if name == "int8" else 64))
    head = (8 if name == "topk" else 4) * m
    for _ in range(int(rng.integers(1, 3))):
        field = rng.choice(["scale", "body", "index", "index_copy", "padding"])
        if field == "scale" and m:
            at = 4 * int(rng.integers(head // 4))
            data[at : at + 4] = struct.pack("<f", SPECIAL_F32[int(rng.integers(len(SPECIAL_F32)))])
        elif field == "index" and name == "topk" and kept:
            at = head + 2 * int(rng.integers(sum(kept)))
            data[at : at + 2] = struct.pack("<H", SPECIAL_U16[int(rng.integers(len(SPECIAL_U16)))])
        elif field == "index_copy" and name == "topk" and sum(kept) > 1:
            at = head + 2 * int(rng.integers(1, sum(kept)))
            data[at : at + 2] = data[at - 2 : at]  # a repeated index (across a chunk boundary: a legal one)
        elif field == "padding" and size:
            data[-1] |= int(rng.choice([0x40, 0x80, 0xC0, 0xF0, 0x0C]))
        elif size > head:
            data[int(rng.integers(head, size))] = int(rng.choice([0x80, 0x7F, 0xFF, 0x0F, 0xF0, 0x00, 0xEE]))
    return bytes(data)


@pytest.mark.timeout(300)
@fuzz_settings("mutated payloads", 1200)
@given(valid_codecs, numels, st.integers(0, 2**32 - 1), st.sampled_from([1e-6, 1e-2, 1.0, 1e20]), kinds)
def test_mutated_payloads(codec: str, d: int, seed: int, scale: float, kind: type) -> None:
    rng = np.random.default_rng(seed)
    honest = encode_update(honest_vector(d, seed, scale), codec)
    for _ in range(VARIANTS):
        check("mutated payloads", mutate_bytes(bytearray(honest), rng), codec, d, kind)


@pytest.mark.timeout(300)
@fuzz_settings("structural faults", 1200)
@given(valid_codecs, st.sampled_from([n for n in NUMELS if n]), st.integers(0, 2**32 - 1))
def test_structural_faults(codec: str, d: int, seed: int) -> None:
    name, k = CODEC_CASES[codec]  # type: ignore[misc]
    rng = np.random.default_rng(seed)
    honest = encode_update(honest_vector(d, seed, 1.0), codec)
    for _ in range(VARIANTS):
        check("structural faults", structural_fault(bytearray(honest), name, k, d, rng), codec, d)


@pytest.mark.timeout(300)
@fuzz_settings("honest round trip", 600)
@given(valid_codecs, numels, st.integers(0, 2**16), st.sampled_from([1e-30, 1e-6, 1e-2, 1.0, 1e30]))
def test_honest_round_trip(codec: str, d: int, seed: int, scale: float) -> None:
    vector = honest_vector(d, seed, scale)
    result = check("honest round trip", encode_update(vector, codec), codec, d)
    assert isinstance(result, torch.Tensor) and bool(torch.isfinite(result).all())


def test_total_count() -> None:
    """Runs last: the module's total (≥ 10,000 inputs, 0 crashes), in the assertion message."""
    missing = [name for name in PLANNED if COUNTS[name] == 0]
    if missing:
        pytest.skip(f"not every fuzz test ran in this session (missing: {missing})")
    total = sum(COUNTS.values())
    message = (
        f"{total} inputs to decode_update, 0 crashes; by test {dict(COUNTS)}; reasons {dict(REASONS_SEEN)}"
    )
    print(f"[fuzz] codec fuzz total: {message}")
    short = {name: COUNTS[name] for name, planned in PLANNED.items() if COUNTS[name] < planned}  # examples
    assert not short and total >= 10_000, f"below the plan {short} or the 10,000 target: {message}"
