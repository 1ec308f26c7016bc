"""Unit tests of signed votes: ``protocol/votes.py``, the DHT helpers of ``swarm/votes.py`` and ``VoteSmear``.

Mallory-style: each test crafts one hostile record and checks the exact :class:`RejectReason`. The DHT is a
dict-backed fake with the two methods of ``SwarmDHT`` the helpers use; no network.
"""

from __future__ import annotations

import asyncio

import msgpack
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.attacks.wire import CommitDraft, VoteSmear, WireAttack
from p2p_guard.identity import Identity
from p2p_guard.protocol import ENVELOPE_SIGNING_CONTEXT, PROTOCOL_VERSION, Envelope, Rejected, RejectReason
from p2p_guard.protocol.records import RECORD_SIGNING_CONTEXT, open_signed_record, sign_record
from p2p_guard.guard.verdict import NOT_SELECTED
from p2p_guard.protocol.votes import (
    EDGE_REASON,
    MAX_VOTE_REASON_BYTES,
    MAX_VOTES_BYTES,
    MAX_VOTES_SENDERS,
    OPPOSED_REASON,
    Votes,
    VoteVerdict,
    evidence_map,
    judged_map,
    open_votes,
    sign_votes,
)
from p2p_guard.swarm.records import votes_key
from p2p_guard.swarm.verdicts import SenderVerdict
from p2p_guard.swarm.votes import publish_votes, read_votes, vote_verdicts
from fake_dht import FakeDHT  # noqa: E402 - the tests' shared dict-backed DHT

RUN = "test-run"
ALICE = Identity.from_seed(b"\x01" * 32)
BOB = Identity.from_seed(b"\x03" * 32)
CAROL = Identity.from_seed(b"\x04" * 32)
MALLORY = Identity.from_seed(b"\x02" * 32)
DAVE = Identity.from_seed(b"\x05" * 32)
VERDICTS = [VoteVerdict(BOB.peer_id, True, "accepted"), VoteVerdict(MALLORY.peer_id, False, "outlier")]


def craft(value: object, *, signer: Identity = ALICE, kind: object = "votes",
          version: object = PROTOCOL_VERSION, run: object = RUN, round_: object = 3, sender: object = None,
          signature: bytes | None = None, context: bytes = RECORD_SIGNING_CONTEXT) -> bytes:
    """A votes-shaped record with arbitrary fields, signed by ``signer`` unless ``signature`` is given."""
    body = msgpack.packb([kind, version, run, round_, signer.peer_id if sender is None else sender, value],
                         use_bin_type=True)
    if signature is None:
        signature = signer.sign(context + body)
    return msgpack.packb([body, signature], use_bin_type=True)


def assert_rejected(result: object, reason: RejectReason) -> None:
    assert isinstance(result, Rejected), f"expected Rejected({reason}), got {result!r}"
    assert result.reason is reason, f"expected {reason}, got {result.reason}: {result.detail}"


