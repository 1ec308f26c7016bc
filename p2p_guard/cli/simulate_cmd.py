"""``p2p-guard simulate``: run a whole swarm locally (one OS process per peer), print a table, write a report.

Exit codes: 0 done, 1 the run failed (a peer crashed, a timeout), 2 bad arguments, 130 Ctrl+C, 143 SIGTERM, 129
SIGHUP (a closed terminal; not under ``nohup``).
Whatever happens, every process the run started is stopped before the command returns.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from p2p_guard.cli.errors import EXIT_FAILED, EXIT_USAGE, print_error, print_warning, silence_stdout
from p2p_guard.cli.preflight import check_output_dir, check_output_file, nonempty_path
from p2p_guard.cli.typed_config import add_config_flags, load_config
from p2p_guard.simulation.config import SimulationConfig, split_attack_mix
from p2p_guard.simulation.faults import FaultPlan, check_plan_for_run, load_plan

if TYPE_CHECKING:
    from p2p_guard.simulation.orchestrator import Progress

__all__ = ["add_parser", "run"]

COMMAND = "simulate"
EXIT_INTERRUPTED = 130


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived (``signum``); raised as a KeyboardInterrupt so the report is still written.

    Every ``finally`` block runs; the exit status is 128 + ``signum``.
    """

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        """Note the signal that arrived."""
        super().__init__()
        self.signum = signum


def _said(signum: int) -> str:
    """How the error line names a stop by ``signum``: ``terminated`` (SIGTERM), ``hung up`` (SIGHUP)."""
    return "hung up" if signum == signal.SIGHUP else "terminated"


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
    )
    parser.add_argument("--config", metavar="TOML", help="config file with a [simulate] table")
    parser.add_argument("--report", type=nonempty_path, default=None,
                        help="also write the JSON report here; missing folders are created")
    parser.add_argument(
        "--workdir",
        type=nonempty_path,
        default=None,
        help="directory for logs, keys, events and states; new or empty (default: a fresh runs/<timestamp>)",
    )
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (there is none anyway when stderr is not a terminal)")
    add_config_flags(parser.add_argument_group("settings"), SimulationConfig,
                     metavars={"inner_steps": "H", "attack": "SPEC", "partition": "SPEC", "task": "SPEC",
                               "mix_precision": "{fp32,fp16,int8}",
                               "peer_log_level": "{DEBUG,INFO,WARNING,ERROR}",
                               "peer_upload_mbit": "PEER:MBIT"})
    parser.add_argument(
        "--faults", type=nonempty_path, default=None, metavar="PLAN.toml",
        help="fault plan: [[fault]] tables (round, peer, kind = slow|stop|kill_restart|clock_shift|kill_bootstrap, "
        "and the kind's fields); see docs/faults.md",
    )  # fmt: skip
    parser.set_defaults(func=run)
    return parser


# -- fault injection (issue 8): --faults is not a SimulationConfig field, so it is added by hand ------------
def _fault_plan(args: argparse.Namespace, config: SimulationConfig) -> FaultPlan | None:
    """Read and check ``--faults`` (and the programs it needs) before any process starts.

    Raises:
        ValueError: one line naming the plan file and the bad fault.
    """
    if args.faults is None:
        return None
    plan = load_plan(args.faults, honest=config.honest)
    check_plan_for_run(plan, honest=config.honest, rounds=config.rounds, timeout_s=config.timeout_s)
    return plan


def _config(args: argparse.Namespace) -> SimulationConfig:
    """Resolved settings: defaults, then the ``[simulate]`` table of ``--config``, then the flags given.

    Raises:
        ValueError: on a bad file, key or value (the message names it).
    """
    return load_config(SimulationConfig, args=args, table="simulate", config_path=getattr(args, "config", None))


def _check_swarm_size(config: SimulationConfig) -> None:
    """Refuse a swarm of one peer: it can never train, and ``simulate`` would wait for its whole ``timeout_s``.

    A peer never trains alone: it pauses until ``min_peers`` (2, ``PeerConfig.min_peers``, self included) are
    present, so ``--honest 1 --byzantine 0`` sat paused at round 0 until the run's timeout (20 minutes by default)
    and then failed with exit 1.

    Raises:
        ValueError: when ``honest + byzantine`` is below 2.
    """
    if config.num_peers < 2:
        raise ValueError(f"honest={config.honest} and byzantine={config.byzantine} make a swarm of "
                         f"{config.num_peers} peer; a peer never trains alone (it waits for at least one other), "
                         f"so a simulation needs at least 2 peers")


