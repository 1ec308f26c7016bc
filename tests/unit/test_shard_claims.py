"""Shard claims (``swarm/shard_claims.py``): which shard a joiner picks given the claims of the present peers,
which claims are ignored and why, coverage, the warnings and the log line, the peer's start, and the DHT
validator's rules for the ``shards`` key.

User test: 4 volunteers of ``peers/volunteer.toml`` (``num_peers = 3``, no ``--peer-index``) left shard 0
untrained, two of them on one shard, and nothing said so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable

import msgpack
import pytest
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord
from hivemind.utils import MSGPackSerializer, get_dht_time

from p2p_guard.identity import Identity
from p2p_guard.protocol import PROTOCOL_VERSION
from p2p_guard.protocol.records import RECORD_SIGNING_CONTEXT, sign_record
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.peer import Peer, build_local_model, start_shard
from p2p_guard.swarm.records import SHARD_TTL_S, presence_key, shards_key
from p2p_guard.swarm.shard_claims import (
    ClaimsRead,
    Coverage,
    ShardChoice,
    ShardClaim,
    ShardMove,
    choose_shard,
    count_mismatch_warning,
    coverage,
    coverage_warnings,
    describe_choice,
    move_order,
    open_shard_claims,
    pick_order,
    present_claims,
    publish_shard_claim,
    rebalance,
)
from p2p_guard.swarm.validator import RecordValidator
from p2p_guard.tasks import load_task
from p2p_guard.training.streams import PeerStream, derived_shard_index

RUN = "shard-test"
A, B, C, D, E = (Identity.from_seed(bytes([i]) * 32) for i in (1, 2, 3, 4, 5))
ME = A.peer_id_b58


class FakeDHT:
    """``read`` from and ``store`` into a dict, as ``SwarmDHT`` does (unverified bytes per subkey)."""

    def __init__(self, data: dict[str, dict[str, bytes]] | None = None) -> None:
        self.data = data or {}
        self.stored: list[tuple[str, str, bytes, float]] = []

    async def read(self, key: str) -> dict[str, bytes]:
        return dict(self.data.get(key, {}))

    async def store(self, key: str, subkey: str, value: bytes, ttl_s: float) -> bool:
        self.stored.append((key, subkey, value, ttl_s))
        self.data.setdefault(key, {})[subkey] = value
        return True


def claim(who: Identity, shard: object, num_shards: object = 3, round_: int = 0) -> bytes:
    return sign_record("shard", RUN, round_, [shard, num_shards], who)


def presence(*who: Identity) -> dict[str, bytes]:
    return {p.peer_id_b58: sign_record("presence", RUN, 0, 0, p) for p in who}


# -- choose_shard ---------------------------------------------------------------------------------------------------


def test_the_pick_order_is_sha256_of_peer_id_and_shard() -> None:
    assert pick_order(ME, 2) == hashlib.sha256(b"p2p-guard/shard-pick|" + ME.encode() + b"|2").digest()
    assert pick_order(ME, 12) != pick_order(ME, 1)


def test_an_alone_joiner_takes_the_shard_its_peer_id_prefers() -> None:
    # A's order of shards 0, 1, 2 by pick_order: the first is the one taken with nothing claimed
    order = sorted(range(3), key=lambda s: pick_order(ME, s))
    assert choose_shard(ME, 3, []) == ShardChoice(order[0], "uncovered", frozenset())
    assert [choose_shard(p.peer_id_b58, 3, []).shard_index for p in (A, B, C, D)] == [2, 2, 2, 0]
    assert [derived_shard_index(p.peer_id_b58, 3) for p in (A, B, C, D)] == [0, 2, 2, 2]  # not the same rule


def test_a_joiner_takes_the_uncovered_shard() -> None:
    """The user test: shards 1 and 2 claimed (twice), 0 free: every joiner takes 0, whatever its PeerID says."""
    for who in (A, B, C, D):
        assert choose_shard(who.peer_id_b58, 3, [1, 2, 2]) == ShardChoice(0, "uncovered", frozenset({1, 2}))


def test_among_several_uncovered_shards_the_peer_id_orders_them() -> None:
    # 8 shards, 0-3 claimed: each peer takes its own first of 4-7 by pick_order, exactly
    picks = {p.peer_id_b58: choose_shard(p.peer_id_b58, 8, [0, 1, 2, 3]).shard_index for p in (A, B, C, D)}
    assert picks == {A.peer_id_b58: 4, B.peer_id_b58: 7, C.peer_id_b58: 5, D.peer_id_b58: 7}
    for peer_id, shard in picks.items():
        assert shard == min(range(4, 8), key=lambda s: pick_order(peer_id, s))


def test_every_shard_claimed_falls_back_to_the_peer_id_shard() -> None:
    derived = derived_shard_index(ME, 3)
    assert derived == 0
    assert choose_shard(ME, 3, [0, 1, 2, 1]) == ShardChoice(0, "peer_id", frozenset({0, 1, 2}))
    assert choose_shard(ME, 3, None) == ShardChoice(0, "peer_id", None)  # the claims could not be read


def test_a_peer_index_wins_and_out_of_range_claims_do_not_count() -> None:
    assert choose_shard(ME, 3, [2, 2], peer_index=2) == ShardChoice(2, "peer_index", frozenset({2}))
    # 3 and -1 are no shards of 3: 1 and 2 are still free, ordered by A's preference
    assert choose_shard(ME, 3, [0, 3, -1, 2**63]) == ShardChoice(
        min((1, 2), key=lambda s: pick_order(ME, s)), "uncovered", frozenset({0}))


@pytest.mark.parametrize(("args", "message"), [
    ((ME, 0, []), "num_shards must be >= 1; got 0"),
    (("", 3, []), "peer_id must not be empty"),
    ((ME, 3, [], 3), "peer_index must be in [0, num_shards); got peer_index=3, num_shards=3"),
])
def test_choose_shard_refuses(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        choose_shard(*args)  # type: ignore[arg-type]
    assert str(raised.value) == message


# -- open_shard_claims ------------------------------------------------------------------------------------------------


def test_valid_claims_are_kept_and_every_other_value_ignored_with_its_reason() -> None:
    body = msgpack.packb(["shard", PROTOCOL_VERSION, RUN, 0, D.peer_id, [1, 3]], use_bin_type=True)
    forged = msgpack.packb([body, b"\x00" * 64], use_bin_type=True)
    raw: dict[str, object] = {
        A.peer_id_b58: claim(A, 1, round_=4),
        B.peer_id_b58: claim(B, 3),  # out of range
        C.peer_id_b58: claim(C, 1, 4),  # another number of shards
        D.peer_id_b58: forged,
        "x" + A.peer_id_b58: claim(A, 2),  # signed by A under another subkey
        "y": sign_record("shard", RUN, 0, 2, A),  # not [shard, count]
        "z": sign_record("shard", "other-run", 0, [0, 3], A),
        E.peer_id_b58: claim(E, 0, 0),  # no shards
        "v": b"\xc1",
        "u": sign_record("presence", RUN, 0, 0, A),  # another kind
    }
    read = open_shard_claims(raw, RUN, num_shards=3)
    assert read == ClaimsRead(
        claims={A.peer_id_b58: ShardClaim(shard=1, num_shards=3, round=4)},
        ignored={
            B.peer_id_b58: "shard 3 out of range [0, 3)",
            C.peer_id_b58: "for 4 shards, not 3",
            D.peer_id_b58: "bad_signature: signature does not match the sender's PeerID",
            "x" + A.peer_id_b58: "signed by another PeerID than its subkey",
            "y": "decode_error: bad shard value",
            "z": "wrong_run: run 'other-run'",
            E.peer_id_b58: "no shards",
            "v": "decode_error: msgpack: FormatError",
            "u": "decode_error: record kind 'presence', expected 'shard'",
        })
    # without a number of our own (status), a claim for any number of shards is kept
    assert open_shard_claims(raw, RUN).claims[C.peer_id_b58] == ShardClaim(shard=1, num_shards=4, round=0)


def test_hostile_values_never_raise() -> None:
    raw = {str(i): bytes([i]) * i for i in range(64)}
    raw[ME] = claim(A, 2**63 - 1, 2**63 - 1)
    read = open_shard_claims(raw, RUN, num_shards=3)
    assert read.claims == {} and len(read.ignored) == 65
    assert read.ignored[ME] == f"shard {2**63 - 1} out of range [0, {2**63 - 1})"


# -- coverage, warnings, the log line ---------------------------------------------------------------------------------


def test_coverage_of_the_user_test() -> None:
    claims = {"p1": 1, "p2": 2, "p3": 2, "p4": 1, "p5": 7}  # p5's shard is no shard of 3: ignored
    assert coverage(claims, 3) == Coverage(num_shards=3, peers_by_shard={1: ("p1", "p4"), 2: ("p2", "p3")},
                                           uncovered=(0,), uncovered_count=1)
    assert coverage(claims, 3).shared == {1: ("p1", "p4"), 2: ("p2", "p3")}


def test_coverage_of_a_huge_count_is_bounded() -> None:
    cov = coverage({"p": 1}, 2**63 - 1, max_listed=3)
    assert (cov.uncovered, cov.uncovered_count) == ((0, 2, 3), 2**63 - 2)
    with pytest.raises(ValueError, match="num_shards must be >= 1; got 0"):
        coverage({}, 0)


def test_coverage_warnings_exact() -> None:
    others = {B.peer_id_b58: 1, C.peer_id_b58: 2, D.peer_id_b58: 2}
    assert coverage_warnings(ME, 1, others, 3) == [
        "our data shard 1 of 3 is also claimed by 1 other present peer(s) (Lr2NASuq): each draws its own batches, "
        "but that part of the data weighs more in the swarm's model",
        "1 of 3 data shard(s) trained by no present peer: 0 (by the present peers' shard claims; a peer of an older "
        "version publishes none)"]
    assert coverage_warnings(ME, 1, others, 3, uncovered=False) == coverage_warnings(ME, 1, others, 3)[:1]
    assert coverage_warnings(ME, 0, others, 3) == []
    assert coverage_warnings(ME, 0, {ME: 1, B.peer_id_b58: 1, C.peer_id_b58: 2}, 3) == []  # our own old claim


def test_describe_choice_exact() -> None:
    assert describe_choice(ShardChoice(2, "peer_index", frozenset({2})), 3) == "data shard 2 of 3 (--peer-index)"
    assert describe_choice(ShardChoice(0, "uncovered", frozenset({1, 2})), 3) == (
        "data shard 0 of 3 (chosen at start among the shards no present peer trains: the other present peers "
        "claim 1, 2; batches our own)")
    assert describe_choice(ShardChoice(1, "uncovered", frozenset()), 3) == (
        "data shard 1 of 3 (chosen at start among the shards no present peer trains: no other present peer claims "
        "a shard; batches our own)")
    assert describe_choice(ShardChoice(0, "peer_id", frozenset({0, 1, 2})), 3) == (
        "data shard 0 of 3 (derived from our PeerID: every shard is claimed by a present peer; batches our own)")
    assert describe_choice(ShardChoice(0, "peer_id", None), 3) == (
        "data shard 0 of 3 (derived from our PeerID: the other peers' shard claims could not be read; batches "
        "our own)")


# -- rebalancing, a num_peers mismatch -------------------------------------------------------------------------------

# by move_order(·, 0), largest first: E, C, B, A, D
B_, C_, D_, E_ = (x.peer_id_b58 for x in (B, C, D, E))


def test_move_order_is_sha256_of_peer_id_and_shard() -> None:
    assert move_order(ME, 0) == hashlib.sha256(b"p2p-guard/shard-move|" + ME.encode() + b"|0").digest()
    assert sorted((ME, B_, C_, D_, E_), key=lambda p: move_order(p, 0), reverse=True) == [E_, C_, B_, ME, D_]


def test_of_two_sharers_only_the_designated_one_moves() -> None:
    assert rebalance(ME, 0, {B_: 0, C_: 1}, 3, by_index=False) is None
    assert rebalance(B_, 0, {ME: 0, C_: 1}, 3, by_index=False) == ShardMove(shard=0, to=2, sharing=(ME,))


def test_a_peer_index_never_moves_and_nothing_uncovered_means_no_move() -> None:
    assert rebalance(B_, 0, {ME: 0, C_: 1}, 3, by_index=True) is None
    assert rebalance(B_, 0, {ME: 0, C_: 1, D_: 2}, 3, by_index=False) is None  # every shard trained
    assert rebalance(B_, 0, {C_: 1}, 3, by_index=False) is None  # not shared
    assert rebalance(B_, 0, {B_: 1, ME: 0}, 3, by_index=False) == ShardMove(0, 2, (ME,))  # our own old claim: out


def test_at_most_one_mover_per_uncovered_shard_and_the_last_sharer_stays() -> None:
    others = {ME: 0, B_: 0, C_: 0, D_: 1}
    # 3 shards, 1 uncovered: only C, the first by move_order, moves (sharing: the others, sorted)
    assert [rebalance(p, 0, {q: s for q, s in others.items() if q != p}, 3, by_index=False) for p in (ME, B_, C_)] \
        == [None, None, ShardMove(0, 2, (B_, ME))]
    # 4 shards, 2 and 3 uncovered: C and B move (each to the shard its PeerID prefers: both 2 here), A stays
    assert [rebalance(p, 0, {q: s for q, s in others.items() if q != p}, 4, by_index=False) for p in (ME, B_, C_)] \
        == [None, ShardMove(0, 2, (ME, C_)), ShardMove(0, 2, (B_, ME))]


def _simulate(peers: list[str], claims: dict[str, int], num_shards: int, checks: int) -> list[list[int]]:
    """Every peer checks at once, ``checks`` times, on the claims of the check before; the sorted claims each time."""
    seen = []
    for _ in range(checks):
        moves = {p: rebalance(p, claims[p], {q: s for q, s in claims.items() if q != p}, num_shards, by_index=False)
                 for p in peers}
        claims = {p: claims[p] if m is None else m.to for p, m in moves.items()}
        seen.append(sorted(claims.values()))
    return seen


def test_eight_peers_all_on_shard_0_cover_the_eight_shards_within_three_checks() -> None:
    peers = [Identity.from_seed(bytes([i + 20]) * 32).peer_id_b58 for i in range(8)]
    assert _simulate(peers, dict.fromkeys(peers, 0), 8, 4) == [
        [0, 2, 3, 4, 4, 5, 5, 6], [0, 2, 3, 4, 5, 6, 7, 7], list(range(8)), list(range(8))]


def test_rebalancing_always_reaches_full_coverage_and_then_stops() -> None:
    """A covered shard always keeps a sharer and each check covers at least one more: full within N − 1 checks."""
    for swarm in range(30):
        peers = [Identity.from_seed(bytes([swarm, i]) * 16).peer_id_b58 for i in range(8 + swarm % 3)]
        seen = _simulate(peers, dict.fromkeys(peers, swarm % 8), 8, 8)
        covered = [len(set(shards)) for shards in seen]
        assert covered == sorted(covered) and covered[-1] == 8 and seen[-1] == seen[-2], (swarm, seen)


def test_count_mismatch_warning_exact() -> None:
    assert count_mismatch_warning({}, 4) is None
    assert count_mismatch_warning({B_: 3, C_: 3, D_: 5}, 4) == (
        "3 present peer(s) cut the data into another number of shards than our 4 (num_peers): 3 (Lr2NASuq, "
        "9r3ANaba); 5 (qV8L8BQw); their shards are not ours, so which shards are trained by nobody is not judged: "
        "give every peer of the run the same num_peers")
    # it replaces the warning of uncovered shards
    assert coverage_warnings(ME, 0, {}, 4, foreign={B_: 3}) == [count_mismatch_warning({B_: 3}, 4)]


def test_a_peer_of_another_num_peers_is_named(caplog: pytest.LogCaptureFixture) -> None:
    """The user test: a peer with num_peers 4 in a swarm of 3 heard '3 of 4 data shard(s) trained by no present
    peer' instead of the mismatch; and it moves nowhere."""
    dht = FakeDHT({presence_key(RUN): presence(B, C, D),
                   shards_key(RUN): {B_: claim(B, 0), C_: claim(C, 1), D_: claim(D, 2)}})
    peer = _peer(A, dht, num_peers=4)
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        asyncio.run(peer.claim_shard())
    assert [r.getMessage().split("] ", 1)[1] for r in caplog.records] == [
        "3 present peer(s) cut the data into another number of shards than our 4 (num_peers): 3 (Lr2NASuq, "
        "qV8L8BQw, 9r3ANaba); their shards are not ours, so which shards are trained by nobody is not judged: give "
        "every peer of the run the same num_peers"]
    assert peer.pending_shard is None


