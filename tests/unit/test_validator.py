"""Unit tests of the DHT record validator (``swarm/validator.py``), mallory-style, without a network.

Records are built exactly as hivemind builds them (``DHTID.generate(key).to_bytes()``, ``msgpack`` of the
subkey and of the value), so what passes here passes in a live DHT. Alice is honest; Mallory writes under
Alice's subkey, forges, replays, floods and sends garbage. The last test feeds 2,000 random records and checks
that ``validate`` never raises.
"""

from __future__ import annotations

import dataclasses
import math
import pickle

import msgpack
import pytest
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import CompositeValidator, DHTRecord
from hivemind.utils import MSGPackSerializer, get_dht_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.identity import Identity, peer_id_to_b58
from p2p_guard.protocol import (
    PROTOCOL_VERSION,
    Envelope,
    envelope_message,
    pack_envelope,
    payload_digest,
    sign_envelope,
)
from p2p_guard.protocol.proof import EquivocationProof, make_proof, verify_proof
from p2p_guard.protocol.records import RECORD_SIGNING_CONTEXT, sign_record
from p2p_guard.swarm.records import close_key, commit_key, presence_key, proofs_key, votes_key
from p2p_guard.swarm.validator import REASONS, RecordValidator, RecordVerdict, dht_key_id

RUN = "validator-test"
ALICE = Identity.from_seed(b"\x01" * 32)
MALLORY = Identity.from_seed(b"\x02" * 32)
ALICE_ID = ALICE.peer_id_b58
ROUNDS = 50

# One validator that knows the run (as a peer's) and one that does not (as a bootstrap node's).
KNOWS = RecordValidator([RUN], max_rounds=ROUNDS)
BLIND = RecordValidator(max_rounds=ROUNDS)


def envelope(
    signer: Identity = ALICE, *, payload: bytes = b"\x00\x00\x80\x3f", **changes: object
) -> Envelope:
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


def commit(signer: Identity = ALICE, **kwargs: object) -> bytes:
    return sign_envelope(envelope(signer, **kwargs), signer)


