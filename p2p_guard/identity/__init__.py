"""identity: one Ed25519 key is the peer's libp2p identity, its PeerID and its signing key.

Module map:
    keys.py: :class:`Identity` (key file ⇄ key pair, ``peer_id``, ``peer_id_b58``, ``sign``),
        :func:`public_key_from_peer_id`, :func:`verify` (never raises), :func:`peer_id_to_b58`,
        :func:`peer_id_from_b58`.

The key file is a libp2p protobuf ``PrivateKey`` of type Ed25519, so hivemind's
``P2P.create(identity_path=..., check_if_identity_free=False)`` runs ``p2pd`` with the very same identity.
This package does not import hivemind.

References:
    [1] libp2p, "Peer Ids and Keys", https://github.com/libp2p/specs/blob/master/peer-ids/peer-ids.md
    [2] RFC 8032, "Edwards-Curve Digital Signature Algorithm (EdDSA)", 2017.
"""

from p2p_guard.identity.keys import (
    PEER_ID_BYTES,
    PEER_ID_PREFIX,
    PUBLIC_KEY_BYTES,
    SIGNATURE_BYTES,
    Identity,
    peer_id_from_b58,
    peer_id_to_b58,
    public_key_from_peer_id,
    verify,
)

__all__ = [
    "PEER_ID_BYTES",
    "PEER_ID_PREFIX",
    "PUBLIC_KEY_BYTES",
    "SIGNATURE_BYTES",
    "Identity",
    "peer_id_from_b58",
    "peer_id_to_b58",
    "public_key_from_peer_id",
    "verify",
]
