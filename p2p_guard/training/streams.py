"""Which data shard a peer trains on and what keys its private generators: its ``--peer-index`` or its PeerID.

Every generator a peer draws from in a round (``round_generator(run_id, seed, key, round, salt)``: salt 1 its inner
batches, 2 a wire attack, 3 an update attack, 4 its guard's private held-out batch) is private to that peer: no
draw has to agree across the swarm (θ_0 comes from the run seed alone, the mixing samples from the OS). So the
key only has to differ between peers.

- ``--peer-index i`` given: shard ``i`` and key ``i``, as before (``simulate`` and the benchmarks give every peer
  its own index; their numbers do not change).
- not given (the default): the shard is ``SHA-256("p2p-guard/shard|" + PeerID) mod num_peers`` and the key is the
  base58 PeerID itself. Both follow from the identity key alone, so two volunteers never draw the same batches
  (two may share a shard, each with its own batches: with 3 shards and 3 volunteers, in 7 of 9 key draws some
  pair does). A running peer then moves to a shard no present peer claims, when there is one
  (``swarm.shard_claims.choose_shard``, at start); its key stays the PeerID. Set ``--peer-index`` to cut the
  data exactly.

A key is formatted into ``round_generator``'s hashed text; a base58 PeerID (``12D3KooW…``, ``Qm…``) always holds
a letter, so it never reads as an index.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["PeerStream", "derived_shard_index", "peer_stream"]

_SHARD_DOMAIN = b"p2p-guard/shard|"


@dataclass(frozen=True)
class PeerStream:
    """A peer's data shard and the key of its private per-round generators.

    Attributes:
        shard_index: its data shard, in ``[0, num_peers)``.
        key: the ``peer`` argument of ``training.local.round_generator``: the index when one was set, else the
            base58 PeerID.
        derived: True when both come from the PeerID (no ``--peer-index`` was set).
    """

    shard_index: int
    key: int | str
    derived: bool


def derived_shard_index(peer_id: str, num_peers: int) -> int:
    """The data shard of a peer that set no index, from its PeerID alone.

    ``SHA-256("p2p-guard/shard|" + peer_id)``, its first 8 bytes as a big-endian integer, mod ``num_peers``.

    Args:
        peer_id: the peer's base58 PeerID.
        num_peers: the number of shards, >= 1.

    Raises:
        ValueError: ``num_peers`` < 1 or an empty ``peer_id``.
    """
    if num_peers < 1:
        raise ValueError(f"num_peers must be >= 1; got {num_peers}")
    if not peer_id:
        raise ValueError("peer_id must not be empty")
    digest = hashlib.sha256(_SHARD_DOMAIN + peer_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % num_peers


def peer_stream(peer_index: int | None, peer_id: str, num_peers: int) -> PeerStream:
    """The shard and generator key of a peer (see the module docstring).

    Args:
        peer_index: the ``--peer-index`` the user set, or None.
        peer_id: the peer's base58 PeerID (from its identity key).
        num_peers: the number of shards, >= 1.

    Raises:
        ValueError: ``peer_index`` outside ``[0, num_peers)``, ``num_peers`` < 1 or an empty ``peer_id``.
    """
    if peer_index is None:
        return PeerStream(derived_shard_index(peer_id, num_peers), peer_id, derived=True)
    if not 0 <= peer_index < num_peers:
        raise ValueError(f"peer_index must be in [0, num_peers); got peer_index={peer_index}, num_peers={num_peers}")
    return PeerStream(peer_index, peer_index, derived=False)
