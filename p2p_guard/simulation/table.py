"""The plain-text summary of a simulation report (the caller prints it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["format_table"]

_ROUND_COLUMNS = (
    ("round", "round", "{:d}"),
    ("loss", "loss", "{:.4f}"),
    ("accuracy", "accuracy", "{:.4f}"),
    ("perplexity", "perplexity", "{:.2f}"),
    ("accepted", "accepted", "{:d}"),
    ("rejected", "rejected", "{:d}"),
    ("seconds", "seconds", "{:.1f}"),
    ("consensus_distance", "distance", "{:.3g}"),
)


def _cell(value: Any, fmt: str) -> str:
    """Format one value; ``-`` for missing values."""
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Right-aligned columns under a header and a rule."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return lines


def _round_lines(rounds: Sequence[Mapping[str, Any]]) -> list[str]:
    """The per-round table; columns that are empty in every round (accuracy for LMs...) are dropped."""
    columns = [c for c in _ROUND_COLUMNS if c[0] == "round" or any(r.get(c[0]) is not None for r in rounds)]
    rows = [[_cell(r.get(key), fmt) for key, _, fmt in columns] for r in rounds]
    return _grid([title for _, title, _ in columns], rows)


def _guard_lines(guard: Mapping[str, Any]) -> list[str]:
    """The 2x2 confusion matrix (rows: truth, columns: verdict) and the rates."""
    header = ["sender", "rejected", "accepted"]
    rows = [
        ["byzantine", str(guard.get("true_positive", 0)), str(guard.get("false_negative", 0))],
        ["honest", str(guard.get("false_positive", 0)), str(guard.get("true_negative", 0))],
    ]
    lines = _grid(header, rows)
    circumstantial = guard.get("false_positive_circumstantial") or 0
    lines.append(f"false positive rate: {_cell(guard.get('false_positive_rate'), '{:.2%}')}" + (
        f" ({circumstantial} circumstantial: timing or reachability; on content "
        f"{_cell(guard.get('false_positive_rate_on_content'), '{:.2%}')})" if circumstantial else ""))
    lines.append(f"detection rate:      {_cell(guard.get('true_positive_rate'), '{:.2%}')}")
    if guard.get("unknown_sender"):
        lines.append(f"verdicts about unknown senders: {guard['unknown_sender']}")
    reasons = guard.get("reasons") or {}
    if reasons:
        lines.append("rejections by reason: " + ", ".join(f"{k}={v}" for k, v in reasons.items()))
    return lines


def _stat(figure: Mapping[str, Any] | None, fmt: str) -> str:
    """``mean M, max X`` of a ``{mean, max}`` figure."""
    figure = figure or {}
    return f"mean {_cell(figure.get('mean'), fmt)}, max {_cell(figure.get('max'), fmt)}"


def _health_lines(report: Mapping[str, Any]) -> list[str]:
    """Consensus, updates applied, training alone, pauses, utilization, fan-out, timing and memory."""
    consensus = report.get("consensus") or {}
    over = consensus.get("rounds_over_bound") or []
    lines = [
        f"consensus distance (max ‖θi−θj‖/‖θi‖): {_cell(report.get('consensus_distance'), '{:.3g}')}"
        f" (last round; max {_cell(consensus.get('max'), '{:.3g}')}; "
        f"rounds over {_cell(consensus.get('bound'), '{:g}')}: {len(over)}; from {consensus.get('source') or '-'})"
    ]
    applied = report.get("updates_applied") or {}
    lines.append(
        f"honest updates applied by another honest peer: {applied.get('applied', '-')}/{applied.get('committed', '-')}"
        f" ({_cell(applied.get('fraction'), '{:.1%}')}; before the last round "
        f"{_cell(applied.get('fraction_before_last_round'), '{:.1%}')}"
        + (f"; {applied['late_applied']} taken a round late" if applied.get("late_applied") else "") + ")"
    )
    alone = report.get("trained_alone") or {}
    alone_peers = ", ".join(f"peer{i}: {len(r)}" for i, r in (alone.get("by_peer") or {}).items())
    lines.append(
        f"rounds an honest peer trained alone: {alone.get('rounds', '-')}"
        + (f" ({alone_peers})" if alone_peers else "")
    )
    unchanged = report.get("rounds_unchanged") or {}
    if unchanged.get("rounds"):
        unchanged_peers = ", ".join(f"peer{i}: {len(r)}" for i, r in (unchanged.get("by_peer") or {}).items())
        lines.append(f"rounds an honest peer applied nothing (no other update arrived; model unchanged): "
                     f"{unchanged['rounds']} ({unchanged_peers})")
    pauses = report.get("pauses") or {}
    lines.append(
        f"pauses: {pauses.get('pauses', '-')} ({_cell(pauses.get('paused_s'), '{:.1f}')} s paused, "
        f"{pauses.get('unresumed', '-')} not resumed)"
    )
    util = report.get("utilization") or {}
    lines.append(
        f"compute utilization: min {_cell(util.get('min'), '{:.1%}')}, mean {_cell(util.get('mean'), '{:.1%}')}"
    )
    fan = report.get("fan_out") or {}
    lines.append(
        f"per peer per round: fetched {_stat(fan.get('fetched'), '{:.1f}')}; "
        f"served {_stat(fan.get('served'), '{:.1f}')}"
    )
    lines.append(
        f"bytes per peer per round: sent {_stat(fan.get('bytes_sent'), '{:,.0f}')}; "
        f"received (used) {_stat(fan.get('bytes_received'), '{:,.0f}')}; "
        f"received on the wire {_stat(fan.get('wire_bytes_received'), '{:,.0f}')}"
    )
    wire_by_peer = {i: (f.get("wire_bytes_received") or {}).get("mean") for i, f in (fan.get("by_peer") or {}).items()}
    if any(v is not None for v in wire_by_peer.values()):
        lines.append("wire bytes received per round, mean by peer: "
                     + ", ".join(f"peer{i} {_cell(v, '{:,.0f}')}" for i, v in wire_by_peer.items()))
    startup = report.get("startup") or {}
    lines.append(
        f"start-up: {_stat(startup, '{:.1f}')} s per peer, whole swarm {_cell(startup.get('swarm_s'), '{:.1f}')} s; "
        f"round time {_stat(report.get('round_seconds'), '{:.1f}')} s"
    )
    memory = report.get("memory") or {}
    lines.append(
        f"PSS per peer: mean {_cell(memory.get('mean_mib'), '{:.0f}')} MiB, "
        f"max {_cell(memory.get('max_mib'), '{:.0f}')} MiB"
    )
    retries = report.get("start_retries") or {}
    if retries:
        lines.append("failed starts retried: " + ", ".join(f"peer{i}×{n}" for i, n in retries.items()))
    return lines


def _fault_lines(faults: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per planned fault: what, when it fired, when it ended, when consensus recovered."""
    lines = []
    for f in faults:
        target = f"peer{f['peer']}" if f.get("peer") is not None else "bootstrap"
        fired = (
            f"fired at round {f.get('fired_round')} (+{_cell(f.get('fired_after_s'), '{:.1f}')} s)"
            if f.get("fired")
            else f"NOT fired{': ' + f['error'] if f.get('error') else ''}"
        )
        ended = f", ended at round {f['ended_round']}" if f.get("ended_round") is not None else ""
        recovered = (
            f", distance back under bound at round {_cell(f.get('recovered_round'), '{:d}')}"
            if f.get("fired")
            else ""
        )
        lines.append(
            f"fault {f.get('number')}: {f.get('kind')} {target} at round {f.get('round')}: {fired}{ended}{recovered}"
        )
    return lines


