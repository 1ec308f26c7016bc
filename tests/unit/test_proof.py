"""Unit tests of equivocation proofs (``protocol/proof.py``) and of ``p2p-guard verify-proof``.

Mallory-style: a valid proof is accepted; each way two envelopes can fail to prove equivocation is rejected
with its reason; random bytes never make :func:`verify_proof` raise. The CLI is run through
``p2p_guard.cli.main.main`` on a valid, an invalid and a missing file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.cli.main import main
from p2p_guard.identity import Identity
from p2p_guard.protocol import (
    PROTOCOL_VERSION,
    Envelope,
    Rejected,
    RejectReason,
    envelope_message,
    pack_envelope,
    payload_digest,
    sign_envelope,
)
from p2p_guard.protocol.proof import (
    PROOF_MAGIC,
    PROOF_VERSION,
    EquivocationDetector,
    EquivocationProof,
    make_proof,
    max_proof_bytes,
    verify_proof,
)

RUN = "proof-test"
ALICE = Identity.from_seed(b"\x01" * 32)
BOB = Identity.from_seed(b"\x03" * 32)
MALLORY = Identity.from_seed(b"\x02" * 32)


def envelope(
    signer: Identity = ALICE, *, payload: bytes = b"\x00\x00\x80\x3f", **changes: object
) -> Envelope:
    """An envelope of ``signer`` for round 3 of :data:`RUN` over ``payload``, with ``changes`` applied."""
    fields: dict[str, object] = dict(
        protocol_version=PROTOCOL_VERSION,
        run_id=RUN,
        round=3,
        sender=signer.peer_id,
        base_hash=bytes(32),
        digest=payload_digest(payload),
        codec="fp32",
        shapes=[[1]],
        n_samples=10,
        payload_bytes=len(payload),
    )
    fields.update(changes)
    return Envelope(**fields)  # type: ignore[arg-type]


def signed(signer: Identity = ALICE, **kwargs: object) -> bytes:
    return sign_envelope(envelope(signer, **kwargs), signer)


A = signed(payload=b"\x00\x00\x80\x3f")
B = signed(payload=b"\x00\x00\x00\x40")
PROOF_AB = make_proof(A, B)


def assert_rejected(result: object, reason: RejectReason, fragment: str = "") -> None:
    assert isinstance(result, Rejected), f"expected Rejected({reason}), got {result!r}"
    assert result.reason is reason, f"expected {reason}, got {result.reason}: {result.detail}"
    assert fragment in result.detail, result.detail


def raw_proof(
    first: object, second: object, *, magic: object = PROOF_MAGIC, version: object = PROOF_VERSION
) -> bytes:
    return msgpack.packb([magic, version, first, second], use_bin_type=True)


def _flip(index: int, mask: int) -> bytes:
    """The valid proof of A and B with one byte XOR-ed with ``mask``."""
    data = bytearray(PROOF_AB)
    data[index % len(data)] ^= mask
    return bytes(data)


class TestValidProof:
    def test_accepted_with_its_fields(self) -> None:
        proof = verify_proof(make_proof(A, B))
        assert isinstance(proof, EquivocationProof)
        assert proof.sender == ALICE.peer_id
        assert proof.sender_b58 == ALICE.peer_id_b58
        assert (proof.run_id, proof.round) == (RUN, 3)
        assert {proof.digest_a, proof.digest_b} == {
            payload_digest(b"\x00\x00\x80\x3f"),
            payload_digest(b"\x00\x00\x00\x40"),
        }
        assert {proof.envelope_a, proof.envelope_b} == {A, B}

    def test_canonical_whatever_the_order(self) -> None:
        assert make_proof(A, B) == make_proof(B, A)
        proof = verify_proof(make_proof(A, B))
        assert isinstance(proof, EquivocationProof)
        assert proof.to_bytes() == make_proof(A, B)

    def test_either_order_verifies(self) -> None:
        assert isinstance(verify_proof(raw_proof(B, A)), EquivocationProof)
        assert isinstance(verify_proof(bytearray(raw_proof(A, B))), EquivocationProof)

    def test_different_base_is_still_proof_when_digests_differ(self) -> None:
        other = signed(payload=b"\x00\x00\x00\x40", base_hash=b"\x07" * 32)
        assert isinstance(verify_proof(make_proof(A, other)), EquivocationProof)

    def test_rejection_carries_evidence(self) -> None:
        proof = verify_proof(make_proof(A, B))
        assert isinstance(proof, EquivocationProof)
        verdict = proof.rejection()
        assert verdict.reason is RejectReason.EQUIVOCATION
        assert set(verdict.evidence) == {A, B}
        assert ALICE.peer_id_b58 in verdict.detail


class TestRejected:
    def test_same_digest(self) -> None:
        again = sign_envelope(dataclasses.replace(envelope(), n_samples=11), ALICE)
        assert_rejected(verify_proof(raw_proof(A, again)), RejectReason.DECODE_ERROR, "same payload digest")

    def test_same_envelope_twice(self) -> None:
        assert_rejected(verify_proof(raw_proof(A, A)), RejectReason.DECODE_ERROR, "same payload digest")

    def test_different_senders(self) -> None:
        bobs = signed(BOB, payload=b"\x00\x00\x00\x40")
        assert_rejected(verify_proof(raw_proof(A, bobs)), RejectReason.DECODE_ERROR, "different senders")

    def test_different_rounds(self) -> None:
        later = signed(payload=b"\x00\x00\x00\x40", round=4)
        assert_rejected(verify_proof(raw_proof(A, later)), RejectReason.WRONG_ROUND)

    def test_different_runs(self) -> None:
        other = signed(payload=b"\x00\x00\x00\x40", run_id="another-run")
        assert_rejected(verify_proof(raw_proof(A, other)), RejectReason.WRONG_RUN)

    def test_forged_signature(self) -> None:
        """Mallory signs an envelope in Alice's name: it does not verify, so it proves nothing about Alice."""
        forged_env = envelope(payload=b"\x00\x00\x00\x40")
        forged = pack_envelope(forged_env, MALLORY.sign(envelope_message(forged_env)))
        assert_rejected(verify_proof(raw_proof(A, forged)), RejectReason.BAD_SIGNATURE, "envelope b")

    def test_random_signature(self) -> None:
        forged = pack_envelope(envelope(payload=b"\x00\x00\x00\x40"), b"\x55" * 64)
        assert_rejected(verify_proof(raw_proof(forged, A)), RejectReason.BAD_SIGNATURE, "envelope a")

    def test_unsigned_envelope(self) -> None:
        unsigned = pack_envelope(envelope(payload=b"\x00\x00\x00\x40"), b"")
        assert_rejected(verify_proof(raw_proof(A, unsigned)), RejectReason.UNSIGNED)

    @pytest.mark.parametrize(
        "data",
        [
            b"",
            b"\x00",
            b"garbage",
            b"\xc1",
            msgpack.packb([1, 2, 3, 4]),
            msgpack.packb({"a": 1}),
            msgpack.packb([PROOF_MAGIC, 1, A]),
        ],
    )
    def test_garbage(self, data: bytes) -> None:
        assert_rejected(verify_proof(data), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("data", [None, 3, "text", [A, B]])
    def test_not_bytes(self, data: object) -> None:
        assert_rejected(verify_proof(data), RejectReason.DECODE_ERROR)

    def test_wrong_magic(self) -> None:
        assert_rejected(verify_proof(raw_proof(A, B, magic="p2p_guard.other")), RejectReason.DECODE_ERROR)

    def test_envelopes_not_bin(self) -> None:
        assert_rejected(verify_proof(raw_proof("text", B)), RejectReason.DECODE_ERROR)

    @pytest.mark.parametrize("version", [True, 1.0, "1"])
    def test_version_not_an_int(self, version: object) -> None:
        assert_rejected(verify_proof(raw_proof(A, B, version=version)), RejectReason.DECODE_ERROR)

    def test_unsupported_version(self) -> None:
        assert_rejected(verify_proof(raw_proof(A, B, version=2)), RejectReason.UNSUPPORTED_VERSION)

    def test_oversize(self) -> None:
        assert_rejected(verify_proof(b"\x00" * (max_proof_bytes() + 1)), RejectReason.OVERSIZE)

    def test_envelope_over_its_own_limit(self) -> None:
        assert_rejected(
            verify_proof(make_proof(A, B), max_envelope_bytes=len(min(A, B)) - 1), RejectReason.DECODE_ERROR
        )

    def test_trailing_bytes(self) -> None:
        assert_rejected(verify_proof(make_proof(A, B) + b"\x00"), RejectReason.DECODE_ERROR)

    def test_bad_limit_is_a_local_bug(self) -> None:
        with pytest.raises(ValueError, match="max_envelope_bytes"):
            verify_proof(make_proof(A, B), max_envelope_bytes=0)

    def test_make_proof_refuses_non_proofs(self) -> None:
        with pytest.raises(ValueError, match="same payload digest"):
            make_proof(A, A)
        with pytest.raises(ValueError, match="bytes"):
            make_proof(A, "B")  # type: ignore[arg-type]

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.one_of(
            st.binary(max_size=512),
            st.builds(raw_proof, st.binary(max_size=300), st.binary(max_size=300)),
            st.builds(_flip, st.integers(0, 10_000), st.integers(1, 255)),
        )
    )
    def test_never_raises(self, data: bytes) -> None:
        result = verify_proof(data)
        assert isinstance(result, (EquivocationProof, Rejected))


