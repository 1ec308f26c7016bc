r"""The payload hash tree: a payload is cut into chunks, each chunk hashed, and the list of chunk digests hashed.

A payload b of ``size`` bytes is cut into n = ⌈size / C⌉ chunks of C = :data:`PAYLOAD_CHUNK_BYTES` bytes (the
last one may be shorter; n = 0 for an empty payload). With ``u64`` an unsigned 64-bit little-endian integer::

    chunk_i   = b[i·C : min((i + 1)·C, size)]                                  i = 0 .. n − 1
    d_i       = SHA-256("p2p_guard.chunk.v3\0" ‖ chunk_i)                     (the leaves)
    root(b)   = SHA-256("p2p_guard.payload.v3\0" ‖ u64(size) ‖ u64(C) ‖ d_0 ‖ ... ‖ d_{n−1})

The root is what a sender commits to in its signed envelope (the ``digest`` field, protocol version 3). The
leaves and the root have different prefixes, so a list of digests can never pass as a chunk and the size and
chunk size are bound into the root: two payloads have the same root only if they are equal (up to a SHA-256
collision). A server answers a payload request with the n·32-byte digest list first, then the chunks; the
receiver (:class:`ChunkVerifier`) checks the list against the committed root, then each chunk as soon as its
last byte arrives, and cuts the sender at the first bad chunk, never holding more than the declared size.

Every method of :class:`ChunkVerifier` takes hostile bytes and returns :class:`Accepted` / :class:`Rejected`;
nothing here raises on network input, and nothing does I/O (``swarm.transport`` reads the stream).

References:
    [1] R. C. Merkle, "A Digital Signature Based on a Conventional Encryption Function", CRYPTO 1987.
    [2] B. Cohen, "The BitTorrent Protocol Specification" (BEP 3, piece hashes), 2008.
    [3] NIST, "Secure Hash Standard (SHS)", FIPS 180-4, 2015 (SHA-256).
"""

from __future__ import annotations

import hashlib
import logging
import struct

from p2p_guard.protocol.reasons import Accepted, Rejected, RejectReason

__all__ = [
    "CHUNK_DIGEST_BYTES",
    "PAYLOAD_CHUNK_BYTES",
    "ChunkVerifier",
    "chunk_count",
    "chunk_digest",
    "chunk_digests",
    "payload_root",
    "tree_root",
]

logger = logging.getLogger(__name__)

#: C, the chunk size of the payload hash tree, in bytes (1 MiB): 32 bytes of digest list per MiB of payload.
PAYLOAD_CHUNK_BYTES = 1 << 20
#: Length of one chunk digest and of the root, in bytes (SHA-256).
CHUNK_DIGEST_BYTES = 32
_LEAF_CONTEXT = b"p2p_guard.chunk.v3\x00"
_ROOT_CONTEXT = b"p2p_guard.payload.v3\x00"
_MAX_SIZE = 2**63 - 1


