"""``p2p-guard peer``: join a swarm as a volunteer (or as a simulated adversarial peer with ``--attack``).

Every :class:`~p2p_guard.swarm.config.PeerConfig` field is a flag (``--field-name``) and a key of the
``[peer]`` table of ``--config``; flags override the file, the file overrides the defaults
(:mod:`p2p_guard.cli.typed_config`). Everything is checked before the peer starts, the cheap checks first:
the file and every value's type, then the partition, identity file and ports, the task, guard and attack names,
the task's files and the bootstrap and relay addresses (no torch, no hivemind: well under 2 s), then the
settings' ranges and the codec, the guard and attack with their parameters and the task's data (torch).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import sys
from collections.abc import Mapping
from typing import Any

from p2p_guard.cli import preflight
from p2p_guard.cli.errors import EXIT_USAGE, print_error
from p2p_guard.cli.preflight import (
    check_announce_host,
    check_identity_file,
    check_listen_host,
    check_output_dir,
    check_output_file,
    check_port_free,
)
from p2p_guard.cli.typed_config import add_config_flags, load_config
from p2p_guard.swarm.config import PeerConfig

__all__ = ["add_parser", "check_names", "resolve_config", "run"]

logger = logging.getLogger(__name__)

COMMAND = "peer"

#: Cosmetic metavars; a field not named here gets one from its type.
METAVARS = {"initial_peers": "MULTIADDR", "task": "SPEC", "inner_steps": "H", "assumed_byzantine": "F",
            "allow_peers": "FILE", "identity": "FILE", "events": "PATH", "state_out": "PATH", "proof_dir": "DIR",
            "host": "ADDR", "announce_host": "ADDR", "relays": "MULTIADDR", "reachability": "{auto,public,private}",
            "mix_precision": "{fp32,fp16,int8}",
            "metrics_port": "PORT"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``peer`` on the CLI's subparsers.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The sub-command's parser.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND, help="join a swarm as a volunteer peer",
        description="Join a p2p_guard swarm and train. Every setting is a flag and a key of the [peer] table "
                    "of --config; flags override the file, the file overrides the defaults shown.")
    parser.add_argument("--config", metavar="TOML", help="peer config file with a [peer] table (see peers/)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (there is none anyway when stderr is not a terminal)")
    add_config_flags(parser.add_argument_group("settings"), PeerConfig, metavars=METAVARS)
    parser.set_defaults(func=run)
    return parser


def resolve_config(args: argparse.Namespace) -> PeerConfig:
    """Merge the defaults, the ``--config`` file and the command-line flags (in that order), and check them.

    Raises:
        ValueError: on a bad file or value (the message names the setting), a bad partition, no
            ``--initial-peers``, or a bad ``--allow-peers`` file (the message names the file and the line; a
            list holding only this peer's own PeerID, read from an existing ``--identity`` file, is bad too).
    """
    config = load_config(PeerConfig, args=args, table="peer", config_path=getattr(args, "config", None),
                         precheck=_precheck)
    if config.allow_peers is not None:
        from p2p_guard.swarm.allowlist import load_allowlist  # fail at start on a bad allow-list file

        allowed = load_allowlist(config.allow_peers)
        own = _existing_peer_id(config.identity)
        if own is not None and not allowed - {own}:
            raise ValueError(f"{config.allow_peers}: the allow-list holds only this peer's own PeerID {own}; a peer "
                             f"that hears nobody never trains (list the other members' PeerIDs)")
    return config


def _existing_peer_id(identity: str) -> str | None:
    """The base58 PeerID of the key file ``identity`` if it exists and is readable, else None.

    A new key's PeerID cannot be on a list yet; a bad key file is reported when the peer starts.
    """
    from p2p_guard.identity import Identity

    try:
        return Identity.load(identity).peer_id_b58
    except (OSError, ValueError):
        return None


def _precheck(values: Mapping[str, Any]) -> None:
    """Checks on the merged settings before PeerConfig is built (its codec check imports torch); no torch here.

    Raises:
        ValueError: on a bad partition spec, an empty path (``--identity ""``, ``--checkpoint-dir ""``, ...),
            identity file, ``--host`` (not an IP of this machine),
            ``--announce-host`` (not an IP, or with port 0), ``--events`` or ``--state-out`` path, a
            checkpoint, snapshot or proof folder that cannot be written, a taken port (``port`` or
            ``metrics_port``), an unknown task, guard or attack name, a task's missing files, no
            ``--initial-peers``, or a malformed bootstrap or relay address.
    """
    from p2p_guard.simulation.config import check_partition

    check_partition(values["partition"])
    for key in ("identity", "allow_peers", "control_file"):  # Path("") is the current folder: "--identity .: ..."
        if isinstance(values.get(key), str) and not values[key].strip():
            raise ValueError(f"{_flag(key)}: empty path")
    if isinstance(values["identity"], str):
        check_identity_file(values["identity"], create_folder=False)  # a mistyped folder is no new PeerID
    host, port = values["host"], values["port"]
    if isinstance(host, str):
        check_listen_host(host)
    if isinstance(host, str) and type(port) is int and 0 < port <= 65535:
        check_port_free(host, port)
    if isinstance(values["announce_host"], str) and type(port) is int:
        check_announce_host(values["announce_host"], port)
    for key in ("events", "state_out"):
        if isinstance(values[key], str):
            check_output_file(values[key], flag=_flag(key), replaced=False)  # appended / torch.save in place
    for key in ("checkpoint_dir", "snapshot_dir", "proof_dir"):
        if isinstance(values[key], str):
            check_output_dir(values[key], flag=_flag(key))
    metrics_port = values.get("metrics_port")
    if isinstance(host, str) and type(metrics_port) is int and 0 < metrics_port <= 65535:
        try:
            check_port_free(host, metrics_port)
        except ValueError:
            raise ValueError(f"--metrics-port {metrics_port}: cannot listen on {host} (already in use?); pick "
                             "another") from None
    task, guard, attack = values["task"], values["guard"], values["attack"]
    if isinstance(attack, str):
        from p2p_guard.simulation.config import split_attack_mix

        if len(split_attack_mix(attack)) > 1:
            raise ValueError(f"--attack {attack!r}: an attack mix (A+B) is for `simulate`, which splits its Byzantine "
                             "peers into groups; a peer runs one attack")
    if isinstance(task, str) and isinstance(guard, str) and (attack is None or isinstance(attack, str)):
        preflight.check_names(task, guard, attack)
    if not values["initial_peers"]:
        raise ValueError("no --initial-peers given (the multiaddr printed by `p2p-guard bootstrap`)")
    from p2p_guard.swarm.addresses import check_initial_peers  # hivemind's parser, without hivemind

    check_initial_peers(values["initial_peers"])
    check_initial_peers(values["relays"], what="--relays")


def _flag(key: str) -> str:
    """The command-line flag of a setting: ``state_out`` → ``--state-out``."""
    return "--" + key.replace("_", "-")


def check_names(config: PeerConfig) -> None:
    """Fail before any process starts on a bad task or data, guard, attack or bootstrap or relay address.

    The cheap checks again (a no-op after :func:`resolve_config`), then the guard and attack built with their
    parameters, the task's data read, the model's size against ``--max-parameters`` and ``--max-envelope-bytes``
    (``swarm.peer.check_model_fits``, signed with a throwaway key), no folder in ``--checkpoint-dir`` where a
    file it replaces each round goes, no intact checkpoint there of another model (a mistyped ``--task``), and
    ``--device cuda`` checked against this machine (torch).

    Raises:
        ValueError: naming the bad setting and the valid choices, or the limit our own updates would exceed.
    """
    from p2p_guard.swarm.addresses import check_initial_peers

    preflight.check_names(config.task, config.guard, config.attack)
    check_initial_peers(config.initial_peers)
    check_initial_peers(config.relays, what="--relays")
    # with no --peer-index the shard comes from the PeerID, unknown before the key is read: any index tells whether
    # the data can be cut into num_peers shards
    shapes = preflight.check_plugins(config.task, config.guard, config.attack,
                                     shard=(config.num_peers, config.peer_index or 0, config.partition, config.seed))
    from p2p_guard.identity import Identity  # torch: already imported by check_plugins
    from p2p_guard.swarm.checkpoint import COMMIT_MARK, FILE_NAME, PREVIOUS_NAME, load_resumable
    from p2p_guard.swarm.peer import KNOWN_PEERS_FILE, check_model_fits
    from p2p_guard.training.local import pick_device

    preflight.check_replaceable_files(config.checkpoint_dir, (FILE_NAME, PREVIOUS_NAME, COMMIT_MARK, KNOWN_PEERS_FILE),
                                      flag="--checkpoint-dir")
    numel = sum(math.prod(shape) for shape in shapes)
    check_model_fits(config, numel, shapes, 0, Identity.generate())  # 0 samples: the shortest envelope
    if config.checkpoint_dir:  # an intact checkpoint of another model (a mistyped --task) was overwritten in 2 rounds
        load_resumable(config.checkpoint_dir, run_id=config.run_id, numel=numel)  # OtherModelCheckpoint: ValueError

    pick_device(config.device)


def run(args: argparse.Namespace) -> int:
    """Check everything, then run the peer; return the exit code (2: a usage error, printed on one line).

    Before anything imports hivemind, ``scipy.optimize`` is deferred for this process (``swarm._deferred``: about
    25 MiB a peer never uses).
    """
    from p2p_guard.swarm._deferred import defer_import

    defer_import("scipy.optimize")
    try:
        config = resolve_config(args)
        check_names(config)
        session = preflight.lock_identity(config.identity)  # one peer per key on this machine
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    with session:
        try:
            folder = preflight.lock_checkpoint_dir(config.checkpoint_dir)  # one peer per checkpoint folder
        except ValueError as e:
            print_error(COMMAND, str(e))
            return EXIT_USAGE
        with folder:
            return _run_checked(config, args)


def _run_checked(config: PeerConfig, args: argparse.Namespace) -> int:
    """Run the peer of a checked ``config`` (:func:`run`'s second half); return its exit code."""
    logger.debug("peer config: %s", {k: v for k, v in dataclasses.asdict(config).items() if v not in (None, {}, ())})
    from tqdm.contrib.logging import logging_redirect_tqdm

    from p2p_guard.swarm.peer import run_peer  # heavy (torch, hivemind): imported once everything is checked

    progress = not args.no_progress and sys.stderr.isatty()  # no bar frames in a log file
    if not progress:
        return run_peer(config, progress=False)
    with logging_redirect_tqdm(loggers=[logging.getLogger("p2p_guard")]):
        return run_peer(config, progress=True)
