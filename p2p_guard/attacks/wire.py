"""Wire attacks: a simulated adversarial peer tampers with its signed commit or with the bytes it serves.

An adversarial peer builds its honest commit as a :class:`CommitDraft` (envelope fields, the bytes whose
digest is committed, the bytes it will serve), lets a wire attack rewrite the draft, then :func:`seal` signs
it. Each attack targets one check of the receiver and says in its docstring which ``RejectReason`` a correct
receiver (``open_envelope`` → ``check_envelope`` → ``check_payload``) must give. None of them should ever
reach an aggregate.

Attacks never mutate the draft they are given; they return a new one. Randomness comes only from the
``torch.Generator`` argument.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import torch

from p2p_guard.identity import SIGNATURE_BYTES, Identity, peer_id_to_b58
from p2p_guard.protocol import (
    DIGEST_BYTES,
    Envelope,
    Rejected,
    decode_update,
    encode_update,
    envelope_message,
    expected_payload_bytes,
    pack_envelope,
    payload_digest,
    sign_envelope,
)
from p2p_guard.protocol.votes import VoteVerdict

logger = logging.getLogger(__name__)

#: Extra bytes :class:`Oversized` appends by default: 4 MiB, the size of a hivemind DHT message cap.
DEFAULT_OVERSIZE_EXTRA_BYTES = 4 * 1024 * 1024
#: How often :class:`Copycat` polls the round's committers for a revealed payload, in seconds.
COPYCAT_POLL_S = 0.25

#: One bounded pass over the round's committers: ``[(their envelope, the payload they serve)]``, empty while
#: nobody serves yet (the peer provides it: ``swarm.rounds.revealed_payloads``).
RevealedPayloads = Callable[[], Awaitable[Sequence[tuple[Envelope, bytes]]]]


@dataclass
class CommitDraft:
    """An unsigned commit that a wire attack may rewrite before it is sealed.

    Args:
        envelope: The envelope fields. :func:`seal` replaces ``envelope.digest`` with the digest of
            ``digest_payload``; every other field is signed as it stands.
        digest_payload: The bytes whose SHA-256 goes into the envelope.
        serve_payload: The bytes the peer streams when asked for its payload.
        sign: Whether to sign; False seals with an empty signature.
        signature_override: Bytes to put in the signature slot instead of a real signature.
        sign_as_self: Sign with the sealing identity even when ``envelope.sender`` names another peer
            (impersonation); honest peers never set it.
    """

    envelope: Envelope
    digest_payload: bytes
    serve_payload: bytes
    sign: bool = True
    signature_override: bytes | None = None
    sign_as_self: bool = False

    @classmethod
    def honest(cls, envelope: Envelope, payload: bytes) -> CommitDraft:
        """The honest draft for ``payload``: digest and declared size set from it, the same bytes served.

        Args:
            envelope: The envelope fields (``digest`` and ``payload_bytes`` are replaced).
            payload: The encoded update.

        Returns:
            The draft.
        """
        envelope = dataclasses.replace(envelope, digest=payload_digest(payload), payload_bytes=len(payload))
        return cls(envelope=envelope, digest_payload=payload, serve_payload=payload)


def seal(draft: CommitDraft, identity: Identity) -> bytes:
    """Serialise a draft into envelope wire bytes.

    The envelope's ``digest`` becomes ``payload_digest(draft.digest_payload)``. Then: with
    ``signature_override`` set, those bytes fill the signature slot; with ``sign=False``, an empty
    signature; otherwise the identity signs (``sign_envelope``).

    Args:
        draft: The (possibly attacked) draft.
        identity: The sender's key.

    Returns:
        The bytes to publish as the commit.

    Raises:
        ValueError: A real signature is asked for but ``envelope.sender`` is not ``identity.peer_id``.
    """
    envelope = dataclasses.replace(draft.envelope, digest=payload_digest(draft.digest_payload))
    if draft.signature_override is not None:
        return pack_envelope(envelope, draft.signature_override)
    if not draft.sign:
        return pack_envelope(envelope, b"")
    if draft.sign_as_self:
        return pack_envelope(envelope, identity.sign(envelope_message(envelope)))
    return sign_envelope(envelope, identity)


class WireBehaviour:
    """What a peer's commit path asks of a wire attack: every hook, with defaults that do nothing.

    The honest peer holds ``WireBehaviour()`` (all no-ops); a built-in wire attack subclasses it and overrides
    the hooks it needs; :func:`wire_behaviour` wraps any other attack object. The honest round loop calls these
    hooks unconditionally and never asks ``hasattr``.

    Hooks, in the order the commit path calls them:
        ``mutate(draft, generator)``: rewrite the draft (envelope fields, signature, served payload).
        ``before_commit(draft, poll, timeout_s)`` (async): delay or replace the commit (the copycat waits for a
            reveal and copies it).
        ``replay(sealed)``: the bytes to store as the commit (the replay attack swaps in last round's).
        ``second_commit(draft, generator)``: a conflicting draft to store later (equivocation), or None.
        ``leaves_own_row_out``: True when the peer's own payload is cut by others (slowloris), so it leaves its
            own row out of its aggregate too.
        ``smear(verdicts, colluders)``: rewrite the votes it publishes (vote smearing), or None for honest votes.
    """

    kind: ClassVar[str] = "wire"
    leaves_own_row_out: ClassVar[bool] = False

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Unchanged (no-op default)."""
        return draft

    async def before_commit(self, draft: CommitDraft, poll: RevealedPayloads, *, timeout_s: float) -> CommitDraft:
        """Unchanged, at once (no-op default)."""
        return draft

    def replay(self, sealed: bytes) -> bytes:
        """``sealed`` itself (no-op default)."""
        return sealed

    def second_commit(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft | None:
        """None: no second envelope (no-op default)."""
        return None

    def smear(self, verdicts: Sequence[VoteVerdict], colluders: Collection[str]) -> list[VoteVerdict] | None:
        """None: publish our true verdicts (no-op default)."""
        return None


class _MutateOnly(WireBehaviour):
    """A user's wire attack that implements only the ``WireAttack`` protocol (``mutate``)."""

    def __init__(self, attack: WireAttack) -> None:
        self.attack = attack

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """The user's ``mutate``."""
        return self.attack.mutate(draft, generator)


def wire_behaviour(attack: object | None) -> WireBehaviour:
    """The commit-path hooks of ``attack`` (a :class:`WireBehaviour`).

    Itself for a built-in wire attack, no-ops for an honest peer or an update/data attack, and a ``mutate``-only
    wrapper for a user's wire class.
    """
    if isinstance(attack, WireBehaviour):
        return attack
    if attack is not None and getattr(attack, "kind", None) == "wire":
        return _MutateOnly(attack)  # type: ignore[arg-type]
    return WireBehaviour()


@runtime_checkable
class WireAttack(Protocol):
    """What every wire attack provides: ``kind == "wire"`` and ``mutate(draft, generator) -> draft``."""

    kind: ClassVar[str]

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Return a rewritten copy of ``draft`` (the argument is left untouched)."""
        ...


class Unsigned(WireBehaviour):
    """Publish the commit with an empty signature. A correct receiver rejects it: ``UNSIGNED``."""

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Clear ``sign`` and any signature override."""
        return dataclasses.replace(draft, sign=False, signature_override=None)

    def __repr__(self) -> str:
        return "Unsigned()"


class BadSignature(WireBehaviour):
    """Put 64 random bytes in the signature slot. A correct receiver rejects it: ``BAD_SIGNATURE``."""

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Set ``signature_override`` to 64 bytes drawn from ``generator``."""
        return dataclasses.replace(draft, signature_override=_random_bytes(SIGNATURE_BYTES, generator))

    def __repr__(self) -> str:
        return "BadSignature()"


class WrongRun(WireBehaviour):
    """Sign a commit for another training run. A correct receiver rejects it: ``WRONG_RUN``.

    Args:
        suffix: Appended to the run id to make the foreign one.
    """

    kind: ClassVar[str] = "wire"

    def __init__(self, *, suffix: str = "-forged") -> None:
        if not isinstance(suffix, str) or not suffix:
            raise ValueError(f"suffix must be a non-empty str, got {suffix!r}")
        self.suffix = suffix

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Replace ``envelope.run_id`` with ``run_id + suffix``."""
        return _with_envelope(draft, run_id=draft.envelope.run_id + self.suffix)

    def __repr__(self) -> str:
        return f"WrongRun(suffix={self.suffix!r})"


class WrongRound(WireBehaviour):
    """Sign the commit for round r − 1: a replay under a stale round number. Receiver: ``WRONG_ROUND``.

    In round 0, where r − 1 does not exist, the commit claims round 1 instead.
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Replace ``envelope.round`` with r − 1 (or 1 when r = 0)."""
        current = draft.envelope.round
        wrong = current - 1 if current > 0 else 1
        return _with_envelope(draft, round=wrong, base_round=min(wrong, int(draft.envelope.base_round or 0)))

    def __repr__(self) -> str:
        return "WrongRound()"


class StaleBase(WireBehaviour):
    """Claim an update computed on round 0's state, with a random base hash.

    Receiver: ``STALE_BASE`` once the round is past the receiver's staleness window (version 2: the base hash is
    a claim, never a gate).
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Set ``envelope.base_round`` to 0 and ``base_hash`` to 32 bytes drawn from ``generator``."""
        base_hash = _random_bytes(DIGEST_BYTES, generator)
        if base_hash == draft.envelope.base_hash:
            base_hash = bytes(byte ^ 0xFF for byte in base_hash)
        return _with_envelope(draft, base_hash=base_hash, base_round=0)

    def __repr__(self) -> str:
        return "StaleBase()"


class DigestMismatch(WireBehaviour):
    """Commit to the honest payload, then serve a sign-flipped one of the same length (bait and switch).

    The served bytes flip the sign bit of every element (the last byte of each little-endian float), so
    they decode to −Δ. A correct receiver rejects them: ``DIGEST_MISMATCH``. (An empty payload has nothing
    to flip; one stray byte is served instead, which a receiver rejects as ``OVERSIZE``.)
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Serve ``digest_payload`` with every element's sign bit flipped."""
        payload = bytearray(draft.digest_payload)
        if not payload:
            return dataclasses.replace(draft, serve_payload=b"\x00")
        element = expected_payload_bytes(draft.envelope.codec, 1, ((1,),))  # one value (dense=head: a 1-D one)
        for index in range(element - 1, len(payload), element):
            payload[index] ^= 0x80
        return dataclasses.replace(draft, serve_payload=bytes(payload))

    def __repr__(self) -> str:
        return "DigestMismatch()"


class WrongShape(WireBehaviour):
    """Declare another factorisation of the same parameter count; the payload stays consistent with it.

    Each tensor's dimensions are reversed (a transpose); if that changes nothing (all tensors 1-D or
    square), the model is declared as one flat tensor, or as ``(1, d)`` if it already is one. The codec
    and payload size still match the declared shapes. A correct receiver rejects it: ``SHAPE_MISMATCH``.
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Replace ``envelope.shapes`` with a different factorisation of the same numel."""
        shapes = draft.envelope.shapes
        numel = sum(math.prod(shape) for shape in shapes)
        transposed = tuple(shape[::-1] for shape in shapes)
        if transposed != shapes:
            return _with_envelope(draft, shapes=transposed)
        flat = ((numel,),)
        return _with_envelope(draft, shapes=flat if shapes != flat else ((1, numel),))

    def __repr__(self) -> str:
        return "WrongShape()"


class NaNPayload(WireBehaviour):
    """Commit to and serve an update holding NaN and +Inf, correctly digested and signed.

    Two positions drawn from the generator become NaN and +Inf (one position, NaN, if d = 1). A correct
    receiver rejects it: ``NON_FINITE``.

    Raises:
        ValueError: From ``mutate``, if the draft's payload does not decode with its own codec and shapes, or
            the model has no parameters (nothing to poison).
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Decode the honest payload, poison it, re-encode it as both the digested and the served bytes."""
        numel = draft.envelope.numel
        update = decode_update(draft.digest_payload, draft.envelope.codec, numel, draft.envelope.shapes)
        if isinstance(update, Rejected) or numel == 0:
            detail = update.detail if isinstance(update, Rejected) else "no parameters"
            raise ValueError(f"NaNPayload needs a decodable, non-empty honest payload: {detail}")
        positions = torch.randperm(numel, generator=generator)[:2]
        update[positions[0]] = float("nan")
        if numel > 1:
            update[positions[1]] = float("inf")
        payload = encode_update(update, draft.envelope.codec, draft.envelope.shapes)
        return dataclasses.replace(
            _with_envelope(draft, payload_bytes=len(payload)), digest_payload=payload, serve_payload=payload
        )

    def __repr__(self) -> str:
        return "NaNPayload()"


class Oversized(WireBehaviour):
    """Declare the real payload size, then serve the real payload plus ``extra_bytes`` more.

    The server sends the chunk digests of what it serves ahead of the payload (protocol 3), and those of the
    longer payload do not hash to the committed root: a correct receiver rejects it as ``DIGEST_MISMATCH`` before
    reading the payload. (A correct digest list followed by extra bytes is cut at the first byte past the declared
    size, ``OVERSIZE``; the transport tests send that.)

    Args:
        extra_bytes: Bytes appended to the served payload (default 4 MiB).
    """

    kind: ClassVar[str] = "wire"

    def __init__(self, *, extra_bytes: int = DEFAULT_OVERSIZE_EXTRA_BYTES) -> None:
        if isinstance(extra_bytes, bool) or not isinstance(extra_bytes, int) or extra_bytes <= 0:
            raise ValueError(f"extra_bytes must be a positive int, got {extra_bytes!r}")
        self.extra_bytes = extra_bytes

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Append ``extra_bytes`` zero bytes to ``serve_payload``."""
        return dataclasses.replace(draft, serve_payload=bytes(draft.serve_payload) + bytes(self.extra_bytes))

    def __repr__(self) -> str:
        return f"Oversized(extra_bytes={self.extra_bytes})"


class Equivocate(WireBehaviour):
    """Commit two different signed envelopes for the same round (equivocation).

    The peer commits the honest draft first (``mutate`` leaves it unchanged) and, shortly after, the draft
    returned by :meth:`second_commit` under the same DHT subkey with a later expiration, so different peers
    (or the same peer at different times) see different digests. Both envelopes are validly signed, so any
    peer that sees both holds a transferable proof: a correct receiver bans the sender (``EQUIVOCATION``).
    Knowledge assumed: none beyond its own update.
    """

    kind: ClassVar[str] = "wire"

    def __init__(self, *, scale: float = -10.0) -> None:
        """Args: scale: the second payload is ``scale ×`` the honest update (default −10, a sign flip)."""
        self.scale = float(scale)

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """The first commit is the honest one."""
        return draft

    def second_commit(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """The conflicting draft: the same envelope fields over ``scale ×`` the honest payload."""
        numel = draft.envelope.numel
        vector = decode_update(draft.digest_payload, draft.envelope.codec, numel, draft.envelope.shapes)
        if isinstance(vector, Rejected):
            raise ValueError(f"cannot equivocate on an undecodable draft: {vector.detail}")
        payload = encode_update(vector * self.scale, draft.envelope.codec, draft.envelope.shapes)
        return dataclasses.replace(draft, digest_payload=payload, serve_payload=payload)

    def __repr__(self) -> str:
        return f"Equivocate(scale={self.scale})"


class VoteSmear(WireBehaviour):
    """Behave honestly as a sender, but publish votes that accuse every peer outside the colluders.

    The commit is the honest one (``mutate`` returns the draft unchanged), so honest receivers accept this
    peer's updates and, in ``guard.reputation``, give its votes full weight: the strongest position for a
    smear. Its published verdicts are rewritten by :meth:`smear_votes`: every sender outside ``colluders``
    is voted ``accepted=False`` (reason ``outlier``), every colluder ``accepted=True``. A correct receiver
    never excludes an honest sender because of these votes: exclusion needs its own rejections
    (``guard.reputation``), so no ``RejectReason`` applies and the honest updates keep being aggregated.
    Knowledge assumed: the colluders' PeerIDs, when the caller gives them (else only its own).
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """The commit is honest."""
        return draft

    def smear(self, verdicts: Sequence[VoteVerdict], colluders: Collection[str]) -> list[VoteVerdict] | None:
        """The smeared votes (:meth:`smear_votes`)."""
        return self.smear_votes(verdicts, colluders)

    def smear_votes(self, verdicts: Sequence[VoteVerdict], colluders: Collection[str]) -> list[VoteVerdict]:
        """Rewrite this peer's honest verdicts of a round into the smear.

        Args:
            verdicts: The honest verdicts it would have published (one per judged sender).
            colluders: PeerIDs (base58) of the Byzantine peers, itself included, to vote up.

        Returns:
            New verdicts, same senders and order: colluders accepted, everyone else rejected as ``outlier``.
        """
        return [
            VoteVerdict(sender=v.sender, accepted=True, reason="accepted") if v.sender_b58 in colluders
            else VoteVerdict(sender=v.sender, accepted=False, reason="outlier")
            for v in verdicts
        ]

    def __repr__(self) -> str:
        return "VoteSmear()"


class Impersonate(WireBehaviour):
    """Sign with our own key but claim another PeerID as the sender (DHT validators refuse it: bad_signature).

    The signature does not verify against the key inside the claimed PeerID, and the claimed PeerID is not
    the DHT subkey the record is filed under: DHT validators refuse it (impersonation), and a receiver that
    somehow read it rejects it (``BAD_SIGNATURE``). Knowledge assumed: any other peer's PeerID (public).
    """

    kind: ClassVar[str] = "wire"

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Replace the sender with a PeerID derived from fresh random key bytes; keep our signature."""
        victim = Identity.from_seed(_random_bytes(32, generator))
        return dataclasses.replace(draft, envelope=dataclasses.replace(draft.envelope, sender=victim.peer_id),
                                   sign_as_self=True)

    def __repr__(self) -> str:
        return "Impersonate()"


class Replay(WireBehaviour):
    """Re-send our own signed envelope of the previous round, byte for byte, as this round's commit.

    Marker class: the peer keeps its last sealed envelope and stores it again under the current round's
    key (``replays_previous``). DHT validators refuse it (``wrong_round``: a round r−1 envelope under round r);
    a receiver that read it would reject it as ``WRONG_ROUND``. Round 0 has nothing to replay: honest.
    Knowledge assumed: its own previous commit.
    """

    kind: ClassVar[str] = "wire"

    def __init__(self) -> None:
        self.last_sealed: bytes | None = None

    def replay(self, sealed: bytes) -> bytes:
        """Store last round's sealed envelope instead of ``sealed`` (``sealed`` itself in round 0)."""
        previous, self.last_sealed = self.last_sealed, sealed
        return previous if previous is not None else sealed

    def __repr__(self) -> str:
        return "Replay()"


class Slowloris(WireBehaviour):
    """Commit honestly, then serve the payload at a trickle; as a client, hold other peers' streams slowly.

    Sender side: the signed envelope is the honest one (``mutate`` returns the draft unchanged), so the
    commit is valid; but when asked for its payload (or a state) the peer answers ``OK`` at once, writes the
    first ``head_bytes`` bytes, then ``bytes_per_s`` bytes per second (0: nothing more) and never cuts the
    stream itself. A correct receiver cuts the stream while reading it (no byte for ``fetch_idle_timeout_s``,
    or fewer than ``min_fetch_bytes_per_s`` on average after that allowance), does not retry, and rejects:
    ``TIMEOUT``. Knowing that, the attacker leaves its own update out of its own aggregate, so its model stays
    the honest peers' and its next commit is on their base again (else it would be ``STALE_BASE`` next round).

    Client side (``client_streams > 0``): it keeps ``client_streams`` streams open to the payload handler of
    every other present peer, alternately sending a request one byte every ``interval_s`` (it never
    completes) and sending a complete payload request but reading the answer one byte every ``interval_s``.
    A correct server bounds it: streams past its per-peer cap are refused (``BUSY``), a request that does not
    arrive within ``request_timeout_s`` and an answer not read within the serve limit are cut.

    The swarm side of both is ``p2p_guard.swarm.slowloris`` (the peer selects it by ``trickles_payload``).
    Knowledge assumed: the other peers' PeerIDs (public, in their presence records).

    Args:
        bytes_per_s: Payload bytes served per second after the head (>= 0; 0 stalls after the head).
        head_bytes: Bytes served at once after ``OK`` (>= 0).
        client_streams: Streams held open to each other peer (>= 0; 0: no client side).
        interval_s: Seconds between two bytes the client sends or reads (> 0).
    """

    kind: ClassVar[str] = "wire"
    trickles_payload: ClassVar[bool] = True
    leaves_own_row_out: ClassVar[bool] = True

    def __init__(self, *, bytes_per_s: float = 2.0, head_bytes: int = 1, client_streams: int = 8,
                 interval_s: float = 1.0) -> None:
        if isinstance(bytes_per_s, bool) or not isinstance(bytes_per_s, (int, float)) \
                or not 0 <= bytes_per_s < math.inf:
            raise ValueError(f"bytes_per_s must be a finite number >= 0, got {bytes_per_s!r}")
        for name, value in (("head_bytes", head_bytes), ("client_streams", client_streams)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) \
                or not 0 < interval_s < math.inf:
            raise ValueError(f"interval_s must be a finite number > 0, got {interval_s!r}")
        self.bytes_per_s = float(bytes_per_s)
        self.head_bytes = head_bytes
        self.client_streams = client_streams
        self.interval_s = float(interval_s)

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """The commit is honest: the attack is in how the payload is served."""
        return draft

    def __repr__(self) -> str:
        return (f"Slowloris(bytes_per_s={self.bytes_per_s}, head_bytes={self.head_bytes}, "
                f"client_streams={self.client_streams}, interval_s={self.interval_s})")


class Copycat(WireBehaviour):
    """Commit an update of the same round only after another peer revealed its payload (copy or adapt).

    It trains like an honest peer, then withholds its commit: it polls the round's committers (one bounded
    fetch each, every ``poll_s``) until one of them serves its payload, which honest peers do only once their
    commit phase has closed. Then it commits that payload byte for byte as its own update (same digest and
    size, its own envelope and signature) and serves it: the "unique computation" attack. With
    ``adapt=True`` it commits instead ``scale ×`` the mean of the payloads served at that poll (default −10:
    the opposite of the honest mean, amplified), an update adapted to honest updates of the same round. If
    nobody serves before ``timeout_s`` (the peer passes its ``commit_timeout_s``), it commits its own
    honest-looking update, just as late.

    A correct receiver never fetches nor applies it: the commit appears after the receiver's commit phase
    closed (``LATE_COMMIT``). Knowledge assumed: the round's commits (public in the DHT) and the payloads that
    honest peers serve to anyone once they reveal; no secret of any peer.

    Args:
        adapt: Commit ``scale ×`` the mean of the fetched payloads instead of a copy.
        scale: Factor of the adapted update (finite, non-zero).
        poll_s: Seconds between two polls of the committers (> 0).
    """

    kind: ClassVar[str] = "wire"

    def __init__(self, *, adapt: bool = False, scale: float = -10.0, poll_s: float = COPYCAT_POLL_S) -> None:
        if not isinstance(adapt, bool):
            raise ValueError(f"adapt must be true or false, got {adapt!r}")
        for name, value in (("scale", scale), ("poll_s", poll_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if scale == 0:
            raise ValueError("scale must be non-zero, got 0")
        if poll_s <= 0:
            raise ValueError(f"poll_s must be > 0, got {poll_s!r}")
        self.adapt = adapt
        self.scale = float(scale)
        self.poll_s = float(poll_s)

    def mutate(self, draft: CommitDraft, generator: torch.Generator) -> CommitDraft:
        """Unchanged: the commit is rewritten by :meth:`copy_commit` once a payload is served."""
        return draft

    async def before_commit(self, draft: CommitDraft, poll: RevealedPayloads, *, timeout_s: float) -> CommitDraft:
        """Withhold the commit until some peer reveals, then copy or adapt (:meth:`copy_commit`)."""
        return await self.copy_commit(draft, poll, timeout_s=timeout_s)

    async def copy_commit(self, draft: CommitDraft, fetch_revealed: RevealedPayloads, *,
                          timeout_s: float) -> CommitDraft:
        """Poll ``fetch_revealed`` until it returns payloads (or ``timeout_s``), then copy or adapt them.

        Args:
            draft: Our honest draft (left untouched).
            fetch_revealed: One poll of the round's committers (see :data:`RevealedPayloads`).
            timeout_s: Give up after this many seconds and return ``draft`` (committed late as it is).

        Returns:
            The draft to seal: the first served payload (sorted by sender) byte for byte, its codec and size;
            with ``adapt``, ``scale ×`` the mean of every served payload that decodes, in our codec.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            served = list(await fetch_revealed())
            if served:
                copied = self._from(draft, served)
                if copied is not None:
                    return copied
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                logger.info("copycat: nothing revealed within %.0f s; committing our own update", timeout_s)
                return draft
            await asyncio.sleep(min(self.poll_s, remaining))

    def _from(self, draft: CommitDraft, served: list[tuple[Envelope, bytes]]) -> CommitDraft | None:
        if not self.adapt:
            envelope, payload = served[0]
            logger.info("copycat: committing a copy of the payload %s revealed", peer_id_to_b58(envelope.sender)[-8:])
            return dataclasses.replace(
                _with_envelope(draft, codec=envelope.codec, payload_bytes=len(payload)),
                digest_payload=payload, serve_payload=payload)
        numel = draft.envelope.numel
        vectors = [decode_update(payload, envelope.codec, numel, draft.envelope.shapes) for envelope, payload in served]
        decoded = [v for v in vectors if isinstance(v, torch.Tensor)]
        if not decoded:
            return None
        payload = encode_update(self.scale * torch.stack(decoded).mean(dim=0), draft.envelope.codec,
                                draft.envelope.shapes)
        logger.info("copycat: committing %g × the mean of %d revealed payload(s)", self.scale, len(decoded))
        return dataclasses.replace(_with_envelope(draft, payload_bytes=len(payload)), digest_payload=payload,
                                   serve_payload=payload)

    def __repr__(self) -> str:
        return f"Copycat(adapt={self.adapt}, scale={self.scale}, poll_s={self.poll_s})"


#: Built-in wire attacks by name.
WIRE_ATTACKS: dict[str, type] = {
    "copycat": Copycat,
    "equivocate": Equivocate,
    "forged_signature": BadSignature,
    "impersonate": Impersonate,
    "replay": Replay,
    "unsigned": Unsigned,
    "bad_signature": BadSignature,
    "wrong_run": WrongRun,
    "wrong_round": WrongRound,
    "stale_base": StaleBase,
    "digest_mismatch": DigestMismatch,
    "wrong_shape": WrongShape,
    "nan": NaNPayload,
    "oversized": Oversized,
    "vote_smear": VoteSmear,
    "slowloris": Slowloris,
}


def _with_envelope(draft: CommitDraft, **fields: object) -> CommitDraft:
    """A copy of ``draft`` whose envelope has ``fields`` replaced."""
    return dataclasses.replace(draft, envelope=dataclasses.replace(draft.envelope, **fields))


def _random_bytes(count: int, generator: torch.Generator) -> bytes:
    """``count`` uniformly random bytes from ``generator``."""
    return bytes(torch.randint(0, 256, (count,), generator=generator, dtype=torch.uint8).tolist())
