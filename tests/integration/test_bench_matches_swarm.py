"""A headline-style benchmark cell run in-process agrees with the same cell run as a real swarm.

The swarm runs through ``run_simulation`` (one OS process per peer, real hivemind DHT and P2P streams, as
``p2p-guard simulate`` does); the in-process cell (:func:`p2p_guard.bench.cell.run_cell`) is given the swarm's
PeerIDs as sender names, so both see the rows in the same order, and runs with the peers' torch thread count
(float results depend on it). Required: the final test accuracies agree within seed noise (|Δ| ≤ 0.02). The
test also reports whether the honest peers' final state hash equals the in-process one bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.events import read_events
from p2p_guard.simulation.orchestrator import peer_paths, run_simulation

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.long]

HONEST, BYZANTINE, ROUNDS, SEED = 6, 2, 5, 0
ATTACK = "sign_flip:scale=10"
TOLERANCE = 0.02


def _peer_threads() -> int:
    """The default torch thread count in a fresh process with our environment (what each peer runs with)."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=dict(os.environ),
    )
    return int(out.stdout.strip())


@pytest.mark.timeout(600)
def test_in_process_cell_matches_the_swarm(tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    config = SimulationConfig(
        task="digits",
        honest=HONEST,
        byzantine=BYZANTINE,
        attack=ATTACK,
        rounds=ROUNDS,
        seed=SEED,
        guard="semantic",
        partition="iid",
        timeout_s=480.0,
        reputation=False,  # the in-process cell runs the guard alone; exclusion would drop rows before it
    )
    report = run_simulation(config, tmp_path / "swarm")

    n = config.num_peers
    events = [read_events(peer_paths(tmp_path / "swarm", i)["events"]) for i in range(n)]
    peer_ids = [next(e["peer_id"] for e in ev if e["event"] == "ready") for ev in events]
    finals = {next(e["state_hash"] for e in ev if e["event"] == "final") for ev in events[:HONEST]}
    assert len(finals) == 1, f"honest peers disagree on their final state: {finals}"

    spec = CellSpec(
        task="digits",
        guard="semantic",
        attack=ATTACK,
        n=n,
        f=BYZANTINE,
        partition="iid",
        seed=SEED,
        rounds=ROUNDS,
        assumed_byzantine=None,
        run_id=config.resolved_run_id,
        reputation=False,  # as the swarm above
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(_peer_threads())
    try:
        cell = run_cell(spec, sender_ids=peer_ids)
    finally:
        torch.set_num_threads(threads)

    swarm_acc = report["final"]["accuracy"]
    cell_acc = cell["final"]["accuracy"]
    bit_identical = cell["state_hash"] in finals
    record_property("swarm_accuracy", swarm_acc)
    record_property("in_process_accuracy", cell_acc)
    record_property("bit_identical", bit_identical)
    print(f"swarm {swarm_acc:.4f}, in-process {cell_acc:.4f}, honest θ bit-identical: {bit_identical}")  # noqa: T201
    assert abs(swarm_acc - cell_acc) <= TOLERANCE, (swarm_acc, cell_acc)
    swarm_curve = [r["accuracy"] for r in report["rounds"]]
    cell_curve = [r["accuracy"] for r in cell["rounds"]]
    assert len(swarm_curve) == len(cell_curve) == ROUNDS
    if bit_identical:
        assert swarm_curve == pytest.approx(cell_curve, abs=1e-9)
