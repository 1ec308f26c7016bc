"""How close can any rejecting guard get to clean accuracy? The semantic guard against an oracle that rejects every
Byzantine row (digits, 10 peers, Dirichlet 0.5, 12 rounds).

    python docs/scripts/oracle_bound.py                                 # the table below (about 15 min)
    python docs/scripts/oracle_bound.py --fractions 3 --attacks sleeper --seeds 0

Each cell is ``p2p_guard.bench.cell.run_cell`` (the benchmark's in-process cell, the guard never told f) with
the ``semantic`` guard as shipped, and two arms that add a per-row check (``SemanticGuard.checks``, the guard's
extension point; patched into the cell's guard for the run only):

- ``oracle``: rejects every row of a Byzantine sender (the cell's last f indices). No peer can know this: it
  bounds what a perfect detector would give, since the guard's other stages (centre, clipping, anchoring) stay;
- ``aligned``: a prototype, not in the guard: reject a row whose cosine with the robust centre is below 0 when
  another row also below 0 lies within cosine 0.5 of it (a coordinated group pointing against the centre).

Why these: the issue's acceptance asks the guard's worst case at 20 % and 30 % to be within 3 points of clean.
At 3 of 10 on seed 0 the worst attack was ``sleeper`` (87.9 against 93.6 clean; docs/acceptance). Probing
receiver ``peer00`` round by round (cosines to the robust centre, pairwise cosines, held-out loss change) showed
two things: (1) the Byzantine peers' models, stepped with their own flipped rows, go wrong together, so their
rows come out aligned (pairwise cosine 0.6-0.8, where honest pairs are at most 0.3-0.5 after round 4) and, on
some rounds, capture the robust centre itself (NNM + trimmed mean at f̂ = 4): the honest rows then sit at
cosines −0.3 to 0 with it and the flipped ones at +0.1 to +0.6; (2) even the oracle does not reach clean
accuracy on every seed, because on label-skewed shards the attackers' shards hold examples the honest peers
lack: rejecting their rows also loses what those shards would have taught.

The ``aligned`` prototype rejected the flipped rows from round 1 under ``sign_flip:scale=1`` but cost honest rows
on other rounds (12 honest rejections on seed 0); ``semantic:mixing=False`` (no NNM in the centre),
``cos_full=0.3`` and ``loss_check=True`` did not help either (``sleeper`` at 3 of 10, mean of seeds 0-2: 0.823,
0.887, 0.842 against 0.862 as shipped; clean on Dirichlet 0.1: 0.760, 0.720, 0.744 against 0.752).

Measured 2026-12-06 at a5773fb with the command's defaults (final accuracy, mean over seeds 0-2, then each seed)::

    clean: 0.930 (0.936, 0.936, 0.917)
    | f | attack | semantic | oracle | aligned |
    |---:|---|---|---|---|
    | 2 | `sign_flip:scale=1` | 0.883 (0.869, 0.852, 0.928) | 0.899 (0.909, 0.852, 0.936) | 0.887 (0.863, 0.869, 0.928) |
    | 2 | `sleeper` | 0.886 (0.875, 0.855, 0.928) | 0.899 (0.909, 0.852, 0.936) | 0.891 (0.875, 0.871, 0.928) |
    | 2 | `null_space` | 0.883 (0.865, 0.850, 0.933) | 0.905 (0.909, 0.869, 0.936) | 0.889 (0.864, 0.869, 0.933) |
    | 3 | `sign_flip:scale=1` | 0.869 (0.908, 0.850, 0.847) | 0.896 (0.927, 0.858, 0.902) | 0.877 (0.882, 0.858, 0.890) |
    | 3 | `sleeper` | 0.863 (0.879, 0.847, 0.861) | 0.896 (0.927, 0.858, 0.902) | 0.862 (0.867, 0.856, 0.864) |
    | 3 | `null_space` | 0.881 (0.907, 0.850, 0.886) | 0.898 (0.925, 0.858, 0.912) | 0.880 (0.888, 0.858, 0.894) |
    | 4 | `sign_flip:scale=1` | 0.808 (0.780, 0.817, 0.826) | 0.859 (0.863, 0.842, 0.872) | 0.783 (0.840, 0.819, 0.691) |
    | 4 | `sleeper` | 0.832 (0.826, 0.822, 0.847) | 0.867 (0.863, 0.842, 0.897) | 0.841 (0.846, 0.831, 0.847) |
    | 4 | `null_space` | 0.809 (0.795, 0.814, 0.819) | 0.860 (0.864, 0.842, 0.875) | 0.788 (0.843, 0.819, 0.703) |

What it says about the issue's target (worst case within 3 points of clean at 20 % and 30 %): on seed 1 even the
oracle ends 8.4 points (f = 2) and 7.8 points (f = 3) below clean, so no guard that rejects the attackers' rows
meets it there; the shortfall is the attackers' shards, not the guard. On seed 0 the oracle is within 2.7 and
0.9 points. Against the oracle, the shipped guard's gap (means of seeds) is 1.3-2.2 points at f = 2, 1.7-3.3 at
f = 3 and 3.5-5.1 at f = 4 over these three attacks: what a better detector could still win. ``aligned`` wins
0.4-0.6 points at f = 2, 0.8 under ``sign_flip`` and nothing under the others at f = 3, and loses up to 2.5 on the
mean at f = 4 (13.5 on seed 2, where it rejects honest rows once the four attackers hold the centre): it is not adopted.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

import torch

import p2p_guard.bench.cell as cell
from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.guard.base import AggregationContext
from p2p_guard.guard.linalg import cosines_to

N = 10


@dataclass(frozen=True)
class Oracle:
    """Reject every row whose sender is Byzantine (``peerNN`` with NN ≥ n − f): an upper bound, not a defence."""

    f: int
    reason: str = "oracle"

    def __call__(self, updates: torch.Tensor, centre: torch.Tensor, ctx: AggregationContext) -> dict[int, str]:
        """Row index → ``"Byzantine"`` for each Byzantine sender's row."""
        return {i: "Byzantine" for i, s in enumerate(ctx.senders) if int(s[4:]) >= N - self.f}


