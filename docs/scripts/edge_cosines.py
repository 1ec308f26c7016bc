"""Length and direction of the accepted rows over 2x the median in one in-process cell, honest and Byzantine apart.

    python docs/scripts/edge_cosines.py --task fashion-mnist:data_dir=DIR --partition dirichlet:0.05 --seed 6
    python docs/scripts/edge_cosines.py --attack adaptive --f 2 --partition dirichlet:0.5 --seed 0

One cell of ``p2p_guard.bench.cell.run_cell`` (10 peers, the last ``--f`` Byzantine, 40 rounds), every honest
receiver's guard run every round. For each accepted row of another sender at an honest receiver: its norm over
the round's median there and its cosine to the guard's centre (the verdict's ``cosine``). Printed: the honest
rows over 2x (count, cosine quantiles 0/10/50/90/100 %), the other honest rows' cosine quantiles, and the
Byzantine rows' length and cosine quantiles.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

import p2p_guard.bench.cell as cell
from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.tasks.registry import parse_task_spec


def quantiles(values: list[float]) -> list[float]:
    """The 0, 10, 50, 90 and 100 % quantiles (nearest rank below), or [] for no values."""
    xs = sorted(values)
    return [xs[int(p * (len(xs) - 1))] for p in (0.0, 0.1, 0.5, 0.9, 1.0)] if xs else []


def main() -> None:
    """Run the cell, record the verdicts, print the figures of the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--task", default="digits")
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attack", default="adaptive")
    parser.add_argument("--f", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = 10
    record: dict[int, dict[int, list[tuple[str, bool, float, float]]]] = {}
    original = cell._judge

    def judge(guard: Any, rows: Any, round_: int, spec: Any, run_id: Any, names_: Any, peers: Any, timer: Any,
              j: int) -> Any:
        result = original(guard, rows, round_, spec, run_id, names_, peers, timer, j)
        record.setdefault(round_, {})[j] = [(v.sender, v.accepted, v.norm, v.cosine) for v in result.verdicts]
        return result

    cell._judge = judge  # type: ignore[assignment]
    cell._same_result = lambda a, b: False  # type: ignore[assignment]  # every receiver judged every round
    task = parse_task_spec(args.task)
    run_cell(CellSpec(task=task.name, task_options=tuple(sorted(task.options)), guard="semantic",
                      attack=args.attack if args.f else None, n=n, f=args.f, partition=args.partition,
                      seed=args.seed, rounds=40, reputation=False))
    names = [f"peer{i:02d}" for i in range(n)]
    byzantine = set(names[n - args.f:])
    long_honest: list[float] = []
    other_honest: list[float] = []
    byz_ratio: list[float] = []
    byz_cos: list[float] = []
    for r in sorted(record):
        for j in range(n - args.f):
            verdicts = record[r].get(j, [])
            if not verdicts:
                continue
            median = statistics.median(norm for _, _, norm, _ in verdicts)
            for sender, accepted, norm, cosine in verdicts:
                if sender == names[j] or not accepted:
                    continue
                if sender in byzantine:
                    byz_ratio.append(round(norm / median, 2))
                    byz_cos.append(round(cosine, 3))
                elif norm > 2.0 * median:
                    long_honest.append(round(cosine, 3))
                else:
                    other_honest.append(round(cosine, 3))
    print(f"honest rows over 2x: {len(long_honest)}, cosine quantiles {quantiles(long_honest)}")  # noqa: T201
    print(f"other honest rows' cosine quantiles {quantiles(other_honest)}")  # noqa: T201
    print(f"Byzantine rows accepted: {len(byz_ratio)}, length quantiles {quantiles(byz_ratio)}, "  # noqa: T201
          f"cosine quantiles {quantiles(byz_cos)}")


if __name__ == "__main__":
    main()
