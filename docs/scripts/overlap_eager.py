"""Overlap of communication with compute on digits, in one process: sequential vs one-round delay vs eager.

Reproduces the figures in docs/protocol.md §7.8. Four DiLoCo workers on IID shards of digits, mean
aggregation, DiLoCo's outer Nesterov (lr, momentum as given):

    python docs/scripts/overlap_eager.py seq 10 0.7 0.9
    python docs/scripts/overlap_eager.py delay 10 0.7 0.9
    python docs/scripts/overlap_eager.py eager 10 0.7 0.9
    python docs/scripts/overlap_eager.py eager 10 0.7 0.6
    python docs/scripts/overlap_eager.py eager 10 0.7 0.9 3   # the first 3 rounds sequential (overlap_warmup_rounds)

``delay`` applies round r's aggregate after round r + 1's inner phase; ``eager`` does the same but replaces the
worker's own stale share of it by its fresh update, agg + (Δ_fresh − Δ_stale)/n (Kale et al., arXiv:2502.12996).
"""

from __future__ import annotations

import sys

import torch

from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator


def main(mode: str, rounds: int, lr: float, momentum: float, warmup: int = 0, n: int = 4) -> None:
    """Print the final accuracy of two workers and the loss of the first (rounds < ``warmup``: sequential)."""
    task = load_task("digits")
    peers = [LocalModel(task, seed=0, num_shards=n, shard_index=i, partition="iid", outer_lr=lr,
                        outer_momentum=momentum) for i in range(n)]
    steps = task.default_hparams.inner_steps
    prev: torch.Tensor | None = None
    prev_own: list[torch.Tensor] = []
    for r in range(rounds):
        deltas = [p.train_round(steps, round_generator("x", 0, i, r, 1))[0] for i, p in enumerate(peers)]
        agg = torch.stack(deltas).mean(0)
        if mode == "seq" or r < warmup:
            for p in peers:
                p.apply(agg)
        elif mode == "delay":
            if prev is not None:
                for p in peers:
                    p.apply(prev)
            prev = agg
        elif mode == "eager":
            if prev is not None:
                for i, p in enumerate(peers):
                    p.apply(prev + (deltas[i] - prev_own[i]) / n)
            prev, prev_own = agg, deltas
        else:
            raise SystemExit(f"mode must be seq, delay or eager; got {mode!r}")
    accuracies = [round(float(p.evaluate().accuracy), 4) for p in peers[:2]]  # type: ignore[attr-defined]
    print(mode, rounds, lr, momentum, accuracies, round(float(peers[0].evaluate().loss), 3))  # type: ignore[attr-defined]  # noqa: T201


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]),
         int(sys.argv[5]) if len(sys.argv) > 5 else 0)
