"""Swarm-health figures of a run (round protocol version 2), from the peers' events; pure functions, no I/O.

Definitions (issue 8; every figure is over honest peers unless it says otherwise):

- **Updates applied** (rule 2): an honest update is a ``commit`` event ``(sender, round)`` of an honest peer
  (a restarted peer's repeated commit of one round counts once). It is applied when some *other* honest peer has
  an accepted ``verdict`` with that ``sender`` and ``commit_round`` (a verdict without ``commit_round``: its
  ``round``). ``fraction`` = applied / committed. ``fraction_before_last_round`` leaves out the commits of the
  run's last round, which no later round can apply.
- **Trained alone** (rule 7): an honest peer's ``round`` event whose aggregate used no other peer's update, i.e.
  the peer has no accepted verdict about another sender with that aggregation ``round``; a round that applied
  nothing (``applied`` false: no other row arrived, the model was left unchanged) is not training alone.
- **Rounds unchanged**: an honest peer's ``round`` event with ``applied`` false: no other peer's update arrived
  in it, so the peer left its model as it was (a peer that runs ahead of the others, e.g. the one with the slow
  uplink in docs/networking.md's heterogeneous-uplink run, has nothing but such rounds).
- **Pauses**: ``pause`` events (too few others present) and ``resume`` events with their ``paused_s``.
- **Compute utilization** (rule 5) per peer: Σ ``compute_s`` ÷ Σ ``seconds`` over its round events.
- **Fan-out** (rule 4): ``fetched``, ``served``, ``bytes_sent``, ``bytes_received``, ``wire_bytes_received`` of
  each round event; mean and max over every honest round event, and per peer.
- **Start-up** per peer: its first ``ready`` event's time − its first launch (unix seconds, both measured on this
  machine's clock); ``swarm_s``: the last peer's first ready − the run's start.
- **Memory**: samples of each peer's proportional set size (its process and all its children), in MiB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from p2p_guard.simulation.peerlog import PeerLog, max_of, mean_of, number, sender_roles

__all__ = [
    "FAN_OUT_KEYS",
    "fan_out",
    "memory_summary",
    "pauses",
    "round_times",
    "rounds_unchanged",
    "startup_times",
    "trained_alone",
    "updates_applied",
    "utilization",
]

FAN_OUT_KEYS = ("fetched", "served", "bytes_sent", "bytes_received", "wire_bytes_received")
MIB = 1024 * 1024


def _int(value: Any) -> int | None:
    """``value`` if it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _honest(peers: Sequence[PeerLog]) -> list[PeerLog]:
    return [p for p in peers if not p.byzantine]


def _last_round(peers: Sequence[PeerLog]) -> int | None:
    """The highest round any honest peer reported."""
    rounds = [
        r for p in _honest(peers) for e in p.of_kind("round") if (r := _int(e.get("round"))) is not None
    ]
    return max(rounds) if rounds else None