def _warn_if_byzantine_majority(config: SimulationConfig) -> None:
    """Warn (not fail: a run may study it on purpose) when the Byzantine peers are not a minority."""
    if config.byzantine > 0 and config.attack and 2 * config.byzantine >= config.num_peers:
        print_warning(COMMAND, f"{config.byzantine} Byzantine of {config.num_peers} peers are not a minority "
                               f"(robust aggregation assumes fewer than half); the guard is not expected to hold")


PEER_MEMORY_FLOOR_BYTES = 180 * 2**20
"""A lower bound on one peer process's memory (PSS) before its model: ``p2p-guard simulate --honest 3 --byzantine
0 --rounds 5`` reports 276 MiB per running peer (digits, 4,810 parameters, 2026-12-06; Shakespeare's peak 343 MiB).
The floor is lower because PSS splits the pages the peers share (torch's libraries) among them, so it shrinks as
the swarm grows."""

PEER_MEMORY_BYTES_PER_PARAM = 168
"""What one peer holds per model parameter, in bytes, on top of :data:`PEER_MEMORY_FLOOR_BYTES`: θ, the inner
model, its gradients and Adam states, the outer momentum, the error-feedback buffer, the fetched rows in one stack,
the guard's working set, the neighbours' states while mixing and the states the payload server keeps for up to 3
rounds. ``p2p-guard simulate --task shakespeare:n_layers=8,d_model=512,n_heads=8 --honest 6 --byzantine 0 --rounds
2 --inner-steps 2 --seed 0`` (25,338,880 parameters, fp32, 5 sampled senders and mixing neighbours) reported PSS
per peer mean 2716 MiB, max 4323 MiB (2026-12-07, stop 34; the 6 peers ran on this 24 GiB machine, 12/12 updates
applied): 167.5 bytes per parameter above the digits peer's 276 MiB at the max, which the bound takes (so it allows
5 such peers here). The same 6 peers with ``--codec topk:density=0.02,dense=head --max-upload-mbit 20`` ran
round 0 (390 s; 28 of 30 payloads applied, 2 cut by the 5 s idle rule) and one was killed for memory in round 1
(PSS max 5729 MiB), with other work on the machine: 6 is past what fits. With 3 peers the same command gave
mean 2723, max 3936 MiB, where before stop 34's memory work it gave mean 3184-3299, max 4538-4956 MiB (the bound
was 200 bytes, and 4 peers of this model on 24 GiB).
What went: the collusion stage's float64 histories (now count sketches past 2^18 coordinates), a float64
difference per mixing neighbour, the rows held beside their stack, the rows kept through the next round, the
copies of served states, a clipped copy of unclipped rows. More sampled senders take more: a peer holds its k + 1
rows (4 bytes per parameter each) while its guard runs, and its neighbours' float16 states (2 each) while mixing."""


def _peer_memory_bytes(params: int) -> int:
    """Least memory (bytes) of one peer process with a ``params``-parameter model."""
    return PEER_MEMORY_FLOOR_BYTES + PEER_MEMORY_BYTES_PER_PARAM * params


