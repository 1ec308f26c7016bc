"""The robust centre as receiver ``peer00`` sees it, round by round: its cosine with the honest rows' mean.

    python docs/scripts/centre_probe.py --attack min_max --f 4 --guard semantic:duplicate_credit=False
    python docs/scripts/centre_probe.py --attack min_max --f 4                      # the default guard

One cell of ``p2p_guard.bench.cell.run_cell`` (digits, 10 peers, 12 rounds, f not told; the attackers are the last
f peers) with the guard given by ``--guard``. After each round it prints, for receiver ``peer00``: the cosine of
the guard's robust centre with the mean of the honest rows it received, the sum W of the direction weights of the
accepted rows (stage 4c; 1 each at most), and, for the honest rows alone, the cosine of
``robust_centre(honest rows, f')`` with their mean at f' = 0, 1, 2. Why: ``p2p_guard/guard/semantic.py``'s stage 2
(the duplicate stage's copies count against f̂) quotes these figures.
"""

from __future__ import annotations

import argparse

import torch

from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.guard import semantic
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.centre import robust_centre
from p2p_guard.guard.verdict import direction_weights


def cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    """cos(x, y), 0 when either is zero."""
    scale = float(x.norm() * y.norm())
    return float(x @ y) / scale if scale > 0 else 0.0


def main() -> None:
    """Run the cell with a hook on the semantic guard's aggregation and print one line per round."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--attack", default=None)
    parser.add_argument("--f", type=int, default=0, help="Byzantine of 10")
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guard", default="semantic")
    args = parser.parse_args()
    torch.set_num_threads(1)
    byzantine = set(range(10 - args.f, 10))
    original = semantic.SemanticGuard._aggregate

    def hooked(self: semantic.SemanticGuard, clipped: torch.Tensor, centre: torch.Tensor, cosines: torch.Tensor,
               rejected: dict[int, tuple[str, str]], f: int, ctx: AggregationContext) -> torch.Tensor:
        out = original(self, clipped, centre, cosines, rejected, f, ctx)
        if ctx.own_index != 0:
            return out
        honest = [i for i, sender in enumerate(ctx.senders) if int(str(sender)[-2:]) not in byzantine]
        mean = clipped[honest].mean(dim=0)
        accepted = [i for i in range(len(clipped)) if i not in rejected]
        weights = direction_weights(cosines[accepted], accepted.index(0), cos_min=self.cos_min,
                                    cos_full=self.cos_full)
        line = (f"round {ctx.round}: guard's centre {cosine(centre, mean):.2f}, W {float(weights.sum()):.2f} of "
                f"{len(accepted)}, rejected {len(rejected)} | honest rows alone, f' = 0 1 2: "
                + " ".join(f"{cosine(robust_centre(clipped[honest], k), mean):.2f}" for k in range(3)))
        print(line, flush=True)  # noqa: T201
        return out

    semantic.SemanticGuard._aggregate = hooked  # type: ignore[method-assign]
    result = run_cell(CellSpec(task="digits", guard=args.guard, attack=args.attack if args.f else None, n=10,
                               f=args.f, partition=args.partition, seed=args.seed, rounds=12,
                               reputation=False), check_shared=False)
    verdicts = result["verdicts"]
    print(f"accuracy {result['final']['accuracy']:.4f}, rejected {verdicts['reasons']}, "  # noqa: T201
          f"honest rows rejected {verdicts['fp']}")


if __name__ == "__main__":
    main()
