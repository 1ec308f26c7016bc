"""``p2p-guard peer``: join a swarm as a volunteer (or as a simulated adversarial peer with ``--attack``)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any

from p2p_guard.cli.config_files import read_table
from p2p_guard.swarm.config import PeerConfig, config_from_mapping

__all__ = ["add_parser", "resolve_config", "run"]

logger = logging.getLogger(__name__)

_FLAGS: dict[str, dict[str, Any]] = {
    "initial_peers": {"nargs": "+", "metavar": "MULTIADDR", "help": "bootstrap multiaddr(s) /ip4/HOST/tcp/PORT/p2p/PEERID"},
    "run_id": {"help": "name of the training run (peers of other runs are ignored)"},
    "task": {"help": "task: digits, fashion-mnist or shakespeare"},
    "seed": {"type": int, "help": "run seed (the initial model is built from it)"},
    "peer_index": {"type": int, "help": "this peer's data shard in [0, num_peers)"},
    "num_peers": {"type": int, "help": "number of data shards (intended swarm size)"},
    "partition": {"help": "iid or dirichlet:ALPHA"},
    "rounds": {"type": int, "help": "outer rounds to run (0 = until stopped)"},
    "inner_steps": {"type": int, "metavar": "H", "help": "inner AdamW steps per outer round"},
    "guard": {"help": "aggregation rule: semantic (default), mean, median, trimmed_mean, multi_krum, ..."},
    "assumed_byzantine": {"type": int, "metavar": "F", "help": "f̂, Byzantine senders the guard tolerates"},
    "attack": {"help": "run as a simulated adversarial peer: NAME[:key=value,...] or module:Class"},
    "byzantine_count": {"type": int, "help": "colluding Byzantine peers an attack may assume"},
    "codec": {"help": "pseudo-gradient wire codec: fp32, fp16, int8, int4 or topk[:density=0.02]"},
    "min_peers": {"type": int, "help": "start the first round once this many peers are present"},
    "commit_timeout_s": {"type": float, "help": "commit phase deadline, seconds"},
    "reveal_wait_s": {"type": float, "help": "longest wait for the others' close records before revealing, s"},
    "fetch_timeout_s": {"type": float, "help": "payload fetch deadline, seconds"},
    "join_timeout_s": {"type": float, "help": "how long to wait for min_peers, seconds"},
    "max_inbound_streams": {"type": int, "help": "inbound streams, all peers together (default 64)"},
    "max_inbound_streams_per_peer": {"type": int, "help": "inbound streams of one peer (default 4)"},
    "max_requests_per_peer_per_s": {"type": float, "help": "requests/s of one peer (default 5)"},
    "request_burst": {"type": int, "help": "requests one peer may send at once (default 10)"},
    "serve_timeout_s": {"type": float, "help": "min. time to write one answer, s (default 10)"},
    "min_serve_bytes_per_s": {"type": int, "help": "slowest reader served, bytes/s (default 1 MiB/s)"},
    "request_timeout_s": {"type": float, "help": "time a caller has to send its request, s (default 10)"},
    "fetch_idle_timeout_s": {"type": float, "help": "longest wait for a sender's next bytes, s (default 5)"},
    "min_fetch_bytes_per_s": {"type": int, "help": "slowest sender read, bytes/s (default 64 KiB/s)"},
    "allow_peers": {"metavar": "FILE", "help": "hear only the PeerIDs in FILE (one a line)"},
    "identity": {"help": "Ed25519 identity file (created on first start, mode 0600)"},
    "host": {"help": "listen address"},
    "port": {"type": int, "help": "TCP port to listen on (0 = any free port)"},
    "announce_host": {"help": "public address to announce (for a server behind a fixed IP)"},
    "device": {"choices": ["auto", "cpu", "cuda"], "help": "compute device (auto: CUDA if present)"},
    "events": {"metavar": "PATH", "help": "write JSON-lines events (verdicts, rounds) here"},
    "state_out": {"metavar": "PATH", "help": "save the final model state here"},
    "proof_dir": {"metavar": "DIR", "help": "write equivocation proofs here (default: proofs/ beside --events)"},
    "reputation": {"action": argparse.BooleanOptionalAction,
                   "help": "publish signed verdicts and keep a reputation (default: on)"},
    "reputation_exclusion": {"action": argparse.BooleanOptionalAction,
                             "help": "drop senders the reputation excludes before aggregation (default: off)"},
    "start_peers": {"type": int, "help": "the first round waits for this many peers (default: min_peers)"},
    "fanout": {"type": int, "metavar": "K", "help": "most payloads fetched per round (default 8)"},
    "max_staleness": {"type": int, "help": "oldest update applied, in rounds (default 4)"},
    "overlap": {"action": argparse.BooleanOptionalAction, "help": "overlap communication with the next inner phase"},
    "mix_every": {"type": int, "help": "mixing step every this many rounds (0: off; default 2)"},
    "mix_peers": {"type": int, "help": "states fetched per mixing step (default 3)"},
    "mix_radius": {"type": float, "help": "cap on the mixing clip radius, relative to |theta| (default 0.05)"},
    "catch_up_peers": {"type": int, "help": "states a catching-up peer takes the median of (default 5)"},
    "checkpoint_dir": {"metavar": "DIR", "help": "own checkpoint, written every round, resumed on restart"},
    "snapshot_dir": {"metavar": "DIR", "help": "write theta after every round as rNNNNN.npy"},
    "control_file": {"metavar": "PATH", "help": "fault injection: JSON {\"slowdown\": F} read every round"},
}


def add_parser(subparsers: Any) -> None:
    """Register ``peer`` on the CLI's subparsers."""
    parser = subparsers.add_parser("peer", help="join a swarm as a volunteer peer",
                                   description="Join a p2p_guard swarm and train. Flags override the --config file.")
    parser.add_argument("--config", metavar="TOML", help="peer config file with a [peer] table (see peers/)")
    for name, options in _FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None, **options)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def resolve_config(args: argparse.Namespace) -> PeerConfig:
    """Merge the defaults, the ``--config`` file and the command-line flags (in that order).

    Raises:
        ValueError: on a bad file or value (the message names the setting), or a bad ``--allow-peers`` file
            (the message names the file and the line).
    """
    values: dict[str, Any] = read_table(args.config, "peer") if args.config else {}
    for name in _FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    config = config_from_mapping(values, source=args.config or "command line")
    if not config.initial_peers:
        raise ValueError("no --initial-peers given (the multiaddr printed by `p2p-guard bootstrap`)")
    if config.allow_peers is not None:
        from p2p_guard.swarm.allowlist import load_allowlist  # fail at start on a bad allow-list file

        load_allowlist(config.allow_peers)
    check_names(config)
    return config


