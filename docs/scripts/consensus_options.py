"""Consensus distance of the version-2 round under variants of the guard and the mixing step, in one process.

A sibling of ``consensus_sampling.py`` (same task, shards, seeds and round), with each source of honest
disagreement switchable and the mixing step's clip radius, iterations and fan-out as options, plus optional
Byzantine peers. Row sampling and mixing sampling draw from two separate seeded generators, so two variants see
the same row samples.

    python docs/scripts/consensus_options.py                          # the defaults: 10 peers, k 8, m 4, median
    python docs/scripts/consensus_options.py --peers 16
    python docs/scripts/consensus_options.py --k 9                    # every receiver gets every row
    python docs/scripts/consensus_options.py --guard semantic:anchoring=False
    python docs/scripts/consensus_options.py --guard semantic:clip_remaining=False   # plain mean of accepted
    python docs/scripts/consensus_options.py --tau upper              # τ from the upper median
    python docs/scripts/consensus_options.py --tau pairwise --tau-scale 2
    python docs/scripts/consensus_options.py --iterations 2           # two gossip steps per round
    python docs/scripts/consensus_options.py --early-m 8 --early-rounds 3
    python docs/scripts/consensus_options.py --byzantine 3 --attack signflip

Attacks (Byzantine peers are the last B indices; their rows and served states are what they send):
``signflip``: row −Δ, served θ and b negated (−θ, −b); ``push``: row −Δ, served θ + 0.05·‖θ‖·u and b + ‖b‖·u
for one fixed unit direction u (a state just at the mix-radius cap, in the same direction every round).

It prints one line per round: round, max ‖θ_i − θ_j‖/‖θ_i‖ over honest pairs before and after the mixing, and
the honest rows rejected that round (summed over honest receivers); then a ``final`` line with the last
distance, the worst post-mixing distance over all rounds, and the mean honest accuracy.
"""

from __future__ import annotations

import argparse
import random

import torch

from p2p_guard.guard import build_guard
from p2p_guard.guard.apply import judge_rows
from p2p_guard.swarm.mixing import MOMENTUM_MIX_RADIUS, consensus_distance
from p2p_guard.swarm.sampling import sample_senders
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator


