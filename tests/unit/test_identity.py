"""Unit tests for p2p_guard.identity: key file, PeerID, sign/verify (sender, receiver and mallory)."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from p2p_guard.identity import (
    PEER_ID_PREFIX,
    Identity,
    peer_id_from_b58,
    peer_id_to_b58,
    public_key_from_peer_id,
    verify,
)

# RFC 8032, section 7.1, TEST 1 (empty message).
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
    "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)
RFC_PEER_ID_B58 = "12D3KooWQK1wnefoLrcVHbbnf5tLzbopUd3K3bFAoJpA7YJgL5pV"


@pytest.fixture
def rfc_identity() -> Identity:
    return Identity.from_seed(RFC_SEED)


class TestKnownAnswers:
    def test_rfc8032_public_key_and_signature(self, rfc_identity: Identity) -> None:
        assert rfc_identity.public_key == RFC_PUBLIC
        assert rfc_identity.sign(b"") == RFC_SIGNATURE

    def test_peer_id_layout(self, rfc_identity: Identity) -> None:
        assert rfc_identity.peer_id == bytes.fromhex("002408011220") + RFC_PUBLIC
        assert len(rfc_identity.peer_id) == 38
        assert rfc_identity.peer_id.startswith(PEER_ID_PREFIX)

    def test_peer_id_b58(self, rfc_identity: Identity) -> None:
        assert rfc_identity.peer_id_b58 == RFC_PEER_ID_B58
        assert rfc_identity.peer_id_b58.startswith("12D3KooW")

    def test_b58_matches_reference_library(self) -> None:
        base58 = pytest.importorskip("base58")
        for data in (b"", b"\x00", b"\x00\x00\x01", bytes(range(40)), Identity.generate().peer_id):
            assert peer_id_to_b58(data) == base58.b58encode(data).decode("ascii")

    def test_key_file_bytes(self, rfc_identity: Identity) -> None:
        assert rfc_identity.to_key_bytes() == bytes.fromhex("08011240") + RFC_SEED + RFC_PUBLIC


class TestKeyFile:
    def test_create_then_load_same_identity(self, tmp_path: Path) -> None:
        path = tmp_path / "peer.key"
        created = Identity.load_or_create(path)
        loaded = Identity.load_or_create(path)
        assert created.peer_id == loaded.peer_id
        assert loaded.path == path

    def test_created_with_mode_0600(self, tmp_path: Path) -> None:
        path = tmp_path / "peer.key"
        Identity.load_or_create(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_creates_parent_directories_and_leaves_no_temporary(self, tmp_path: Path) -> None:
        path = tmp_path / "a" / "b" / "peer.key"
        Identity.load_or_create(path)
        assert sorted(p.name for p in path.parent.iterdir()) == ["peer.key"]

    def test_reads_hand_written_file(self, tmp_path: Path) -> None:
        path = tmp_path / "peer.key"
        path.write_bytes(bytes.fromhex("08011240") + RFC_SEED + RFC_PUBLIC)
        assert Identity.load_or_create(path).peer_id_b58 == RFC_PEER_ID_B58

    def test_fields_in_either_order(self, tmp_path: Path) -> None:
        path = tmp_path / "peer.key"
        path.write_bytes(bytes.fromhex("1240") + RFC_SEED + RFC_PUBLIC + bytes.fromhex("0801"))
        assert Identity.load(path).public_key == RFC_PUBLIC

    def test_group_readable_file_loads_with_warning(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        path = tmp_path / "peer.key"
        path.write_bytes(Identity.from_seed(RFC_SEED).to_key_bytes())
        os.chmod(path, 0o644)
        assert Identity.load(path).public_key == RFC_PUBLIC
        assert "chmod 600" in caplog.text

    def test_group_readable_garbage_is_only_the_error(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        path = tmp_path / "peer.key"
        path.write_bytes(b"garbage!")
        os.chmod(path, 0o644)
        with pytest.raises(ValueError, match="not a libp2p PrivateKey"):
            Identity.load(path)
        assert "chmod 600" not in caplog.text

    def test_load_missing_file_raises(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            Identity.load(tmp_path / "absent.key")

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (b"", "empty"),
            (b"garbage!", "not a libp2p PrivateKey"),
            (bytes.fromhex("0800") + bytes.fromhex("1240") + bytes(64), "RSA"),
            (bytes.fromhex("0802") + bytes.fromhex("1240") + bytes(64), "Secp256k1"),
            (bytes.fromhex("0801") + bytes.fromhex("1220") + RFC_SEED, "must be 64 bytes"),
            (bytes.fromhex("08011260") + RFC_SEED + RFC_PUBLIC + RFC_PUBLIC, "must be 64 bytes"),
            (bytes.fromhex("0801") + bytes.fromhex("1240") + RFC_SEED + bytes(32), "does not match"),
            (bytes.fromhex("0801") + bytes.fromhex("1240") + RFC_SEED, "declares 64 bytes"),
            (bytes.fromhex("08011240") + RFC_SEED + RFC_PUBLIC + bytes.fromhex("0801"), "repeated"),
            (bytes.fromhex("08011240") + RFC_SEED + RFC_PUBLIC + bytes.fromhex("1801"), "unexpected field 3"),
            (bytes.fromhex("1240") + RFC_SEED + RFC_PUBLIC, "missing key_type"),
            (bytes.fromhex("0801"), "missing"),
            (bytes.fromhex("08ff"), "truncated varint"),
            (bytes.fromhex("08") + b"\xff" * 11, "longer than 10 bytes"),
            (bytes.fromhex("0a01"), "wire type 2"),
        ],
    )
    def test_corrupt_file_raises_value_error_naming_path(
        self, tmp_path: Path, content: bytes, message: str
    ) -> None:
        path = tmp_path / "corrupt.key"
        path.write_bytes(content)
        with pytest.raises(ValueError, match=message) as info:
            Identity.load_or_create(path)
        assert str(path) in str(info.value)
        assert path.read_bytes() == content, "a corrupt key file must never be overwritten"

    def test_oversized_file_raises(self, tmp_path: Path) -> None:
        path = tmp_path / "huge.key"
        path.write_bytes(bytes(10_000))
        with pytest.raises(ValueError, match="larger than"):
            Identity.load(path)


class TestSignVerify:
    def test_round_trip(self) -> None:
        identity = Identity.generate()
        signature = identity.sign(b"hello")
        assert len(signature) == 64
        assert verify(identity.peer_id, b"hello", signature)

    def test_accepts_bytes_like_message(self) -> None:
        identity = Identity.generate()
        signature = identity.sign(b"hello")
        assert verify(identity.peer_id, bytearray(b"hello"), signature)
        assert verify(identity.peer_id, memoryview(b"hello"), signature)

    def test_mallory_foreign_signature(self) -> None:
        alice, mallory = Identity.generate(), Identity.generate()
        assert not verify(alice.peer_id, b"hello", mallory.sign(b"hello"))

    def test_mallory_other_message(self) -> None:
        alice = Identity.generate()
        assert not verify(alice.peer_id, b"hello!", alice.sign(b"hello"))

    @pytest.mark.parametrize(
        "signature",
        [b"", b"\x00" * 64, b"\xff" * 64, b"\x01" * 63, b"\x01" * 65, None, "sig", 64, bytes(1000)],
    )
    def test_mallory_garbage_signature(self, signature: object) -> None:
        alice = Identity.generate()
        assert verify(alice.peer_id, b"hello", signature) is False  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "peer_id",
        [
            b"",
            None,
            "12D3KooW",
            PEER_ID_PREFIX,
            PEER_ID_PREFIX + b"\x00" * 31,
            PEER_ID_PREFIX + b"\x00" * 33,
            b"\x00\x24\x08\x00\x12\x20" + RFC_PUBLIC,  # RSA key type inside an identity multihash
            b"\x12\x20" + bytes(32),  # a sha2-256 (RSA-style) PeerID: no key inside
            PEER_ID_PREFIX + b"\xff" * 32,  # not a valid curve point
            PEER_ID_PREFIX + b"\x00" * 32,  # small-order point
        ],
    )
    def test_mallory_malformed_peer_id(self, peer_id: object) -> None:
        signature = Identity.from_seed(RFC_SEED).sign(b"")
        assert verify(peer_id, b"", signature) is False  # type: ignore[arg-type]

    def test_non_bytes_message(self) -> None:
        alice = Identity.generate()
        assert verify(alice.peer_id, "hello", alice.sign(b"hello")) is False  # type: ignore[arg-type]


class TestPeerIdHelpers:
    def test_public_key_from_peer_id(self, rfc_identity: Identity) -> None:
        assert public_key_from_peer_id(rfc_identity.peer_id) == RFC_PUBLIC
        assert public_key_from_peer_id(bytearray(rfc_identity.peer_id)) == RFC_PUBLIC

    @pytest.mark.parametrize("peer_id", [b"", b"\x00" * 38, None, 38, "x" * 38, b"\x12\x20" + bytes(32)])
    def test_public_key_from_non_ed25519(self, peer_id: object) -> None:
        assert public_key_from_peer_id(peer_id) is None  # type: ignore[arg-type]

    def test_b58_round_trip(self) -> None:
        identity = Identity.generate()
        assert peer_id_from_b58(identity.peer_id_b58) == identity.peer_id

    def test_b58_rsa_style_peer_id_round_trip(self) -> None:
        peer_id = b"\x12\x20" + bytes(range(32))
        assert peer_id_from_b58(peer_id_to_b58(peer_id)) == peer_id

    @pytest.mark.parametrize(
        "text",
        ["", "0OIl", "12D3KooW!", "12D3KooW", "1" * 200, None, b"12D3KooW", "ü", RFC_PEER_ID_B58 + "1"],
    )
    def test_b58_garbage(self, text: object) -> None:
        assert peer_id_from_b58(text) is None  # type: ignore[arg-type]

    def test_to_b58_rejects_non_bytes(self) -> None:
        with pytest.raises(TypeError):
            peer_id_to_b58("12D3KooW")  # type: ignore[arg-type]


class TestObject:
    def test_repr_shows_peer_id_not_key(self, rfc_identity: Identity) -> None:
        text = repr(rfc_identity)
        assert RFC_PEER_ID_B58 in text
        assert RFC_SEED.hex() not in text

    def test_pickle_round_trip(self, rfc_identity: Identity) -> None:
        clone = pickle.loads(pickle.dumps(rfc_identity))
        assert clone.peer_id == rfc_identity.peer_id
        assert clone.sign(b"x") == rfc_identity.sign(b"x")

    @pytest.mark.parametrize("seed", [b"", bytes(31), bytes(33), "x" * 32])
    def test_from_seed_rejects_bad_length(self, seed: object) -> None:
        with pytest.raises(ValueError, match="32 bytes"):
            Identity.from_seed(seed)  # type: ignore[arg-type]

    def test_constructor_rejects_other_keys(self) -> None:
        with pytest.raises(TypeError):
            Identity(b"not a key")  # type: ignore[arg-type]
