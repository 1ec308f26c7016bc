"""``p2p-guard bench robustness``: every aggregator against every attack, written to ``docs/benchmarks.md``.

Exit codes: 0 done, 1 a cell failed or a check of ``--quick`` or ``--acceptance`` failed (the report is written
either way), 2 bad arguments or missing data, 130 Ctrl+C, 143 SIGTERM. Worker processes are terminated on the way
out; cells already finished stay in the cell file (``--resume`` picks them up).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from p2p_guard.cli.errors import DefaultsOnceFormatter, name_subcommands, print_error
from p2p_guard.cli.preflight import nonempty_path

__all__ = ["add_parser", "run_robustness"]

EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM

FULL_OUT = Path("docs/benchmarks.md")
QUICK_OUT = Path("runs/bench-quick.md")


class _Terminated(BaseException):
    """SIGTERM arrived; raised like KeyboardInterrupt so that the worker pool is terminated on the way out."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``bench`` sub-command group (``bench robustness``).

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The ``bench`` parser.
    """
    bench: argparse.ArgumentParser = subparsers.add_parser(
        "bench", help="benchmarks (robustness of every aggregator under every attack)",
        description="Reproducible benchmarks. They run peers in one process with the swarm's own code.",
    )  # fmt: skip
    sub = bench.add_subparsers(dest="bench_command", required=True)
    parser = sub.add_parser(
        "robustness",
        help="every aggregator x every update/data attack, a sweep and an ablation; writes a Markdown report",
        description="Headline grid (every aggregator x every update or data attack, n=10, f=3, Dirichlet 1, "
        "Fashion-MNIST), the semantic guard's ablation, and a sweep of each aggregator's worst attack (and the "
        "backdoor, for its attack success rate) over Byzantine fractions and partitions. Writes the report and its "
        "PNG plots. --quick runs a small grid on digits and exits 1 unless its assertions hold; --acceptance TASK "
        "runs the guard issue's acceptance grid (every rule x every attack at 20/30/40 %% Byzantine, Dirichlet 0.5, "
        "f unknown) and exits 1 unless it holds.",
        formatter_class=DefaultsOnceFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick", action="store_true", help="small grid on digits (a few minutes), with checks"
    )
    mode.add_argument(
        "--acceptance",
        choices=("digits", "fashion-mnist"),
        default=None,
        help="every aggregator x every attack at 20, 30 and 40%% Byzantine on Dirichlet 0.5, f unknown, one seed "
        "(--seeds N for more), with the guard issue's checks; about 530 cells (digits: under half an hour)",
    )
    parser.add_argument(
        "--data-dir",
        type=nonempty_path,
        default=None,
        help="directory of the Fashion-MNIST IDX files (default: the Debian package's, "
        "/usr/share/datasets/fashion-mnist)",
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per headline cell (default 3; --quick 2)"
    )
    parser.add_argument("--sweep-seeds", type=int, default=1, help="seeds per sweep cell")
    parser.add_argument(
        "--out",
        type=nonempty_path,
        default=None,
        help=f"report path; plots go to the directory of the same name without suffix "
        f"(default {FULL_OUT}; --quick {QUICK_OUT}; --acceptance TASK runs/bench-acceptance-TASK.md)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    parser.add_argument(
        "--cells",
        type=nonempty_path,
        default=None,
        help="JSON-lines file of finished cells (default runs/bench-<full|quick|acceptance-TASK>-cells.jsonl)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the cells already in --cells that were run by the same code",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_robustness)
    from p2p_guard.cli import bench_guard_cmd, bench_wire_cmd  # ``bench wire`` and ``bench guard``: own modules

    bench_wire_cmd.add_parser(sub)
    bench_guard_cmd.add_parser(sub)
    name_subcommands(sub, "BENCHMARK")
    return bench


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _error(message: str) -> None:
    print_error("bench robustness", message)


def _with_our_flag(message: str) -> str:
    """A task's error, with the Fashion-MNIST folder named as this command takes it (``--data-dir``, not a task)."""
    from p2p_guard.tasks.fashion_mnist_files import DATA_DIR_HINT

    return message.replace(DATA_DIR_HINT, "--data-dir DIR")


def _describe_model(model: Any) -> str:
    from torch import nn

    parts = []
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            parts.append(f"Linear({layer.in_features}→{layer.out_features})")
        elif not list(layer.children()):
            parts.append(type(layer).__name__)
    return "MLP " + ", ".join(parts) if parts else type(model).__name__


