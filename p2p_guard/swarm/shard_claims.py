"""Which data shard each present peer trains: signed shard claims, their coverage, and a joiner's choice.

Every peer states the shard it trains in a signed ``shard`` record (``protocol.records``: value ``[shard_index,
num_shards]``) under the run's ``shards`` key (``swarm.records.shards_key``, subkey its PeerID, TTL
``SHARD_TTL_S``), at start and every :data:`SHARD_REFRESH_S`. A reader keeps a claim only if the record opens
(signature included), is signed by the PeerID of its subkey, names a shard in ``[0, num_shards)`` and, for a peer,
cuts the data into as many shards as it does; every other value is ignored with a reason
(:func:`open_shard_claims`). A claim counts only while its sender has a presence record (:func:`present_claims`).

A claim is the sender's word and is used for nothing but two conveniences: a peer started without
``--peer-index`` trains a shard no present peer claims (:func:`choose_shard`) and, when it finds its shard shared
while another is trained by nobody, the designated one of the sharers moves there between rounds
(:func:`rebalance`); and ``p2p-guard status`` and the peers' logs say which shards are trained by several peers
and which by none (:func:`coverage`). A liar can make a shard look trained or untrained, so the most it does is
steer a peer to another shard: the joiner's batches
stay keyed by its own PeerID (``training.streams``), so no two peers send identical updates, and every update is
judged by the guard the same whatever shard its sender claims.

Why a key of its own and not a field of the presence record: every reader of the current protocol reads a
presence value as the sender's round, an int, and refuses a record with any other value, so a presence record
that carried a shard as well would hide its sender from every peer that does not know the new form.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from p2p_guard.identity import Identity, peer_id_to_b58
from p2p_guard.protocol.reasons import Rejected
from p2p_guard.protocol.records import open_record, sign_record
from p2p_guard.swarm.records import read_roster, shards_key
from p2p_guard.training.streams import derived_shard_index

__all__ = ["MAX_LISTED", "SHARD_REFRESH_S", "ClaimsRead", "Coverage", "DHTReader", "DHTWriter", "ShardChoice",
           "ShardClaim", "ShardMove", "choose_shard", "count_mismatch_warning", "coverage", "coverage_warnings",
           "describe_choice", "move_order", "open_shard_claims", "pick_order", "present_claims",
           "present_shard_claims", "publish_shard_claim", "read_shard_claims", "rebalance"]

logger = logging.getLogger(__name__)

#: Seconds between two stores of a peer's shard claim (it lives ``swarm.records.SHARD_TTL_S``, 180 s).
SHARD_REFRESH_S = 60.0
#: Uncovered shards listed by :func:`coverage` (the rest are only counted): a hostile claim may name 2⁶³ shards.
MAX_LISTED = 32
_PICK_DOMAIN = b"p2p-guard/shard-pick|"
_MOVE_DOMAIN = b"p2p-guard/shard-move|"


class DHTReader(Protocol):
    """What reading needs of a DHT: ``read(key) -> {subkey: raw bytes}`` (``SwarmDHT.read``)."""

    async def read(self, key: str) -> dict[str, bytes]:
        """Every ``subkey -> bytes`` value under ``key``, unverified ({} if none or on failure)."""
        ...


class DHTWriter(Protocol):
    """What publishing needs of a DHT: ``store(key, subkey, value, ttl_s) -> bool`` (``SwarmDHT.store``)."""

    async def store(self, key: str, subkey: str, value: bytes, ttl_s: float) -> bool:
        """Store ``value`` under ``key``/``subkey`` for ``ttl_s`` seconds; False if refused."""
        ...


@dataclass(frozen=True)
class ShardClaim:
    """What a valid shard record says (self-reported; informational only).

    Attributes:
        shard: the data shard its sender trains, in ``[0, num_shards)``.
        num_shards: how many shards its sender cuts the data into (its ``num_peers``), >= 1.
        round: the round its sender was in when it signed the record.
    """

    shard: int
    num_shards: int
    round: int


class ClaimsRead(NamedTuple):
    """The shard records under the ``shards`` key, sorted out.

    Attributes:
        claims: ``{PeerID b58: claim}`` of every value kept.
        ignored: ``{subkey: reason}`` of every value not kept (the subkey is only what the writer claimed).
    """

    claims: dict[str, ShardClaim]
    ignored: dict[str, str]


@dataclass(frozen=True)
class ShardChoice:
    """The data shard a peer trains and how it was chosen (:func:`choose_shard`).

    Attributes:
        shard_index: the shard, in ``[0, num_shards)``.
        how: ``"peer_index"`` (set by hand), ``"uncovered"`` (one no other present peer claims) or ``"peer_id"``
            (derived from the PeerID: every shard is claimed, or the claims are unknown).
        claimed: the shards the other present peers claim; None when they could not be read.
    """

    shard_index: int
    how: str
    claimed: frozenset[int] | None


@dataclass(frozen=True)
class Coverage:
    """Which shards of ``num_shards`` the claims cover (:func:`coverage`).

    Attributes:
        num_shards: the number of shards, >= 1.
        peers_by_shard: ``{shard: PeerIDs claiming it, sorted}`` for every claimed shard.
        uncovered: the first :data:`MAX_LISTED` shards nobody claims, ascending.
        uncovered_count: how many shards nobody claims (``uncovered`` may list fewer).
    """

    num_shards: int
    peers_by_shard: dict[int, tuple[str, ...]]
    uncovered: tuple[int, ...]
    uncovered_count: int

    @property
    def shared(self) -> dict[int, tuple[str, ...]]:
        """The shards claimed by more than one peer, with their peers."""
        return {s: peers for s, peers in self.peers_by_shard.items() if len(peers) > 1}


def open_shard_claims(raw: Mapping[str, object], run_id: str, *, num_shards: int | None = None) -> ClaimsRead:
    """Open every value read under the ``shards`` key; keep the valid claims, give a reason for the rest.

    Never raises on hostile values. Reasons, first failure wins: ``subkey is not a str``; the record does not open
    as a ``shard`` record of ``run_id`` (``"<reject reason>: <detail>"``, from
    :func:`~p2p_guard.protocol.records.open_record`: structure, version, signature, run, value type); ``signed by
    another PeerID than its subkey``; ``no shards`` (``num_shards`` 0); ``shard S out of range [0, N)``;
    ``for N shards, not M`` (only when ``num_shards`` is given).

    Args:
        raw: ``{subkey: value}`` as read from the DHT, unverified.
        run_id: the run.
        num_shards: our own number of shards: a claim for another number is ignored. None: keep claims of any
            number (``p2p-guard status``, which has none of its own).

    Returns:
        The :class:`ClaimsRead`.
    """
    claims: dict[str, ShardClaim] = {}
    ignored: dict[str, str] = {}
    for subkey, value in raw.items():
        if not isinstance(subkey, str):
            continue  # not a key a dict of ours can be indexed by in a report; SwarmDHT.read drops these anyway
        record = open_record(value, kind="shard", run_id=run_id)
        if isinstance(record, Rejected):
            ignored[subkey] = f"{record.reason.value}: {record.detail}"
            continue
        if not _signer_is(record.sender, subkey):
            ignored[subkey] = "signed by another PeerID than its subkey"
            continue
        shard, total = record.value  # open_record checked: two ints in [0, 2**63)
        if total == 0:
            ignored[subkey] = "no shards"
        elif shard >= total:
            ignored[subkey] = f"shard {shard} out of range [0, {total})"
        elif num_shards is not None and total != num_shards:
            ignored[subkey] = f"for {total} shards, not {num_shards}"
        else:
            claims[subkey] = ShardClaim(shard=shard, num_shards=total, round=record.round)
    return ClaimsRead(claims, ignored)


def pick_order(peer_id: str, shard: int) -> bytes:
    """The rank of ``shard`` in ``peer_id``'s order of preference (lower is preferred).

    ``SHA-256("p2p-guard/shard-pick|" + peer_id + "|" + decimal shard)``. Each PeerID orders the shards its own
    way, so joiners that see the same uncovered shards spread over them.

    Args:
        peer_id: the peer's base58 PeerID.
        shard: a shard index >= 0.

    Returns:
        32 bytes.
    """
    return hashlib.sha256(_PICK_DOMAIN + peer_id.encode() + b"|" + str(shard).encode()).digest()


def choose_shard(peer_id: str, num_shards: int, claimed: Iterable[int] | None,
                 peer_index: int | None = None) -> ShardChoice:
    """The shard a peer trains, given the shards the other present peers claim.

    - ``peer_index`` set: that shard (``how="peer_index"``), whatever is claimed.
    - else, if some shard of ``[0, num_shards)`` is unclaimed: the unclaimed shard with the lowest
      :func:`pick_order` for ``peer_id`` (``how="uncovered"``). Deterministic: a restart with the same key that
      sees the same claims takes the same shard.
    - else (every shard claimed, or ``claimed`` None: unknown): ``derived_shard_index(peer_id, num_shards)``
      (``how="peer_id"``, the shard ``training.streams`` gives).

    Claimed shards outside ``[0, num_shards)`` are ignored (:func:`open_shard_claims` already left them out).

    Args:
        peer_id: our base58 PeerID.
        num_shards: our number of shards (``num_peers``), >= 1.
        claimed: the other present peers' claimed shards (repeats allowed), or None when they are unknown.
        peer_index: the ``--peer-index`` set by hand, or None.

    Returns:
        The :class:`ShardChoice`.

    Raises:
        ValueError: ``num_shards`` < 1, an empty ``peer_id``, or ``peer_index`` outside ``[0, num_shards)``.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1; got {num_shards}")
    if not peer_id:
        raise ValueError("peer_id must not be empty")
    known = None if claimed is None else frozenset(s for s in claimed if 0 <= s < num_shards)
    if peer_index is not None:
        if not 0 <= peer_index < num_shards:
            raise ValueError(f"peer_index must be in [0, num_shards); got peer_index={peer_index}, "
                             f"num_shards={num_shards}")
        return ShardChoice(peer_index, "peer_index", known)
    if known is not None and len(known) < num_shards:
        free = (s for s in range(num_shards) if s not in known)
        return ShardChoice(min(free, key=lambda s: (pick_order(peer_id, s), s)), "uncovered", known)
    return ShardChoice(derived_shard_index(peer_id, num_shards), "peer_id", known)


