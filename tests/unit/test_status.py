"""``p2p-guard status``: collecting a snapshot from fabricated DHT records (hostile ones included) and its exact
table and JSON output (``swarm/status.py``, ``cli/status_cmd.py``)."""

from __future__ import annotations

import asyncio
import json
import sys

import msgpack
import pytest

from p2p_guard.cli.status_cmd import render_json, render_table, shard_line
from p2p_guard.identity import Identity
from p2p_guard.protocol.envelope import PROTOCOL_VERSION, Envelope, sign_envelope
from p2p_guard.protocol.proof import make_proof
from p2p_guard.protocol.records import sign_record
from p2p_guard.protocol.votes import VoteVerdict, sign_votes
from p2p_guard.swarm.records import close_key, commit_key, presence_key, proofs_key, shards_key, votes_key
from p2p_guard.swarm.status import collect_status, swarm_round

RUN = "status-test"
ALICE, BOB, CAROL, MALLORY, DAVE = (Identity.from_seed(bytes([i]) * 32) for i in (1, 2, 3, 4, 5))


class FakeDHT:
    """``read(key)`` from a dict, as ``SwarmDHT.read`` returns it (unverified bytes per subkey)."""

    def __init__(self, data: dict[str, dict[str, bytes]]) -> None:
        self.data = data
        self.reads: list[str] = []

    async def read(self, key: str) -> dict[str, bytes]:
        self.reads.append(key)
        return dict(self.data.get(key, {}))


def envelope(who: Identity, round_: int, base_round: int, base_hash: bytes, *, codec: str = "fp32",
             digest: bytes = b"\x11" * 32) -> bytes:
    return sign_envelope(Envelope(PROTOCOL_VERSION, RUN, round_, who.peer_id, base_hash, digest, codec,
                                  ((4,),), 10, 16, base_round), who)


def fabricated() -> FakeDHT:
    """Alice, Bob, Carol present (rounds 5, 5, 4), Mallory equivocated in round 4; plus garbage under every key."""
    h1, h2 = b"\xaa" * 32, b"\xbb" * 32
    presence = {p.peer_id_b58: sign_record("presence", RUN, r, r, p) for p, r in ((ALICE, 5), (BOB, 5), (CAROL, 4))}
    presence["garbage"] = b"\x93\x00"
    presence[BOB.peer_id_b58 + "x"] = sign_record("presence", RUN, 9, 9, MALLORY)  # impersonation: skipped
    presence[MALLORY.peer_id_b58] = sign_record("presence", "other-run", 99, 99, MALLORY)  # wrong run: skipped
    e1 = envelope(MALLORY, 4, 4, h1, digest=b"\x01" * 32)
    e2 = envelope(MALLORY, 4, 4, h1, digest=b"\x02" * 32)
    verdicts = [VoteVerdict(BOB.peer_id, True, "accepted"), VoteVerdict(CAROL.peer_id, True, "accepted"),
                VoteVerdict(MALLORY.peer_id, False, "equivocation")]
    return FakeDHT({
        presence_key(RUN): presence,
        commit_key(RUN, 4): {ALICE.peer_id_b58: envelope(ALICE, 4, 4, h1), CAROL.peer_id_b58: envelope(CAROL, 4, 3, h2),
                             MALLORY.peer_id_b58: e1},
        commit_key(RUN, 5): {ALICE.peer_id_b58: envelope(ALICE, 5, 5, h2, codec="int8"),
                             BOB.peer_id_b58: envelope(BOB, 5, 5, h2, codec="fp\x1b[31m16"),  # escape: not printed
                             CAROL.peer_id_b58: envelope(ALICE, 5, 5, h2)},  # signed by another: skipped
        close_key(RUN, 4): {ALICE.peer_id_b58: sign_record("close", RUN, 4, 3, ALICE),
                            BOB.peer_id_b58: sign_record("close", RUN, 3, 3, BOB)},  # a replayed round: skipped
        votes_key(RUN, 4): {ALICE.peer_id_b58: sign_votes(RUN, 4, verdicts, ALICE),
                            CAROL.peer_id_b58: msgpack.packb({"not": "votes"})},
        votes_key(RUN, 3): {CAROL.peer_id_b58: sign_votes(RUN, 3, verdicts[:1], CAROL)},
        proofs_key(RUN): {MALLORY.peer_id_b58: make_proof(e1, e2), ALICE.peer_id_b58: make_proof(e1, e2)},
        # Alice and Bob claim shard 1 of 3, Carol 2 of 4 (another count), Mallory 0 of 3 (not present: no coverage)
        shards_key(RUN): {ALICE.peer_id_b58: sign_record("shard", RUN, 5, [1, 3], ALICE),
                          BOB.peer_id_b58: sign_record("shard", RUN, 5, [1, 3], BOB),
                          CAROL.peer_id_b58: sign_record("shard", RUN, 4, [2, 4], CAROL),
                          MALLORY.peer_id_b58: sign_record("shard", RUN, 4, [0, 3], MALLORY),
                          DAVE.peer_id_b58: sign_record("shard", RUN, 5, [3, 3], DAVE),  # out of range: skipped
                          "y" + ALICE.peer_id_b58: sign_record("shard", RUN, 5, 7, ALICE)},  # not a pair: skipped
    })