def test_the_designated_sharer_moves_between_rounds_and_claims_its_new_shard(
        caplog: pytest.LogCaptureFixture) -> None:
    """B (no --peer-index) and A both train shard 0, C trains 1, nobody 2: B is the one to move."""
    dht = FakeDHT({presence_key(RUN): presence(A, C), shards_key(RUN): {ME: claim(A, 0), C_: claim(C, 1)}})
    peer = _peer(B, dht)
    peer.use_shard(0)
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        asyncio.run(peer.claim_shard(uncovered=False))  # the first look: no move
        assert peer.pending_shard is None
        asyncio.run(peer.claim_shard())
    assert [r.getMessage().split("] ", 1)[1] for r in caplog.records if r.levelno == logging.INFO] == [
        "data shard 0 of 3 is also trained by yKSUKPH5; moving to shard 2, which no present peer trains"]
    assert peer.pending_shard == 2 and peer.local.shard.index == 0  # not while an inner phase may run
    assert dht.data[shards_key(RUN)][B_] == claim(B, 0)
    peer.apply_pending_shard()  # the round loop, before the next inner phase
    assert peer.pending_shard is None and peer.claim_due
    assert peer.local.shard.index == 2 and peer.stream == PeerStream(2, B_, derived=True)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        asyncio.run(peer.claim_shard())
    assert dht.data[shards_key(RUN)][B_] == claim(B, 2)
    assert [r.getMessage().split("] ", 1)[1] for r in caplog.records] == [
        "data shards: each of the 3 is now trained by a present peer, ours by us alone"]
    peer.apply_pending_shard()  # nothing pending: nothing changes
    assert peer.local.shard.index == 2


