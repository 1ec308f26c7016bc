"""Rule 8: no value up to the protocol's own caps kills or stalls a live peer's DHT.

A 3-peer digits swarm runs (real ``p2p-guard`` processes, the ``swarm`` fixture). A hostile DHT client in this
test's event loop (``start_dht`` with no validator, so it keeps and forwards whatever it writes) joins through
the bootstrap node and stores, for the swarm's run, the largest value of every record kind that the peers'
record validator accepts (``swarm.validator``), each validly signed by the hostile identity:

- two commit envelopes of ``MAX_ENVELOPE_BYTES`` (64 KiB) for one round, with different digests (equivocation);
- the equivocation proof of those two (``max_proof_bytes()``, ~128 KiB) under ``proofs``;
- a ``votes`` record of ``MAX_VOTES_BYTES`` (64 KiB);
- a ``presence`` and a ``close`` record of ``MAX_RECORD_BYTES`` (1 KiB).

(In hivemind's forked-DHT design, any value over ~16 KB through its command pipe killed the DHT process.)
Then every honest peer must ban the hostile sender (so the proof reached the round logic), complete more
rounds, log no traceback, refuse none of the hostile values for size, and stop on SIGINT with exit code 0 and
no process left behind. The peer's only children are ``p2pd`` and its watchdog: no forked DHT process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import msgpack
import psutil
import pytest

pytest.importorskip("hivemind")

from p2p_guard.identity import Identity  # noqa: E402 - after the importorskip
from p2p_guard.simulation.orchestrator import peer_paths  # noqa: E402
from p2p_guard.protocol import PROTOCOL_VERSION, Envelope, Rejected, open_envelope, payload_digest, \
    sign_envelope  # noqa: E402
from p2p_guard.protocol.envelope import MAX_ENVELOPE_BYTES  # noqa: E402
from p2p_guard.protocol.proof import make_proof, max_proof_bytes, verify_proof  # noqa: E402
from p2p_guard.protocol.records import MAX_RECORD_BYTES, RECORD_SIGNING_CONTEXT  # noqa: E402
from p2p_guard.protocol.votes import MAX_VOTES_BYTES  # noqa: E402
from p2p_guard.swarm.dht import SwarmDHT, start_dht  # noqa: E402
from p2p_guard.swarm.records import close_key, commit_key, presence_key, proofs_key, votes_key  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN = "large-values"
PEERS = 3
MORE_ROUNDS = 3
ROUND_TIMEOUT_S = 240.0
TTL_S = 300.0
PRESENCE_TTL_S = 50.0  # the validator caps presence records at 60 s


def padded_envelope(identity: Identity, round_: int, *, salt: bytes, max_bytes: int = MAX_ENVELOPE_BYTES) -> bytes:
    """A validly signed envelope as close to ``max_bytes`` as its shapes can pad it (never over)."""

    def build(tensors: int, last_rank: int) -> bytes:
        shapes = [[2**62] * 8 for _ in range(tensors)] + ([[2**62] * last_rank] if last_rank else [])
        env = Envelope(protocol_version=PROTOCOL_VERSION, run_id=RUN, round=round_, sender=identity.peer_id,
                       base_hash=bytes(32), digest=payload_digest(salt), codec="fp32", shapes=shapes,
                       n_samples=1, payload_bytes=len(salt))
        return sign_envelope(env, identity)

    low, high = 0, 4000  # tensors of rank 8: ~82 bytes each
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if len(build(mid, 0)) <= max_bytes else (low, mid - 1)
    best = build(low, 0)
    for rank in range(1, 8):
        candidate = build(low, rank)
        if len(candidate) <= max_bytes:
            best = candidate
    return best


def padded_record(identity: Identity, kind: str, round_: int, size: int) -> bytes:
    """A validly signed record of ``kind`` whose value is a bytes blob making the record exactly ``size`` bytes."""

    def build(pad: int) -> bytes:
        body = msgpack.packb([kind, PROTOCOL_VERSION, RUN, round_, identity.peer_id, b"\x00" * pad],
                             use_bin_type=True)
        return msgpack.packb([body, identity.sign(RECORD_SIGNING_CONTEXT + body)], use_bin_type=True)

    pad = size - len(build(0))
    while len(build(pad)) > size:  # msgpack headers grow at 256 and 65,536 bytes
        pad -= 1
    return build(pad)


def hostile_values(identity: Identity, round_: int) -> dict[str, tuple[str, bytes]]:
    """``{what: (key, value)}``: the largest legal value of every record kind, for rounds near ``round_``."""
    first = padded_envelope(identity, round_, salt=b"first")
    second = padded_envelope(identity, round_, salt=b"second")
    proof = make_proof(first, second)
    return {
        "commit": (commit_key(RUN, round_), first),
        "equivocating commit": (commit_key(RUN, round_), second),
        "proof": (proofs_key(RUN), proof),
        "votes": (votes_key(RUN, round_), padded_record(identity, "votes", round_, MAX_VOTES_BYTES)),
        "presence": (presence_key(RUN), padded_record(identity, "presence", round_, MAX_RECORD_BYTES)),
        "close": (close_key(RUN, round_), padded_record(identity, "close", round_, MAX_RECORD_BYTES)),
    }


def test_values_at_the_caps_are_legal() -> None:
    """The hostile values are exactly what the caps allow (so the live test below tests the caps)."""
    mallory = Identity.from_seed(b"\x07" * 32)
    values = hostile_values(mallory, 5)
    for what in ("commit", "equivocating commit"):
        raw = values[what][1]
        assert MAX_ENVELOPE_BYTES - 16 <= len(raw) <= MAX_ENVELOPE_BYTES, (what, len(raw))
        assert not isinstance(open_envelope(raw), Rejected)
    proof = values["proof"][1]
    assert len(proof) > max_proof_bytes() - 64 and not isinstance(verify_proof(proof), Rejected)
    assert len(values["votes"][1]) == MAX_VOTES_BYTES
    assert len(values["presence"][1]) == len(values["close"][1]) == MAX_RECORD_BYTES


def _round_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _children(pid: int) -> list[str]:
    names = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            names.append("reaper" if "reaper" in " ".join(child.cmdline()) else child.name())
        except psutil.Error:
            continue
    return sorted(names)


@pytest.mark.timeout(600)
def test_peers_survive_the_largest_legal_values(swarm: Any, tmp_path: Path) -> None:
    local = swarm(PEERS, rounds=400, inner_steps=2, run_id=RUN, reputation=True)
    local.wait_rounds(2, timeout_s=ROUND_TIMEOUT_S)
    for peer in local.peers.values():
        assert _children(peer.pid) == ["p2pd", "reaper"], _children(peer.pid)
    asyncio.run(_attack_and_watch(local, tmp_path))

    peer0 = local.peers[0]
    os.kill(peer0.pid, signal.SIGINT)
    code = peer0.popen.wait(timeout=90)
    assert code == 0, f"peer0 exited {code} after SIGINT; log {peer0.log_path}"
    log = peer0.log_path.read_text(errors="replace")
    assert "SIGINT received" in log and "peer finished after" in log, log[-2000:]


async def _store_retrying(dht: SwarmDHT, key: str, subkey: str, value: bytes, ttl_s: float, tries: int = 4) -> bool:
    """The attacker's store, retried as a real attacker would: under load a store RPC can time out (CI saw one)."""
    for _ in range(tries):
        if await dht.store(key, subkey, value, ttl_s):
            return True
        await asyncio.sleep(1.0)
    return False


