"""Unit tests for p2p_guard.protocol: reasons, codecs, digests, the signed envelope (and mallory's inputs)."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import msgpack
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.identity import Identity
from p2p_guard.protocol import (
    BODY_FIELDS,
    ENVELOPE_SIGNING_CONTEXT,
    MAX_ENVELOPE_BYTES,
    PROTOCOL_VERSION,
    Accepted,
    Envelope,
    Rejected,
    RejectReason,
    decode_update,
    encode_update,
    envelope_message,
    expected_payload_bytes,
    open_envelope,
    pack_envelope,
    payload_digest,
    sign_envelope,
    state_hash,
)

ALICE = Identity.from_seed(bytes(range(32)))
BOB = Identity.from_seed(bytes(range(1, 33)))


def make_envelope(**overrides: object) -> Envelope:
    fields: dict[str, object] = {
        "protocol_version": PROTOCOL_VERSION,
        "run_id": "run-1",
        "round": 7,
        "sender": ALICE.peer_id,
        "base_hash": b"\x01" * 32,
        "digest": b"\x02" * 32,
        "codec": "fp32",
        "shapes": ((2, 3), (4,)),
        "n_samples": 128,
        "payload_bytes": 40,
    }
    fields.update(overrides)
    return Envelope(**fields)  # type: ignore[arg-type]


def body_list(env: Envelope) -> list[object]:
    return [
        env.protocol_version, env.run_id, env.round, env.sender, env.base_hash,
        env.digest, env.codec, [list(s) for s in env.shapes], env.n_samples, env.payload_bytes, env.base_round,
    ]


def craft(body: object, *, signer: Identity | None = ALICE, signature: bytes | None = None) -> bytes:
    """Pack an arbitrary body (object or raw bytes) the way mallory would, optionally validly signed."""
    body_bytes = body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True)
    if signature is None:
        signature = signer.sign(ENVELOPE_SIGNING_CONTEXT + body_bytes) if signer else b""
    return msgpack.packb([body_bytes, signature], use_bin_type=True)


def reason_of(result: object) -> RejectReason | None:
    return result.reason if isinstance(result, Rejected) else None


class TestReasons:
    def test_all_reasons_with_snake_case_values(self) -> None:
        names = {
            "UNSIGNED", "BAD_SIGNATURE", "UNSUPPORTED_VERSION", "WRONG_RUN", "WRONG_ROUND", "STALE_BASE",
            "DECODE_ERROR", "SHAPE_MISMATCH", "OVERSIZE", "NON_FINITE", "DIGEST_MISMATCH", "EQUIVOCATION",
            "TIMEOUT", "UNAVAILABLE", "ZERO_UPDATE", "EXCLUDED", "LATE_COMMIT",
        }
        assert {reason.name for reason in RejectReason} == names
        for reason in RejectReason:
            assert reason.value == reason.name.lower()

    def test_results_are_frozen_and_report_ok(self) -> None:
        rejected = Rejected(RejectReason.OVERSIZE, "too big")
        assert Accepted().ok is True
        assert rejected.ok is False
        assert rejected.evidence == ()
        with pytest.raises(dataclasses.FrozenInstanceError):
            rejected.detail = "x"  # type: ignore[misc]

    def test_rejected_checks_types(self) -> None:
        with pytest.raises(TypeError, match="RejectReason"):
            Rejected("oversize", "x")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="detail"):
            Rejected(RejectReason.OVERSIZE, 3)  # type: ignore[arg-type]


class TestCodecs:
    def test_known_answers(self) -> None:
        vector = torch.tensor([1.0, -2.0])
        assert encode_update(vector, "fp32") == bytes.fromhex("0000803f000000c0")
        assert encode_update(vector, "fp16") == bytes.fromhex("003c00c0")

    @pytest.mark.parametrize("codec", ["fp32", "fp16"])  # the lossy codecs: tests/unit/test_codecs.py
    def test_round_trip(self, codec: str) -> None:
        vector = torch.tensor([0.0, -0.5, 3.25, 1024.0, -7.0])
        payload = encode_update(vector, codec)
        assert len(payload) == expected_payload_bytes(codec, 5)
        decoded = decode_update(payload, codec, 5)
        assert isinstance(decoded, torch.Tensor)
        assert decoded.dtype == torch.float32
        assert decoded.shape == (5,)
        assert torch.equal(decoded, vector)

    def test_fp16_rounds(self) -> None:
        vector = torch.randn(100, generator=torch.Generator().manual_seed(0))
        decoded = decode_update(encode_update(vector, "fp16"), "fp16", 100)
        assert isinstance(decoded, torch.Tensor)
        assert torch.equal(decoded, vector.half().float())

    def test_fp16_overflow_becomes_inf(self) -> None:
        decoded = decode_update(encode_update(torch.tensor([1e6]), "fp16"), "fp16", 1)
        assert isinstance(decoded, torch.Tensor)
        assert torch.isinf(decoded).all()

    def test_decoded_tensor_is_writable_and_owned(self) -> None:
        payload = bytearray(encode_update(torch.tensor([1.0, 2.0]), "fp32"))
        decoded = decode_update(payload, "fp32", 2)
        assert isinstance(decoded, torch.Tensor)
        payload[:] = bytes(8)
        decoded += 1
        assert decoded.tolist() == [2.0, 3.0]

    def test_encode_does_not_mutate_input(self) -> None:
        vector = torch.tensor([1.5, -2.5], dtype=torch.float64)
        encode_update(vector, "fp16")
        assert vector.dtype == torch.float64
        assert vector.tolist() == [1.5, -2.5]

    def test_expected_payload_bytes(self) -> None:
        assert expected_payload_bytes("fp32", 10) == 40
        assert expected_payload_bytes("fp16", 10) == 20
        assert expected_payload_bytes("fp32", 0) == 0

    @pytest.mark.parametrize(
        ("codec", "numel"),
        [("int9", 3), ("topk:density=0", 3), ("fp32", -1), ("fp32", True), ("fp32", 2.0)],
    )
    def test_expected_payload_bytes_rejects(self, codec: str, numel: object) -> None:
        with pytest.raises(ValueError):  # noqa: PT011 - the message is checked elsewhere
            expected_payload_bytes(codec, numel)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("payload", "codec", "numel"),
        [(bytes(7), "fp32", 2), (bytes(9), "fp32", 2), (b"", "fp32", 1), (bytes(4), "fp16", 1),
         (bytes(8), "int8", 8), (bytes(8), "", 2), (bytes(8), None, 2)],
    )
    def test_decode_rejects(self, payload: bytes, codec: str, numel: int) -> None:
        assert reason_of(decode_update(payload, codec, numel)) is RejectReason.DECODE_ERROR

    @pytest.mark.parametrize(
        ("vector", "codec"),
        [(torch.zeros(2, 2), "fp32"), (torch.zeros(3, dtype=torch.int64), "fp32"), ([1.0], "fp32"),
         (torch.zeros(3), "bf16")],
    )
    def test_encode_rejects(self, vector: object, codec: str) -> None:
        with pytest.raises(ValueError):  # noqa: PT011
            encode_update(vector, codec)  # type: ignore[arg-type]


class TestDigests:
    def test_payload_digest_known_answer(self) -> None:
        # version 3: the hash-tree root (protocol/chunks.py), one chunk "abc" of 3 bytes at C = 1 MiB
        leaf = hashlib.sha256(b"p2p_guard.chunk.v3\x00abc").digest()
        expected = hashlib.sha256(b"p2p_guard.payload.v3\x00" + struct.pack("<QQ", 3, 1 << 20) + leaf).digest()
        assert payload_digest(b"abc") == expected
        assert payload_digest(b"abc") != hashlib.sha256(b"abc").digest()  # not version 2's whole-payload SHA-256

    def test_state_hash_known_answer(self) -> None:
        a, b = torch.tensor([1.0, -2.0]), torch.tensor([0.5])
        expected = hashlib.sha256(
            b"p2p_guard.state.v1\x00" + struct.pack("<Q", 2)
            + struct.pack("<Q", 2) + bytes.fromhex("0000803f000000c0")
            + struct.pack("<Q", 1) + bytes.fromhex("0000003f")
        ).digest()
        assert state_hash(a, b) == expected

    def test_state_hash_mixes_in_lengths(self) -> None:
        a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0])
        assert state_hash(a, b) != state_hash(torch.cat([a, b]))
        assert state_hash(a, b) != state_hash(torch.tensor([1.0]), torch.tensor([2.0, 3.0]))
        assert state_hash(a, b) == state_hash(a.clone(), b.clone())

    def test_state_hash_is_bitwise(self) -> None:
        assert state_hash(torch.tensor([0.0])) != state_hash(torch.tensor([-0.0]))

    def test_state_hash_non_contiguous_view(self) -> None:
        base = torch.arange(6, dtype=torch.float32)
        assert state_hash(base[::2]) == state_hash(torch.tensor([0.0, 2.0, 4.0]))

    @pytest.mark.parametrize(
        ("vector", "error"),
        [(torch.zeros(3, dtype=torch.float64), TypeError), (torch.zeros(2, 2), ValueError),
         ([0.0], TypeError)],
    )
    def test_state_hash_rejects(self, vector: object, error: type[Exception]) -> None:
        with pytest.raises(error):
            state_hash(vector)  # type: ignore[arg-type]


class TestEnvelopeRoundTrip:
    def test_sign_then_open(self) -> None:
        env = make_envelope()
        assert open_envelope(sign_envelope(env, ALICE)) == env

    def test_open_accepts_bytes_like(self) -> None:
        data = sign_envelope(make_envelope(), ALICE)
        assert isinstance(open_envelope(bytearray(data)), Envelope)
        assert isinstance(open_envelope(memoryview(data)), Envelope)

    def test_wire_layout(self) -> None:
        env = make_envelope()
        data = sign_envelope(env, ALICE)
        body, signature = msgpack.unpackb(data)
        assert msgpack.unpackb(body) == body_list(env)
        assert ALICE.sign(ENVELOPE_SIGNING_CONTEXT + body) == signature
        assert envelope_message(env) == ENVELOPE_SIGNING_CONTEXT + body
        assert BODY_FIELDS == tuple(field.name for field in dataclasses.fields(Envelope))

    def test_signing_is_deterministic(self) -> None:
        assert sign_envelope(make_envelope(), ALICE) == sign_envelope(make_envelope(), ALICE)

    def test_shapes_normalised_to_tuples(self) -> None:
        env = make_envelope(shapes=[[2, 3], [4]])
        assert env.shapes == ((2, 3), (4,))
        assert env.numel == 10
        assert make_envelope(shapes=[[]]).numel == 1

    def test_huge_declared_size_is_structurally_valid(self) -> None:
        env = make_envelope(payload_bytes=2**63 - 1)
        assert open_envelope(sign_envelope(env, ALICE)) == env

    def test_refuses_to_sign_for_another_sender(self) -> None:
        with pytest.raises(ValueError, match="another peer"):
            sign_envelope(make_envelope(sender=BOB.peer_id), ALICE)

    @pytest.mark.parametrize(
        ("overrides", "error"),
        [
            ({"round": -1}, ValueError), ({"round": True}, TypeError), ({"round": 1.0}, TypeError),
            ({"round": 2**63}, ValueError), ({"run_id": ""}, ValueError), ({"run_id": "x" * 257}, ValueError),
            ({"run_id": b"run"}, TypeError), ({"codec": ""}, ValueError), ({"sender": b""}, ValueError),
            ({"sender": "peer"}, TypeError), ({"base_hash": bytes(31)}, ValueError),
            ({"digest": bytearray(32)}, TypeError), ({"shapes": ((2, -3),)}, ValueError),
            ({"shapes": ((1,) * 9,)}, ValueError), ({"shapes": ((1,),) * 4097}, ValueError),
            ({"shapes": "2x3"}, TypeError), ({"shapes": (3,)}, TypeError), ({"shapes": ((2.0,),)}, TypeError),
            ({"n_samples": -5}, ValueError), ({"payload_bytes": None}, TypeError),
        ],
    )
    def test_constructor_rejects(self, overrides: dict[str, object], error: type[Exception]) -> None:
        with pytest.raises(error):
            make_envelope(**overrides)

    def test_max_bytes_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="max_bytes"):
            open_envelope(b"", max_bytes=0)


class TestOpenEnvelopeMallory:
    """Every reason open_envelope gives, from a crafted input."""

    def test_oversize_before_parsing(self) -> None:
        data = sign_envelope(make_envelope(), ALICE)
        assert reason_of(open_envelope(data, max_bytes=len(data) - 1)) is RejectReason.OVERSIZE
        assert reason_of(open_envelope(b"\xc1" * (MAX_ENVELOPE_BYTES + 1))) is RejectReason.OVERSIZE

    @pytest.mark.parametrize(
        "data",
        [
            b"",
            b"\xc1",  # never-used msgpack byte
            b"garbage that is not msgpack at all",
            msgpack.packb([b"x"]),  # one element
            msgpack.packb([b"x", b"y", b"z"]),  # three elements
            msgpack.packb({"body": b"x", "sig": b"y"}),  # a map
            msgpack.packb(["body", b"sig"]),  # body as str
            msgpack.packb([b"body", None]),  # nil signature
            msgpack.packb(42),
            msgpack.packb([b"\xc1", b""]),  # body not msgpack
            b"\x91" * 5000 + b"\xc0",  # deeply nested arrays
            msgpack.packb([msgpack.packb([PROTOCOL_VERSION, "r"]), b""]),  # too few fields
            msgpack.packb([msgpack.packb("just a string"), b""]),
            msgpack.packb([msgpack.packb([]), b""]),
            msgpack.packb([msgpack.packb([True]), b""]),  # bool version
            msgpack.packb([msgpack.packb([1.0]), b""]),  # float version
        ],
    )
    def test_garbage_is_decode_error(self, data: bytes) -> None:
        assert reason_of(open_envelope(data)) is RejectReason.DECODE_ERROR

    def test_non_bytes_is_decode_error(self) -> None:
        assert reason_of(open_envelope("text")) is RejectReason.DECODE_ERROR  # type: ignore[arg-type]
        assert reason_of(open_envelope(None)) is RejectReason.DECODE_ERROR  # type: ignore[arg-type]

    @pytest.mark.parametrize("cut", [1, 5, 17, 60, -1])
    def test_truncated_is_decode_error(self, cut: int) -> None:
        data = sign_envelope(make_envelope(), ALICE)
        assert reason_of(open_envelope(data[:cut])) is RejectReason.DECODE_ERROR

    def test_trailing_bytes_are_decode_error(self) -> None:
        data = sign_envelope(make_envelope(), ALICE)
        assert reason_of(open_envelope(data + b"\x00")) is RejectReason.DECODE_ERROR

    def test_trailing_bytes_in_body_are_decode_error(self) -> None:
        body = msgpack.packb(body_list(make_envelope())) + b"\x00"
        assert reason_of(open_envelope(craft(body))) is RejectReason.DECODE_ERROR

    @pytest.mark.parametrize(
        ("index", "value"),
        [
            (1, b"run-1"),  # run id as bytes
            (1, ""),
            (1, "x" * 1000),  # longer than the msgpack str limit
            (2, True),  # bool round
            (2, -1),
            (2, 1.5),
            (2, None),
            (3, "12D3KooW"),  # sender as str
            (3, b"x" * 1000),  # sender longer than the bin limit
            (4, b"\x01" * 31),  # short base hash
            (5, b"\x02" * 33),  # long digest
            (6, 32),  # codec as int
            (7, [[2, -3]]),  # negative dimension
            (7, [[2, 3.0]]),
            (7, [[True]]),
            (7, [2, 3]),  # shapes not nested
            (7, [[1] * 9]),  # rank 9
            (7, [[1]] * 4097),  # too many tensors
            (7, {"w": [2]}),
            (8, -1),
            (9, 2**64 - 1),  # above 2**63 - 1
            (9, msgpack.ExtType(5, b"")),
            (9, msgpack.ExtType(5, b"\x00")),
        ],
    )
    def test_bad_field_is_decode_error(self, index: int, value: object) -> None:
        body = body_list(make_envelope())
        body[index] = value
        assert reason_of(open_envelope(craft(body))) is RejectReason.DECODE_ERROR

    def test_extra_field_is_decode_error(self) -> None:
        assert reason_of(open_envelope(craft([*body_list(make_envelope()), 0]))) is RejectReason.DECODE_ERROR

    @pytest.mark.parametrize("version", [0, 1, 2, 4, 255, 2**40])
    def test_unsupported_version(self, version: int) -> None:
        data = sign_envelope(make_envelope(protocol_version=version), ALICE)
        assert reason_of(open_envelope(data)) is RejectReason.UNSUPPORTED_VERSION

    def test_an_empty_body_array_has_no_version(self) -> None:
        # body b"\x90\x00": an empty array, then a 0 outside it (found by the live fuzzer, stop 14)
        assert open_envelope(b"\x92\xc4\x02\x90\x00\xc4\x00") == Rejected(
            RejectReason.DECODE_ERROR, "body is not an array starting with an int version")

    def test_future_version_with_other_layout(self) -> None:
        assert reason_of(open_envelope(craft([4, {"a": 1}]))) is RejectReason.UNSUPPORTED_VERSION

    def test_unsigned(self) -> None:
        data = pack_envelope(make_envelope(), b"")
        assert reason_of(open_envelope(data)) is RejectReason.UNSIGNED

    def test_foreign_signature(self) -> None:
        body = body_list(make_envelope())  # sender = ALICE, signed by BOB
        assert reason_of(open_envelope(craft(body, signer=BOB))) is RejectReason.BAD_SIGNATURE

    def test_impersonation_by_rewriting_sender(self) -> None:
        body = body_list(make_envelope(sender=BOB.peer_id))
        assert reason_of(open_envelope(craft(body, signer=ALICE))) is RejectReason.BAD_SIGNATURE

    def test_signature_without_context_is_rejected(self) -> None:
        body = msgpack.packb(body_list(make_envelope()))
        data = msgpack.packb([body, ALICE.sign(body)])
        assert reason_of(open_envelope(data)) is RejectReason.BAD_SIGNATURE

    def test_tampered_body(self) -> None:
        signed = msgpack.packb(body_list(make_envelope(round=7)))
        tampered = msgpack.packb(body_list(make_envelope(round=8)))
        data = msgpack.packb([tampered, ALICE.sign(ENVELOPE_SIGNING_CONTEXT + signed)])
        assert reason_of(open_envelope(data)) is RejectReason.BAD_SIGNATURE

    @pytest.mark.parametrize("signature", [b"\x00", b"\xff" * 64, b"\x01" * 63, b"\x01" * 65, bytes(4096)])
    def test_garbage_signature(self, signature: bytes) -> None:
        data = pack_envelope(make_envelope(), signature)
        assert reason_of(open_envelope(data)) is RejectReason.BAD_SIGNATURE

    @pytest.mark.parametrize(
        "sender",
        [b"\x12\x20" + bytes(32), b"\x00\x24\x08\x00\x12\x20" + bytes(32), b"\x00",
         b"\x00\x24\x08\x01\x12\x20"],
    )
    def test_sender_without_ed25519_key(self, sender: bytes) -> None:
        body = body_list(make_envelope(sender=sender))
        assert reason_of(open_envelope(craft(body, signer=ALICE))) is RejectReason.BAD_SIGNATURE

    @settings(max_examples=2000, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.binary(max_size=512))
    def test_random_bytes_never_raise(self, data: bytes) -> None:
        result = open_envelope(data)
        assert isinstance(result, (Envelope, Rejected))

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(position=st.integers(min_value=0, max_value=10_000), byte=st.integers(min_value=0, max_value=255))
    def test_single_byte_corruption_never_raises(self, position: int, byte: int) -> None:
        data = bytearray(sign_envelope(make_envelope(), ALICE))
        data[position % len(data)] = byte
        result = open_envelope(bytes(data))
        assert isinstance(result, (Envelope, Rejected))
        if isinstance(result, Envelope):
            assert result == make_envelope()  # a flip that still verifies cannot change any field


_MSGPACK_LEAVES = (
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.floats()
    | st.text(max_size=40) | st.binary(max_size=40)
)
_MSGPACK_VALUES = st.recursive(_MSGPACK_LEAVES, lambda inner: st.lists(inner, max_size=6), max_leaves=12)


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(fields=st.lists(_MSGPACK_VALUES, max_size=10), version_first=st.booleans())
def test_random_signed_bodies_never_raise(fields: list[object], version_first: bool) -> None:
    body = [PROTOCOL_VERSION, *fields] if version_first else fields
    result = open_envelope(craft(body))
    assert isinstance(result, (Envelope, Rejected))


def test_envelope_accepts_torch_size_shapes() -> None:
    env = make_envelope(shapes=[torch.Size([2, 3]), torch.Size([4])])
    assert env.shapes == ((2, 3), (4,))
    assert type(env.shapes[0]) is tuple
