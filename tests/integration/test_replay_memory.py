"""Memory under replay floods: 100,000 replayed envelopes against a live peer's defences leave RSS growth < 50 MB.

1. ``test_dht_node_memory_under_100k_replayed_stores``: a live DHT node started with
   ``p2p_guard.swarm.dht.start_dht`` and our :class:`RecordValidator` (the target), and a hostile DHT node
   without a validator bootstrapped from it, in a spawned process of its own (each with its own ``p2pd``). The
   hostile node sends 100,000 stores of replayed, duplicate and stale-round commit envelopes straight to the
   target's ``rpc_store`` (``DHTProtocol.call_store``, 500 records per RPC), from a pool of 160 valid
   envelopes (8 senders × 20 rounds). Mix, by store index modulo 6:

   0. the current round's commit, re-stored under its own key and subkey (a duplicate);
   1. an older round's commit replayed under the current round's key (``wrong_round``);
   2. an older round's commit re-stored under its own, stale round key (valid there: a stale-round replay);
   3. a commit replayed under another sender's subkey (``impersonation``);
   4. a commit pinned far in the future (``bad_expiration``);
   5. a commit replayed under another run's key (``wrong_key``).

   The target's validator counts every record it judged (``SwarmDHT.validator_report``), which checks that the
   flood arrived; the resident memory (psutil RSS) of this process (the target's: its DHT node runs in this
   process's event loop) is read after a 1,000-store warm-up and after the flood. The target's ``p2pd``
   RSS is printed too (it is not ours to bound).
2. ``test_detector_and_reader_memory_under_100k_replays``: the peer-side defences in this process:
   ``open_envelope`` and :class:`EquivocationDetector` observe 100,000 replays (exact duplicates, stale rounds,
   conflicting envelopes that make proofs, and 8,000 distinct (sender, round) keys, twice the detector's
   capacity). The detector must stay at its bound, and this process's RSS growth must stay < 50 MB.

Both print their figures (counts, seconds, RSS before/after in MB) and put them in the assertion messages.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

hivemind = pytest.importorskip("hivemind")

from hivemind.dht.routing import DHTID  # noqa: E402 - after the importorskip
from hivemind.p2p import PeerID  # noqa: E402
from hivemind.utils import MSGPackSerializer, get_dht_time  # noqa: E402

from p2p_guard.identity import Identity  # noqa: E402
from p2p_guard.protocol import PROTOCOL_VERSION, Envelope, Rejected, open_envelope, payload_digest, \
    sign_envelope  # noqa: E402
from p2p_guard.protocol.proof import EquivocationDetector  # noqa: E402
from p2p_guard.swarm.dht import start_dht  # noqa: E402
from p2p_guard.swarm.records import commit_key  # noqa: E402
from p2p_guard.swarm.validator import RecordValidator  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.long]

RUN = "replay-memory"
SENDERS = 8
ROUNDS = 20
CURRENT = ROUNDS - 1
TOTAL_STORES = 100_000
WARMUP_STORES = 1_000
BATCH = 500
MAX_GROWTH_MB = 50.0
START_TIMEOUT_S = 60.0
MB = 1024 * 1024
FLOOD_TIMEOUT_S = 500.0


def envelope(identity: Identity, round_: int, payload: bytes = b"\x00\x00\x80\x3f") -> Envelope:
    return Envelope(protocol_version=PROTOCOL_VERSION, run_id=RUN, round=round_, sender=identity.peer_id,
                    base_hash=bytes(32), digest=payload_digest(payload), codec="fp32", shapes=[[1]],
                    n_samples=10, payload_bytes=len(payload))


def identities() -> list[Identity]:
    return [Identity.from_seed(bytes([index + 1]) * 32) for index in range(SENDERS)]


def pool() -> list[list[bytes]]:
    """``pool[sender][round]``: valid signed commits."""
    return [[sign_envelope(envelope(identity, r), identity) for r in range(ROUNDS)] for identity in identities()]


async def _flood(node: Any, target: bytes, start: int, count: int) -> tuple[int, int, int]:
    """The hostile node (a hivemind ``DHTNode``) sends ``count`` replayed stores to ``target``, ``BATCH`` per RPC.

    Returns ``(sent, stored, unanswered)``: records sent, records the target reported as stored, and records in
    RPCs that got no answer.
    """
    peer = PeerID(target)
    commits = pool()
    senders = [identity.peer_id_b58 for identity in identities()]
    own_keys = [DHTID.generate(source=commit_key(RUN, r)) for r in range(ROUNDS)]
    other_run_key = DHTID.generate(source=commit_key(RUN + "-other", CURRENT))
    values = [[MSGPackSerializer.dumps(raw) for raw in row] for row in commits]
    sent = stored = unanswered = 0
    for batch_start in range(start, start + count, BATCH):
        keys, subkeys, batch_values, expirations = [], [], [], []
        now = get_dht_time()
        for i in range(batch_start, min(batch_start + BATCH, start + count)):
            sender, old = i % SENDERS, (i // SENDERS) % CURRENT
            kind = i % 6
            if kind == 0:  # duplicate of the current commit under its own key and subkey
                key, subkey, value, expiration = own_keys[CURRENT], senders[sender], values[sender][CURRENT], \
                    now + 600
            elif kind == 1:  # an older round replayed under the current round's key
                key, subkey, value, expiration = own_keys[CURRENT], senders[sender], values[sender][old], now + 600
            elif kind == 2:  # an older round re-stored under its own (stale) key
                key, subkey, value, expiration = own_keys[old], senders[sender], values[sender][old], now + 600
            elif kind == 3:  # another sender's subkey
                key, subkey, value, expiration = own_keys[CURRENT], senders[(sender + 1) % SENDERS], \
                    values[sender][CURRENT], now + 600
            elif kind == 4:  # pinned far in the future
                key, subkey, value, expiration = own_keys[CURRENT], senders[sender], values[sender][CURRENT], \
                    now + 1e6
            else:  # another run's key
                key, subkey, value, expiration = other_run_key, senders[sender], values[sender][CURRENT], now + 600
            keys.append(key)
            subkeys.append(subkey)
            batch_values.append(value)
            expirations.append(expiration)
        result = await node.protocol.call_store(peer, keys, batch_values, expirations, subkeys=subkeys)
        sent += len(keys)
        if result is None:
            unanswered += len(keys)
        else:
            stored += sum(bool(ok) for ok in result)
    return sent, stored, unanswered


def rss_mb(process: psutil.Process) -> float:
    return process.memory_info().rss / MB


def p2pd_of(process: psutil.Process) -> psutil.Process | None:
    for child in process.children(recursive=True):
        try:
            if "p2pd" in child.name():
                return child
        except psutil.Error:
            continue
    return None


def _hostile_main(identity_path: str, maddrs: list[str], target: bytes, results: Any) -> None:
    """The hostile node, in its own process (spawned): warm-up, then the flood; puts both results on the queue."""

    async def run() -> None:
        hostile = await start_dht(identity_path=identity_path, initial_peers=maddrs, host="127.0.0.1", port=0,
                                  startup_timeout_s=START_TIMEOUT_S, record_validators=[])
        try:
            results.put(("warm-up", await _flood(hostile.node, target, 0, WARMUP_STORES)))
            results.put(("flood", await _flood(hostile.node, target, WARMUP_STORES, TOTAL_STORES)))
        finally:
            await hostile.shutdown()

    asyncio.run(run())


def test_dht_node_memory_under_100k_replayed_stores(tmp_path: Path) -> None:
    asyncio.run(_replay_flood(tmp_path))


async def _replay_flood(tmp_path: Path) -> None:
    for name in ("target", "hostile"):  # Ed25519 identity files, as a peer has
        Identity.load_or_create(tmp_path / f"{name}.key")
    target = await start_dht(identity_path=str(tmp_path / "target.key"), host="127.0.0.1", port=0,
                             startup_timeout_s=START_TIMEOUT_S, record_validators=[RecordValidator([RUN])])
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    hostile = context.Process(target=_hostile_main, daemon=True,
                              args=(str(tmp_path / "hostile.key"), await target.visible_maddrs(),
                                    target.peer_id.to_bytes(), results))
    try:
        process = psutil.Process()
        daemon = p2pd_of(process)
        hostile.start()
        step, _ = await asyncio.to_thread(results.get, True, FLOOD_TIMEOUT_S)
        assert step == "warm-up"
        gc.collect()
        before = rss_mb(process)
        daemon_before = rss_mb(daemon) if daemon is not None else float("nan")
        began = time.monotonic()
        step, (sent, stored, unanswered) = await asyncio.to_thread(results.get, True, FLOOD_TIMEOUT_S)
        seconds = time.monotonic() - began
        gc.collect()
        after = rss_mb(process)
        daemon_after = rss_mb(daemon) if daemon is not None else float("nan")
        report = target.validator_report()
        judged = sum(report.counts.values())
        summary = (f"{sent} replayed stores in {seconds:.1f} s ({sent / seconds:.0f}/s); target stored {stored}, "
                   f"unanswered {unanswered}; validator judged {judged} records (warm-up included): "
                   f"{dict(sorted(report.counts.items()))}; target process RSS {before:.1f} → {after:.1f} MB "
                   f"(growth {after - before:+.1f} MB); its p2pd RSS {daemon_before:.1f} → {daemon_after:.1f} MB")
        print(f"[replay-memory] DHT node: {summary}")
        assert sent == TOTAL_STORES, summary
        assert unanswered <= TOTAL_STORES // 20, summary
        assert judged >= TOTAL_STORES - unanswered, summary
        assert after - before < MAX_GROWTH_MB, summary
        for reason in ("accepted", "wrong_round", "impersonation", "bad_expiration", "wrong_key"):
            assert report.counts.get(reason, 0) > 0, f"no {reason} among the judged records: {summary}"
    finally:
        await asyncio.to_thread(hostile.join, 30)
        if hostile.is_alive():
            hostile.kill()
        await target.shutdown()


def test_detector_and_reader_memory_under_100k_replays() -> None:
    people = identities()
    process = psutil.Process()
    replays = [[sign_envelope(envelope(identity, r), identity) for r in range(ROUNDS)] for identity in people]
    conflicting = [sign_envelope(envelope(identity, CURRENT, payload=b"\x00\x00\x00\xc0"), identity)
                   for identity in people]
    distinct_rounds = 1000  # × 8 senders = 8,000 distinct (sender, round) keys, twice the detector's capacity
    distinct = [sign_envelope(envelope(people[i % SENDERS], 100 + i // SENDERS), people[i % SENDERS])
                for i in range(SENDERS * distinct_rounds)]
    detector = EquivocationDetector()
    gc.collect()
    before = rss_mb(process)
    began = time.monotonic()
    proofs = rejected = 0
    for i in range(TOTAL_STORES):
        kind = i % 4
        if kind == 0:
            raw = replays[i % SENDERS][CURRENT]
        elif kind == 1:
            raw = replays[i % SENDERS][(i // SENDERS) % ROUNDS]
        elif kind == 2:
            raw = distinct[(i // 4) % len(distinct)]
        else:
            raw = conflicting[i % SENDERS] if i % 400 == 3 else replays[i % SENDERS][CURRENT]
        env = open_envelope(raw)  # as Peer._watch_commits does with every value it reads
        if isinstance(env, Rejected):
            rejected += 1
            continue
        if detector.observe(raw, env) is not None:
            proofs += 1
    seconds = time.monotonic() - began
    gc.collect()
    after = rss_mb(process)
    summary = (f"{TOTAL_STORES} replays opened and observed in {seconds:.1f} s; {proofs} proofs, {rejected} "
               f"rejected, detector holds {len(detector)} of {detector.max_entries}; test process RSS "
               f"{before:.1f} → {after:.1f} MB (growth {after - before:+.1f} MB)")
    print(f"[replay-memory] detector: {summary}")
    assert len(detector) <= detector.max_entries, summary
    assert proofs > 0, summary
    assert after - before < MAX_GROWTH_MB, summary