def _check_memory(config: SimulationConfig, *, params: int, total: int, available: int) -> None:
    """Refuse a swarm that cannot fit this machine's memory; warn when it exceeds what is available now.

    Every peer is its own OS process (torch, hivemind, ``p2pd``) holding several copies of the model: at least
    :func:`_peer_memory_bytes` each, and the bootstrap node :data:`PEER_MEMORY_FLOOR_BYTES`. So ``simulate --task
    shakespeare --honest 200`` needs over 35 GiB (it used to start on a 24 GiB machine: helper-30's test), and 8 peers
    of the 25M-parameter char-GPT at least 39.3 GiB (the floor alone had said 1.6).

    Args:
        config: the swarm.
        params: parameters of the task's model.
        total: this machine's physical memory, bytes.
        available: its memory available now, bytes.

    Raises:
        ValueError: the peers' least memory exceeds ``total``.
    """
    per_peer = _peer_memory_bytes(params)
    need = config.num_peers * per_peer + PEER_MEMORY_FLOOR_BYTES  # + the bootstrap node
    gib = 2**30
    if need > total:
        fit = max(0, (total - PEER_MEMORY_FLOOR_BYTES) // per_peer)
        raise ValueError(f"{config.num_peers} peers need at least {need / gib:.1f} GiB of memory (each is its own "
                         f"process, about {per_peer / 2**20:,.0f} MiB or more with a {params:,}-parameter model); "
                         f"this machine has {total / gib:.1f} GiB: run at most {fit} peers")
    if need > available:
        print_warning(COMMAND, f"{config.num_peers} peers need at least {need / gib:.1f} GiB of memory and "
                               f"{available / gib:.1f} GiB is available now: expect swapping, or peers killed "
                               "for memory")


def _warn_if_guard_falls_back(config: SimulationConfig) -> None:
    """Warn when the guard cannot run on the rows one peer judges and would apply the median every round.

    Each peer judges at most fan-out + 1 rows (``PeerConfig.fanout`` sampled senders and its own), fewer in a
    smaller swarm; a rule given an f too large for them (``--guard trimmed_mean:f=1000``) raises
    ``NotEnoughUpdates`` in every round and the peer applies the coordinate-wise median instead, saying so only in
    its own log (user test, stop 22). A warning, not an error: a run may study the fallback on purpose.
    """
    import torch

    from p2p_guard.guard.base import AggregationContext, JudgingAggregator, NotEnoughUpdates
    from p2p_guard.guard.registry import build_guard
    from p2p_guard.swarm.config import PeerConfig

    rows = min(PeerConfig().fanout, config.num_peers - 1) + 1
    if rows < 2:
        return
    aggregator = build_guard(config.guard).aggregator
    generator = torch.Generator().manual_seed(0)
    updates = torch.randn(rows, 8, generator=generator)
    ctx = AggregationContext(senders=tuple(f"peer{i:03d}" for i in range(rows)), round=0, generator=generator,
                             own_index=0, own_reference=updates[0])
    try:
        if isinstance(aggregator, JudgingAggregator):
            aggregator.judge(updates, ctx)
        else:
            aggregator(updates, ctx)
    except NotEnoughUpdates as e:
        print_warning(COMMAND, f"--guard {config.guard}: {e} in the {rows} rows a peer judges ({rows - 1} "
                               "sampled senders and its own): every peer will apply the coordinate-wise median "
                               "instead")
    except Exception:  # noqa: BLE001 - a user's rule failing on random rows is its own business; the peers log it
        return


def _warn_if_upload_too_low(config: SimulationConfig, params: int, shapes: tuple[tuple[int, ...], ...]) -> None:
    """Print each peer's start-up warning of an upload cap too low for its receivers, once per distinct cap.

    A peer logs it (``swarm.upload.upload_cap_warning``) only in its own log: ``simulate --max-upload-mbit 0.001``
    then trained nothing, every update cut as too slow, and exited 0 with the reason only in the peers' logs (user
    test, stop 35).
    """
    from p2p_guard.swarm.config import PeerConfig
    from p2p_guard.swarm.upload import upload_cap_warning

    caps = sorted({cap for cap in map(config.upload_mbit_of, range(config.num_peers)) if cap is not None})
    for cap in caps:
        peers = [i for i in range(config.num_peers) if config.upload_mbit_of(i) == cap]
        peer_config = PeerConfig(codec=config.codec, max_upload_mbit=cap, num_peers=config.num_peers,
                                 mix_precision=config.mix_precision)
        warning = upload_cap_warning(peer_config, params, shapes)
        if warning is not None:
            who = "every peer" if len(peers) == config.num_peers else f"peers {', '.join(map(str, peers))}"
            print_warning(COMMAND, f"{who}: {warning}")


def _check_names(config: SimulationConfig) -> tuple[tuple[int, ...], ...]:
    """Check the task, guard and attack (the attack only with Byzantine peers to run it) before any process starts.

    The names and the task's files first (no torch: at once, so a typo fails fast), then the guard and attack
    built with their parameters and the task's data read (torch).

    Returns:
        The parameter shapes of the task's model.

    Raises:
        ValueError: on an unknown task or guard (naming the valid ones), missing or malformed task data, an
            attack spec that does not load, or an unknown or malformed ``--codec``.
    """
    from p2p_guard.cli.preflight import check_attack, check_names, check_plugins

    attacks = split_attack_mix(config.attack) if config.byzantine > 0 and config.attack else (None,)
    for attack in attacks:
        check_names(config.task, config.guard, attack)
    if config.byzantine == 0 and config.attack:
        _check_unused_attack(config.attack)
    # The task's data read and cut once: every peer's shard comes from the same split.
    shapes = check_plugins(config.task, config.guard, attacks[0],
                           shard=(config.num_peers, 0, config.partition, config.seed))
    for attack in attacks[1:]:
        check_attack(attack)
    from p2p_guard.protocol.codecs import check_local_codec  # torch: already imported by check_plugins

    try:
        check_local_codec(config.codec)
    except ValueError as e:
        raise ValueError(f"--codec: {e}") from None
    return tuple(tuple(shape) for shape in shapes)


def _check_unused_attack(attack: str) -> None:
    """Check an attack spec that no peer runs (``--byzantine 0``): its syntax, names and built-in parameters.

    ``simulate --honest 3 --byzantine 0 --attack nosuch`` ran the whole swarm and reported ``attack=None``, so a
    typo in a spec meant for a later run went unnoticed; so did ``--attack sign_flip:scale=nan``, which
    ``--byzantine 1`` refuses. A built-in part is built once with its parameters (``load_attack``: torch, which
    the task check imports anyway); a ``MODULE:CLASS`` part is checked for its syntax only and not imported, since
    no peer runs it. A well-formed spec (the default ``sign_flip:scale=10`` included) still passes.

    Raises:
        ValueError: ``--attack SPEC does not load: ...``, as for a spec the Byzantine peers would run.
    """
    from p2p_guard.plugin_names import ATTACK_NAMES, check_attack_name
    from p2p_guard.plugin_spec import parse_spec

    try:
        parts = split_attack_mix(attack)
        for part in parts:
            check_attack_name(part)
        builtin = [part for part in parts if ":" not in parse_spec(part, what="attack", builtin_names=ATTACK_NAMES)[0]]
    except ValueError as e:
        raise ValueError(f"--attack {attack!r} does not load: {e} (no peer runs it with --byzantine 0)") from None
    if builtin:
        from p2p_guard.attacks import load_attack

        try:
            for part in builtin:
                load_attack(part)
        except Exception as e:  # noqa: BLE001 - whatever the spec raises is a usage error, as in check_attack
            raise ValueError(f"--attack {attack!r} does not load: {e} (no peer runs it with --byzantine 0)") from None


@contextlib.contextmanager
def _progress_bar(total: int, enabled: bool) -> Iterator[Callable[[Progress], None] | None]:
    """A tqdm bar over rounds (log lines are written above it); yields the callback that moves it, or None."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

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
    """Turn SIGTERM and SIGHUP into :class:`_Terminated` meanwhile (main thread only), then restore the old handlers.

    SIGHUP (the terminal or ssh session closed) ended ``simulate`` at once and lost the report of the rounds done;
    it is left alone where it is inherited ignored (``nohup``), as ``nohup`` promises.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise _Terminated(signum)

    hangup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, *hangup)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)




