"""The guard's cost per round: wall time of a guard on k sampled rows plus the receiver's own, against d.

A round samples k senders (the fan-out, default 8), so the guard judges n = k + 1 rows of d float32 values.
:func:`time_guard` builds such a stack (:func:`synthetic_rows`) and times the guard's whole call, the
:class:`~p2p_guard.guard.guard.Guard` wrapper included, as the round logic makes it; for the ``semantic`` guard
it also times the robust-centre stage alone (NNM + trimmed mean, the only stage quadratic in k).
:func:`inner_phase_seconds` times the inner phase of a model of about d parameters (the Shakespeare char-GPT at
a size with d = 10⁷ exactly), the compute half of a round, so that the guard's cost can be read as a fraction
of a round. :func:`render` writes the Markdown report; the plot is :func:`write_plot`'s.

Timings depend on the machine and its load: the report records both, and the fraction of a round is measured
in one process on one thread, the guard and the inner phase beside each other, so that a load shared by both
cancels in the ratio.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from p2p_guard.bench.wire import synthetic_update

__all__ = [
    "ROUND_MODEL",
    "inner_phase_seconds",
    "linear_exponent",
    "render",
    "synthetic_rows",
    "time_guard",
    "write_plot",
]

logger = logging.getLogger(__name__)

ROUND_MODEL = "shakespeare:n_layers=8,d_model=320,n_heads=8,context=256"
"""The model whose inner phase stands for a round at d = 10⁷: 2·84·320 + 256·320 + 8·(12·320² + 13·320) + 2·320
= 10,000,000 parameters (the formula of :mod:`p2p_guard.tasks.shakespeare`)."""

_ONCE_FROM = 10**7  # from this d on a cell is timed once (memory and CPU on a shared machine)


def synthetic_rows(n: int, d: int, seed: int) -> torch.Tensor:
    """``(n, d)`` float32 honest-looking pseudo-gradients: one shared direction plus noise, norms 0.7–1.4×.

    x_i = s_i · (μ + ξ_i),  μ = :func:`~p2p_guard.bench.wire.synthetic_update` (block-wise scales),
    ξ_i ~ N(0, σ_b²) with σ_b the block's scale, s_i ~ U(0.7, 1.4): a clean round, in which the guard's
    most expensive path runs (no row rejected, so the centered clipping applies).

    Args:
        n: rows, ``>= 1``.
        d: columns, ``>= 1``.
        seed: seed of the rows.

    Returns:
        A new contiguous ``(n, d)`` float32 tensor.
    """
    generator = torch.Generator().manual_seed(seed)
    mean = synthetic_update(d, seed)
    scale = mean.abs().mean()
    rows = torch.empty(n, d)
    for i in range(n):
        rows[i] = mean + torch.randn(d, generator=generator) * scale
        rows[i] *= 0.7 + 0.7 * float(torch.rand(1, generator=generator))
    return rows


def time_guard(
    spec: str,
    k: int,
    d: int,
    *,
    seed: int = 0,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time one guard on k sampled rows plus the receiver's own row.

    Args:
        spec: guard spec (``semantic``).
        k: fan-out, ``>= 1``; the guard gets n = k + 1 rows, row 0 the receiver's own.
        d: parameters per row, ``>= 1``.
        seed: seed of the rows.
        repeats: timed calls below d = 10⁷ (the fastest counts); one at d ≥ 10⁷.
        progress: called with a short line before the cell (None: silent).

    Returns:
        ``spec``, ``k``, ``n``, ``numel``, ``rows_bytes`` (the stack's size), ``guard_s`` (seconds, the whole
        call), ``centre_s`` (the robust-centre stage alone; None for a guard other than ``semantic``),
        ``ns_per_value`` (guard_s / (n·d), in nanoseconds), ``rejected`` (rows the guard rejected; 0 expected).

    Raises:
        ValueError: on ``k < 1`` or ``d < 1``, or a bad spec.
    """
    from p2p_guard.guard.base import AggregationContext, breakdown_f
    from p2p_guard.guard.centre import robust_centre
    from p2p_guard.guard.registry import build_guard

    if k < 1 or d < 1:
        raise ValueError(f"time_guard needs k >= 1 and d >= 1; got k={k}, d={d}")
    if progress is not None:
        progress(f"{spec} k={k} d={d:.0e}")
    n = k + 1
    guard = build_guard(spec)
    rows = synthetic_rows(n, d, seed)
    senders = tuple(f"peer{i:03d}" for i in range(n))
    ctx = AggregationContext(senders=senders, round=0, generator=torch.Generator().manual_seed(seed), own_index=0)
    passes = repeats if d < _ONCE_FROM else 1
    guard_s, centre_s = math.inf, math.inf
    rejected = 0
    for _ in range(passes):
        started = time.perf_counter()
        result = guard(rows, ctx)
        guard_s = min(guard_s, time.perf_counter() - started)
        rejected = sum(not verdict.accepted for verdict in result.verdicts)
        del result
    if spec == "semantic":
        for _ in range(passes):
            started = time.perf_counter()
            robust_centre(rows, breakdown_f(n))
            centre_s = min(centre_s, time.perf_counter() - started)
    return {
        "spec": spec,
        "k": k,
        "n": n,
        "numel": d,
        "rows_bytes": rows.numel() * rows.element_size(),
        "guard_s": guard_s,
        "centre_s": centre_s if math.isfinite(centre_s) else None,
        "ns_per_value": 1e9 * guard_s / (n * d),
        "rejected": rejected,
    }