#: The PeerIDs come from fixed seeds, so the short ids are fixed: Alice yKSUKPH5, Bob Lr2NASuq, Carol 9r3ANaba,
#: Mallory qV8L8BQw. Rows are sorted by full PeerID.
EXPECTED_TABLE = """\
run status-test: 3 peer(s) present, swarm round 5; rounds read 2-6
PEER      ROUND  SHARD  COMMIT  BASE  BASE_HASH  CODEC      CLOSED  VOTED  ACC  REJ  NOTE
Lr2NASuq      5    1/3       5     5  bbbbbbbb   fp??31m16       -      -    -    -
yKSUKPH5      5    1/3       5     5  bbbbbbbb   int8        4 (3)      4    2    1
qV8L8BQw      -    0/3       4     4  aaaaaaaa   fp32            -      -    -    -  banned, not present
9r3ANaba      4    2/4       4     3  bbbbbbbb   fp32            -      3    1    0
data shards: 1 of 3 claimed by 2 of the 3 present peer(s); trained by none: 0, 2; by several: 1 (Lr2NASuq, \
yKSUKPH5) (1 claim(s) for another number of shards left out)
base_hash claims: round 4: 2 distinct in 2 commit(s); round 5: 1 distinct in 2 commit(s)
equivocation proofs: 1 (every honest peer bans the accused)
  qV8L8BQw  round 4  digests 01010101 / 02020202
invalid records skipped: close 1, commit 1, presence 3, proofs 1, shards 2, votes 1"""


def test_swarm_round_is_the_lower_median() -> None:
    assert swarm_round({}) is None
    assert swarm_round({"a": 3}) == 3
    assert swarm_round({"a": 1, "b": 7, "c": 2**63 - 1, "d": 2}) == 2  # a hostile huge round cannot move it


def test_table_from_fabricated_records_exact() -> None:
    dht = fabricated()
    status = asyncio.run(collect_status(dht, RUN))
    assert [p.peer_id for p in status.peers] == sorted(p.peer_id_b58 for p in (ALICE, BOB, CAROL, MALLORY))
    rows = {p.peer_id: p for p in status.peers}
    assert [ALICE.peer_id_b58[-8:], BOB.peer_id_b58[-8:], CAROL.peer_id_b58[-8:], MALLORY.peer_id_b58[-8:]] == [
        "yKSUKPH5", "Lr2NASuq", "9r3ANaba", "qV8L8BQw"]
    assert render_table(status) == EXPECTED_TABLE
    assert rows[MALLORY.peer_id_b58].banned and not rows[ALICE.peer_id_b58].banned
    assert set(dht.reads) >= {commit_key(RUN, r) for r in range(2, 7)}


