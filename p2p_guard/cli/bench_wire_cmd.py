"""``p2p-guard bench wire``: bytes per parameter, codec cost, DiLoCo quality and the guard per codec, no swarm.

The full run writes ``docs/wire.md`` with ``--out docs/wire.md``.

Exit codes: 0 done, 1 a ``--quick`` check failed or a method of a ``--task MODULE:CLASS`` failed (one line naming
the task, its class, the method and the error; the traceback at DEBUG), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from p2p_guard.cli.errors import DefaultsOnceFormatter, print_error
from p2p_guard.cli.preflight import nonempty_path

__all__ = ["add_parser", "run_wire"]

logger = logging.getLogger(__name__)

EXIT_CHECK_FAILED = 1
EXIT_FAILED = 1  # a run that could not finish (a user task's method failed)
EXIT_USAGE = 2

FULL_SIZES = (10**5, 10**6, 10**7)
QUICK_SIZES = (10**5, 10**6)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``bench wire`` on the ``bench`` sub-command's subparsers."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "wire",
        help="every codec: bytes per parameter, encode/decode time, error, and DiLoCo quality on a task",
        description="For each codec: bytes per parameter per round, encode and decode time and relative "
        "reconstruction error at d = 1e5, 1e6, 1e7 (--quick: 1e5, 1e6), then an in-process DiLoCo run on "
        "digits or --task (n workers, mean aggregation, error feedback per worker, each codec's outer step: DiLoCo's "
        "Nesterov for fp32/fp16/int8/int4, SparseLoCo's decayed error feedback without outer momentum for topk) "
        "giving the final "
        "accuracy (perplexity for a language model) per codec against fp32, and the guard (default semantic) "
        "per codec under sign_flip:scale=10 "
        "and alie from a minority of workers, its worst case against fp32's. No swarm, no network.",
        formatter_class=DefaultsOnceFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="d = 1e5, 1e6 and a shorter run, with checks")
    parser.add_argument("--codecs", nargs="+", default=None, help="codec strings (default: all seven)")
    parser.add_argument("--workers", type=int, default=None, help="simulated workers (default 8; --quick 4)")
    parser.add_argument("--rounds", type=int, default=None, help="outer rounds (default 20; --quick 10)")
    parser.add_argument(
        "--eval-every", type=int, default=0, metavar="N",
        help="also evaluate every N rounds of the codec run (its curve goes into --json; default 0: last round only)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the updates and of the run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--task", default="digits",
        help="task spec of parts 2 and 3 (digits, shakespeare, shakespeare:n_layers=2, module:Class, ...); "
        "a language model reports validation perplexity",
    )  # fmt: skip
    parser.add_argument(
        "--partition", default="iid", metavar="SPEC",
        help="how the task's training data is split over the workers: iid or dirichlet:ALPHA (non-IID)",
    )  # fmt: skip
    parser.add_argument("--json", type=nonempty_path, default=None, metavar="PATH",
                        help="also write the results here; missing folders are created")
    parser.add_argument("--guard", default="semantic", help="guard spec of part 3 (the guard per codec)")
    parser.add_argument(
        "--guard-attacks", nargs="*", default=None,
        help="attacks the guard meets per codec (default sign_flip:scale=10 alie; `none`, or no value: skip part 3)",
    )  # fmt: skip
    parser.add_argument(
        "--byzantine", type=int, default=None, help="Byzantine workers of part 3 (default: a quarter, at least 1)"
    )
    parser.add_argument(
        "--topk-ef-decay", type=float, default=None, metavar="BETA",
        help="error-feedback decay β of the topk codecs, in [0, 1] (default: the peer's, 0.95; 1: plain EF)",
    )  # fmt: skip
    parser.add_argument(
        "--topk-outer-lr", type=float, default=None, metavar="ALPHA",
        help="outer learning rate α with the topk codecs (default: the peer's, training.outer.TOPK_OUTER_LR)",
    )  # fmt: skip
    parser.add_argument(
        "--topk-outer-momentum", type=float, default=None, metavar="MU",
        help="outer Nesterov momentum μ with the topk codecs, in [0, 1) (default: the peer's, 0; 0.9 with "
        "--topk-ef-decay 1 --topk-outer-lr 0.7 is the scheme before SparseLoCo)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=nonempty_path, default=None,
        help="also write the tables as a Markdown report, with a plot of quality against bytes in the folder of "
        "the same name without suffix (the full run's is docs/wire.md)",
    )  # fmt: skip
    parser.set_defaults(func=run_wire)
    return parser


def run_wire(args: argparse.Namespace) -> int:
    """Run ``p2p-guard bench wire`` with parsed arguments and return the exit code."""
    import torch

    from p2p_guard.bench.report import command_line, machine_info
    from p2p_guard.bench.wire import (
        GUARD_ATTACKS,
        WIRE_CODECS,
        convergence,
        format_guard_table,
        format_tables,
        measure_codecs,
        write_quality_plot,
    )
    from p2p_guard.protocol.codecs import check_local_codec

    started = time.monotonic()
    codecs = list(args.codecs or WIRE_CODECS)
    bad = []
    for codec in codecs:  # the codec's own reason: "topk:density=2" is a density out of range, not an unknown codec
        try:
            check_local_codec(codec)  # as a peer sending with it: a topk density under 1/4096 is refused too
        except ValueError as e:
            bad.append(str(e))
    if bad:
        print_error("bench wire", f"--codecs: {'; '.join(bad)}")
        return EXIT_USAGE
    workers = (4 if args.quick else 8) if args.workers is None else args.workers  # 0 is refused, not a default
    rounds = (10 if args.quick else 20) if args.rounds is None else args.rounds
    if workers < 1 or rounds < 1 or args.threads < 1 or getattr(args, "eval_every", 0) < 0:
        print_error("bench wire", "--workers, --rounds and --threads must be >= 1, --eval-every >= 0")
        return EXIT_USAGE
    guard_attacks = GUARD_ATTACKS if getattr(args, "guard_attacks", None) is None else tuple(args.guard_attacks)
    if guard_attacks in (("none",), ("",)):
        guard_attacks = ()
    try:  # checked now, not after the convergence runs (an hour on a language model)
        from p2p_guard.attacks import load_attack

        for spec in guard_attacks:
            load_attack(spec)
    except ValueError as error:
        print_error("bench wire", f"--guard-attacks: {error}")
        return EXIT_USAGE
    byzantine = getattr(args, "byzantine", None)
    byzantine = max(1, workers // 4) if byzantine is None else byzantine
    if guard_attacks and not 1 <= byzantine < workers / 2:
        print_error("bench wire", f"--byzantine must be >= 1 and a minority of --workers {workers}; got "
                                  f"{byzantine}")
        return EXIT_USAGE
    decay: float | None = getattr(args, "topk_ef_decay", None)
    lr: float | None = getattr(args, "topk_outer_lr", None)
    momentum: float | None = getattr(args, "topk_outer_momentum", None)
    if (decay is not None and not 0.0 <= decay <= 1.0) or (lr is not None and not 0.0 < lr < float("inf")) or (
        momentum is not None and not 0.0 <= momentum < 1.0
    ):
        print_error("bench wire", "--topk-ef-decay must be in [0, 1], --topk-outer-lr finite and > 0, "
                                  "--topk-outer-momentum in [0, 1)")
        return EXIT_USAGE
    task = getattr(args, "task", "digits")
    try:  # everything the runs need, before they start: the task's data and model, the guard, the output paths
        from p2p_guard.cli.preflight import (
            check_output_file,
            check_report_with_plots,
            check_seed_and_threads,
            check_task_data,
        )
        from p2p_guard.guard.registry import check_guard_spec
        from p2p_guard.tasks.partition import parse_partition

        check_seed_and_threads(args.seed, args.threads)
        check_task_data(task)
        partition = str(parse_partition(getattr(args, "partition", "iid")))  # ' DIRICHLET:0.50' → dirichlet:0.5
        if guard_attacks:
            check_guard_spec(getattr(args, "guard", "semantic"))
        check_output_file(args.json, flag="--json")
        check_report_with_plots(getattr(args, "out", None), flag="--out")
    except ValueError as error:
        print_error("bench wire", str(error))
        return EXIT_USAGE
    torch.set_num_threads(args.threads)

    def note(line: str) -> None:
        print(f"  {line} ...", file=sys.stderr, flush=True)

    sizes = measure_codecs(codecs, QUICK_SIZES if args.quick else FULL_SIZES, seed=args.seed, progress=note)
    from p2p_guard.tasks.guarded import TaskFailed

    try:
        quality = convergence(codecs, workers=workers, rounds=rounds, seed=args.seed, progress=note, task=task,
                              partition=partition, topk_ef_decay=decay, topk_outer_lr=lr,
                              topk_outer_momentum=momentum, eval_every=getattr(args, "eval_every", 0))
        guarded = [
            row
            for codec in codecs
            for attack in guard_attacks
            for row in convergence([codec], workers=workers, rounds=rounds, seed=args.seed, progress=note,
                                   task=task, partition=partition, guard=getattr(args, "guard", "semantic"),
                                   attack=attack, byzantine=byzantine,
                                   topk_ef_decay=decay, topk_outer_lr=lr, topk_outer_momentum=momentum)
        ]
    except TaskFailed as error:  # a method of the user's --task MODULE:CLASS failed: one line, as peer/simulate
        debug = logger.isEnabledFor(logging.DEBUG)
        print_error("bench wire", f"{error}" + ("" if debug else " (p2p-guard --log-level DEBUG bench wire ... "
                                                                "logs its traceback)"))
        logger.debug("traceback of the task's failure", exc_info=error)
        return EXIT_FAILED
    tables = format_tables(sizes, quality)
    if guarded:
        tables += "\n\n" + format_guard_table(guarded)
    print(tables)
    failed = _quick_checks(sizes, quality) if args.quick else []
    for message in failed:
        print(f"FAIL: {message}")
    meta = {
        "command": command_line(),
        "wall_s": time.monotonic() - started,
        "threads": args.threads,
        "machine": machine_info(),
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"meta": meta, "sizes": sizes, "convergence": quality, "guard": guarded}, indent=1) + "\n"
        )
        print(f"results: {args.json}")
    out = getattr(args, "out", None)
    if out is not None:
        plot = write_quality_plot(quality, guarded, out.with_suffix("") / "quality-vs-bytes.png")
        out.write_text(_report(tables, meta, plot.relative_to(out.parent).as_posix()))
        print(f"report: {out} (plot {plot})")
    print(f"{time.monotonic() - started:.0f} s")
    return EXIT_CHECK_FAILED if failed else 0


def _report(tables: str, meta: dict[str, Any], plot: str) -> str:
    """The Markdown report: what was run, on what, the tables and the plot."""
    machine = ", ".join(f"{key} {value}" for key, value in meta["machine"].items())
    return (
        f"# Wire: bytes, codec cost and quality per codec\n\nGenerated by `{meta['command']}` in "
        f"{meta['wall_s']:.0f} s; do not edit by hand. Machine: {machine}; {meta['threads']} torch thread(s). "
        f"Encode and decode times are wall times on that machine (a loaded machine inflates them); sizes and "
        f"accuracies do not depend on it.\n\nEach codec trains with a peer's defaults for it: fp32, fp16, int8 and "
        f"int4 with DiLoCo's outer Nesterov step (α = 0.7, μ = 0.9) and plain error feedback (β = 1); topk with "
        f"SparseLoCo's (Sarfi et al., arXiv:2508.15706): error feedback decayed by β and no outer momentum "
        f"(columns β, α, μ below). `--topk-ef-decay`, `--topk-outer-lr` and `--topk-outer-momentum` override "
        f"topk's (`--topk-ef-decay 1 --topk-outer-lr 0.7 --topk-outer-momentum 0.9` is the scheme before "
        f"SparseLoCo).\n\n{tables}\n\n![quality against bytes]({plot})\n"
    )


def _quick_checks(sizes: list[dict[str, Any]], quality: list[dict[str, Any]]) -> list[str]:
    """What --quick asserts (the failed checks, empty when all hold).

    fp32 is exact and the others smaller; fp16/int8 within 1 point of fp32's accuracy (1 % of its perplexity
    for a language model); every classifier learns (accuracy ≥ 0.8; chance is 0.1).
    """
    failed = []
    for row in sizes:
        if row["codec"] == "fp32" and (row["rel_error"] != 0.0 or row["bytes_per_param"] != 4.0):
            failed.append(f"fp32 at d={row['numel']} is not 4 exact bytes per parameter")
        if row["codec"] != "fp32" and row["bytes_per_param"] >= 4.0:
            failed.append(f"{row['codec']} at d={row['numel']} is not smaller than fp32")
    for row in quality:
        if row.get("metric") == "perplexity":
            delta = row["quality_vs_fp32"]
            if row["codec"] in ("fp16", "int8") and delta is not None and delta > 1.0:
                failed.append(f"{row['codec']}: perplexity {row['perplexity']:.3f} is {delta:.2f}% over fp32's")
            continue
        delta = row["accuracy_vs_fp32"]
        if row["codec"] in ("fp16", "int8") and delta is not None and delta < -1.0:
            failed.append(
                f"{row['codec']}: accuracy {100 * row['accuracy']:.1f}% is {-delta:.1f} points " f"under fp32"
            )
        if row["accuracy"] < 0.8:
            failed.append(f"{row['codec']}: accuracy {100 * row['accuracy']:.1f}% < 80%")
    return failed