def updates_applied(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """How many honest updates some other honest peer applied (see the module docstring).

    Returns:
        ``committed``, ``applied``, ``fraction`` (None when nothing was committed), ``fraction_before_last_round``,
        ``mean_appliers`` (other honest peers that applied an update, mean over updates), ``late_applied``
        (rows an honest peer's guard accepted a round or more after their sender's round, carried over by
        ``swarm.late``: the sum of the round events' ``late_applied``) and ``by_peer``:
        ``{index: {committed, applied, fraction}}``.
    """
    roles = sender_roles(peers)
    appliers: dict[tuple[str, int], set[str]] = {}
    for peer in _honest(peers):
        me = peer.peer_id
        for verdict in peer.of_kind("verdict"):
            sender = verdict.get("sender")
            commit_round = _int(verdict.get("commit_round", verdict.get("round")))
            if (
                not isinstance(sender, str)
                or sender == me
                or commit_round is None
                or not verdict.get("accepted")
            ):
                continue
            if roles.get(sender) is False and me is not None:
                appliers.setdefault((sender, commit_round), set()).add(me)
    last = _last_round(peers)
    by_peer: dict[str, dict[str, Any]] = {}
    counts: list[int] = []
    early_total = early_applied = 0
    for peer in _honest(peers):
        me = peer.peer_id
        rounds = {r for e in peer.of_kind("commit") if (r := _int(e.get("round"))) is not None}
        applied = [r for r in rounds if me is not None and (me, r) in appliers]
        counts.extend(len(appliers.get((me, r), ())) if me is not None else 0 for r in rounds)
        early = [r for r in rounds if last is None or r < last]
        early_total += len(early)
        early_applied += sum(r in applied for r in early)
        by_peer[str(peer.index)] = {
            "committed": len(rounds),
            "applied": len(applied),
            "fraction": len(applied) / len(rounds) if rounds else None,
        }
    committed = sum(v["committed"] for v in by_peer.values())
    applied_total = sum(v["applied"] for v in by_peer.values())
    return {
        "committed": committed,
        "applied": applied_total,
        "fraction": applied_total / committed if committed else None,
        "fraction_before_last_round": early_applied / early_total if early_total else None,
        "mean_appliers": sum(counts) / len(counts) if counts else None,
        "late_applied": sum(max(0, _int(e.get("late_applied")) or 0)
                            for peer in _honest(peers) for e in peer.of_kind("round")),
        "by_peer": by_peer,
    }


def trained_alone(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """Honest rounds whose aggregate used no other peer's update (see the module docstring).

    Returns:
        ``any`` (bool), ``rounds`` (how many such round events) and ``by_peer``: ``{index: [round, ...]}`` (only
        peers with such rounds).
    """
    by_peer: dict[str, list[int]] = {}
    for peer in _honest(peers):
        me = peer.peer_id
        used = {
            r
            for v in peer.of_kind("verdict")
            if v.get("accepted") and v.get("sender") != me and (r := _int(v.get("round"))) is not None
        }
        applied = {r for e in peer.of_kind("round")
                   if e.get("applied") is not False and (r := _int(e.get("round"))) is not None}
        alone = sorted(applied - used)
        if alone:
            by_peer[str(peer.index)] = alone
    total = sum(len(v) for v in by_peer.values())
    return {"any": total > 0, "rounds": total, "by_peer": by_peer}


def rounds_unchanged(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """Honest round events that applied nothing (``applied`` false; see the module docstring).

    Returns:
        ``rounds`` (how many such round events) and ``by_peer``: ``{index: [round, ...]}`` (only peers with such
        rounds).
    """
    by_peer: dict[str, list[int]] = {}
    for peer in _honest(peers):
        unchanged = sorted(r for e in peer.of_kind("round")
                           if e.get("applied") is False and (r := _int(e.get("round"))) is not None)
        if unchanged:
            by_peer[str(peer.index)] = unchanged
    return {"rounds": sum(len(v) for v in by_peer.values()), "by_peer": by_peer}


def pauses(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """Pause and resume totals of the honest peers.

    Returns:
        ``pauses``, ``resumes``, ``paused_s`` (Σ of the resumes' ``paused_s``), ``unresumed`` (pauses without a
        later resume) and ``by_peer``: ``{index: {pauses, paused_s}}`` (only peers that paused).
    """
    by_peer: dict[str, dict[str, Any]] = {}
    total_pauses = total_resumes = 0
    total_s = 0.0
    for peer in _honest(peers):
        n_pause = len(peer.of_kind("pause"))
        resumes = peer.of_kind("resume")
        seconds = sum(s for e in resumes if (s := number(e.get("paused_s"))) is not None)
        total_pauses += n_pause
        total_resumes += len(resumes)
        total_s += seconds
        if n_pause:
            by_peer[str(peer.index)] = {"pauses": n_pause, "paused_s": seconds}
    return {
        "pauses": total_pauses,
        "resumes": total_resumes,
        "paused_s": total_s,
        "unresumed": max(0, total_pauses - total_resumes),
        "by_peer": by_peer,
    }


def utilization(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """Compute utilization Σ compute_s ÷ Σ seconds of each honest peer.

    Returns:
        ``by_peer`` ``{index: fraction or None}``, ``min`` and ``mean`` over the peers that have one.
    """
    by_peer: dict[str, float | None] = {}
    for peer in _honest(peers):
        rounds = peer.of_kind("round")
        compute = [c for e in rounds if (c := number(e.get("compute_s"))) is not None]
        wall = sum(s for e in rounds if (s := number(e.get("seconds"))) is not None)
        by_peer[str(peer.index)] = sum(compute) / wall if compute and wall > 0 else None
    values = [v for v in by_peer.values() if v is not None]
    return {
        "by_peer": by_peer,
        "min": min(values) if values else None,
        "mean": sum(values) / len(values) if values else None,
    }


def _stats(values: Sequence[Any]) -> dict[str, float | None]:
    return {"mean": mean_of(values), "max": max_of(values)}


def fan_out(peers: Sequence[PeerLog]) -> dict[str, Any]:
    """Per-round fan-out of the honest peers (payloads fetched and served, bytes sent and received).

    Returns:
        ``{key: {mean, max}}`` for each of :data:`FAN_OUT_KEYS` over every honest round event, and ``by_peer``:
        ``{index: {key: {mean, max}}}``.
    """
    out: dict[str, Any] = {}
    for key in FAN_OUT_KEYS:
        out[key] = _stats([e.get(key) for p in _honest(peers) for e in p.of_kind("round")])
    out["by_peer"] = {
        str(p.index): {key: _stats([e.get(key) for e in p.of_kind("round")]) for key in FAN_OUT_KEYS}
        for p in _honest(peers)
    }
    return out


def round_times(peers: Sequence[PeerLog]) -> dict[str, float | None]:
    """Mean and max ``seconds`` (wall time of one round) over every honest round event."""
    return _stats([e.get("seconds") for p in _honest(peers) for e in p.of_kind("round")])


def startup_times(
    peers: Sequence[PeerLog], launch_times: Mapping[int, float], run_started: float | None = None
) -> dict[str, Any]:
    """Start-up time of every peer: its first ``ready`` − its first launch, in seconds.

    Args:
        peers: every peer's events (honest and Byzantine: all must start).
        launch_times: unix time of each peer's first launch, by index.
        run_started: unix time the run began (the bootstrap node's launch); None: the first peer launch.

    Returns:
        ``by_peer`` ``{index: seconds or None}``, ``mean``, ``max``, ``swarm_s`` (last first-ready − run start;
        None unless every peer got ready) and ``peer_reported_mean`` (mean of the ready events' ``startup_s``).
    """
    by_peer: dict[str, float | None] = {}
    first_ready: list[float] = []
    reported = []
    for peer in peers:
        ready = peer.of_kind("ready")
        at = number(ready[0].get("time")) if ready else None
        launched = launch_times.get(peer.index)
        by_peer[str(peer.index)] = at - launched if at is not None and launched is not None else None
        if at is not None:
            first_ready.append(at)
        if ready:
            reported.append(ready[0].get("startup_s"))
    start = run_started if run_started is not None else min(launch_times.values(), default=None)
    everyone = bool(peers) and len(first_ready) == len(peers)
    return {
        "by_peer": by_peer,
        "mean": mean_of(by_peer.values()),
        "max": max_of(by_peer.values()),
        "swarm_s": max(first_ready) - start if everyone and start is not None else None,
        "peer_reported_mean": mean_of(reported),
    }


def memory_summary(samples: Mapping[int, Sequence[int]]) -> dict[str, Any]:
    """Proportional set size per peer from samples in bytes.

    Args:
        samples: ``index -> PSS samples`` (bytes; the peer's process and its children together).

    Returns:
        ``by_peer`` ``{index: {max_mib, mean_mib, samples}}``, ``max_mib`` (largest peer maximum) and
        ``mean_mib`` (mean of the peers' means); None figures without samples.
    """
    by_peer = {
        str(i): {"max_mib": max(s) / MIB, "mean_mib": sum(s) / len(s) / MIB, "samples": len(s)}
        for i, s in sorted(samples.items())
        if s
    }
    return {
        "by_peer": by_peer,
        "max_mib": max((v["max_mib"] for v in by_peer.values()), default=None),
        "mean_mib": mean_of(v["mean_mib"] for v in by_peer.values()),
    }