def _check_workdir(workdir: Path | None) -> None:
    """``--workdir`` must be new or an empty directory that can be written.

    An earlier run's folder holds its peers' keys and checkpoints: its peers would resume at its last round and
    stop at once, and the old results would be reported as this run's (user test, stop 23).

    Raises:
        ValueError: an empty path, a file, a non-empty directory, or a place that cannot be created.
    """
    if workdir is None:
        return
    if workdir.is_dir() and any(workdir.iterdir()):
        raise ValueError(f"--workdir {workdir} is not empty (an earlier run's keys and checkpoints would be resumed); "
                         "remove it or name a new directory")
    check_output_dir(workdir, flag="--workdir")


def _show_partial(report: dict[str, Any], written: Path, report_path: Path | None) -> Path:
    """Print a partial report's table and write it to ``--report`` too, signals deferred; return where it lies.

    Args:
        report: the partial report (of an interrupted or failed run).
        written: where the run already wrote it (the work folder's ``report.json``).
        report_path: ``--report``, or None.

    Returns:
        ``report_path`` once written there, else ``written`` (a failed write is reported, not raised).
    """
    from p2p_guard.simulation.orchestrator import signals_deferred, write_report
    from p2p_guard.simulation.table import format_table

    where = written
    with signals_deferred():
        try:
            print(format_table(report), flush=True)
        except BrokenPipeError:  # `simulate ... | head`: --report is written all the same
            silence_stdout()
        if report_path is not None:
            try:
                write_report(report, report_path)
                where = report_path
            except OSError as err:
                print_error(COMMAND, f"cannot write the report to {report_path}: {err}")
    return where


