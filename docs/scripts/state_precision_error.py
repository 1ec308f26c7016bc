"""Relative error of a model state θ sent for mixing in each precision (``protocol.states``).

    python docs/scripts/state_precision_error.py TASK [TASK ...]
    python docs/scripts/state_precision_error.py digits "shakespeare:n_layers=8,d_model=512,n_heads=8"
    python docs/scripts/state_precision_error.py --rounds 12 digits

For each task it builds the model (seed 0), encodes its flat float32 θ in fp16 and int8 as a serving peer does
and decodes it as the receiver does, and prints task, d and ‖θ̂ − θ‖/‖θ‖ per precision. With ``--rounds R`` it
also trains one peer (shard 0 of 10, IID, its own update as the outer step's only row) for R rounds and prints,
after each, ‖θ_r − θ_0‖/‖θ_r‖ and the int8 error of θ_r and of θ_r − θ_0 (a reference every peer of a run could
rebuild from the run seed), both relative to ‖θ_r‖.
"""

from __future__ import annotations

import sys

import torch

from p2p_guard.protocol.states import decode_state, encode_state
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator


def _error(state: torch.Tensor, precision: str) -> float:
    """‖θ̂ − θ‖ (L2, same units as θ) of ``state`` sent in ``precision``."""
    decoded = decode_state(encode_state(state.numpy().tobytes(), precision), precision, state.numel())
    if not isinstance(decoded, torch.Tensor):
        raise RuntimeError(f"our own {precision} state was rejected: {decoded.detail}")
    return float((decoded - state).norm())


def main(specs: list[str], rounds: int = 0) -> None:
    """Print the relative error of each task's θ in fp16 and int8 (and over ``rounds`` rounds of training)."""
    for spec in specs:
        task = load_task(spec)
        peer = LocalModel(task, seed=0, num_shards=10 if rounds else 1, shard_index=0, partition="iid")
        theta = peer.theta.float()
        for precision in ("fp16", "int8"):
            print(spec, theta.numel(), precision, f"{_error(theta, precision) / float(theta.norm()):.2e}")  # noqa: T201
        start = theta.clone()
        for r in range(rounds):
            delta = peer.train_round(task.default_hparams.inner_steps, round_generator("x", 0, 0, r, 1))[0]
            peer.apply(delta)
            now = peer.theta.float()
            norm = float(now.norm())
            print(r, f"moved {float((now - start).norm()) / norm:.3f}",  # noqa: T201
                  f"int8(theta) {_error(now, 'int8') / norm:.2e}", f"int8(theta - theta_0) "
                  f"{_error(now - start, 'int8') / norm:.2e}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)  # noqa: T201
        sys.exit(0 if args else 2)
    trained = 0
    if args[0] == "--rounds":
        trained, args = int(args[1]), args[2:]
    main(args, trained)
