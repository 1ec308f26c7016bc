"""What a simulated adversarial peer knows, and the Protocols of the two attack kinds defined here.

An adversarial peer runs the same code and protocol as an honest one and replaces either its update (an
*update* attack) or the data of its inner steps (a *data* attack). A third kind, *wire* attacks, tampers with
the signed envelope or the payload bytes (``attacks/wire.py``). Every attack class carries ``kind``, one of
``"update"``, ``"data"``, ``"wire"``, so that the round logic knows where to apply it.

Knowledge: with commit-before-reveal, an attacker that must commit its update for round r has seen only its
own honest Δ of round r and the updates revealed in round r − 1. Update attacks therefore receive
``known``: row 0 is the attacker's own honest Δ of this round, further rows are the updates it received in the
previous round (none in round 0). Those previous rows may include the attacker's colluders' own (malicious)
rows of that round: the interface does not say which rows they are. Each attack's docstring says which rows it
uses and what else it assumes.

White-box (omniscient) attacks also read the honest peers' guard from the context (``guard_name``,
``guard_params``, ``guard_f``), as byzfl's optimal attacks take the defence as an argument, and may test a
candidate on their own data through ``loss_probe``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import torch

from p2p_guard.guard.base import check_int

__all__ = ["ATTACK_KINDS", "AttackContext", "DataAttack", "UpdateAttack", "check_known"]

ATTACK_KINDS = ("update", "data", "wire")
"""The values an attack class's ``kind`` may take."""


@dataclass(frozen=True, kw_only=True, eq=False)  # eq=False: it holds tensors, whose == is elementwise
class AttackContext:
    """What an attack may know about the run besides the updates it saw.

    Args:
        round: the outer round number, ``>= 0``.
        n: total number of peers in the round (honest and Byzantine), ``>= 1``.
        f: number of Byzantine peers, ``0 <= f <= n``.
        generator: the only source of randomness an attack may use.
        guard_name: the guard the honest peers run, when the attack is told (omniscient attacks), else None.
            Attacks that simulate the guard assume the default guard (``"semantic"``) when it is None.
        guard_params: keyword arguments the honest peers' guard was built with
            (``build_guard(guard_name, **guard_params)``); empty for the registry defaults.
        guard_f: the number of Byzantine rows the honest peers' guard is configured to tolerate (f̂, the
            ``AggregationContext.f`` the peers pass); None for the guard's own default.
        loss_probe: optional callable mapping a ``(d,)`` candidate update v to the loss (nats) of the model
            θ − η·v on a batch of the attacker's own held-out data, with η the outer step the peers apply; an
            attack may use it to stay within a loss-delta test. None when the caller offers none.

    Raises:
        ValueError: on a field out of range.
    """

    round: int
    n: int
    f: int
    generator: torch.Generator
    guard_name: str | None = None
    guard_params: Mapping[str, object] = field(default_factory=dict)
    guard_f: int | None = None
    loss_probe: Callable[[torch.Tensor], float] | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_int("round", self.round, minimum=0)
        check_int("n", self.n, minimum=1)
        check_int("f", self.f, minimum=0)
        if self.f > self.n:
            raise ValueError(f"f must be <= n, got f={self.f}, n={self.n}")
        if self.guard_f is not None:
            check_int("guard_f", self.guard_f, minimum=0)
        if not isinstance(self.guard_params, Mapping):
            raise ValueError(f"guard_params must be a mapping, got {self.guard_params!r}")
        # A read-only copy, so that the frozen context cannot change under an attack that reads it.
        object.__setattr__(self, "guard_params", MappingProxyType(dict(self.guard_params)))
        if self.loss_probe is not None and not callable(self.loss_probe):
            raise ValueError(f"loss_probe must be callable, got {self.loss_probe!r}")


@runtime_checkable
class UpdateAttack(Protocol):
    """Replace the attacker's update: ``known (m, d)`` in, the ``(d,)`` vector to commit out."""

    @property
    def kind(self) -> str:
        """Always ``"update"``."""
        ...

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Craft the update to commit.

        Args:
            known: ``(m, d)`` float tensor, ``m >= 1``: row 0 is the attacker's own honest Δ of this round,
                further rows the updates it received in the previous round; not mutated.
            ctx: what the attacker knows about the run.

        Returns:
            ``(d,)`` tensor, dtype of ``known``.
        """
        ...


@runtime_checkable
class DataAttack(Protocol):
    """Corrupt the attacker's training data: applied to every inner batch before the forward pass.

    A data attack may also carry a float attribute ``boost`` (model replacement): the Δ trained on the
    corrupted data is multiplied by it before it is committed
    (:func:`~p2p_guard.attacks.apply.attacked_update` does this); absent or 1.0, the Δ is committed as
    trained.
    """

    @property
    def kind(self) -> str:
        """Always ``"data"``."""
        ...

    def transform(
        self, x: torch.Tensor, y: torch.Tensor, num_classes: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the batch to train on instead of ``(x, y)``; the inputs are not mutated."""
        ...


def check_known(known: torch.Tensor) -> int:
    """Check that ``known`` is a non-empty ``(m, d)`` stack and return ``m``.

    Raises:
        ValueError: when ``known`` is not 2-D or has no row (a bug in the caller).
    """
    if known.dim() != 2 or known.shape[0] == 0:
        raise ValueError(f"known must be (m, d) with m >= 1, got shape {tuple(known.shape)}")
    return int(known.shape[0])
