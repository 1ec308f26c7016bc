"""The scipy.optimize stand-in: hivemind imports without it, and the real module comes on first use."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from p2p_guard.cli.lean_imports import defer_scipy_optimize
defer_scipy_optimize()
import inspect, hivemind.averaging.load_balancing as lb
inspect.getmodule(lb)  # probes every module's __file__: must not load the real one
print(sum(1 for m in sys.modules if m.startswith("scipy.optimize.")))
print(lb.scipy.optimize.linprog.__module__)
print(sum(1 for m in sys.modules if m.startswith("scipy.optimize.")) > 10)
defer_scipy_optimize()  # a no-op once the real one is in
print(type(sys.modules["scipy.optimize"].linprog).__name__)
"""


def test_scipy_optimize_is_loaded_on_first_use_only() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "scipy.optimize._linprog", "True", "function"]