@dataclass(frozen=True)
class Aligned:
    """Reject a row below cosine 0 with the centre that lies within cosine ``pair`` of another such row."""

    pair: float = 0.5
    reason: str = "aligned_against"

    def __call__(self, updates: torch.Tensor, centre: torch.Tensor, ctx: AggregationContext) -> dict[int, str]:
        """Row index → detail for each rejected row (never the own row)."""
        against = [float(c) < 0 for c in cosines_to(updates, centre)]
        unit = updates / updates.norm(dim=1, keepdim=True).clamp_min(1e-30)
        pairs = unit @ unit.T
        out = {}
        for i in range(len(updates)):
            if i == ctx.own_index or not against[i]:
                continue
            partner = next((j for j in range(len(updates)) if j != i and against[j]
                            and float(pairs[i, j]) >= self.pair), None)
            if partner is not None:
                out[i] = f"cosine {float(pairs[i, partner]):.2f} with row {partner}, both against the centre"
        return out


def main() -> None:
    """Parse the arguments and print one markdown row per (fraction, attack)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", type=int, nargs="+", default=[2, 3, 4], help="f, Byzantine of 10")
    parser.add_argument("--attacks", nargs="+", default=["sign_flip:scale=1", "sleeper", "null_space"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    clean = [_final(None, 0, seed, None) for seed in args.seeds]
    print(f"clean: {_cellfmt(clean)}")  # noqa: T201
    print("| f | attack | semantic | oracle | aligned |")  # noqa: T201
    print("|---:|---|---|---|---|")  # noqa: T201
    for f in args.fractions:
        for attack in args.attacks:
            arms = [[_final(attack, f, seed, check) for seed in args.seeds] for check in (None, Oracle(f), Aligned())]
            print(f"| {f} | `{attack}` | " + " | ".join(_cellfmt(a) for a in arms) + " |", flush=True)  # noqa: T201


def _final(attack: str | None, f: int, seed: int, check: Any) -> float:
    """Final accuracy of one cell, with ``check`` added to the semantic guard (None: as shipped)."""
    shipped = cell.build_guard

    def build(name: str, **params: Any) -> Any:
        guard = shipped(name, **params)
        if check is not None:
            object.__setattr__(guard.aggregator, "checks", (check,))  # the frozen guard, for this run only
        return guard

    cell.build_guard = build  # type: ignore[assignment]
    try:
        result = run_cell(CellSpec(task="digits", guard="semantic", attack=attack, n=N, f=f,
                                   partition="dirichlet:0.5", seed=seed, rounds=12, reputation=False))
    finally:
        cell.build_guard = shipped  # type: ignore[assignment]
    return float(result["final"]["accuracy"])


def _cellfmt(values: list[float]) -> str:
    """``mean (v0, v1, ...)`` with three decimals."""
    return f"{statistics.mean(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"


if __name__ == "__main__":
    main()
