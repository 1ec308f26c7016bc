"""Unit tests for p2p_guard.attacks.wire: each attack yields exactly its RejectReason at a receiver."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence

import pytest
import torch

from p2p_guard.attacks.wire import (
    WIRE_ATTACKS,
    BadSignature,
    CommitDraft,
    Copycat,
    DigestMismatch,
    NaNPayload,
    Oversized,
    Slowloris,
    WireAttack,
    WrongRun,
    WrongShape,
    seal,
)
from p2p_guard.guard.integrity import RoundExpectation, check_envelope, check_payload
from p2p_guard.identity import Identity
from p2p_guard.protocol import (
    PROTOCOL_VERSION,
    Envelope,
    Rejected,
    RejectReason,
    encode_update,
    open_envelope,
    payload_digest,
    sign_envelope,
)

MALLORY = Identity.from_seed(bytes(range(100, 132)))
BASE = b"\x0b" * 32
SHAPES = ((2, 3), (4,))
UPDATE = torch.linspace(-1.0, 1.0, 10)
EXPECTED_REASON = {
    "unsigned": RejectReason.UNSIGNED,
    "bad_signature": RejectReason.BAD_SIGNATURE,
    "wrong_run": RejectReason.WRONG_RUN,
    "wrong_round": RejectReason.WRONG_ROUND,
    "stale_base": RejectReason.STALE_BASE,
    "digest_mismatch": RejectReason.DIGEST_MISMATCH,
    "wrong_shape": RejectReason.SHAPE_MISMATCH,
    "nan": RejectReason.NON_FINITE,
    "oversized": RejectReason.OVERSIZE,
    "forged_signature": RejectReason.BAD_SIGNATURE,
    "impersonate": RejectReason.BAD_SIGNATURE,
}


def expectation(round_: int = 3, shapes: tuple[tuple[int, ...], ...] = SHAPES) -> RoundExpectation:
    return RoundExpectation(run_id="run-1", round=round_, max_staleness=2, shapes=shapes,
                            max_payload_bytes=1 << 20)


def honest_draft(codec: str = "fp32", round_: int = 3, shapes: tuple[tuple[int, ...], ...] = SHAPES,
                 vector: torch.Tensor = UPDATE) -> CommitDraft:
    envelope = Envelope(
        protocol_version=PROTOCOL_VERSION, run_id="run-1", round=round_, sender=MALLORY.peer_id,
        base_hash=BASE, digest=bytes(32), codec=codec, shapes=shapes, n_samples=64, payload_bytes=0,
    )
    return CommitDraft.honest(envelope, encode_update(vector, codec))


def receive(draft: CommitDraft, expect: RoundExpectation) -> torch.Tensor | Rejected:
    """What a correct receiver does: open the envelope, check it, then check the served payload."""
    env = open_envelope(seal(draft, MALLORY))
    if isinstance(env, Rejected):
        return env
    verdict = check_envelope(env, expect)
    if isinstance(verdict, Rejected):
        return verdict
    return check_payload(env, draft.serve_payload, expect)


def test_registry_names() -> None:
    # equivocate sends two individually valid envelopes (its test is the proof below); replay needs the
    # previous round's envelope, kept by the peer; vote_smear commits honestly and lies only in its votes;
    # slowloris commits honestly and attacks the stream; copycat needs a live round to copy from (unit tests
    # below); all five are exercised in live swarms.
    assert set(WIRE_ATTACKS) == set(EXPECTED_REASON) | {"equivocate", "replay", "vote_smear", "slowloris", "copycat"}


def test_vote_smear_commits_honestly() -> None:
    draft = honest_draft("fp32")
    assert WIRE_ATTACKS["vote_smear"]().mutate(draft, torch.Generator().manual_seed(0)) is draft


def test_equivocate_second_commit_conflicts_with_the_first() -> None:
    from p2p_guard.protocol.proof import make_proof, verify_proof

    attack = WIRE_ATTACKS["equivocate"]()
    first = attack.mutate(honest_draft("fp32"), torch.Generator().manual_seed(0))
    second = attack.second_commit(first, torch.Generator().manual_seed(0))
    assert second.serve_payload != first.serve_payload
    proof = verify_proof(make_proof(seal(first, MALLORY), seal(second, MALLORY)))
    assert not isinstance(proof, Rejected)
    assert proof.sender == MALLORY.peer_id


@pytest.mark.parametrize("codec", ["fp32", "fp16"])
def test_honest_draft_passes(codec: str) -> None:
    update = receive(honest_draft(codec), expectation())
    assert isinstance(update, torch.Tensor)
    assert torch.allclose(update, UPDATE, atol=1e-3)


def test_honest_seal_equals_sign_envelope() -> None:
    draft = honest_draft()
    assert seal(draft, MALLORY) == sign_envelope(draft.envelope, MALLORY)


@pytest.mark.parametrize("name", sorted(EXPECTED_REASON))
@pytest.mark.parametrize("codec", ["fp32", "fp16"])
def test_attack_yields_exactly_its_reason(name: str, codec: str) -> None:
    attack = WIRE_ATTACKS[name]()
    draft = honest_draft(codec)
    attacked = attack.mutate(draft, torch.Generator().manual_seed(0))
    result = receive(attacked, expectation())
    assert isinstance(result, Rejected), f"{name} passed the receiver"
    assert result.reason is EXPECTED_REASON[name], result.detail


@pytest.mark.parametrize("name", sorted(EXPECTED_REASON))
def test_attack_follows_protocol_and_leaves_input_untouched(name: str) -> None:
    attack = WIRE_ATTACKS[name]()
    assert isinstance(attack, WireAttack)
    assert attack.kind == "wire"
    assert EXPECTED_REASON[name].name in (type(attack).__doc__ or "")
    draft = honest_draft()
    before = copy.deepcopy(draft)
    attack.mutate(draft, torch.Generator().manual_seed(0))
    assert draft == before


@pytest.mark.parametrize("name", ["bad_signature", "stale_base", "nan"])
def test_randomness_comes_from_generator(name: str) -> None:
    attack = WIRE_ATTACKS[name]()
    first = attack.mutate(honest_draft(), torch.Generator().manual_seed(5))
    second = attack.mutate(honest_draft(), torch.Generator().manual_seed(5))
    assert seal(first, MALLORY) == seal(second, MALLORY)


def test_wrong_round_in_round_zero() -> None:
    result = receive(WIRE_ATTACKS["wrong_round"]().mutate(honest_draft(round_=0), torch.Generator()),
                     expectation(round_=0))
    assert isinstance(result, Rejected) and result.reason is RejectReason.WRONG_ROUND


def test_wrong_round_is_a_replay_of_the_previous_round() -> None:
    attacked = WIRE_ATTACKS["wrong_round"]().mutate(honest_draft(round_=3), torch.Generator())
    assert attacked.envelope.round == 2


@pytest.mark.parametrize(
    "shapes", [((2, 3), (4,)), ((10,),), ((5, 2),), ((3, 3), (1,)), ((2, 2), (2, 3))]
)
def test_wrong_shape_is_self_consistent(shapes: tuple[tuple[int, ...], ...]) -> None:
    attacked = WrongShape().mutate(honest_draft(shapes=shapes), torch.Generator())
    assert attacked.envelope.shapes != shapes
    assert attacked.envelope.numel == 10
    assert attacked.serve_payload == attacked.digest_payload
    result = receive(attacked, expectation(shapes=shapes))
    assert isinstance(result, Rejected) and result.reason is RejectReason.SHAPE_MISMATCH
    # A receiver whose model had the attacker's shapes would accept the same commit.
    assert isinstance(receive(attacked, expectation(shapes=attacked.envelope.shapes)), torch.Tensor)


def test_digest_mismatch_serves_sign_flipped_update() -> None:
    attacked = DigestMismatch().mutate(honest_draft(), torch.Generator())
    assert len(attacked.serve_payload) == len(attacked.digest_payload)
    assert attacked.serve_payload == encode_update(-UPDATE, "fp32")


def test_digest_mismatch_on_empty_payload() -> None:
    attacked = DigestMismatch().mutate(honest_draft(shapes=((0,),), vector=torch.zeros(0)), torch.Generator())
    result = receive(attacked, expectation(shapes=((0,),)))
    assert isinstance(result, Rejected) and result.reason is RejectReason.OVERSIZE


def test_nan_payload_is_digested_and_signed() -> None:
    attacked = NaNPayload().mutate(honest_draft(), torch.Generator().manual_seed(1))
    assert attacked.serve_payload == attacked.digest_payload
    env = open_envelope(seal(attacked, MALLORY))
    assert isinstance(env, Envelope)
    assert env.digest == payload_digest(attacked.serve_payload)
    values = torch.frombuffer(bytearray(attacked.serve_payload), dtype=torch.float32)
    assert torch.isnan(values).sum() == 1
    assert torch.isinf(values).sum() == 1


def test_nan_payload_needs_parameters() -> None:
    with pytest.raises(ValueError, match="no parameters"):
        NaNPayload().mutate(honest_draft(shapes=((0,),), vector=torch.zeros(0)), torch.Generator())


def test_oversized_declares_real_size() -> None:
    attacked = Oversized().mutate(honest_draft(), torch.Generator())
    assert len(attacked.serve_payload) == 40 + 4 * 1024 * 1024
    assert attacked.envelope.payload_bytes == 40


def test_bad_signature_is_64_bytes() -> None:
    attacked = BadSignature().mutate(honest_draft(), torch.Generator())
    assert attacked.signature_override is not None and len(attacked.signature_override) == 64


@pytest.mark.parametrize(
    ("factory", "kwargs"),
    [(Oversized, {"extra_bytes": 0}), (Oversized, {"extra_bytes": True}), (WrongRun, {"suffix": ""}),
     (Slowloris, {"bytes_per_s": -1.0}), (Slowloris, {"bytes_per_s": float("inf")}),
     (Slowloris, {"bytes_per_s": True}), (Slowloris, {"head_bytes": -1}), (Slowloris, {"head_bytes": 1.0}),
     (Slowloris, {"client_streams": -1}), (Slowloris, {"interval_s": 0.0}),
     (Slowloris, {"interval_s": float("nan")}),
     (Copycat, {"adapt": "yes"}), (Copycat, {"scale": 0.0}), (Copycat, {"scale": float("nan")}),
     (Copycat, {"poll_s": 0}), (Copycat, {"poll_s": True})],
)
def test_constructor_rejections(factory: type, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        factory(**kwargs)


def test_seal_refuses_to_sign_for_another_sender() -> None:
    draft = honest_draft()
    with pytest.raises(ValueError, match="another peer"):
        seal(draft, Identity.generate())


def test_slowloris_commit_is_the_honest_one() -> None:
    """The commit passes every check: the attack is only in how the payload is served (TIMEOUT, live)."""
    attack = Slowloris(bytes_per_s=0, head_bytes=0, client_streams=0)
    assert isinstance(attack, WireAttack)
    assert attack.trickles_payload is True
    assert "TIMEOUT" in (Slowloris.__doc__ or "")
    draft = honest_draft()
    assert attack.mutate(draft, torch.Generator()) == draft
    assert torch.equal(receive(draft, expectation()), UPDATE)
    assert (attack.bytes_per_s, attack.head_bytes, attack.client_streams, attack.interval_s) == (0.0, 0, 0, 1.0)


def test_repr_names_parameters() -> None:
    assert repr(Oversized(extra_bytes=10)) == "Oversized(extra_bytes=10)"
    assert repr(WrongRun(suffix="-x")) == "WrongRun(suffix='-x')"
    assert repr(Slowloris()) == "Slowloris(bytes_per_s=2.0, head_bytes=1, client_streams=8, interval_s=1.0)"
    assert repr(Copycat(adapt=True, scale=-2)) == "Copycat(adapt=True, scale=-2.0, poll_s=0.25)"


HONEST = Identity.from_seed(bytes(range(32)))


def honest_commit(vector: torch.Tensor, codec: str = "fp32") -> tuple[Envelope, bytes]:
    """An honest peer's envelope (its own key) and the payload it serves once it revealed."""
    payload = encode_update(vector, codec)
    env = Envelope(protocol_version=PROTOCOL_VERSION, run_id="run-1", round=3, sender=HONEST.peer_id,
                   base_hash=BASE, digest=payload_digest(payload), codec=codec, shapes=SHAPES, n_samples=64,
                   payload_bytes=len(payload))
    return env, payload


