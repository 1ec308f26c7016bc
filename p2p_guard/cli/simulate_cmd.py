"""``p2p-guard simulate``: run a whole swarm locally (one OS process per peer), print a table, write a report.

Exit codes: 0 done, 1 the run failed (a peer crashed, a timeout), 2 bad arguments, 130 Ctrl+C, 143 SIGTERM.
Whatever happens, every process the run started is stopped before the command returns.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from p2p_guard.simulation.config import DEFAULT_TIMEOUT_S, SimulationConfig, check_partition
from p2p_guard.simulation.faults import FaultPlan, check_plan_tools, load_plan
from p2p_guard.simulation.orchestrator import (
    Progress,
    SimulationError,
    make_workdir,
    run_simulation,
    write_report,
)
from p2p_guard.simulation.table import format_table

__all__ = ["add_parser", "run"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM


class _Terminated(BaseException):
    """SIGTERM arrived; raised like KeyboardInterrupt so every ``finally`` and ``with`` block runs."""


def _partition(text: str) -> str:
    """Check ``--partition`` for argparse."""
    try:
        return check_partition(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``simulate`` sub-command (its handler is :func:`run`).

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The sub-command's parser.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="run a local swarm with simulated attackers and report how the guard did",
        description="Start a bootstrap node and every peer as its own process on 127.0.0.1, run the "
        "rounds, then print a table and write a JSON report. Logs, keys, events and states stay in the work "
        "directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = SimulationConfig()
    parser.add_argument("--task", default=defaults.task, help="task: digits, fashion-mnist or shakespeare")
    parser.add_argument("--honest", type=int, default=defaults.honest, help="number of honest peers")
    parser.add_argument("--byzantine", type=int, default=defaults.byzantine, help="number of attacking peers")
    parser.add_argument(
        "--attack",
        default=defaults.attack,
        help="attack of the Byzantine peers: NAME:key=value,... or module:Class",
    )
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="outer rounds")
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="run seed (same initial model for all)"
    )
    parser.add_argument(
        "--guard", default=defaults.guard, help="aggregation rule of every peer (mean: undefended)"
    )
    parser.add_argument(
        "--inner-steps", type=int, default=None, help="inner steps H per round (None: the task's default)"
    )
    parser.add_argument(
        "--partition", type=_partition, default=defaults.partition, help="iid or dirichlet:ALPHA"
    )
    parser.add_argument(
        "--reputation", action=argparse.BooleanOptionalAction, default=defaults.reputation,
        help="peers publish signed verdicts and keep a reputation",
    )
    parser.add_argument(
        "--reputation-exclusion", action=argparse.BooleanOptionalAction, default=defaults.reputation_exclusion,
        help="peers drop senders their reputation excludes (off by default: it can fork small honest swarms)",
    )
    parser.add_argument("--run-id", default=None, help="run id shared by the peers (None: sim-TASK-seedSEED)")
    parser.add_argument("--report", type=Path, default=None, help="also write the JSON report here")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory for logs, keys, events and states (None: a fresh runs/<timestamp>)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="the whole run must end within this many seconds",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_fault_and_scale_options(parser, defaults)
    parser.set_defaults(func=run)
    return parser


# -- fault injection and scale (issue 8): new options, kept apart from the flags generated from the config ----
def _add_fault_and_scale_options(parser: argparse.ArgumentParser, defaults: SimulationConfig) -> None:
    """``--faults`` and the start-up / measurement options of large swarms."""
    group = parser.add_argument_group("faults and scale")
    group.add_argument(
        "--faults", type=Path, default=None, metavar="PLAN.toml",
        help="fault plan: [[fault]] tables (round, peer, kind = slow|stop|kill_restart|clock_shift|kill_bootstrap, "
        "and the kind's fields); see docs/faults.md",
    )  # fmt: skip
    group.add_argument(
        "--start-concurrency", type=int, default=defaults.start_concurrency,
        help="at most this many peers starting at once (launched, not ready yet); 0: all at once",
    )  # fmt: skip
    group.add_argument(
        "--start-retries", type=int, default=defaults.start_retries,
        help="launch a peer again this many times if it exits before it is ready",
    )  # fmt: skip
    group.add_argument(
        "--join-timeout-s", type=float, default=None,
        help="each peer's join timeout, seconds (None: max(300, 20 x peers))",
    )  # fmt: skip
    group.add_argument(
        "--memory-sample-s", type=float, default=defaults.memory_sample_s,
        help="seconds between samples of every peer's PSS (0: none)",
    )  # fmt: skip
    group.add_argument(
        "--keep-snapshots", action="store_true",
        help="keep the per-round model snapshots (default: deleted once the consensus distance is computed)",
    )  # fmt: skip


def _scale_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The SimulationConfig fields of the options above."""
    return {
        "start_concurrency": args.start_concurrency,
        "start_retries": args.start_retries,
        "join_timeout_s": args.join_timeout_s,
        "memory_sample_s": args.memory_sample_s,
        "keep_snapshots": args.keep_snapshots,
    }