async def _attack_and_watch(local: Any, tmp_path: Path) -> None:
    mallory = Identity.load_or_create(tmp_path / "mallory.key")
    hostile: SwarmDHT = await start_dht(identity_path=str(mallory.path), initial_peers=local.initial_peers,
                                        host="127.0.0.1", port=0, record_validators=[])
    try:
        done_before = {i: local.rounds_done(i) for i in local.peers}
        target = max(done_before.values()) + 3  # a round no peer has reached: its commits are read live
        values = hostile_values(mallory, target)
        for what, (key, value) in values.items():
            ttl_s = PRESENCE_TTL_S if what == "presence" else TTL_S
            assert await _store_retrying(hostile, key, mallory.peer_id_b58, value, ttl_s), f"store of {what} failed"
        sizes = {what: len(value) for what, (_, value) in values.items()}
        # The peers must complete MORE_ROUNDS more rounds each; the hostile node keeps answering meanwhile.
        await asyncio.to_thread(local.wait_rounds, max(done_before.values()) + MORE_ROUNDS + 2, ROUND_TIMEOUT_S)
    finally:
        await hostile.shutdown()
    for index, peer in local.peers.items():
        events = _round_events(peer_paths(local.workdir, index)["events"])
        bans = {e["sender"]: e for e in events if e.get("event") == "ban"}
        assert mallory.peer_id_b58 in bans, f"peer{index} did not ban the equivocator; values {sizes}"
        assert bans[mallory.peer_id_b58]["proof_round"] == target, bans
        log = peer.log_path.read_text(errors="replace")
        assert "Traceback" not in log and "BlockingIOError" not in log, log[-3000:]
        refused = [line for line in log.splitlines() if "DHT record refused" in line and "oversize" in line]
        assert not refused, f"a legal value was refused as oversize: {refused}"