def format_table(report: Mapping[str, Any]) -> str:
    """Render a report (see ``build_report``) as text: rounds, guard confusion, swarm health, faults.

    Args:
        report: the report dict.

    Returns:
        Multi-line text, without a trailing newline.
    """
    config = report.get("config", {})
    title = (
        f"task={config.get('task')} honest={config.get('honest')} byzantine={config.get('byzantine')} "
        f"attack={config.get('attack')} guard={config.get('guard')} rounds={config.get('rounds')} "
        f"seed={config.get('seed')} codec={config.get('codec', 'fp32')}"
        + (f" max_upload_mbit={config['max_upload_mbit']:g}" if config.get("max_upload_mbit") is not None else "")
        + (f" peer_upload_mbit={','.join(config['peer_upload_mbit'])}" if config.get("peer_upload_mbit") else "")
    )
    lines = [title, "", *_round_lines(report.get("rounds", [])), ""]
    lines.append("guard verdicts (honest receivers; a rejection is a positive):")
    lines.extend(_guard_lines(report.get("guard", {})))
    lines.append("")
    lines.extend(_health_lines(report))
    faults = report.get("faults") or []
    if faults:
        lines.append("")
        lines.extend(_fault_lines(faults))
    final = report.get("final", {})
    parts = [
        f"{k}={_cell(final.get(k), '{:.4f}')}"
        for k in ("accuracy", "loss", "perplexity", "asr", "asr_max")
        if final.get(k) is not None
    ]
    lines.append("final: " + (" ".join(parts) if parts else "-"))
    return "\n".join(lines)
