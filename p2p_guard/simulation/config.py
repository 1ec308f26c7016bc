"""Settings of one local simulated swarm, checked once, before any process starts."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_TIMEOUT_S", "SimulationConfig", "check_partition"]

DEFAULT_TIMEOUT_S = 1200.0


def check_partition(spec: str) -> str:
    """Return ``spec`` if it is ``iid`` or ``dirichlet:ALPHA`` with a finite ALPHA > 0.

    Raises:
        ValueError: naming the bad value.
    """
    if not isinstance(spec, str):
        raise ValueError(f"partition must be 'iid' or 'dirichlet:ALPHA' with ALPHA > 0, got {spec!r}")
    if spec.strip().lower() == "iid":
        return spec
    name, _, alpha_text = spec.strip().lower().partition(":")
    if name == "dirichlet":
        try:
            alpha = float(alpha_text)
        except ValueError:
            alpha = math.nan
        if math.isfinite(alpha) and alpha > 0:
            return spec
    raise ValueError(f"partition must be 'iid' or 'dirichlet:ALPHA' with ALPHA > 0, got {spec!r}")


@dataclass(frozen=True)
class SimulationConfig:
    """A local swarm: ``honest`` peers (indices ``0..honest-1``) then ``byzantine`` attackers.

    Attributes:
        task: task name passed to every peer (``digits``, ``fashion-mnist``, ``shakespeare``).
        honest: number of honest peers (at least 1).
        byzantine: number of simulated Byzantine peers.
        attack: attack spec of the Byzantine peers (``NAME:key=value,...`` or ``module:Class``).
        rounds: outer rounds every peer runs.
        seed: run seed (the same for every peer: they start from the same θ_0).
        guard: aggregation rule of every peer (``semantic``, ``mean``, ...).
        inner_steps: H inner steps per round (None: the task's default).
        partition: ``iid`` or ``dirichlet:ALPHA``.
        run_id: run name shared by the peers (None: derived from task and seed, so reruns are comparable).
        timeout_s: the whole run must end within this many seconds.
        startup_timeout_s: how long the bootstrap node may take to publish its addresses, in seconds.
        stop_grace_s: seconds a process group has after SIGTERM before SIGKILL.
        reputation: peers publish signed verdicts and keep a reputation.
        reputation_exclusion: peers drop senders their reputation excludes (off by default, as for a peer: it can
            fork small honest swarms; see ``PeerConfig.reputation_exclusion``).
    """

    task: str = "digits"
    honest: int = 6
    byzantine: int = 2
    attack: str | None = "sign_flip:scale=10"
    rounds: int = 10
    seed: int = 0
    guard: str = "semantic"
    inner_steps: int | None = None
    partition: str = "iid"
    run_id: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    startup_timeout_s: float = 120.0
    stop_grace_s: float = 10.0
    reputation: bool = True
    reputation_exclusion: bool = False

    def __post_init__(self) -> None:
        """Check every setting.

        Raises:
            ValueError: naming the first bad setting and its value.
        """
        _at_least("honest", self.honest, 1)
        _at_least("byzantine", self.byzantine, 0)
        _at_least("rounds", self.rounds, 1)
        if self.inner_steps is not None:
            _at_least("inner_steps", self.inner_steps, 1)
        if self.byzantine > 0 and not self.attack:
            raise ValueError(f"byzantine={self.byzantine} needs an attack spec")
        if not self.task:
            raise ValueError("task must not be empty")
        if not self.guard:
            raise ValueError("guard must not be empty")
        check_partition(self.partition)
        for flag in ("reputation", "reputation_exclusion"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        for name in ("timeout_s", "startup_timeout_s", "stop_grace_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @property
    def num_peers(self) -> int:
        """Total number of peers, honest and Byzantine."""
        return self.honest + self.byzantine

    @property
    def resolved_run_id(self) -> str:
        """The run id the peers use."""
        return self.run_id or f"sim-{self.task}-seed{self.seed}"

    def is_byzantine(self, index: int) -> bool:
        """True for the peers after the honest ones."""
        return index >= self.honest

    def to_dict(self) -> dict[str, Any]:
        """The resolved settings, as they go into the report."""
        out = dataclasses.asdict(self)
        out["run_id"] = self.resolved_run_id
        out["num_peers"] = self.num_peers
        if self.byzantine == 0:
            out["attack"] = None
        return out


def _at_least(name: str, value: int, minimum: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