def run_robustness(args: argparse.Namespace) -> int:
    """Run ``p2p-guard bench robustness`` with parsed arguments and return the exit code."""
    import torch
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from p2p_guard.bench.report import command_line, machine_info, write_report
    from p2p_guard.bench.robustness import acceptance_config, full_config, quick_config, run_benchmark
    from p2p_guard.tasks import load_task

    started = time.monotonic()
    torch.set_num_threads(1)  # as in the workers: results depend on the thread count, so --jobs 1 matches
    if args.jobs < 1:
        _error(f"--jobs must be >= 1, got {args.jobs}")
        return EXIT_USAGE
    if args.seeds is not None and args.seeds < 1 or args.sweep_seeds < 1:
        _error("--seeds and --sweep-seeds must be >= 1")
        return EXIT_USAGE
    mode = "quick" if args.quick else f"acceptance-{args.acceptance}" if args.acceptance else "full"
    if args.quick:
        if args.data_dir is not None:
            _error("--data-dir names the Fashion-MNIST files of the full run; --quick runs on digits")
            return EXIT_USAGE
        cfg = quick_config(seeds=args.seeds or 2)
    elif args.acceptance:
        try:
            cfg = acceptance_config(args.acceptance, data_dir=args.data_dir, seeds=args.seeds or 1)
        except ValueError as exc:
            _error(str(exc))
            return EXIT_USAGE
    else:
        cfg = full_config(data_dir=args.data_dir, seeds=args.seeds or 3, sweep_seeds=args.sweep_seeds)
    out = args.out or (QUICK_OUT if args.quick else Path(f"runs/bench-{mode}.md") if args.acceptance else FULL_OUT)
    cells = args.cells or Path(f"runs/bench-{mode}-cells.jsonl")
    try:
        from p2p_guard.cli.preflight import check_output_file, check_report_with_plots

        check_report_with_plots(out, flag="--out")  # before any cell, not when the report is written
        check_output_file(cells, flag="--cells", replaced=False)  # appended to, cell by cell
        task = load_task(cfg.task, **dict(cfg.task_options))
        model = task.build_model(0)
        check = getattr(task, "check_data", None)
        if callable(check):
            check()
    except (OSError, ValueError) as exc:
        _error(_with_our_flag(str(exc)))
        return EXIT_USAGE
    numel = sum(p.numel() for p in model.parameters())
    reused = 0
    if args.resume:
        from p2p_guard.bench.robustness import code_fingerprint, load_cells

        reused = len(load_cells(cells, code_fingerprint()))
    level = logging.getLogger("p2p_guard").getEffectiveLevel()
    worker_level = level if level <= logging.DEBUG else logging.ERROR

    def bar(total: int, phase: str) -> Any:
        # disable=None: tqdm shows no bar when stderr is not a terminal (no frames in a log file)
        return tqdm(total=total, desc=phase, unit="cell", dynamic_ncols=True,
                    disable=True if args.no_progress else None)

    print(
        f"{mode} benchmark: {cfg.task}, {len(cfg.guards)} aggregators x {len(cfg.attacks) + 1} attack "
        f"columns x {cfg.seeds} seeds, plus ablation and sweep; {args.jobs} worker(s); cells -> {cells}",
        file=sys.stderr,
    )
    try:
        with _sigterm_raises(), logging_redirect_tqdm(loggers=[logging.getLogger("p2p_guard")]):
            _, summary = run_benchmark(
                cfg,
                jobs=args.jobs,
                cells_path=cells,
                resume=args.resume,
                progress=bar,
                log_level=worker_level,
            )
    except KeyboardInterrupt:
        _error(f"interrupted; workers stopped; finished cells are in {cells} (rerun with --resume)")
        return EXIT_INTERRUPTED
    except _Terminated:
        _error(f"terminated; workers stopped; finished cells are in {cells} (rerun with --resume)")
        return EXIT_TERMINATED
    meta = {
        "command": command_line(),
        "wall_s": time.monotonic() - started,
        "jobs": args.jobs,
        "machine": machine_info(),
        "numel": numel,
        "model": _describe_model(model),
        "cells_file": str(cells),
        "reused_cells": reused,
    }
    plots = write_report(cfg, summary, meta, out)
    for guard, wc in summary["worst_case"].items():
        clean = summary["headline"][guard]["none"]
        print(
            f"{guard:>18}: clean {100 * clean.mean:5.1f}%  worst {100 * wc[1].mean:5.1f}% ({wc[0]})"
            if wc and clean
            else f"{guard:>18}: no result"
        )
    if summary["failed"]:
        _error(f"{len(summary['failed'])} cell(s) failed (tracebacks above; listed in the report)")
        return EXIT_CHECK_FAILED
    checks = summary["checks"] if args.quick else summary["acceptance"] if args.acceptance else []
    failed = [c for c in checks if not c.passed]
    for c in checks:
        print(f"{'pass' if c.passed else 'FAIL'}: {c.name}: {c.detail}")
    print(f"report: {out} (plots in {plots}); {time.monotonic() - started:.0f} s")
    if failed:
        _error(f"{len(failed)} check(s) of {'--quick' if args.quick else '--acceptance'} failed")
        return EXIT_CHECK_FAILED
    return 0
