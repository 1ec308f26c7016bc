"""The semantic guard's cos_min: benchmark cells (9 peers, Dirichlet 0.5, digits, 12 rounds) at two floors.

    python docs/scripts/cos_min_cells.py                 # cos_min -0.2 (the default since stop 15) vs 0
    python docs/scripts/cos_min_cells.py --floors -0.2 -0.1 0 --seeds 0 1 2

Prints a markdown table: one row per attack and f, the final accuracy per floor (mean over the seeds, then each
seed's). Each cell is ``p2p_guard.api.run_bench_cell`` (the benchmark's in-process cell; f̂ is the guard's own,
never the true f).
"""

from __future__ import annotations

import argparse

from p2p_guard.api import run_bench_cell
from p2p_guard.bench.cell import CellSpec

CELLS = ((None, 0), ("adaptive", 3), ("adaptive", 4), ("alie:z=search", 4), ("ipm:epsilon=0.1", 3),
         ("sign_flip:scale=10", 3))


def accuracy(attack: str | None, f: int, cos_min: float, seed: int) -> float:
    """Final accuracy of one cell with the semantic guard at ``cos_min``."""
    spec = CellSpec(task="digits", guard="semantic", attack=attack, n=9, f=f, partition="dirichlet:0.5", seed=seed,
                    rounds=12, guard_params=(("cos_min", cos_min),), reputation=False)
    return float(run_bench_cell(spec)["final"]["accuracy"])


def main() -> None:
    """Run the cells and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--floors", type=float, nargs="+", default=[-0.2, 0.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = p.parse_args()
    print("| attack | f of 9 | " + " | ".join(f"cos_min {c:g}" for c in args.floors) + " |")  # noqa: T201
    print("|---|---|" + "---|" * len(args.floors))  # noqa: T201
    for attack, f in CELLS:
        cells = []
        for cos_min in args.floors:
            accs = [accuracy(attack, f, cos_min, seed) for seed in args.seeds]
            cells.append(f"{sum(accs) / len(accs):.3f} ({', '.join(f'{a:.3f}' for a in accs)})")
        print(f"| {attack or 'none'} | {f} | " + " | ".join(cells) + " |", flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
