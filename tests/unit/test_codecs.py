"""The lossy codecs (int8, int4, topk): known answers, exact sizes, every rejection; and error feedback."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from p2p_guard.protocol import (
    CODECS,
    CodecSpec,
    Rejected,
    RejectReason,
    decode_update,
    encode_update,
    expected_payload_bytes,
    parse_codec,
)
from p2p_guard.protocol.sparse import TOPK_CHUNK, topk_kept, topk_per_chunk
from p2p_guard.training.error_feedback import TOPK_EF_DECAY, ErrorFeedback, check_ef_decay, default_ef_decay

X5 = torch.tensor([1.0, -2.0, 3.0, 0.5, -0.25])


def reason_of(result: object) -> RejectReason | None:
    return result.reason if isinstance(result, Rejected) else None


def f32(value: float) -> bytes:
    return struct.pack("<f", value)


class TestParse:
    @pytest.mark.parametrize(
        ("codec", "spec"),
        [
            ("fp32", CodecSpec("fp32")),
            ("int8", CodecSpec("int8")),
            ("int4", CodecSpec("int4")),
            ("topk", CodecSpec("topk", 0.02)),
            ("topk:density=0.05", CodecSpec("topk", 0.05)),
            ("topk:density=1", CodecSpec("topk", 1.0)),
            ("topk:density=2e-3", CodecSpec("topk", 0.002)),
        ],
    )
    def test_accepts(self, codec: str, spec: CodecSpec) -> None:
        assert parse_codec(codec) == spec

    @pytest.mark.parametrize(
        "codec",
        [
            "int9",
            "INT8",
            "int8 ",
            "int8:density=0.1",
            "topk:",
            "topk:density=0",
            "topk:density=1.5",
            "topk:density=nan",
            "topk:density=inf",
            "topk:density=-0.1",
            "topk:k=3",
            "topk:density=0.1,x=1",
            "topk:density=" + "1" * 40,
            None,
            8,
            b"int8",
        ],
    )
    def test_rejects(self, codec: object) -> None:
        assert reason_of(parse_codec(codec)) is RejectReason.DECODE_ERROR

    def test_codecs_listed(self) -> None:
        assert CODECS == ("fp32", "fp16", "int8", "int4", "topk")


class TestSizes:
    @pytest.mark.parametrize(
        ("codec", "numel", "size"),
        [
            ("int8", 0, 0),
            ("int8", 5, 4 + 5),
            ("int8", 1024, 4 + 1024),
            ("int8", 1025, 8 + 1025),
            ("int4", 0, 0),
            ("int4", 5, 4 + 3),
            ("int4", 64, 4 + 32),
            ("int4", 65, 8 + 33),
            ("topk", 0, 0),
            ("topk", 4096, 8 + 2 * 82 + 21),  # k = ⌈0.02·4096⌉ = 82, ⌈82/4⌉ = 21
            ("topk", 4106, 16 + 2 * 83 + 21),  # last chunk of 10: ⌈82·10/4096⌉ = 1
            ("topk:density=1", 5, 8 + 10 + 2),
            ("topk:density=0.001", 5, 8 + 2 + 1),
        ],  # k = ⌈4.096⌉ = 5, last ⌈5·5/4096⌉ = 1
    )
    def test_formula(self, codec: str, numel: int, size: int) -> None:
        assert expected_payload_bytes(codec, numel) == size
        assert len(encode_update(torch.linspace(-1, 1, numel), codec)) == size

    def test_kept_per_chunk(self) -> None:
        assert topk_per_chunk(0.02) == 82
        assert topk_per_chunk(0.25) == 1024  # exactly ρ·C, no rounding up
        assert topk_per_chunk(1e-9) == 1
        assert topk_kept(2 * TOPK_CHUNK + 2048, 0.01) == [41, 41, 21]
        with pytest.raises(ValueError, match="density"):
            topk_per_chunk(0.0)


class TestKnownAnswers:
    def test_int8(self) -> None:
        payload = encode_update(X5, "int8")
        # s = 3/127; q = round(x/s) = 42, −85, 127, 21, −11
        assert payload == f32(3.0 / 127) + bytes([42, 256 - 85, 127, 21, 256 - 11])
        decoded = decode_update(payload, "int8", 5)
        s = np.float32(3.0) / np.float32(127)
        want = torch.tensor(np.array([42, -85, 127, 21, -11], dtype=np.float32) * s)
        assert isinstance(decoded, torch.Tensor) and torch.equal(decoded, want)

    def test_int4(self) -> None:
        payload = encode_update(X5, "int4")
        # s = 3/7; q = 2, −5, 7, 1, −1; nibbles q + 7 = 9, 2, 14, 8, 6 (+ padding 0)
        assert payload == f32(3.0 / 7) + bytes([0x29, 0x8E, 0x06])
        decoded = decode_update(payload, "int4", 5)
        s = np.float32(3.0) / np.float32(7)
        assert isinstance(decoded, torch.Tensor)
        assert torch.equal(decoded, torch.tensor(np.array([2, -5, 7, 1, -1], dtype=np.float32) * s))

    def test_topk_all_kept(self) -> None:
        payload = encode_update(X5, "topk:density=1")
        # magnitudes 3, 2 | 1, 0.5, 0.25: hi = 2.5, lo = 1.75/3; codes (level<<1 | sign): 0, 3, 2, 0, 1
        assert payload == (
            f32(1.75 / 3)
            + f32(2.5)
            + bytes.fromhex("0000010002000300" "0400")
            + bytes([0 | 3 << 2 | 2 << 4, 1])
        )
        decoded = decode_update(payload, "topk:density=1", 5)
        lo = float(np.float32(1.75 / 3))
        assert isinstance(decoded, torch.Tensor)
        assert decoded.tolist() == [lo, -2.5, 2.5, lo, -lo]

    def test_topk_one_kept(self) -> None:
        payload = encode_update(X5, "topk:density=0.001")
        assert payload == f32(3.0) + f32(3.0) + bytes([2, 0, 2])
        decoded = decode_update(payload, "topk:density=0.001", 5)
        assert isinstance(decoded, torch.Tensor) and decoded.tolist() == [0.0, 0.0, 3.0, 0.0, 0.0]

    def test_topk_second_chunk_offset(self) -> None:
        vector = torch.zeros(TOPK_CHUNK + 10)
        vector[7] = 1.0
        vector[TOPK_CHUNK + 3] = -5.0
        decoded = decode_update(encode_update(vector, "topk"), "topk", vector.numel())
        assert isinstance(decoded, torch.Tensor)
        assert decoded[7] == 1.0 and decoded[TOPK_CHUNK + 3] == -5.0
        assert int((decoded != 0).sum()) == 2

    @pytest.mark.parametrize("codec", ["int8", "int4", "topk", "topk:density=0.1"])
    def test_zero_and_empty(self, codec: str) -> None:
        for numel in (0, 3, 5000):
            decoded = decode_update(encode_update(torch.zeros(numel), codec), codec, numel)
            assert isinstance(decoded, torch.Tensor) and decoded.shape == (numel,) and not decoded.any()

    @pytest.mark.parametrize(("codec", "bound"), [("int8", 0.01), ("int4", 0.15), ("topk:density=0.25", 0.8)])
    def test_relative_error(self, codec: str, bound: float) -> None:
        vector = torch.randn(20_000, generator=torch.Generator().manual_seed(1))
        decoded = decode_update(encode_update(vector, codec), codec, 20_000)
        assert isinstance(decoded, torch.Tensor)
        assert float((decoded - vector).norm() / vector.norm()) < bound

    @pytest.mark.parametrize(("codec", "qmax"), [("int8", 127), ("int4", 7)])
    def test_absmax_error_bound(self, codec: str, qmax: int) -> None:
        vector = torch.randn(3000, generator=torch.Generator().manual_seed(2)) * 1e-3
        decoded = decode_update(encode_update(vector, codec), codec, 3000)
        assert isinstance(decoded, torch.Tensor)
        chunk = 1024 if codec == "int8" else 64
        for start in range(0, 3000, chunk):
            part = vector[start : start + chunk]
            assert (
                float((decoded[start : start + chunk] - part).abs().max())
                <= float(part.abs().max()) / qmax / 2 * 1.0001
            )

    @pytest.mark.parametrize("codec", ["int8", "int4", "topk"])
    def test_non_finite_input_gives_non_finite_scale(self, codec: str) -> None:
        vector = torch.ones(100)
        vector[3] = float("nan")
        assert reason_of(decode_update(encode_update(vector, codec), codec, 100)) is RejectReason.NON_FINITE


def mutate(payload: bytes, offset: int, new: bytes) -> bytes:
    return payload[:offset] + new + payload[offset + len(new) :]


class TestRejects:
    """Every hostile case a decoder names, crafted on an honest payload."""

    def test_int8(self) -> None:
        good = encode_update(X5, "int8")
        cases = {
            "nan scale": (mutate(good, 0, f32(float("nan"))), RejectReason.NON_FINITE),
            "inf scale": (mutate(good, 0, f32(float("inf"))), RejectReason.NON_FINITE),
            "negative scale": (mutate(good, 0, f32(-1.0)), RejectReason.DECODE_ERROR),
            "code -128": (mutate(good, 6, b"\x80"), RejectReason.DECODE_ERROR),
            "short": (good[:-1], RejectReason.DECODE_ERROR),
            "long": (good + b"\x00", RejectReason.DECODE_ERROR),
        }
        for name, (payload, reason) in cases.items():
            assert reason_of(decode_update(payload, "int8", 5)) is reason, name

    def test_int4(self) -> None:
        good = encode_update(X5, "int4")
        cases = {
            "nan scale": (mutate(good, 0, f32(float("nan"))), RejectReason.NON_FINITE),
            "negative scale": (mutate(good, 0, f32(-0.5)), RejectReason.DECODE_ERROR),
            "nibble 15 low": (mutate(good, 4, b"\x2f"), RejectReason.DECODE_ERROR),
            "nibble 15 high": (mutate(good, 5, b"\xf8"), RejectReason.DECODE_ERROR),
            "padding nibble": (mutate(good, 6, b"\x16"), RejectReason.DECODE_ERROR),
            "short": (good[:-1], RejectReason.DECODE_ERROR),
        }
        for name, (payload, reason) in cases.items():
            assert reason_of(decode_update(payload, "int4", 5)) is reason, name

    def test_topk(self) -> None:
        codec = "topk:density=1"
        good = encode_update(X5, codec)  # levels 0..7, indices 8..17 (0, 1, 2, 3, 4), codes 18..19
        indices = 8
        cases = {
            "nan level": (mutate(good, 4, f32(float("nan"))), RejectReason.NON_FINITE),
            "-inf level": (mutate(good, 0, f32(float("-inf"))), RejectReason.NON_FINITE),
            "negative level": (mutate(good, 0, f32(-1.0)), RejectReason.DECODE_ERROR),
            "index past the chunk": (mutate(good, indices + 8, b"\x05\x00"), RejectReason.DECODE_ERROR),
            "index 65535": (mutate(good, indices + 8, b"\xff\xff"), RejectReason.DECODE_ERROR),
            "duplicate": (mutate(good, indices + 2, b"\x00\x00"), RejectReason.DECODE_ERROR),
            "unsorted": (mutate(good, indices, b"\x01\x00\x00\x00"), RejectReason.DECODE_ERROR),
            "padding bits": (mutate(good, 19, b"\x05"), RejectReason.DECODE_ERROR),
            "truncated": (good[:-1], RejectReason.DECODE_ERROR),
            "extended": (good + b"\x00", RejectReason.DECODE_ERROR),
        }
        for name, (payload, reason) in cases.items():
            result = decode_update(payload, codec, 5)
            assert reason_of(result) is reason, (name, result)

    def test_topk_index_past_short_last_chunk(self) -> None:
        vector = torch.zeros(TOPK_CHUNK + 10)
        vector[TOPK_CHUNK + 3] = 1.0
        good = encode_update(vector, "topk")
        assert len(good) == 16 + 2 * 83 + 21
        offset = 16 + 2 * 82  # the last chunk's single index
        assert good[offset : offset + 2] == b"\x03\x00"
        assert isinstance(
            decode_update(mutate(good, offset, b"\x09\x00"), "topk", TOPK_CHUNK + 10), torch.Tensor
        )
        assert (
            reason_of(decode_update(mutate(good, offset, b"\x0a\x00"), "topk", TOPK_CHUNK + 10))
            is RejectReason.DECODE_ERROR
        )

    def test_wrong_density_is_a_size_error(self) -> None:
        payload = encode_update(torch.randn(10_000), "topk:density=0.05")
        assert reason_of(decode_update(payload, "topk", 10_000)) is RejectReason.DECODE_ERROR


class TestErrorFeedback:
    def test_fp32_is_a_no_op(self) -> None:
        ef = ErrorFeedback("fp32", 5)
        payload, sent = ef.compress(X5)
        assert payload == encode_update(X5, "fp32")
        assert torch.equal(sent, X5) and not ef.residual.any()

    @pytest.mark.parametrize("decay", [0.0, 0.5, 0.95, 1.0])
    def test_fp32_is_a_no_op_whatever_the_decay(self, decay: float) -> None:
        ef = ErrorFeedback("fp32", 5, decay)
        for _ in range(2):
            payload, sent = ef.compress(X5)
            assert payload == encode_update(X5, "fp32")
            assert torch.equal(sent, X5) and not ef.residual.any()

    def test_default_decay_per_codec(self) -> None:
        """SparseLoCo's β for topk (any density); plain error feedback (β = 1) for the dense codecs."""
        assert TOPK_EF_DECAY == 0.95
        for codec in ("topk", "topk:density=0.01", "topk:density=0.05"):
            assert default_ef_decay(codec) == TOPK_EF_DECAY == ErrorFeedback(codec, 3).decay
        for codec in ("fp32", "fp16", "int8", "int4"):
            assert default_ef_decay(codec) == 1.0 == ErrorFeedback(codec, 3).decay
        assert ErrorFeedback("topk", 3, 0.5).decay == 0.5 and ErrorFeedback("int8", 3, 0).decay == 0.0

    @pytest.mark.parametrize("decay", [-0.1, 1.01, float("nan"), True, "0.9"])
    def test_decay_out_of_range_raises(self, decay: object) -> None:
        with pytest.raises(ValueError, match="decay"):
            check_ef_decay(decay)
        with pytest.raises(ValueError, match="decay"):
            ErrorFeedback("topk", 3, decay)  # type: ignore[arg-type]

    def test_decayed_recursion_by_hand(self) -> None:
        """SparseLoCo: a = β·e + Δ, ŝ = D(C(a)), e ← a − ŝ; β = 0.5 keeps every number exact in float32."""
        ef = ErrorFeedback("topk:density=0.0001", 3, decay=0.5)  # one value per (short) chunk
        inputs = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.5, 0.0, 1.0]), torch.tensor([0.0, 0.0, 0.25])]
        # a_0 = [1, 2, 3]; a_1 = 0.5·[1, 2, 0] + [1.5, 0, 1] = [2, 1, 1]; a_2 = 0.5·[0, 1, 1] + [0, 0, 0.25]
        sent = []
        for delta, want_sent, want_residual in zip(
            inputs,
            [[0.0, 0.0, 3.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.75]],
            [[1.0, 2.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.5, 0.0]],
            strict=True,
        ):
            payload, decoded = ef.compress(delta)
            assert decode_update(payload, ef.codec, 3).tolist() == want_sent  # type: ignore[union-attr]
            assert decoded.tolist() == want_sent and ef.residual.tolist() == want_residual
            sent.append(decoded)
        # e_R = Σ_r β^(R−1−r) (Δ_r − ŝ_r): what was not sent fades by β per round
        faded = sum(0.5 ** (2 - r) * (inputs[r] - sent[r]) for r in range(3))
        assert isinstance(faded, torch.Tensor) and faded.tolist() == ef.residual.tolist()

    @pytest.mark.parametrize("codec", ["int8", "int4", "topk:density=0.02"])
    def test_decay_one_is_plain_error_feedback_bit_for_bit(self, codec: str) -> None:
        generator = torch.Generator().manual_seed(5)
        ef = ErrorFeedback(codec, 5000, decay=1.0)
        residual = torch.zeros(5000)
        for _ in range(4):
            delta = torch.randn(5000, generator=generator) * 1e-2
            payload, sent = ef.compress(delta)
            target = delta + residual  # the recursion before β existed
            assert payload == encode_update(target, codec)
            residual = target - sent
            assert torch.equal(ef.residual, residual)

    def test_decayed_residual_stays_bounded(self) -> None:
        """With β < 1 a constant Δ never sent in part weighs at most |Δ| / (1 − β): the residual cannot grow."""
        generator = torch.Generator().manual_seed(6)
        delta = torch.randn(3 * TOPK_CHUNK, generator=generator)
        ef = ErrorFeedback("topk:density=0.01", delta.numel(), decay=0.9)
        for _ in range(60):
            ef.compress(delta)
        assert float(ef.residual.abs().max()) <= float(delta.abs().max()) / (1 - 0.9) + 1e-4

    def test_residual_carries_over_exactly(self) -> None:
        ef = ErrorFeedback("topk:density=0.0001", 3, decay=1.0)  # one value per (short) chunk
        inputs = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.5, 0.0, 1.0]), torch.zeros(3)]
        sent = []
        for delta, want_sent, want_residual in zip(
            inputs,
            [[0.0, 0.0, 3.0], [2.5, 0.0, 0.0], [0.0, 2.0, 0.0]],
            [[1.0, 2.0, 0.0], [0.0, 2.0, 1.0], [0.0, 0.0, 1.0]],
            strict=True,
        ):
            payload, decoded = ef.compress(delta)
            assert decode_update(payload, ef.codec, 3).tolist() == want_sent  # type: ignore[union-attr]
            assert decoded.tolist() == want_sent and ef.residual.tolist() == want_residual
            sent.append(decoded)
        assert (torch.stack(sent).sum(0) + ef.residual).tolist() == torch.stack(inputs).sum(0).tolist()

    @pytest.mark.parametrize("codec", ["fp16", "int8", "int4", "topk"])
    def test_nothing_is_lost(self, codec: str) -> None:
        """β = 1 (the default of fp16/int8/int4; topk's is SparseLoCo's 0.95, so it is set here)."""
        generator = torch.Generator().manual_seed(3)
        ef = ErrorFeedback(codec, 5000, decay=1.0)
        inputs = [torch.randn(5000, generator=generator) * 1e-2 for _ in range(6)]
        total_sent = torch.zeros(5000, dtype=torch.float64)
        for delta in inputs:
            total_sent += ef.compress(delta)[1].double()
        total_in = torch.stack(inputs).double().sum(0)
        assert torch.allclose(total_sent + ef.residual.double(), total_in, atol=1e-6)
        assert ef.residual.any() and float(ef.residual.abs().max()) < float(total_in.abs().max())

    def test_state_round_trip(self) -> None:
        ef = ErrorFeedback("int4", 5)
        ef.compress(X5)
        state = ef.state_dict()
        fresh = ErrorFeedback("int4", 5)
        fresh.load_state_dict(state)
        assert torch.equal(fresh.residual, ef.residual) and fresh.residual.any()
        state["residual"][0] = 99.0  # the state is a copy
        assert not torch.equal(ef.residual, state["residual"])
        assert ef.encode(X5) == fresh.encode(X5)

    @pytest.mark.parametrize(
        "state",
        [
            {"codec": "int8", "numel": 5, "residual": torch.zeros(5)},
            {"codec": "int4", "numel": 6, "residual": torch.zeros(6)},
            {"codec": "int4", "numel": 5, "residual": torch.zeros(4)},
            {"codec": "int4", "numel": 5, "residual": torch.zeros(5, dtype=torch.float64)},
            {"codec": "int4", "numel": 5, "residual": torch.tensor([0.0, 0, 0, 0, float("nan")])},
            {"codec": "int4", "numel": 5},
        ],
    )
    def test_load_rejects(self, state: dict[str, object]) -> None:
        with pytest.raises(ValueError, match="error-feedback"):
            ErrorFeedback("int4", 5).load_state_dict(state)

    def test_non_finite_delta_raises_and_keeps_residual(self) -> None:
        ef = ErrorFeedback("int8", 5)
        ef.compress(X5)
        before = ef.residual.clone()
        with pytest.raises(ValueError, match="NaN"):
            ef.compress(torch.tensor([1.0, float("nan"), 0, 0, 0]))
        assert torch.equal(ef.residual, before)

    def test_fp16_overflow_raises(self) -> None:
        with pytest.raises(ValueError, match="fp16 cannot carry"):
            ErrorFeedback("fp16", 2).compress(torch.tensor([1e6, 0.0]))

    @pytest.mark.parametrize(
        ("codec", "numel", "delta"),
        [
            ("bf16", 3, torch.zeros(3)),
            ("int8", -1, torch.zeros(0)),
        ],
    )
    def test_constructor_rejects(self, codec: str, numel: int, delta: torch.Tensor) -> None:
        with pytest.raises(ValueError):  # noqa: PT011
            ErrorFeedback(codec, numel)

    def test_wrong_shape_raises(self) -> None:
        with pytest.raises(ValueError, match=r"\(5,\) float tensor"):
            ErrorFeedback("int8", 5).compress(torch.zeros(4))


