"""The Python API (``p2p_guard.api``): its lazy import, and the example script of docs/python-api.md end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_import_p2p_guard_loads_no_torch_and_exports_the_api() -> None:
    code = ("import sys, p2p_guard; assert 'torch' not in sys.modules and 'hivemind' not in sys.modules; "
            "names = [getattr(p2p_guard, n) for n in p2p_guard.__all__]; "
            "assert p2p_guard.run_peer.__doc__ and p2p_guard.run_local_swarm.__doc__; print(len(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "7"


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(600)
def test_the_example_script_runs_a_tiny_swarm(tmp_path: Path) -> None:
    workdir = tmp_path / "tiny"
    out = subprocess.run([sys.executable, str(REPO / "examples/tiny_swarm.py"), str(workdir)],
                         capture_output=True, text=True, timeout=580, cwd=REPO, env=dict(os.environ))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "swarm round 0" in out.stdout and "swarm round 1" in out.stdout
    assert f"report: {workdir / 'report.json'}" in out.stdout
    assert "bench cell: accuracy" in out.stdout
    assert (workdir / "report.json").exists()