def test_json_from_fabricated_records_exact() -> None:
    status = asyncio.run(collect_status(fabricated(), RUN, depth=1))
    out = json.loads(render_json(status))
    assert out["rounds_read"] == [4, 5, 6]
    assert out["present"] == 3 and out["swarm_round"] == 5
    peers = {p["peer_id"]: p for p in out["peers"]}
    assert peers[ALICE.peer_id_b58] == {
        "peer_id": ALICE.peer_id_b58, "short_id": ALICE.peer_id_b58[-8:], "presence_round": 5,
        "commit": {"round": 5, "base_round": 5, "base_hash": "bb" * 32, "codec": "int8", "payload_bytes": 16,
                   "n_samples": 10},
        "close": {"round": 4, "commits": 3}, "votes": {"round": 4, "accepted": 2, "rejected": 1}, "banned": False,
        "left": False, "shard": {"shard": 1, "num_shards": 3, "round": 5}}
    assert peers[BOB.peer_id_b58]["commit"]["codec"] == "fp\x1b[31m16"  # JSON escapes it; the table replaces it
    assert peers[CAROL.peer_id_b58]["votes"] is None  # round 3 is below the window at depth 1
    assert out["proofs"] == [{"accused": MALLORY.peer_id_b58, "round": 4, "digest_a": "01" * 32,
                              "digest_b": "02" * 32}]
    assert out["base_hash_claims"] == {"4": {"aa" * 32: 1, "bb" * 32: 1}, "5": {"bb" * 32: 2}}
    assert out["skipped"] == {"close": 1, "commit": 1, "presence": 3, "proofs": 1, "shards": 2, "votes": 1}
    assert peers[MALLORY.peer_id_b58]["shard"] == {"shard": 0, "num_shards": 3, "round": 4}  # shown, not counted
    assert out["shards"] == {"num_shards": 3, "claimed": {"1": sorted([ALICE.peer_id_b58, BOB.peer_id_b58])},
                             "uncovered": [0, 2], "uncovered_count": 2, "other_num_shards": 1}


def test_a_signed_leave_record_is_a_peer_that_left_not_an_invalid_record() -> None:
    """A peer's clean stop replaces its presence with its signed leave record: it was counted as an invalid
    presence record ("invalid records skipped: presence 1") and the peer vanished from the table."""
    presence = {ALICE.peer_id_b58: sign_record("presence", RUN, 7, 7, ALICE),
                BOB.peer_id_b58: sign_record("leave", RUN, 7, 1_000, BOB),
                CAROL.peer_id_b58: sign_record("leave", RUN, 7, 1_000, ALICE)}  # signed by another: skipped
    status = asyncio.run(collect_status(FakeDHT({presence_key(RUN): presence}), RUN))
    assert status.skipped == {"presence": 1}
    rows = {p.peer_id: p for p in status.peers}
    assert rows[BOB.peer_id_b58].left and rows[BOB.peer_id_b58].presence_round is None
    assert not rows[ALICE.peer_id_b58].left and CAROL.peer_id_b58 not in rows
    assert [p.peer_id for p in status.present] == [ALICE.peer_id_b58]
    table = render_table(status)
    assert "Lr2NASuq      -      -       -     -  -          -           -      -    -    -  left" in table, table
    assert "data shards: none of the 1 present peer(s) claims one (a peer of an older version publishes none)" in table
    assert json.loads(render_json(status))["peers"][0]["left"] is True


def test_empty_swarm_and_hostile_values_never_crash() -> None:
    status = asyncio.run(collect_status(FakeDHT({}), RUN))
    assert render_table(status) == ("run status-test: 0 peer(s) present, swarm round -; no rounds read\n"
                                    "(no valid records of run 'status-test': is that the swarm's run_id? Pass it with --run-id)\n"
                                    "equivocation proofs: none\ninvalid records skipped: none")
    hostile = FakeDHT({presence_key(RUN): {str(i): bytes([i]) * i for i in range(40)},
                       proofs_key(RUN): {"x": b"\xc1" * 100},
                       shards_key(RUN): {"a": b"\xc1" * 100, "b": sign_record("shard", RUN, 0, [0, 0], ALICE),
                                         ALICE.peer_id_b58: sign_record("shard", RUN, 0, [0, 0], ALICE)}})
    status = asyncio.run(collect_status(hostile, RUN))
    assert status.peers == [] and status.skipped == {"presence": 40, "proofs": 1, "shards": 3}


