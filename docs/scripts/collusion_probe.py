"""The collusion stage's scores per round, as one receiver sees them: each sender's best and second-best history cosine.

    python docs/scripts/collusion_probe.py --partition dirichlet:0.1 --seed 3                 # clean: an honest pair
    python docs/scripts/collusion_probe.py --attack alie:z=search --f 3 --seed 0               # an attacker trio

One cell of ``p2p_guard.bench.cell.run_cell`` (digits, 10 peers, 12 rounds, f not told; the attackers are the last
f peers), with the guard given by ``--guard`` (default ``semantic``, whose collusion stage is on). After each round
it prints, for receiver ``peer00``, the largest s1 and s2 among the honest senders (s1, s2: a sender's best and
second-best history cosine with another sender; g = 2 rejects at s1 ≥ τ, g = 3 at s2 ≥ τ) with the three honest
senders of largest s1, and the least s1 and s2 among the attackers. Why: ``p2p_guard/guard/collusion.py``'s
docstring (why g = 3) quotes these figures.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.collusion import CollusionCheck


def main() -> None:
    """Run the cell with a hook on the collusion stage and print one line per round."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--attack", default=None)
    parser.add_argument("--f", type=int, default=0, help="Byzantine of 10")
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guard", default="semantic")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scores: dict[int, list[tuple[int, float, float]]] = {}
    original = CollusionCheck.__call__

    def hooked(self: CollusionCheck, updates: torch.Tensor, centre: torch.Tensor,
               ctx: AggregationContext, copies: Any = ()) -> dict[int, str]:
        out = original(self, updates, centre, ctx, copies)
        if ctx.own_index != 0:
            return out
        units: list[torch.Tensor | None] = []
        for sender in ctx.senders:
            entry: Any = self.history._entries.get((ctx.senders[0], sender))
            ok = entry is not None and entry.terms >= self.min_rounds and float(entry.current.norm()) > 0
            units.append(entry.current / entry.current.norm() if ok else None)
        row = []
        for j, hj in enumerate(units):
            if j == 0 or hj is None:
                continue
            cos = sorted((float(hj @ hk) for k, hk in enumerate(units) if k not in (0, j) and hk is not None),
                         reverse=True)
            if len(cos) >= 2:
                row.append((j, cos[0], cos[1]))
        scores[ctx.round] = row
        return out

    CollusionCheck.__call__ = hooked  # type: ignore[method-assign]
    result = run_cell(CellSpec(task="digits", guard=args.guard, attack=args.attack if args.f else None, n=10,
                               f=args.f, partition=args.partition, seed=args.seed, rounds=12,
                               reputation=False), check_shared=False)
    verdicts = result["verdicts"]
    print(f"accuracy {result['final']['accuracy']:.4f}, rejected {verdicts['reasons']}, "  # noqa: T201
          f"honest rows rejected {verdicts['fp']} of {verdicts['fp'] + verdicts['tn']}")
    byzantine = set(range(10 - args.f, 10))
    for round_, row in sorted(scores.items()):
        honest = sorted((x for x in row if x[0] not in byzantine), key=lambda x: -x[1])
        attackers = [x for x in row if x[0] in byzantine]
        if not honest:
            continue
        line = (f"round {round_}: honest max s1 {honest[0][1]:.2f}, max s2 {max(x[2] for x in honest):.2f}, top "
                + " ".join(f"peer{j:02d} ({a:.2f}, {b:.2f})" for j, a, b in honest[:3]))
        if attackers:
            line += (f" | attackers min s1 {min(x[1] for x in attackers):.2f}, "
                     f"min s2 {min(x[2] for x in attackers):.2f}")
        print(line)  # noqa: T201


if __name__ == "__main__":
    main()