def votes_record(signer: Identity = ALICE, round_: int = 3, run_id: str = RUN) -> bytes:
    """A ``votes`` record signed as ``protocol.records`` signs (the validator does not judge its value)."""
    body = msgpack.packb(
        ["votes", PROTOCOL_VERSION, run_id, round_, signer.peer_id, [[MALLORY.peer_id, False, "outlier"]]],
        use_bin_type=True,
    )
    return msgpack.packb([body, signer.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)


def record(
    key: str | bytes, subkey: object, value: object, *, ttl_s: float = 60.0, expiration: float | None = None
) -> DHTRecord:
    """A DHTRecord as hivemind builds it for ``store(key, value, expiration, subkey=subkey)``."""
    key_bytes = key if isinstance(key, bytes) else DHTID.generate(source=key).to_bytes()
    return DHTRecord(
        key=key_bytes,
        subkey=MSGPackSerializer.dumps(subkey),
        value=MSGPackSerializer.dumps(value),
        expiration_time=get_dht_time() + ttl_s if expiration is None else expiration,
    )


def verdict(validator: RecordValidator, rec: DHTRecord) -> RecordVerdict:
    result = validator.check(rec)
    assert validator.validate(rec) is result.accepted
    return result


def assert_refused(rec: DHTRecord, reason: str, *, blind_reason: str | None = None) -> None:
    """Refused with ``reason`` by the validator that knows the run, with ``blind_reason`` by the blind one."""
    got = verdict(KNOWS, rec)
    assert (got.accepted, got.reason) == (False, reason), got
    if blind_reason is not None:
        got = verdict(BLIND, rec)
        assert (got.accepted, got.reason) == (False, blind_reason), got


def assert_accepted(rec: DHTRecord, *validators: RecordValidator) -> None:
    for validator in validators or (KNOWS, BLIND):
        got = verdict(validator, rec)
        assert (got.accepted, got.reason) == (True, "accepted"), got


class TestHonestRecords:
    def test_commit(self) -> None:
        assert_accepted(record(commit_key(RUN, 3), ALICE_ID, commit()))

    def test_presence(self) -> None:
        assert_accepted(
            record(presence_key(RUN), ALICE_ID, sign_record("presence", RUN, 7, 7, ALICE), ttl_s=20)
        )

    def test_votes(self) -> None:
        assert_accepted(record(votes_key(RUN, 3), ALICE_ID, votes_record()))

    def test_leave_under_the_presence_key(self) -> None:
        leave = sign_record("leave", RUN, 7, int(get_dht_time()), ALICE)
        assert_accepted(record(presence_key(RUN), ALICE_ID, leave, ttl_s=12))

    def test_nobody_can_make_alice_leave(self) -> None:
        forged = sign_record("leave", RUN, 7, int(get_dht_time()), MALLORY)
        assert_refused(record(presence_key(RUN), ALICE_ID, forged, ttl_s=12), "impersonation",
                       blind_reason="impersonation")

    def test_leave_gets_the_presence_cap_and_key(self) -> None:
        leave = sign_record("leave", RUN, 7, int(get_dht_time()), ALICE)
        assert_refused(record(presence_key(RUN), ALICE_ID, leave, ttl_s=300), "bad_expiration",
                       blind_reason="bad_expiration")
        assert_refused(record(commit_key(RUN, 7), ALICE_ID, leave), "wrong_kind", blind_reason="wrong_key")

    def test_proof_under_the_accused(self) -> None:
        """Anyone may publish a proof (Mallory here): what counts is whom it accuses."""
        proof = make_proof(commit(), commit(payload=b"\x00\x00\x00\x40"))
        assert_accepted(record(proofs_key(RUN), ALICE_ID, proof, ttl_s=600))

    def test_round_beyond_the_precomputed_keys(self) -> None:
        """Valid content names its own key, so rounds past ``max_rounds`` are still recognised and checked."""
        assert_accepted(record(commit_key(RUN, ROUNDS + 5), ALICE_ID, commit(round=ROUNDS + 5)))
        assert_refused(record(commit_key(RUN, ROUNDS + 5), ALICE_ID, commit(round=3)), "wrong_key")

    def test_expired_record_is_not_judged_on_time(self) -> None:
        assert_accepted(record(commit_key(RUN, 3), ALICE_ID, commit(), ttl_s=-30))

    def test_key_id_is_hiveminds(self) -> None:
        for key in (commit_key(RUN, 0), presence_key("é"), proofs_key("x" * 300)):
            assert dht_key_id(key) == DHTID.generate(source=key).to_bytes()

    def test_known_keys(self) -> None:
        spec = KNOWS.key_spec(dht_key_id(votes_key(RUN, 7)))
        assert spec is not None
        assert (spec.kind, spec.run_id, spec.round) == ("votes", RUN, 7)
        assert KNOWS.key_spec(dht_key_id(commit_key(RUN, ROUNDS))) is None
        assert BLIND.key_spec(dht_key_id(presence_key(RUN))) is None


class TestNotOurs:
    @pytest.mark.parametrize("value", [b"garbage", "text", 12, None, [1, 2], {"a": b"b"}])
    def test_foreign_key_passes(self, value: object) -> None:
        for validator in (KNOWS, BLIND):
            assert verdict(validator, record("someone/else", None, value)).reason == "not_ours"
            assert verdict(validator, record("someone/else", "sub", value, ttl_s=1e9)).accepted

    def test_unplaced_record_kind_under_a_foreign_key_passes(self) -> None:
        state = sign_record("state", RUN, 3, bytes(32), ALICE)
        assert verdict(BLIND, record("someone/else", ALICE_ID, state)).reason == "not_ours"


class TestMallory:
    def test_own_commit_under_alices_subkey(self) -> None:
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, commit(MALLORY)),
            "impersonation",
            blind_reason="impersonation",
        )

    def test_own_presence_under_alices_subkey(self) -> None:
        rec = record(presence_key(RUN), ALICE_ID, sign_record("presence", RUN, 3, 3, MALLORY), ttl_s=20)
        assert_refused(rec, "impersonation", blind_reason="impersonation")

    def test_own_votes_under_alices_subkey(self) -> None:
        assert_refused(
            record(votes_key(RUN, 3), ALICE_ID, votes_record(MALLORY)),
            "impersonation",
            blind_reason="impersonation",
        )

    def test_proof_under_someone_else_than_the_accused(self) -> None:
        proof = make_proof(commit(), commit(payload=b"\x00\x00\x00\x40"))
        assert_refused(
            record(proofs_key(RUN), MALLORY.peer_id_b58, proof), "impersonation", blind_reason="impersonation"
        )

    def test_unsigned(self) -> None:
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, pack_envelope(envelope(), b"")),
            "unsigned",
            blind_reason="unsigned",
        )

    def test_bad_signature(self) -> None:
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, pack_envelope(envelope(), b"\x42" * 64)),
            "bad_signature",
            blind_reason="bad_signature",
        )

    def test_forged_in_alices_name(self) -> None:
        env = envelope(payload=b"\x00\x00\x00\x40")
        forged = pack_envelope(env, MALLORY.sign(envelope_message(env)))
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, forged), "bad_signature", blind_reason="bad_signature"
        )

    def test_forged_presence(self) -> None:
        genuine = msgpack.unpackb(sign_record("presence", RUN, 3, 3, ALICE))
        forged = msgpack.packb(
            [genuine[0], MALLORY.sign(RECORD_SIGNING_CONTEXT + genuine[0])], use_bin_type=True
        )
        assert_refused(
            record(presence_key(RUN), ALICE_ID, forged, ttl_s=20),
            "bad_signature",
            blind_reason="bad_signature",
        )

    def test_forged_proof(self) -> None:
        env = envelope(payload=b"\x00\x00\x00\x40")
        forged = msgpack.packb(
            ["p2p_guard.equivocation", 1, commit(), pack_envelope(env, MALLORY.sign(envelope_message(env)))],
            use_bin_type=True,
        )
        assert_refused(
            record(proofs_key(RUN), ALICE_ID, forged), "bad_signature", blind_reason="bad_signature"
        )

    def test_proof_of_nothing(self) -> None:
        not_a_proof = msgpack.packb(["p2p_guard.equivocation", 1, commit(), commit()], use_bin_type=True)
        assert_refused(
            record(proofs_key(RUN), ALICE_ID, not_a_proof), "decode_error", blind_reason="decode_error"
        )

    @pytest.mark.parametrize(
        "value", [b"", b"garbage", b"\x92\xc4\x01x\xc4\x00", "text", 7, None, [b"a", b"b"]]
    )
    def test_garbage_under_our_key(self, value: object) -> None:
        """Garbage is refused by a node that knows the run; a blind node cannot tell it from foreign data."""
        for key in (commit_key(RUN, 3), presence_key(RUN), votes_key(RUN, 0), proofs_key(RUN)):
            assert_refused(record(key, ALICE_ID, value), "decode_error")
            assert verdict(BLIND, record(key, ALICE_ID, value)).reason == "not_ours"

    def test_garbage_in_envelope_shape(self) -> None:
        """Anything shaped like an envelope is ours, even under a key nobody knows, and must then open."""
        shaped = msgpack.packb([msgpack.packb([PROTOCOL_VERSION, "x"]), b""], use_bin_type=True)
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, shaped), "decode_error", blind_reason="decode_error"
        )
        assert not BLIND.validate(record("someone/else", ALICE_ID, shaped))

    def test_missing_subkey(self) -> None:
        """A store without a subkey over the whole key would replace every commit in it."""
        for value in (commit(), b"garbage"):
            assert_refused(record(commit_key(RUN, 3), None, value), "no_subkey")
        assert_refused(record(commit_key(RUN, 3), None, commit()), "no_subkey", blind_reason="no_subkey")

    @pytest.mark.parametrize(
        "subkey", [7, b"raw bytes", ALICE_ID.encode(), ["a"], 1.5, True, "", "not base58 0OIl"]
    )
    def test_non_peer_id_subkey(self, subkey: object) -> None:
        assert_refused(record(commit_key(RUN, 3), subkey, commit()), "bad_subkey", blind_reason="bad_subkey")

    def test_malformed_key_bytes_inside_the_subkey_peer_id(self) -> None:
        """A well-formed multihash that is no Ed25519 identity PeerID (hashed, RSA-style, truncated key)."""
        sha256_peer_id = bytes([0x12, 0x20]) + bytes(32)
        wrong_key_type = bytes([0x00, 0x24, 0x08, 0x00, 0x12, 0x20]) + ALICE.public_key
        short_key = bytes([0x00, 0x23, 0x08, 0x01, 0x12, 0x1F]) + ALICE.public_key[:31]
        for peer_id in (sha256_peer_id, wrong_key_type, short_key):
            assert_refused(
                record(commit_key(RUN, 3), peer_id_to_b58(peer_id), commit()),
                "bad_subkey",
                blind_reason="bad_subkey",
            )

    def test_malformed_key_bytes_inside_the_sender(self) -> None:
        """The envelope's sender holds malformed key bytes: nothing verifies against them."""
        bad_sender = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x21]) + ALICE.public_key
        env = envelope(sender=bad_sender)
        rec = record(commit_key(RUN, 3), ALICE_ID, pack_envelope(env, ALICE.sign(envelope_message(env))))
        assert_refused(rec, "bad_signature", blind_reason="bad_signature")
        not_a_point = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20]) + b"\xff" * 32
        rec = record(
            commit_key(RUN, 3),
            peer_id_to_b58(not_a_point),
            pack_envelope(envelope(sender=not_a_point), b"\x01" * 64),
        )
        assert_refused(rec, "bad_signature", blind_reason="bad_signature")

    def test_oversized_value(self) -> None:
        rec = record(commit_key(RUN, 3), ALICE_ID, b"\x00" * (KNOWS.max_value_bytes + 1))
        assert_refused(rec, "oversize")
        big = commit(shapes=[[1]] * 4000)  # a validly signed envelope of ~12 KB
        small = RecordValidator([RUN], max_rounds=ROUNDS, max_value_bytes=4096)
        got = verdict(small, record(commit_key(RUN, 3), ALICE_ID, big))
        assert (got.accepted, got.reason) == (False, "oversize")
        tight = RecordValidator([RUN], max_rounds=ROUNDS, max_envelope_bytes=4096)
        got = verdict(tight, record(commit_key(RUN, 3), ALICE_ID, big))
        assert (got.accepted, got.reason) == (False, "oversize")

    def test_oversized_presence(self) -> None:
        body = msgpack.packb(
            ["presence", PROTOCOL_VERSION, RUN, 3, ALICE.peer_id, b"\x00" * 2000], use_bin_type=True
        )
        big = msgpack.packb([body, ALICE.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)
        assert_refused(
            record(presence_key(RUN), ALICE_ID, big, ttl_s=20), "oversize", blind_reason="oversize"
        )

    def test_far_future_expiration(self) -> None:
        """Alice's own commit replayed with a far-future expiration would pin her subkey: refused."""
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, commit(), ttl_s=3600),
            "bad_expiration",
            blind_reason="bad_expiration",
        )
        assert_refused(record(commit_key(RUN, 3), ALICE_ID, b"garbage", ttl_s=1e12), "bad_expiration")

    def test_presence_expiration_has_a_tighter_cap(self) -> None:
        rec = record(presence_key(RUN), ALICE_ID, sign_record("presence", RUN, 3, 3, ALICE), ttl_s=300)
        assert_refused(rec, "bad_expiration", blind_reason="bad_expiration")
        assert_accepted(record(commit_key(RUN, 3), ALICE_ID, commit(), ttl_s=300))

    @pytest.mark.parametrize("expiration", [math.inf, math.nan, -math.inf])
    def test_non_finite_expiration(self, expiration: float) -> None:
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, commit(), expiration=expiration),
            "bad_expiration",
            blind_reason="bad_expiration",
        )

    def test_replay_of_an_earlier_round(self) -> None:
        """Alice's round-2 commit replayed under round 3 would displace her round-3 commit."""
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, commit(round=2)), "wrong_round", blind_reason="wrong_key"
        )
        assert_refused(
            record(votes_key(RUN, 3), ALICE_ID, votes_record(round_=2)),
            "wrong_round",
            blind_reason="wrong_key",
        )

    def test_other_run(self) -> None:
        assert_refused(
            record(commit_key(RUN, 3), ALICE_ID, commit(run_id="other")),
            "wrong_run",
            blind_reason="wrong_key",
        )
        rec = record(presence_key(RUN), ALICE_ID, sign_record("presence", "other", 3, 3, ALICE), ttl_s=20)
        assert_refused(rec, "wrong_run", blind_reason="wrong_key")

    def test_signed_value_under_a_foreign_key(self) -> None:
        assert not BLIND.validate(record("someone/else", ALICE_ID, commit()))

    def test_wrong_kind(self) -> None:
        presence = sign_record("presence", RUN, 3, 3, ALICE)
        assert_refused(record(commit_key(RUN, 3), ALICE_ID, presence), "wrong_kind", blind_reason="wrong_key")
        assert_refused(
            record(presence_key(RUN), ALICE_ID, commit(), ttl_s=20), "wrong_kind", blind_reason="wrong_key"
        )
        state = sign_record("state", RUN, 3, bytes(32), ALICE)
        assert_refused(record(votes_key(RUN, 3), ALICE_ID, state), "wrong_kind")

    def test_not_a_record(self) -> None:
        for rec in (
            None,
            "record",
            dataclasses.replace(record(commit_key(RUN, 3), ALICE_ID, commit()), key="k"),
        ):
            got = KNOWS.check(rec)
            assert (got.accepted, got.reason) == (False, "decode_error")


