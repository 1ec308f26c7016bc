"""The peer's own copy of the model: inner phase, outer step, state bytes and hash, evaluation.

State of a peer at the start of outer round r: θ_r, the outer Nesterov momentum, and the previous round's
aggregate (centered clipping uses it as its centre). All three are flat float32 CPU vectors of shape (d,);
their SHA-256 (``protocol.state_hash``) is the *base hash* every envelope of round r carries.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading

import torch

from p2p_guard.protocol import state_hash
from p2p_guard.protocol.sparse import dense_mask
from p2p_guard.tasks import Task
from p2p_guard.training.inner import make_inner_optimizer, run_inner_steps
from p2p_guard.training.outer import OuterNesterov
from p2p_guard.training.params import flatten, load_flat, param_shapes, raw_bytes

__all__ = ["LocalModel", "pick_device", "round_generator"]


logger = logging.getLogger(__name__)


def round_generator(run_id: str, seed: int, peer: int | str, round_: int, salt: int) -> torch.Generator:
    """A CPU generator seeded from (run, seed, peer, round, purpose): the only randomness a round uses.

    ``peer``: the peer's index, or its base58 PeerID when it set none (``training.streams.peer_stream``); the
    seed is the first 8 bytes (little-endian, top bit cleared) of SHA-256 of ``"run|seed|peer|round|salt"``.
    """
    digest = hashlib.sha256(f"{run_id}|{seed}|{peer}|{round_}|{salt}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF)


def pick_device(requested: str) -> torch.device:
    """Return CUDA when ``requested`` is ``auto`` and a GPU is present, else CPU.

    Raises:
        ValueError: if ``cuda`` is requested and no GPU is available.
    """
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here (torch.cuda.is_available() is False; is this torch a "
                         "CUDA build?); use --device auto or cpu")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


class LocalModel:
    """A peer's model, data shard and optimizers (DiLoCo: inner AdamW, outer Nesterov SGD).

    References:
        Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105.
    """

    def __init__(self, task: Task, *, seed: int, num_shards: int, shard_index: int, partition: str,
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, device: torch.device | None = None,
                 mixed_precision: bool = True, dense_outer_lr: float | None = None) -> None:
        """Build θ_0 from the run seed (identical on every peer) and this peer's shard.

        Args:
            task: the task (model, data, evaluation).
            seed: run seed; θ_0 and the partition are derived from it.
            num_shards: number of data shards (swarm size); shard_index: ours, in ``[0, num_shards)``.
            partition: ``iid`` or ``dirichlet:ALPHA``.
            outer_lr: outer Nesterov learning rate (DiLoCo: 0.7); outer_momentum: its momentum (0.9).
            device: where the inner steps run (None: CPU). Outer state stays on the CPU.
            mixed_precision: bf16 autocast of the inner forward passes on a CUDA device (no effect on CPU;
                :func:`~p2p_guard.training.inner.inner_autocast`).
            dense_outer_lr: with a ``topk:…,dense=head`` codec, the outer lr of its dense set
                (``protocol.sparse.dense_mask`` of this model; ``training.outer.dense_outer_lr``); None: η everywhere.
        """
        self.task = task
        self.device = device if device is not None else torch.device("cpu")
        self.mixed_precision = mixed_precision
        self.model = task.build_model(seed).to(self.device)
        self.shard = task.shard(num_shards, shard_index, partition, seed)
        self.inner_optimizer = make_inner_optimizer(self.model, task)
        self.shapes = param_shapes(self.model)
        dense = None if dense_outer_lr is None else (dense_mask(self.shapes), dense_outer_lr)
        self.outer = OuterNesterov(lr=outer_lr, momentum=outer_momentum, dense=dense)
        self.theta = flatten(self.model)
        self.momentum = torch.zeros_like(self.theta)
        self.previous_aggregate = torch.zeros_like(self.theta)
        self._eval_model: torch.nn.Module | None = None

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
        self.theta, self.previous_aggregate = theta.clone(), previous.clone()
        self._set_momentum(momentum.clone())
        load_flat(self.model, self.theta)

    def train_round(self, steps: int, generator: torch.Generator, data_attack: object | None = None
                    ) -> tuple[torch.Tensor, float]:
        """Run H inner steps from θ_r and return (Δ = θ_r − θ_after_H as (d,) float32 CPU, mean loss)."""
        end, loss = self.train_from(self.theta, steps, generator, data_attack)
        return self.theta - end, loss

    def train_from(self, start: torch.Tensor, steps: int, generator: torch.Generator,
                   data_attack: object | None = None, *, halt: threading.Event | None = None
                   ) -> tuple[torch.Tensor, float]:
        """Run ``steps`` inner steps from the working point ``start`` (not necessarily θ); the model holds θ after.

        The inner AdamW state carries on as in :meth:`train_round`. The overlapped round runs one inner phase in
        two parts with this (``swarm.peer.Peer.inner_head`` and ``inner_tail``).

        Args:
            start: ``(d,)`` float32, the parameters to start from.
            steps: inner steps, ``>= 0`` (0 returns a copy of ``start`` and loss nan).
            generator: the batch generator (advanced; a second call continues its stream).
            data_attack: optional batch rewrite (a simulated data-poisoning peer).
            halt: once set (from another thread), the phase stops at the next step boundary
                (``training.inner.run_inner_steps``).

        Returns:
            (end point ``(d,)`` float32, mean inner loss over the steps).

        Raises:
            ValueError: on a shape mismatch of ``start`` or a negative ``steps``.
            InnerPhaseStopped: ``halt`` was set; the model holds θ again and the partial phase is dropped (the
                inner AdamW state keeps the steps done: the peer is stopping).
        """
        if start.shape != self.theta.shape:
            raise ValueError(f"start must have shape {tuple(self.theta.shape)}; got {tuple(start.shape)}")
        if steps < 0:
            raise ValueError(f"steps must be >= 0; got {steps}")
        if steps == 0:
            return start.clone(), float("nan")
        load_flat(self.model, start)
        try:
            loss = run_inner_steps(self.model, self.task, self.shard, steps, self.inner_optimizer, generator,
                                   self.device, data_attack, mixed_precision=self.mixed_precision, halt=halt)
            end = flatten(self.model)
        finally:
            load_flat(self.model, self.theta)
        return end, loss

    def apply(self, aggregate: torch.Tensor) -> None:
        """Outer Nesterov step on the robust aggregate: θ_{r+1} = outer(θ_r, aggregate)."""
        self.theta = self.outer.step(self.theta, aggregate)
        buffer = self.outer.momentum_buffer
        # The optimizer's buffer itself, not a copy (4 bytes per parameter): ``OuterNesterov.step`` replaces its
        # buffer by a new tensor and never changes it in place, and b is only ever replaced here too.
        self.momentum = buffer if buffer is not None else torch.zeros_like(self.theta)
        self.previous_aggregate = aggregate.clone()
        load_flat(self.model, self.theta)

    def shift(self, correction: torch.Tensor) -> None:
        """θ ← θ + correction (a mixing step, ``swarm.mixing.clipped_gossip``); the momentum is kept.

        Raises:
            ValueError: on a shape mismatch or a non-finite correction.
        """
        if correction.shape != self.theta.shape or not bool(torch.isfinite(correction).all()):
            raise ValueError("correction must be a finite (d,) tensor")
        self.theta = self.theta + correction.to(self.theta.dtype)
        load_flat(self.model, self.theta)

    def shift_momentum(self, correction: torch.Tensor) -> None:
        """B ← b + correction (the momentum part of a mixing step); θ is kept.

        Raises:
            ValueError: on a shape mismatch or a non-finite correction.
        """
        if correction.shape != self.theta.shape or not bool(torch.isfinite(correction).all()):
            raise ValueError("correction must be a finite (d,) tensor")
        self._set_momentum(self.momentum + correction.to(torch.float32))

    def momentum_bytes(self) -> bytes | memoryview:
        """Raw little-endian fp32 bytes of the outer momentum b, 4·d bytes (what ``["momentum", 0]`` serves).

        No copy of b: a read-only view of its memory (``training.params.raw_bytes``; b is replaced, never changed
        in place). A b whose bits are all zero (no outer momentum, μ = 0, the ``topk`` codecs' default; or no
        step yet) is returned as ``bytes(4·d)``: the same bytes, but allocated zeroed (calloc) and never
        written, so the served b of the last rounds cost no resident memory (they were 4 bytes per parameter
        each, a new zero tensor every round).
        """
        if not bool(self.momentum.view(torch.int32).any()):  # bits, not values: a -0.0 is served as it is
            return bytes(4 * self.momentum.numel())
        return raw_bytes(self.momentum)

    def adopt(self, theta: torch.Tensor, momentum: torch.Tensor | None = None) -> None:
        """Take ``theta`` as our model (catch-up to a robust centre of peers' states).

        Args:
            theta: the new θ, ``(d,)``.
            momentum: the outer momentum to continue with (an estimate of the swarm's, see ``Peer.catch_up``);
                None restarts it at 0.

        Raises:
            ValueError: on a shape mismatch or a non-finite ``theta`` or ``momentum``.
        """
        if theta.shape != self.theta.shape or not bool(torch.isfinite(theta).all()):
            raise ValueError("theta must be a finite (d,) tensor")
        if momentum is not None and (momentum.shape != self.theta.shape or not bool(torch.isfinite(momentum).all())):
            raise ValueError("momentum must be a finite (d,) tensor")
        self.theta = theta.to(torch.float32).clone()
        self.previous_aggregate = torch.zeros_like(self.theta)
        self._set_momentum(None if momentum is None else momentum.to(torch.float32).clone())
        load_flat(self.model, self.theta)

    def resume(self, theta: torch.Tensor, momentum: torch.Tensor) -> None:
        """Restore θ and the outer momentum from our own checkpoint (already verified by the caller)."""
        self.theta = theta.to(torch.float32).clone()
        self._set_momentum(momentum.to(torch.float32).clone())
        load_flat(self.model, self.theta)

    def _set_momentum(self, buffer: torch.Tensor | None) -> None:
        """Set the outer momentum (our copy and the optimizer's buffer); None restarts it at 0."""
        self.momentum = buffer if buffer is not None else torch.zeros_like(self.theta)
        self.outer.load_state_dict({"lr": self.outer.lr, "momentum": self.outer.momentum,
                                    "momentum_buffer": None if buffer is None else buffer.clone()})

    def theta_bytes(self) -> memoryview:
        """Raw little-endian fp32 bytes of θ, 4·d bytes (what ``["theta", 0]`` serves).

        A read-only view of θ's memory, no copy (``training.params.raw_bytes``): θ is replaced, never changed in
        place, so the view keeps the θ it was taken of.
        """
        return raw_bytes(self.theta)

    def evaluate(self) -> object:
        """Metrics of θ on the task's held-out split (``tasks.Metrics``)."""
        load_flat(self.model, self.theta)
        return self.task.evaluate(self.model, self.device)

    def evaluate_at(self, theta: torch.Tensor) -> object:
        """Metrics of ``theta`` (``(d,)`` float32) on the held-out split, on a second copy of the model.

        Safe to run in one thread while :meth:`train_from` runs in another (the overlapped round evaluates the
        finished round beside the next inner phase). The copy is made on first use and kept: one more set of
        parameters (4·d bytes) in memory.
        """
        if self._eval_model is None:
            self._eval_model = copy.deepcopy(self.model)
        load_flat(self._eval_model, theta)
        return self.task.evaluate(self._eval_model, self.device)
