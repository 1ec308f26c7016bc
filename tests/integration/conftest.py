"""The ``swarm`` fixture: a bootstrap node and peers, each a real ``p2p-guard`` process on 127.0.0.1.

Every test in this directory also gets ``process_reaper`` (``tests/conftest.py``) around it.

It starts them exactly as ``p2p-guard simulate`` does (:class:`p2p_guard.simulation.orchestrator.LocalSwarm`):
same command lines, each process in its own session, real addresses read back from the bootstrap node's
address file, readiness awaited with a timeout. Its ``finally`` stops every process group it started (SIGTERM,
then SIGKILL) and fails the test if any process of the run is left.

Usage::

    def test_rounds(swarm):
        s = swarm(3, attackers=1, rounds=3)          # 2 honest peers + 1 attacker, all ready
        s.wait_rounds(3, timeout_s=120)

    def test_faults(swarm):                           # a fault plan fires while the test waits
        s = swarm(3, rounds=3, faults=parse_plan({"fault": [{"round": 1, "kind": "kill_bootstrap"}]}, honest=3))
        s.wait_rounds(3, timeout_s=120)
        assert s.injector.records[0].fired
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.faults import FaultPlan
from p2p_guard.simulation.orchestrator import LocalSwarm

READY_TIMEOUT_S = 180.0

SwarmFactory = Callable[..., LocalSwarm]


@pytest.fixture(autouse=True)
def _integration_process_reaper(process_reaper: None) -> None:
    """Every test in this directory starts processes: each gets the per-test reaper of ``tests/conftest.py``."""


@pytest.fixture
def swarm(tmp_path: Path) -> Iterator[SwarmFactory]:
    """Factory ``swarm(n, *, attackers=0, ready=True, faults=None, **settings) -> LocalSwarm`` of started swarms.

    ``n`` is the total number of peers; the last ``attackers`` of them are Byzantine. ``settings`` are
    :class:`SimulationConfig` fields (``rounds``, ``attack``, ``guard``, ``inner_steps``, ``task``, ...). With
    ``ready=False`` it returns as soon as the processes are started. ``faults``: a fault plan armed once the peers
    are started (every ``wait_*`` call fires it, see ``LocalSwarm.arm_faults``). Every swarm is stopped at teardown.
    """
    started: list[LocalSwarm] = []

    def start(
        n: int, *, attackers: int = 0, ready: bool = True, faults: FaultPlan | None = None, **settings: Any
    ) -> LocalSwarm:
        settings.setdefault("rounds", 3)
        settings.setdefault("task", "digits")
        if attackers == 0:
            settings.setdefault("attack", None)
        config = SimulationConfig(honest=n - attackers, byzantine=attackers, **settings)
        local = LocalSwarm(config, tmp_path / f"swarm{len(started)}")
        started.append(local)
        local.__enter__()
        local.start()
        if faults is not None:
            local.arm_faults(faults)
        if ready:
            local.wait_ready(READY_TIMEOUT_S)
        return local

    try:
        yield start
    finally:
        for local in started:
            local.stop()
        leftovers = {str(local.workdir): local.marked_processes() for local in started}
        leftovers = {k: [p.pid for p in v] for k, v in leftovers.items() if v}
        assert not leftovers, f"processes left after the swarm stopped: {leftovers}"