class TestCloseRecords:
    """``close`` records follow the rules of every other signed record: owner, run, round, expiry and size."""

    @staticmethod
    def close(signer: Identity = ALICE, round_: int = 3, run_id: str = RUN, commits: int = 4) -> bytes:
        return sign_record("close", run_id, round_, commits, signer)

    def test_honest_close_is_accepted(self) -> None:
        assert_accepted(record(close_key(RUN, 3), ALICE_ID, self.close(), ttl_s=600))

    def test_close_key_is_known(self) -> None:
        spec = KNOWS.key_spec(dht_key_id(close_key(RUN, 7)))
        assert spec is not None
        assert (spec.kind, spec.run_id, spec.round, spec.text()) == ("close", RUN, 7, close_key(RUN, 7))

    def test_own_close_under_alices_subkey(self) -> None:
        rec = record(close_key(RUN, 3), ALICE_ID, self.close(MALLORY))
        assert_refused(rec, "impersonation", blind_reason="impersonation")

    def test_forged_close(self) -> None:
        genuine = msgpack.unpackb(self.close())
        forged = msgpack.packb([genuine[0], MALLORY.sign(RECORD_SIGNING_CONTEXT + genuine[0])], use_bin_type=True)
        assert_refused(record(close_key(RUN, 3), ALICE_ID, forged), "bad_signature", blind_reason="bad_signature")

    def test_unsigned_close(self) -> None:
        body = msgpack.unpackb(self.close())[0]
        unsigned = msgpack.packb([body, b""], use_bin_type=True)
        assert_refused(record(close_key(RUN, 3), ALICE_ID, unsigned), "unsigned", blind_reason="unsigned")

    def test_close_of_another_round_or_run(self) -> None:
        """Alice's round-2 close replayed under round 3 would open everyone's gate early."""
        assert_refused(
            record(close_key(RUN, 3), ALICE_ID, self.close(round_=2)), "wrong_round", blind_reason="wrong_key"
        )
        assert_refused(
            record(close_key(RUN, 3), ALICE_ID, self.close(run_id="other")), "wrong_run", blind_reason="wrong_key"
        )

    def test_close_under_another_kind_of_key(self) -> None:
        assert_refused(record(commit_key(RUN, 3), ALICE_ID, self.close()), "wrong_kind", blind_reason="wrong_key")
        assert_refused(record(close_key(RUN, 3), ALICE_ID, commit()), "wrong_kind", blind_reason="wrong_key")
        presence = sign_record("presence", RUN, 3, 3, ALICE)
        assert_refused(record(close_key(RUN, 3), ALICE_ID, presence), "wrong_kind", blind_reason="wrong_key")

    def test_far_future_close(self) -> None:
        rec = record(close_key(RUN, 3), ALICE_ID, self.close(), ttl_s=3600)
        assert_refused(rec, "bad_expiration", blind_reason="bad_expiration")

    def test_oversized_close(self) -> None:
        body = msgpack.packb(["close", PROTOCOL_VERSION, RUN, 3, ALICE.peer_id, b"\x00" * 2000], use_bin_type=True)
        big = msgpack.packb([body, ALICE.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)
        assert_refused(record(close_key(RUN, 3), ALICE_ID, big), "oversize", blind_reason="oversize")

    @pytest.mark.parametrize("value", [b"garbage", "text", 7, None])
    def test_garbage_under_a_close_key(self, value: object) -> None:
        assert_refused(record(close_key(RUN, 3), ALICE_ID, value), "decode_error")
        assert verdict(BLIND, record(close_key(RUN, 3), ALICE_ID, value)).reason == "not_ours"


class TestEquivocation:
    def test_second_commit_is_accepted_and_proven(self) -> None:
        validator = RecordValidator([RUN], max_rounds=ROUNDS)
        first, second = commit(), commit(payload=b"\x00\x00\x00\x40")
        assert validator.validate(record(commit_key(RUN, 3), ALICE_ID, first))
        assert validator.validate(record(commit_key(RUN, 3), ALICE_ID, first))
        assert validator.proofs() == []
        assert validator.validate(record(commit_key(RUN, 3), ALICE_ID, second))
        [proof_bytes] = validator.proofs()
        proof = verify_proof(proof_bytes)
        assert isinstance(proof, EquivocationProof)
        assert (proof.sender_b58, proof.run_id, proof.round) == (ALICE_ID, RUN, 3)
        assert validator.report().proofs == (proof_bytes,)

    def test_published_proofs_are_kept(self) -> None:
        validator = RecordValidator([RUN], max_rounds=ROUNDS, max_proofs=1)
        proof = make_proof(commit(), commit(payload=b"\x00\x00\x00\x40"))
        assert validator.validate(record(proofs_key(RUN), ALICE_ID, proof))
        assert validator.proofs() == [proof]
        other = make_proof(commit(MALLORY), commit(MALLORY, payload=b"\x00\x00\x00\x40"))
        assert validator.validate(record(proofs_key(RUN), MALLORY.peer_id_b58, other))
        assert validator.proofs() == [proof]  # bounded

    def test_different_rounds_are_no_conflict(self) -> None:
        validator = RecordValidator([RUN], max_rounds=ROUNDS)
        for round_ in range(3):
            assert validator.validate(
                record(commit_key(RUN, round_), ALICE_ID, commit(round=round_, payload=bytes([round_]) * 4))
            )
        assert validator.proofs() == []


class TestPlumbing:
    def test_pickles(self) -> None:
        validator = RecordValidator(
            [RUN], max_rounds=ROUNDS, max_ttl_s=100.0, max_ttl_by_kind={"presence": 10.0}
        )
        assert validator.validate(record(commit_key(RUN, 3), ALICE_ID, commit()))
        assert not validator.validate(record(commit_key(RUN, 3), ALICE_ID, b"garbage"))
        clone = pickle.loads(pickle.dumps(validator))
        assert clone._table is None
        assert clone.run_ids == (RUN,)
        assert (clone.max_ttl_s, clone.max_ttl_by_kind) == (100.0, {"presence": 10.0})
        assert clone.stats() == {"accepted": 1, "decode_error": 1}
        assert not clone.validate(record(commit_key(RUN, 3), ALICE_ID, b"garbage"))
        assert clone.validate(record(commit_key(RUN, 3), ALICE_ID, commit(payload=b"\x00\x00\x00\x40")))
        assert len(clone.proofs()) == 1  # the first envelope was remembered across the pickle
        assert pickle.loads(pickle.dumps(CompositeValidator([clone]))).validate(
            record(commit_key(RUN, 3), ALICE_ID, commit())
        )

    def test_counts_by_reason(self) -> None:
        validator = RecordValidator([RUN], max_rounds=ROUNDS)
        validator.validate(record(commit_key(RUN, 3), ALICE_ID, commit()))
        validator.validate(record(commit_key(RUN, 3), ALICE_ID, commit(MALLORY)))
        validator.validate(record("foreign", None, b"x"))
        assert validator.stats() == {"accepted": 1, "impersonation": 1, "not_ours": 1}
        assert set(validator.stats()) <= set(REASONS)

    def test_refusals_are_logged_by_subkey_and_bounded(self) -> None:
        validator = RecordValidator([RUN], max_rounds=ROUNDS, max_refusals=2)
        unsigned = record(commit_key(RUN, 3), MALLORY.peer_id_b58, pack_envelope(envelope(MALLORY), b""))
        for _ in range(3):
            validator.validate(unsigned)
        [refusal] = validator.refusals()
        assert (refusal.kind, refusal.subkey, refusal.reason, refusal.count) == (
            "commit",
            MALLORY.peer_id_b58,
            "unsigned",
            3,
        )
        validator.validate(record(commit_key(RUN, 3), ALICE_ID, commit(MALLORY)))
        validator.validate(record(commit_key(RUN, 3), 7, commit()))
        assert [(r.subkey, r.reason) for r in validator.refusals()] == [
            (ALICE_ID, "impersonation"),
            ("", "bad_subkey"),
        ]
        validator.validate(record(commit_key(RUN, 3), ALICE_ID, commit()))  # accepted: not a refusal
        assert len(validator.report().refusals) == 2

    def test_in_a_composite_and_merged(self) -> None:
        composite = CompositeValidator(
            [RecordValidator([RUN], max_rounds=ROUNDS), RecordValidator(["other"], max_rounds=ROUNDS)]
        )
        assert len(composite._validators) == 1
        [merged] = composite._validators
        assert merged.run_ids == (RUN, "other")
        assert not composite.validate(record(presence_key("other"), ALICE_ID, b"garbage"))
        assert composite.validate(record(commit_key(RUN, 3), ALICE_ID, commit()))
        different = RecordValidator([RUN], max_rounds=ROUNDS + 1)
        assert not merged.merge_with(different)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"run_ids": [""]}, "run_ids"),
            ({"run_ids": [3]}, "run_ids"),
            ({"max_ttl_s": 0}, "max_ttl_s"),
            ({"max_ttl_s": math.nan}, "max_ttl_s"),
            ({"max_ttl_s": True}, "max_ttl_s"),
            ({"max_ttl_by_kind": {"unknown": 1.0}}, "unknown kind"),
            ({"max_ttl_by_kind": {"presence": -1.0}}, "presence"),
            ({"max_value_bytes": 0}, "max_value_bytes"),
            ({"max_rounds": 1.5}, "max_rounds"),
            ({"max_proofs": -1}, "max_proofs"),
        ],
    )
    def test_constructor_rejects(self, kwargs: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            RecordValidator(**kwargs)  # type: ignore[arg-type]

    def test_single_run_id_string(self) -> None:
        assert RecordValidator(RUN, max_rounds=1).run_ids == (RUN,)

    def test_repr_shows_the_configuration(self) -> None:
        text = repr(KNOWS)
        for fragment in (RUN, "max_ttl_s", "max_rounds=50", "max_ttl_by_kind"):
            assert fragment in text


# --- fuzzing ------------------------------------------------------------------------------------------------

_KEYS = [
    dht_key_id(k)
    for k in (
        commit_key(RUN, 3),
        presence_key(RUN),
        votes_key(RUN, 3),
        proofs_key(RUN),
        commit_key(RUN, ROUNDS + 1),
        "someone/else",
    )
]
_GOOD_VALUES = [
    MSGPackSerializer.dumps(v)
    for v in (
        commit(),
        commit(MALLORY),
        sign_record("presence", RUN, 3, 3, ALICE),
        votes_record(),
        make_proof(commit(), commit(payload=b"\x00\x00\x00\x40")),
    )
]
_SUBKEYS = [MSGPackSerializer.dumps(s) for s in (ALICE_ID, MALLORY.peer_id_b58, None, 3, b"x")] + [
    b"",
    b"\xc1",
]


def _mutate(data: bytes, index: int, mask: int) -> bytes:
    out = bytearray(data)
    if out:
        out[index % len(out)] ^= mask
    return bytes(out)


_records = st.builds(
    DHTRecord,
    key=st.one_of(st.sampled_from(_KEYS), st.binary(max_size=24)),
    subkey=st.one_of(
        st.sampled_from(_SUBKEYS), st.binary(max_size=64), st.text(max_size=60).map(MSGPackSerializer.dumps)
    ),
    value=st.one_of(
        st.binary(max_size=256),
        st.binary(max_size=256).map(MSGPackSerializer.dumps),
        st.sampled_from(_GOOD_VALUES),
        st.builds(_mutate, st.sampled_from(_GOOD_VALUES), st.integers(0, 4096), st.integers(1, 255)),
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**63), 2**64 - 1)
            | st.binary(max_size=40)
            | st.text(max_size=20),
            lambda inner: st.lists(inner, max_size=4),
            max_leaves=12,
        ).map(MSGPackSerializer.dumps),
    ),
    expiration_time=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(0, 1200).map(lambda ttl: get_dht_time() + ttl),
    ),
)