@dataclass(frozen=True)
class ShardMove:
    """A move of ours from a shared shard to one no present peer claims (:func:`rebalance`).

    Attributes:
        shard: the shard we train now.
        to: the shard we move to (claimed by no present peer).
        sharing: the other present peers that claim ``shard``, sorted.
    """

    shard: int
    to: int
    sharing: tuple[str, ...]


def move_order(peer_id: str, shard: int) -> bytes:
    """The rank of ``peer_id`` among the peers sharing ``shard``: the largest moves first (:func:`rebalance`).

    ``SHA-256("p2p-guard/shard-move|" + peer_id + "|" + decimal shard)``; distinct PeerIDs never tie.
    """
    return hashlib.sha256(_MOVE_DOMAIN + peer_id.encode() + b"|" + str(shard).encode()).digest()


def rebalance(me: str, shard: int, others: Mapping[str, int], num_shards: int, *,
              by_index: bool) -> ShardMove | None:
    """Whether we leave our shard for one no present peer trains, and which (None: we stay).

    We move only if we chose our shard ourselves (``by_index`` False: a ``--peer-index`` never moves), our shard
    is claimed by another present peer too, some shard is claimed by nobody, and we are among the designated
    movers of our shard: its sharers (us included) ranked by :func:`move_order`, largest first, the first
    ``min(sharers - 1, uncovered shards)`` move, so the last one always stays. Every sharer computes the same
    ranks from the same claims. The shard moved to is :func:`choose_shard`'s pick among the unclaimed ones.

    Args:
        me: our PeerID.
        shard: the shard we train.
        others: ``{PeerID: claimed shard}`` of the other present peers (valid claims for our ``num_shards``).
        num_shards: our number of shards, >= 1.
        by_index: our shard was set by ``--peer-index``.

    Returns:
        The :class:`ShardMove`, or None.

    Raises:
        ValueError: ``num_shards`` < 1 or an empty ``me``.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1; got {num_shards}")
    if not me:
        raise ValueError("me must not be empty")
    if by_index:
        return None
    theirs = {p: s for p, s in others.items() if p != me and 0 <= s < num_shards}
    cov = coverage({**theirs, me: shard}, num_shards, max_listed=0)
    sharers = cov.peers_by_shard.get(shard, ())
    if len(sharers) < 2 or cov.uncovered_count == 0:
        return None
    ranked = sorted(sharers, key=lambda p: move_order(p, shard), reverse=True)
    if ranked.index(me) >= min(len(sharers) - 1, cov.uncovered_count):
        return None
    to = choose_shard(me, num_shards, theirs.values()).shard_index  # uncovered: our shard is claimed by a sharer
    return ShardMove(shard=shard, to=to, sharing=tuple(p for p in sharers if p != me))


def count_mismatch_warning(foreign: Mapping[str, int], num_shards: int) -> str | None:
    """The warning when present peers cut the data into another number of shards than we do (None: none do).

    Args:
        foreign: ``{PeerID: its num_shards}`` of the other present peers whose claims are for another number.
        num_shards: our number of shards (``num_peers``).

    Returns:
        One message naming each other number and its peers (at most :data:`MAX_LISTED` numbers listed), or None.
    """
    by_count: dict[int, list[str]] = {}
    for peer, count in foreign.items():
        if count != num_shards:
            by_count.setdefault(count, []).append(peer)
    if not by_count:
        return None
    counts = sorted(by_count)
    listed = "; ".join(f"{n} ({', '.join(p[-8:] for p in sorted(by_count[n]))})" for n in counts[:MAX_LISTED])
    more = f"; and {len(counts) - MAX_LISTED} more number(s)" if len(counts) > MAX_LISTED else ""
    return (f"{sum(len(v) for v in by_count.values())} present peer(s) cut the data into another number of shards "
            f"than our {num_shards} (num_peers): {listed}{more}; their shards are not ours, so which shards are "
            "trained by nobody is not judged: give every peer of the run the same num_peers")


def coverage(claims: Mapping[str, int], num_shards: int, *, max_listed: int = MAX_LISTED) -> Coverage:
    """Which of ``num_shards`` shards the claims cover, which several peers share and which nobody trains.

    Bounded by the number of claims and ``max_listed``, not by ``num_shards`` (which may be a hostile 2⁶³ − 1).

    Args:
        claims: ``{PeerID: shard}``; a shard outside ``[0, num_shards)`` is ignored.
        num_shards: the number of shards, >= 1.
        max_listed: at most this many uncovered shards are listed (>= 0); all are counted.

    Returns:
        The :class:`Coverage`.

    Raises:
        ValueError: ``num_shards`` < 1 or ``max_listed`` < 0.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1; got {num_shards}")
    if max_listed < 0:
        raise ValueError(f"max_listed must be >= 0; got {max_listed}")
    by_shard: dict[int, list[str]] = {}
    for peer, shard in claims.items():
        if 0 <= shard < num_shards:
            by_shard.setdefault(shard, []).append(peer)
    uncovered: list[int] = []
    shard = 0
    while len(uncovered) < max_listed and shard < num_shards:  # at most max_listed + len(by_shard) steps
        if shard not in by_shard:
            uncovered.append(shard)
        shard += 1
    return Coverage(num_shards=num_shards, peers_by_shard={s: tuple(sorted(by_shard[s])) for s in sorted(by_shard)},
                    uncovered=tuple(uncovered), uncovered_count=num_shards - len(by_shard))


