"""DHT keys and subkeys of a run, and reading the signed records stored under them.

| key                               | subkey            | value                                   | TTL   |
|-----------------------------------|-------------------|-----------------------------------------|-------|
| ``p2p_guard/<run>/presence``      | sender PeerID b58 | signed ``presence`` record (its round)  | 20 s  |
| ``p2p_guard/<run>/<round>/commit``| sender PeerID b58 | signed envelope (``protocol.envelope``) | 10 min|

A subkey is only a claim: every value is verified against the key inside the PeerID it names, and a value
signed by a different key than its subkey names is rejected as impersonation.
"""

from __future__ import annotations

import logging

from p2p_guard.identity import peer_id_to_b58
from p2p_guard.protocol.records import SignedRecord, open_record
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.swarm.dht import SwarmDHT

__all__ = ["COMMIT_TTL_S", "PRESENCE_TTL_S", "commit_key", "presence_key", "read_presence"]

logger = logging.getLogger(__name__)

PRESENCE_TTL_S = 20.0
COMMIT_TTL_S = 600.0


def commit_key(run_id: str, round_: int) -> str:
    """DHT key under which the signed envelopes of ``round_`` are committed."""
    return f"p2p_guard/{run_id}/{round_}/commit"


def presence_key(run_id: str) -> str:
    """DHT key under which peers announce that they are alive, and at which round."""
    return f"p2p_guard/{run_id}/presence"


async def read_presence(dht: SwarmDHT, run_id: str) -> dict[str, int]:
    """Return ``{PeerID b58: round}`` for every validly signed, unexpired presence record.

    Args:
        dht: the DHT to read.
        run_id: the run.

    Returns:
        The present peers and the round each says it is in (self-reported: a hint, never trusted).
    """
    present: dict[str, int] = {}
    for subkey, raw in (await dht.read(presence_key(run_id))).items():
        record = open_record(raw, kind="presence", run_id=run_id)
        if isinstance(record, Rejected):
            logger.debug("presence record under %s rejected: %s", subkey[:16], record.detail)
            continue
        if _owner_matches(record, subkey):
            present[subkey] = int(record.value)
    return present


def _owner_matches(record: SignedRecord, subkey: str) -> bool:
    return peer_id_to_b58(record.sender) == subkey
