"""A fault plan on a live 3-peer swarm: a SIGSTOPped peer and a killed bootstrap node, and the rounds go on.

The fault actions themselves are unit-tested on stand-in processes (tests/unit/test_faults.py); this shows that
the plan fires from the harness's waits on real peers and that the swarm completes its rounds through it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psutil
import pytest

from p2p_guard.simulation.faults import parse_plan

PLAN = {
    "fault": [
        {"round": 1, "peer": 1, "kind": "stop", "seconds": 3},
        {"round": 1, "kind": "kill_bootstrap"},
        {"round": 99, "peer": 0, "kind": "kill_restart"},
    ]
}

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live, pytest.mark.timeout(420)]


def test_a_plan_fires_on_a_live_swarm_and_its_rounds_complete(swarm: Any) -> None:
    s = swarm(3, rounds=3, faults=parse_plan(PLAN, honest=3))
    s.wait_rounds(3, timeout_s=300)
    stop, bootstrap, never = s.injector.finish(s.positions())
    assert stop["fired"] is True and stop["fired_round"] >= 1 and stop["ended_time"] >= stop["fired_time"] + 3
    assert bootstrap["fired"] is True and s.bootstrap is not None and s.bootstrap.returncode() == -9
    assert never["fired"] is False  # its round never came
    with contextlib.suppress(psutil.NoSuchProcess):  # it may have finished its rounds and exited: not stopped either
        assert psutil.Process(s.peers[1].pid).status() != psutil.STATUS_STOPPED