def _fault_plan(args: argparse.Namespace, config: SimulationConfig) -> FaultPlan | None:
    """Read and check ``--faults`` (and the programs it needs) before any process starts.

    Raises:
        ValueError: one line naming the plan file and the bad fault.
    """
    if args.faults is None:
        return None
    plan = load_plan(args.faults, honest=config.honest)
    check_plan_tools(plan)
    return plan


def _config(args: argparse.Namespace) -> SimulationConfig:
    """Resolved settings from the parsed arguments (raises ``ValueError`` on a bad one)."""
    return SimulationConfig(
        task=args.task,
        honest=args.honest,
        byzantine=args.byzantine,
        attack=args.attack,
        rounds=args.rounds,
        reputation=args.reputation,
        reputation_exclusion=args.reputation_exclusion,
        seed=args.seed,
        guard=args.guard,
        inner_steps=args.inner_steps,
        partition=args.partition,
        run_id=args.run_id,
        timeout_s=args.timeout_s,
        **_scale_settings(args),
    )


def _check_report_path(path: Path | None) -> None:
    """Fail before any process starts when ``--report`` cannot be written (its parent is a file, say).

    Raises:
        OSError: naming the path.
    """
    if path is None:
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or path.is_dir():
        raise OSError(f"--report {path}: {parent if not parent.is_dir() else path} is not a usable place for a file")


def _check_names(config: SimulationConfig) -> None:
    """Check the task and guard names and load the attack spec once here, so a typo fails before any process starts.

    Raises:
        ValueError: on an unknown task or guard (naming the valid ones), or an attack spec that does not load.
    """
    from p2p_guard.cli.peer_cmd import check_task_and_guard

    check_task_and_guard(config.task, config.guard)
    if config.byzantine == 0 or not config.attack:
        return
    from p2p_guard.attacks import load_attack  # torch-heavy: only when there is an attack to check

    try:
        load_attack(config.attack)
    except Exception as e:  # noqa: BLE001 - whatever the user's spec raises is a usage error
        raise ValueError(f"--attack {config.attack!r} does not load: {e}") from e


@contextlib.contextmanager
def _progress_bar(total: int, enabled: bool) -> Iterator[Callable[[Progress], None] | None]:
    """A tqdm bar over rounds (log lines are written above it); yields the callback that moves it, or None."""
    if not enabled:
        yield None
        return
    bar = tqdm(total=total, desc="rounds", unit="round", dynamic_ncols=True)

    def update(progress: Progress) -> None:
        bar.n = progress.rounds_done
        metrics = {"acc": progress.accuracy, "ppl": progress.perplexity, "loss": progress.loss}
        bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items() if v is not None}, refresh=False)
        bar.refresh()

    try:
        with logging_redirect_tqdm(loggers=[logging.root, logging.getLogger("p2p_guard")]):
            yield update
    finally:
        bar.close()


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into :class:`_Terminated` meanwhile (main thread only), then restore the old handler."""
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
    """Print an error message to stderr."""
    print(f"p2p-guard simulate: error: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run ``p2p-guard simulate`` with parsed arguments and return the exit code."""
    try:
        config = _config(args)
        _check_names(config)
        plan = _fault_plan(args, config)
    except ValueError as e:
        _error(str(e))
        return EXIT_USAGE
    try:
        _check_report_path(args.report)
        workdir = make_workdir(args.workdir)
    except OSError as e:
        _error(f"cannot write there: {e}")
        return EXIT_USAGE
    print(f"work directory (logs, events, states): {workdir}", file=sys.stderr)
    try:
        with _sigterm_raises(), _progress_bar(config.rounds, enabled=not args.no_progress) as on_progress:
            report = run_simulation(config, workdir, on_progress=on_progress, faults=plan)
    except KeyboardInterrupt:
        _error(f"interrupted; every process was stopped; logs in {workdir}")
        return EXIT_INTERRUPTED
    except _Terminated:
        _error(f"terminated; every process was stopped; logs in {workdir}")
        return EXIT_TERMINATED
    except SimulationError as e:
        _error(str(e))
        return EXIT_FAILED
    print(format_table(report))
    if args.report is not None:
        try:
            write_report(report, args.report)
        except OSError as e:
            _error(f"cannot write the report: {e}; it is also in {workdir / 'report.json'}")
            return EXIT_FAILED
    print(f"report: {args.report or workdir / 'report.json'}")
    return 0
