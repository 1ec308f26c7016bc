"""Unit tests for p2p_guard.guard.integrity: every reason of stage 1, in order, from crafted inputs."""

from __future__ import annotations

import dataclasses
import struct

import pytest
import torch

from p2p_guard.attacks import load_attack
from p2p_guard.attacks.base import AttackContext
from p2p_guard.guard.integrity import RoundExpectation, check_envelope, check_payload
from p2p_guard.identity import Identity
from p2p_guard.protocol import (
    CODECS,
    PROTOCOL_VERSION,
    Accepted,
    Envelope,
    Rejected,
    RejectReason,
    encode_update,
    payload_digest,
)

ALICE = Identity.from_seed(bytes(range(32)))
BASE = b"\x0b" * 32
SHAPES = ((2, 3), (4,))
UPDATE = torch.arange(10, dtype=torch.float32) - 4.5


def expectation(**overrides: object) -> RoundExpectation:
    fields: dict[str, object] = {"run_id": "run-1", "round": 3, "max_staleness": 1, "shapes": SHAPES,
                                 "max_payload_bytes": 1024}
    fields.update(overrides)
    return RoundExpectation(**fields)  # type: ignore[arg-type]


def honest(codec: str = "fp32", vector: torch.Tensor = UPDATE, **overrides: object) -> tuple[Envelope, bytes]:
    payload = encode_update(vector, codec if codec in CODECS else "fp32")
    fields: dict[str, object] = {
        "protocol_version": PROTOCOL_VERSION, "run_id": "run-1", "round": 3, "sender": ALICE.peer_id,
        "base_hash": BASE, "digest": payload_digest(payload), "codec": codec, "shapes": SHAPES,
        "n_samples": 64, "payload_bytes": len(payload),
    }
    fields.update(overrides)
    return Envelope(**fields), payload  # type: ignore[arg-type]


def reason_of(result: object) -> RejectReason | None:
    return result.reason if isinstance(result, Rejected) else None


class TestRoundExpectation:
    def test_defaults_and_numel(self) -> None:
        expect = expectation(shapes=[[2, 3], [4]])
        assert expect.shapes == SHAPES
        assert expect.numel == 10
        assert expect.codecs == ("fp32", "fp16", "int8", "int4", "topk")

    @pytest.mark.parametrize(
        "overrides",
        [{"run_id": ""}, {"round": -1}, {"round": True}, {"max_staleness": -1}, {"max_staleness": 1.5},
         {"codecs": ()}, {"codecs": ("int9",)}, {"max_payload_bytes": 0}, {"max_payload_bytes": 1.5},
         {"shapes": ((2, -3),)}, {"shapes": ((2.0,),)}],
    )
    def test_rejects_bad_configuration(self, overrides: dict[str, object]) -> None:
        with pytest.raises(ValueError):  # noqa: PT011
            expectation(**overrides)


class TestCheckEnvelope:
    @pytest.mark.parametrize("codec", ["fp32", "fp16"])
    def test_honest_accepted(self, codec: str) -> None:
        env, _ = honest(codec)
        assert check_envelope(env, expectation()) == Accepted()

    @pytest.mark.parametrize(
        ("overrides", "reason"),
        [
            ({"run_id": "run-2"}, RejectReason.WRONG_RUN),
            ({"round": 2}, RejectReason.WRONG_ROUND),
            ({"round": 4}, RejectReason.WRONG_ROUND),
            ({"base_round": 1}, RejectReason.STALE_BASE),
            ({"codec": "int9"}, RejectReason.DECODE_ERROR),
            ({"shapes": ((3, 2), (4,))}, RejectReason.SHAPE_MISMATCH),
            ({"shapes": ((10,),)}, RejectReason.SHAPE_MISMATCH),
            ({"shapes": ((2, 3), (4,), (1,))}, RejectReason.SHAPE_MISMATCH),
            ({"shapes": ()}, RejectReason.SHAPE_MISMATCH),
            ({"payload_bytes": 2**63 - 1}, RejectReason.OVERSIZE),
            ({"payload_bytes": 1025}, RejectReason.OVERSIZE),
            ({"payload_bytes": 39}, RejectReason.DECODE_ERROR),
            ({"payload_bytes": 41}, RejectReason.DECODE_ERROR),
            ({"payload_bytes": 0}, RejectReason.DECODE_ERROR),
        ],
    )
    def test_each_reason(self, overrides: dict[str, object], reason: RejectReason) -> None:
        env, _ = honest(**overrides)
        result = check_envelope(env, expectation())
        assert reason_of(result) is reason
        assert isinstance(result, Rejected) and result.detail

    def test_codec_not_allowed_by_this_peer(self) -> None:
        env, _ = honest("fp16")
        assert reason_of(check_envelope(env, expectation(codecs=("fp32",)))) is RejectReason.DECODE_ERROR

    def test_fp16_size_is_checked_against_fp16(self) -> None:
        env, _ = honest("fp16", payload_bytes=40)  # the fp32 size under an fp16 codec
        assert reason_of(check_envelope(env, expectation())) is RejectReason.DECODE_ERROR

    def test_order_cheapest_first(self) -> None:
        everything_wrong, _ = honest(run_id="x", round=0, base_hash=bytes(32), codec="int9", shapes=((1,),),
                                     payload_bytes=2**40)
        assert reason_of(check_envelope(everything_wrong, expectation())) is RejectReason.WRONG_RUN
        env = dataclasses.replace(everything_wrong, run_id="run-1")
        assert reason_of(check_envelope(env, expectation())) is RejectReason.WRONG_ROUND
        env = dataclasses.replace(env, round=3)
        assert reason_of(check_envelope(env, expectation())) is RejectReason.STALE_BASE
        env = dataclasses.replace(env, base_round=3)
        assert reason_of(check_envelope(env, expectation())) is RejectReason.DECODE_ERROR
        env = dataclasses.replace(env, codec="fp32")
        assert reason_of(check_envelope(env, expectation())) is RejectReason.SHAPE_MISMATCH
        env = dataclasses.replace(env, shapes=SHAPES)
        assert reason_of(check_envelope(env, expectation())) is RejectReason.OVERSIZE


