"""``p2p-guard verify-proof FILE``: check an equivocation proof offline.

A proof (``p2p_guard.protocol.proof``) is two envelopes validly signed by one sender for the same run and
round with different payload digests. Checking it needs nothing but the file: the public key is inside the
PeerID.

Exit codes: 0 the proof is valid (the accused PeerID, run, round and both digests are printed), 1 it is not
(the rejection reason is printed), 2 the file cannot be read.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from p2p_guard.cli.errors import print_error

__all__ = ["EXIT_INVALID", "EXIT_UNREADABLE", "EXIT_VALID", "add_parser", "run"]

logger = logging.getLogger(__name__)

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``verify-proof`` sub-command (its handler is :func:`run`).

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The sub-command's parser.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "verify-proof",
        help="check an equivocation proof file offline",
        description="Check that FILE proves equivocation: two envelopes signed by one sender for the same "
        "run and round with different payload digests. Exit 0 if valid, 1 if not, 2 if unreadable.",
    )
    parser.add_argument("file", metavar="FILE", help="the proof (raw bytes, as peers publish and write them)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Verify the proof in ``args.file`` and print the verdict.

    Args:
        args: parsed arguments (``file``).

    Returns:
        :data:`EXIT_VALID`, :data:`EXIT_INVALID` or :data:`EXIT_UNREADABLE`.
    """
    from p2p_guard.protocol.proof import max_proof_bytes, verify_proof  # torch: imported only when run
    from p2p_guard.protocol.reasons import Rejected

    path = Path(args.file)
    limit = max_proof_bytes()
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)  # one byte past the limit is enough to say OVERSIZE
    except OSError as error:
        print_error("verify-proof", f"cannot read {path}: {error.strerror or error}")
        return EXIT_UNREADABLE
    if len(data) > limit:  # only limit + 1 bytes were read: the file's size is not known, only that it is more
        print(f"INVALID proof {path}: oversize: proof is more than {limit} bytes (the limit)")  # noqa: T201
        return EXIT_INVALID
    result = verify_proof(data)
    if isinstance(result, Rejected):
        print(f"INVALID proof {path}: {result.reason.value}: {result.detail}")  # noqa: T201 - CLI output
        return EXIT_INVALID
    print(f"VALID equivocation proof {path}")  # noqa: T201 - CLI output
    print(f"  accused   {result.sender_b58}")  # noqa: T201
    print(f"  run       {result.run_id}")  # noqa: T201
    print(f"  round     {result.round}")  # noqa: T201
    print(f"  digest a  {result.digest_a.hex()}")  # noqa: T201
    print(f"  digest b  {result.digest_b.hex()}")  # noqa: T201
    return EXIT_VALID
