"""One peer's events, and the small number helpers every report figure uses (pure, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from p2p_guard.simulation.events import Event

__all__ = ["PeerLog", "honest_round_events", "max_of", "mean_of", "number", "sender_roles"]


@dataclass(frozen=True)
class PeerLog:
    """Everything one peer reported.

    Attributes:
        index: the peer's index in the simulation (honest peers first).
        byzantine: whether the simulation started it as an attacker.
        events: its events, in file order.
    """

    index: int
    byzantine: bool
    events: Sequence[Event]

    def of_kind(self, kind: str) -> list[Event]:
        """The events whose ``event`` field is ``kind``."""
        return [e for e in self.events if e.get("event") == kind]

    @property
    def peer_id(self) -> str | None:
        """The PeerID (base58) from the first ``ready`` event, None if it never got ready."""
        ready = self.of_kind("ready")
        value = ready[0].get("peer_id") if ready else None
        return value if isinstance(value, str) else None


def number(value: Any) -> float | None:
    """``value`` as a finite float, else None (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def mean_of(values: Iterable[Any]) -> float | None:
    """Mean of the finite numbers in ``values``; None if there are none."""
    numbers = [n for v in values if (n := number(v)) is not None]
    return sum(numbers) / len(numbers) if numbers else None


def sender_roles(peers: Sequence[PeerLog]) -> dict[str, bool]:
    """Map each announced PeerID to True if that peer is Byzantine (from its ``ready`` events)."""
    roles: dict[str, bool] = {}
    for peer in peers:
        for ready in peer.of_kind("ready"):
            peer_id = ready.get("peer_id")
            if isinstance(peer_id, str):
                roles[peer_id] = bool(ready.get("byzantine", peer.byzantine))
    return roles


def max_of(values: Iterable[Any]) -> float | None:
    """Largest of the finite numbers in ``values``; None if there are none."""
    numbers = [n for v in values if (n := number(v)) is not None]
    return max(numbers) if numbers else None


def honest_round_events(peers: Sequence[PeerLog]) -> dict[int, list[Event]]:
    """``round -> the honest peers' round events`` (the last one per peer if a peer repeated a round)."""
    by_round: dict[int, dict[int, Event]] = {}
    for peer in peers:
        if peer.byzantine:
            continue
        for event in peer.of_kind("round"):
            round_ = event.get("round")
            if isinstance(round_, int) and not isinstance(round_, bool):
                by_round.setdefault(round_, {})[peer.index] = event
    return {r: list(events.values()) for r, events in by_round.items()}
