"""``simulate --task examples.my_task:MyTask``: a user's own task trains in a real two-peer swarm (docs/tasks.md).

Run from the repository root, as documented: ``python -m`` puts it on ``sys.path``, and the peers ``simulate``
starts inherit the directory, so they import ``examples.my_task`` too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(600)
def test_simulate_trains_the_example_task(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    done = subprocess.run(  # noqa: S603 - our own program
        [sys.executable, "-m", "p2p_guard.cli.main", "simulate", "--task", "examples.my_task:MyTask",
         "--honest", "2", "--byzantine", "0", "--rounds", "2", "--workdir", str(tmp_path / "run"),
         "--report", str(report_path), "--no-progress"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=560, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    assert report["config"]["task"] == "examples.my_task:MyTask"
    assert len(report["rounds"]) == 2
    assert report["final"]["accuracy"] > 0.8, report["final"]  # an untrained MLP is near 0.4-0.6 on this table