def inner_phase_seconds(task_spec: str = ROUND_MODEL, *, steps: int = 2, seed: int = 0) -> dict[str, Any]:
    """Time the inner phase of a round of ``task_spec`` on this CPU: ``steps`` timed AdamW steps, scaled to H.

    One untimed step first (allocations, the first batch); then ``steps`` steps timed together, and the
    task's H (``default_hparams.inner_steps``) times the mean step is the inner phase. A round takes at least
    this long (the communication of round r overlaps the inner phase of r + 1 at best; DESIGN.md, step 6).

    Args:
        task_spec: the task spec of the model.
        steps: timed steps, ``>= 1``.
        seed: seed of the model and the batches.

    Returns:
        ``task``, ``numel``, ``inner_steps`` (H), ``batch_size``, ``step_s`` (mean seconds per step),
        ``inner_s`` (H · step_s).

    Raises:
        ValueError: on ``steps < 1`` or a bad task spec.
    """
    from p2p_guard.tasks import load_task
    from p2p_guard.training.inner import make_inner_optimizer, run_inner_steps

    if steps < 1:
        raise ValueError(f"steps must be >= 1; got {steps}")
    task = load_task(task_spec)
    model = task.build_model(seed)
    shard = task.shard(1, 0, "iid", seed)
    optimizer = make_inner_optimizer(model, task)
    generator = torch.Generator().manual_seed(seed)
    run_inner_steps(model, task, shard, 1, optimizer, generator)
    started = time.perf_counter()
    run_inner_steps(model, task, shard, steps, optimizer, generator)
    step_s = (time.perf_counter() - started) / steps
    hparams = task.default_hparams
    return {
        "task": task_spec,
        "numel": sum(p.numel() for p in model.parameters()),
        "inner_steps": hparams.inner_steps,
        "batch_size": hparams.batch_size,
        "step_s": step_s,
        "inner_s": hparams.inner_steps * step_s,
    }


def linear_exponent(cells: Sequence[dict[str, Any]], k: int) -> float | None:
    """The slope of log(guard_s) against log(d) between the smallest and largest d at fan-out k (1: linear).

    Returns:
        The exponent, or None with fewer than two sizes at that k.
    """
    mine = sorted((c["numel"], c["guard_s"]) for c in cells if c["k"] == k)
    if len(mine) < 2 or mine[0][0] == mine[-1][0]:
        return None
    (d0, t0), (d1, t1) = mine[0], mine[-1]
    return math.log(t1 / t0) / math.log(d1 / d0)


