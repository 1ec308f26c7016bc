"""What judging every receiver costs the benchmark cell: CPU seconds with and without the shortcut.

    python docs/scripts/cell_cost.py            # about 15 s of CPU

Digits, 10 peers, ``dirichlet:1``, 10 rounds of H = 20 (the cells of ``p2p-guard bench robustness --quick``),
seed 0: ``median`` and ``semantic`` under ``sign_flip:scale=1`` at 3 of 10 and ``semantic`` clean, each with
``CellSpec.every_receiver`` off (the shortcut: two receivers judged while their results agree) and on (every
receiver, every round: the default since 2026-12-07). One JSON line per cell: final accuracy, CPU seconds of the
cell (``cpu_seconds``: process time, so less sensitive to a loaded machine than the wall seconds beside it),
the guard's seconds and calls.

Measured 2026-12-07 on a loaded 2-core machine (CPU seconds, shortcut → every receiver; guard calls 20 → 100)::

    | guard | attack | accuracy | CPU s |
    |---|---|---|---|
    | median | sign_flip ×1 | 0.8417 → 0.8417 | 1.51 → 1.36 |
    | semantic | sign_flip ×1 | 0.9139 → 0.9222 | 1.42 → 2.13 |
    | semantic | none | 0.9333 → 0.9333 | 1.40 → 2.10 |

The first line includes the process's warm-up (loading the data). Every receiver costs the ``semantic`` cells half again their CPU time (the guard's own seconds 0.4 → 1.3-2.0) and
the baselines nothing measurable (their models stay equal, so the cell skips the mixing and evaluates one model).
"""

from __future__ import annotations

import json

import torch

from p2p_guard.bench.cell import CellSpec, run_cell


def main() -> None:
    """Run the six cells and print one JSON line each."""
    torch.set_num_threads(1)
    for guard, attack in (("median", "sign_flip:scale=1"), ("semantic", "sign_flip:scale=1"), ("semantic", None)):
        for every in (False, True):
            spec = CellSpec(task="digits", guard=guard, attack=attack, n=10, f=3 if attack else 0,
                            partition="dirichlet:1", seed=0, rounds=10, inner_steps=20, every_receiver=every,
                            reputation=False)
            result = run_cell(spec)
            timing = result["timing"]
            print(json.dumps({"guard": guard, "attack": attack, "every_receiver": every,  # noqa: T201
                              "accuracy": round(result["final"]["accuracy"], 4),
                              "cpu_seconds": round(result["cpu_seconds"], 2), "seconds": round(result["seconds"], 2),
                              "guard_seconds": round(timing["guard_seconds"], 2),
                              "guard_calls": timing["guard_calls"]}), flush=True)


if __name__ == "__main__":
    main()
