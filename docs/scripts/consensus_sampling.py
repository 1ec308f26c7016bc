"""Consensus distance of sampled fan-out plus clipped-gossip mixing on digits, in one process.

The figures of the stop-12 note (issue 8, rule 1). Ten peers on IID shards of digits, each aggregating its own
update and k sampled others with the given guard and taking the outer step, then, every MIX_EVERY rounds,
mixing its post-step state toward M sampled peers' post-step states of the same round (0: no mixing), as
``Peer.mix`` does:

    python docs/scripts/consensus_sampling.py K MIX_EVERY M ROUNDS GUARD
    python docs/scripts/consensus_sampling.py 8 1 4 12 semantic              # the defaults
    python docs/scripts/consensus_sampling.py 8 1 4 12 semantic theta-only   # θ mixed, momentum not
    python docs/scripts/consensus_sampling.py 8 2 3 12 semantic              # every other round, 3 peers
    python docs/scripts/consensus_sampling.py 9 0 3 12 semantic              # everyone fetched, no mixing

It prints round, max ‖θ_i − θ_j‖/‖θ_i‖ over all pairs, and peer 0's accuracy.
"""

from __future__ import annotations

import random
import sys

import torch

from p2p_guard.guard import build_guard
from p2p_guard.guard.apply import judge_rows
from p2p_guard.swarm.mixing import MOMENTUM_MIX_RADIUS, clipped_gossip, consensus_distance
from p2p_guard.swarm.sampling import sample_senders
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator


def main(k: int, mix_every: int, m: int, rounds: int, guard_name: str, mix_momentum: bool, n: int = 10) -> None:
    """Run the rounds and print the distance at a few of them."""
    task = load_task("digits")
    peers = [LocalModel(task, seed=0, num_shards=n, shard_index=i, partition="iid") for i in range(n)]
    guard = build_guard(guard_name)
    rng = random.Random(0)
    steps = task.default_hparams.inner_steps
    names = [f"p{i}" for i in range(n)]
    for r in range(rounds):
        deltas = {names[i]: p.train_round(steps, round_generator("x", 0, i, r, 1))[0] for i, p in enumerate(peers)}
        for i, p in enumerate(peers):
            sample = sample_senders([x for x in names if x != names[i]], k, rng)
            rows = {x: deltas[x] for x in sample} | {names[i]: deltas[names[i]]}
            result = judge_rows(guard, rows, me=names[i], round_=r, previous_aggregate=p.previous_aggregate,
                                f=None, generator=torch.Generator().manual_seed(r))
            p.apply(result.aggregate)
        if mix_every and r % mix_every == 0:
            thetas = [p.theta.clone() for p in peers]  # every peer's post-step state, before anyone mixes
            momenta = [p.momentum.clone() for p in peers]
            for i, p in enumerate(peers):
                chosen = [int(j) for j in sample_senders([j for j in range(n) if j != i], m, rng)]  # type: ignore[misc]
                p.shift(clipped_gossip(thetas[i], [thetas[j] for j in chosen], max_radius=0.05).correction)
                if mix_momentum:
                    p.shift_momentum(clipped_gossip(momenta[i], [momenta[j] for j in chosen],
                                                    max_radius=MOMENTUM_MIX_RADIUS).correction)
        if r in (0, 1, 2, 3, 4, 9, rounds - 1):
            accuracy = float(peers[0].evaluate().accuracy)  # type: ignore[attr-defined]
            print(r, round(consensus_distance([p.theta for p in peers]), 4), round(accuracy, 4))  # noqa: T201


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
         mix_momentum=len(sys.argv) < 7 or sys.argv[6] != "theta-only")