# -- reading and publishing ----------------------------------------------------------------------------------------


def test_only_present_allowed_other_peers_count() -> None:
    dht = FakeDHT({presence_key(RUN): presence(A, B, C),
                   shards_key(RUN): {A.peer_id_b58: claim(A, 0), B.peer_id_b58: claim(B, 1),
                                     C.peer_id_b58: claim(C, 2), D.peer_id_b58: claim(D, 0)}})  # D not present
    assert asyncio.run(present_claims(dht, RUN, 3, me=ME)) == {B.peer_id_b58: 1, C.peer_id_b58: 2}
    assert asyncio.run(present_claims(dht, RUN, 3, me=ME, allowed=frozenset({ME, C.peer_id_b58}))) == {
        C.peer_id_b58: 2}
    assert asyncio.run(present_claims(dht, RUN, 3, me=ME, exclude={B.peer_id_b58})) == {C.peer_id_b58: 2}
    assert asyncio.run(present_claims(dht, RUN, 4, me=ME)) == {}  # claims for 3 shards, not 4


def test_publish_stores_a_signed_claim_under_our_subkey() -> None:
    dht = FakeDHT()
    assert asyncio.run(publish_shard_claim(dht, A, RUN, 5, 2, 3, SHARD_TTL_S))
    assert dht.stored == [(shards_key(RUN), ME, sign_record("shard", RUN, 5, [2, 3], A), 180.0)]
    assert open_shard_claims(dht.data[shards_key(RUN)], RUN, num_shards=3).claims == {
        ME: ShardClaim(shard=2, num_shards=3, round=5)}
    with pytest.raises(ValueError, match=r"shard must be in \[0, num_shards\); got shard=3, num_shards=3"):
        asyncio.run(publish_shard_claim(dht, A, RUN, 5, 3, 3, SHARD_TTL_S))