_VALID = [
    record(commit_key(RUN, 3), ALICE_ID, commit()),
    record(presence_key(RUN), ALICE_ID, sign_record("presence", RUN, 3, 3, ALICE), ttl_s=20),
    record(votes_key(RUN, 3), ALICE_ID, votes_record()),
    record(proofs_key(RUN), ALICE_ID, make_proof(commit(), commit(payload=b"\x00\x00\x00\x40"))),
]


def _near_valid(base: DHTRecord, field: str, index: int, mask: int, ttl_s: float) -> DHTRecord:
    """A valid record with one field damaged (a flipped byte, or another expiration)."""
    if field == "expiration_time":
        return dataclasses.replace(base, expiration_time=get_dht_time() + ttl_s)
    if field == "none":
        return dataclasses.replace(base, expiration_time=get_dht_time() + 10)
    return dataclasses.replace(base, **{field: _mutate(getattr(base, field), index, mask)})


_near_valid_records = st.builds(
    _near_valid,
    st.sampled_from(_VALID),
    st.sampled_from(["key", "subkey", "value", "expiration_time", "none"]),
    st.integers(0, 4096),
    st.integers(1, 255),
    st.floats(-100, 2000),
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rec=st.one_of(_records, _near_valid_records))
def test_never_raises_on_random_records(rec: DHTRecord) -> None:
    for validator in (KNOWS, BLIND):
        result = validator.validate(rec)
        assert isinstance(result, bool)
        got = validator.check(rec)
        assert got.reason in REASONS, got
        assert got.reason != "internal_error", got
        if got.accepted and got.reason == "accepted":
            assert rec.subkey not in (b"\xc0", b"")


