"""A peer killed and restarted from its checkpoint keeps what its reputation learned about an attacker.

Three honest peers and a ``sign_flip:scale=10`` attacker (rejected as an outlier every round, excluded after its 4th
round); peer 0 is SIGKILLed at round 6 and started again with the same identity and checkpoint folder (40 rounds:
its restart took 10 s, and 45 s on a loaded machine, in which the others ran 14 rounds of about 2 s and left).
Before the guard state was in the checkpoint, the restarted peer judged the attacker again from scratch (measured in
docs/protocol.md §7.10: ``rejected 1 (outlier)`` in rounds 7-9); now whatever it excluded before the kill it still
excludes in the first round after it, and its catch-up takes no state from a peer it excludes (before 0216bf2 it
caught up on the median of the 3 others' states, the excluded attacker's among them).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from p2p_guard.simulation.faults import parse_plan
from p2p_guard.simulation.orchestrator import peer_paths

PLAN = {"fault": [{"round": 6, "peer": 0, "kind": "kill_restart"}]}

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live, pytest.mark.timeout(600)]


def test_a_restarted_peer_still_excludes_what_it_excluded(swarm: Any) -> None:
    """The verdicts of peer 0's last round before the kill and of its first round after it."""
    s = swarm(4, attackers=1, rounds=40, attack="sign_flip:scale=10", faults=parse_plan(PLAN, honest=3))
    s.wait_rounds(40, timeout_s=540, indices=[1, 2])  # peer 0 reports one round fewer: the one it was killed in
    (kill,) = s.injector.finish(s.positions())
    assert kill["fired"] is True
    log = peer_paths(s.workdir, 0)["log"].read_text()
    assert log.count("restored from the checkpoint: guard and reputation") == 1, log[-3000:]
    events = [json.loads(line) for line in peer_paths(s.workdir, 0)["events"].read_text().splitlines()]
    starts = [k for k, e in enumerate(events) if e["event"] == "ready"]
    assert len(starts) == 2
    before = [e for e in events[: starts[1]] if e["event"] == "verdict"]
    after = [e for e in events[starts[1]:] if e["event"] == "verdict"]
    last, first = max(e["round"] for e in before), min(e["round"] for e in after)
    excluded_before = {e["sender"] for e in before if e["round"] == last and e["reason"] == "excluded"}
    excluded_after = {e["sender"] for e in after if e["round"] == first and e["reason"] == "excluded"}
    assert excluded_before, f"peer 0 excluded nobody by round {last}: {before[-6:]}"
    assert excluded_before <= excluded_after, (last, first, excluded_before, after[:6])
    catch_ups = [e for e in events[starts[1]:] if e["event"] == "catch_up"]
    assert catch_ups, "the restarted peer never caught up"
    assert [e["sources"] for e in catch_ups] == [2] * len(catch_ups)  # the two honest others, not the attacker