def describe_choice(choice: ShardChoice, num_shards: int) -> str:
    """The log line's text for a :class:`ShardChoice`, e.g. ``data shard 1 of 3 (chosen at start: ...)``."""
    if choice.how == "peer_index":
        how = "--peer-index"
    elif choice.how == "uncovered":
        others = ("no other present peer claims a shard" if not choice.claimed else
                  f"the other present peers claim {_shard_list(sorted(choice.claimed))}")
        how = f"chosen at start among the shards no present peer trains: {others}; batches our own"
    elif choice.claimed is None:
        how = "derived from our PeerID: the other peers' shard claims could not be read; batches our own"
    else:
        how = "derived from our PeerID: every shard is claimed by a present peer; batches our own"
    return f"data shard {choice.shard_index} of {num_shards} ({how})"


def coverage_warnings(me: str, shard: int, others: Mapping[str, int], num_shards: int, *,
                      uncovered: bool = True, by_index: bool = False,
                      foreign: Mapping[str, int] | None = None) -> list[str]:
    """What a peer warns of, given its own shard and the other present peers' claims (empty: nothing).

    Args:
        me: our PeerID.
        shard: the shard we train.
        others: ``{PeerID: claimed shard}`` of the other present peers (valid claims for our ``num_shards``).
        num_shards: our number of shards, >= 1.
        uncovered: also warn of the shards nobody claims (a peer just started leaves that out: the others may not
            have joined yet).
        by_index: our shard was set by ``--peer-index`` (our batches are keyed by the index, so a sharer started
            with the same index draws the same ones).
        foreign: ``{PeerID: its num_shards}`` of the other present peers whose claims are for another number of
            shards (:func:`count_mismatch_warning`); when there are any, it replaces the warning of uncovered shards.

    Returns:
        Up to two messages: our shard is also claimed by others; present peers use another number of shards, or
        else some shards are claimed by nobody.

    Raises:
        ValueError: ``num_shards`` < 1.
    """
    cov = coverage({**{p: s for p, s in others.items() if p != me}, me: shard}, num_shards)
    warnings = []
    sharing = [p for p in cov.peers_by_shard.get(shard, ()) if p != me]
    if sharing:
        head = (f"our data shard {shard} of {num_shards} is also claimed by {len(sharing)} other present peer(s) "
                f"({', '.join(p[-8:] for p in sharing)})")
        if by_index:
            warnings.append(f"{head}: a peer started with the same --peer-index draws the same batches as we do, and "
                            "the guard rejects such identical updates as duplicates; give each peer its own "
                            "--peer-index, or leave it out to have a free shard picked")
        else:
            warnings.append(f"{head}: each draws its own batches, but that part of the data weighs more in the "
                            "swarm's model")
    mismatch = count_mismatch_warning(foreign or {}, num_shards)
    if mismatch is not None:
        warnings.append(mismatch)
    elif uncovered and cov.uncovered_count:
        more = cov.uncovered_count - len(cov.uncovered)
        warnings.append(f"{cov.uncovered_count} of {num_shards} data shard(s) trained by no present peer: "
                        f"{_shard_list(cov.uncovered)}{f' and {more} more' if more else ''} (by the present peers' "
                        "shard claims; a peer of an older version publishes none)")
    return warnings


