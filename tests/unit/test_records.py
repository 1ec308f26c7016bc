"""Unit tests of the small signed DHT records (``protocol/records.py``): sign, open, and every rejection.

Mallory-style: each test crafts one hostile record and checks the exact :class:`RejectReason`. The last tests
feed thousands of random inputs and check that :func:`open_record` never raises.
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.identity import Identity
from p2p_guard.protocol import ENVELOPE_SIGNING_CONTEXT, PROTOCOL_VERSION, Rejected, RejectReason
from p2p_guard.protocol.records import (
    MAX_RECORD_BYTES,
    RECORD_KINDS,
    RECORD_SIGNING_CONTEXT,
    SignedRecord,
    open_record,
    sign_record,
)

RUN = "test-run"
STATE_HASH = bytes(range(32))
ALICE = Identity.from_seed(b"\x01" * 32)
MALLORY = Identity.from_seed(b"\x02" * 32)


def craft(fields: list[object], *, signer: Identity | None = ALICE, signature: bytes | None = None,
          context: bytes = RECORD_SIGNING_CONTEXT) -> bytes:
    """A record with arbitrary body ``fields``, signed by ``signer`` (or carrying ``signature`` as given)."""
    body = msgpack.packb(fields, use_bin_type=True)
    if signature is None:
        assert signer is not None
        signature = signer.sign(context + body)
    return msgpack.packb([body, signature], use_bin_type=True)


def state_fields(**changes: object) -> list[object]:
    """Body fields of a valid ``state`` record by Alice, with ``changes`` applied by field name."""
    fields = {"kind": "state", "version": PROTOCOL_VERSION, "run": RUN, "round": 3, "sender": ALICE.peer_id,
              "value": STATE_HASH}
    fields.update(changes)
    return list(fields.values())


def assert_rejected(result: object, reason: RejectReason) -> None:
    assert isinstance(result, Rejected), f"expected Rejected({reason}), got {result!r}"
    assert result.reason is reason, f"expected {reason}, got {result.reason}: {result.detail}"
    assert isinstance(result.detail, str)


class TestRoundTrip:
    def test_state_record(self) -> None:
        data = sign_record("state", RUN, 3, STATE_HASH, ALICE)
        assert open_record(data, kind="state", run_id=RUN) == SignedRecord(
            kind="state", run_id=RUN, round=3, sender=ALICE.peer_id, value=STATE_HASH)

    def test_presence_record(self) -> None:
        data = sign_record("presence", RUN, 7, 7, ALICE)
        assert open_record(data, kind="presence", run_id=RUN) == SignedRecord(
            kind="presence", run_id=RUN, round=7, sender=ALICE.peer_id, value=7)

    def test_round_zero_and_large_round(self) -> None:
        for round_ in (0, 2**63 - 1):
            data = sign_record("presence", RUN, round_, round_, ALICE)
            record = open_record(data, kind="presence", run_id=RUN)
            assert isinstance(record, SignedRecord)
            assert record.round == round_

    def test_crafted_record_matches_sign_record(self) -> None:
        """The layout of the module docstring and docs/protocol.md is exactly what ``sign_record`` writes."""
        assert craft(state_fields()) == sign_record("state", RUN, 3, STATE_HASH, ALICE)

    def test_signing_is_deterministic(self) -> None:
        first = sign_record("state", RUN, 3, STATE_HASH, ALICE)
        assert first == sign_record("state", RUN, 3, STATE_HASH, ALICE)

    def test_longest_run_id_fits(self) -> None:
        run = "r" * 256
        data = sign_record("state", run, 2**63 - 1, STATE_HASH, ALICE)
        assert len(data) <= MAX_RECORD_BYTES
        assert isinstance(open_record(data, kind="state", run_id=run), SignedRecord)

    def test_unknown_kind_refused_when_signing(self) -> None:
        with pytest.raises(ValueError, match="kind"):
            sign_record("vote", RUN, 0, 0, ALICE)

    def test_kinds(self) -> None:
        assert RECORD_KINDS == ("state", "presence", "close", "leave", "shard")

    def test_shard_record(self) -> None:
        data = sign_record("shard", RUN, 4, [2, 3], ALICE)
        assert len(data) <= MAX_RECORD_BYTES
        expected = SignedRecord(kind="shard", run_id=RUN, round=4, sender=ALICE.peer_id, value=[2, 3])
        assert open_record(data, kind="shard", run_id=RUN) == expected
        assert_rejected(open_record(data, kind=("presence", "leave"), run_id=RUN), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("value", [3, [1], [1, 2, 3], [1, True], [-1, 3], [1, 2**63], [1.0, 3], [b"\x01", 3],
                                       [[1], 3]])
    def test_shard_value_must_be_two_counts(self, value: object) -> None:
        """The range check (shard < count) is the reader's (``swarm.shard_claims``); the type check is here."""
        result = open_record(craft(state_fields(kind="shard", value=value)), kind="shard", run_id=RUN)
        assert_rejected(result, RejectReason.DECODE_ERROR)
        assert result.detail == "bad shard value"  # type: ignore[union-attr]

    def test_leave_record(self) -> None:
        data = sign_record("leave", RUN, 4, 1_700_000_000, ALICE)
        expected = SignedRecord(kind="leave", run_id=RUN, round=4, sender=ALICE.peer_id, value=1_700_000_000)
        assert open_record(data, kind="leave", run_id=RUN) == expected
        assert open_record(data, kind=("presence", "leave"), run_id=RUN) == expected
        assert_rejected(open_record(data, kind="presence", run_id=RUN), RejectReason.DECODE_ERROR)

    def test_tuple_of_kinds_keeps_each_kinds_value_rule(self) -> None:
        presence = sign_record("presence", RUN, 3, 3, ALICE)
        assert open_record(presence, kind=("presence", "leave"), run_id=RUN).kind == "presence"  # type: ignore[union-attr]
        state = sign_record("state", RUN, 3, STATE_HASH, ALICE)
        assert_rejected(open_record(state, kind=("presence", "leave"), run_id=RUN), RejectReason.DECODE_ERROR)
        body = msgpack.packb(["leave", PROTOCOL_VERSION, RUN, 3, ALICE.peer_id, -5], use_bin_type=True)
        signed = msgpack.packb([body, ALICE.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)
        assert_rejected(open_record(signed, kind=("presence", "leave"), run_id=RUN), RejectReason.DECODE_ERROR)

    def test_close_record(self) -> None:
        data = sign_record("close", RUN, 4, 3, ALICE)
        assert open_record(data, kind="close", run_id=RUN) == SignedRecord(
            kind="close", run_id=RUN, round=4, sender=ALICE.peer_id, value=3)


class TestRejections:
    def test_wrong_kind(self) -> None:
        data = sign_record("state", RUN, 3, STATE_HASH, ALICE)
        assert_rejected(open_record(data, kind="presence", run_id=RUN), RejectReason.DECODE_ERROR)
        data = sign_record("presence", RUN, 3, 3, ALICE)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.DECODE_ERROR)
        data = sign_record("presence", RUN, 3, 3, ALICE)
        assert_rejected(open_record(data, kind="close", run_id=RUN), RejectReason.DECODE_ERROR)
        data = sign_record("close", RUN, 3, 3, ALICE)
        assert_rejected(open_record(data, kind="presence", run_id=RUN), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("value", [-1, True, b"\x00" * 32, 1.5, None, "3"])
    def test_bad_close_value(self, value: object) -> None:
        data = craft(state_fields(kind="close", value=value))
        assert_rejected(open_record(data, kind="close", run_id=RUN), RejectReason.DECODE_ERROR)

    def test_close_of_another_run(self) -> None:
        data = sign_record("close", "other", 3, 3, ALICE)
        assert_rejected(open_record(data, kind="close", run_id=RUN), RejectReason.WRONG_RUN)

    def test_wrong_run(self) -> None:
        data = sign_record("state", "other-run", 3, STATE_HASH, ALICE)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.WRONG_RUN)

    def test_unsigned(self) -> None:
        assert_rejected(open_record(craft(state_fields(), signature=b""), kind="state", run_id=RUN),
                        RejectReason.UNSIGNED)

    @pytest.mark.parametrize("signature", [b"\x00" * 64, b"\xff" * 64, b"short", b"\x00" * 65])
    def test_bad_signature(self, signature: bytes) -> None:
        assert_rejected(open_record(craft(state_fields(), signature=signature), kind="state", run_id=RUN),
                        RejectReason.BAD_SIGNATURE)

    def test_tampered_body(self) -> None:
        body = msgpack.packb(state_fields(), use_bin_type=True)
        signature = ALICE.sign(RECORD_SIGNING_CONTEXT + body)
        tampered = msgpack.packb(state_fields(value=b"\xee" * 32), use_bin_type=True)
        data = msgpack.packb([tampered, signature], use_bin_type=True)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.BAD_SIGNATURE)

    def test_signature_without_context(self) -> None:
        assert_rejected(open_record(craft(state_fields(), context=b""), kind="state", run_id=RUN),
                        RejectReason.BAD_SIGNATURE)

    def test_envelope_signature_is_not_a_record_signature(self) -> None:
        """Domain separation: the same body signed under the envelope context does not pass as a record."""
        data = craft(state_fields(), context=ENVELOPE_SIGNING_CONTEXT)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.BAD_SIGNATURE)

    def test_foreign_key(self) -> None:
        """Mallory signs a record that names Alice as its sender: impersonation."""
        data = craft(state_fields(sender=ALICE.peer_id), signer=MALLORY)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.BAD_SIGNATURE)

    @pytest.mark.parametrize("sender", [b"", b"\x00" * 38, b"\x00\x24\x08\x00\x12\x20" + b"\x01" * 32,
                                        b"\x12\x20" + b"\x01" * 32, b"x" * 500])
    def test_sender_without_ed25519_key(self, sender: bytes) -> None:
        data = craft(state_fields(sender=sender), signer=ALICE)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.BAD_SIGNATURE)

    @pytest.mark.parametrize("sender", ["alice", 5, None, [b"x"]])
    def test_sender_not_bytes(self, sender: object) -> None:
        assert_rejected(open_record(craft(state_fields(sender=sender)), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("data", [
        b"", b"\xc1", b"not msgpack at all", b"\x92", b"\xdd\xff\xff\xff\xff",
        msgpack.packb(5), msgpack.packb("text"), msgpack.packb(None), msgpack.packb(b"bytes"),
        msgpack.packb([b"body", "signature-as-str"]), msgpack.packb([5, b"sig"]),
        msgpack.packb([msgpack.packb([1, 2]), b"sig"]),
        msgpack.packb([msgpack.packb("not an array"), b"sig"]),
        msgpack.packb([b"\xc1", b"sig"]),
    ])
    def test_garbage_bytes(self, data: bytes) -> None:
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("outer", [[], [b"x"], [b"a", b"b", b"c"], [b"a", b"b", b"c", b"d", b"e"]])
    def test_outer_array_of_wrong_length(self, outer: list[bytes]) -> None:
        """``[body, signature]`` with too few or too many items is a decode error, not an exception."""
        result = open_record(msgpack.packb(outer), kind="state", run_id=RUN)
        assert_rejected(result, RejectReason.DECODE_ERROR)

    def test_trailing_bytes(self) -> None:
        data = sign_record("state", RUN, 3, STATE_HASH, ALICE) + b"\x00"
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.DECODE_ERROR)

    def test_body_with_wrong_field_count(self) -> None:
        assert_rejected(open_record(craft(state_fields()[:5]), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)
        assert_rejected(open_record(craft([*state_fields(), 0]), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)

    def test_map_and_ext_types_refused(self) -> None:
        assert_rejected(open_record(msgpack.packb({"a": 1}), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)
        assert_rejected(open_record(msgpack.packb(msgpack.ExtType(1, b"x")), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)

    def test_oversize(self) -> None:
        assert_rejected(open_record(b"\x00" * (MAX_RECORD_BYTES + 1), kind="state", run_id=RUN),
                        RejectReason.OVERSIZE)
        signed_big = sign_record("state", RUN, 3, b"\x00" * 2000, ALICE)
        assert_rejected(open_record(signed_big, kind="state", run_id=RUN), RejectReason.OVERSIZE)

    def test_size_limit_is_inclusive(self) -> None:
        """Exactly MAX_RECORD_BYTES is parsed (and here rejected for its content, not its size)."""
        result = open_record(b"\x00" * MAX_RECORD_BYTES, kind="state", run_id=RUN)
        assert_rejected(result, RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("data", [None, "text", 5, 1.5, [b"a", b"b"], bytearray(b"\x92\xc4\x00\xc4\x00"),
                                      memoryview(b"\x92\xc4\x00\xc4\x00"), object()])
    def test_non_bytes_input(self, data: object) -> None:
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.DECODE_ERROR)

    def test_bool_round(self) -> None:
        assert_rejected(open_record(craft(state_fields(round=True)), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)
        assert_rejected(open_record(craft(state_fields(round=False)), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)

    def test_bool_presence_value(self) -> None:
        fields = state_fields(kind="presence", value=True)
        assert_rejected(open_record(craft(fields), kind="presence", run_id=RUN), RejectReason.DECODE_ERROR)

    def test_bool_version(self) -> None:
        assert_rejected(open_record(craft(state_fields(version=True)), kind="state", run_id=RUN),
                        RejectReason.UNSUPPORTED_VERSION)

    def test_float_version(self) -> None:
        """``1.0 == 1`` in Python, but the wire says int: a float version is not version 3."""
        assert_rejected(open_record(craft(state_fields(version=3.0)), kind="state", run_id=RUN),
                        RejectReason.UNSUPPORTED_VERSION)

    @pytest.mark.parametrize("version", [0, 1, 2, 4, 255, -1, "3", None])
    def test_unsupported_version(self, version: object) -> None:
        assert_rejected(open_record(craft(state_fields(version=version)), kind="state", run_id=RUN),
                        RejectReason.UNSUPPORTED_VERSION)

    def test_negative_round(self) -> None:
        data = sign_record("state", RUN, -1, STATE_HASH, ALICE)
        assert_rejected(open_record(data, kind="state", run_id=RUN), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("round_", [1.0, "3", None, [3]])
    def test_round_not_int(self, round_: object) -> None:
        assert_rejected(open_record(craft(state_fields(round=round_)), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("value", [-1, 1.0, "3", None, b"\x03"])
    def test_bad_presence_value(self, value: object) -> None:
        fields = state_fields(kind="presence", value=value)
        assert_rejected(open_record(craft(fields), kind="presence", run_id=RUN), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("value", [b"", b"\x00" * 31, b"\x00" * 33, 5, "x" * 32, None])
    def test_bad_state_value(self, value: object) -> None:
        assert_rejected(open_record(craft(state_fields(value=value)), kind="state", run_id=RUN),
                        RejectReason.DECODE_ERROR)

    def test_run_id_over_limit_is_decode_error(self) -> None:
        """``sign_record`` does not bound ``run_id``; a reader refuses strings over 256 bytes."""
        data = sign_record("state", "r" * 257, 3, STATE_HASH, ALICE)
        assert_rejected(open_record(data, kind="state", run_id="r" * 257), RejectReason.DECODE_ERROR)


_msgpack_atoms = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
                           st.binary(max_size=80), st.text(max_size=40))
_msgpack_values = st.recursive(_msgpack_atoms, lambda inner: st.lists(inner, max_size=8), max_leaves=12)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=MAX_RECORD_BYTES + 16))
def test_random_bytes_never_raise(data: bytes) -> None:
    result = open_record(data, kind="state", run_id=RUN)
    assert isinstance(result, Rejected)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outer=st.lists(_msgpack_values, max_size=4))
def test_random_msgpack_arrays_never_raise(outer: list[object]) -> None:
    result = open_record(msgpack.packb(outer, use_bin_type=True), kind="presence", run_id=RUN)
    assert isinstance(result, (Rejected, SignedRecord))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(_msgpack_values, min_size=0, max_size=8), kind=st.sampled_from(RECORD_KINDS),
       signed=st.booleans())
def test_random_bodies_never_raise(fields: list[object], kind: str, signed: bool) -> None:
    """Random bodies, validly signed by Alice (so every check past the signature is reached) or not."""
    data = craft(fields, signature=None if signed else b"\x00" * 64)
    result = open_record(data, kind=kind, run_id=RUN)
    assert isinstance(result, (Rejected, SignedRecord))


@settings(max_examples=500, deadline=None)
@given(position=st.integers(min_value=0), byte=st.integers(0, 255))
def test_single_byte_corruption_never_raises(position: int, byte: int) -> None:
    data = bytearray(sign_record("state", RUN, 3, STATE_HASH, ALICE))
    position %= len(data)
    if data[position] == byte:
        return
    data[position] = byte
    result = open_record(bytes(data), kind="state", run_id=RUN)
    assert isinstance(result, (Rejected, SignedRecord))
    if isinstance(result, SignedRecord):  # only a change that keeps the body and signature intact can pass
        assert result.sender == ALICE.peer_id


class TestDocumentedVectors:
    """The test vectors of ``docs/protocol.md`` §10: the code produces them, and the page shows them."""

    SEED = b"\x01" * 32
    PEER_ID = "0024080112208a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c"
    PEER_ID_B58 = "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"
    FP32 = "0000803f000000c00000003f"
    FP16 = "003c00c00038"
    DIGEST = "2bdb9bd6182b4e421d8c3ecd8d185f641298e474c8dd5958a88f9455c995b568"
    STATE = "293dbb2f9353ac4acd3b98637cea7c3a764055b16f15048493ac936d5c3ab1f0"
    BODY_FIELDS = ("9b", "03", "a4 64656d6f", "00", "c4 26 " + PEER_ID, "c4 20 " + STATE, "c4 20 " + DIGEST,
                   "a4 66703332", "91 91 03", "0a", "0c", "00")
    SIGNATURE = ("732bf3d87e57fc7d26733be4d68d9bd2081cb0640d7127bdca505bcc7ef0b161",
                 "b84479232ad63870a49e68b59060d752d68cad57be82d2cbf57654378dfce90a")
    RECORD_BODY = ("96 a8 70726573656e6365 03 a4 64656d6f 00", "c4 26 " + PEER_ID + " 00")
    RECORD_SIGNATURE = ("a708d37a15eea099fb30d4dce97469938103c4aa59701a27ec1b73e6aa3f8776",
                        "164b2bc597dae8992cf7795d274a74d6a8381007531203233eeea0c0b80e3409")

    @staticmethod
    def _hex(*parts: str) -> bytes:
        return bytes.fromhex("".join(parts).replace(" ", ""))

    def test_values(self) -> None:
        import torch

        from p2p_guard.protocol import Envelope, encode_update, payload_digest, sign_envelope, state_hash

        identity = Identity.from_seed(self.SEED)
        assert identity.peer_id.hex() == self.PEER_ID
        assert identity.peer_id_b58 == self.PEER_ID_B58
        delta = torch.tensor([1.0, -2.0, 0.5])
        payload = encode_update(delta, "fp32")
        assert payload.hex() == self.FP32
        assert encode_update(delta, "fp16").hex() == self.FP16
        assert payload_digest(payload).hex() == self.DIGEST
        base = state_hash(torch.tensor([1.0, 2.0]), torch.zeros(2), torch.zeros(2))
        assert base.hex() == self.STATE

        env = Envelope(protocol_version=3, run_id="demo", round=0, sender=identity.peer_id, base_hash=base,
                       digest=payload_digest(payload), codec="fp32", shapes=[[3]], n_samples=10,
                       payload_bytes=12, base_round=0)
        body = self._hex(*self.BODY_FIELDS)
        assert len(body) == 127
        wire = sign_envelope(env, identity)
        assert wire == self._hex("92 c4 7f") + body + self._hex("c4 40", *self.SIGNATURE)
        assert len(wire) == 196

        record = sign_record("presence", "demo", 0, 0, identity)
        record_body = self._hex(*self.RECORD_BODY)
        assert len(record_body) == 0x3A
        assert record == self._hex("92 c4 3a") + record_body + self._hex("c4 40", *self.RECORD_SIGNATURE)
        assert len(record) == 127

    def test_page_shows_them(self) -> None:
        from pathlib import Path

        page = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
        for text in (self.PEER_ID, self.PEER_ID_B58, self.FP32, self.FP16, self.DIGEST, self.STATE,
                     *self.BODY_FIELDS, *self.SIGNATURE, *self.RECORD_BODY, *self.RECORD_SIGNATURE):
            assert text in page, text
