"""How much a sender's row turns from one round to the next: the measurement behind ``guard.reversal``.

    python docs/scripts/reversal_probe.py sleeper 3 dirichlet:0.5 0 12     # ATTACK F PARTITION SEED ROUNDS
    python docs/scripts/reversal_probe.py clean 0 dirichlet:0.1 3 40       # no attacker

Runs one benchmark cell (``p2p_guard.bench.cell.run_cell``: digits, 10 peers, the ``semantic`` guard with its
defaults, f not told, every peer running the swarm's reputation) and records the rows every receiver judged in
each round (the same rows for every receiver in a cell). It prints, for each sender, the cosine of its row in
round r with its row in round r − 1 (r = 1 .. ROUNDS − 1), then the minimum, 5th percentile and median of those
cosines over the honest senders and over the Byzantine ones (the last F), and the cell's final accuracy.

Measured 2026-12-08 at 62a73e4, before ``guard.reversal`` existed:

| cell | honest: min / p5 / median | Byzantine: min / median |
|---|---|---|
| ``sleeper`` 3 of 10, Dirichlet 0.5, seed 0, 12 rounds | 0.758 / 0.779 / 0.896 | −0.915 (its flip round, 3) / 0.904 |
| clean, Dirichlet 0.1, seed 2, 40 rounds | 0.702 / 0.808 / 0.925 | |
| clean, Dirichlet 0.1, seed 3, 40 rounds | 0.584 / 0.673 / 0.858 | |
| clean, IID, seed 0, 60 rounds (at f66db46) | 0.702 / 0.780 / 0.889 | |

Every ``sleeper`` peer's row in round 3 was at −0.89 to −0.91 with its round-2 row, and at +0.82 to +0.97 with
its previous row in every other round (the flipped rows follow each other). Dirichlet 0.1 seeds 2 and 3 are the
cells where honest rows drift against the centre late in training (``guard.reputation``, "Why the record"); the
60 IID rounds look for an honest model that oscillates about its minimum late in a long run (its consecutive
pseudo-gradients would turn against each other): none did.
"""

from __future__ import annotations

import argparse
import collections

import torch

import p2p_guard.bench.cell as cell
from p2p_guard.bench.cell import CellSpec, run_cell


def main() -> None:
    """Run the cell and print the consecutive-row cosines."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attack", help="attack spec, or 'clean'")
    parser.add_argument("f", type=int)
    parser.add_argument("partition")
    parser.add_argument("seed", type=int)
    parser.add_argument("rounds", type=int)
    args = parser.parse_args()

    seen: dict[int, dict[str, torch.Tensor]] = {}
    original = cell.judge_rows

    def judge_rows(guard: object, rows: dict[str, torch.Tensor], *, round_: int, **kwargs: object) -> object:
        seen.setdefault(round_, {s: r.detach().clone() for s, r in rows.items()})
        return original(guard, rows, round_=round_, **kwargs)

    cell.judge_rows = judge_rows  # type: ignore[assignment]
    attack = None if args.attack == "clean" else args.attack
    result = run_cell(CellSpec(task="digits", guard="semantic", attack=attack, n=10, f=args.f,
                               partition=args.partition, seed=args.seed, rounds=args.rounds))
    names = sorted(seen[0])
    byzantine = set(names[len(names) - args.f:]) if args.f else set()
    cosines: dict[str, list[float]] = collections.defaultdict(list)
    for s in names:
        line = []
        for r in range(1, args.rounds):
            now, before = seen.get(r, {}).get(s), seen.get(r - 1, {}).get(s)
            if now is None or before is None:
                line.append("  -  ")
                continue
            c = float(torch.nn.functional.cosine_similarity(now, before, dim=0))
            line.append(f"{c:+.2f}")
            cosines["Byzantine" if s in byzantine else "honest"].append(c)
        print(s, "B" if s in byzantine else "h", " ".join(line))  # noqa: T201
    for kind, values in cosines.items():
        values.sort()
        print(f"{kind}: min {values[0]:.3f}, p5 {values[len(values) // 20]:.3f}, "  # noqa: T201
              f"median {values[len(values) // 2]:.3f}")
    print(f"final accuracy {result['final']['accuracy']:.4f}")  # noqa: T201


if __name__ == "__main__":
    main()
