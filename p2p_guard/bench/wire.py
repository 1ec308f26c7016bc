"""The wire benchmark without a swarm: payload size and cost of every codec, and DiLoCo quality per codec.

Two parts, both in one process:

1. **Sizes and cost** (:func:`measure_codecs`). For each codec and each d, a synthetic pseudo-gradient
   x ∈ R^d (float32, seeded): Gaussian values with one scale per block of 4096 drawn log-uniformly over
   [10⁻³, 10⁻¹], so blocks differ in magnitude as layers do. Reported per (codec, d): bytes per parameter
   ``len(payload) / d`` (one copy of one round's update), encode and decode wall time (decode is the
   receiver's ``decode_update``, all checks included), and the relative reconstruction error
   ‖x − D(C(x))‖₂ / ‖x‖₂ of a single round (no error feedback).
2. **Convergence** (:func:`convergence`). n simulated DiLoCo workers on a task (digits by default,
   ``--task shakespeare`` for the char-GPT), each a
   :class:`~p2p_guard.training.local.LocalModel` from the same θ_0 with its own shard, each sending through
   its own :class:`~p2p_guard.training.error_feedback.ErrorFeedback`; every round the decoded payloads are
   averaged (mean aggregation, no guard, no attack) and every worker applies the mean with its outer step
   (so all keep one θ). The outer step and the error feedback are the codec's defaults, as a peer uses them:
   DiLoCo's Nesterov (lr 0.7, momentum 0.9) with plain error feedback (β = 1) for fp32/fp16/int8/int4, and
   SparseLoCo's for topk (error feedback decayed by β, no outer momentum; ``training.outer.outer_defaults``,
   ``training.error_feedback.default_ef_decay``); ``topk_ef_decay``, ``topk_outer_lr`` and
   ``topk_outer_momentum`` override topk's (the sweep behind the defaults). Reported per codec: test accuracy
   and loss after the last round (validation perplexity for a language model), the difference to fp32 (accuracy:
   in points; perplexity: in percent of fp32's, positive is worse), bytes per parameter per round of one
   worker's payload, the residual norm and the mean norm of the decoded rows in the last round.

3. **The guard per codec** (:func:`convergence` with ``guard`` and ``attack``; :func:`guard_worst_case`). The
   same run with the last f workers Byzantine (``sign_flip:scale=10`` and ``alie``, :data:`GUARD_ATTACKS`), their
   attack vectors encoded with the codec, and every honest worker running the guard (default ``semantic``, f
   not told) on the decoded rows with its own row marked and its own Δ before the codec as
   ``own_reference`` (as a swarm peer does). Reported per codec: the accuracy under each attack,
   the worst case, and its difference to fp32's worst case (issue 10: within 2 points).

The swarm-level figures of issue 10 (8 peers over loopback, upload caps) need the live swarm and are not
measured here.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from p2p_guard.protocol import Rejected, decode_update, encode_update
from p2p_guard.protocol.codecs import codec_spec
from p2p_guard.training.error_feedback import ErrorFeedback, default_ef_decay
from p2p_guard.training.outer import dense_outer_lr, outer_defaults

__all__ = [
    "GUARD_ATTACKS",
    "WIRE_CODECS",
    "codec_hparams",
    "convergence",
    "format_guard_table",
    "format_tables",
    "guard_worst_case",
    "measure_codecs",
    "synthetic_update",
    "write_quality_plot",
]

logger = logging.getLogger(__name__)

WIRE_CODECS: tuple[str, ...] = (
    "fp32",
    "fp16",
    "int8",
    "int4",
    "topk:density=0.01",
    "topk:density=0.02",
    "topk:density=0.05",
    "topk:density=0.02,dense=head",
)
"""The codecs the benchmark compares (issue 10: fp32, fp16, int8, 4-bit, topk at 1, 2 and 5 %; and topk at 2 % with
the 1-D tensors and the output layer dense, ``protocol.sparse``)."""

GUARD_ATTACKS: tuple[str, ...] = ("sign_flip:scale=10", "alie")
"""The attacks the guard meets per codec (issue 10: its worst case per codec within 2 points of fp32's)."""

ONCE_FROM = 10**7
"""From this d on, :func:`measure_codecs` encodes and decodes once (no repeats)."""
_BLOCK = 4096
_SALT_INNER = 1  # as bench/cell.py and swarm/peer.py: the inner batches' round_generator salt
_SALT_ATTACK = 3  # as bench/cell.py: an update attack's randomness
_SALT_GUARD = 4  # as bench/cell.py: the guard's ctx.generator


def synthetic_shapes(numel: int) -> tuple[tuple[int, ...], ...]:
    """A layout for the synthetic updates: a body matrix and an output layer of ⌈d/100⌉ values (d ≥ 2).

    A ``dense=head`` codec sends the output layer (1 % of d) dense; the char-GPT's dense set is 4.4 % of its
    246,144 parameters, the 25M configuration's 0.3 %.
    """
    head = max(1, -(-numel // 100)) if numel >= 2 else numel
    return ((numel - head, 1), (head, 1)) if numel >= 2 else ((numel,),)


def synthetic_update(numel: int, seed: int) -> torch.Tensor:
    """A ``(numel,)`` float32 stand-in for a pseudo-gradient: N(0, 1) · 10^U(−3, −1) per block of 4096."""
    generator = torch.Generator().manual_seed(seed)
    blocks = -(-numel // _BLOCK)
    scales = torch.pow(10.0, torch.rand(blocks, generator=generator) * 2 - 3)
    values = torch.randn(numel, generator=generator)
    return values * scales.repeat_interleave(_BLOCK)[:numel]


def codec_hparams(
    codec: str,
    *,
    topk_ef_decay: float | None = None,
    topk_outer_lr: float | None = None,
    topk_outer_momentum: float | None = None,
) -> tuple[float, float, float]:
    """``(β, outer lr, outer momentum)`` a worker sending ``codec`` uses: the codec's defaults, topk's overridden.

    Raises:
        ValueError: Unknown codec.
    """
    decay = default_ef_decay(codec)
    lr, momentum = outer_defaults(codec)
    if codec_spec(codec).name == "topk":
        decay = decay if topk_ef_decay is None else topk_ef_decay
        lr = lr if topk_outer_lr is None else topk_outer_lr
        momentum = momentum if topk_outer_momentum is None else topk_outer_momentum
    return decay, lr, momentum


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
                payload = encode_update(vector, codec, synthetic_shapes(numel))
                encoded = time.perf_counter()
                decoded = decode_update(payload, codec, numel, synthetic_shapes(numel))
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
    guard: str | None = None,
    attack: str | None = None,
    byzantine: int = 0,
    topk_ef_decay: float | None = None,
    topk_outer_lr: float | None = None,
    topk_outer_momentum: float | None = None,
    task: str = "digits",
    eval_every: int = 0,
) -> list[dict[str, Any]]:
    """Final quality (accuracy; perplexity for a language model) of in-process DiLoCo per codec, with error feedback.

    Part 2 of the module docstring.

    Without ``guard``: every worker applies the mean of the decoded payloads (one shared θ). With ``guard``
    (part 3): the last ``byzantine`` workers send ``attack``'s update instead of their own (each computed from
    its honest Δ and the rows it received the round before, as in ``bench/cell.py``, then encoded with the
    codec, without error feedback), and every honest worker judges the decoded rows with its own guard, its own
    row marked, and applies its own aggregate (each owns its model, as in the swarm). The guard is never told
    how many rows are Byzantine. The accuracy is the mean over the honest workers.

    Args:
        codecs: Codec strings; ``fp32`` should be among them (the reference of ``accuracy_vs_fp32``).
        workers: n, simulated workers.
        rounds: Outer rounds.
        seed: Run seed (θ_0, shards, inner batches); the same for every codec.
        inner_steps: H (None: the task's default).
        partition: ``iid`` or ``dirichlet:ALPHA``.
        progress: Called with a short line per codec (None: silent).
        guard: Guard spec each honest worker runs (None: the mean, no guard).
        attack: Update-attack spec of the Byzantine workers (needs ``guard`` and ``byzantine >= 1``).
        byzantine: Byzantine workers, the last indices, ``0 <= byzantine < workers``.
        topk_ef_decay: β of the topk codecs' error feedback (None: ``default_ef_decay``).
        topk_outer_lr: outer lr of the workers when the codec is topk (None: ``outer_defaults``).
        topk_outer_momentum: outer momentum of the workers when the codec is topk (None: ``outer_defaults``).
        task: Task spec (``tasks.load_task``: ``digits``, ``shakespeare``, ``shakespeare:n_layers=2``, ...).
        eval_every: also evaluate after every this many rounds (0: only after the last), into ``curve``.

    Returns:
        One dict per codec: ``codec``, ``task``, ``numel``, ``workers``, ``rounds``, ``accuracy`` (None for a
        language model), ``perplexity`` (None for a classifier), ``loss``, ``metric`` (``"accuracy"`` or
        ``"perplexity"``), ``quality`` (the metric's value), ``quality_vs_fp32`` (accuracy: points; perplexity:
        percent of fp32's, positive is worse; None without fp32), ``accuracy_vs_fp32`` (points, None without
        fp32 or accuracy), ``bytes_per_param`` (one worker, one round),
        ``residual_norm`` (mean over the honest workers of ‖e‖ after the last round), ``row_norm`` (mean over
        the honest workers of ‖ŝ‖, their decoded row, in the last round), ``ef_decay``, ``outer_lr``,
        ``outer_momentum`` (what the workers used), ``seconds``, and ``guard``,
        ``attack``, ``byzantine`` and ``rejected`` (rows the honest workers' guards rejected, Byzantine and
        honest: ``[byzantine rejected, byzantine judged, honest rejected, honest judged]``), and ``curve``:
        ``[[round, quality], ...]`` after every ``eval_every`` rounds and after the last (rounds counted from 1), and
        ``partition``.

    Raises:
        ValueError: On ``workers < 1`` or ``rounds < 1``, an unknown codec, guard or attack, an attack without
            a guard or Byzantine workers, or ``byzantine`` out of range.
    """
    from p2p_guard.tasks import load_task
    from p2p_guard.tasks.guarded import guard_user_task
    from p2p_guard.training.local import LocalModel, round_generator

    if workers < 1 or rounds < 1 or eval_every < 0:
        raise ValueError(f"workers and rounds must be >= 1 and eval_every >= 0, got workers={workers}, "
                         f"rounds={rounds}, eval_every={eval_every}")
    if not 0 <= byzantine < workers or (attack is None) != (byzantine == 0) or (attack and guard is None):
        raise ValueError(f"an attack needs a guard and 1 <= byzantine < workers; got guard={guard!r}, "
                         f"attack={attack!r}, byzantine={byzantine}, workers={workers}")
    task_spec = task
    model_task = guard_user_task(load_task(task_spec), task_spec)  # a user's method failing: one TaskFailed
    steps = inner_steps or model_task.default_hparams.inner_steps
    run_id = f"bench-wire-{task_spec}-seed{seed}"
    results = []
    for codec in codecs:
        if progress is not None:
            progress(f"convergence {codec}" + (f" ({guard}, {attack} x {byzantine})" if attack else ""))
        started = time.monotonic()
        decay, lr, momentum = codec_hparams(codec, topk_ef_decay=topk_ef_decay, topk_outer_lr=topk_outer_lr,
                                            topk_outer_momentum=topk_outer_momentum)
        peers = [
            LocalModel(model_task, seed=seed, num_shards=workers, shard_index=i, partition=partition, outer_lr=lr,
                       dense_outer_lr=dense_outer_lr(codec),
                       outer_momentum=momentum)
            for i in range(workers)
        ]
        feedback = [ErrorFeedback(codec, peers[0].numel, decay, peers[0].shapes) for _ in peers]
        rounds_run = _Rounds(codec, guard, attack, byzantine, run_id, seed, peers[0].shapes)
        sent_bytes = 0
        curve: list[list[float]] = []
        for r in range(rounds):
            decoded = []
            for i, local in enumerate(peers):
                delta, _ = local.train_round(steps, round_generator(run_id, seed, i, r, _SALT_INNER))
                payload = rounds_run.encode(i, delta, feedback[i], r, workers)
                sent_bytes += len(payload)
                received = decode_update(payload, codec, local.numel, local.shapes)  # what a receiver gets
                if isinstance(received, Rejected):
                    raise ValueError(f"{codec} rejected its own payload: {received.detail}")
                decoded.append(received)
            rounds_run.apply(peers, decoded, r)
            if eval_every and (r + 1) % eval_every == 0 and r + 1 < rounds:
                curve.append([r + 1, _quality_of(_evaluate(peers, workers - byzantine, guard is not None))[1]])
        metrics = _evaluate(peers, workers - byzantine, guard is not None)
        metric, value = _quality_of(metrics)
        curve.append([rounds, value])
        results.append(
            {
                "codec": codec,
                "task": task_spec,
                "numel": peers[0].numel,
                "workers": workers,
                "rounds": rounds,
                "metric": metric,
                "quality": value,
                "accuracy": value if metric == "accuracy" else None,
                "perplexity": value if metric == "perplexity" else None,
                "loss": sum(m.loss for m in metrics) / len(metrics),
                "bytes_per_param": sent_bytes / (workers * rounds * peers[0].numel),
                "residual_norm": sum(float(f.residual.norm()) for f in feedback[: workers - byzantine])
                / (workers - byzantine),
                "row_norm": sum(float(row.norm()) for row in decoded[: workers - byzantine]) / (workers - byzantine),
                "ef_decay": decay,
                "outer_lr": lr,
                "outer_momentum": momentum,
                "seconds": time.monotonic() - started,
                "guard": guard,
                "attack": attack,
                "byzantine": byzantine,
                "rejected": rounds_run.rejected,
                "curve": curve,
                "partition": partition,
            }
        )
    reference = next((result["quality"] for result in results if result["codec"] == "fp32"), None)
    for result in results:
        result["quality_vs_fp32"] = None if reference is None else quality_difference(
            result["metric"], result["quality"], reference)
        result["accuracy_vs_fp32"] = result["quality_vs_fp32"] if result["metric"] == "accuracy" else None
    return results


def _evaluate(peers: Sequence[Any], honest: int, guarded: bool) -> list[Any]:
    """Metrics of the honest workers (each owns its model) with a guard, else of worker 0 (one shared θ)."""
    return [peers[j].evaluate() for j in (range(honest) if guarded else [0])]


def _quality_of(metrics: Sequence[Any]) -> tuple[str, float]:
    """``(metric, mean value)``: accuracy for a classifier, perplexity for a language model."""
    metric = "accuracy" if metrics[0].accuracy is not None else "perplexity"
    return metric, sum(getattr(m, metric) for m in metrics) / len(metrics)


def quality_difference(metric: str, value: float, reference: float) -> float:
    """``value`` against ``reference`` (floats): the difference in the metric's unit.

    Accuracy: points, 100 · (value − reference), negative is worse. Perplexity: percent of the reference,
    100 · (value − reference) / reference, positive is worse.
    """
    if metric == "accuracy":
        return 100 * (value - reference)
    return 100 * (value - reference) / reference


def _worse(metric: str, value: float, than: float) -> bool:
    """Whether ``value`` is worse than ``than``: lower accuracy, higher perplexity."""
    return value < than if metric == "accuracy" else value > than


class _Rounds:
    """What a convergence run does besides training: the Byzantine workers' updates and the aggregation."""

    def __init__(self, codec: str, guard: str | None, attack: str | None, byzantine: int, run_id: str,
                 seed: int, shapes: tuple[tuple[int, ...], ...]) -> None:
        from p2p_guard.attacks import load_attack
        from p2p_guard.guard.registry import build_guard

        self.codec, self.run_id, self.seed, self.shapes = codec, run_id, seed, shapes
        self.guard_spec = guard
        self.guard = build_guard(guard) if guard is not None else None
        self.byzantine = byzantine
        self.attacks = {}
        if attack is not None:
            self.attacks = {i: load_attack(attack) for i in range(byzantine)}  # one object per attacker
            kind = getattr(self.attacks[0], "kind", None)
            if kind != "update":
                raise ValueError(f"attack {attack!r} has kind {kind!r}: only update attacks run here")
        self.known_previous: list[torch.Tensor] = []
        self.own_deltas: dict[int, torch.Tensor] = {}  # each honest worker's Δ of the round, before its codec
        self.rejected = [0, 0, 0, 0]

    def encode(self, i: int, delta: torch.Tensor, feedback: ErrorFeedback, r: int, workers: int) -> bytes:
        """Worker i's payload: its Δ through its error feedback, or (Byzantine) the attack's vector encoded."""
        from p2p_guard.attacks.apply import attacked_update
        from p2p_guard.attacks.base import AttackContext
        from p2p_guard.training.local import round_generator

        slot = i - (workers - self.byzantine)
        if slot < 0:
            self.own_deltas[i] = delta
            return feedback.encode(delta)
        ctx = AttackContext(round=r, n=workers, f=self.byzantine, guard_name=self.guard_spec,
                            generator=round_generator(self.run_id, self.seed, i, r, _SALT_ATTACK))
        return encode_update(attacked_update(self.attacks[slot], delta, self.known_previous, ctx), self.codec,
                             self.shapes)

    def apply(self, peers: Sequence[Any], decoded: list[torch.Tensor], r: int) -> None:
        """Every worker's outer step: the shared mean without a guard, else each honest worker's own guard."""
        self.known_previous = decoded
        if self.guard is None:
            aggregate = torch.stack(decoded).mean(dim=0)
            for local in peers:
                local.apply(aggregate)
            return
        from p2p_guard.guard.base import AggregationContext
        from p2p_guard.training.local import round_generator

        rows = torch.stack(decoded)
        honest = len(peers) - self.byzantine
        senders = tuple(f"worker{i:03d}" for i in range(len(peers)))
        for j in range(honest):
            ctx = AggregationContext(senders=senders, round=r, own_index=j, own_reference=self.own_deltas[j],
                                     generator=round_generator(self.run_id, self.seed, j, r, _SALT_GUARD))
            result = self.guard(rows, ctx)
            for i, verdict in enumerate(result.verdicts):
                if i != j:
                    slot = 0 if i >= honest else 2
                    self.rejected[slot] += not verdict.accepted
                    self.rejected[slot + 1] += 1
            peers[j].apply(result.aggregate)
        for local in peers[honest:]:  # the attackers keep training (their honest Δ feeds their attack)
            local.apply(rows[:honest].mean(dim=0))


def guard_worst_case(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per codec, the guard's worst quality over the attacks, and its difference to fp32's worst case.

    Args:
        rows: :func:`convergence` results with a guard and an attack (several attacks per codec); a row
            without ``metric`` is an accuracy row.

    Returns:
        One dict per codec, in first-seen order: ``codec``, ``metric``, ``worst_quality`` (the lowest accuracy
        or the highest perplexity), ``worst_attack``, ``worst_vs_fp32`` (:func:`quality_difference`: points
        or percent; None without fp32 rows).
    """
    worst: dict[str, dict[str, Any]] = {}
    for row in rows:
        metric = row.get("metric", "accuracy")
        value = row[metric]
        best = worst.get(row["codec"])
        if best is None or _worse(metric, value, best["worst_quality"]):
            worst[row["codec"]] = {"codec": row["codec"], "metric": metric, "worst_quality": value,
                                   "worst_attack": row["attack"]}
    reference = worst.get("fp32", {}).get("worst_quality")
    for entry in worst.values():
        entry["worst_vs_fp32"] = None if reference is None else quality_difference(
            entry["metric"], entry["worst_quality"], reference)
    return list(worst.values())


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
        metric = first.get("metric", "accuracy")
        unit = "points" if metric == "accuracy" else "%"
        lines += [
            "",
            f"{_task_title(first)}, {first['workers']} workers, {first['rounds']} rounds,"
            f" mean aggregation, error feedback per"
            f" worker with decay β, outer step θ ← θ − α · (Nesterov momentum μ of the aggregate) (d ="
            f" {first['numel']}); residual norm ‖e‖ after the last round and row norm ‖ŝ‖ of the last round's"
            f" decoded rows are means over the workers:",
            "",
            f"| codec | β | α | μ | bytes/param/round | {metric} | vs fp32 ({unit}) | loss | residual norm "
            "| row norm |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in quality:
            delta = row.get("quality_vs_fp32", row.get("accuracy_vs_fp32"))
            lines.append(
                f"| {row['codec']} | {row['ef_decay']:g} | {row['outer_lr']:g} | {row['outer_momentum']:g} | "
                f"{row['bytes_per_param']:.4f} | {row[metric]:.4f} | "
                f"{'' if delta is None else f'{delta:+.2f}'} | {row['loss']:.4f} | "
                f"{row['residual_norm']:.3g} | {row['row_norm']:.3g} |"
            )
    return "\n".join(lines)


def format_guard_table(rows: Sequence[dict[str, Any]]) -> str:
    """The guard-per-codec table as Markdown: accuracy per (codec, attack), the worst case and its gap to fp32's."""
    if not rows:
        return ""
    first = rows[0]
    metric = first.get("metric", "accuracy")
    unit, limit = ("points", 2.0) if metric == "accuracy" else ("%", 3.0)
    attacks = list(dict.fromkeys(row["attack"] for row in rows))
    lines = [
        f"Guard `{first['guard']}` on {_task_title(first)}, {first['workers']} workers of"
        f" which {first['byzantine']} Byzantine "
        f"(the last; f not told to the guard), {first['rounds']} rounds; each honest worker judges the decoded "
        f"rows with its own row marked and applies its own aggregate. The {metric} is the honest workers' mean; "
        f"rejected is Byzantine rows rejected / judged, then honest rows rejected / judged, over all rounds:",
        "",
        "| codec | " + " | ".join(attacks) + f" | worst | worst vs fp32 ({unit}) | within {limit:g} {unit} |",
        "|---|" + "---:|" * len(attacks) + "---:|---:|---|",
    ]
    by_cell = {(row["codec"], row["attack"]): row for row in rows}
    for worst in guard_worst_case(rows):
        cells = []
        for attack in attacks:
            row = by_cell.get((worst["codec"], attack))
            if row is None:
                cells.append("")
                continue
            rej = row["rejected"]
            cells.append(f"{row[metric]:.4f} ({rej[0]}/{rej[1]}, {rej[2]}/{rej[3]})")
        delta = worst["worst_vs_fp32"]
        held = delta is not None and (delta >= -limit if metric == "accuracy" else delta <= limit)
        gap, within = ("", "") if delta is None else (f"{delta:+.2f}", "yes" if held else "no")
        lines.append(
            f"| {worst['codec']} | " + " | ".join(cells) + f" | {worst['worst_quality']:.4f} | {gap} | {within} |"
        )
    return "\n".join(lines)


def _task_title(row: dict[str, Any]) -> str:
    """``Digits`` for the default task, else the task spec in backticks; a non-IID partition follows it."""
    task = row.get("task", "digits")
    title = "Digits" if task == "digits" else f"`{task}`"
    partition = row.get("partition", "iid")
    return title if partition == "iid" else f"{title} (partition `{partition}`)"


def write_quality_plot(quality: Sequence[dict[str, Any]], guarded: Sequence[dict[str, Any]], path: Path) -> Path:
    """Accuracy (or perplexity) against bytes per parameter per round, per codec: mean and guard's worst case.

    Args:
        quality: :func:`convergence` rows without a guard.
        guarded: :func:`convergence` rows with a guard and an attack.
        path: the PNG to write (its folder is created).

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    sizes = {row["codec"]: row["bytes_per_param"] for row in [*guarded, *quality]}  # the honest payloads win
    metric = quality[0].get("metric", "accuracy") if quality else "accuracy"
    scale = 100 if metric == "accuracy" else 1
    ax.plot([sizes[r["codec"]] for r in quality], [scale * r[metric] for r in quality], "o",
            label="mean, no attack")
    worst = guard_worst_case(guarded)
    ax.plot([sizes[w["codec"]] for w in worst], [scale * w["worst_quality"] for w in worst], "s",
            label="guard, worst attack")
    for codec, size in sizes.items():
        ax.annotate(codec.replace("topk:density=", "topk "), (size, 0), xycoords=("data", "axes fraction"),
                    rotation=90, fontsize=7, va="bottom", ha="right")
    ax.set_xscale("log")
    ax.set_xlabel("bytes per parameter per round (one payload)")
    ax.set_ylabel("test accuracy (%)" if metric == "accuracy" else "validation perplexity (lower is better)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    task = quality[0].get("task", "digits") if quality else "digits"
    ax.set_title(f"{task}: quality against bytes, per codec", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
