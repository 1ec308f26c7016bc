"""Relative error of a model state θ sent for mixing in each precision, at initialisation (``protocol.states``).

    python docs/scripts/state_precision_error.py TASK [TASK ...]
    python docs/scripts/state_precision_error.py digits "shakespeare:n_layers=8,d_model=512,n_heads=8"

For each task it builds the model (seed 0), encodes its flat float32 θ in fp16 and int8 as a serving peer does
and decodes it as the receiver does, and prints task, d and ‖θ̂ − θ‖/‖θ‖ per precision.
"""

from __future__ import annotations

import sys

from p2p_guard.protocol.states import decode_state, encode_state
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel


def main(specs: list[str]) -> None:
    """Print the relative error of each task's initial θ in fp16 and int8."""
    for spec in specs:
        theta = LocalModel(load_task(spec), seed=0, num_shards=1, shard_index=0, partition="iid").theta.float()
        for precision in ("fp16", "int8"):
            decoded = decode_state(encode_state(theta.numpy().tobytes(), precision), precision, theta.numel())
            if not hasattr(decoded, "norm"):
                raise RuntimeError(f"{spec}: our own {precision} state was rejected")
            print(spec, theta.numel(), precision, f"{float((decoded - theta).norm() / theta.norm()):.2e}")  # noqa: T201


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)  # noqa: T201
        sys.exit(0 if len(sys.argv) > 1 else 2)
    main(sys.argv[1:])
