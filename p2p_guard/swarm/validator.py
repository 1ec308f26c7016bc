r"""The DHT record validator: only the owner of subkey P can write under P, with a bounded lifetime and size.

hivemind calls ``validate(record)`` on every record a DHT node is asked to store (by a peer or by itself) and
on every record it reads back from another node (``DHTProtocol.rpc_store`` / ``call_find``,
``DHTNode.store_many``). A record holds bytes only:

    ======================  ===============================================================================
    ``record.key``          ``SHA-1(msgpack(key text))``, 20 bytes (``DHTID.generate(key).to_bytes()``)
    ``record.subkey``       ``msgpack(subkey)``; ``msgpack(None) = b"\\xc0"`` for a store without a subkey
    ``record.value``        ``msgpack(value)``; our values are ``bytes``, so a msgpack ``bin``
    ``expiration_time``     DHT time (seconds since the epoch) at which the record expires
    ======================  ===============================================================================

The key text is hashed away, so a record is recognised as ours in two ways:

- **by key**: for each run id the validator is given, it precomputes the hashes of the run's keys
  (``presence``, ``proofs``, ``shards``, and ``commit``/``close``/``votes`` of rounds ``0 … max_rounds − 1``); any
  record under one of them is ours, whatever its value;
- **by content**: a value that is structurally a p2p_guard envelope, record or equivocation proof is ours,
  whatever key it is under; once authenticated it names its own key (run, round, kind), which must hash to
  ``record.key`` (so a node that does not know the run still refuses a value replayed under another round's or
  another run's key, and a signed value under a foreign key).

Anything else is not ours and passes untouched (other validators may judge it). A record of ours is accepted
only if, first failure wins:

1. its subkey is a msgpack ``str`` (``no_subkey`` for a store without one, ``bad_subkey`` otherwise) that is
   the base58 text of an Ed25519 PeerID (``bad_subkey``);
2. its value is at most ``max_value_bytes`` (``oversize``) and its expiration is finite and at most
   ``max_ttl_s`` in the future (``bad_expiration``);
3. its value is a msgpack ``bin`` holding an envelope (``commit``), a signed record (``presence`` or ``leave``
   under the presence key, ``close``, ``votes``, ``shard`` under the shards key) or an equivocation proof
   (``proofs``) that opens: structure,
   version, signature (``decode_error``, ``oversize``, ``unsupported_version``, ``unsigned``,
   ``bad_signature``; for a proof, also its own checks);
4. the content belongs under this key: the right kind (``wrong_kind``), run (``wrong_run``) and round
   (``wrong_round``) for a known key, or the key named by the content (``wrong_key``) otherwise;
5. its expiration is within the cap of its kind (``max_ttl_by_kind``, e.g. ``presence``; ``bad_expiration``),
   and a ``presence``, ``close`` or ``shard`` record is at most ``MAX_RECORD_BYTES`` (``oversize``);
6. the signer's PeerID is the subkey (for ``proofs``: the accused's) (``impersonation``).

``validate`` never raises: a parser failure is a rejection, counted by reason (:meth:`RecordValidator.stats`),
kept in a bounded log by (kind, subkey, reason) (:meth:`RecordValidator.refusals`; the subkey is only what
the writer claimed) and logged at DEBUG. Every accepted commit also goes through an
:class:`~p2p_guard.protocol.proof.EquivocationDetector`: a DHT node that stores or reads two envelopes of one
sender for one round with different digests keeps the proof, and the peer reads it with :func:`merged_report`
(the DHT node runs in the peer's own process, so the validator is the peer's own object). A second envelope is
still accepted: hivemind rejects a whole dictionary read
from a node when one of its entries fails, so refusing it would let the equivocator hide its honest
neighbours' commits too. The proof gets it banned instead.

Limits: garbage under the key of a round ≥ ``max_rounds``, or under any key of a run the validator was not
given, is not recognisable and passes (readers still open every value and reject it). A validly signed,
replayed record of the owner itself (an old presence record, say) is accepted within its TTL cap.

The validator pickles (its key table is rebuilt on first use after unpickling).

References:
    [1] hivemind ``dht/validation.py`` (``RecordValidatorBase``, ``DHTRecord``), ``dht/crypto.py``
        (``RSASignatureValidator``: owner-signed records), ``dht/schema.py`` (recognising keys by their hash).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import msgpack
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import get_dht_time

from p2p_guard.identity import peer_id_from_b58, peer_id_to_b58, public_key_from_peer_id
from p2p_guard.protocol.envelope import MAX_ENVELOPE_BYTES, Envelope, open_envelope
from p2p_guard.protocol.proof import (
    PROOF_MAGIC,
    EquivocationDetector,
    EquivocationProof,
    max_proof_bytes,
    verify_proof,
)
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.protocol.records import MAX_RECORD_BYTES, SignedRecord, open_signed_record
from p2p_guard.swarm.records import close_key, commit_key, presence_key, proofs_key, shards_key, votes_key

__all__ = [
    "DEFAULT_MAX_ROUNDS",
    "DEFAULT_MAX_TTL_BY_KIND",
    "DEFAULT_MAX_TTL_S",
    "DEFAULT_MAX_VALUE_BYTES",
    "DEFAULT_MAX_VOTES_BYTES",
    "KEY_KINDS",
    "REASONS",
    "KeySpec",
    "RecordValidator",
    "RecordVerdict",
    "Refusal",
    "ValidatorReport",
    "dht_key_id",
    "merged_report",
]

logger = logging.getLogger(__name__)

#: The kinds of key the validator protects, by the name of their last path component.
KEY_KINDS: tuple[str, ...] = ("presence", "commit", "close", "votes", "proofs", "shards")
#: Every reason :meth:`RecordValidator.check` gives (:meth:`RecordValidator.stats` counts no others).
REASONS: tuple[str, ...] = (
    "accepted",
    "not_ours",
    "no_subkey",
    "bad_subkey",
    "bad_expiration",
    "oversize",
    "decode_error",
    "unsupported_version",
    "unsigned",
    "bad_signature",
    "impersonation",
    "wrong_kind",
    "wrong_run",
    "wrong_round",
    "wrong_key",
    "internal_error",
)
#: Commits live 600 s (``COMMIT_TTL_S``); one minute more allows for clock skew between nodes.
DEFAULT_MAX_TTL_S = 660.0
#: Tighter caps per kind: presence lives 30 s, so a replayed one can hold its subkey for a minute at most; a shard
#: claim lives 180 s (``SHARD_TTL_S``), one minute more for clock skew.
DEFAULT_MAX_TTL_BY_KIND: Mapping[str, float] = {"presence": 60.0, "shards": 240.0}
#: A signed ``votes`` record: one verdict per sender of a round.
DEFAULT_MAX_VOTES_BYTES = 64 * 1024
#: The largest value of ours: a proof (two envelopes), plus the msgpack ``bin`` header hivemind adds.
DEFAULT_MAX_VALUE_BYTES = max_proof_bytes(MAX_ENVELOPE_BYTES) + 16
#: Rounds whose keys are precomputed per known run (three SHA-1 per round, once per validator).
DEFAULT_MAX_ROUNDS = 10_000
#: Verdicts of :meth:`RecordValidator._open` kept for bytes seen again (about 2 KB each at most: a parsed envelope).
OPENED_CACHE_ENTRIES = 4096
_DETAIL_CHARS = 200
_MAX_SUBKEY_BYTES = 256


def dht_key_id(key: str) -> bytes:
    """The bytes hivemind puts in ``DHTRecord.key`` for a key: ``DHTID.generate(key).to_bytes()``.

    Args:
        key: The key text, e.g. ``commit_key(run, 3)``.

    Returns:
        ``SHA-1(msgpack(key))``, 20 bytes.
    """
    return hashlib.sha1(msgpack.packb(key, use_bin_type=True)).digest()  # noqa: S324 - hivemind's key hash


class KeySpec(NamedTuple):
    """What a key of ours holds: its kind (:data:`KEY_KINDS`), run and round (None for per-run keys)."""

    kind: str
    run_id: str
    round: int | None

    def text(self) -> str:
        """The key text, as ``swarm.records`` builds it."""
        if self.kind == "presence":
            return presence_key(self.run_id)
        if self.kind == "proofs":
            return proofs_key(self.run_id)
        if self.kind == "shards":
            return shards_key(self.run_id)
        if self.kind == "commit":
            return commit_key(self.run_id, int(self.round or 0))
        if self.kind == "close":
            return close_key(self.run_id, int(self.round or 0))
        return votes_key(self.run_id, int(self.round or 0))


@dataclass(frozen=True)
class RecordVerdict:
    """The validator's judgement of one DHT record.

    Attributes:
        accepted: Whether ``validate`` returns True.
        reason: One of :data:`REASONS` (``accepted`` and ``not_ours`` for the two ways to pass).
        detail: A short explanation (never key material or values).
        kind: The kind of key, when the record is ours and got far enough to tell.
        subkey: The subkey text when it names an Ed25519 PeerID, else ``""``. Only a claim: a forged record
            under Alice's subkey says nothing against Alice.
    """

    accepted: bool
    reason: str
    detail: str = ""
    kind: str | None = None
    subkey: str = ""


@dataclass(frozen=True)
class Refusal:
    """Records of ours refused with one reason under one subkey (the count merges repeats).

    Attributes:
        kind: The kind of key (:data:`KEY_KINDS`), or None if the record did not get far enough to tell.
        subkey: The PeerID the record was filed under, or ``""``. Only a claim: anyone can file a forged
            record under anyone's subkey, so a refusal is never evidence against the subkey's owner.
        reason: One of :data:`REASONS`.
        detail: The latest explanation.
        count: How many times this (kind, subkey, reason) was refused.
    """

    kind: str | None
    subkey: str
    reason: str
    detail: str
    count: int


@dataclass(frozen=True)
class ValidatorReport:
    """What the validators of one DHT node saw: counts by reason and the equivocation proofs caught.

    Attributes:
        counts: ``{reason: number of records}`` since the process started.
        proofs: Proof bytes (``protocol.proof``), at most one per accused sender.
        refusals: The latest refusals of records of ours, by (kind, subkey, reason), oldest first (bounded).
    """

    counts: dict[str, int]
    proofs: tuple[bytes, ...]
    refusals: tuple[Refusal, ...] = ()


_NOT_OURS = RecordVerdict(True, "not_ours")

_V = TypeVar("_V")


class _Memo(Generic[_V]):
    """A bounded map of results of a pure function of bytes; the least recently used entry goes first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[bytes, _V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes) -> _V | None:
        """The value stored for ``key`` (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: bytes, value: _V) -> _V:
        """Store ``value`` for ``key`` (dropping the oldest entry beyond ``max_entries``); return ``value``."""
        self._items[key] = value
        if len(self._items) > self.max_entries:
            self._items.popitem(last=False)
        return value


class RecordValidator(RecordValidatorBase):  # type: ignore[misc]  # hivemind ships no type hints
    """hivemind record validator for every key under ``p2p_guard/<run>/`` (see the module docstring).

    Args:
        run_ids: Runs whose keys are recognised by their hash even when the value is garbage (a peer passes
            its own run; a bootstrap node may pass none and then protects by content only).
        max_ttl_s: Largest accepted ``expiration_time − now`` for any record of ours, in seconds.
        max_ttl_by_kind: Tighter caps for some kinds (seconds), e.g. ``{"presence": 60.0}``.
        max_value_bytes: Largest serialised value of ours (bytes, as hivemind stores it).
        max_envelope_bytes: Largest commit envelope (bytes); a proof may hold two.
        max_votes_bytes: Largest ``votes`` record (bytes); other records are at most ``MAX_RECORD_BYTES``.
        max_rounds: Rounds ``0 … max_rounds − 1`` of each known run have their keys precomputed.
        max_tracked_commits: Envelopes the equivocation detector remembers (oldest forgotten first).
        max_proofs: Proofs kept for :meth:`report` (one per accused, first ones kept).
        max_refusals: Distinct (kind, subkey, reason) refusals kept for the report (least recent forgotten).

    Raises:
        ValueError: A run id is not a non-empty str, or a limit is not positive.
    """

    def __init__(
        self,
        run_ids: Iterable[str] = (),
        *,
        max_ttl_s: float = DEFAULT_MAX_TTL_S,
        max_ttl_by_kind: Mapping[str, float] | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_envelope_bytes: int = MAX_ENVELOPE_BYTES,
        max_votes_bytes: int = DEFAULT_MAX_VOTES_BYTES,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
        max_tracked_commits: int = 4096,
        max_proofs: int = 256,
        max_refusals: int = 256,
    ) -> None:
        runs = tuple(run_ids) if not isinstance(run_ids, str) else (run_ids,)
        for run in runs:
            if not isinstance(run, str) or not run:
                raise ValueError(f"run_ids must be non-empty strings, got {run!r}")
        _check_positive("max_ttl_s", max_ttl_s, real=True)
        ttl_by_kind = dict(DEFAULT_MAX_TTL_BY_KIND if max_ttl_by_kind is None else max_ttl_by_kind)
        for kind, ttl in ttl_by_kind.items():
            if kind not in KEY_KINDS:
                raise ValueError(f"max_ttl_by_kind: unknown kind {kind!r}; known: {', '.join(KEY_KINDS)}")
            _check_positive(f"max_ttl_by_kind[{kind!r}]", ttl, real=True)
        for name, value in (
            ("max_value_bytes", max_value_bytes),
            ("max_envelope_bytes", max_envelope_bytes),
            ("max_votes_bytes", max_votes_bytes),
            ("max_rounds", max_rounds),
            ("max_tracked_commits", max_tracked_commits),
            ("max_proofs", max_proofs),
            ("max_refusals", max_refusals),
        ):
            _check_positive(name, value, real=False)
        self.run_ids: tuple[str, ...] = tuple(dict.fromkeys(runs))
        self.max_ttl_s = float(max_ttl_s)
        self.max_ttl_by_kind = {kind: min(float(ttl), self.max_ttl_s) for kind, ttl in ttl_by_kind.items()}
        self.max_value_bytes = max_value_bytes
        self.max_envelope_bytes = max_envelope_bytes
        self.max_votes_bytes = max_votes_bytes
        self.max_rounds = max_rounds
        self.max_proofs = max_proofs
        self.max_refusals = max_refusals
        self._counts: Counter[str] = Counter()
        self._refusals: OrderedDict[tuple[str | None, str, str], Refusal] = OrderedDict()
        self._detector = EquivocationDetector(
            max_entries=max_tracked_commits, max_envelope_bytes=max_envelope_bytes
        )
        self._proofs: OrderedDict[str, bytes] = OrderedDict()
        # Pure functions of bytes, recomputed for every subkey of every DHT answer otherwise (py-spy, 32 peers):
        self._opened: _Memo[Envelope | SignedRecord | Rejected] = _Memo(OPENED_CACHE_ENTRIES)
        self._subkeys: _Memo[str | RecordVerdict] = _Memo(OPENED_CACHE_ENTRIES)
        self._signers: _Memo[str] = _Memo(OPENED_CACHE_ENTRIES)
        self._table: dict[bytes, KeySpec] | None = None

    # --- hivemind's interface -------------------------------------------------------------------------------

    def validate(self, record: DHTRecord) -> bool:
        """Judge one record (see the module docstring); count and log the reason. Never raises.

        Args:
            record: What hivemind hands over (key hash, serialised subkey and value, expiration).

        Returns:
            True to accept the record (ours and valid, or not ours), False to refuse it.
        """
        verdict = self.check(record)
        self._counts[verdict.reason if verdict.reason in REASONS else "internal_error"] += 1
        if not verdict.accepted:
            first = self._note_refusal(verdict)
            # WARNING once per (kind, subkey, reason), so a flood of garbage cannot flood the log.
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "DHT record refused (%s under %s, %s): %s",
                verdict.kind or "?",
                verdict.subkey[-8:] or "?",
                verdict.reason,
                verdict.detail,
            )
        return verdict.accepted

    def merge_with(self, other: RecordValidatorBase) -> bool:
        """Absorb another :class:`RecordValidator` with the same limits (its run ids are added to ours).

        Args:
            other: Another validator hivemind is combining with this one.

        Returns:
            True if merged (``other`` is left unchanged), False otherwise.
        """
        if not isinstance(other, RecordValidator) or other._limits() != self._limits():
            return False
        self.run_ids = tuple(dict.fromkeys((*self.run_ids, *other.run_ids)))
        self._table = None
        return True

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_table"] = None  # rebuilt on first use in the process that unpickles it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # --- our interface --------------------------------------------------------------------------------------

    def check(self, record: object) -> RecordVerdict:
        """Judge one record without counting it.

        Args:
            record: A ``DHTRecord`` (anything else is refused as ``decode_error``).

        Returns:
            The :class:`RecordVerdict`. Never raises.
        """
        try:
            return self._check(record)
        except Exception as error:  # noqa: BLE001 - a validator must never raise into hivemind
            logger.debug("record validator failed on a record", exc_info=True)
            return RecordVerdict(False, "internal_error", f"{type(error).__name__}")

    def stats(self) -> dict[str, int]:
        """Records judged so far in this process, by reason (a copy)."""
        return dict(self._counts)

    def proofs(self) -> list[bytes]:
        """Equivocation proofs caught or accepted so far in this process (one per accused sender)."""
        return list(self._proofs.values())

    def refusals(self) -> list[Refusal]:
        """The latest refusals by (kind, subkey, reason), least recent first (bounded by ``max_refusals``)."""
        return list(self._refusals.values())

    def report(self) -> ValidatorReport:
        """:meth:`stats`, :meth:`proofs` and :meth:`refusals` together."""
        return ValidatorReport(self.stats(), tuple(self.proofs()), tuple(self.refusals()))

    def _note_refusal(self, verdict: RecordVerdict) -> bool:
        """Remember a refusal; return True if this (kind, subkey, reason) is new."""
        key = (verdict.kind, verdict.subkey, verdict.reason)
        previous = self._refusals.pop(key, None)
        count = previous.count + 1 if previous is not None else 1
        self._refusals[key] = Refusal(verdict.kind, verdict.subkey, verdict.reason, verdict.detail, count)
        while len(self._refusals) > self.max_refusals:
            self._refusals.popitem(last=False)
        return previous is None

    def key_spec(self, key_id: bytes) -> KeySpec | None:
        """The known key whose hash is ``key_id`` (a run this validator was given, round < ``max_rounds``)."""
        return self._key_table().get(key_id)

    # --- the rules ------------------------------------------------------------------------------------------

    def _check(self, record: object) -> RecordVerdict:
        key = getattr(record, "key", None)
        subkey = getattr(record, "subkey", None)
        value = getattr(record, "value", None)
        expiration = getattr(record, "expiration_time", None)
        if type(key) is not bytes or type(subkey) is not bytes or type(value) is not bytes:
            return RecordVerdict(False, "decode_error", "record key, subkey and value must be bytes")
        spec = self._key_table().get(key)
        raw = _unwrap_bin(value, self.max_value_bytes)
        shape = _shape(raw) if raw is not None else None
        if spec is None and shape is None:
            return _NOT_OURS
        kind = spec.kind if spec is not None else None
        owner = self._subkeys.get(subkey)
        if owner is None:
            owner = self._subkeys.put(subkey, _parse_subkey(subkey))
        if isinstance(owner, RecordVerdict):
            return dataclasses.replace(owner, kind=kind)
        return dataclasses.replace(self._judge(key, spec, owner, value, raw, shape, expiration), subkey=owner)

    def _judge(
        self,
        key: bytes,
        spec: KeySpec | None,
        owner: str,
        value: bytes,
        raw: bytes | None,
        shape: str | None,
        expiration: object,
    ) -> RecordVerdict:
        """Rules 2–6 for a record of ours whose subkey names the Ed25519 PeerID ``owner``."""
        kind = spec.kind if spec is not None else None
        if len(value) > self.max_value_bytes:
            return RecordVerdict(
                False, "oversize", f"value of {len(value)} bytes > {self.max_value_bytes}", kind
            )
        late = self._expiration_problem(expiration, self.max_ttl_s)
        if late:
            return RecordVerdict(False, "bad_expiration", late, kind)
        if raw is None or shape is None:
            return RecordVerdict(
                False, "decode_error", "value is not a p2p_guard envelope, signed record or proof", kind
            )
        content = self._open(shape, raw)
        if isinstance(content, Rejected):
            return RecordVerdict(False, content.reason.value, content.detail[:_DETAIL_CHARS], kind)
        claimed = _claimed_key(content)
        if claimed is None:
            if spec is not None:
                unplaced = getattr(content, "kind", "?")
                return RecordVerdict(
                    False, "wrong_kind", f"a {unplaced!r} record under a {spec.kind} key", spec.kind
                )
            return (
                _NOT_OURS  # a signed record of a kind we do not place (e.g. ``state``) under an unknown key
            )
        if spec is not None:
            mismatch = _mismatch(spec, claimed)
            if mismatch is not None:
                return mismatch
        elif dht_key_id(claimed.text()) != key:
            return RecordVerdict(
                False, "wrong_key", f"the value belongs under {claimed.text()[:120]!r}", claimed.kind
            )
        kind = claimed.kind
        late = self._expiration_problem(expiration, self.max_ttl_by_kind.get(kind, self.max_ttl_s))
        if late:
            return RecordVerdict(False, "bad_expiration", late, kind)
        if kind in ("presence", "close", "shards") and len(raw) > MAX_RECORD_BYTES:
            return RecordVerdict(False, "oversize", f"{kind} record of {len(raw)} bytes", kind)
        signer = self._signers.get(content.sender)
        if signer is None:
            signer = self._signers.put(content.sender, peer_id_to_b58(content.sender))
        if signer != owner:
            what = "accuses" if kind == "proofs" else "is signed by"
            return RecordVerdict(False, "impersonation", f"the value {what} {signer}, not its subkey", kind)
        self._remember(kind, raw, content)
        return RecordVerdict(True, "accepted", "", kind)

    def _open(self, shape: str, raw: bytes) -> Envelope | SignedRecord | EquivocationProof | Rejected:
        """Parse and verify ``raw``; envelopes and signed records through a bounded cache of earlier results.

        Every DHT read hands every subkey of a dictionary value to the validator again (hivemind validates the
        values of each node that answers a search), so one peer verified the same presence records dozens of
        times a second (37% of an idle peer's CPU, an Ed25519 verify each). Whether bytes parse and carry a
        valid signature depends on the bytes only, so a verdict is reused for the same bytes (keyed by their
        BLAKE2b-128 digest); expirations, keys and owners are still checked on every record. Proofs are rare and
        large and are not cached.
        """
        if shape == "proof":
            return verify_proof(raw, max_envelope_bytes=self.max_envelope_bytes)
        digest = hashlib.blake2b(raw, digest_size=16, person=shape.encode()[:16]).digest()
        cached = self._opened.get(digest)
        if cached is not None:
            return cached
        opened: Envelope | SignedRecord | Rejected
        if shape == "envelope":
            opened = open_envelope(raw, max_bytes=self.max_envelope_bytes)
        else:
            opened = open_signed_record(raw, max_bytes=max(MAX_RECORD_BYTES, self.max_votes_bytes))
        return self._opened.put(digest, opened)

    def _expiration_problem(self, expiration: object, max_ttl_s: float) -> str:
        if (
            isinstance(expiration, bool)
            or not isinstance(expiration, (int, float))
            or not math.isfinite(expiration)
        ):
            return f"expiration {str(expiration)[:40]} is not a finite number"
        ahead = float(expiration) - get_dht_time()
        if ahead > max_ttl_s:
            return f"expires {ahead:.0f} s ahead, at most {max_ttl_s:.0f} s allowed"
        return ""

    def _remember(self, kind: str, raw: bytes, content: Envelope | SignedRecord | EquivocationProof) -> None:
        if kind == "commit" and isinstance(content, Envelope):
            proof = self._detector.observe(raw, content)
            if proof is not None:
                logger.log(
                    logging.DEBUG if proof.sender_b58 in self._proofs else logging.WARNING,  # once per equivocator
                    "equivocation by %s in run %r round %d caught by the DHT validator",
                    proof.sender_b58,
                    proof.run_id,
                    proof.round,
                )
                self._keep_proof(proof.sender_b58, proof.to_bytes())
        elif kind == "proofs" and isinstance(content, EquivocationProof):
            self._keep_proof(content.sender_b58, raw)

    def _keep_proof(self, accused: str, proof: bytes) -> None:
        if accused not in self._proofs and len(self._proofs) < self.max_proofs:
            self._proofs[accused] = proof

    def _key_table(self) -> dict[bytes, KeySpec]:
        if self._table is None:
            table: dict[bytes, KeySpec] = {}
            for run in self.run_ids:
                specs = [KeySpec("presence", run, None), KeySpec("proofs", run, None), KeySpec("shards", run, None)]
                specs += [
                    KeySpec(kind, run, r) for r in range(self.max_rounds) for kind in ("commit", "close", "votes")
                ]
                table.update((dht_key_id(spec.text()), spec) for spec in specs)
            self._table = table
        return self._table

    def _limits(self) -> tuple[object, ...]:
        return (
            self.max_ttl_s,
            sorted(self.max_ttl_by_kind.items()),
            self.max_value_bytes,
            self.max_envelope_bytes,
            self.max_votes_bytes,
            self.max_rounds,
            self.max_proofs,
        )

    def __repr__(self) -> str:
        return (
            f"RecordValidator(run_ids={list(self.run_ids)!r}, max_ttl_s={self.max_ttl_s:g}, "
            f"max_ttl_by_kind={self.max_ttl_by_kind!r}, max_value_bytes={self.max_value_bytes}, "
            f"max_envelope_bytes={self.max_envelope_bytes}, max_votes_bytes={self.max_votes_bytes}, "
            f"max_rounds={self.max_rounds})"
        )


def merged_report(validators: Iterable[object]) -> ValidatorReport:
    """Merge the reports of every :class:`RecordValidator` among ``validators`` (hivemind composites unwrapped).

    The validators run in this process (``swarm.dht`` runs the DHT node in the peer's own event loop), so
    their counters and proofs are read directly.

    Args:
        validators: What the DHT node was given (``SwarmDHT.record_validators``); other kinds are skipped.

    Returns:
        Counts summed by reason, at most one proof per accused (first kept), refusals concatenated; empty if
        there is no :class:`RecordValidator`.
    """
    counts: Counter[str] = Counter()
    proofs: dict[str, bytes] = {}
    refusals: list[Refusal] = []
    for validator in (v for item in validators for v in _our_validators(item)):
        counts.update(validator.stats())
        for accused, proof in validator._proofs.items():
            proofs.setdefault(accused, proof)
        refusals += validator.refusals()
    return ValidatorReport(dict(counts), tuple(proofs.values()), tuple(refusals))


def _our_validators(validator: object) -> list[RecordValidator]:
    if isinstance(validator, RecordValidator):
        return [validator]
    inner = getattr(validator, "_validators", None)  # hivemind's CompositeValidator
    return [v for v in inner if isinstance(v, RecordValidator)] if isinstance(inner, list) else []


def _check_positive(name: str, value: object, *, real: bool) -> None:
    types = (int, float) if real else (int,)
    if isinstance(value, bool) or not isinstance(value, types) or not math.isfinite(value) or value <= 0:
        kind = "a positive finite number" if real else "a positive int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def _unwrap_bin(value: bytes, max_bytes: int) -> bytes | None:
    """The bytes inside hivemind's serialised value, if it is exactly one msgpack ``bin`` of ≤ max_bytes."""
    if not value or value[0] not in (0xC4, 0xC5, 0xC6):
        return None
    try:
        inner = msgpack.unpackb(
            value, max_bin_len=max_bytes, max_str_len=0, max_array_len=0, max_map_len=0, max_ext_len=0
        )
    except Exception:  # noqa: BLE001 - the parse boundary: anything unparsable is not a bin
        return None
    return inner if type(inner) is bytes else None


def _shape(raw: bytes) -> str | None:
    """``envelope``, ``record`` or ``proof`` from the structure alone (nothing verified yet), else None."""
    head = _peek_array(raw, max_str_len=len(PROOF_MAGIC))
    if head is None:
        return None
    length, first = head
    if length == 4 and first == PROOF_MAGIC:
        return "proof"
    if length != 2 or type(first) is not bytes:
        return None
    body = _peek_array(first, max_str_len=64)
    if body is None:
        return None
    if type(body[1]) is int:
        return "envelope"
    if type(body[1]) is str:
        return "record"
    return None


def _peek_array(data: bytes, *, max_str_len: int) -> tuple[int, object] | None:
    """``(length, first element)`` of a msgpack array, reading nothing past its first element."""
    unpacker = msgpack.Unpacker(
        raw=False,
        max_buffer_size=max(len(data), 1),
        max_bin_len=len(data),
        max_str_len=max_str_len,
        max_array_len=len(data),
        max_map_len=0,
        max_ext_len=0,
    )
    try:
        unpacker.feed(data)
        length = unpacker.read_array_header()
        first = unpacker.unpack() if length else None
    except Exception:  # noqa: BLE001 - the parse boundary: anything unparsable is not ours
        return None
    return length, first


def _parse_subkey(subkey: bytes) -> str | RecordVerdict:
    """The subkey text if it is a msgpack str naming an Ed25519 PeerID, else the rejection."""
    if subkey == b"\xc0":
        return RecordVerdict(False, "no_subkey", "a store without a subkey under a p2p_guard key")
    if len(subkey) > _MAX_SUBKEY_BYTES:
        return RecordVerdict(False, "bad_subkey", f"subkey of {len(subkey)} bytes")
    try:
        text = msgpack.unpackb(
            subkey,
            raw=False,
            max_str_len=_MAX_SUBKEY_BYTES,
            max_bin_len=_MAX_SUBKEY_BYTES,
            max_array_len=16,
            max_map_len=0,
            max_ext_len=0,
        )
    except Exception:  # noqa: BLE001 - the parse boundary
        return RecordVerdict(False, "bad_subkey", "subkey is not msgpack")
    if type(text) is not str:
        return RecordVerdict(False, "bad_subkey", f"subkey is a {type(text).__name__}, not a PeerID str")
    peer_id = peer_id_from_b58(text)
    if peer_id is None or public_key_from_peer_id(peer_id) is None or peer_id_to_b58(peer_id) != text:
        return RecordVerdict(False, "bad_subkey", "subkey is not the base58 text of an Ed25519 PeerID")
    return text


def _claimed_key(content: Envelope | SignedRecord | EquivocationProof) -> KeySpec | None:
    """The key an authenticated value belongs under, or None for a record kind we do not place."""
    if isinstance(content, Envelope):
        return KeySpec("commit", content.run_id, content.round)
    if isinstance(content, EquivocationProof):
        return KeySpec("proofs", content.run_id, None)
    if content.kind in ("presence", "leave"):  # a leave record replaces its sender's presence record
        return KeySpec("presence", content.run_id, None)
    if content.kind == "votes":
        return KeySpec("votes", content.run_id, content.round)
    if content.kind == "close":
        return KeySpec("close", content.run_id, content.round)
    if content.kind == "shard":  # a peer's claim of the data shard it trains (informational)
        return KeySpec("shards", content.run_id, None)
    return None


def _mismatch(spec: KeySpec, claimed: KeySpec) -> RecordVerdict | None:
    """Why an authenticated value does not belong under the known key ``spec``, or None if it does."""
    if claimed.kind != spec.kind:
        return RecordVerdict(
            False, "wrong_kind", f"a {claimed.kind} value under a {spec.kind} key", spec.kind
        )
    if claimed.run_id != spec.run_id:
        return RecordVerdict(
            False, "wrong_run", f"run {claimed.run_id[:60]!r} under run {spec.run_id[:60]!r}", spec.kind
        )
    if claimed.round != spec.round:
        return RecordVerdict(
            False, "wrong_round", f"round {claimed.round} under round {spec.round}", spec.kind
        )
    return None