def chunk_count(size: int, chunk_bytes: int = PAYLOAD_CHUNK_BYTES) -> int:
    """The number of chunks n = ⌈size / C⌉ of a ``size``-byte payload.

    Raises:
        ValueError: ``size`` is negative or ``chunk_bytes`` not positive (a local bug).
    """
    if size < 0 or chunk_bytes <= 0:
        raise ValueError(f"size must be >= 0 and chunk_bytes > 0; got size={size}, chunk_bytes={chunk_bytes}")
    return -(-size // chunk_bytes)


def chunk_digest(chunk: bytes | bytearray | memoryview) -> bytes:
    """d_i = SHA-256(leaf context ‖ chunk): the 32-byte digest of one chunk (formula in the module docstring)."""
    hasher = hashlib.sha256(_LEAF_CONTEXT)
    hasher.update(chunk)
    return hasher.digest()


def chunk_digests(payload: bytes | bytearray | memoryview, chunk_bytes: int = PAYLOAD_CHUNK_BYTES) -> bytes:
    """The concatenated digests d_0 ‖ ... ‖ d_{n−1} of a payload's chunks (n·32 bytes; no copy of the payload).

    Raises:
        ValueError: ``chunk_bytes`` is not positive (a local bug).
    """
    view = memoryview(payload).cast("B")
    count = chunk_count(len(view), chunk_bytes)
    return b"".join(chunk_digest(view[i * chunk_bytes:(i + 1) * chunk_bytes]) for i in range(count))


def tree_root(digests: bytes | bytearray | memoryview, size: int, chunk_bytes: int = PAYLOAD_CHUNK_BYTES) -> bytes:
    """The 32-byte root over a digest list: SHA-256(root context ‖ u64(size) ‖ u64(C) ‖ digests).

    Args:
        digests: d_0 ‖ ... ‖ d_{n−1}, as :func:`chunk_digests` returns (any length is hashed as given).
        size: the payload size, in bytes (0 ≤ size < 2**63).
        chunk_bytes: C, in bytes.

    Raises:
        ValueError: ``size`` or ``chunk_bytes`` is out of range (a local bug).
    """
    if not 0 <= size <= _MAX_SIZE or not 0 < chunk_bytes <= _MAX_SIZE:
        raise ValueError(f"size and chunk_bytes must be in range; got size={size}, chunk_bytes={chunk_bytes}")
    hasher = hashlib.sha256(_ROOT_CONTEXT + struct.pack("<QQ", size, chunk_bytes))
    hasher.update(digests)
    return hasher.digest()


def payload_root(payload: bytes | bytearray | memoryview, chunk_bytes: int = PAYLOAD_CHUNK_BYTES) -> bytes:
    """root(b): the hash-tree root of a whole payload (what an envelope's ``digest`` commits to).

    Args:
        payload: the payload bytes (bytes, bytearray or memoryview).
        chunk_bytes: C, in bytes.

    Returns:
        The 32-byte root.
    """
    size = memoryview(payload).nbytes
    return tree_root(chunk_digests(payload, chunk_bytes), size, chunk_bytes)


class ChunkVerifier:
    """Checks a payload as it streams in: the digest list against the committed root, then each chunk.

    Use: :meth:`check_digests` with exactly :attr:`digests_bytes` bytes, then :meth:`feed` the body in pieces
    of any size, then :meth:`payload`. The buffer of the declared size is allocated only once the digest list
    matched the root, and nothing is ever written past the declared size, so the memory held is at most
    ``payload_bytes + digests_bytes``. After the first rejection every later call returns that same rejection.
    A resumed transfer (a new request after a broken stream) calls :meth:`restart` and continues at
    :attr:`next_chunk`: verified chunks are kept.

    Reasons: a digest list of the wrong length (``DECODE_ERROR``, wrong chunk count), a list that does not hash
    to the root (``DIGEST_MISMATCH``), a chunk whose digest differs from its leaf (``DIGEST_MISMATCH``, the
    chunk's index named), a body byte past the declared size (``OVERSIZE``), body bytes before the digest list
    (``DECODE_ERROR``), and, from :meth:`payload`, a body that ended early (``DECODE_ERROR``, truncated).
    """

    def __init__(self, root: bytes, payload_bytes: int, *, chunk_bytes: int = PAYLOAD_CHUNK_BYTES) -> None:
        """A verifier for a payload committed as ``root`` with ``payload_bytes`` bytes.

        Both come from an authenticated envelope that passed ``guard.integrity.check_envelope`` (so the size is
        already within the per-codec cap, ``protocol.codecs.payload_cap_bytes``); :meth:`create` checks them
        for a caller that has not.

        Args:
            root: the 32-byte committed root.
            payload_bytes: the declared payload size, in bytes (≥ 0).
            chunk_bytes: C, in bytes (> 0).

        Raises:
            ValueError: ``root`` is not 32 bytes, or a size is out of range (a local bug).
        """
        if not isinstance(root, bytes) or len(root) != CHUNK_DIGEST_BYTES:
            raise ValueError(f"root must be {CHUNK_DIGEST_BYTES} bytes, got {root!r:.80}")
        if isinstance(payload_bytes, bool) or not isinstance(payload_bytes, int) or not 0 <= payload_bytes <= _MAX_SIZE:
            raise ValueError(f"payload_bytes must be an int in [0, 2**63), got {payload_bytes!r}")
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
        self.root = root
        self.payload_bytes = payload_bytes
        self.chunk_bytes = chunk_bytes
        #: n, the number of chunks the declared size implies.
        self.chunks = chunk_count(payload_bytes, chunk_bytes)
        #: Length of the digest list a sender must send first, in bytes (n·32).
        self.digests_bytes = self.chunks * CHUNK_DIGEST_BYTES
        #: Index of the first chunk not yet verified (where a resumed request starts).
        self.next_chunk = 0
        self._digests: bytes | None = None
        self._buffer: bytearray | None = None
        self._filled = 0  # bytes of the buffer written: verified chunks, then part of chunk next_chunk
        self._rejected: Rejected | None = None

    @classmethod
    def create(cls, root: object, payload_bytes: object, *, max_payload_bytes: int,
               chunk_bytes: int = PAYLOAD_CHUNK_BYTES) -> ChunkVerifier | Rejected:
        """A verifier for hostile ``root`` and ``payload_bytes``, or why not.

        Returns:
            The verifier; ``Rejected(OVERSIZE)`` for a declared size over ``max_payload_bytes``;
            ``Rejected(DECODE_ERROR)`` for a root that is not 32 bytes or a size that is not an int in range.
            Never raises on hostile values.

        Raises:
            ValueError: ``max_payload_bytes`` or ``chunk_bytes`` is not a positive int (a local bug).
        """
        for name, value in (("max_payload_bytes", max_payload_bytes), ("chunk_bytes", chunk_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if type(root) is not bytes or len(root) != CHUNK_DIGEST_BYTES:
            return Rejected(RejectReason.DECODE_ERROR, f"the root must be {CHUNK_DIGEST_BYTES} bytes")
        if type(payload_bytes) is not int or not 0 <= payload_bytes <= _MAX_SIZE:
            return Rejected(RejectReason.DECODE_ERROR, f"declared size {payload_bytes!r:.40} is not an int in range")
        if payload_bytes > max_payload_bytes:
            return Rejected(RejectReason.OVERSIZE,
                            f"declares {payload_bytes} payload bytes, limit {max_payload_bytes}")
        return cls(root, payload_bytes, chunk_bytes=chunk_bytes)

    @property
    def has_digests(self) -> bool:
        """True once a digest list matched the root."""
        return self._digests is not None

    @property
    def received(self) -> int:
        """Body bytes held: the verified chunks and the unfinished part of chunk :attr:`next_chunk`."""
        return self._filled

    @property
    def complete(self) -> bool:
        """True when every chunk arrived and verified (and nothing was rejected)."""
        return self._rejected is None and self._digests is not None and self.next_chunk == self.chunks

    @property
    def rejected(self) -> Rejected | None:
        """The first rejection, or None."""
        return self._rejected

    def resume_offset(self) -> int:
        """Byte offset in the payload where a resumed answer starts: ``next_chunk · C``."""
        return self.next_chunk * self.chunk_bytes

    def restart(self) -> None:
        """Drop the bytes of the unfinished chunk, before a new request resumes at :attr:`next_chunk`."""
        self._filled = min(self._filled, self.resume_offset())

    def check_digests(self, blob: bytes | bytearray | memoryview) -> Accepted | Rejected:
        """Check the sender's digest list (``digests_bytes`` bytes) against the committed root.

        A verifier that already holds the list checks that the new one is the same (a resumed answer).

        Returns:
            :class:`Accepted`, or ``Rejected``: ``DECODE_ERROR`` for a list whose length is not n·32 (wrong
            chunk count), ``DIGEST_MISMATCH`` when it does not hash to the root.
        """
        if self._rejected is not None:
            return self._rejected
        blob = bytes(blob)
        if len(blob) != self.digests_bytes:
            got = f"{len(blob) // CHUNK_DIGEST_BYTES} digests" if len(blob) % CHUNK_DIGEST_BYTES == 0 \
                else f"{len(blob)} bytes"
            return self._reject(RejectReason.DECODE_ERROR, f"wrong chunk count: got {got}, the declared "
                                f"{self.payload_bytes} bytes need {self.chunks} digests")
        if self._digests is not None:
            if blob != self._digests:
                return self._reject(RejectReason.DIGEST_MISMATCH, "the resumed answer's digest list changed")
            return Accepted()
        if tree_root(blob, self.payload_bytes, self.chunk_bytes) != self.root:
            return self._reject(RejectReason.DIGEST_MISMATCH,
                                f"the list of {self.chunks} chunk digests does not hash to the committed root")
        self._digests = blob
        self._buffer = bytearray(self.payload_bytes)
        return Accepted()

    def feed(self, data: bytes | bytearray | memoryview) -> Accepted | Rejected:
        """Take the next body bytes (after the digest list); verify each chunk the moment it is complete.

        Nothing past the declared size is ever stored: the first byte past it is ``OVERSIZE``. A bad chunk is
        ``DIGEST_MISMATCH`` naming its index; the bytes of a rejected chunk are not kept.
        """
        if self._rejected is not None:
            return self._rejected
        if self._buffer is None or self._digests is None:
            return self._reject(RejectReason.DECODE_ERROR, "payload bytes before a digest list that matches the root")
        view = memoryview(data).cast("B")
        while len(view):
            if self.next_chunk >= self.chunks:
                return self._reject(RejectReason.OVERSIZE, f"bytes past the declared {self.payload_bytes} bytes")
            end = min((self.next_chunk + 1) * self.chunk_bytes, self.payload_bytes)
            take = min(len(view), end - self._filled)
            self._buffer[self._filled:self._filled + take] = view[:take]
            self._filled += take
            view = view[take:]
            if self._filled == end:
                verdict = self._verify_chunk(self._buffer, self._digests, self.next_chunk, end)
                if isinstance(verdict, Rejected):
                    return verdict
        return Accepted()

    def payload(self) -> bytearray | Rejected:
        """The whole verified payload (the buffer itself, no copy), or why not.

        Returns:
            The ``payload_bytes``-byte bytearray; ``Rejected(DECODE_ERROR)`` (truncated) when chunks are
            missing; the first rejection if there was one.
        """
        if self._rejected is not None:
            return self._rejected
        if not self.complete or self._buffer is None:
            return Rejected(RejectReason.DECODE_ERROR, f"truncated: {self._filled} of {self.payload_bytes} bytes, "
                                                       f"{self.next_chunk} of {self.chunks} chunks verified")
        return self._buffer

    def _verify_chunk(self, buffer: bytearray, digests: bytes, index: int, end: int) -> Accepted | Rejected:
        start = index * self.chunk_bytes
        leaf = digests[index * CHUNK_DIGEST_BYTES:(index + 1) * CHUNK_DIGEST_BYTES]
        if chunk_digest(memoryview(buffer)[start:end]) != leaf:
            self._filled = start
            return self._reject(RejectReason.DIGEST_MISMATCH,
                                f"chunk {index} of {self.chunks} (bytes {start}..{end}) does not match its digest")
        self.next_chunk = index + 1
        return Accepted()

    def _reject(self, reason: RejectReason, detail: str) -> Rejected:
        self._rejected = Rejected(reason, detail)
        self._buffer = None  # a cut sender's bytes are not kept
        return self._rejected
