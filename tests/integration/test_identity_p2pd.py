"""Integration: hivemind's p2pd runs with our key file, and its PeerID is the one p2p_guard computes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from p2p_guard.identity import Identity, public_key_from_peer_id


async def _daemon_peer_id(identity_path: Path) -> tuple[bytes, str]:
    """Start a P2P daemon on loopback with ``identity_path``; return its PeerID (bytes, base58)."""
    from hivemind.p2p import P2P

    p2p = await asyncio.wait_for(
        P2P.create(
            identity_path=str(identity_path),
            host_maddrs=["/ip4/127.0.0.1/tcp/0"],
            check_if_identity_free=False,
        ),
        timeout=30,
    )
    try:
        return p2p.peer_id.to_bytes(), p2p.peer_id.to_base58()
    finally:
        await asyncio.wait_for(p2p.shutdown(), timeout=10)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_p2pd_accepts_identity_file_and_reports_same_peer_id(tmp_path: Path) -> None:
    pytest.importorskip("hivemind")
    path = tmp_path / "peer.key"
    identity = Identity.load_or_create(path)

    peer_id, peer_id_b58 = asyncio.run(_daemon_peer_id(path))

    assert peer_id == identity.peer_id
    assert peer_id_b58 == identity.peer_id_b58
    assert public_key_from_peer_id(peer_id) == identity.public_key
    assert Identity.load(path).peer_id == identity.peer_id, "the daemon must not rewrite the key file"


@pytest.mark.integration
@pytest.mark.timeout(30)
def test_hivemind_protobuf_parses_identity_file(tmp_path: Path) -> None:
    crypto_pb2 = pytest.importorskip("hivemind.proto.crypto_pb2")
    path = tmp_path / "peer.key"
    identity = Identity.load_or_create(path)

    message = crypto_pb2.PrivateKey.FromString(path.read_bytes())

    assert message.key_type == crypto_pb2.KeyType.Ed25519
    assert message.data[32:] == identity.public_key
    assert message.SerializeToString() == path.read_bytes()