def check_names(config: PeerConfig) -> None:
    """Fail before any process starts on a bad task, guard, attack or bootstrap address.

    Raises:
        ValueError: naming the bad setting and the valid choices.
    """
    from p2p_guard.attacks import load_attack
    from p2p_guard.swarm.dht import check_initial_peers

    check_task_and_guard(config.task, config.guard)
    if config.attack:
        load_attack(config.attack)
    check_initial_peers(config.initial_peers)


def check_task_and_guard(task: str, guard: str) -> None:
    """Fail on an unknown task or guard name (``peer`` and ``simulate`` both check before starting anything).

    Raises:
        ValueError: naming the bad value and the valid choices.
    """
    from p2p_guard.guard import GUARD_NAMES
    from p2p_guard.tasks import TASK_NAMES

    if task not in TASK_NAMES:
        raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(TASK_NAMES)}")
    if guard not in GUARD_NAMES:
        raise ValueError(f"unknown guard {guard!r}; known guards: {', '.join(GUARD_NAMES)}")


def run(args: argparse.Namespace) -> int:
    """Run the peer; return the exit code."""
    from p2p_guard.swarm.peer import run_peer  # heavy (torch, hivemind): imported only when needed

    try:
        config = resolve_config(args)
    except ValueError as e:
        logger.error("%s", e)
        return 2
    logger.info("peer config: %s", {k: v for k, v in dataclasses.asdict(config).items() if v not in (None, {}, ())})
    return run_peer(config, progress=not args.no_progress)
