"""Property-based fuzzing (hypothesis) of the ``topk:…,dense=head`` decoder (``decode_update`` with shapes).

Inputs: model layouts (parameter shapes: matrices, vectors, scalars, empty tensors, layouts with no matrix and
with tensors after the output layer); random bytes of the exact and of a wrong size; honest payloads mutated by
bit flips, byte replacements, truncations and extensions; honest payloads with a dense value set to a float16
NaN/±Inf or a top-k level set to a hostile float32; and a missing or wrong layout.

Properties, for every generated input:

- ``decode_update`` never raises; it returns a ``(d,)`` float32 tensor or ``Rejected`` with a reason;
- the result equals an independent reference written from ``docs/protocol.md`` §2 (the dense set from the shapes
  with Python loops, the top-k part through ``test_fuzz_codecs.ref_decode``, the float16 values with
  ``struct``): the same values bit for bit, or the same reason (size; then the top-k part's; then a non-finite
  dense value ``NON_FINITE``);
- honest payloads of finite inputs always decode, and their dense values are the float16 roundings.

``test_total_count`` asserts at least 10,000 inputs when the whole module runs.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_codecs import mutate_bytes, ref_decode, ref_layout  # the plain topk reference (tests/unit on sys.path)

from p2p_guard.protocol import Rejected, RejectReason, decode_update, encode_update

COUNTS: Counter[str] = Counter()
REASONS_SEEN: Counter[str] = Counter()
PLANNED: dict[str, int] = {}

#: Codec string → (the plain topk codec of its top-k part, values kept per full chunk).
CODECS = {
    "topk:dense=head": ("topk", 82),
    "topk:density=0.02,dense=head": ("topk:density=0.02", 82),
    "topk:density=0.5,dense=head": ("topk:density=0.5", 2048),
    "topk:density=1,dense=head": ("topk:density=1", 4096),
}
LAYOUTS: list[tuple[tuple[int, ...], ...]] = [
    ((4, 3), (3,), (2, 3), (2,)),  # a small MLP: the output layer and its bias are dense, and the hidden bias
    ((10,),),  # vectors only: all dense
    ((5, 5),),  # one matrix: it is the output layer, all dense
    ((), (3, 3), (2, 2)),  # a scalar, a body matrix, the output layer
    ((4097, 2), (7,), (3, 2)),  # a body over two chunks
    ((0, 4), (2,), (6, 1)),  # an empty matrix
    ((8200,), (9, 1000), (1, 3)),  # a long vector first
    ((1, 2, 3), (70, 60), (5, 4, 1), (9,), (2, 2, 2)),  # 3-D tensors; tensors after the last matrix
]
SPECIAL_F16 = [0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x7BFF, 0x8000, 0x0001]  # ±Inf, NaNs, max, −0, tiny
SPECIAL_F32 = [float("nan"), float("inf"), float("-inf"), -1.0, 3.4e38, 0.0]


def fuzz_settings(name: str, examples: int) -> Any:
    PLANNED[name] = examples
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


def ref_mask(shapes: tuple[tuple[int, ...], ...]) -> list[bool]:
    """The dense set from docs/protocol.md §2: ≤ 1-D tensors, the last ≥ 2-D tensor and all after it."""
    matrices = [i for i, shape in enumerate(shapes) if len(shape) >= 2]
    last = matrices[-1] if matrices else len(shapes)
    mask: list[bool] = []
    for i, shape in enumerate(shapes):
        mask += [len(shape) <= 1 or i >= last] * math.prod(shape)
    return mask


def ref_size(codec: str, shapes: tuple[tuple[int, ...], ...]) -> int:
    mask = ref_mask(shapes)
    dense = sum(mask)
    return ref_layout("topk", CODECS[codec][1], len(mask) - dense)[0] + 2 * dense


def ref_decode_dense(payload: bytes, codec: str, shapes: tuple[tuple[int, ...], ...]) -> list[float] | RejectReason:
    mask = ref_mask(shapes)
    dense = sum(mask)
    if len(payload) != ref_size(codec, shapes):
        return RejectReason.DECODE_ERROR
    split = len(payload) - 2 * dense
    sparse = ref_decode(payload[:split], CODECS[codec][0], len(mask) - dense)
    if isinstance(sparse, RejectReason):
        return sparse
    exact = list(struct.unpack(f"<{dense}e", payload[split:]))
    if not all(math.isfinite(v) for v in exact):
        return RejectReason.NON_FINITE
    sparse_values, exact_values = iter(sparse), iter(exact)
    return [next(exact_values) if is_dense else next(sparse_values) for is_dense in mask]


def check(name: str, payload: bytes, codec: str, shapes: tuple[tuple[int, ...], ...], kind: type = bytes) -> object:
    d = sum(math.prod(shape) for shape in shapes)
    result = decode_update(kind(payload), codec, d, shapes)
    COUNTS[name] += 1
    want = ref_decode_dense(payload, codec, shapes)
    if isinstance(want, RejectReason):
        assert isinstance(result, Rejected) and result.reason is want, (codec, shapes, len(payload), result, want)
        assert result.detail
        REASONS_SEEN[result.reason.value] += 1
    else:
        assert isinstance(result, torch.Tensor), (codec, shapes, result)
        assert result.dtype == torch.float32 and result.shape == (d,)
        assert result.numpy().tobytes() == np.array(want, dtype=np.float32).tobytes(), (codec, shapes)
    return result


def honest_vector(shapes: tuple[tuple[int, ...], ...], seed: int, scale: float) -> torch.Tensor:
    d = sum(math.prod(shape) for shape in shapes)
    return torch.randn(d, generator=torch.Generator().manual_seed(seed)) * scale


codecs = st.sampled_from(sorted(CODECS))
layouts = st.sampled_from(LAYOUTS)
kinds = st.sampled_from([bytes, bytearray, memoryview])


@pytest.mark.timeout(300)
@fuzz_settings("random bytes", 3000)
@given(codecs, layouts, st.data(), kinds)
def test_random_bytes(codec: str, shapes: tuple[tuple[int, ...], ...], data: st.DataObject, kind: type) -> None:
    size = ref_size(codec, shapes)
    length = data.draw(st.one_of(st.just(size), st.just(size), st.just(size), st.integers(0, size + 8)))
    check("random bytes", data.draw(st.binary(min_size=length, max_size=length)), codec, shapes, kind)


@pytest.mark.timeout(300)
@fuzz_settings("mutated payloads", 1200)
@given(codecs, layouts, st.integers(0, 2**32 - 1), st.sampled_from([1e-6, 1.0, 1e3]), kinds)
def test_mutated_payloads(codec: str, shapes: tuple[tuple[int, ...], ...], seed: int, scale: float,
                          kind: type) -> None:
    rng = np.random.default_rng(seed)
    honest = encode_update(honest_vector(shapes, seed, scale), codec, shapes)
    for _ in range(3):
        check("mutated payloads", mutate_bytes(bytearray(honest), rng), codec, shapes, kind)


@pytest.mark.timeout(300)
@fuzz_settings("hostile values", 800)
@given(codecs, layouts, st.integers(0, 2**32 - 1))
def test_hostile_values(codec: str, shapes: tuple[tuple[int, ...], ...], seed: int) -> None:
    """A dense value set to a float16 NaN/±Inf/extreme, or a top-k level to a hostile float32."""
    rng = np.random.default_rng(seed)
    honest = encode_update(honest_vector(shapes, seed, 1.0), codec, shapes)
    dense = sum(ref_mask(shapes))
    split = len(honest) - 2 * dense
    levels = 8 * len(ref_layout("topk", CODECS[codec][1], sum(math.prod(s) for s in shapes) - dense)[1])
    for _ in range(3):
        data = bytearray(honest)
        if dense and (levels == 0 or rng.random() < 0.7):
            at = split + 2 * int(rng.integers(dense))
            data[at : at + 2] = struct.pack("<H", SPECIAL_F16[int(rng.integers(len(SPECIAL_F16)))])
        elif levels:
            at = 4 * int(rng.integers(levels // 4))
            data[at : at + 4] = struct.pack("<f", SPECIAL_F32[int(rng.integers(len(SPECIAL_F32)))])
        check("hostile values", bytes(data), codec, shapes)


@pytest.mark.timeout(300)
@fuzz_settings("honest round trip", 1000)
@given(codecs, layouts, st.integers(0, 2**16), st.sampled_from([1e-30, 1e-6, 1e-2, 1.0, 100.0]))
def test_honest_round_trip(codec: str, shapes: tuple[tuple[int, ...], ...], seed: int, scale: float) -> None:
    vector = honest_vector(shapes, seed, scale)
    result = check("honest round trip", encode_update(vector, codec, shapes), codec, shapes)
    assert isinstance(result, torch.Tensor) and bool(torch.isfinite(result).all())
    mask = torch.tensor(ref_mask(shapes), dtype=torch.bool)
    assert torch.equal(result[mask], vector[mask].to(torch.float16).to(torch.float32))


@pytest.mark.parametrize("shapes", [None, ((4, 3), (3,)), ((4, 3), (3,), (2, 3), (3,))])
def test_a_missing_or_wrong_layout_is_rejected(shapes: tuple[tuple[int, ...], ...] | None) -> None:
    """The MLP layout's payload with no shapes, or shapes that do not hold its 23 values: DECODE_ERROR."""
    layout = LAYOUTS[0]
    payload = encode_update(honest_vector(layout, 0, 1.0), "topk:dense=head", layout)
    result = decode_update(payload, "topk:dense=head", 23, shapes)
    assert isinstance(result, Rejected) and result.reason is RejectReason.DECODE_ERROR
    assert result.detail == ("a topk dense=head codec needs the model's parameter shapes" if shapes is None
                             else f"the parameter shapes hold {sum(math.prod(s) for s in shapes)} values, not 23")


def test_total_count() -> None:
    """Runs last: the module's total (≥ 10,000 inputs, 0 crashes), in the assertion message."""
    missing = [name for name in PLANNED if COUNTS[name] == 0]
    if missing:
        pytest.skip(f"not every fuzz test ran in this session (missing: {missing})")
    total = sum(COUNTS.values())
    message = f"{total} inputs to decode_update, 0 crashes; by test {dict(COUNTS)}; reasons {dict(REASONS_SEEN)}"
    print(f"[fuzz] topk dense=head fuzz total: {message}")
    assert total >= 10_000, f"below the 10,000 target: {message}"