class TestRoundTrip:
    def test_sign_then_open(self) -> None:
        votes = open_votes(sign_votes(RUN, 3, VERDICTS, ALICE), run_id=RUN, round_=3)
        assert isinstance(votes, Votes)
        assert (votes.run_id, votes.round, votes.voter) == (RUN, 3, ALICE.peer_id)
        assert votes.voter_b58 == ALICE.peer_id_b58
        assert set(votes.verdicts) == set(VERDICTS)
        assert votes.as_map() == {BOB.peer_id_b58: True, MALLORY.peer_id_b58: False}

    def test_canonical_order_and_determinism(self) -> None:
        one = sign_votes(RUN, 3, VERDICTS, ALICE)
        assert one == sign_votes(RUN, 3, list(reversed(VERDICTS)), ALICE)
        votes = open_votes(one, run_id=RUN)
        assert isinstance(votes, Votes)
        assert [v.sender for v in votes.verdicts] == sorted(v.sender for v in VERDICTS)

    def test_empty_and_any_round(self) -> None:
        votes = open_votes(sign_votes(RUN, 0, [], ALICE), run_id=RUN)
        assert isinstance(votes, Votes)
        assert votes.verdicts == ()
        assert votes.round == 0

    def test_full_record_fits(self) -> None:
        senders = [Identity.from_seed(i.to_bytes(32, "little")).peer_id for i in range(MAX_VOTES_SENDERS)]
        verdicts = [VoteVerdict(s, False, "é" * (MAX_VOTE_REASON_BYTES // 2)) for s in senders]
        data = sign_votes("r" * 256, 2**63 - 1, verdicts, ALICE)
        assert len(data) <= MAX_VOTES_BYTES
        votes = open_votes(data, run_id="r" * 256, round_=2**63 - 1)
        assert isinstance(votes, Votes)
        assert len(votes.verdicts) == MAX_VOTES_SENDERS

    def test_validator_authenticates_votes(self) -> None:
        """``swarm.validator`` opens votes with ``open_signed_record``: the format must stay compatible."""
        record = open_signed_record(sign_votes(RUN, 3, VERDICTS, ALICE), max_bytes=MAX_VOTES_BYTES)
        assert not isinstance(record, Rejected)
        assert (record.kind, record.run_id, record.round, record.sender) == ("votes", RUN, 3, ALICE.peer_id)

    def test_same_layout_as_validator_fixture(self) -> None:
        """The layout ``tests/unit/test_validator.py`` crafts by hand opens as votes."""
        data = craft([[MALLORY.peer_id, False, "outlier"]])
        votes = open_votes(data, run_id=RUN, round_=3)
        assert isinstance(votes, Votes)
        assert votes.verdicts == (VoteVerdict(MALLORY.peer_id, False, "outlier"),)


class TestSignRefuses:
    @pytest.mark.parametrize(
        ("run_id", "round_", "verdicts"),
        [
            ("", 0, []),
            ("r" * 257, 0, []),
            (RUN, -1, []),
            (RUN, True, []),
            (RUN, 2**63, []),
            (RUN, 0, [VoteVerdict(b"\x00" * 38, True)]),
            (RUN, 0, [VoteVerdict(BOB.peer_id, 1, "x")]),  # type: ignore[arg-type]
            (RUN, 0, [VoteVerdict(BOB.peer_id, True, "x" * (MAX_VOTE_REASON_BYTES + 1))]),
            (RUN, 0, [VoteVerdict(BOB.peer_id, True), VoteVerdict(BOB.peer_id, False)]),
            (RUN, 0, [VoteVerdict(BOB.peer_id, True, "\ud800")]),
        ],
        ids=["empty-run", "long-run", "negative-round", "bool-round", "huge-round", "bad-sender",
             "int-accepted", "long-reason", "duplicate", "surrogate"],
    )
    def test_bad_input(self, run_id: str, round_: int, verdicts: list[VoteVerdict]) -> None:
        with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
            sign_votes(run_id, round_, verdicts, ALICE)

    def test_too_many(self) -> None:
        verdicts = [VoteVerdict(Identity.from_seed(i.to_bytes(32, "little")).peer_id, True)
                    for i in range(MAX_VOTES_SENDERS + 1)]
        with pytest.raises(ValueError, match="at most 256"):
            sign_votes(RUN, 0, verdicts, ALICE)


class TestOpenRejects:
    def test_not_bytes(self) -> None:
        assert_rejected(open_votes(bytearray(sign_votes(RUN, 3, VERDICTS, ALICE)), run_id=RUN),
                        RejectReason.DECODE_ERROR)
        assert_rejected(open_votes(None, run_id=RUN), RejectReason.DECODE_ERROR)

    def test_oversize(self) -> None:
        data = sign_votes(RUN, 3, VERDICTS, ALICE)
        assert_rejected(open_votes(data, run_id=RUN, max_bytes=len(data) - 1), RejectReason.OVERSIZE)

    @pytest.mark.parametrize("data", [b"", b"\xc1", b"\x92\xc4\x00", msgpack.packb([1, 2]), b"\x90"])
    def test_garbage(self, data: bytes) -> None:
        assert_rejected(open_votes(data, run_id=RUN), RejectReason.DECODE_ERROR)

    def test_unsupported_version(self) -> None:
        assert_rejected(open_votes(craft([], version=4), run_id=RUN), RejectReason.UNSUPPORTED_VERSION)

    def test_unsigned(self) -> None:
        assert_rejected(open_votes(craft([], signature=b""), run_id=RUN), RejectReason.UNSIGNED)

    def test_bad_signature(self) -> None:
        assert_rejected(open_votes(craft([], signature=bytes(64)), run_id=RUN), RejectReason.BAD_SIGNATURE)

    def test_impersonation_in_body(self) -> None:
        """Mallory signs, but names Alice as the voter."""
        data = craft([], signer=MALLORY, sender=ALICE.peer_id)
        assert_rejected(open_votes(data, run_id=RUN), RejectReason.BAD_SIGNATURE)

    def test_envelope_context_is_not_a_record_signature(self) -> None:
        data = craft([], context=ENVELOPE_SIGNING_CONTEXT)
        assert_rejected(open_votes(data, run_id=RUN), RejectReason.BAD_SIGNATURE)

    def test_other_kind(self) -> None:
        """A signed presence record is not a votes record, and a votes record is not a presence one."""
        presence = sign_record("presence", RUN, 3, 3, ALICE)
        assert_rejected(open_votes(presence, run_id=RUN), RejectReason.DECODE_ERROR)
        assert_rejected(open_votes(craft([], kind="state"), run_id=RUN), RejectReason.DECODE_ERROR)

    def test_wrong_run(self) -> None:
        data = sign_votes("other", 3, VERDICTS, ALICE)
        assert_rejected(open_votes(data, run_id=RUN), RejectReason.WRONG_RUN)

    def test_wrong_round(self) -> None:
        assert_rejected(open_votes(sign_votes(RUN, 2, VERDICTS, ALICE), run_id=RUN, round_=3),
                        RejectReason.WRONG_ROUND)

    @pytest.mark.parametrize(
        "value",
        [
            {"a": 1},
            "verdicts",
            [[ALICE.peer_id, True]],
            [[ALICE.peer_id, True, "x", 1]],
            [(ALICE.peer_id, True, "x"), 5],
            [[b"\x00" * 38, True, "x"]],
            [[ALICE.peer_id[:-1], True, "x"]],
            [[ALICE.peer_id_b58, True, "x"]],
            [[ALICE.peer_id, 1, "x"]],
            [[ALICE.peer_id, None, "x"]],
            [[ALICE.peer_id, True, b"x"]],
            [[ALICE.peer_id, True, "x" * (MAX_VOTE_REASON_BYTES + 1)]],
            [[ALICE.peer_id, True, "x"], [ALICE.peer_id, False, "y"]],
        ],
        ids=["map", "str", "short-entry", "long-entry", "not-array-entry", "not-ed25519", "short-peer-id",
             "b58-not-bytes", "int-accepted", "nil-accepted", "bin-reason", "long-reason", "duplicate"],
    )
    def test_bad_value(self, value: object) -> None:
        assert_rejected(open_votes(craft(value), run_id=RUN), RejectReason.DECODE_ERROR)

    def test_too_many_verdicts(self) -> None:
        value = [[Identity.from_seed(i.to_bytes(32, "little")).peer_id, True, ""]
                 for i in range(MAX_VOTES_SENDERS + 1)]
        assert_rejected(open_votes(craft(value), run_id=RUN), RejectReason.DECODE_ERROR)

    def test_tampered_body(self) -> None:
        data = bytearray(sign_votes(RUN, 3, [VoteVerdict(BOB.peer_id, True, "accepted")], ALICE))
        index = data.index(b"\xc3")  # msgpack True → False inside the signed body
        data[index] = 0xC2
        assert_rejected(open_votes(bytes(data), run_id=RUN), RejectReason.BAD_SIGNATURE)

    @settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(st.binary(max_size=300))
    def test_never_raises(self, data: bytes) -> None:
        result = open_votes(data, run_id=RUN)
        assert isinstance(result, (Votes, Rejected))



class TestSwarmHelpers:
    def test_publish_then_read(self) -> None:
        dht = FakeDHT()
        assert asyncio.run(publish_votes(dht, RUN, 4, VERDICTS, ALICE))  # type: ignore[arg-type]
        assert list(dht.data[votes_key(RUN, 4)]) == [ALICE.peer_id_b58]
        found = asyncio.run(read_votes(dht, RUN, 4))  # type: ignore[arg-type]
        assert list(found) == [ALICE.peer_id_b58]
        assert found[ALICE.peer_id_b58].as_map() == {BOB.peer_id_b58: True, MALLORY.peer_id_b58: False}

    def test_read_drops_hostile_values(self) -> None:
        dht = FakeDHT()
        key = votes_key(RUN, 4)
        dht.data[key] = {
            ALICE.peer_id_b58: sign_votes(RUN, 4, VERDICTS, MALLORY),  # impersonation: signer ≠ subkey
            BOB.peer_id_b58: sign_votes(RUN, 3, VERDICTS, BOB),  # another round, replayed under round 4
            CAROL.peer_id_b58: b"garbage",
            MALLORY.peer_id_b58: sign_votes("other", 4, VERDICTS, MALLORY),  # another run
        }
        assert asyncio.run(read_votes(dht, RUN, 4)) == {}  # type: ignore[arg-type]

    def test_vote_verdicts_from_outcome(self) -> None:
        outcome = [
            SenderVerdict(ALICE.peer_id_b58, 4, True, "accepted"),  # our own row: left out
            SenderVerdict(BOB.peer_id_b58, 4, True, "accepted"),
            SenderVerdict(MALLORY.peer_id_b58, 4, True, "accepted"),
            SenderVerdict.rejected(MALLORY.peer_id_b58, 4, RejectReason.DIGEST_MISMATCH, "row hash differs"),
            SenderVerdict("not-a-peer-id", 4, False, "bad_signature"),
            SenderVerdict(CAROL.peer_id_b58, 4, False, "x" * 200),
            SenderVerdict(DAVE.peer_id_b58, 4, False, None),  # no reason: an empty one
        ]
        votes = vote_verdicts(outcome, me=ALICE.peer_id_b58)
        assert {v.sender_b58: (v.accepted, v.reason) for v in votes} == {
            BOB.peer_id_b58: (True, "accepted"),
            MALLORY.peer_id_b58: (False, "digest_mismatch"),
            CAROL.peer_id_b58: (False, "x" * MAX_VOTE_REASON_BYTES),
            DAVE.peer_id_b58: (False, ""),
        }
        sign_votes(RUN, 0, votes, ALICE)  # always signable


class TestVoteSmear:
    def test_is_a_wire_attack_with_honest_commit(self) -> None:
        attack = VoteSmear()
        assert isinstance(attack, WireAttack)
        assert attack.kind == "wire"
        envelope = Envelope(protocol_version=PROTOCOL_VERSION, run_id=RUN, round=0, sender=MALLORY.peer_id,
                            base_hash=bytes(32), digest=bytes(32), codec="fp32", shapes=((1,),), n_samples=1,
                            payload_bytes=4)
        draft = CommitDraft.honest(envelope, bytes(4))
        assert attack.mutate(draft, torch.Generator()) == draft

    def test_accuses_everyone_but_colluders(self) -> None:
        honest = [VoteVerdict(ALICE.peer_id, True, "accepted"), VoteVerdict(BOB.peer_id, True, "accepted"),
                  VoteVerdict(CAROL.peer_id, False, "outlier"),
                  VoteVerdict(MALLORY.peer_id, False, "outlier")]
        smeared = VoteSmear().smear_votes(honest, {MALLORY.peer_id_b58})
        assert [(v.sender, v.accepted) for v in smeared] == [
            (ALICE.peer_id, False), (BOB.peer_id, False), (CAROL.peer_id, False), (MALLORY.peer_id, True)]
        assert honest[0].accepted  # input untouched (frozen dataclasses, new list)
        votes = open_votes(sign_votes(RUN, 1, smeared, MALLORY), run_id=RUN)
        assert isinstance(votes, Votes)
        assert votes.as_map()[ALICE.peer_id_b58] is False


def test_as_map_leaves_out_circumstantial_rejections() -> None:
    verdicts = [VoteVerdict(BOB.peer_id, False, "late_commit"), VoteVerdict(CAROL.peer_id, False, "timeout"),
                VoteVerdict(DAVE.peer_id, True, "accepted"), VoteVerdict(MALLORY.peer_id, False, "outlier")]
    votes = open_votes(sign_votes(RUN, 3, verdicts, ALICE), run_id=RUN, round_=3)
    assert isinstance(votes, Votes)
    assert votes.as_map() == {DAVE.peer_id_b58: True, MALLORY.peer_id_b58: False}


def test_copyable_rejections_are_no_evidence_in_ballots_nor_in_our_own_verdicts() -> None:
    """``duplicate`` and ``colluding`` rejections (others can cause them by copying the sender) are left out."""
    verdicts = [VoteVerdict(BOB.peer_id, False, "duplicate"), VoteVerdict(CAROL.peer_id, False, "colluding"),
                VoteVerdict(DAVE.peer_id, True, "accepted"), VoteVerdict(MALLORY.peer_id, False, "outlier")]
    expected = {DAVE.peer_id_b58: True, MALLORY.peer_id_b58: False}
    assert evidence_map(verdicts) == expected
    assert judged_map(verdicts) == expected
    votes = open_votes(sign_votes(RUN, 3, verdicts, ALICE), run_id=RUN, round_=3)
    assert isinstance(votes, Votes)
    assert votes.as_map() == expected


def test_copyable_reasons_are_the_guard_stages_reasons() -> None:
    from p2p_guard.guard.collusion import COLLUDING
    from p2p_guard.guard.duplicates import DUPLICATE
    from p2p_guard.protocol.reasons import CIRCUMSTANTIAL_REASONS, COPYABLE_REASONS, NOT_EVIDENCE_REASONS

    assert COPYABLE_REASONS == {DUPLICATE, COLLUDING}
    assert NOT_EVIDENCE_REASONS == CIRCUMSTANTIAL_REASONS | {DUPLICATE, COLLUDING, NOT_SELECTED}


def test_a_quota_rejection_is_no_evidence_against_its_sender() -> None:
    verdicts = [VoteVerdict(BOB.peer_id, False, NOT_SELECTED), VoteVerdict(MALLORY.peer_id, False, "outlier")]
    assert judged_map(verdicts) == {MALLORY.peer_id_b58: False}
    assert evidence_map(verdicts) == {MALLORY.peer_id_b58: False}


def test_edge_and_opposed_rows_are_strikes_in_the_ballots_but_judged_as_accepted() -> None:
    verdicts = [VoteVerdict(BOB.peer_id, True, EDGE_REASON), VoteVerdict(CAROL.peer_id, False, "timeout"),
                VoteVerdict(DAVE.peer_id, True, "accepted"), VoteVerdict(MALLORY.peer_id, False, EDGE_REASON),
                VoteVerdict(ALICE.peer_id, True, OPPOSED_REASON)]
    assert evidence_map(verdicts) == {BOB.peer_id_b58: False, DAVE.peer_id_b58: True, MALLORY.peer_id_b58: False,
                                      ALICE.peer_id_b58: False}
    assert judged_map(verdicts) == {BOB.peer_id_b58: True, DAVE.peer_id_b58: True, MALLORY.peer_id_b58: False,
                                    ALICE.peer_id_b58: True}
    votes = open_votes(sign_votes(RUN, 3, verdicts, ALICE), run_id=RUN, round_=3)
    assert isinstance(votes, Votes)
    assert votes.as_map() == evidence_map(verdicts)
