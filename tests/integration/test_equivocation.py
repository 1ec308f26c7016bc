"""Equivocation in a live swarm: every honest peer bans both equivocating attackers early, with a proof file
that ``p2p-guard verify-proof`` accepts, and training is not hurt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p_guard.cli.main import main as cli_main
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.orchestrator import run_simulation

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live]


def _events(path: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == kind]


@pytest.mark.timeout(400)
def test_equivocators_are_banned_with_verifiable_proofs(tmp_path: Path) -> None:
    config = SimulationConfig(task="digits", honest=4, byzantine=2, attack="equivocate", rounds=4, seed=0)
    report = run_simulation(config, tmp_path)
    ready = {i: _events(tmp_path / f"peer{i}.events.jsonl", "ready")[0] for i in range(6)}
    attackers = {ready[i]["peer_id"] for i in (4, 5)}
    for i in range(4):
        bans = {e["sender"]: e for e in _events(tmp_path / f"peer{i}.events.jsonl", "ban")}
        assert set(bans) == attackers, f"honest peer{i} banned {set(bans)}"
        for ban in bans.values():
            assert ban["round"] <= 2, f"peer{i} banned {ban['sender']} only in round {ban['round']}"
            assert cli_main(["verify-proof", ban["proof"]]) == 0
    assert report["guard"]["false_positive"] == 0
    # Version 2: a bounded distance, not bit-identical models (a peer that bans an equivocator one round before the
    # others applies another row set in that round; CI measured 2.3e-4 with one such peer).
    assert report["consensus_distance"] <= 1e-2
    assert report["final"]["accuracy"] >= 0.85