class Revealing:
    """A stand-in for ``swarm.rounds.revealed_payloads``: nothing for ``hidden`` polls, then ``served``."""

    def __init__(self, served: Sequence[tuple[Envelope, bytes]], hidden: int) -> None:
        self.served = list(served)
        self.hidden = hidden
        self.polls = 0

    async def __call__(self) -> list[tuple[Envelope, bytes]]:
        self.polls += 1
        return self.served if self.polls > self.hidden else []


class TestCopycat:
    def test_docstring_names_the_reasons_and_the_knowledge(self) -> None:
        doc = Copycat.__doc__ or ""
        assert "LATE_COMMIT" in doc and "Knowledge assumed" in doc
        assert isinstance(Copycat(), WireAttack)

    def test_mutate_leaves_the_draft_alone(self) -> None:
        draft = honest_draft()
        assert Copycat().mutate(draft, torch.Generator()) is draft

    def test_waits_for_a_reveal_then_copies_it_byte_for_byte(self) -> None:
        env, payload = honest_commit(torch.arange(10, dtype=torch.float32))
        poll = Revealing([(env, payload)], hidden=2)
        draft = honest_draft(codec="fp16")
        before = copy.deepcopy(draft)
        copied = asyncio.run(Copycat(poll_s=0.01).copy_commit(draft, poll, timeout_s=5.0))
        assert poll.polls == 3
        assert draft == before
        assert copied.serve_payload == copied.digest_payload == payload
        sealed = open_envelope(seal(copied, MALLORY))
        assert isinstance(sealed, Envelope)
        assert sealed.sender == MALLORY.peer_id  # its own signature ...
        assert sealed.digest == env.digest  # ... over the honest peer's digest
        assert (sealed.codec, sealed.payload_bytes) == ("fp32", 40)
        # Taken on its own, the copy is a valid update: only the timing (the close gate) stops it.
        assert torch.equal(receive(copied, expectation()), torch.arange(10, dtype=torch.float32))

    def test_adapt_commits_the_scaled_mean_of_the_revealed_payloads(self) -> None:
        first = honest_commit(torch.full((10,), 1.0))
        second = honest_commit(torch.full((10,), 3.0), codec="fp16")
        adapted = asyncio.run(Copycat(adapt=True, scale=-10.0, poll_s=0.01).copy_commit(
            honest_draft(), Revealing([first, second], hidden=0), timeout_s=5.0))
        assert adapted.serve_payload == adapted.digest_payload == encode_update(torch.full((10,), -20.0), "fp32")
        assert adapted.envelope.payload_bytes == 40

    def test_commits_its_own_update_when_nothing_is_revealed(self) -> None:
        draft = honest_draft()
        poll = Revealing([], hidden=0)
        result = asyncio.run(Copycat(poll_s=0.01).copy_commit(draft, poll, timeout_s=0.05))
        assert result is draft
        assert 2 <= poll.polls <= 7

    def test_adapt_ignores_payloads_that_do_not_decode(self) -> None:
        env, payload = honest_commit(torch.ones(10))
        broken = (env, payload[:-1])
        poll = Revealing([broken], hidden=0)
        draft = honest_draft()
        assert asyncio.run(Copycat(adapt=True, poll_s=0.01).copy_commit(draft, poll, timeout_s=0.05)) is draft
