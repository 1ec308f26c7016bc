"""A live swarm seen from outside: each peer's Prometheus endpoint (``--metrics-port``) and ``p2p-guard status``.

A bootstrap node and two peers (README commands, the ``live`` harness of ``test_swarm.py``), short rounds, run until
stopped. The test scrapes one peer's endpoint twice and checks that its round gauge advanced, then runs
``p2p-guard status --json`` (a read-only DHT client) and checks that it lists every peer as present, with the
commit, close and votes records they publish; then the table with ``--watch``, stopped by Ctrl+C (exit 0, no
traceback). Each status call pays the CLI's start-up (hivemind, p2pd: seconds, tens of seconds on a loaded host).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from test_swarm import REPO, Swarm, _entry, _wait, live  # noqa: F401 - the live-swarm fixture and its helpers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN = "status-test"
PEERS = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    """``{sample name with labels: value}`` of one scrape of ``http://127.0.0.1:PORT/metrics``."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(p2p_guard_\S+) (\S+)", line)
        if match:
            samples[match[1]] = float(match[2])
    return samples


def _assert_matches_events(swarm: Swarm, scrape: dict[str, float]) -> None:
    """The counters of peer0 are the sums of its first N ``round`` events (the event is written just before)."""
    n = int(scrape["p2p_guard_rounds_completed_total"])
    rounds = swarm.events(0, "round")[:n]
    assert len(rounds) == n
    assert scrape["p2p_guard_updates_accepted_total"] == sum(e["accepted"] for e in rounds)
    assert scrape["p2p_guard_bytes_received_total"] == sum(e["bytes_received"] for e in rounds)
    wire = sum(e["wire_bytes_received"] for e in rounds)
    assert scrape["p2p_guard_wire_bytes_received_total"] == wire
    # each payload read whole also brought its 32-byte digest list: the wire bytes exceed the bytes used
    assert wire >= sum(e["bytes_received"] + 32 * e["fetched"] for e in rounds)
    assert scrape["p2p_guard_payloads_served_total"] == sum(e["served"] for e in rounds)
    assert scrape["p2p_guard_rounds_applied_total"] == sum(1 for e in rounds if e["applied"])


def _status(swarm: Swarm, maddr: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_entry(), "status", "--initial-peers", maddr, "--run-id", RUN, *flags],
                          capture_output=True, text=True, env=swarm.env, cwd=REPO, timeout=120, check=False)


@pytest.mark.timeout(600)
def test_metrics_endpoint_and_status_of_a_live_swarm(live: Swarm) -> None:  # noqa: F811
    maddr = live.start_bootstrap()
    ports = [_free_port() for _ in range(PEERS)]
    for i in range(PEERS):
        live.start_peer(i, maddr, ["--num-peers", str(PEERS), "--min-peers", str(PEERS), "--rounds", "0",
                                   "--inner-steps", "2", "--run-id", RUN, "--metrics-port", str(ports[i])])
    _wait(lambda: all(live.events(i, "round") for i in range(PEERS)), 240, "round 0 on every peer", live)

    first = _scrape(ports[0])
    assert first["p2p_guard_rounds_completed_total"] >= 1
    assert first["p2p_guard_paused"] == 0
    _assert_matches_events(live, first)
    _wait(lambda: len(live.events(0, "round")) >= first["p2p_guard_rounds_completed_total"] + 2, 120,
          "two more rounds on peer0", live)
    second = _scrape(ports[0])
    assert second["p2p_guard_round"] > first["p2p_guard_round"], (first, second)
    assert second["p2p_guard_rounds_completed_total"] >= first["p2p_guard_rounds_completed_total"] + 2
    _assert_matches_events(live, second)
    assert second["p2p_guard_updates_accepted_total"] >= 1 and second["p2p_guard_bytes_received_total"] > 0
    assert _scrape(ports[1])["p2p_guard_rounds_completed_total"] >= 1  # every peer has its own endpoint

    ids = {live.events(i, "ready")[0]["peer_id"] for i in range(PEERS)}
    # A presence record is refreshed every PRESENCE_REFRESH_S, so it may lag its peer's round: ask again (each
    # call is a fresh DHT client) until the swarm round read from the records has advanced too.
    for _ in range(3):
        done = _status(live, maddr, "--json")
        assert done.returncode == 0, done.stderr
        view = json.loads(done.stdout)
        if (view["swarm_round"] or 0) >= 2:
            break
    present = {p["peer_id"] for p in view["peers"] if p["presence_round"] is not None}
    assert present == ids, (ids, done.stdout)
    assert view["present"] == PEERS and view["proofs"] == [] and view["swarm_round"] >= 2
    peers = {p["peer_id"]: p for p in view["peers"]}
    for peer_id in ids:
        assert peers[peer_id]["commit"]["codec"] == "fp32"
        assert peers[peer_id]["close"] is not None and peers[peer_id]["votes"]["accepted"] >= 1
        assert not peers[peer_id]["banned"]
    # the status client is read-only: no record names anyone but the two peers
    assert len(view["peers"]) == PEERS
    # each peer claims its --peer-index: both shards trained
    by_index = [live.events(i, "ready")[0]["peer_id"] for i in range(PEERS)]
    assert [peers[p]["shard"]["shard"] for p in by_index] == list(range(PEERS)), done.stdout
    assert view["shards"] == {"num_shards": PEERS, "claimed": {str(i): [p] for i, p in enumerate(by_index)},
                              "uncovered": [], "uncovered_count": 0, "other_num_shards": 0}

    watch = subprocess.Popen([*_entry(), "status", "--initial-peers", maddr, "--run-id", RUN, "--watch", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=live.env, cwd=REPO)
    try:
        assert watch.stdout is not None
        shown = []  # the first table (each refresh starts with a time line)
        deadline = time.monotonic() + 120
        while watch.poll() is None and time.monotonic() < deadline:
            shown.append(watch.stdout.readline())
            if shown[-1].startswith("invalid records skipped"):
                break
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err
    assert "Traceback" not in err, err
    table = "".join(shown)
    print(table)  # noqa: T201 - shown with -s, for the record
    assert f"{PEERS} peer(s) present" in table
    assert f"data shards: {PEERS} of {PEERS} claimed by {PEERS} of the {PEERS} present peer(s); trained by none: -" in table
    for peer_id in ids:
        assert peer_id[-8:] in table
