"""Property-based fuzzing (hypothesis) of the streamed-payload verifier, ``protocol.chunks.ChunkVerifier``.

Inputs: an honest payload (0 to 6 chunks of C = 8 bytes, the last one possibly short) and what a hostile sender
streams for it: the honest digest list and body, mutated by bit flips, byte replacements, truncations,
extensions, insertions and swapped chunks, cut into random pieces as a network delivers them; random bytes in
place of the whole answer; and hostile declared fields (roots, sizes) given to :meth:`ChunkVerifier.create`.

Properties, for every generated input:

- no method raises; each returns ``Accepted`` / ``Rejected`` with a :class:`RejectReason`;
- the outcome equals an independent reference written from the formula in ``docs/protocol.md`` §2.1 with
  hashlib only: the digest list first (its length, ``DECODE_ERROR``; then its hash, ``DIGEST_MISMATCH``), then
  the first complete chunk that differs (``DIGEST_MISMATCH`` naming it), then a byte past the declared size
  (``OVERSIZE``), then a body that ended early (``DECODE_ERROR``, truncated); else exactly the honest payload;
- the outcome does not depend on how the answer is cut into pieces, and the verifier never holds a buffer
  larger than the declared size.

Every example is counted; ``test_total_count`` asserts the module reaches 10,000 inputs when it all runs.
Hypothesis runs derandomized without an example database.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_guard.protocol import Accepted, ChunkVerifier, Rejected, RejectReason

COUNTS: Counter[str] = Counter()
REASONS_SEEN: Counter[str] = Counter()
PLANNED: dict[str, int] = {}
C = 8
DIGEST = 32


def fuzz_settings(name: str, examples: int) -> Callable[[Any], Any]:
    PLANNED[name] = examples
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


# --- the reference (docs/protocol.md §2.1), independent of p2p_guard.protocol.chunks ------------------------

def leaves(payload: bytes) -> bytes:
    return b"".join(hashlib.sha256(b"p2p_guard.chunk.v3\x00" + payload[i:i + C]).digest()
                    for i in range(0, len(payload), C))


def root(payload: bytes) -> bytes:
    return hashlib.sha256(b"p2p_guard.payload.v3\x00" + struct.pack("<QQ", len(payload), C) + leaves(payload)).digest()


def reference(payload: bytes, answer: bytes) -> RejectReason | None:
    """The reason for ``answer`` (digest list ‖ body, as streamed) against the honest ``payload``, or None."""
    n = -(-len(payload) // C)
    honest_list = leaves(payload)
    digests, body = answer[:n * DIGEST], answer[n * DIGEST:]
    if len(digests) != n * DIGEST:
        return RejectReason.DECODE_ERROR
    if digests != honest_list:
        return RejectReason.DIGEST_MISMATCH
    for i in range(n):
        chunk = body[i * C:(i + 1) * C]
        full = min(C, len(payload) - i * C)
        if len(chunk) < full:
            return RejectReason.DECODE_ERROR  # truncated
        if chunk[:full] != payload[i * C:i * C + full]:
            return RejectReason.DIGEST_MISMATCH
    return RejectReason.OVERSIZE if len(body) > len(payload) else None


# --- the code under test -----------------------------------------------------------------------------------

def run(name: str, payload: bytes, answer: bytes, cuts: list[int]) -> None:
    """Stream ``answer`` into a verifier as the transport does (list first, then the body in pieces)."""
    COUNTS[name] += 1
    verifier = ChunkVerifier(root(payload), len(payload), chunk_bytes=C)
    n_bytes = verifier.digests_bytes
    result: Accepted | Rejected = verifier.check_digests(answer[:n_bytes])
    body = answer[n_bytes:]
    bounds = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    for start, end in zip(bounds, bounds[1:]):
        if isinstance(result, Rejected):
            break
        result = verifier.feed(body[start:end])
        assert verifier._buffer is None or len(verifier._buffer) == len(payload)
    final = result if isinstance(result, Rejected) else verifier.payload()
    want = reference(payload, answer)
    if want is None:
        assert final == bytearray(payload), f"{name}: honest answer not accepted: {final!r:.120}"
        REASONS_SEEN["accepted"] += 1
        return
    assert isinstance(final, Rejected), f"{name}: expected {want}, got a payload"
    assert final.reason is want, f"{name}: expected {want}, got {final}"
    assert final.detail
    REASONS_SEEN[final.reason.value] += 1


payloads = st.integers(0, 6 * C).flatmap(lambda size: st.binary(min_size=size, max_size=size))
cut_lists = st.lists(st.integers(0, 10 * C), max_size=6)


def honest_answer(payload: bytes) -> bytes:
    return leaves(payload) + payload


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bytes]:
    payload = draw(payloads)
    answer = bytearray(honest_answer(payload))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "replace", "truncate", "extend", "insert", "swap"]))
        if op == "flip" and answer:
            answer[draw(st.integers(0, len(answer) - 1))] ^= 1 << draw(st.integers(0, 7))
        elif op == "replace" and answer:
            answer[draw(st.integers(0, len(answer) - 1))] = draw(st.integers(0, 255))
        elif op == "truncate":
            del answer[draw(st.integers(0, len(answer))):]
        elif op == "extend":
            answer += draw(st.binary(min_size=1, max_size=2 * C))
        elif op == "insert":
            at = draw(st.integers(0, len(answer)))
            answer[at:at] = draw(st.binary(min_size=1, max_size=C))
        elif op == "swap" and len(payload) >= 2 * C:  # two whole chunks exchanged: each chunk is fine alone
            start = len(leaves(payload))
            answer[start:start + 2 * C] = answer[start + C:start + 2 * C] + answer[start:start + C]
    return payload, bytes(answer)


@pytest.mark.timeout(300)
@fuzz_settings("mutated answers", 4000)
@given(case=mutated(), cuts=cut_lists)
def test_mutated_answers(case: tuple[bytes, bytes], cuts: list[int]) -> None:
    run("mutated answers", *case, cuts)


@pytest.mark.timeout(300)
@fuzz_settings("random answers", 2500)
@given(payload=payloads, answer=st.binary(max_size=8 * DIGEST + 8 * C), cuts=cut_lists)
def test_random_answers(payload: bytes, answer: bytes, cuts: list[int]) -> None:
    run("random answers", payload, answer, cuts)


@pytest.mark.timeout(300)
@fuzz_settings("honest answers", 1000)
@given(payload=payloads, cuts=cut_lists)
def test_honest_answers(payload: bytes, cuts: list[int]) -> None:
    run("honest answers", payload, honest_answer(payload), cuts)


@pytest.mark.timeout(300)
@fuzz_settings("right list, hostile body", 1500)
@given(payload=payloads, body=st.binary(max_size=8 * C), cuts=cut_lists)
def test_right_list_hostile_body(payload: bytes, body: bytes, cuts: list[int]) -> None:
    run("right list, hostile body", payload, leaves(payload) + body, cuts)


@pytest.mark.timeout(300)
@fuzz_settings("declared fields", 1500)
@given(root_=st.one_of(st.binary(min_size=32, max_size=32), st.binary(max_size=40), st.text(max_size=40), st.none(),
                      st.integers()),
       size=st.one_of(st.integers(0, 2 << 20), st.integers(-(2**64), 2**64), st.floats(), st.booleans(), st.none(),
                      st.binary(max_size=8)),
       cap=st.integers(1, 1 << 20), digests=st.binary(max_size=3 * DIGEST))
def test_declared_fields(root_: object, size: object, cap: int, digests: bytes) -> None:
    COUNTS["declared fields"] += 1
    verifier = ChunkVerifier.create(root_, size, max_payload_bytes=cap, chunk_bytes=C)
    if isinstance(verifier, Rejected):
        valid = type(root_) is bytes and len(root_) == DIGEST and type(size) is int and 0 <= size < 2**63
        assert verifier.reason is (RejectReason.OVERSIZE if valid else RejectReason.DECODE_ERROR)
        if valid:
            assert size > cap  # type: ignore[operator]
        REASONS_SEEN[f"create {verifier.reason.value}"] += 1
        return
    assert type(size) is int and 0 <= size <= cap
    result = verifier.check_digests(digests)  # a list hashing to an arbitrary root would be a SHA-256 preimage
    assert isinstance(result, Rejected)
    assert result.reason in (RejectReason.DECODE_ERROR, RejectReason.DIGEST_MISMATCH)
    assert verifier._buffer is None  # nothing was allocated for an unproven size
    REASONS_SEEN[f"list {result.reason.value}"] += 1


def test_total_count() -> None:
    """Runs last: the module's total (≥ 10,000 inputs, 0 crashes), in the assertion message."""
    missing = [name for name in PLANNED if COUNTS[name] == 0]
    if missing:
        pytest.skip(f"not every fuzz test ran in this session (missing: {missing})")
    total = sum(COUNTS.values())
    message = f"{total} streamed answers, 0 crashes; by test {dict(COUNTS)}; outcomes {dict(REASONS_SEEN)}"
    print(f"[fuzz] chunk verifier fuzz total: {message}")  # noqa: T201
    short = {name: COUNTS[name] for name, planned in PLANNED.items() if COUNTS[name] < planned}
    assert not short and total >= 10_000, f"below the plan {short} or the 10,000 target: {message}"
    assert {"accepted", "digest_mismatch", "decode_error", "oversize", "create oversize", "create decode_error",
            "list decode_error", "list digest_mismatch"} <= set(REASONS_SEEN), dict(REASONS_SEEN)
