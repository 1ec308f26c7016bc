"""``swarm.dht.node_id_of``: a peer's DHT node id follows from its PeerID, so a restart is the same DHT node."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from hivemind.dht.routing import DHTID
from hivemind.p2p import PeerID

from p2p_guard.identity import Identity
from p2p_guard.swarm import dht as dht_module


def _peer_id(identity: Identity) -> PeerID:
    return PeerID.from_base58(identity.peer_id_b58)


def test_the_node_id_is_the_hash_of_the_peer_id() -> None:
    a, b = Identity.from_seed(bytes(32)), Identity.from_seed(bytes([1]) * 32)
    assert dht_module.node_id_of(_peer_id(a)) == dht_module.node_id_of(_peer_id(Identity.from_seed(bytes(32))))
    assert dht_module.node_id_of(_peer_id(a)) == DHTID.generate(source=_peer_id(a).to_bytes())
    assert dht_module.node_id_of(_peer_id(a)) != dht_module.node_id_of(_peer_id(b))


def test_every_started_node_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted peer took a fresh random node id: the others' routing tables then held it two, three times."""
    created: list[dict[str, Any]] = []

    async def create(**kwargs: Any) -> str:
        created.append(kwargs)
        return "node"

    monkeypatch.setattr(dht_module.DHTNode, "create", create)
    peer_id = _peer_id(Identity.from_seed(bytes(32)))
    for _ in range(2):  # a peer and its restart
        assert asyncio.run(dht_module._create_node(SimpleNamespace(peer_id=peer_id), [], [])) == "node"  # type: ignore[arg-type]
    assert [c["node_id"] for c in created] == [dht_module.node_id_of(peer_id)] * 2
