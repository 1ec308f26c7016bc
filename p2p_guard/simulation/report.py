"""The simulation report, built from the peers' event files and final states; pure functions, no I/O.

Definitions (issue 2):

- A round's metrics are the mean over the honest peers that reported that round.
- Guard confusion counts every verdict of an honest receiver about another peer: a rejection is a positive,
  and a sender is truly positive when it is Byzantine (ground truth: the ``ready`` events' ``peer_id`` and
  ``byzantine`` flag). Verdicts about the receiver itself are left out; verdicts about a sender no peer
  announced are counted apart (``unknown_sender``).
- ``consensus_distance`` of a round = max over ordered pairs (i, j) of honest peers of ‖θ_i − θ_j‖ / ‖θ_i‖, from
  the θ snapshots the peers wrote after that round (issue 8: honest models are no longer bit-identical, so the
  distance replaces the old "all state hashes equal"). The report's ``consensus_distance`` is the last round's;
  without snapshots it falls back to the final states (``consensus.source`` says which).
- The swarm-health figures (updates applied, trained alone, pauses, utilization, fan-out, start-up, memory) are
  defined in :mod:`p2p_guard.simulation.figures`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from p2p_guard.protocol.reasons import CIRCUMSTANTIAL_REASONS
from p2p_guard.simulation import figures
from p2p_guard.simulation.events import Event
from p2p_guard.simulation.peerlog import PeerLog, honest_round_events, mean_of, sender_roles

__all__ = [
    "CONSENSUS_BOUND",
    "PeerLog",
    "RunObservations",
    "build_report",
    "consensus_distance",
    "guard_confusion",
    "mean_bytes_sent",
    "round_summaries",
    "sender_roles",
]


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
        ``true_positive_rate`` = TP / (TP + FN) (None when undefined), ``reasons``: rejections per reason, and
        ``false_positive_circumstantial``: the false positives whose reason says when or whether the update
        arrived, not what it holds (``protocol.reasons.CIRCUMSTANTIAL_REASONS``: a stopped, slowed or late honest
        peer earns them), with ``false_positive_rate_on_content`` = (FP − those) / (FP − those + TN), the
        guard's and the integrity checks' own false positives.
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
            counts["circumstantial"] += rejected and str(verdict.get("reason")) in CIRCUMSTANTIAL_REASONS
    tp, fp = counts["true_positive"], counts["false_positive"]
    tn, fn = counts["true_negative"], counts["false_negative"]
    return {
        "true_positive": tp,
        "false_positive": fp,
        "true_negative": tn,
        "false_negative": fn,
        "unknown_sender": counts["unknown_sender"],
        "false_positive_rate": fp / (fp + tn) if fp + tn else None,
        "false_positive_circumstantial": counts["circumstantial"],
        "false_positive_rate_on_content": (fp - counts["circumstantial"]) / (fp - counts["circumstantial"] + tn)
        if fp - counts["circumstantial"] + tn else None,
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


CONSENSUS_BOUND = (
    1e-2  # issue 8, rule 1: the distance a clean run stays under, and a faulty one returns under
)


@dataclass(frozen=True)
class RunObservations:
    """What the orchestrator measured besides the peers' events (all optional).

    Attributes:
        round_distances: ``round -> (consensus distance or None, number of honest snapshots it used)``.
        run_started: unix time the run began (the bootstrap node's launch), in seconds.
        launch_times: unix time of each peer's first launch, by index.
        start_attempts: launches of each peer's process (1 = started once; restarts by faults not counted).
        memory_samples: ``index -> PSS samples in bytes`` (process and children).
        fault_plan: the plan as :meth:`FaultPlan.to_dict` gives it (None: no plan).
        faults: the fault records (:meth:`FaultRecord.to_dict`), in plan order.
        stranded: peers the simulator stopped because every other peer had finished (they would have paused
            until the run's timeout; ``LocalSwarm.stop_stranded``).
    """

    round_distances: Mapping[int, tuple[float | None, int]] = field(default_factory=dict)
    run_started: float | None = None
    launch_times: Mapping[int, float] = field(default_factory=dict)
    start_attempts: Mapping[int, int] = field(default_factory=dict)
    memory_samples: Mapping[int, Sequence[int]] = field(default_factory=dict)
    fault_plan: Mapping[str, Any] | None = None
    faults: Sequence[Mapping[str, Any]] = ()
    stranded: Sequence[int] = ()


def round_summaries(
    peers: Sequence[PeerLog], round_distances: Mapping[int, tuple[float | None, int]] | None = None
) -> list[dict[str, Any]]:
    """One entry per round, in round order: honest means, verdict totals and the consensus distance.

    Args:
        peers: every peer's events.
        round_distances: ``round -> (distance, snapshots used)`` (missing rounds: None, 0).

    Returns:
        Dicts with ``round``, ``accuracy``, ``loss``, ``perplexity`` (means over honest peers; None when no
        peer reported a number), ``accepted``, ``rejected`` (totals over honest receivers' verdicts about
        other peers), ``seconds`` (mean), ``peers`` (honest peers that reported the round),
        ``consensus_distance`` and ``consensus_peers`` (honest snapshots it was computed from).
    """
    rounds = honest_round_events(peers)
    totals = _verdict_totals(peers)
    distances = round_distances or {}
    out = []
    for round_ in sorted(rounds):
        events = rounds[round_]
        accepted, rejected = totals.get(round_, (0, 0))
        distance, used = distances.get(round_, (None, 0))
        out.append(
            {
                "round": round_,
                "accuracy": mean_of(e.get("accuracy") for e in events),
                "loss": mean_of(e.get("loss") for e in events),
                "perplexity": mean_of(e.get("perplexity") for e in events),
                "accepted": accepted,
                "rejected": rejected,
                "seconds": mean_of(e.get("seconds") for e in events),
                "peers": len(events),
                "consensus_distance": distance,
                "consensus_peers": used,
            }
        )
    return out


def mean_bytes_sent(peers: Sequence[PeerLog]) -> float | None:
    """Mean ``bytes_sent`` over every honest peer's round events (bytes per peer per round)."""
    return mean_of(e.get("bytes_sent") for events in honest_round_events(peers).values() for e in events)


def consensus_distance(thetas: Sequence[torch.Tensor]) -> float | None:
    """Largest relative distance between two honest models: max over i ≠ j of ‖θ_i − θ_j‖ / ‖θ_i‖.

    Computed in float64 from the n × n matrix of pairwise distances (exact differences, no Gram-matrix
    shortcut), so it costs O(n² d) arithmetic but one pass over the stacked models.

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
    if len(thetas) == 1:
        return 0.0
    stacked = torch.stack([t.detach().reshape(-1).to(torch.float64) for t in thetas])  # (n, d)
    diffs = torch.cdist(stacked, stacked, compute_mode="donot_use_mm_for_euclid_dist")  # (n, n)
    norms = torch.linalg.vector_norm(stacked, dim=1)  # (n,)
    worst = 0.0
    for i in range(len(thetas)):
        row = diffs[i].clone()
        row[i] = 0.0
        largest = float(row.max())
        if norms[i] > 0:
            worst = max(worst, largest / float(norms[i]))
        elif largest > 0:
            return math.inf
    return worst


def _consensus(
    rounds: Sequence[Mapping[str, Any]], final_states: float | None, bound: float = CONSENSUS_BOUND
) -> dict[str, Any]:
    """The consensus figures: the last round's distance, the largest, and the rounds above ``bound``."""
    measured = [
        (r["round"], r["consensus_distance"]) for r in rounds if r.get("consensus_distance") is not None
    ]
    source: str | None = None
    if measured:
        final, source = measured[-1][1], "snapshots"
    else:
        final = final_states
        source = "final_states" if final_states is not None else None
    return {
        "final": final,
        "source": source,
        "final_states": final_states,
        "max": max((d for _, d in measured), default=None),
        "bound": bound,
        "rounds_over_bound": [r for r, d in measured if d > bound],
    }


RECOVERY_STAY_ROUNDS = 2
"""Measured rounds after a fault's recovery round that must stay under the bound too."""


def _fault_recovery(
    faults: Sequence[Mapping[str, Any]], rounds: Sequence[Mapping[str, Any]], bound: float = CONSENSUS_BOUND
) -> list[dict[str, Any]]:
    """Each fault record plus its recovery.

    ``recovered_round`` is the first round ≥ its firing round from which the distance is ≤ ``bound`` and stays so
    for the :data:`RECOVERY_STAY_ROUNDS` measured rounds after it (a fault's spike may come a round or two after
    it fires: a frozen peer's stale state shows once it runs again); ``recovery_rounds`` how many rounds after it
    fired that was; both None if it never did or never fired.
    """
    measured = [
        (r["round"], r["consensus_distance"]) for r in rounds if r.get("consensus_distance") is not None
    ]
    out = []
    for record in faults:
        entry = dict(record)
        fired_round = record.get("fired_round")
        entry["recovered_round"] = entry["recovery_rounds"] = None
        if record.get("fired") and isinstance(fired_round, int):
            later = [r for i, (r, d) in enumerate(measured) if r >= fired_round and d <= bound
                     and all(d2 <= bound for _, d2 in measured[i + 1:i + 1 + RECOVERY_STAY_ROUNDS])]
            if later:
                entry["recovered_round"] = min(later)
                entry["recovery_rounds"] = min(later) - fired_round
        out.append(entry)
    return out


def build_report(
    config: Mapping[str, Any],
    peers: Sequence[PeerLog],
    honest_thetas: Sequence[torch.Tensor],
    observations: RunObservations | None = None,
) -> dict[str, Any]:
    """Assemble the JSON report of a finished simulation.

    Args:
        config: the resolved settings (goes into ``config`` unchanged).
        peers: every peer's events.
        honest_thetas: final flat models ``(d,)`` of the honest peers.
        observations: what the orchestrator measured (snapshot distances, launch times, memory, faults).

    Returns:
        ``config``, ``rounds``, ``final``, ``guard``, ``consensus_distance`` (last round's, see ``consensus``),
        ``consensus``, ``bytes_sent_per_peer_per_round``, ``rounds_completed`` (per peer index, from ``final``
        events), ``updates_applied``, ``trained_alone``, ``rounds_unchanged``, ``pauses``, ``utilization``,
        ``fan_out``, ``round_seconds``, ``startup``, ``memory``, ``start_retries`` (``{index: extra launches}``,
        only peers that needed one), ``fault_plan`` and ``faults`` (each record with ``recovered_round``).
    """
    seen = observations or RunObservations()
    rounds = round_summaries(peers, seen.round_distances)
    last = rounds[-1] if rounds else {}
    completed = {}
    for peer in peers:
        finals = peer.of_kind("final")
        completed[str(peer.index)] = finals[-1].get("rounds_completed") if finals else None
    consensus = _consensus(rounds, consensus_distance(honest_thetas))
    return {
        "config": dict(config),
        "rounds": rounds,
        "final": {key: last.get(key) for key in ("accuracy", "loss", "perplexity")},
        "guard": guard_confusion(peers),
        "consensus_distance": consensus["final"],
        "consensus": consensus,
        "bytes_sent_per_peer_per_round": mean_bytes_sent(peers),
        "rounds_completed": completed,
        "updates_applied": figures.updates_applied(peers),
        "trained_alone": figures.trained_alone(peers),
        "rounds_unchanged": figures.rounds_unchanged(peers),
        "pauses": figures.pauses(peers),
        "utilization": figures.utilization(peers),
        "fan_out": figures.fan_out(peers),
        "round_seconds": figures.round_times(peers),
        "startup": figures.startup_times(peers, seen.launch_times, seen.run_started),
        "memory": figures.memory_summary(seen.memory_samples),
        "start_retries": {str(i): n - 1 for i, n in sorted(seen.start_attempts.items()) if n > 1},
        "fault_plan": dict(seen.fault_plan) if seen.fault_plan is not None else None,
        "faults": _fault_recovery(seen.faults, rounds),
        "stranded_peers": sorted(seen.stranded),
    }