class TestDetector:
    def test_first_then_conflict(self) -> None:
        detector = EquivocationDetector()
        env_a, env_b = _open(A), _open(B)
        assert detector.observe(A, env_a) is None
        assert detector.observe(A, env_a) is None  # the same envelope again is no fault
        proof = detector.observe(B, env_b)
        assert isinstance(proof, EquivocationProof)
        assert proof.to_bytes() == make_proof(A, B)

    def test_other_rounds_and_senders_do_not_conflict(self) -> None:
        detector = EquivocationDetector()
        for raw in (
            A,
            signed(payload=b"\x00\x00\x00\x40", round=4),
            signed(BOB, payload=b"\x00\x00\x00\x40"),
        ):
            assert detector.observe(raw, _open(raw)) is None
        assert len(detector) == 3

    def test_bounded(self) -> None:
        detector = EquivocationDetector(max_entries=2)
        for round_ in range(5):
            raw = signed(round=round_)
            detector.observe(raw, _open(raw))
        assert len(detector) == 2

    def test_mismatched_raw_never_yields_a_proof(self) -> None:
        detector = EquivocationDetector()
        detector.observe(A, _open(A))
        assert detector.observe(b"not the envelope", _open(B)) is None

    def test_bad_size(self) -> None:
        with pytest.raises(ValueError, match="max_entries"):
            EquivocationDetector(max_entries=0)


