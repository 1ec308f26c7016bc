"""``p2p-guard bench guard``: the guard's wall time per round against d and k, and its share of a round.

Writes ``docs/guard-cost.md`` and its plot ``docs/guard-cost/guard-cost.png`` (``--out``). Exit codes: 0 done,
2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from p2p_guard.cli.errors import DefaultsOnceFormatter, print_error
from p2p_guard.cli.preflight import nonempty_path

__all__ = ["add_parser", "run_guard_cost"]

EXIT_USAGE = 2

FULL_OUT = Path("docs/guard-cost.md")
QUICK_OUT = Path("runs/guard-cost-quick.md")
FULL_FANOUTS = (8, 16, 32)
FULL_SIZES = (10**5, 10**6, 10**7)
QUICK_FANOUTS = (8,)
QUICK_SIZES = (10**4, 10**5)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``bench guard`` on the ``bench`` sub-command's subparsers."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "guard",
        help="the guard's time on k sampled rows plus our own at d = 1e5 .. 1e7, and its share of a round",
        description="Times the guard (default semantic) on k sampled rows plus the receiver's own, for each "
        "fan-out k and size d, in one process; times the inner phase of a 10M-parameter char-GPT as the "
        "compute of a round; writes a Markdown table and a log-log plot. d = 1e7 at k = 32 holds 1.3 GB of rows.",
        formatter_class=DefaultsOnceFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="k = 8, d = 1e4 and 1e5, no inner phase")
    parser.add_argument("--guard", default="semantic", help="guard spec")
    parser.add_argument("--fanouts", type=int, nargs="+", default=None, help="values of k (default 8 16 32)")
    parser.add_argument("--sizes", type=float, nargs="+", default=None, help="values of d (default 1e5 1e6 1e7)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per cell below d = 1e7 (fastest)")
    parser.add_argument(
        "--round-steps", type=int, default=None,
        help="inner steps timed for the round estimate (default 2; --quick 0: none)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the rows")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--out", type=nonempty_path, default=None,
        help=f"report path; the plot goes to the directory of the same name without suffix (default {FULL_OUT}; "
        f"--quick {QUICK_OUT})",
    )  # fmt: skip
    parser.add_argument("--json", type=nonempty_path, default=None, metavar="PATH",
                        help="also write the results here; missing folders are created")
    parser.set_defaults(func=run_guard_cost)
    return parser


def _error(message: str) -> int:
    print_error("bench guard", message)
    return EXIT_USAGE


def run_guard_cost(args: argparse.Namespace) -> int:
    """Run ``p2p-guard bench guard`` with parsed arguments and return the exit code."""
    import torch

    from p2p_guard.bench.guard_cost import inner_phase_seconds, render, time_guard, write_plot
    from p2p_guard.bench.report import command_line, machine_info
    from p2p_guard.cli.preflight import check_output_file, check_report_with_plots, check_seed_and_threads
    from p2p_guard.guard.registry import check_guard_spec
    from p2p_guard.protocol.codecs import MAX_PARAMETERS

    started = time.monotonic()
    fanouts = tuple(args.fanouts or (QUICK_FANOUTS if args.quick else FULL_FANOUTS))
    raw_sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    if not all(math.isfinite(s) and 1 <= s <= MAX_PARAMETERS for s in raw_sizes):
        return _error(f"--sizes must be numbers of parameters in [1, {MAX_PARAMETERS:,}] (2**28, the largest model a "
                      f"peer accepts), got {' '.join(f'{s:g}' for s in raw_sizes)}")
    sizes = tuple(int(s) for s in raw_sizes)
    round_steps = args.round_steps if args.round_steps is not None else (0 if args.quick else 2)
    if min(fanouts) < 1 or args.repeats < 1 or args.threads < 1 or round_steps < 0:
        return _error("--fanouts, --sizes, --repeats and --threads must be >= 1, --round-steps >= 0")
    try:  # before any timing: the guard and the output paths
        check_seed_and_threads(args.seed, args.threads)
        check_guard_spec(args.guard)
        check_report_with_plots(args.out or (QUICK_OUT if args.quick else FULL_OUT), flag="--out")
        check_output_file(args.json, flag="--json")
    except ValueError as exc:
        return _error(str(exc))
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]

    def note(line: str) -> None:
        print(f"  {line} ...", file=sys.stderr, flush=True)

    cells = [
        time_guard(args.guard, k, d, seed=args.seed, repeats=args.repeats, progress=note)
        for d in sizes
        for k in fanouts
    ]
    inner = None
    if round_steps:
        note(f"inner phase, {round_steps} timed steps")
        inner = inner_phase_seconds(steps=round_steps, seed=args.seed)
    out: Path = args.out or (QUICK_OUT if args.quick else FULL_OUT)
    plot = write_plot(cells, out.with_suffix("") / "guard-cost.png")
    meta = {
        "command": command_line(),
        "machine": machine_info(),
        "threads": args.threads,
        "load": f"{load_before:.1f}, {os.getloadavg()[0]:.1f}",
        "wall_s": time.monotonic() - started,
    }
    report = render(cells, inner, meta, plot.relative_to(out.parent).as_posix())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "cells": cells, "inner": inner}, indent=1) + "\n")
    print(f"report: {out} (plot {plot})")
    return 0
