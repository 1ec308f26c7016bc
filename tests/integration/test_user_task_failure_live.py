"""A user's task whose ``loss`` raises, in a real two-peer ``simulate`` run: one line, exit 1, no process left.

Before helper-48 the peer's log ended in a 40-line traceback through asyncio and the inner phase's thread, which
``simulate`` quoted as the reason of the run's failure. The unit side is ``tests/unit/test_user_task_failure.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from p2p_guard.simulation.processes import find_marked_processes

REPO_ROOT = Path(__file__).resolve().parents[2]
MARK = "P2P_GUARD_TEST_TASK_FAILURE"
FAILING_TASK = '''
from p2p_guard.tasks.digits import DigitsTask


class Failing(DigitsTask):
    name = "failing"

    def loss(self, model, x, y):
        return 1 / 0
'''
LINE = ("ERROR p2p_guard.swarm.peer: peer stopped: task 'failing_task:Failing': Failing.loss raised "
        "ZeroDivisionError: division by zero (p2p-guard --log-level DEBUG peer ..., or simulate --peer-log-level "
        "DEBUG, logs its traceback)")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(600)
def test_a_failing_user_loss_stops_the_run_with_one_line_and_no_process_left(tmp_path: Path) -> None:
    (tmp_path / "failing_task.py").write_text(FAILING_TASK, encoding="utf-8")
    marker = uuid.uuid4().hex
    env = {**os.environ, MARK: marker,
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    workdir = tmp_path / "run"
    done = subprocess.run(  # noqa: S603 - our own program
        [sys.executable, "-m", "p2p_guard.cli.main", "simulate", "--task", "failing_task:Failing", "--honest", "2",
         "--byzantine", "0", "--rounds", "1", "--workdir", str(workdir), "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=560, check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("p2p-guard simulate: error: peer"), done.stderr
    assert error.endswith(LINE), error
    logs = {path.name: path.read_text(errors="replace") for path in workdir.glob("*.log")}
    failed = [name for name, text in logs.items() if LINE in text]
    assert failed, logs
    assert all("Traceback" not in text for text in logs.values()), logs
    deadline = time.monotonic() + 10.0
    while find_marked_processes(marker, key=MARK) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert find_marked_processes(marker, key=MARK) == []
