"""Keep modules a peer never uses out of its memory: hivemind imports ``scipy.optimize`` for one function.

``hivemind/averaging/load_balancing.py`` imports ``scipy.optimize`` at module level for ``linprog``, used only by
hivemind's all-reduce load balancing, which p2p_guard never runs. Importing it costs each process about 35 MiB
PSS (321 modules; measured on torch 2.13 CPU, scipy as hivemind 1.1.12 pins it), about an eighth of a digits
peer's memory (issue 8, rule 10: ≤ 300 MiB PSS per peer with 32 peers on one machine).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["defer_scipy_optimize"]

_NAME = "scipy.optimize"


def defer_scipy_optimize() -> None:
    """Put a stand-in for ``scipy.optimize`` in ``sys.modules`` that imports the real module on first use.

    ``import scipy.optimize`` then binds the stand-in (only the light ``scipy`` package itself is imported);
    the first read of a public attribute (``scipy.optimize.linprog``, ``from scipy.optimize import x``)
    replaces it by the real module and returns the real attribute. Call it before anything imports hivemind
    (``p2p-guard``'s ``main`` does); a no-op once ``scipy.optimize`` is imported.
    """
    if _NAME in sys.modules:
        return
    stand_in = types.ModuleType(_NAME, "stand-in: the real scipy.optimize is imported on first use")

    def load(attribute: str) -> Any:
        if attribute.startswith("__") and attribute.endswith("__"):  # inspect.getmodule probes every module
            raise AttributeError(f"module {_NAME!r} (stand-in) has no attribute {attribute!r}")
        if sys.modules.get(_NAME) is stand_in:
            del sys.modules[_NAME]
        return getattr(importlib.import_module(_NAME), attribute)

    stand_in.__getattr__ = load  # type: ignore[method-assign]  # PEP 562 module __getattr__
    sys.modules[_NAME] = stand_in
