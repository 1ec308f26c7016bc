"""The unit tests collect under the ``pytest`` script as under ``python -m pytest``.

``.venv/bin/pytest tests/unit -q`` stopped with ``ModuleNotFoundError: No module named 'tests'`` while
collecting ``tests/unit/test_mix_half.py`` (it imports ``tests.unit.test_mix_suspects``): only ``python -m``
put the repository root on ``sys.path``. ``pythonpath = ["."]`` in pyproject's pytest options does it for both.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_pytest_script_collects_a_test_that_imports_another_test_module() -> None:
    """Collect ``test_mix_half.py`` with ``.venv/bin/pytest`` (not ``python -m``), without PYTHONPATH."""
    script = Path(sys.executable).parent / "pytest"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(script), "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/unit/test_mix_half.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_mix_half.py::" in done.stdout
