"""Ed25519 identity: the key file, the PeerID that contains the public key, signing and verification.

One Ed25519 key is both the peer's libp2p identity and the key that signs its updates and records. The key
file is a libp2p protobuf ``PrivateKey`` of type Ed25519, the format hivemind's
``P2P.create(identity_path=...)`` hands to ``p2pd``. Because an Ed25519 PeerID is an *identity* multihash of
the public key, anyone can check a signature against the PeerID alone:

    PeerID = 0x00 ‖ 0x24 ‖ PublicKey-protobuf,   PublicKey-protobuf = 0x08 0x01 0x12 0x20 ‖ pk  (38 bytes)
    key file = 0x08 0x01 0x12 0x40 ‖ seed (32 B) ‖ pk (32 B)                                  (68 bytes)

where ``0x08 0x01`` is protobuf field 1 (``key_type``, varint) = Ed25519 and ``0x12 LEN`` is field 2
(``data``, bytes). The 64-byte private ``data`` is libp2p's Go layout: the 32-byte RFC 8032 seed followed by
the 32-byte public key.

This module never imports hivemind: the two tiny protobuf messages are encoded and parsed by hand, strictly.

References:
    [1] libp2p, "Peer Ids and Keys" specification,
        https://github.com/libp2p/specs/blob/master/peer-ids/peer-ids.md
    [2] S. Josefsson, I. Liusvaara, "Edwards-Curve Digital Signature Algorithm (EdDSA)", RFC 8032, 2017.
    [3] Multiformats, "multihash" (identity code 0x00) and "base58btc" (Bitcoin alphabet).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import IO

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

logger = logging.getLogger(__name__)

#: libp2p ``KeyType`` enum value for Ed25519 (``crypto.proto``; RSA = 0, Secp256k1 = 2, ECDSA = 3).
ED25519_KEY_TYPE = 1
#: Length in bytes of an Ed25519 public key, seed and signature (RFC 8032).
PUBLIC_KEY_BYTES = 32
SEED_BYTES = 32
SIGNATURE_BYTES = 64
#: Prefix of every Ed25519 PeerID: identity multihash (code 0x00, length 36) of the PublicKey protobuf
#: (field 1 = Ed25519, field 2 = 32 bytes).
PEER_ID_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
PEER_ID_BYTES = len(PEER_ID_PREFIX) + PUBLIC_KEY_BYTES
#: A key file is 68 bytes; anything above this bound is refused before it is read whole.
MAX_KEY_FILE_BYTES = 4096
#: Longest base58 text accepted by :func:`peer_id_from_b58` (a 38-byte PeerID is 52 characters).
MAX_PEER_ID_B58_CHARS = 128

_B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {char: index for index, char in enumerate(_B58_ALPHABET)}
_KEY_TYPE_NAMES = {0: "RSA", 1: "Ed25519", 2: "Secp256k1", 3: "ECDSA"}


class Identity:
    """A peer's Ed25519 key pair, which is also its libp2p identity.

    Build one with :meth:`load_or_create` (a key file, as a peer does), :meth:`generate` (in memory, for
    tests and simulations) or :meth:`from_seed`. The object never logs or prints its private key; it can be
    pickled (for hivemind's forked DHT process), and the pickle then carries the private seed.

    Args:
        private_key: The Ed25519 private key.
        path: The key file it was loaded from or saved to, if any.
    """

    def __init__(self, private_key: Ed25519PrivateKey, *, path: Path | None = None) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise TypeError(f"private_key must be an Ed25519PrivateKey, got {type(private_key).__name__}")
        self._private_key = private_key
        self._public_key = private_key.public_key().public_bytes_raw()
        self.path = path

    @classmethod
    def generate(cls) -> Identity:
        """Create a fresh in-memory identity from the operating system's CSPRNG.

        Returns:
            A new identity with no key file.
        """
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes, *, path: Path | None = None) -> Identity:
        """Build the identity for a 32-byte RFC 8032 private seed.

        Args:
            seed: The 32-byte private seed.
            path: The key file the seed came from, if any.

        Returns:
            The identity.

        Raises:
            ValueError: ``seed`` is not 32 bytes.
        """
        if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
            raise ValueError(f"an Ed25519 seed is {SEED_BYTES} bytes, got {_describe(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed), path=path)

    @classmethod
    def from_key_bytes(cls, data: bytes, *, source: str = "<bytes>") -> Identity:
        """Parse the content of a libp2p ``PrivateKey`` protobuf of type Ed25519.

        Args:
            data: The protobuf bytes (68 bytes for a well-formed file).
            source: What to name in error messages (the file path).

        Returns:
            The identity.

        Raises:
            ValueError: ``data`` is not a well-formed Ed25519 ``PrivateKey``; the message names ``source``.
        """
        try:
            key_type, key_data = _parse_private_key_protobuf(data)
        except ValueError as error:
            raise ValueError(f"{source}: not a libp2p PrivateKey protobuf: {error}") from None
        if key_type != ED25519_KEY_TYPE:
            name = _KEY_TYPE_NAMES.get(key_type, "unknown")
            raise ValueError(
                f"{source}: key type {key_type} ({name}) is not supported; p2p_guard needs Ed25519"
            )
        if len(key_data) != SEED_BYTES + PUBLIC_KEY_BYTES:
            raise ValueError(
                f"{source}: Ed25519 key data must be {SEED_BYTES + PUBLIC_KEY_BYTES} bytes "
                f"(seed || public key), got {len(key_data)}"
            )
        identity = cls.from_seed(key_data[:SEED_BYTES])
        if key_data[SEED_BYTES:] != identity.public_key:
            raise ValueError(f"{source}: the public key stored in the file does not match its private seed")
        return identity

    @classmethod
    def load(cls, path: str | Path) -> Identity:
        """Read an existing key file.

        Args:
            path: The key file.

        Returns:
            The identity, with ``path`` set.

        Raises:
            FileNotFoundError: The file does not exist.
            ValueError: The file is corrupt, too large or holds another key type; the message names the path.
        """
        path = Path(path)
        with path.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
            mode = os.fstat(handle.fileno()).st_mode
        if len(data) > MAX_KEY_FILE_BYTES:
            raise ValueError(f"{path}: larger than {MAX_KEY_FILE_BYTES} bytes; not a key file")
        identity = cls.from_key_bytes(data, source=str(path))  # a bad file's error comes alone, without the warning
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("identity file %s is accessible by group or others (mode %o); chmod 600 it",
                           path, stat.S_IMODE(mode))
        identity.path = path
        return identity

    @classmethod
    def load_or_create(cls, path: str | Path) -> Identity:
        """Read the key file at ``path``, or create it (mode 0600) with a fresh key if it does not exist.

        The file appears atomically: it is written to a temporary file (``O_CREAT | O_EXCL``, mode 0600) in
        the same directory and hard-linked into place, so a concurrent starter or a crash never leaves a
        half-written key behind. If another process wins the race, its key is loaded. Missing parent
        directories are created with mode 0700.

        Args:
            path: The key file.

        Returns:
            The identity, with ``path`` set.

        Raises:
            ValueError: An existing file is corrupt or holds another key type; the message names the path.
            OSError: The file or its directory cannot be read or written.
        """
        path = Path(path)
        if path.exists():
            return cls.load(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        identity = cls.generate()
        if _create_exclusive(path, identity.to_key_bytes()):
            identity.path = path
            logger.info("created a new identity at %s (PeerID %s)", path, identity.peer_id_b58)
            return identity
        return cls.load(path)

    def to_key_bytes(self) -> bytes:
        """Serialise to the libp2p ``PrivateKey`` protobuf (the key file's content).

        Returns:
            68 bytes: ``08 01 12 40`` ‖ seed ‖ public key.
        """
        data = self._private_key.private_bytes_raw() + self._public_key
        return bytes([0x08, ED25519_KEY_TYPE, 0x12, len(data)]) + data

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        return self._public_key

    @property
    def peer_id(self) -> bytes:
        """The 38-byte libp2p PeerID: ``00 24 08 01 12 20`` ‖ public key."""
        return PEER_ID_PREFIX + self._public_key

    @property
    def peer_id_b58(self) -> str:
        """The PeerID as base58btc text (``12D3KooW...``), as libp2p and hivemind print it."""
        return peer_id_to_b58(self.peer_id)

    def sign(self, data: bytes) -> bytes:
        """Sign ``data`` with Ed25519 (deterministic, RFC 8032).

        Args:
            data: The message.

        Returns:
            The 64-byte signature.
        """
        return self._private_key.sign(bytes(data))

    def __repr__(self) -> str:
        return f"Identity({self.peer_id_b58})"

    def __reduce__(self) -> tuple[object, tuple[bytes, Path | None]]:
        return (_identity_from_seed, (self._private_key.private_bytes_raw(), self.path))


def _identity_from_seed(seed: bytes, path: Path | None) -> Identity:
    """Unpickle an :class:`Identity` (module-level so that pickle can find it)."""
    return Identity.from_seed(seed, path=path)


def public_key_from_peer_id(peer_id: bytes) -> bytes | None:
    """Extract the Ed25519 public key from a PeerID.

    Args:
        peer_id: PeerID bytes, possibly hostile.

    Returns:
        The 32-byte public key, or None if ``peer_id`` is not exactly an Ed25519 identity-multihash PeerID
        (wrong type, length or prefix; RSA and other hashed PeerIDs included). Never raises.
    """
    if not isinstance(peer_id, (bytes, bytearray)) or len(peer_id) != PEER_ID_BYTES:
        return None
    if bytes(peer_id[: len(PEER_ID_PREFIX)]) != PEER_ID_PREFIX:
        return None
    return bytes(peer_id[len(PEER_ID_PREFIX):])


def verify(peer_id: bytes, data: bytes, signature: bytes) -> bool:
    """Check an Ed25519 signature against the public key inside a PeerID.

    Args:
        peer_id: The claimed signer's PeerID bytes.
        data: The signed message.
        signature: The 64-byte signature.

    Returns:
        True only if every argument is well-formed and the signature is valid. Never raises, whatever the
        inputs (types included).
    """
    public_key = public_key_from_peer_id(peer_id)
    if public_key is None:
        return False
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return False
    if not isinstance(signature, (bytes, bytearray)) or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(bytes(signature), bytes(data))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def peer_id_to_b58(peer_id: bytes) -> str:
    """Encode PeerID bytes as base58btc text (Bitcoin alphabet, leading zero bytes as ``1``).

    Args:
        peer_id: PeerID bytes.

    Returns:
        The base58 text, e.g. ``12D3KooW...`` for an Ed25519 PeerID.

    Raises:
        TypeError: ``peer_id`` is not bytes.
    """
    if not isinstance(peer_id, (bytes, bytearray)):
        raise TypeError(f"peer_id must be bytes, got {type(peer_id).__name__}")
    zeros = len(peer_id) - len(bytes(peer_id).lstrip(b"\x00"))
    number = int.from_bytes(peer_id, "big")
    digits = []
    while number:
        number, remainder = divmod(number, 58)
        digits.append(_B58_ALPHABET[remainder])
    return "1" * zeros + "".join(reversed(digits))


def peer_id_from_b58(text: str) -> bytes | None:
    """Decode base58btc PeerID text.

    Args:
        text: Base58 text, possibly hostile.

    Returns:
        The PeerID bytes, or None for anything that is not a well-formed multihash in base58btc: not a
        string, empty, longer than :data:`MAX_PEER_ID_B58_CHARS`, a character outside the alphabet, or a
        decoded value whose multihash header (code, length) does not match its size. Never raises.
    """
    if not isinstance(text, str) or not 0 < len(text) <= MAX_PEER_ID_B58_CHARS:
        return None
    number = 0
    for char in text:
        index = _B58_INDEX.get(char)
        if index is None:
            return None
        number = number * 58 + index
    zeros = len(text) - len(text.lstrip("1"))
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    peer_id = b"\x00" * zeros + body
    return peer_id if _is_multihash(peer_id) else None


def _is_multihash(data: bytes) -> bool:
    """Whether ``data`` is ``varint code ‖ varint length ‖ digest`` with ``len(digest) == length``."""
    try:
        _code, position = _read_varint(data, 0)
        length, position = _read_varint(data, position)
    except ValueError:
        return False
    return len(data) - position == length


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    """Read one unsigned LEB128 varint (at most 10 bytes, 64 bits).

    Args:
        data: The buffer.
        position: Index of the varint's first byte.

    Returns:
        The value and the index just past the varint.

    Raises:
        ValueError: Truncated, longer than 10 bytes or above 2**64 - 1.
    """
    value = 0
    for shift in range(0, 70, 7):
        if position >= len(data):
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value >= 1 << 64:
                raise ValueError("varint above 64 bits")
            return value, position
    raise ValueError("varint longer than 10 bytes")


def _parse_private_key_protobuf(data: bytes) -> tuple[int, bytes]:
    """Parse ``message PrivateKey { required KeyType key_type = 1; required bytes data = 2; }`` strictly.

    Args:
        data: The protobuf bytes.

    Returns:
        ``(key_type, data)``.

    Raises:
        ValueError: Empty input, a truncated field, a wrong wire type, an unknown, repeated or missing field.
    """
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise ValueError("empty")
    fields: dict[int, int | bytes] = {}
    position = 0
    while position < len(data):
        tag, position = _read_varint(data, position)
        number, wire_type = tag >> 3, tag & 0x7
        if number in fields:
            raise ValueError(f"field {number} repeated")
        if number == 1 and wire_type == 0:
            fields[1], position = _read_varint(data, position)
        elif number == 2 and wire_type == 2:
            length, position = _read_varint(data, position)
            if length > len(data) - position:
                raise ValueError(f"field 2 declares {length} bytes, {len(data) - position} remain")
            fields[2] = bytes(data[position: position + length])
            position += length
        else:
            raise ValueError(f"unexpected field {number} with wire type {wire_type}")
    key_type, key_data = fields.get(1), fields.get(2)
    if not isinstance(key_type, int) or not isinstance(key_data, bytes):
        raise ValueError("missing key_type (field 1) or data (field 2)")
    return key_type, key_data


def key_in_use(path: str | Path, flag: str = "--identity") -> str:
    """The one-line error for a key file whose lock another process holds (:func:`lock_key_file`'s BlockingIOError)."""
    return (f"{flag} {path}: another peer or bootstrap node on this machine is running with this identity; stop it "
            "first, or give this one its own --identity")


def lock_key_file(path: str | Path) -> IO[bytes] | None:
    """Take this machine's advisory lock (``flock(2)``) on an existing key file; return the handle that holds it.

    The lock lasts until the handle is closed or the process ends (even by ``kill -9``); ``p2pd`` does not
    inherit it. Peers and the bootstrap node hold it for their life, so that a second process on the same key is
    refused at start (``cli.preflight.lock_identity``), also when the first created the key on its first start.

    Args:
        path: the key file.

    Returns:
        The open file that holds the lock (close it to release), or None on a filesystem without ``flock``
        (some network mounts): no lock there.

    Raises:
        FileNotFoundError: no such file.
        BlockingIOError: another process holds the lock.
        OSError: the file cannot be opened.
    """
    import fcntl

    handle = open(path, "rb")  # noqa: SIM115 - returned: the caller closes it
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise
    except OSError:
        handle.close()
        return None
    return handle


def _create_exclusive(path: Path, content: bytes) -> bool:
    """Create ``path`` with ``content`` and mode 0600, atomically, unless it already exists.

    Args:
        path: The file to create.
        content: Its bytes.

    Returns:
        True if this call created the file, False if it existed already (another process won).

    Raises:
        OSError: The directory is not writable, or another I/O error.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    _write_new_file(temporary, content)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
            raise
        # A filesystem without hard links: fall back to an exclusive create of the file itself.
        try:
            _write_new_file(path, content)
        except FileExistsError:
            return False
    finally:
        temporary.unlink(missing_ok=True)
    return True


def _write_new_file(path: Path, content: bytes) -> None:
    """Write ``content`` to a new file (``O_CREAT | O_EXCL``, mode 0600) and fsync it.

    Raises:
        FileExistsError: ``path`` exists.
        OSError: Another I/O error (the partial file is removed).
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(descriptor, view):]
        os.fsync(descriptor)
    except OSError:
        os.close(descriptor)
        path.unlink(missing_ok=True)
        raise
    os.close(descriptor)


def _describe(value: object) -> str:
    """Describe a value for an error message without echoing key material."""
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes"
    return type(value).__name__