# -- the peer's start -----------------------------------------------------------------------------------------------


def _peer(identity: Identity, dht: FakeDHT, **kw: object) -> Peer:
    config = PeerConfig(**{"run_id": RUN, "num_peers": 3, "inner_steps": 1, "device": "cpu", "reputation": False,
                           **kw})  # type: ignore[arg-type]
    local = build_local_model(config, identity, load_task(config.task))
    return Peer(config, identity, local, dht, None, None, None)  # type: ignore[arg-type]


def test_a_volunteer_without_index_moves_to_the_uncovered_shard(caplog: pytest.LogCaptureFixture) -> None:
    """The user test's fourth volunteer: B, C, D present on shards 1, 2, 1; E's PeerID gives shard 2, it takes 0."""
    dht = FakeDHT({presence_key(RUN): presence(B, C, D),
                   shards_key(RUN): {B.peer_id_b58: claim(B, 1), C.peer_id_b58: claim(C, 2),
                                     D.peer_id_b58: claim(D, 1)}})
    e = Identity.from_seed(bytes([10]) * 32)
    assert derived_shard_index(e.peer_id_b58, 3) == 2
    peer = _peer(e, dht)
    assert peer.local.shard.index == 2
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        choice = asyncio.run(start_shard(peer, peer.config))
    assert choice == ShardChoice(0, "uncovered", frozenset({1, 2}))
    assert peer.stream == PeerStream(0, e.peer_id_b58, derived=True)  # batches still keyed by the PeerID
    assert peer.local.shard.index == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.endswith("data shard 0 of 3 (chosen at start among the shards no present peer trains: the other "
                          "present peers claim 1, 2; batches our own)") for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_fourth_volunteer_on_three_shards_keeps_its_peer_id_shard_and_says_it_is_shared(
        caplog: pytest.LogCaptureFixture) -> None:
    dht = FakeDHT({presence_key(RUN): presence(B, C, D),
                   shards_key(RUN): {B.peer_id_b58: claim(B, 0), C.peer_id_b58: claim(C, 1),
                                     D.peer_id_b58: claim(D, 2)}})
    peer = _peer(A, dht)
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        assert asyncio.run(start_shard(peer, peer.config)) == ShardChoice(0, "peer_id", frozenset({0, 1, 2}))
    messages = [r.getMessage().split("] ", 1)[1] for r in caplog.records]
    assert messages == [
        "data shard 0 of 3 (derived from our PeerID: every shard is claimed by a present peer; batches our own)",
        "our data shard 0 of 3 is also claimed by 1 other present peer(s) (Lr2NASuq): each draws its own batches, "
        "but that part of the data weighs more in the swarm's model"]
    assert caplog.records[1].levelno == logging.WARNING


