"""The copycat in a live swarm: commit, then reveal, holds across peers.

A bootstrap node, three honest peers and one ``copycat`` peer, each a real ``p2p-guard`` process on 127.0.0.1.
The copycat is present but withholds its commit until some honest peer serves its payload, then commits a copy
of it (or, with ``adapt=true``, −10 × the mean of what it fetched). Honest peers reveal only once every other
sender of their closed commit set has closed too, so the copycat's commit always comes after every honest close:
each honest peer reports it as ``late_commit``, never fetches nor applies it, and their models end within the
consensus bound (version 2: each peer owns its model).
"""

from __future__ import annotations

import pytest
from test_swarm import FORK_BOUND, Swarm, assert_consensus, live  # noqa: F401 - the live-swarm fixture and its helpers

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live]

HONEST, ROUNDS = 3, 3
REJECTED_AS = {"late_commit"}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("attack", ["copycat", "copycat:adapt=true"])
def test_copycat_cannot_copy_or_adapt_to_honest_payloads(live: Swarm, attack: str) -> None:  # noqa: F811
    n = HONEST + 1
    maddr = live.start_bootstrap()
    common = ["--num-peers", str(n), "--min-peers", str(n), "--rounds", str(ROUNDS), "--run-id", "copycat-test"]
    for i in range(n):
        live.start_peer(i, maddr, [*common, "--attack", attack, "--byzantine-count", "1"] if i == HONEST else common)
    honest = [f"peer{i}" for i in range(HONEST)]
    assert live.wait_exit(honest, 360) == dict.fromkeys(honest, 0), "honest peers must keep running and finish"
    copycat = live.events(HONEST, "ready")[0]["peer_id"]
    honest_ids = {live.events(i, "ready")[0]["peer_id"] for i in range(HONEST)}

    fired = "-10 × the mean of" if "adapt" in attack else "a copy of the payload"
    copied = [line for line in live.log(HONEST).splitlines() if f"copycat: committing {fired}" in line]
    assert len(copied) == ROUNDS, f"the copycat fired in {len(copied)} of {ROUNDS} rounds"
    for i in range(HONEST):
        on_copycat = [v for v in live.events(i, "verdict") if v["sender"] == copycat]
        assert not [v for v in on_copycat if v["accepted"]], f"peer{i} applied the copycat's update: {on_copycat}"
        reasons = {v["round"]: v["reason"] for v in on_copycat}
        for round_ in range(ROUNDS):
            assert reasons.get(round_) in REJECTED_AS, f"peer{i} round {round_}: {on_copycat}"
        assert f"rejected {copycat[-8:]}: late_commit" in live.log(i)
        rounds = live.events(i, "round")
        assert [e["round"] for e in rounds] == list(range(ROUNDS))
        assert all(e["accepted"] == HONEST - 1 for e in rounds), "only the other honest updates may be applied"
        accepted = {v["sender"] for v in live.events(i, "verdict") if v["accepted"]}
        assert accepted <= honest_ids
    assert_consensus(live, range(HONEST), bound=FORK_BOUND)
