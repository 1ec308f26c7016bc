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
    lines.append(f"false positive rate: {_cell(guard.get('false_positive_rate'), '{:.2%}')}")
    lines.append(f"detection rate:      {_cell(guard.get('true_positive_rate'), '{:.2%}')}")
    if guard.get("unknown_sender"):
        lines.append(f"verdicts about unknown senders: {guard['unknown_sender']}")
    reasons = guard.get("reasons") or {}
    if reasons:
        lines.append("rejections by reason: " + ", ".join(f"{k}={v}" for k, v in reasons.items()))
    return lines


def format_table(report: Mapping[str, Any]) -> str:
    """Render a report (see ``build_report``) as a text table: rounds, guard confusion, consensus, traffic.

    Args:
        report: the report dict.

    Returns:
        Multi-line text, without a trailing newline.
    """
    config = report.get("config", {})
    title = (
        f"task={config.get('task')} honest={config.get('honest')} byzantine={config.get('byzantine')} "
        f"attack={config.get('attack')} guard={config.get('guard')} rounds={config.get('rounds')} "
        f"seed={config.get('seed')}"
    )
    lines = [title, "", *_round_lines(report.get("rounds", [])), ""]
    lines.append("guard verdicts (honest receivers; a rejection is a positive):")
    lines.extend(_guard_lines(report.get("guard", {})))
    lines.append("")
    lines.append(
        f"consensus distance (max ‖θi−θj‖/‖θi‖): {_cell(report.get('consensus_distance'), '{:.3g}')}"
    )
    lines.append(
        f"bytes sent per peer per round: {_cell(report.get('bytes_sent_per_peer_per_round'), '{:,.0f}')}"
    )
    final = report.get("final", {})
    parts = [
        f"{k}={_cell(final.get(k), '{:.4f}')}"
        for k in ("accuracy", "loss", "perplexity")
        if final.get(k) is not None
    ]
    lines.append("final: " + (" ".join(parts) if parts else "-"))
    return "\n".join(lines)