class TestOpenedCache:
    """Verdicts on bytes seen before are reused; everything that depends on more than the bytes is checked again."""

    def test_the_same_bytes_are_verified_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import p2p_guard.swarm.validator as module

        calls: list[int] = []
        real = module.open_signed_record

        def counting(raw: bytes, **kwargs: object) -> object:
            calls.append(len(raw))
            return real(raw, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(module, "open_signed_record", counting)
        validator = RecordValidator([RUN], max_rounds=ROUNDS)
        value = sign_record("presence", RUN, 7, 7, ALICE)
        for _ in range(5):
            assert validator.check(record(presence_key(RUN), ALICE_ID, value, ttl_s=10)).accepted
        assert len(calls) == 1
        # Same bytes under another subkey: the owner check still runs (impersonation), from the cached parse.
        stolen = validator.check(record(presence_key(RUN), MALLORY.peer_id_b58, value, ttl_s=10))
        assert (stolen.accepted, stolen.reason) == (False, "impersonation")
        # Same bytes, expiring beyond the presence cap (checked after the parse): refused, the cache notwithstanding.
        late = validator.check(record(presence_key(RUN), ALICE_ID, value, ttl_s=120))  # over the 60 s cap
        assert (late.accepted, late.reason) == (False, "bad_expiration")
        assert len(calls) == 1

    def test_a_flood_of_distinct_values_keeps_the_cache_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import p2p_guard.swarm.validator as module

        monkeypatch.setattr(module, "OPENED_CACHE_ENTRIES", 8)  # read when the validator is built
        validator = RecordValidator([RUN], max_rounds=ROUNDS)
        for round_ in range(20):
            value = sign_record("presence", RUN, round_, round_, ALICE)
            assert validator.check(record(presence_key(RUN), ALICE_ID, value, ttl_s=10)).accepted
        assert len(validator._opened) == 8