def _open(raw: bytes) -> Envelope:
    from p2p_guard.protocol import open_envelope

    env = open_envelope(raw)
    assert isinstance(env, Envelope)
    return env


class TestVerifyProofCommand:
    def test_valid_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "alice.proof"
        path.write_bytes(make_proof(A, B))
        assert main(["verify-proof", str(path)]) == 0
        out = capsys.readouterr().out
        assert "VALID" in out
        assert ALICE.peer_id_b58 in out
        assert RUN in out
        assert "round     3" in out
        assert payload_digest(b"\x00\x00\x80\x3f").hex() in out
        assert payload_digest(b"\x00\x00\x00\x40").hex() in out

    def test_invalid_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "bad.proof"
        path.write_bytes(raw_proof(A, signed(payload=b"\x00\x00\x00\x40", round=4)))
        assert main(["verify-proof", str(path)]) == 1
        out = capsys.readouterr().out
        assert "INVALID" in out
        assert "wrong_round" in out

    def test_garbage_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "garbage.proof"
        path.write_bytes(b"\xff" * 100)
        assert main(["verify-proof", str(path)]) == 1
        assert "decode_error" in capsys.readouterr().out

    def test_oversized_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "huge.proof"
        path.write_bytes(b"\x00" * (max_proof_bytes() + 10))
        assert main(["verify-proof", str(path)]) == 1
        # it said "proof is 131137 bytes" for any larger file (it reads one byte past the limit), 100 MB too
        assert capsys.readouterr().out == (
            f"INVALID proof {path}: oversize: proof is more than {max_proof_bytes()} bytes (the limit)\n")

    def test_missing_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["verify-proof", str(tmp_path / "absent.proof")]) == 2
        assert capsys.readouterr().err.startswith("p2p-guard verify-proof: error: cannot read ")
