"""Volunteers without ``--peer-index`` spread over the data shards, and ``p2p-guard status`` shows the coverage.

User test: 4 identities on ``peers/volunteer.toml`` (``num_peers = 3``) left shard 0 untrained (two peers had
collided on another) and nothing said so. Here four volunteers join one after the other (each once the one before
is up and has stored its shard claim): the first three take the three shards, whatever their PeerIDs hash to; the
fourth finds every shard claimed, keeps its PeerID's shard and warns that a present peer trains it too; ``status
--json`` lists every shard as claimed.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from test_swarm import REPO, Swarm, _entry, _wait, live  # noqa: F401 - the live-swarm fixture and its helpers

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live]

RUN = "shard-coverage-test"
SHARD_LINE = re.compile(r"data shard (\d) of 3 \((.*)\)")


def _shard(swarm: Swarm, index: int) -> tuple[int, str]:
    match = SHARD_LINE.search(swarm.log(index))
    assert match is not None, swarm.log(index)
    return int(match[1]), match[2]


@pytest.mark.timeout(600)
def test_four_volunteers_on_three_shards_cover_them_all_and_the_fourth_says_it_shares(live: Swarm) -> None:  # noqa: F811
    maddr = live.start_bootstrap()
    common = ["--run-id", RUN, "--rounds", "0", "--min-peers", "2", "--inner-steps", "2"]
    for i in range(4):
        live.start_peer(i, maddr, common, set_index=False)
        _wait(lambda i=i: live.events(i, "ready"), 180, f"peer{i} ready", live)  # type: ignore[misc]
        time.sleep(3)  # its announcer stores presence and shard claim right after "ready"
    shards = [_shard(live, i) for i in range(4)]
    assert sorted(s for s, _ in shards[:3]) == [0, 1, 2], shards
    assert all(how.startswith("chosen at start among the shards no present peer trains") for _, how in shards[:3])
    assert shards[3][1].startswith("derived from our PeerID: every shard is claimed by a present peer"), shards
    shared_with = [i for i in range(3) if shards[i][0] == shards[3][0]]
    ids = [live.events(i, "ready")[0]["peer_id"] for i in range(4)]
    assert f"also claimed by 1 other present peer(s) ({ids[shared_with[0]][-8:]})" in live.log(3)

    done = subprocess.run([*_entry(), "status", "--initial-peers", maddr, "--run-id", RUN, "--json"],
                          capture_output=True, text=True, env=live.env, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["shards"]["num_shards"] == 3 and view["shards"]["uncovered"] == [], done.stdout
    claimed = {int(s): set(peers) for s, peers in view["shards"]["claimed"].items()}
    assert claimed == {s: {ids[i] for i in range(4) if shards[i][0] == s} for s in range(3)}
