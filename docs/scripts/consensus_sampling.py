"""Consensus distance of sampled fan-out plus clipped-gossip mixing on digits, in one process.

The figures of the stop-12 note (issue 8, rule 1). Ten peers on IID shards of digits, each aggregating its own
update and k sampled others with the given guard and taking the outer step, then, every MIX_EVERY rounds,
mixing its post-step state toward M sampled peers' post-step states of the same round (0: no mixing), as
``Peer.mix`` does:

    python docs/scripts/consensus_sampling.py K MIX_EVERY M ROUNDS GUARD [theta-only] [fp32|fp16|int8] [raw]
    python docs/scripts/consensus_sampling.py 8 1 4 12 semantic              # the defaults
    python docs/scripts/consensus_sampling.py 8 1 4 12 semantic theta-only   # θ mixed, momentum not
    python docs/scripts/consensus_sampling.py 8 2 3 12 semantic              # every other round, 3 peers
    python docs/scripts/consensus_sampling.py 9 0 3 12 semantic              # everyone fetched, no mixing
    python docs/scripts/consensus_sampling.py 8 1 8 12 semantic int8         # states mixed as int8 (m = 8)
    python docs/scripts/consensus_sampling.py 8 1 8 12 semantic int8 raw     # ... without the noise debiasing

The last word names the precision the mixed states cross the wire in (``PeerConfig.mix_precision``;
``protocol.states``: each peer's θ and b are encoded once and every receiver decodes the same bytes); without
it they are exact float32 (the figures before ``mix_precision``). As ``Peer.mixing`` does, each received state's
expected rounding noise (``protocol.states.rounding_noise``: nonzero for int8 only) is subtracted from its squared
distance for τ (``swarm.mixing.clipped_gossip``); ``raw`` leaves it in (the figures before the debiasing).

It prints round, max ‖θ_i − θ_j‖/‖θ_i‖ over all pairs, and peer 0's accuracy; with a precision also, over
the last mixing, the mean relative error of a received θ, ‖θ̂_j − θ_j‖/‖θ_j‖, and peer 0's clipping radius
τ/‖θ_0‖ (what one neighbour's difference is clipped to).
"""

from __future__ import annotations

import random
import sys

import torch

from p2p_guard.guard import build_guard
from p2p_guard.guard.apply import judge_rows
from p2p_guard.protocol.states import STATE_PRECISIONS, decode_state, encode_state, rounding_noise
from p2p_guard.swarm.mixing import MOMENTUM_MIX_RADIUS, clipped_gossip, consensus_distance
from p2p_guard.swarm.sampling import sample_senders
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator


def _as_received(state: torch.Tensor, precision: str | None) -> torch.Tensor:
    """``state`` (flat float32) as a neighbour decodes it after the wire in ``precision`` (None: exact)."""
    if precision is None:
        return state
    decoded = decode_state(encode_state(state.numpy().tobytes(), precision), precision, state.numel())
    if not isinstance(decoded, torch.Tensor):
        raise RuntimeError(f"our own {precision} state was rejected: {decoded.detail}")
    return decoded


def main(k: int, mix_every: int, m: int, rounds: int, guard_name: str, mix_momentum: bool, n: int = 10,
         precision: str | None = None, debias: bool = True) -> None:
    """Run the rounds and print the distance at a few of them.

    ``precision``: the mixed states' wire form; ``debias``: subtract each received state's expected rounding noise
    from its squared distance for τ (``protocol.states.rounding_noise``).
    """
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
            own = [p.theta.clone() for p in peers]  # every peer's post-step state, before anyone mixes
            thetas = [_as_received(t, precision) for t in own]  # as the others receive it
            momenta = [_as_received(p.momentum.clone(), precision) for p in peers]
            theta_noise = [rounding_noise(t, precision) if debias and precision else 0.0 for t in thetas]
            momentum_noise = [rounding_noise(b, precision) if debias and precision else 0.0 for b in momenta]
            error = sum(float((t - o).norm() / o.norm()) for t, o in zip(thetas, own, strict=True)) / n
            for i, p in enumerate(peers):
                chosen = [int(j) for j in sample_senders([j for j in range(n) if j != i], m, rng)]  # type: ignore[misc]
                gossip = clipped_gossip(own[i], [thetas[j] for j in chosen], max_radius=0.05,
                                        noise=[theta_noise[j] for j in chosen])
                p.shift(gossip.correction)
                if i == 0:
                    tau = gossip.tau / float(own[0].norm())
                if mix_momentum:
                    p.shift_momentum(clipped_gossip(p.momentum.clone(), [momenta[j] for j in chosen],
                                                    max_radius=MOMENTUM_MIX_RADIUS,
                                                    noise=[momentum_noise[j] for j in chosen]).correction)
        if r in (0, 1, 2, 3, 4, 9, rounds - 1):
            accuracy = float(peers[0].evaluate().accuracy)  # type: ignore[attr-defined]
            extra = [f"{error:.2e}", f"{tau:.2e}"] if precision is not None and mix_every else []
            print(r, round(consensus_distance([p.theta for p in peers]), 4), round(accuracy, 4), *extra)  # noqa: T201


if __name__ == "__main__":
    if len(sys.argv) < 6 or not set(sys.argv[6:]) <= {"theta-only", "raw", *STATE_PRECISIONS} or "-h" in sys.argv[1:] \
            or "--help" in sys.argv[1:]:
        print(__doc__)  # noqa: T201
        sys.exit(0 if "-h" in sys.argv[1:] or "--help" in sys.argv[1:] else 2)
    named = [word for word in sys.argv[6:] if word in STATE_PRECISIONS]
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
         mix_momentum="theta-only" not in sys.argv[6:], precision=named[-1] if named else None,
         debias="raw" not in sys.argv[6:])
