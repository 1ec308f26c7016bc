"""``p2p-guard bootstrap``: run the entry point of a swarm (a DHT node with a persistent identity).

Every :class:`BootstrapConfig` field is a flag and a key of the ``[bootstrap]`` table of ``--config``.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any

from p2p_guard.cli.errors import EXIT_FAILED, EXIT_USAGE, print_error
from p2p_guard.cli.preflight import (
    check_announce_host,
    check_identity_file,
    check_listen_host,
    check_output_file,
    check_port_free,
    lock_identity,
)
from p2p_guard.cli.typed_config import add_config_flags, load_config
from p2p_guard.swarm.config import REACHABILITY

__all__ = ["BootstrapConfig", "add_parser", "resolve", "run"]

logger = logging.getLogger(__name__)

COMMAND = "bootstrap"


@dataclass(frozen=True)
class BootstrapConfig:
    """Settings of a bootstrap node.

    Attributes:
        identity: identity file, created on first start (mode 0600); its PeerID is part of the multiaddr
            peers join with, so keep it. A missing folder is created for the default path only; another path's
            folder must exist (a mistyped one is an error, not a new PeerID), whereas an output file's missing
            folders are created.
        host: listen address (0.0.0.0: every interface).
        port: TCP port to open (0 = any free port).
        announce_host: public IP peers should dial, when it differs from the listen address (a cloud VM
            behind 1:1 NAT).
        address_file: also write the multiaddrs to this file, one a line, once the node is up; missing folders
            are created.
        use_relay: serve as a circuit relay for peers behind NAT once AutoNAT finds this node reachable (the
            bootstrap node is a natural relay: public, and every peer knows it). Relayed traffic goes through
            this host (p2pd's limits: 16 circuits per peer, 4 GiB per direction and 30 min per connection).
        reachability: ``auto`` (AutoNAT decides), ``public`` (reachable: relay at once, no AutoNAT wait; for a
            host you know is public) or ``private``.
    """

    identity: str = "bootstrap/identity.key"
    host: str = "0.0.0.0"
    port: int = 31337
    announce_host: str | None = None
    address_file: str | None = None
    use_relay: bool = True
    reachability: str = "auto"

    def __post_init__(self) -> None:
        """Check the values.

        Raises:
            ValueError: naming the bad setting and its value.
        """
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535]; got port={self.port}")
        for name in ("identity", "host"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        if self.reachability not in REACHABILITY:
            raise ValueError(f"reachability must be one of {', '.join(REACHABILITY)}; "
                             f"got reachability={self.reachability!r}")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bootstrap`` on the CLI's subparsers.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The sub-command's parser.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND, help="run a bootstrap node (the swarm's entry point)",
        description="Run a bootstrap DHT node until Ctrl+C / SIGTERM. Every setting is a flag and a key of the "
                    "[bootstrap] table of --config; flags override the file.")
    parser.add_argument("--config", metavar="TOML", help="config file with a [bootstrap] table")
    add_config_flags(parser.add_argument_group("settings"), BootstrapConfig,
                     metavars={"identity": "FILE", "host": "ADDR", "announce_host": "ADDR",
                               "address_file": "FILE", "reachability": "{auto,public,private}"})
    parser.set_defaults(func=run)
    return parser


def resolve(args: argparse.Namespace) -> BootstrapConfig:
    """Merge defaults, the ``--config`` file and flags.

    Raises:
        ValueError: on an unknown key, a bad value or a bad file.
    """
    return load_config(BootstrapConfig, args=args, table="bootstrap", config_path=getattr(args, "config", None))


def _print_maddrs(maddrs: list[str]) -> None:
    print("Bootstrap node is up. Peers join with:", flush=True)  # noqa: T201 - CLI output
    for maddr in maddrs:
        print(f"  p2p-guard peer --initial-peers {maddr}", flush=True)  # noqa: T201


def run(args: argparse.Namespace) -> int:
    """Check the settings, then run the bootstrap node; return the exit code (``scipy.optimize`` deferred first)."""
    from p2p_guard.swarm._deferred import defer_import

    defer_import("scipy.optimize")
    try:
        config = resolve(args)
        # only the default's folder is created: a mistyped --identity folder would be a new PeerID, and every
        # multiaddr already handed to the peers would stop working
        check_identity_file(config.identity, create_folder=config.identity == BootstrapConfig.identity)
        session = lock_identity(config.identity)  # one process per key on this machine, peers included
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    with session:
        return _run_locked(config)


def _run_locked(config: BootstrapConfig) -> int:
    """Run the bootstrap node of ``config``, whose identity we hold (:func:`run`'s second half); its exit code."""
    try:
        check_listen_host(config.host)
        check_port_free(config.host, config.port)
        check_announce_host(config.announce_host, config.port)
        check_output_file(config.address_file, flag="--address-file")
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    from hivemind.p2p import P2PDaemonError  # hivemind is heavy: imported only when needed

    from p2p_guard.swarm.bootstrap import run_bootstrap

    try:
        return run_bootstrap(identity_path=config.identity, host=config.host, port=config.port,
                             announce_host=config.announce_host, address_file=config.address_file,
                             use_relay=config.use_relay, reachability=config.reachability,
                             on_ready=_print_maddrs)
    except (ValueError, OSError, TimeoutError, P2PDaemonError) as e:
        print_error(COMMAND, f"bootstrap node stopped: {e}")
        return EXIT_FAILED
