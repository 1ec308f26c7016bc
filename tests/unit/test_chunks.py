"""Unit tests for the payload hash tree and the chunk-by-chunk verifier (``protocol/chunks.py``).

Known answers worked out with hashlib beside the code, then every way a streamed payload can be wrong: a bad
chunk (cut at that chunk, nothing later read), a bad or wrongly sized digest list, truncated, extra bytes, an
oversized declared size, and resumption after a broken stream.
"""

from __future__ import annotations

import hashlib
import os
import struct

import pytest

from p2p_guard.protocol import PAYLOAD_CHUNK_BYTES, Accepted, ChunkVerifier, Rejected, RejectReason, payload_digest
from p2p_guard.protocol.chunks import (
    CHUNK_DIGEST_BYTES,
    chunk_count,
    chunk_digest,
    chunk_digests,
    payload_root,
    tree_root,
)

C = 8  # a tiny chunk size, so that tests cover many chunks with few bytes


def by_hand(payload: bytes, chunk_bytes: int) -> bytes:
    """The root, from the formula of the module docstring, with nothing but hashlib."""
    leaves = b"".join(hashlib.sha256(b"p2p_guard.chunk.v3\x00" + payload[i:i + chunk_bytes]).digest()
                      for i in range(0, len(payload), chunk_bytes))
    return hashlib.sha256(b"p2p_guard.payload.v3\x00" + struct.pack("<QQ", len(payload), chunk_bytes)
                          + leaves).digest()


def verifier_for(payload: bytes, chunk_bytes: int = C) -> ChunkVerifier:
    return ChunkVerifier(payload_root(payload, chunk_bytes), len(payload), chunk_bytes=chunk_bytes)


def stream(verifier: ChunkVerifier, payload: bytes, piece: int, digests: bytes | None = None) -> Accepted | Rejected:
    """Feed the digest list, then the payload in pieces of ``piece`` bytes; the first rejection or Accepted."""
    checked = verifier.check_digests(chunk_digests(payload, verifier.chunk_bytes) if digests is None else digests)
    if isinstance(checked, Rejected):
        return checked
    for start in range(0, len(payload), piece):
        checked = verifier.feed(payload[start:start + piece])
        if isinstance(checked, Rejected):
            return checked
    return Accepted()


