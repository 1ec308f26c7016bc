"""Integration: the record validator on a live DHT of three nodes on 127.0.0.1, with a hostile writer.

Nodes ``a`` (first node) and ``b`` (Alice's) run :class:`RecordValidator` for the run, started with
``p2p_guard.swarm.dht.start_dht`` (all three in this test's event loop). Mallory's node runs *no* validator, so it keeps whatever it writes and
forwards it to the others unchanged, as a modified client would. Alice commits; Mallory then tries to
overwrite her subkey with her own signed envelope, to store a forged envelope in her name, to pin her subkey
with a far-future expiration, to replay her earlier-round commit, and to replace the whole key with a value
without a subkey. Alice's commit must survive on the honest nodes, and every read must return valid records
only. Then Mallory equivocates on her own subkey: the honest nodes' validators catch the proof, which is
published under ``proofs`` and read back; a forged proof against Alice is refused. Every DHT is shut down in
``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

hivemind = pytest.importorskip("hivemind")

from hivemind.utils import get_dht_time  # noqa: E402 - after the importorskip

from p2p_guard.identity import Identity, peer_id_to_b58  # noqa: E402
from p2p_guard.protocol import (  # noqa: E402
    PROTOCOL_VERSION,
    Envelope,
    Rejected,
    envelope_message,
    open_envelope,
    pack_envelope,
    payload_digest,
    sign_envelope,
)
from p2p_guard.protocol.proof import EquivocationProof, make_proof, verify_proof  # noqa: E402
from p2p_guard.swarm.dht import SwarmDHT, start_dht  # noqa: E402
from p2p_guard.swarm.records import commit_key, proofs_key, publish_proof, read_proofs  # noqa: E402
from p2p_guard.swarm.validator import RecordValidator  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RUN = "dht-validator-test"
ROUND = 3
START_TIMEOUT_S = 60.0
HONEST_TTL_S = 600.0
LATER_TTL_S = 650.0  # later than the honest commit, still under the validator's 660 s cap


def envelope(identity: Identity, *, round_: int = ROUND, payload: bytes = b"\x00\x00\x80\x3f") -> Envelope:
    return Envelope(
        protocol_version=PROTOCOL_VERSION,
        run_id=RUN,
        round=round_,
        sender=identity.peer_id,
        base_hash=bytes(32),
        digest=payload_digest(payload),
        codec="fp32",
        shapes=[[1]],
        n_samples=10,
        payload_bytes=len(payload),
    )


async def start(
    tmp_path: Path, name: str, initial_peers: list[str], validators: list[Any] | None
) -> tuple[SwarmDHT, Identity]:
    identity = Identity.load_or_create(tmp_path / f"{name}.key")
    dht = await start_dht(
        identity_path=str(identity.path),
        initial_peers=initial_peers,
        host="127.0.0.1",
        port=0,
        startup_timeout_s=START_TIMEOUT_S,
        record_validators=validators,
    )
    return dht, identity


async def read_commits(dht: SwarmDHT, round_: int = ROUND) -> dict[str, tuple[bytes, float]]:
    """``{subkey: (value, expiration)}`` under the round's commit key, as hivemind returns it."""
    found = await dht.node.get(commit_key(RUN, round_), latest=True)
    if found is None or not isinstance(found.value, dict):
        return {}
    return {subkey: (item.value, item.expiration_time) for subkey, item in found.value.items()}


def assert_only_valid(commits: dict[str, tuple[bytes, float]]) -> None:
    for subkey, (value, _) in commits.items():
        env = open_envelope(value)
        assert not isinstance(env, Rejected), f"invalid record under {subkey}: {env}"
        assert peer_id_to_b58(env.sender) == subkey, "a record signed by someone else than its subkey"
        assert env.run_id == RUN


def test_hostile_writer_cannot_overwrite_forge_or_pin(tmp_path: Path) -> None:
    asyncio.run(_hostile_writer(tmp_path))