def test_a_peer_index_shared_with_a_present_peer_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """``--peer-index 1`` while B trains 1: nothing read at start, the announcer's first claim warns of the shared
    shard; a later one of shards 0 and 2, trained by nobody; the same warnings are not repeated."""
    dht = FakeDHT({presence_key(RUN): presence(B), shards_key(RUN): {B.peer_id_b58: claim(B, 1)}})
    peer = _peer(A, dht, peer_index=1)

    def warnings_of(work: Awaitable[object]) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="p2p_guard"):
            asyncio.run(work)  # type: ignore[arg-type]
        return [r.getMessage().split("] ", 1)[1] for r in caplog.records if r.levelno == logging.WARNING]

    assert warnings_of(start_shard(peer, peer.config)) == []
    assert [r.getMessage() for r in caplog.records][-1].endswith("data shard 1 of 3 (--peer-index)")
    assert peer.local.shard.index == 1 and peer.stream == PeerStream(1, 1, derived=False)
    shared = ("our data shard 1 of 3 is also claimed by 1 other present peer(s) (Lr2NASuq): a peer started with the "
              "same --peer-index draws the same batches as we do, and the guard rejects such identical updates as "
              "duplicates; give each peer its own --peer-index, or leave it out to have a free shard picked")
    assert warnings_of(peer.claim_shard(uncovered=False)) == [shared]
    assert dht.data[shards_key(RUN)][ME] == sign_record("shard", RUN, 0, [1, 3], A)
    assert warnings_of(peer.claim_shard()) == [shared, (
        "2 of 3 data shard(s) trained by no present peer: 0, 2 (by the present peers' shard claims; a peer of an "
        "older version publishes none)")]
    assert warnings_of(peer.claim_shard()) == []
    assert peer.pending_shard is None  # a --peer-index never moves
    # B moves to shard 0, C joins on 2: one line says every shard is trained now
    dht.data[presence_key(RUN)] = presence(B, C)
    dht.data[shards_key(RUN)].update({B.peer_id_b58: claim(B, 0), C.peer_id_b58: claim(C, 2)})
    assert warnings_of(peer.claim_shard()) == []
    assert [r.getMessage() for r in caplog.records][-1].endswith(
        "data shards: each of the 3 is now trained by a present peer, ours by us alone")