@pytest.mark.parametrize(
    ("codec", "hex_payload"),
    [("int8", "0402813c408120"), ("int4", "2549923e0a09"), ("topk", "0000004000000040010003"),
     ("topk:density=1", "0000403f000000400000010002000c")],
)
def test_protocol_md_test_vectors(codec: str, hex_payload: str) -> None:
    """docs/protocol.md §10: Δ = [1.0, −2.0, 0.5]."""
    assert encode_update(torch.tensor([1.0, -2.0, 0.5]), codec).hex() == hex_payload


class TestDenseHead:
    """``topk:…,dense=head``: the 1-D tensors and the output layer as float16, the rest through top-k."""

    MLP = ((64, 64), (64,), (10, 64), (10,))  # the digits MLP: dense 64 + 640 + 10 = 714 of 4,810

    @pytest.mark.parametrize(
        ("codec", "spec"),
        [("topk:dense=head", CodecSpec("topk", 0.02, dense=True)),
         ("topk:density=0.05,dense=head", CodecSpec("topk", 0.05, dense=True))],
    )
    def test_accepts(self, codec: str, spec: CodecSpec) -> None:
        assert parse_codec(codec) == spec

    @pytest.mark.parametrize("codec", ["topk:dense=all", "topk:dense=head,density=0.05", "int8:dense=head",
                                       "topk:density=0.05,dense=head,", "topk:,dense=head", "topk:dense=HEAD"])
    def test_rejects(self, codec: str) -> None:
        assert reason_of(parse_codec(codec)) is RejectReason.DECODE_ERROR

    def test_mask(self) -> None:
        from p2p_guard.protocol.sparse import dense_mask

        mask = dense_mask(self.MLP)
        assert mask.shape == (4810,) and int(mask.sum()) == 714
        assert not mask[:4096].any() and mask[4096:].all()
        assert dense_mask(((3, 3), (2,), (4, 2, 1), (5, 5), (1,))).tolist() == [False] * 9 + [True] * 2 + [False] * 8 + [True] * 26
        assert dense_mask(((4,), ())).all() and dense_mask(()).numel() == 0

    def test_size_formula(self) -> None:
        # topk of the 4,096 body values (one chunk: 8 + 2·82 + 21) + 2 · 714
        assert expected_payload_bytes("topk:dense=head", 4810, self.MLP) == 8 + 2 * 82 + 21 + 2 * 714
        assert len(encode_update(torch.linspace(-1, 1, 4810), "topk:dense=head", self.MLP)) == 193 + 1428
        with pytest.raises(ValueError, match="needs the model's parameter shapes"):
            expected_payload_bytes("topk:dense=head", 4810)
        with pytest.raises(ValueError, match="the parameter shapes hold 4810 values, not 4811"):
            encode_update(torch.zeros(4811), "topk:dense=head", self.MLP)

    def test_known_answer(self) -> None:
        """Shapes ((2, 2), (1,)): the matrix is the output layer, so all five values are dense, as float16."""
        payload = encode_update(torch.tensor([1.0, -2.0, 0.1, 0.0, 3.0]), "topk:dense=head", ((2, 2), (1,)))
        assert payload == np.array([1.0, -2.0, 0.1, 0.0, 3.0], dtype="<f2").tobytes()
        body = ((4, 1), (1, 1))  # (4, 1) is the body (top-k), (1, 1) the output layer
        payload = encode_update(torch.tensor([0.0, 5.0, 0.0, 0.0, 0.5]), "topk:density=0.0002,dense=head", body)
        # one chunk of 4 values keeps ⌈1·4/4096⌉ = 1: levels (5, 5), index 1, code 0b10; then 0.5 as float16
        assert payload == f32(5.0) + f32(5.0) + struct.pack("<H", 1) + bytes([0b10]) + struct.pack("<e", 0.5)
        decoded = decode_update(payload, "topk:density=0.0002,dense=head", 5, body)
        assert isinstance(decoded, torch.Tensor) and decoded.tolist() == [0.0, 5.0, 0.0, 0.0, 0.5]

    def test_non_finite_dense_value_is_rejected(self) -> None:
        payload = bytearray(encode_update(torch.ones(4810), "topk:dense=head", self.MLP))
        payload[-2:] = struct.pack("<H", 0x7C00)  # +Inf
        assert reason_of(decode_update(bytes(payload), "topk:dense=head", 4810, self.MLP)) is RejectReason.NON_FINITE

    def test_cap_bounds_every_dense_set(self) -> None:
        from p2p_guard.protocol import payload_cap_bytes

        cap = payload_cap_bytes("topk:density=1,dense=head", 8192)
        for layout in (((8192,),), ((8192, 1),), ((8191, 1), (1, 1)), ((4096, 1), (4096,), (0, 1))):
            assert expected_payload_bytes("topk:density=1,dense=head", 8192, layout) <= cap

    def test_error_feedback_keeps_the_float16_rounding_only(self) -> None:
        feedback = ErrorFeedback("topk:dense=head", 4810, decay=1.0, shapes=self.MLP)
        delta = torch.randn(4810, generator=torch.Generator().manual_seed(0))
        _, sent = feedback.compress(delta)
        assert torch.equal(sent[4096:], delta[4096:].half().float())
        assert torch.equal(feedback.residual[4096:], delta[4096:] - delta[4096:].half().float())
        assert int((sent[:4096] != 0).sum()) == 82
        with pytest.raises(ValueError, match="needs the model's parameter shapes"):
            ErrorFeedback("topk:dense=head", 4810)


