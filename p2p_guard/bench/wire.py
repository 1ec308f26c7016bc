"""The wire benchmark without a swarm: payload size and cost of every codec, and DiLoCo quality per codec.

Two parts, both in one process:

1. **Sizes and cost** (:func:`measure_codecs`). For each codec and each d, a synthetic pseudo-gradient
   x ∈ R^d (float32, seeded): Gaussian values with one scale per block of 4096 drawn log-uniformly over
   [10⁻³, 10⁻¹], so blocks differ in magnitude as layers do. Reported per (codec, d): bytes per parameter
   ``len(payload) / d`` (one copy of one round's update), encode and decode wall time (decode is the
   receiver's ``decode_update``, all checks included), and the relative reconstruction error
   ‖x − D(C(x))‖₂ / ‖x‖₂ of a single round (no error feedback).
2. **Convergence** (:func:`convergence`). n simulated DiLoCo workers on the digits task, each a
   :class:`~p2p_guard.training.local.LocalModel` from the same θ_0 with its own shard, each sending through
   its own :class:`~p2p_guard.training.error_feedback.ErrorFeedback`; every round the decoded payloads are
   averaged (mean aggregation, no guard, no attack) and every worker applies the mean with its outer
   Nesterov step (so all keep one θ). Reported per codec: test accuracy and loss after the last round,
   the accuracy difference to fp32 in points, and bytes per parameter per round of one worker's payload.

The swarm-level figures of issue 10 (8 peers over loopback, upload caps, the guard under attack per codec)
need the live swarm and are not measured here.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from p2p_guard.protocol import Rejected, decode_update, encode_update
from p2p_guard.training.error_feedback import ErrorFeedback

__all__ = ["WIRE_CODECS", "convergence", "format_tables", "measure_codecs", "synthetic_update"]

logger = logging.getLogger(__name__)

WIRE_CODECS: tuple[str, ...] = (
    "fp32",
    "fp16",
    "int8",
    "int4",
    "topk:density=0.01",
    "topk:density=0.02",
    "topk:density=0.05",
)
"""The codecs the benchmark compares (issue 10: fp32, fp16, int8, 4-bit, topk at 1, 2 and 5 %)."""

ONCE_FROM = 10**7
"""From this d on, :func:`measure_codecs` encodes and decodes once (no repeats)."""
_BLOCK = 4096
_SALT_INNER = 1  # as bench/cell.py and swarm/peer.py: the inner batches' round_generator salt


def synthetic_update(numel: int, seed: int) -> torch.Tensor:
    """A ``(numel,)`` float32 stand-in for a pseudo-gradient: N(0, 1) · 10^U(−3, −1) per block of 4096."""
    generator = torch.Generator().manual_seed(seed)
    blocks = -(-numel // _BLOCK)
    scales = torch.pow(10.0, torch.rand(blocks, generator=generator) * 2 - 3)
    values = torch.randn(numel, generator=generator)
    return values * scales.repeat_interleave(_BLOCK)[:numel]


def measure_codecs(
    codecs: Sequence[str],
    sizes: Sequence[int],
    *,
    seed: int = 0,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Size, time and error of each codec at each d (part 1 of the module docstring).

    Args:
        codecs: Codec strings.
        sizes: Values of d.
        seed: Seed of the synthetic updates.
        repeats: Encode/decode passes per cell below d = 10⁷ (the times are the fastest pass); one pass at
            d ≥ 10⁷, which costs memory and CPU on a shared machine.
        progress: Called with a short line before each measurement (None: silent).

    Returns:
        One dict per (d, codec): ``codec``, ``numel``, ``payload_bytes``, ``bytes_per_param``, ``encode_s``,
        ``decode_s`` (seconds, fastest pass), ``rel_error``.

    Raises:
        ValueError: An unknown codec, or a payload its own decoder rejects (a bug).
    """
    rows = []
    for numel in sizes:
        vector = synthetic_update(numel, seed)
        norm = float(vector.norm())
        for codec in codecs:
            if progress is not None:
                progress(f"{codec} at d={numel:.0e}")
            encode_s, decode_s = math.inf, math.inf
            for _ in range(repeats if numel < ONCE_FROM else 1):
                started = time.perf_counter()
                payload = encode_update(vector, codec)
                encoded = time.perf_counter()
                decoded = decode_update(payload, codec, numel)
                encode_s = min(encode_s, encoded - started)
                decode_s = min(decode_s, time.perf_counter() - encoded)
            if isinstance(decoded, Rejected):
                raise ValueError(f"{codec} rejected its own payload at d={numel}: {decoded.detail}")
            rows.append(
                {
                    "codec": codec,
                    "numel": numel,
                    "payload_bytes": len(payload),
                    "bytes_per_param": len(payload) / numel,
                    "encode_s": encode_s,
                    "decode_s": decode_s,
                    "rel_error": float((vector - decoded).norm()) / norm if norm else 0.0,
                }
            )
            del payload, decoded
    return rows