def gossip(own: torch.Tensor, neighbours: list[torch.Tensor], *, max_radius: float, rule: str = "median",
           tau_scale: float = 1.0) -> torch.Tensor:
    """Return 1/(m+1)·Σ clip(x_j − x_i, τ), τ = min(tau_scale·s, max_radius·‖x_i‖).

    The spread s is, by ``rule``: ``median``: the lower median of the m distances ‖x_j − x_i‖ (as
    ``clipped_gossip``); ``upper``: the upper median (for m = 4 the 3rd smallest); ``max``: the largest
    distance (τ is then the cap alone whenever a neighbour is that far); ``pairwise``: the lower median of
    the (m+1)m/2 distances among own and the neighbours (not 0 just because half the neighbours coincide
    with own).
    """
    diffs = [x.double() - own.double() for x in neighbours]
    norms = torch.stack([d.norm() for d in diffs])
    ordered = sorted(norms.tolist())
    if rule == "median":
        spread = float(norms.median())
    elif rule == "upper":
        spread = ordered[len(ordered) // 2]
    elif rule == "max":
        spread = ordered[-1]
    else:
        states = [own.double(), *(x.double() for x in neighbours)]
        pairs = [float((a - b).norm()) for i, a in enumerate(states) for b in states[i + 1:]]
        spread = float(torch.tensor(pairs).median())
    tau = min(tau_scale * spread, max_radius * float(own.double().norm()))
    total = torch.zeros_like(diffs[0])
    for d, n in zip(diffs, norms.tolist(), strict=True):
        total += d * (tau / n) if n > tau else d
    return (total / (len(neighbours) + 1)).float()


def main() -> None:
    """Run the rounds and print the honest consensus distance and accuracy."""
    p = argparse.ArgumentParser()
    p.add_argument("--peers", type=int, default=10)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--m", type=int, default=4, help="mix peers")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--guard", default="semantic")
    p.add_argument("--mix-radius", type=float, default=0.05)
    p.add_argument("--tau", default="median", choices=("median", "upper", "max", "pairwise"))
    p.add_argument("--tau-scale", type=float, default=1.0)
    p.add_argument("--iterations", type=int, default=1, help="gossip steps per round")
    p.add_argument("--early-m", type=int, default=0, help="mix peers in the first --early-rounds rounds")
    p.add_argument("--early-rounds", type=int, default=0)
    p.add_argument("--early-iterations", type=int, default=0, help="gossip steps in the first --early-rounds")
    p.add_argument("--no-momentum-mix", action="store_true")
    p.add_argument("--outer-warmup", type=int, default=0,
                   help="scale the aggregate by min(1, (r+1)/R) in the first R rounds (an outer-lr warm-up)")
    p.add_argument("--byzantine", type=int, default=0)
    p.add_argument("--attack", default="signflip", choices=("signflip", "push"))
    args = p.parse_args()

    n, b = args.peers, args.byzantine
    honest = list(range(n - b))
    task = load_task("digits")
    peers = [LocalModel(task, seed=0, num_shards=n, shard_index=i, partition="iid") for i in range(n)]
    guard = build_guard(args.guard)
    rows_rng, mix_rng = random.Random(0), random.Random(1)  # noqa: S311
    steps = task.default_hparams.inner_steps
    names = [f"p{i:02d}" for i in range(n)]
    direction = torch.randn(peers[0].numel, generator=torch.Generator().manual_seed(7))
    direction /= direction.norm()
    fetched, worst = 0, 0.0
    for r in range(args.rounds):
        deltas = {names[i]: q.train_round(steps, round_generator("x", 0, i, r, 1))[0] for i, q in enumerate(peers)}
        sent = {names[i]: (-deltas[names[i]] if i >= n - b else deltas[names[i]]) for i in range(n)}
        false_positives = 0
        for i, q in enumerate(peers):
            sample = sample_senders([x for x in names if x != names[i]], args.k, rows_rng)
            rows = {x: sent[x] for x in sample} | {names[i]: deltas[names[i]]}
            result = judge_rows(guard, rows, me=names[i], round_=r, previous_aggregate=q.previous_aggregate,
                                f=None, generator=torch.Generator().manual_seed(r))
            if i < n - b:
                false_positives += sum(1 for v in result.verdicts
                                       if not v.accepted and names.index(v.sender) < n - b)
            warmup = min(1.0, (r + 1) / args.outer_warmup) if args.outer_warmup else 1.0
            q.apply(result.aggregate * warmup)
        before = consensus_distance([peers[i].theta for i in honest])
        early = r < args.early_rounds
        m = args.early_m if early and args.early_m else args.m
        iterations = args.early_iterations if early and args.early_iterations else args.iterations
        for _ in range(iterations if m else 0):
            thetas = [q.theta.clone() for q in peers]  # every peer's post-step state, before anyone mixes
            momenta = [q.momentum.clone() for q in peers]
            for j in range(n - b, n):
                if args.attack == "signflip":
                    thetas[j], momenta[j] = -thetas[j], -momenta[j]
                else:
                    thetas[j] = thetas[j] + 0.05 * thetas[j].norm() * direction
                    momenta[j] = momenta[j] + momenta[j].norm() * direction
            for i in honest:
                chosen = [int(j) for j in sample_senders([j for j in range(n) if j != i], m, mix_rng)]  # type: ignore[misc]
                peers[i].shift(gossip(thetas[i], [thetas[j] for j in chosen], max_radius=args.mix_radius,
                                      rule=args.tau, tau_scale=args.tau_scale))
                fetched += len(chosen)
                if not args.no_momentum_mix and bool(momenta[i].any()):
                    peers[i].shift_momentum(gossip(momenta[i], [momenta[j] for j in chosen],
                                                   max_radius=MOMENTUM_MIX_RADIUS, rule=args.tau,
                                                   tau_scale=args.tau_scale))
                    fetched += len(chosen)
        distance = consensus_distance([peers[i].theta for i in honest])
        worst = max(worst, distance)
        print(r, round(before, 4), round(distance, 4), false_positives, flush=True)  # noqa: T201
    accuracy = sum(float(peers[i].evaluate().accuracy) for i in honest) / len(honest)  # type: ignore[attr-defined]
    per_round = fetched / len(honest) / args.rounds
    print("final", round(distance, 4), "worst", round(worst, 4), "accuracy", round(accuracy, 4),  # noqa: T201
          f"mix vectors fetched per peer per round {per_round:.1f}")


if __name__ == "__main__":
    main()
