"""swarm._deferred: hivemind's unused scipy.optimize is not imported by a peer, and still works when used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from p2p_guard.swarm._deferred import defer_import


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.strip()


def test_importing_the_package_has_no_side_effect() -> None:
    code = "import sys, p2p_guard.swarm.peer; print(type(sys.modules['scipy.optimize']).__name__)"
    assert _run(code) == "module"


def test_peer_entry_point_leaves_scipy_optimize_unloaded_until_used() -> None:
    code = (
        "import sys; from p2p_guard.swarm._deferred import defer_import; defer_import('scipy.optimize')\n"
        "import p2p_guard.swarm.peer, p2p_guard.swarm.dht\n"
        "print(sum(m.startswith('scipy.optimize.') for m in sys.modules), 'torch._dynamo' in sys.modules)\n"
        "from hivemind.averaging.load_balancing import load_balance_peers\n"
        "print(load_balance_peers(100, [1.0, 2.0, 1.0]), type(sys.modules['scipy.optimize']).__name__)\n"
        "import scipy, scipy.optimize\n"
        "print(scipy.optimize is sys.modules['scipy.optimize'], callable(scipy.optimize.linprog))\n"
    )
    assert _run(code).splitlines() == ["0 False", "(0, 100, 0) module", "True True"]


@pytest.mark.parametrize("use", ["from scipy.optimize import linprog; print(callable(linprog))",
                                 "import scipy.optimize._linprog as m; print(callable(m.linprog))"])
def test_placeholder_imports_the_real_module_on_first_use(use: str) -> None:
    code = (
        "from p2p_guard.swarm._deferred import defer_import\n"
        "import sys; first = defer_import('scipy.optimize')\n"
        "print(type(sys.modules['scipy.optimize']).__name__, first, defer_import('scipy.optimize'))\n"
        f"{use}\n"
    )
    assert _run(code).splitlines() == ["_Deferred True False", "True"]


def test_defer_import_skips_missing_and_imported_modules() -> None:
    assert defer_import("no_such_package_p2p_guard.sub") is False
    assert defer_import("json") is False or "json" in sys.modules