def convergence(
    codecs: Sequence[str],
    *,
    workers: int = 8,
    rounds: int = 20,
    seed: int = 0,
    inner_steps: int | None = None,
    partition: str = "iid",
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Final digits accuracy of in-process DiLoCo per codec, with error feedback (part 2 of the docstring).

    Args:
        codecs: Codec strings; ``fp32`` should be among them (the reference of ``accuracy_vs_fp32``).
        workers: n, simulated workers.
        rounds: Outer rounds.
        seed: Run seed (θ_0, shards, inner batches); the same for every codec.
        inner_steps: H (None: the task's default).
        partition: ``iid`` or ``dirichlet:ALPHA``.
        progress: Called with a short line per codec (None: silent).

    Returns:
        One dict per codec: ``codec``, ``numel``, ``workers``, ``rounds``, ``accuracy``, ``loss``,
        ``accuracy_vs_fp32`` (points, None without fp32), ``bytes_per_param`` (one worker, one round),
        ``residual_norm`` (mean over workers of ‖e‖ after the last round), ``seconds``.

    Raises:
        ValueError: On ``workers < 1`` or ``rounds < 1`` or an unknown codec.
    """
    from p2p_guard.tasks import load_task
    from p2p_guard.training.local import LocalModel, round_generator

    if workers < 1 or rounds < 1:
        raise ValueError(f"workers and rounds must be >= 1, got workers={workers}, rounds={rounds}")
    task = load_task("digits")
    steps = inner_steps or task.default_hparams.inner_steps
    run_id = f"bench-wire-digits-seed{seed}"
    results = []
    for codec in codecs:
        if progress is not None:
            progress(f"convergence {codec}")
        started = time.monotonic()
        peers = [
            LocalModel(task, seed=seed, num_shards=workers, shard_index=i, partition=partition)
            for i in range(workers)
        ]
        feedback = [ErrorFeedback(codec, peers[0].numel) for _ in peers]
        sent_bytes = 0
        for r in range(rounds):
            decoded = []
            for i, local in enumerate(peers):
                delta, _ = local.train_round(steps, round_generator(run_id, seed, i, r, _SALT_INNER))
                payload = feedback[i].encode(delta)
                sent_bytes += len(payload)
                received = decode_update(payload, codec, local.numel)  # what a receiver gets
                if isinstance(received, Rejected):
                    raise ValueError(f"{codec} rejected its own payload: {received.detail}")
                decoded.append(received)
            aggregate = torch.stack(decoded).mean(dim=0)
            for local in peers:
                local.apply(aggregate)
        metrics: Any = peers[0].evaluate()
        results.append(
            {
                "codec": codec,
                "numel": peers[0].numel,
                "workers": workers,
                "rounds": rounds,
                "accuracy": metrics.accuracy,
                "loss": metrics.loss,
                "bytes_per_param": sent_bytes / (workers * rounds * peers[0].numel),
                "residual_norm": sum(float(f.residual.norm()) for f in feedback) / workers,
                "seconds": time.monotonic() - started,
            }
        )
    reference = next((result["accuracy"] for result in results if result["codec"] == "fp32"), None)
    for result in results:
        result["accuracy_vs_fp32"] = None if reference is None else 100 * (result["accuracy"] - reference)
    return results


def format_tables(sizes: Sequence[dict[str, Any]], quality: Sequence[dict[str, Any]]) -> str:
    """The two result tables as Markdown."""
    lines = [
        "| codec | d | bytes/param | vs fp32 | encode ms | decode ms | rel. error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sizes:
        lines.append(
            f"| {row['codec']} | {row['numel']:.0e} | {row['bytes_per_param']:.4f} | "
            f"{row['bytes_per_param'] / 4:.2%} | {1e3 * row['encode_s']:.1f} | {1e3 * row['decode_s']:.1f} | "
            f"{row['rel_error']:.4f} |"
        )
    if quality:
        first = quality[0]
        lines += [
            "",
            f"Digits, {first['workers']} workers, {first['rounds']} rounds, mean aggregation, outer Nesterov,"
            f" error feedback per worker (d = {first['numel']}):",
            "",
            "| codec | bytes/param/round | accuracy | vs fp32 (points) | loss | residual norm |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in quality:
            delta = row["accuracy_vs_fp32"]
            lines.append(
                f"| {row['codec']} | {row['bytes_per_param']:.4f} | {row['accuracy']:.4f} | "
                f"{'' if delta is None else f'{delta:+.2f}'} | {row['loss']:.4f} | "
                f"{row['residual_norm']:.3g} |"
            )
    return "\n".join(lines)
