"""p2p_guard: Byzantine-robust peer-to-peer DiLoCo training over a hivemind DHT.

The Python API (``p2p_guard.api``, ``docs/python-api.md``) is re-exported here lazily: ``import p2p_guard`` loads
neither torch nor hivemind; ``p2p_guard.run_local_swarm`` imports its module on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CellSpec", "PeerConfig", "SimulationConfig", "local_swarm", "run_bench_cell", "run_local_swarm",
           "run_peer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from p2p_guard import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