def render(cells: Sequence[dict[str, Any]], inner: dict[str, Any] | None, meta: dict[str, Any], plot: str | None
           ) -> str:
    """The Markdown report: the table of cells, the exponents, and the fraction of a round at the largest d.

    Args:
        cells: what :func:`time_guard` returned, one per (k, d).
        inner: what :func:`inner_phase_seconds` returned, or None (no fraction).
        meta: ``command``, ``machine`` (dict), ``threads``, ``load`` (1-minute load averages before and after),
            ``wall_s``.
        plot: the plot's path relative to the report, or None.

    Returns:
        The report's text.
    """
    spec = cells[0]["spec"] if cells else "?"
    machine = meta.get("machine", {})
    lines = [
        "# Guard cost per round",
        "",
        f"Generated by `{meta.get('command', 'p2p-guard bench guard')}`; do not edit by hand. "
        f"Guard `{spec}`, k sampled rows plus the receiver's own (n = k + 1), d float32 parameters each, "
        f"{meta.get('threads', 1)} torch thread(s). Rows: one shared direction plus noise, a clean round (no row "
        f"rejected, so every stage runs, the centered clipping included).",
        "",
        f"Machine: {', '.join(f'{key} {value}' for key, value in machine.items())}; 1-minute load average "
        f"{meta.get('load', '?')} (before, after). Wall times on a loaded machine are inflated: read the "
        "ratios (the exponent, the fraction of a round measured beside the inner phase).",
        "",
        "| k | n | d | rows (MB) | guard (s) | centre stage (s) | ns per value | rejected |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        centre = "" if c["centre_s"] is None else f"{c['centre_s']:.3f}"
        lines.append(
            f"| {c['k']} | {c['n']} | {c['numel']:.0e} | {c['rows_bytes'] / 1e6:.0f} | {c['guard_s']:.3f} | "
            f"{centre} | {c['ns_per_value']:.2f} | {c['rejected']} |"
        )
    fanouts = sorted({c["k"] for c in cells})
    exponents = {k: linear_exponent(cells, k) for k in fanouts}
    shown = [f"k = {k}: {e:.2f}" for k, e in exponents.items() if e is not None]
    if shown:
        lines += ["", "Exponent of d (slope of log time against log d, smallest to largest d; 1 is linear): "
                  + ", ".join(shown) + "."]
    if inner is not None and cells:
        largest = max(c["numel"] for c in cells)
        lines += [
            "",
            f"A round at d ≈ {inner['numel']:,} ({inner['task']}): its inner phase is H = {inner['inner_steps']} "
            f"AdamW steps of batch {inner['batch_size']}, measured at {inner['step_s']:.2f} s per step, so "
            f"{inner['inner_s']:.0f} s here. A round lasts at least its inner phase (the communication overlaps "
            f"it at best), so the fraction below is an upper bound of the guard's share of a round.",
            "",
            f"| k | guard at d = {largest:.0e} (s) | fraction of the inner phase | target |",
            "|---:|---:|---:|---|",
        ]
        for c in cells:
            if c["numel"] == largest:
                fraction = c["guard_s"] * inner["numel"] / largest / inner["inner_s"]
                lines.append(f"| {c['k']} | {c['guard_s']:.2f} | {fraction:.1%} | "
                             f"{'≤ 5 %: holds' if fraction <= 0.05 else '≤ 5 %: misses'} |")
    if plot is not None:
        lines += ["", f"![guard time against d]({plot})"]
    lines += ["", f"Run time of the benchmark: {meta.get('wall_s', 0):.0f} s.", ""]
    return "\n".join(lines)


def write_plot(cells: Sequence[dict[str, Any]], path: Path) -> Path:
    """A log-log plot of the guard's time against d, one line per k (matplotlib, ``Agg``); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k in sorted({c["k"] for c in cells}):
        mine = sorted((c["numel"], c["guard_s"]) for c in cells if c["k"] == k)
        ax.plot([m[0] for m in mine], [m[1] for m in mine], marker="o", label=f"k = {k} (n = {k + 1})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("d (parameters)")
    ax.set_ylabel("guard wall time (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"{cells[0]['spec'] if cells else ''} guard: time per round against d", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