def test_outer_step_with_a_dense_lr() -> None:
    """θ ← θ − η·g on the top-k coordinates, θ − η_dense·g on the dense ones (momentum 0 and 0.5)."""
    from p2p_guard.training.outer import TOPK_DENSE_OUTER_LR, OuterNesterov, dense_outer_lr

    mask = torch.tensor([False, True, False, True])
    theta, g = torch.zeros(4), torch.tensor([1.0, 1.0, 2.0, -2.0])
    assert OuterNesterov(3.0, 0.0, dense=(mask, 1.0)).step(theta, g).tolist() == [-3.0, -1.0, -6.0, 2.0]
    outer = OuterNesterov(2.0, 0.5, dense=(mask, 1.0))
    outer.step(theta, g)  # b = g, step g + 0.5·b = 1.5·g
    assert outer.step(theta, g).tolist() == [-3.5, -1.75, -7.0, 3.5]  # b = 1.5·g, step g + 0.75·g
    assert dense_outer_lr("topk:dense=head") == TOPK_DENSE_OUTER_LR == 1.0
    assert dense_outer_lr("topk") is None and dense_outer_lr("fp32") is None
    with pytest.raises(ValueError, match="lr="):
        OuterNesterov(3.0, 0.0, dense=(mask, 0.0))
    with pytest.raises(ValueError, match="does not match the dense mask"):
        OuterNesterov(3.0, 0.0, dense=(mask, 1.0)).step(torch.zeros(3), torch.ones(3))
