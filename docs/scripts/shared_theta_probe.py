"""One cell with and without the cell's fall-back to one guard call per receiver, and receiver peer00's rejections.

    python docs/scripts/shared_theta_probe.py --attack mimic --partition dirichlet:0.1 --seed 2           # per receiver
    python docs/scripts/shared_theta_probe.py --attack mimic --partition dirichlet:0.1 --seed 2 --shared   # one θ
    python docs/scripts/shared_theta_probe.py --attack mimic --partition dirichlet:0.1 --seed 2 --no-mixing --shortcut

Digits, 10 peers, 3 of 10 (the last 3 peers), 40 rounds (``--rounds``), the default guard (``--guard``). Without
``--shared`` the cell is ``adaptive_cells.py``'s: every receiver runs the guard, steps its own θ and mixes it with 8
sampled others, as in a swarm; ``--shortcut`` runs the guard for two receivers until their results differ, and
``--no-mixing --shortcut`` is the cell before 2026-12-07 (the figures of docs/threat-model.md §3.7a before then).
With ``--shared`` one θ is assumed (``check_shared=False``): the first honest receiver's aggregate is every peer's.
One line per round: the accuracy (mean over the evaluated honest peers), the honest models' spread
(``swarm.mixing.consensus_distance``), fn and fp, and the senders peer00 rejected with their reasons.
Why: docs/threat-model.md §3.7a (``mimic`` over 40 rounds).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.semantic import SemanticGuard


def main() -> None:
    """Run the cell with a hook on the semantic guard and print one line per round."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--attack", default="mimic")
    parser.add_argument("--f", type=int, default=3)
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--guard", default="semantic")
    parser.add_argument("--shared", action="store_true", help="one shared θ (no fall-back per receiver)")
    parser.add_argument("--shortcut", action="store_true",
                        help="judge two receivers while their results agree, then each (CellSpec.every_receiver="
                             "False: with --no-mixing, the cell of the figures before 2026-12-07)")
    parser.add_argument("--no-mixing", action="store_true",
                        help="no mixing step after the outer step (CellSpec.mixing=False: the cell of the figures "
                             "in docs/threat-model.md §3.7a before 2026-12-07)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    original = SemanticGuard.judge
    seen: dict[int, list[tuple[str, str]]] = {}

    def judge(self: SemanticGuard, updates: torch.Tensor, ctx: AggregationContext) -> Any:
        result = original(self, updates, ctx)
        if ctx.own_index == 0:
            seen[ctx.round] = [(v.sender, v.reason) for v in result.verdicts if not v.accepted]
        return result

    SemanticGuard.judge = judge  # type: ignore[method-assign]
    result = run_cell(CellSpec(task="digits", guard=args.guard, attack=args.attack, n=10, f=args.f,
                               partition=args.partition, seed=args.seed, rounds=args.rounds,
                               mixing=not args.no_mixing, every_receiver=not args.shortcut, reputation=False),
                      check_shared=not args.shared)
    print(f"shared_theta {result['shared_theta']}, final {result['final']['accuracy']:.4f}")  # noqa: T201
    for r in result["rounds"]:
        rejected = " ".join(f"{s}:{why}" for s, why in seen.get(r["round"], []))
        print(f"round {r['round']}: accuracy {r['accuracy']:.3f} spread {r['spread']:.4f} fn {r['fn']} fp {r['fp']} "  # noqa: T201
              f"| {rejected}")


if __name__ == "__main__":
    main()