def test_a_hostile_shard_count_is_bounded_in_the_table() -> None:
    """A present peer may claim 2**63 - 1 shards: the line lists MAX_LISTED uncovered ones and counts the rest."""
    huge = 2**63 - 1
    dht = FakeDHT({presence_key(RUN): {MALLORY.peer_id_b58: sign_record("presence", RUN, 1, 1, MALLORY)},
                   shards_key(RUN): {MALLORY.peer_id_b58: sign_record("shard", RUN, 1, [5, huge], MALLORY)}})
    status = asyncio.run(collect_status(dht, RUN))
    assert status.shards is not None and status.shards.uncovered_count == huge - 1
    listed = ", ".join(str(s) for s in [*range(5), *range(6, 33)])
    assert shard_line(status) == (f"data shards: 1 of {huge} claimed by 1 of the 1 present peer(s); trained by none: "
                                  f"{listed}, … and {huge - 1 - 32} more")
    assert f"qV8L8BQw      1  5/{huge}" in render_table(status)


def test_a_join_timeout_names_the_limit_as_given(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--timeout-s 0.001``: asyncio's TimeoutError has no text, so the message was "cannot join the DHT: "."""
    import p2p_guard.swarm.dht as dht_module
    from p2p_guard.cli.status_cmd import StatusConfig, _main

    async def times_out(**_: object) -> None:
        raise TimeoutError

    monkeypatch.setattr(dht_module, "start_dht", times_out)
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    assert asyncio.run(_main(StatusConfig(initial_peers=peers, timeout_s=0.001))) == 1
    assert capsys.readouterr().err == ("p2p-guard status: error: cannot join the DHT: no answer from the initial "
                                       f"peer(s) {peers[0]} within 0.001 s (--timeout-s)\n")


def test_the_timeout_bounds_a_join_that_never_ends(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A frozen bootstrap node (``kill -STOP``: its p2pd answers, its DHT never does): start_dht's steps each had
    a limit of their own, so ``--timeout-s 10`` took 22-26 s. Here the join never ends: without one limit over
    the whole command, ``_main`` never returns (pytest-timeout fails the test)."""
    import p2p_guard.swarm.dht as dht_module
    from p2p_guard.cli.status_cmd import StatusConfig, _main

    cancelled: list[bool] = []

    async def frozen(**_: object) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    monkeypatch.setattr(dht_module, "start_dht", frozen)
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    assert asyncio.run(_main(StatusConfig(initial_peers=peers, timeout_s=0.05))) == 1
    assert cancelled == [True]
    assert capsys.readouterr().err == ("p2p-guard status: error: cannot join the DHT: no answer from the initial "
                                       f"peer(s) {peers[0]} within 0.05 s (--timeout-s)\n")


def test_the_timeout_bounds_a_read_that_never_ends(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Joined, then the DHT never answers the reads: one line naming what did not answer, exit 1, and the client
    still leaves the DHT (its p2pd stopped). With ``--watch`` a timeout is tried again (the test below)."""
    import p2p_guard.swarm.dht as dht_module
    import p2p_guard.swarm.status as status_module
    from p2p_guard.cli import status_cmd

    calls: list[str] = []

    class Dht:
        async def shutdown(self) -> None:
            calls.append("shutdown")

    async def start_dht(**_: object) -> Dht:
        return Dht()

    async def frozen(*_: object, **__: object) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(dht_module, "start_dht", start_dht)
    monkeypatch.setattr(status_module, "collect_status", frozen)
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    config = status_cmd.StatusConfig(initial_peers=peers, run_id="r1", timeout_s=0.05, watch=None)
    assert asyncio.run(status_cmd._main(config)) == 1
    assert calls == ["shutdown"]
    assert capsys.readouterr().err == (f"p2p-guard status: error: the DHT (initial peer(s) {peers[0]}) did not "
                                       "answer a read of run 'r1''s records within 0.05 s (--timeout-s)\n")


def test_the_time_before_the_join_counts(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The limit runs from the command's start (importing hivemind takes seconds on a loaded machine): a command
    that began ``timeout_s`` ago has no time left to join, even with a node that would answer at once."""
    import time

    import p2p_guard.swarm.dht as dht_module
    import p2p_guard.swarm.status as status_module
    from p2p_guard.cli import status_cmd

    class Dht:
        async def shutdown(self) -> None:
            pass

    async def start_dht(**_: object) -> Dht:
        return Dht()

    async def collect(*_: object, **__: object) -> str:
        return "status"

    monkeypatch.setattr(dht_module, "start_dht", start_dht)
    monkeypatch.setattr(status_module, "collect_status", collect)
    monkeypatch.setattr(status_cmd, "_print", lambda *_: None)
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    config = status_cmd.StatusConfig(initial_peers=peers, timeout_s=30.0)
    assert asyncio.run(status_cmd._main(config, started=time.monotonic() - 30.0)) == 1
    assert "within 30 s (--timeout-s)" in capsys.readouterr().err


@pytest.mark.parametrize(("watch", "interrupt_in", "code"), [
    (0.01, "print", 0),  # --watch ends with Ctrl+C, its normal end (as a peer's clean stop): 0
    (None, "collect", 130),  # stopped before the status was printed: interrupted (as simulate)
    (0.01, "collect", 130),
    (None, "join", 130),
    (None, "join-sigterm", 143),
])
def test_a_stop_signal_is_an_interruption_only_before_anything_was_printed(
        monkeypatch: pytest.MonkeyPatch, watch: float | None, interrupt_in: str, code: int) -> None:
    import os
    import signal

    import p2p_guard.swarm.dht as dht_module
    import p2p_guard.swarm.status as status_module
    from p2p_guard.cli import status_cmd

    sig = signal.SIGTERM if interrupt_in.endswith("sigterm") else signal.SIGINT
    printed: list[object] = []

    class Dht:
        async def shutdown(self) -> None:
            pass

    async def start_dht(**_: object) -> Dht:
        if interrupt_in.startswith("join"):
            os.kill(os.getpid(), sig)
            await asyncio.sleep(60)
        return Dht()

    async def collect(*_: object, **__: object) -> str:
        if interrupt_in == "collect":
            os.kill(os.getpid(), sig)
            await asyncio.sleep(60)
        return "status"

    def fake_print(status: object, config: object) -> None:
        printed.append(status)
        if interrupt_in == "print":
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(dht_module, "start_dht", start_dht)
    monkeypatch.setattr(status_module, "collect_status", collect)
    monkeypatch.setattr(status_cmd, "_print", fake_print)
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    assert asyncio.run(status_cmd._main(status_cmd.StatusConfig(initial_peers=peers, watch=watch))) == code
    assert printed == (["status"] if interrupt_in == "print" else [])


@pytest.mark.parametrize("watch", [None, 0.01])
def test_a_reader_that_goes_away_ends_the_watch_quietly(monkeypatch: pytest.MonkeyPatch,
                                                         watch: float | None) -> None:
    """``status --watch 1 | head -3`` ended with a BrokenPipeError traceback (exit 1) once head had its lines."""
    import p2p_guard.swarm.dht as dht_module
    import p2p_guard.swarm.status as status_module
    from p2p_guard.cli import status_cmd

    calls: list[str] = []

    class Dht:
        async def shutdown(self) -> None:
            calls.append("shutdown")

    async def start_dht(**_: object) -> Dht:
        return Dht()

    async def collect(*_: object, **__: object) -> str:
        return "status"

    def closed_pipe(status: object, config: object) -> None:
        calls.append("print")
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(dht_module, "start_dht", start_dht)
    monkeypatch.setattr(status_module, "collect_status", collect)
    monkeypatch.setattr(status_cmd, "_print", closed_pipe)
    monkeypatch.setattr(status_cmd, "silence_stdout", lambda: calls.append("silenced"))
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    assert asyncio.run(status_cmd._main(status_cmd.StatusConfig(initial_peers=peers, watch=watch))) == 0
    assert calls == ["print", "silenced", "shutdown"]


def test_silence_stdout_points_a_broken_pipe_at_devnull(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the reader of stdout's pipe has gone, writing and flushing stdout raise nothing any more."""
    import io
    import os

    from p2p_guard.cli.errors import silence_stdout

    read_end, write_end = os.pipe()
    os.close(read_end)
    out = io.TextIOWrapper(io.FileIO(write_end, "w"), write_through=True)
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(BrokenPipeError):
        print("table", file=out, flush=True)
    silence_stdout()
    print("table", file=out, flush=True)
    out.close()


@pytest.mark.timeout(120)
def test_status_ends_when_a_task_left_behind_ignores_its_cancellation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C on `p2p-guard status --initial-peers ... --run-id r2 --watch 2` 1.5 s after its start (joining the DHT,
    loaded machine) hung for good: asyncio.run waited in its final cancellation for a task that never ended
    (helper-57). The command now gives leftover tasks a bounded time once cancelled."""
    from p2p_guard.cli import main as cli_main
    from p2p_guard.cli import status_cmd
    from p2p_guard.swarm import reaper

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # a task that does not end when cancelled (what the hung status waited for)

    async def interrupted_main(config: object, **_: object) -> int:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        return 130

    monkeypatch.setattr(status_cmd, "_main", interrupted_main)
    monkeypatch.setattr(status_cmd, "CLEANUP_S", 0.2, raising=False)  # without the bound: asyncio.run hangs
    monkeypatch.setattr(reaper, "start_reaper", lambda: None)
    maddr = "/ip4/127.0.0.1/tcp/1/p2p/" + Identity.from_seed(b"\x07" * 32).peer_id_b58
    assert cli_main.main(["status", "--initial-peers", maddr, "--run-id", "r2"]) == 130


def test_the_watch_tries_again_after_a_read_timeout(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``status --watch`` ended with exit 1 on the first read that timed out: now one warning line, the next
    refresh reads again and prints, and Ctrl+C ends it cleanly (0, the client leaves the DHT)."""
    import os
    import signal

    import p2p_guard.swarm.dht as dht_module
    import p2p_guard.swarm.status as status_module
    from p2p_guard.cli import status_cmd

    calls: list[str] = []

    class Dht:
        async def shutdown(self) -> None:
            calls.append("shutdown")

    async def start_dht(**_: object) -> Dht:
        return Dht()

    async def collect(*_: object, **__: object) -> str:
        calls.append("read")
        if calls.count("read") <= 2:  # the first two reads never end: cut at --timeout-s
            await asyncio.Event().wait()
        return "status"

    def fake_print(status: object, config: object) -> None:
        calls.append(f"print {status}")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C once the status is shown

    monkeypatch.setattr(dht_module, "start_dht", start_dht)
    monkeypatch.setattr(status_module, "collect_status", collect)
    monkeypatch.setattr(status_cmd, "_print", fake_print)
    monkeypatch.setattr(status_cmd.time, "strftime", lambda _fmt: "12:00:00")
    peers = ("/ip4/127.0.0.1/tcp/31337/p2p/" + ALICE.peer_id_b58,)
    config = status_cmd.StatusConfig(initial_peers=peers, run_id="r1", timeout_s=0.05, watch=0.01)
    assert asyncio.run(status_cmd._main(config)) == 0
    assert calls == ["read", "read", "read", "print status", "shutdown"]
    line = (f"p2p-guard status: warning: 12:00:00 the DHT (initial peer(s) {peers[0]}) did not answer a read of "
            "run 'r1''s records within 0.05 s (--timeout-s); trying again in 0.01 s\n")
    assert capsys.readouterr().err == line * 2


@pytest.mark.parametrize("run_id", ["", "../x y", "bad id", "x" * 65])
def test_status_refuses_a_run_id_no_peer_can_have(run_id: str) -> None:
    """``status`` checks ``--run-id`` as ``peer`` does (it printed "0 peer(s) present" for "../x y")."""
    from p2p_guard.cli.status_cmd import StatusConfig

    with pytest.raises(ValueError, match=r"run_id must be 1-64 characters of \[A-Za-z0-9._-\]"):
        StatusConfig(initial_peers=("/ip4/127.0.0.1/tcp/1/p2p/x",), run_id=run_id)