def test_an_unreadable_dht_leaves_the_peer_id_shard() -> None:
    class Broken(FakeDHT):
        async def read(self, key: str) -> dict[str, bytes]:
            raise OSError("p2pd gone")

    peer = _peer(A, Broken())
    assert asyncio.run(start_shard(peer, peer.config)) == ShardChoice(0, "peer_id", None)
    assert peer.local.shard.index == 0
    asyncio.run(peer.claim_shard())  # never raises: the announcer keeps our presence alive


# -- the validator's rules for the shards key -------------------------------------------------------------------------


def _record(subkey: object, value: bytes, ttl_s: float = 60.0, key: str | None = None) -> DHTRecord:
    return DHTRecord(key=DHTID.generate(source=key or shards_key(RUN)).to_bytes(),
                     subkey=MSGPackSerializer.dumps(subkey), value=MSGPackSerializer.dumps(value),
                     expiration_time=get_dht_time() + ttl_s)


@pytest.mark.parametrize(("validator", "misplaced"), [(RecordValidator([RUN], max_rounds=5), "wrong_kind"),
                                                     (RecordValidator(max_rounds=5), "wrong_key")],
                         ids=["knows the run", "blind"])
def test_the_validator_guards_the_shards_key(validator: RecordValidator, misplaced: str) -> None:
    """A peer's validator knows the key by its hash; a bootstrap node's places the claim by its content."""

    def reason(rec: DHTRecord) -> str:
        return validator.check(rec).reason

    assert reason(_record(ME, claim(A, 1), SHARD_TTL_S)) == "accepted"
    assert reason(_record(B.peer_id_b58, claim(A, 1))) == "impersonation"
    assert reason(_record(ME, claim(A, 1), 300.0)) == "bad_expiration"  # capped at 240 s
    assert reason(_record(ME, claim(A, 1), key=presence_key(RUN))) == misplaced
    assert reason(_record(ME, sign_record("presence", RUN, 0, 0, A))) == misplaced
    body = msgpack.packb(["shard", PROTOCOL_VERSION, RUN, 0, A.peer_id, "x" * 2000], use_bin_type=True)
    big = msgpack.packb([body, A.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)
    assert reason(_record(ME, big)) == "oversize"
