"""``p2p-guard bootstrap``: run the entry point of a swarm (a DHT node with a persistent identity)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from p2p_guard.cli.config_files import read_table

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {"identity": "bootstrap/identity.key", "host": "0.0.0.0", "port": 31337,
                            "announce_host": None, "address_file": None}


def add_parser(subparsers: Any) -> None:
    """Register ``bootstrap`` on the CLI's subparsers."""
    parser = subparsers.add_parser("bootstrap", help="run a bootstrap node (the swarm's entry point)",
                                   description="Run a bootstrap DHT node until Ctrl+C / SIGTERM. "
                                               "Flags override the --config file.")
    parser.add_argument("--config", metavar="TOML", help="config file with a [bootstrap] table")
    parser.add_argument("--identity", help=f"identity file, created on first start (default {DEFAULTS['identity']})")
    parser.add_argument("--host", help=f"listen address (default {DEFAULTS['host']})")
    parser.add_argument("--port", type=int, help=f"TCP port to open (default {DEFAULTS['port']}; 0 = any)")
    parser.add_argument("--announce-host", dest="announce_host", help="public IP peers should dial")
    parser.add_argument("--address-file", dest="address_file", help="also write the multiaddrs to this file")
    parser.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Merge defaults, the ``--config`` file and flags.

    Raises:
        ValueError: on an unknown key or a bad file.
    """
    values = dict(DEFAULTS)
    if args.config:
        table = read_table(args.config, "bootstrap")
        unknown = sorted(set(table) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"{args.config}: unknown setting(s) {unknown}; known: {sorted(DEFAULTS)}")
        values.update(table)
    values.update({k: getattr(args, k) for k in DEFAULTS if getattr(args, k, None) is not None})
    return values


def _print_maddrs(maddrs: list[str]) -> None:
    print("Bootstrap node is up. Peers join with:", flush=True)  # noqa: T201 - CLI output
    for maddr in maddrs:
        print(f"  p2p-guard peer --initial-peers {maddr}", flush=True)  # noqa: T201


def run(args: argparse.Namespace) -> int:
    """Run the bootstrap node; return the exit code."""
    from hivemind.p2p import P2PDaemonError  # hivemind is heavy: imported only when needed

    from p2p_guard.swarm.bootstrap import run_bootstrap

    try:
        values = resolve(args)
    except ValueError as e:
        logger.error("%s", e)
        return 2
    try:
        return run_bootstrap(identity_path=values["identity"], host=values["host"], port=int(values["port"]),
                             announce_host=values["announce_host"], address_file=values["address_file"],
                             on_ready=_print_maddrs)
    except (ValueError, OSError, TimeoutError, P2PDaemonError) as e:
        logger.error("bootstrap node stopped: %s", e)
        return 1
