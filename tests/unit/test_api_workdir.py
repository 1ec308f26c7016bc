"""``p2p_guard.run_local_swarm`` refuses a workdir that holds an earlier run, as ``simulate --workdir`` does.

Running ``python examples/tiny_swarm.py`` twice (its workdir was always ``runs/tiny-swarm``) resumed every peer
from the first run's checkpoints at round 2 of 2: they trained nothing ('nothing left to train'), and the script
printed the first run's per-round accuracies as if this run had measured them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

import p2p_guard
from p2p_guard.simulation import orchestrator
from p2p_guard.simulation.faults import parse_plan


def test_run_local_swarm_refuses_a_non_empty_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder with files in it raises FileExistsError (an OSError) before any process starts."""
    started: list[Path] = []

    def fake_run(_config: Any, folder: Path, **_kwargs: Any) -> dict[str, Any]:
        started.append(folder)
        return {}

    monkeypatch.setattr(orchestrator, "run_simulation", fake_run)
    config = p2p_guard.SimulationConfig(honest=2, byzantine=0, attack=None, rounds=1)
    old = tmp_path / "old"
    old.mkdir()
    (old / "peer0.key").write_bytes(b"k")
    with pytest.raises(FileExistsError, match=r"^workdir .*old is not empty \(an earlier run's keys"):
        p2p_guard.run_local_swarm(config, old)
    assert started == []
    p2p_guard.run_local_swarm(config, tmp_path / "new")  # new, and an empty existing one: fine
    (tmp_path / "empty").mkdir()
    p2p_guard.run_local_swarm(config, str(tmp_path / "empty"))
    assert started == [(tmp_path / "new").resolve(), (tmp_path / "empty").resolve()]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ('round = 9\npeer = 0\nkind = "kill_restart"\n',
         "p.toml: fault 1 (kill_restart): round 9 is past the run's last round (--rounds 1); it would never fire"),
        ('round = 1\npeer = 0\nkind = "stop"\nseconds = 5000\n',
         "p.toml: fault 1 (stop): seconds 5000 is longer than the whole run may last (--timeout-s 1200); it would "
         "never end as planned"),
        ('round = 1\npeer = 3\nkind = "kill_restart"\n',
         "p.toml: fault 1 (kill_restart): peer 3 is not an honest peer index in [0, 2)"),
    ],
)
def test_run_local_swarm_checks_its_fault_plan_against_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, message: str
) -> None:
    """The Python API runs the checks ``simulate --faults`` runs, before any process starts (it ran none)."""
    started: list[Path] = []
    monkeypatch.setattr(orchestrator, "run_simulation", lambda _c, folder, **_k: started.append(folder) or {})
    plan = parse_plan(tomllib.loads("[[fault]]\n" + fault), honest=4, source="p.toml")  # loaded for 4 peers
    config = p2p_guard.SimulationConfig(honest=2, byzantine=0, attack=None, rounds=1)
    with pytest.raises(ValueError) as caught:
        p2p_guard.run_local_swarm(config, tmp_path / "run", faults=plan)
    assert str(caught.value) == message
    assert started == [] and not (tmp_path / "run").exists()