async def publish_shard_claim(dht: DHTWriter, identity: Identity, run_id: str, round_: int, shard: int,
                              num_shards: int, ttl_s: float) -> bool:
    """Store our signed ``shard`` record under the run's ``shards`` key (subkey = our PeerID).

    Args:
        dht: the DHT to write.
        identity: our key.
        run_id: the run.
        round_: the round we are in (informational).
        shard: the shard we train, in ``[0, num_shards)``.
        num_shards: our number of shards, >= 1.
        ttl_s: lifetime in seconds (``swarm.records.SHARD_TTL_S``; the validators cap it at 240 s).

    Returns:
        True if at least one DHT node accepted it.

    Raises:
        ValueError: ``shard`` outside ``[0, num_shards)`` (a local bug).
    """
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard must be in [0, num_shards); got shard={shard}, num_shards={num_shards}")
    record = sign_record("shard", run_id, round_, [shard, num_shards], identity)
    return await dht.store(shards_key(run_id), identity.peer_id_b58, record, ttl_s)


async def read_shard_claims(dht: DHTReader, run_id: str, *, num_shards: int | None = None) -> ClaimsRead:
    """Read the ``shards`` key once and sort its values out (:func:`open_shard_claims`; ignored ones at DEBUG).

    Args:
        dht: the DHT to read.
        run_id: the run.
        num_shards: our number of shards (None: keep claims of any number).

    Returns:
        The :class:`ClaimsRead`.
    """
    read = open_shard_claims(await dht.read(shards_key(run_id)), run_id, num_shards=num_shards)
    for subkey, reason in read.ignored.items():
        logger.debug("shard claim under %s ignored: %s", subkey[:16], reason)
    return read


