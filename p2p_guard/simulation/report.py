"""The simulation report, built from the peers' event files and final states; pure functions, no I/O.

Definitions (issue 2):

- A round's metrics are the mean over the honest peers that reported that round.
- Guard confusion counts every verdict of an honest receiver about another peer: a rejection is a positive,
  and a sender is truly positive when it is Byzantine (ground truth: the ``ready`` events' ``peer_id`` and
  ``byzantine`` flag). Verdicts about the receiver itself are left out; verdicts about a sender no peer
  announced are counted apart (``unknown_sender``).
- ``consensus_distance`` = max over ordered pairs (i, j) of honest peers of ‖θ_i − θ_j‖ / ‖θ_i‖.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from p2p_guard.simulation.events import Event

__all__ = [
    "PeerLog",
    "build_report",
    "consensus_distance",
    "guard_confusion",
    "mean_bytes_sent",
    "round_summaries",
    "sender_roles",
]


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


def _number(value: Any) -> float | None:
    """``value`` as a finite float, else None (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _mean(values: Iterable[Any]) -> float | None:
    """Mean of the finite numbers in ``values``; None if there are none."""
    numbers = [n for v in values if (n := _number(v)) is not None]
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


def _honest_verdicts(peers: Sequence[PeerLog]) -> Iterable[tuple[int | None, str, Event]]:
    """Yield ``(round, sender, verdict)`` for each honest receiver's verdict about another peer."""
    for peer in peers:
        if peer.byzantine:
            continue
        own_id = peer.peer_id
        for verdict in peer.of_kind("verdict"):
            sender = verdict.get("sender")
            if not isinstance(sender, str) or sender == own_id:
                continue
            round_ = verdict.get("round")
            yield (round_ if isinstance(round_, int) else None), sender, verdict


def guard_confusion(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """Count honest receivers' verdicts against the ground truth; a rejection is a positive.

    Returns:
        ``true_positive``, ``false_positive``, ``true_negative``, ``false_negative``, ``unknown_sender``
        (verdicts about a PeerID no peer announced), ``false_positive_rate`` = FP / (FP + TN) and
        ``true_positive_rate`` = TP / (TP + FN) (None when undefined), and ``reasons``: rejections per reason.
    """
    roles = sender_roles(peers)
    counts = Counter[str]()
    reasons = Counter[str]()
    for _, sender, verdict in _honest_verdicts(peers):
        rejected = not bool(verdict.get("accepted"))
        if rejected:
            reasons[str(verdict.get("reason"))] += 1
        if sender not in roles:
            counts["unknown_sender"] += 1
        elif roles[sender]:
            counts["true_positive" if rejected else "false_negative"] += 1
        else:
            counts["false_positive" if rejected else "true_negative"] += 1
    tp, fp = counts["true_positive"], counts["false_positive"]
    tn, fn = counts["true_negative"], counts["false_negative"]
    return {
        "true_positive": tp,
        "false_positive": fp,
        "true_negative": tn,
        "false_negative": fn,
        "unknown_sender": counts["unknown_sender"],
        "false_positive_rate": fp / (fp + tn) if fp + tn else None,
        "true_positive_rate": tp / (tp + fn) if tp + fn else None,
        "reasons": dict(sorted(reasons.items())),
    }


def _verdict_totals(peers: Sequence[PeerLog]) -> dict[int, tuple[int, int]]:
    """``round -> (accepted, rejected)`` over honest receivers' verdicts about other peers."""
    totals: dict[int, list[int]] = {}
    for round_, _, verdict in _honest_verdicts(peers):
        if round_ is None:
            continue
        slot = totals.setdefault(round_, [0, 0])
        slot[0 if verdict.get("accepted") else 1] += 1
    return {r: (a, j) for r, (a, j) in totals.items()}


def _honest_round_events(peers: Sequence[PeerLog]) -> dict[int, list[Event]]:
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


def round_summaries(peers: Sequence[PeerLog]) -> list[dict[str, Any]]:
    """One entry per round, in round order: honest means and verdict totals.

    Returns:
        Dicts with ``round``, ``accuracy``, ``loss``, ``perplexity`` (means over honest peers; None when no
        peer reported a number), ``accepted``, ``rejected`` (totals over honest receivers' verdicts about
        other peers), ``seconds`` (mean), ``peers`` (honest peers that reported the round) and
        ``state_hashes_agree`` (every reporting honest peer has the same ``state_hash``).
    """
    rounds = _honest_round_events(peers)
    totals = _verdict_totals(peers)
    out = []
    for round_ in sorted(rounds):
        events = rounds[round_]
        accepted, rejected = totals.get(round_, (0, 0))
        hashes = {e.get("state_hash") for e in events}
        out.append(
            {
                "round": round_,
                "accuracy": _mean(e.get("accuracy") for e in events),
                "loss": _mean(e.get("loss") for e in events),
                "perplexity": _mean(e.get("perplexity") for e in events),
                "accepted": accepted,
                "rejected": rejected,
                "seconds": _mean(e.get("seconds") for e in events),
                "peers": len(events),
                "state_hashes_agree": len(hashes) == 1 and None not in hashes,
            }
        )
    return out


def mean_bytes_sent(peers: Sequence[PeerLog]) -> float | None:
    """Mean ``bytes_sent`` over every honest peer's round events (bytes per peer per round)."""
    return _mean(e.get("bytes_sent") for events in _honest_round_events(peers).values() for e in events)


def consensus_distance(thetas: Sequence[torch.Tensor]) -> float | None:
    """Largest relative distance between two honest models: max over i ≠ j of ‖θ_i − θ_j‖ / ‖θ_i‖.

    Args:
        thetas: flat parameter vectors, each ``(d,)``, of the honest peers.

    Returns:
        The distance (0.0 for a single model; ``inf`` if some ‖θ_i‖ = 0 while θ_j differs), None if empty.

    Raises:
        ValueError: if the vectors do not all have the same shape (a local bug, not a peer fault).
    """
    if not thetas:
        return None
    shapes = {tuple(t.shape) for t in thetas}
    if len(shapes) != 1:
        raise ValueError(f"honest models have different shapes: {sorted(shapes)}")
    vectors = [t.detach().reshape(-1).to(torch.float64) for t in thetas]
    worst = 0.0
    for a, b in itertools.permutations(vectors, 2):
        diff = float(torch.linalg.vector_norm(a - b))
        norm = float(torch.linalg.vector_norm(a))
        ratio = diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)
        worst = max(worst, ratio)
    return worst


def build_report(
    config: Mapping[str, Any], peers: Sequence[PeerLog], honest_thetas: Sequence[torch.Tensor]
) -> dict[str, Any]:
    """Assemble the JSON report of a finished simulation.

    Args:
        config: the resolved settings (goes into ``config`` unchanged).
        peers: every peer's events.
        honest_thetas: final flat models ``(d,)`` of the honest peers.

    Returns:
        ``config``, ``rounds``, ``final``, ``guard``, ``consensus_distance``,
        ``bytes_sent_per_peer_per_round``, ``rounds_completed`` (per peer index, from ``final`` events).
    """
    rounds = round_summaries(peers)
    last = rounds[-1] if rounds else {}
    completed = {}
    for peer in peers:
        finals = peer.of_kind("final")
        completed[str(peer.index)] = finals[-1].get("rounds_completed") if finals else None
    return {
        "config": dict(config),
        "rounds": rounds,
        "final": {key: last.get(key) for key in ("accuracy", "loss", "perplexity")},
        "guard": guard_confusion(peers),
        "consensus_distance": consensus_distance(honest_thetas),
        "bytes_sent_per_peer_per_round": mean_bytes_sent(peers),
        "rounds_completed": completed,
    }