async def _hostile_writer(tmp_path: Path) -> None:
    started: list[SwarmDHT] = []
    try:
        node_a, _ = await start(tmp_path, "a", [], [RecordValidator([RUN], max_rounds=100)])
        started.append(node_a)
        maddrs = await node_a.visible_maddrs()
        node_b, alice = await start(tmp_path, "alice", maddrs, [RecordValidator([RUN], max_rounds=100)])
        started.append(node_b)
        node_m, mallory = await start(tmp_path, "mallory", maddrs, [])
        started.append(node_m)
        alice_id, mallory_id = alice.peer_id_b58, mallory.peer_id_b58
        key = commit_key(RUN, ROUND)

        honest = sign_envelope(envelope(alice), alice)
        honest_expiration = get_dht_time() + HONEST_TTL_S
        assert await node_b.node.store(key, honest, honest_expiration, subkey=alice_id)
        for node in (node_a, node_b):
            assert (await read_commits(node)).get(alice_id) == (honest, honest_expiration)

        later = get_dht_time() + LATER_TTL_S
        forged_env = envelope(alice, payload=b"\x00\x00\x00\xc0")
        attempts = {
            "own envelope under Alice's subkey": (sign_envelope(envelope(mallory), mallory), later, alice_id),
            "forged envelope in Alice's name": (
                pack_envelope(forged_env, mallory.sign(envelope_message(forged_env))),
                later,
                alice_id,
            ),
            "garbage pinned far in the future": (b"garbage", get_dht_time() + 1e6, alice_id),
            "Alice's own commit pinned far in the future": (honest, get_dht_time() + 1e6, alice_id),
            "Alice's earlier round replayed": (
                sign_envelope(envelope(alice, round_=ROUND - 1), alice),
                later,
                alice_id,
            ),
            "a value without a subkey over the whole key": (
                sign_envelope(envelope(mallory), mallory),
                later,
                None,
            ),
            "garbage without a subkey over the whole key": (b"garbage", later, None),
        }
        for value, expiration, subkey in attempts.values():
            await node_m.node.store(key, value, expiration, subkey=subkey)  # Mallory's node keeps it; others refuse

        for node in (node_a, node_b):
            commits = await read_commits(node)
            assert commits.get(alice_id) == (honest, honest_expiration), (
                f"Alice's commit did not survive: {commits}"
            )
            assert_only_valid(commits)

        # Mallory's own valid commit under her own subkey is accepted like anyone's.
        own = sign_envelope(envelope(mallory), mallory)
        assert await node_m.node.store(key, own, get_dht_time() + HONEST_TTL_S, subkey=mallory_id)
        commits = await read_commits(node_a)
        assert commits[alice_id][0] == honest
        assert_only_valid(commits)

        report = node_a.validator_report()
        for reason in ("impersonation", "bad_signature", "bad_expiration", "wrong_round", "no_subkey"):
            assert report.counts.get(reason, 0) >= 1, f"no {reason} refusal on node a: {report.counts}"
        assert report.counts.get("accepted", 0) >= 2
        refused = {(r.subkey, r.reason) for r in report.refusals}
        assert {
            (alice_id, "impersonation"),
            (alice_id, "bad_signature"),
            (alice_id, "wrong_round"),
            (alice_id, "bad_expiration"),
            ("", "no_subkey"),
        } <= refused, refused
    finally:
        for dht in reversed(started):
            with contextlib.suppress(Exception):
                await dht.shutdown()


def test_equivocation_is_caught_published_and_read(tmp_path: Path) -> None:
    asyncio.run(_equivocation(tmp_path))


async def _equivocation(tmp_path: Path) -> None:
    started: list[SwarmDHT] = []
    try:
        node_a, _ = await start(tmp_path, "a", [], None)  # the default validator: by content only
        started.append(node_a)
        maddrs = await node_a.visible_maddrs()
        node_b, alice = await start(tmp_path, "alice", maddrs, [RecordValidator([RUN], max_rounds=100)])
        started.append(node_b)
        node_m, mallory = await start(tmp_path, "mallory", maddrs, [])
        started.append(node_m)
        key = commit_key(RUN, ROUND)

        first = sign_envelope(envelope(mallory), mallory)
        second = sign_envelope(envelope(mallory, payload=b"\x00\x00\x00\x40"), mallory)
        assert await node_m.node.store(key, first, get_dht_time() + HONEST_TTL_S, subkey=mallory.peer_id_b58)
        assert await node_m.node.store(key, second, get_dht_time() + HONEST_TTL_S + 5, subkey=mallory.peer_id_b58)

        caught: list[EquivocationProof] = []
        for node in (node_a, node_b):
            report = node.validator_report()
            proofs = [verify_proof(raw) for raw in report.proofs]
            assert len(proofs) == 1, f"no proof caught by a node that stored both envelopes: {report}"
            assert isinstance(proofs[0], EquivocationProof)
            assert (proofs[0].sender_b58, proofs[0].run_id, proofs[0].round) == (
                mallory.peer_id_b58,
                RUN,
                ROUND,
            )
            caught.append(proofs[0])
        assert caught[0].to_bytes() == make_proof(first, second)

        assert await publish_proof(node_b, RUN, caught[1])
        # Mallory answers with a "proof" against Alice made of two of Alice's identical commits.
        fake = sign_envelope(envelope(alice), alice)
        await node_m.node.store(
            proofs_key(RUN), make_fake_proof(fake), get_dht_time() + 600, subkey=alice.peer_id_b58
        )
        proofs = await read_proofs(node_a, RUN)
        assert set(proofs) == {mallory.peer_id_b58}
        assert proofs[mallory.peer_id_b58].to_bytes() == caught[1].to_bytes()
    finally:
        for dht in reversed(started):
            with contextlib.suppress(Exception):
                await dht.shutdown()


def make_fake_proof(envelope_bytes: bytes) -> bytes:
    import msgpack

    return msgpack.packb(["p2p_guard.equivocation", 1, envelope_bytes, envelope_bytes], use_bin_type=True)