async def present_claims(dht: DHTReader, run_id: str, num_shards: int, *, me: str,
                         allowed: frozenset[str] | None = None, exclude: Iterable[str] = ()) -> dict[str, int]:
    """``{PeerID: shard}`` claimed by the other present peers (two DHT reads: presence, then shards).

    A claim counts only if it is valid for ``num_shards`` (:func:`open_shard_claims`) and its sender has a live
    presence record (``swarm.records.read_roster``), is on the allow-list (None: an open swarm), is not ``me`` and
    not in ``exclude`` (banned peers).

    Args:
        dht: the DHT to read.
        run_id: the run.
        num_shards: our number of shards, >= 1.
        me: our PeerID (our own earlier claim, from before a restart, does not count).
        allowed: the permissioned swarm's allow-list, or None.
        exclude: PeerIDs whose claims do not count.

    Returns:
        The claims kept.
    """
    claims = await present_shard_claims(dht, run_id, me=me, allowed=allowed, exclude=exclude)
    return {p: c.shard for p, c in claims.items() if c.num_shards == num_shards}


async def present_shard_claims(dht: DHTReader, run_id: str, *, me: str, allowed: frozenset[str] | None = None,
                               exclude: Iterable[str] = ()) -> dict[str, ShardClaim]:
    """:func:`present_claims`, but claims for any number of shards, whole (to tell of a ``num_peers`` mismatch)."""
    present = (await read_roster(dht, run_id)).present  # type: ignore[arg-type]  # SwarmDHT or any reader
    claims = (await read_shard_claims(dht, run_id)).claims
    skip = {me, *exclude}
    return {p: c for p, c in claims.items() if p in present and p not in skip and (allowed is None or p in allowed)}


def _shard_list(shards: Iterable[int]) -> str:
    return ", ".join(str(s) for s in shards)


def _signer_is(sender: bytes, subkey: str) -> bool:
    try:
        return peer_id_to_b58(sender) == subkey
    except Exception:  # noqa: BLE001 - a hostile sender field must never raise here
        return False