class TestCheckPayload:
    @pytest.mark.parametrize("codec", ["fp32", "fp16"])
    def test_honest_decoded(self, codec: str) -> None:
        env, payload = honest(codec)
        update = check_payload(env, payload, expectation())
        assert isinstance(update, torch.Tensor)
        assert update.dtype == torch.float32
        assert torch.equal(update, UPDATE)

    def test_bytes_like_payload(self) -> None:
        env, payload = honest()
        assert isinstance(check_payload(env, memoryview(payload), expectation()), torch.Tensor)
        assert isinstance(check_payload(env, bytearray(payload), expectation()), torch.Tensor)

    def test_envelope_rechecked(self) -> None:
        env, payload = honest(round=9)
        assert reason_of(check_payload(env, payload, expectation())) is RejectReason.WRONG_ROUND

    def test_oversize(self) -> None:
        env, payload = honest()
        assert reason_of(check_payload(env, payload + b"\x00", expectation())) is RejectReason.OVERSIZE

    def test_oversize_checked_before_digest(self) -> None:
        env, payload = honest()
        env = dataclasses.replace(env, digest=payload_digest(payload + b"\x00"))
        assert reason_of(check_payload(env, payload + b"\x00", expectation())) is RejectReason.OVERSIZE

    @pytest.mark.parametrize("tamper", ["flip", "truncate", "empty", "other"])
    def test_digest_mismatch(self, tamper: str) -> None:
        env, payload = honest()
        served = {
            "flip": bytes([payload[0] ^ 1]) + payload[1:],
            "truncate": payload[:-4],
            "empty": b"",
            "other": encode_update(-UPDATE, "fp32"),
        }[tamper]
        assert reason_of(check_payload(env, served, expectation())) is RejectReason.DIGEST_MISMATCH

    def test_short_payload_matching_its_digest_is_decode_error(self) -> None:
        env, payload = honest()
        short = payload[:-4]
        env = dataclasses.replace(env, digest=payload_digest(short))
        assert reason_of(check_payload(env, short, expectation())) is RejectReason.DECODE_ERROR

    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
    @pytest.mark.parametrize("codec", ["fp32", "fp16"])
    def test_non_finite(self, bad: float, codec: str) -> None:
        vector = UPDATE.clone()
        vector[7] = bad
        env, payload = honest(codec, vector)
        result = check_payload(env, payload, expectation())
        assert reason_of(result) is RejectReason.NON_FINITE
        assert isinstance(result, Rejected) and "1 of 10" in result.detail

    def test_signalling_nan_bits(self) -> None:
        payload = bytearray(encode_update(UPDATE, "fp32"))
        payload[0:4] = struct.pack("<I", 0x7F800001)  # a signalling NaN bit pattern
        env, _ = honest()
        env = dataclasses.replace(env, digest=payload_digest(bytes(payload)))
        assert reason_of(check_payload(env, bytes(payload), expectation())) is RejectReason.NON_FINITE

    def test_fp16_overflow_is_non_finite(self) -> None:
        env, payload = honest("fp16", UPDATE * 1e5)
        assert reason_of(check_payload(env, payload, expectation())) is RejectReason.NON_FINITE

    def test_returned_update_is_independent_of_payload(self) -> None:
        env, payload = honest()
        buffer = bytearray(payload)
        update = check_payload(env, buffer, expectation())
        assert isinstance(update, torch.Tensor)
        buffer[:] = bytes(len(buffer))
        assert torch.equal(update, UPDATE)

    @pytest.mark.parametrize("codec", ["fp32", "fp16"])
    @pytest.mark.parametrize("zero", [0.0, -0.0])
    def test_all_zero_update_is_a_free_rider(self, codec: str, zero: float) -> None:
        env, payload = honest(codec, torch.full((10,), zero))
        result = check_payload(env, payload, expectation())
        assert reason_of(result) is RejectReason.ZERO_UPDATE
        assert isinstance(result, Rejected) and result.detail == "all 10 values are zero: no computation"

    def test_one_tiny_nonzero_value_is_an_update(self) -> None:
        vector = torch.zeros(10)
        vector[9] = 1e-45  # the smallest fp32 subnormal
        env, payload = honest("fp32", vector)
        update = check_payload(env, payload, expectation())
        assert isinstance(update, torch.Tensor)
        assert torch.equal(update, vector)

    def test_non_finite_is_checked_before_zero(self) -> None:
        vector = torch.zeros(10)
        vector[3] = float("nan")
        env, payload = honest("fp32", vector)
        assert reason_of(check_payload(env, payload, expectation())) is RejectReason.NON_FINITE


def test_a_free_riders_update_is_rejected_before_the_guard() -> None:
    """``free_rider`` sends zeros like the honest rows; ``check_payload`` rejects it as ``ZERO_UPDATE``."""
    ctx = AttackContext(round=3, n=4, f=1, generator=torch.Generator().manual_seed(0))
    update = load_attack("free_rider")(torch.stack([UPDATE, -UPDATE]), ctx)
    env, payload = honest("fp32", update)
    assert reason_of(check_payload(env, payload, expectation())) is RejectReason.ZERO_UPDATE
