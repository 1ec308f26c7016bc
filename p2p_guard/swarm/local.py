"""The peer's own copy of the model: inner phase, outer step, state bytes and hash, evaluation.

State of a peer at the start of outer round r: θ_r, the outer Nesterov momentum, and the previous round's
aggregate (centered clipping uses it as its centre). All three are flat float32 CPU vectors of shape (d,);
their SHA-256 (``protocol.state_hash``) is the *base hash* every envelope of round r carries.
"""

from __future__ import annotations

import logging

import torch

from p2p_guard.protocol import state_hash
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.tasks import Task
from p2p_guard.training import OuterNesterov, flatten, load_flat, make_inner_optimizer, param_shapes, run_inner_steps

__all__ = ["LocalModel", "pick_device"]

logger = logging.getLogger(__name__)


def pick_device(requested: str) -> torch.device:
    """Return CUDA when ``requested`` is ``auto`` and a GPU is present, else CPU.

    Raises:
        ValueError: if ``cuda`` is requested and no GPU is available.
    """
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda requested but torch.cuda.is_available() is False")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


class LocalModel:
    """A peer's model, data shard and optimizers (DiLoCo: inner AdamW, outer Nesterov SGD).

    References:
        Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105.
    """

    def __init__(self, config: PeerConfig, task: Task, device: torch.device) -> None:
        """Build θ_0 from the run seed (identical on every peer) and this peer's shard."""
        self.task = task
        self.device = device
        self.model = task.build_model(config.seed).to(device)
        self.shard = task.shard(config.num_peers, config.peer_index, config.partition, config.seed)
        self.inner_optimizer = make_inner_optimizer(self.model, task)
        self.outer = OuterNesterov(lr=config.outer_lr, momentum=config.outer_momentum)
        self.theta = flatten(self.model)
        self.momentum = torch.zeros_like(self.theta)
        self.previous_aggregate = torch.zeros_like(self.theta)
        self.shapes = param_shapes(self.model)

    @property
    def numel(self) -> int:
        """d, the number of parameters."""
        return int(self.theta.numel())

    def state_hash(self) -> bytes:
        """SHA-256 of (θ, momentum, previous aggregate): the base hash of the coming round."""
        return state_hash(self.theta, self.momentum, self.previous_aggregate)

    def state_bytes(self) -> bytes:
        """Raw little-endian fp32 bytes of (θ, momentum, previous aggregate), 12·d bytes."""
        return torch.cat([self.theta, self.momentum, self.previous_aggregate]).numpy().tobytes()

    def load_state_bytes(self, data: bytes) -> None:
        """Adopt a state downloaded from peers (its hash was checked by the caller).

        Raises:
            ValueError: if ``data`` is not exactly 12·d bytes.
        """
        if len(data) != 12 * self.numel:
            raise ValueError(f"state must be {12 * self.numel} bytes; got {len(data)}")
        flat = torch.frombuffer(bytearray(data), dtype=torch.float32)
        theta, momentum, previous = flat.split(self.numel)
        self.theta, self.momentum, self.previous_aggregate = theta.clone(), momentum.clone(), previous.clone()
        self.outer.load_state_dict({"lr": self.outer.lr, "momentum": self.outer.momentum,
                                    "momentum_buffer": self.momentum.clone()})
        load_flat(self.model, self.theta)

    def train_round(self, steps: int, generator: torch.Generator, data_attack: object | None = None
                    ) -> tuple[torch.Tensor, float]:
        """Run H inner steps from θ_r and return (Δ = θ_r − θ_after_H as (d,) float32 CPU, mean loss)."""
        load_flat(self.model, self.theta)
        loss = run_inner_steps(self.model, self.task, self.shard, steps, self.inner_optimizer, generator,
                               self.device, data_attack)
        delta = self.theta - flatten(self.model)
        load_flat(self.model, self.theta)
        return delta, loss

    def apply(self, aggregate: torch.Tensor) -> None:
        """Outer Nesterov step on the robust aggregate: θ_{r+1} = outer(θ_r, aggregate)."""
        self.theta = self.outer.step(self.theta, aggregate)
        buffer = self.outer.momentum_buffer
        self.momentum = buffer.clone() if buffer is not None else torch.zeros_like(self.theta)
        self.previous_aggregate = aggregate.clone()
        load_flat(self.model, self.theta)

    def evaluate(self) -> object:
        """Metrics of θ on the task's held-out split (``tasks.Metrics``)."""
        load_flat(self.model, self.theta)
        return self.task.evaluate(self.model, self.device)