def _interrupted(e: Any, report_path: Path | None, workdir: Path, *, signum: int | None) -> int:
    """Ctrl+C, SIGTERM or SIGHUP: print the partial report's table, write it to ``--report`` too, say where.

    ``signum`` is None for Ctrl+C (exit 130), else the signal (exit 128 + signum: 143 SIGTERM, 129 SIGHUP).
    """
    what = "interrupted" if signum is None else _said(signum)
    code = EXIT_INTERRUPTED if signum is None else 128 + signum
    if e.report is None:
        print_error(COMMAND, f"{what}; every process was stopped; no partial report; logs in {workdir}")
        return code
    where = _show_partial(e.report, e.path, report_path)
    done = e.report.get("interrupted", {}).get("rounds_completed")
    print_error(COMMAND, f"{what} after {done} completed round(s); every process was stopped; partial report: "
                         f"{where}; logs in {workdir}")
    return code


def _failed(e: Any, report_path: Path | None) -> int:
    """A run that failed part-way: print the partial report's table, write it to ``--report`` too, say where; 1.

    Its rounds are as much measured as a finished run's: before, a ``--timeout-s`` that ran out (default 1200 s)
    or a peer that stopped (a full disk) lost every figure, where a Ctrl+C at the same moment kept them.
    """
    if e.report is None:
        print_error(COMMAND, str(e))
        return EXIT_FAILED
    where = _show_partial(e.report, e.path, report_path)
    done = e.report["failed"]["rounds_completed"]
    print_error(COMMAND, f"{e}; partial report of {done} completed round(s): {where}")
    return EXIT_FAILED


def run(args: argparse.Namespace) -> int:
    """Run ``p2p-guard simulate`` with parsed arguments and return the exit code."""
    try:
        config = _config(args)
        _check_swarm_size(config)
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    _warn_if_byzantine_majority(config)
    try:
        plan = _fault_plan(args, config)
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    try:
        check_output_file(args.report, flag="--report")
        _check_workdir(args.workdir)
    except ValueError as e:
        print_error(COMMAND, f"cannot write there: {e}")
        return EXIT_USAGE
    import psutil

    memory = psutil.virtual_memory()
    try:
        shapes = _check_names(config)  # a data split that cannot be: before the memory check
        params = sum(math.prod(shape) for shape in shapes)
        _check_memory(config, params=params, total=memory.total, available=memory.available)
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    _warn_if_guard_falls_back(config)
    _warn_if_upload_too_low(config, params, shapes)
    from p2p_guard.simulation.orchestrator import (
        SimulationError,
        SimulationInterrupted,
        make_workdir,
        run_simulation,
        write_report,
    )
    from p2p_guard.simulation.table import format_table

    try:
        workdir = make_workdir(args.workdir)
    except OSError as e:
        print_error(COMMAND, f"cannot write there: {e}")
        return EXIT_USAGE
    print(f"work directory (logs, events, states): {workdir}", file=sys.stderr)
    bar = not args.no_progress and sys.stderr.isatty()  # no bar frames in a log file
    try:
        with _sigterm_raises(), _progress_bar(config.rounds, enabled=bar) as on_progress:
            report = run_simulation(config, workdir, on_progress=on_progress, faults=plan)
    except SimulationInterrupted as e:
        cause = e.__cause__
        return _interrupted(e, args.report, workdir, signum=cause.signum if isinstance(cause, _Terminated) else None)
    except _Terminated as t:
        print_error(COMMAND, f"{_said(t.signum)}; every process was stopped; logs in {workdir}")
        return 128 + t.signum
    except KeyboardInterrupt:
        print_error(COMMAND, f"interrupted; every process was stopped; logs in {workdir}")
        return EXIT_INTERRUPTED
    except SimulationError as e:
        return _failed(e, args.report)
    try:
        print(format_table(report), flush=True)
    except BrokenPipeError:  # `simulate ... | head -2`: the reader has gone; --report is written all the same
        silence_stdout()
    if args.report is not None:
        try:
            write_report(report, args.report)
        except OSError as e:
            print_error(COMMAND, f"cannot write the report: {e}; it is also in {workdir / 'report.json'}")
            return EXIT_FAILED
    try:
        print(f"report: {args.report or workdir / 'report.json'}", flush=True)
    except BrokenPipeError:
        silence_stdout()
    return 0
