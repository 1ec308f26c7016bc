"""Stage 1 of the guard: does an authenticated envelope and its payload belong in this round's aggregate?

:func:`p2p_guard.protocol.open_envelope` has already checked the envelope's structure, version and
signature. This stage checks it against what the receiving peer expects this round, then the payload
against the envelope, cheapest check first:

    check_envelope:  run id → round → staleness → codec → shapes → declared payload size
    check_payload:   check_envelope → received size → SHA-256 digest → decode → finiteness → not all zero

Reasons given (one per failed check, the first that fails):

    ===========================================================  ===================
    ``env.run_id != expect.run_id``                              ``WRONG_RUN``
    ``env.round != expect.round``                                ``WRONG_ROUND``
    ``env.staleness > expect.max_staleness``                     ``STALE_BASE``
    codec string malformed, or its name not in ``expect.codecs`` ``DECODE_ERROR``
    ``env.shapes != expect.shapes``                              ``SHAPE_MISMATCH``
    ``env.payload_bytes > expect.max_payload_bytes``             ``OVERSIZE``
    ``env.payload_bytes != expected_payload_bytes(codec, d)``    ``DECODE_ERROR``
    ``len(payload) > env.payload_bytes``                         ``OVERSIZE``
    ``payload_digest(payload) != env.digest``                    ``DIGEST_MISMATCH``
    payload length wrong for codec and d                          ``DECODE_ERROR``
    bytes no honest encoder writes (index out of range, unsorted  ``DECODE_ERROR``
    or repeated indices, negative scale, forbidden code, padding)
    a NaN or ±Inf per-chunk scale (int8, int4, topk)             ``NON_FINITE``
    any NaN or ±Inf in the decoded update                        ``NON_FINITE``
    every value of the decoded update is zero (±0)               ``ZERO_UPDATE``
    ===========================================================  ===================

A declared size that disagrees with the codec and the (already matching) shapes is an internally
inconsistent envelope, hence ``DECODE_ERROR``; ``OVERSIZE`` is reserved for more bytes than the limit or
than declared. An all-zero pseudo-gradient Δ = θ_r − θ_after_H means no inner step moved the model: no
computation (a free rider, ``attacks.update.FreeRider``); aggregating it would only shrink the aggregate,
so it is rejected here, before the guard.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from p2p_guard.protocol import (
    CODECS,
    Accepted,
    Envelope,
    Rejected,
    RejectReason,
    decode_update,
    payload_digest,
)
from p2p_guard.protocol.codecs import parse_codec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundExpectation:
    """What a receiving peer expects of every update in one outer round.

    Args:
        run_id: The training run.
        round: The outer round r.
        max_staleness: Largest accepted round − base_round of an update (rounds). Version 2 of the round: every
            peer owns its model, so the base hash is a claim, not a gate; a slow peer's update computed on an
            older state is accepted (and weighted down) up to this staleness.
        shapes: The model's parameter shapes, in flattening order (lists are stored as tuples).
        codecs: Codec names this peer accepts (a subset of ``protocol.CODECS``); a codec string with
            parameters (``topk:density=0.05``) is accepted when its name is.
        max_payload_bytes: Largest payload this peer will read, in bytes.

    Raises:
        ValueError: A field is out of range (a local configuration bug).
    """

    run_id: str
    round: int
    shapes: tuple[tuple[int, ...], ...]
    max_staleness: int = 4
    codecs: tuple[str, ...] = CODECS
    max_payload_bytes: int = 2**31

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"run_id must be a non-empty str, got {self.run_id!r}")
        if not _is_count(self.round):
            raise ValueError(f"round must be a non-negative int, got {self.round!r}")
        if not _is_count(self.max_staleness):
            raise ValueError(f"max_staleness must be a non-negative int, got {self.max_staleness!r}")
        unknown = [codec for codec in self.codecs if codec not in CODECS]
        if not self.codecs or unknown:
            raise ValueError(f"codecs must be a non-empty subset of {CODECS}, got {self.codecs!r}")
        if not _is_count(self.max_payload_bytes) or self.max_payload_bytes == 0:
            raise ValueError(f"max_payload_bytes must be a positive int, got {self.max_payload_bytes!r}")
        shapes = tuple(tuple(shape) for shape in self.shapes)
        if not all(_is_count(dim) for shape in shapes for dim in shape):
            raise ValueError(f"shapes must hold non-negative ints, got {self.shapes!r}")
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "codecs", tuple(self.codecs))

    @property
    def numel(self) -> int:
        """Number of model parameters d = Σ_k Π shape_k."""
        return sum(math.prod(shape) for shape in self.shapes)


def check_envelope(env: Envelope, expect: RoundExpectation) -> Accepted | Rejected:
    """Check an authenticated envelope against this round's expectation (order in the module docstring).

    Args:
        env: An envelope returned by ``open_envelope`` (signature already verified).
        expect: This round's expectation.

    Returns:
        :class:`Accepted`, or :class:`Rejected` with the first failed check's reason.
    """
    if env.run_id != expect.run_id:
        return Rejected(RejectReason.WRONG_RUN, f"run {env.run_id[:64]!r}, expected {expect.run_id[:64]!r}")
    if env.round != expect.round:
        return Rejected(RejectReason.WRONG_ROUND, f"round {env.round}, expected {expect.round}")
    if env.staleness > expect.max_staleness:
        return Rejected(RejectReason.STALE_BASE,
                        f"computed on round {env.base_round}'s state: {env.staleness} rounds stale, "
                        f"limit {expect.max_staleness}")
    spec = parse_codec(env.codec)
    if isinstance(spec, Rejected):
        return spec
    if spec.name not in expect.codecs:
        return Rejected(RejectReason.DECODE_ERROR,
                        f"codec {env.codec!r} not among the accepted {list(expect.codecs)}")
    if env.shapes != expect.shapes:
        return Rejected(RejectReason.SHAPE_MISMATCH, _shape_detail(env.shapes, expect.shapes))
    if env.payload_bytes > expect.max_payload_bytes:
        return Rejected(RejectReason.OVERSIZE,
                        f"declares {env.payload_bytes} payload bytes, limit {expect.max_payload_bytes}")
    expected = spec.payload_bytes(expect.numel, expect.shapes)  # the shapes match: checked above
    if env.payload_bytes != expected:
        detail = f"declares {env.payload_bytes} payload bytes; {env.codec} × {expect.numel} is {expected}"
        return Rejected(RejectReason.DECODE_ERROR, detail)
    return Accepted()


def check_payload(env: Envelope, payload: bytes | bytearray | memoryview, expect: RoundExpectation
                  ) -> torch.Tensor | Rejected:
    """Check a received payload against its envelope and decode it.

    Runs :func:`check_envelope` first (it is cheap), so an update can never be decoded from an envelope
    that was not checked.

    Args:
        env: The sender's authenticated envelope.
        payload: The bytes the sender served, possibly hostile (bytes, bytearray or memoryview).
        expect: This round's expectation.

    Returns:
        The ``(d,)`` ``torch.float32`` CPU update, all finite and not all zero, or :class:`Rejected`. Never
        raises on a hostile payload.
    """
    verdict = check_envelope(env, expect)
    if isinstance(verdict, Rejected):
        return verdict
    if len(payload) > env.payload_bytes:
        return Rejected(RejectReason.OVERSIZE, f"served {len(payload)} bytes, declared {env.payload_bytes}")
    if payload_digest(payload) != env.digest:
        return Rejected(RejectReason.DIGEST_MISMATCH, f"{len(payload)} served bytes do not match the digest")
    update = decode_update(payload, env.codec, expect.numel, expect.shapes)
    if isinstance(update, Rejected):
        return update
    problem = check_values(update)
    return update if problem is None else problem


def check_values(update: torch.Tensor) -> Rejected | None:
    """The content checks of a decoded update, in order: all values finite, then not all zero.

    The in-process benchmark (``bench/cell.py``) runs this same function on every row, so that it drops
    exactly what a networked peer's integrity stage drops.

    Args:
        update: ``(d,)`` float tensor.

    Returns:
        None if the update passes, else :class:`Rejected` with ``NON_FINITE`` or ``ZERO_UPDATE``.
    """
    finite = torch.isfinite(update)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return Rejected(RejectReason.NON_FINITE, f"{bad} of {update.numel()} values are NaN or ±Inf")
    if not bool(update.any()):
        return Rejected(RejectReason.ZERO_UPDATE, f"all {update.numel()} values are zero: no computation")
    return None


def _is_count(value: object) -> bool:
    """A non-negative int that is not a bool."""
    return type(value) is int and value >= 0


def _shape_detail(got: tuple[tuple[int, ...], ...], want: tuple[tuple[int, ...], ...]) -> str:
    """Name the first differing tensor without echoing thousands of shapes."""
    if len(got) != len(want):
        return f"{len(got)} tensors, expected {len(want)}"
    index = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    return f"tensor {index} has shape {got[index]}, expected {want[index]}"
