"""Overlap of communication with compute, in one process: sequential vs one-round delay vs eager vs head/tail.

Reproduces the one-process figures in docs/protocol.md §7.8. Four DiLoCo workers on IID shards, mean
aggregation, DiLoCo's outer Nesterov (lr, momentum as given); the loss of worker 0 and the workers' largest
pairwise distance are printed every round:

    python docs/scripts/overlap_eager.py seq 12 0.7 0.9 --task shakespeare
    python docs/scripts/overlap_eager.py eager 12 0.7 0.9 --warmup 3 --task shakespeare
    python docs/scripts/overlap_eager.py eager 12 0.7 0.6 --warmup 3 --task shakespeare
    python docs/scripts/overlap_eager.py split 13 0.7 0.9 --warmup 1 --tau 10 --task shakespeare
    python docs/scripts/overlap_eager.py eager 10 0.7 0.9 --warmup 3   # digits (the default task)

``delay`` applies round r's aggregate after round r + 1's inner phase; ``eager`` does the same but replaces the
worker's own stale share of it by its fresh update, agg + (Δ_fresh − Δ_stale)/n (Kale et al., arXiv:2502.12996),
the overlap until stop 18; ``split`` is the overlap since stop 19 (``swarm.peer.Peer.inner_head`` /
``inner_tail``): τ steps continuing from the previous phase's end, then round r's step, the head's progress moved
onto the stepped θ and H − τ more steps, Δ measured from the stepped θ. In ``split`` the printed loss is θ's after
the previous round's step (one aggregate fewer than ``seq`` at the same round number). Rounds below ``--warmup``
are sequential.
"""

from __future__ import annotations

import argparse

import torch

from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator
from p2p_guard.training.params import flatten


def main() -> None:
    """Run the chosen mode and print ``mode round loss distance`` per round."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("seq", "delay", "eager", "split"))
    parser.add_argument("rounds", type=int)
    parser.add_argument("lr", type=float)
    parser.add_argument("momentum", type=float)
    parser.add_argument("--warmup", type=int, default=0, help="rounds run sequentially first")
    parser.add_argument("--task", default="digits")
    parser.add_argument("--tau", type=int, default=10, help="split: the head's inner steps")
    parser.add_argument("-n", type=int, default=4, help="workers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = load_task(args.task)
    n = args.n
    peers = [LocalModel(task, seed=0, num_shards=n, shard_index=i, partition="iid", outer_lr=args.lr,
                        outer_momentum=args.momentum) for i in range(n)]
    steps = task.default_hparams.inner_steps
    prev: torch.Tensor | None = None
    prev_own: list[torch.Tensor] = []
    ends: list[torch.Tensor | None] = [None] * n
    for r in range(args.rounds):
        sequential = args.mode == "seq" or r < args.warmup
        deltas = []
        for i, p in enumerate(peers):
            gen = round_generator("x", 0, i, r, 1)
            if args.mode == "split" and not sequential and prev is not None:
                start = ends[i] if ends[i] is not None else p.theta
                head, _ = p.train_from(start, args.tau, gen)
                p.apply(prev)
                end, _ = p.train_from(p.theta + (head - start), steps - args.tau, gen)
            else:
                end, _ = p.train_from(p.theta, steps, gen)
            ends[i] = end
            deltas.append(p.theta - end)
        agg = torch.stack(deltas).mean(0)
        if sequential:
            for p in peers:
                p.apply(agg)
            prev = None
        elif args.mode == "split":
            prev = agg
        elif args.mode == "delay":
            if prev is not None:
                for p in peers:
                    p.apply(prev)
            prev = agg
        else:  # eager
            if prev is not None:
                for i, p in enumerate(peers):
                    p.apply(prev + (deltas[i] - prev_own[i]) / n)
            prev, prev_own = agg, deltas
        thetas = torch.stack([flatten(p.model) for p in peers])
        distance = max(float((thetas[i] - thetas[j]).norm()) for i in range(n) for j in range(n))
        loss = float(peers[0].evaluate().loss)  # type: ignore[attr-defined]
        print(args.mode, r, round(loss, 4), round(distance / float(thetas[0].norm()), 5), flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