class TestTree:
    @pytest.mark.parametrize("size", [0, 1, C - 1, C, C + 1, 3 * C, 5 * C + 3])
    def test_known_answer(self, size: int) -> None:
        payload = bytes(range(size))
        assert payload_root(payload, C) == by_hand(payload, C)
        assert chunk_count(size, C) == -(-size // C)
        assert len(chunk_digests(payload, C)) == chunk_count(size, C) * CHUNK_DIGEST_BYTES

    def test_payload_digest_is_the_root_at_the_protocol_chunk_size(self) -> None:
        payload = os.urandom(2 * PAYLOAD_CHUNK_BYTES + 5)
        assert payload_digest(payload) == by_hand(payload, PAYLOAD_CHUNK_BYTES)
        assert payload_digest(bytearray(payload)) == payload_digest(memoryview(payload)) == payload_digest(payload)

    def test_the_empty_payload(self) -> None:
        assert chunk_digests(b"", C) == b""
        assert payload_root(b"", C) == hashlib.sha256(b"p2p_guard.payload.v3\x00" + struct.pack("<QQ", 0, C)).digest()

    def test_size_and_chunk_size_are_bound_into_the_root(self) -> None:
        payload = bytes(16)
        assert payload_root(payload, 8) != payload_root(payload, 16)  # same bytes, another tree
        assert payload_root(payload, 8) != payload_root(payload + bytes(1), 8)
        digests = chunk_digests(payload, 8)
        assert tree_root(digests, 16, 8) != tree_root(digests, 15, 8)  # a list cannot vouch for another size

    def test_a_leaf_is_not_a_root(self) -> None:
        # the two levels have different prefixes: a chunk holding a digest list does not hash to that list's root
        payload = bytes(range(24))
        digests = chunk_digests(payload, C)
        assert chunk_digest(digests) != payload_root(payload, C)

    def test_local_bugs_raise(self) -> None:
        with pytest.raises(ValueError, match="chunk_bytes"):
            chunk_count(5, 0)
        with pytest.raises(ValueError, match="size"):
            tree_root(b"", -1, C)
        with pytest.raises(ValueError, match="root must be 32 bytes"):
            ChunkVerifier(b"short", 5)
        with pytest.raises(ValueError, match="payload_bytes"):
            ChunkVerifier(bytes(32), -1)
        with pytest.raises(ValueError, match="chunk_bytes"):
            ChunkVerifier(bytes(32), 5, chunk_bytes=0)


class TestVerifier:
    @pytest.mark.parametrize("piece", [1, 3, C, C + 5, 1000])
    @pytest.mark.parametrize("size", [0, 1, C, 4 * C + 1])
    def test_an_honest_stream_in_any_pieces(self, size: int, piece: int) -> None:
        payload = os.urandom(size)
        verifier = verifier_for(payload)
        assert stream(verifier, payload, piece) == Accepted()
        assert verifier.complete
        result = verifier.payload()
        assert isinstance(result, bytearray)
        assert result == payload
        assert verifier.next_chunk == verifier.chunks == chunk_count(size, C)

    @pytest.mark.parametrize("bad", [0, 2, 4])
    def test_a_bad_chunk_is_cut_at_that_chunk(self, bad: int) -> None:
        payload = os.urandom(4 * C + 3)  # 5 chunks, the last one short
        verifier = verifier_for(payload)
        tampered = bytearray(payload)
        tampered[bad * C] ^= 0x01
        result = stream(verifier, bytes(tampered), C, digests=chunk_digests(payload, C))  # the honest list
        start, end = bad * C, min((bad + 1) * C, len(payload))
        assert result == Rejected(RejectReason.DIGEST_MISMATCH,
                                  f"chunk {bad} of 5 (bytes {start}..{end}) does not match its digest")
        assert verifier.next_chunk == bad  # the chunks before it verified, nothing after it was taken
        assert verifier.feed(payload[bad * C:]) == result  # every later call repeats the first rejection
        assert verifier.payload() == result
        assert not verifier.complete

    def test_the_cut_comes_with_the_bad_chunks_last_byte(self) -> None:
        payload = os.urandom(3 * C)
        verifier = verifier_for(payload)
        assert verifier.check_digests(chunk_digests(payload, C)) == Accepted()
        tampered = bytearray(payload)
        tampered[C] ^= 0x80  # chunk 1
        assert verifier.feed(tampered[:2 * C - 1]) == Accepted()  # chunk 1 not complete yet: nothing to judge
        assert verifier.feed(tampered[2 * C - 1:2 * C]).reason is RejectReason.DIGEST_MISMATCH  # type: ignore[union-attr]

    def test_a_digest_list_that_does_not_hash_to_the_root(self) -> None:
        payload = os.urandom(3 * C)
        other = os.urandom(3 * C)
        verifier = verifier_for(payload)
        assert verifier.check_digests(chunk_digests(other, C)) == Rejected(
            RejectReason.DIGEST_MISMATCH, "the list of 3 chunk digests does not hash to the committed root")
        assert verifier.feed(payload) == verifier.rejected

    @pytest.mark.parametrize(("digests", "got"), [(2, "2 digests"), (4, "4 digests"), (0, "0 digests")])
    def test_a_wrong_chunk_count(self, digests: int, got: str) -> None:
        payload = os.urandom(3 * C)
        verifier = verifier_for(payload)
        blob = (chunk_digests(payload, C) * 2)[:digests * CHUNK_DIGEST_BYTES]
        assert verifier.check_digests(blob) == Rejected(
            RejectReason.DECODE_ERROR, f"wrong chunk count: got {got}, the declared 24 bytes need 3 digests")

    def test_a_digest_list_of_a_length_no_count_gives(self) -> None:
        verifier = verifier_for(os.urandom(3 * C))
        result = verifier.check_digests(bytes(3 * CHUNK_DIGEST_BYTES - 1))
        assert result == Rejected(RejectReason.DECODE_ERROR,
                                  "wrong chunk count: got 95 bytes, the declared 24 bytes need 3 digests")

    def test_payload_bytes_before_the_digest_list(self) -> None:
        verifier = verifier_for(os.urandom(C))
        assert verifier.feed(b"x") == Rejected(RejectReason.DECODE_ERROR,
                                               "payload bytes before a digest list that matches the root")

    def test_truncated(self) -> None:
        payload = os.urandom(3 * C + 2)
        verifier = verifier_for(payload)
        assert stream(verifier, payload[:2 * C + 1], C, digests=chunk_digests(payload, C)) == Accepted()
        assert verifier.payload() == Rejected(RejectReason.DECODE_ERROR,
                                              "truncated: 17 of 26 bytes, 2 of 4 chunks verified")

    @pytest.mark.parametrize("extra", [b"\x00", b"more bytes than declared"])
    def test_extra_bytes_are_oversize_and_never_stored(self, extra: bytes) -> None:
        payload = os.urandom(2 * C + 1)
        verifier = verifier_for(payload)
        assert verifier.check_digests(chunk_digests(payload, C)) == Accepted()
        result = verifier.feed(payload + extra)
        assert result == Rejected(RejectReason.OVERSIZE, "bytes past the declared 17 bytes")
        assert verifier.payload() == result

    def test_extra_bytes_in_a_later_piece(self) -> None:
        payload = os.urandom(C)
        verifier = verifier_for(payload)
        assert stream(verifier, payload, 3) == Accepted()
        assert verifier.feed(b"\x00").reason is RejectReason.OVERSIZE  # type: ignore[union-attr]

    def test_an_oversized_declared_size_is_refused_before_any_allocation(self) -> None:
        assert ChunkVerifier.create(bytes(32), 2**40, max_payload_bytes=1 << 20) == Rejected(
            RejectReason.OVERSIZE, f"declares {2**40} payload bytes, limit {1 << 20}")

    @pytest.mark.parametrize(("root", "size"), [(b"short", 5), ("x" * 32, 5), (bytes(32), -1), (bytes(32), 2**63),
                                                (bytes(32), True), (bytes(32), 5.0), (None, None)])
    def test_create_rejects_hostile_fields(self, root: object, size: object) -> None:
        result = ChunkVerifier.create(root, size, max_payload_bytes=1 << 20)
        assert isinstance(result, Rejected)
        assert result.reason is RejectReason.DECODE_ERROR

    def test_create_accepts_the_cap_itself(self) -> None:
        verifier = ChunkVerifier.create(bytes(32), 1 << 20, max_payload_bytes=1 << 20)
        assert isinstance(verifier, ChunkVerifier)
        assert verifier.chunks == 1

    def test_no_buffer_until_the_digest_list_matches(self) -> None:
        # a hostile root with a huge declared size costs no memory until a list hashes to it, which needs a preimage
        verifier = ChunkVerifier(bytes(32), 1 << 40)
        assert verifier._buffer is None
        assert verifier.check_digests(bytes(3)).reason is RejectReason.DECODE_ERROR  # type: ignore[union-attr]
        assert verifier._buffer is None

    def test_resume_after_a_broken_stream_keeps_the_verified_chunks(self) -> None:
        payload = os.urandom(4 * C)
        verifier = verifier_for(payload)
        digests = chunk_digests(payload, C)
        assert verifier.check_digests(digests) == Accepted()
        assert verifier.feed(payload[:2 * C + 5]) == Accepted()  # the stream breaks inside chunk 2
        assert (verifier.next_chunk, verifier.received) == (2, 2 * C + 5)
        verifier.restart()
        assert (verifier.received, verifier.resume_offset()) == (2 * C, 2 * C)
        assert verifier.check_digests(digests) == Accepted()  # the resumed answer repeats the list
        assert verifier.feed(payload[verifier.resume_offset():]) == Accepted()
        assert verifier.payload() == payload

    def test_a_resumed_answer_with_another_digest_list(self) -> None:
        payload = os.urandom(2 * C)
        verifier = verifier_for(payload)
        assert verifier.check_digests(chunk_digests(payload, C)) == Accepted()
        assert verifier.check_digests(bytes(2 * CHUNK_DIGEST_BYTES)) == Rejected(
            RejectReason.DIGEST_MISMATCH, "the resumed answer's digest list changed")
