"""Permissioned swarms: the ``--allow-peers FILE`` allow-list of PeerIDs.

The file holds one base58 PeerID per line (``12D3KooW...``, an Ed25519 libp2p identity). ``#`` starts a
comment (whole line or after the ID); blank lines are ignored. A peer started with an allow-list ignores the
commits, presence records and votes of every peer outside it, and its stream server refuses their streams.
Without a file (``allowed is None``) the swarm is open: everyone is heard.

Only Ed25519 PeerIDs are accepted, because only those carry the public key that signs envelopes and
records; any other line makes :func:`load_allowlist` raise a ``ValueError`` naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from p2p_guard.identity import peer_id_from_b58, peer_id_to_b58, public_key_from_peer_id

__all__ = ["MAX_ALLOWLIST_BYTES", "filter_allowed", "is_allowed", "load_allowlist", "parse_allowlist"]

#: Largest allow-list file read, in bytes (about 20,000 PeerIDs): a typo in the path cannot load a huge file.
MAX_ALLOWLIST_BYTES = 1024 * 1024

T = TypeVar("T")


def load_allowlist(path: str | Path) -> frozenset[str]:
    """Read an allow-list file.

    Args:
        path: The file: one base58 Ed25519 PeerID per line, ``#`` comments and blank lines allowed; UTF-8,
            at most :data:`MAX_ALLOWLIST_BYTES` bytes.

    Returns:
        The PeerIDs as canonical base58 text (never empty).

    Raises:
        ValueError: the file cannot be read, is too large or not UTF-8, a line is not a PeerID (the
            message names the file and the line number), or it holds no PeerID (a peer would hear nobody, and a
            peer never trains alone: an empty or truncated file, or the wrong one).
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_ALLOWLIST_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{path}: cannot read the allow-list ({e.strerror or e})") from e
    if len(raw) > MAX_ALLOWLIST_BYTES:
        raise ValueError(f"{path}: allow-list larger than {MAX_ALLOWLIST_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: allow-list is not UTF-8 text (byte {e.start})") from e
    allowed = parse_allowlist(text, source=str(path))
    if not allowed:
        raise ValueError(f"{path}: the allow-list holds no PeerID (one base58 PeerID per line); a peer that hears "
                         f"nobody never trains (leave --allow-peers out for an open swarm)")
    return allowed


def parse_allowlist(text: str, *, source: str = "<allow-list>") -> frozenset[str]:
    """Parse allow-list text (see :func:`load_allowlist` for the format).

    Args:
        text: The file's content.
        source: Where it came from, for error messages.

    Returns:
        The PeerIDs as canonical base58 text.

    Raises:
        ValueError: a line holds more than one word or something that is not a base58 Ed25519 PeerID
            (``source:LINE: ...``).
    """
    allowed: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        words = content.split()
        if len(words) != 1:
            raise ValueError(f"{source}:{number}: expected one PeerID per line, got {len(words)} words")
        word = words[0]
        peer_id = peer_id_from_b58(word)
        shown = word if len(word) <= 60 else word[:57] + "..."
        if peer_id is None:
            raise ValueError(f"{source}:{number}: not a base58 PeerID: {shown!r}")
        if public_key_from_peer_id(peer_id) is None:
            raise ValueError(f"{source}:{number}: not an Ed25519 PeerID (12D3KooW...): {shown!r}")
        allowed.add(peer_id_to_b58(peer_id))
    return frozenset(allowed)


def is_allowed(peer: str, allowed: frozenset[str] | None) -> bool:
    """Whether base58 PeerID ``peer`` is heard: always in an open swarm (``allowed is None``)."""
    return allowed is None or peer in allowed


def filter_allowed(mapping: Mapping[str, T], allowed: frozenset[str] | None) -> dict[str, T]:
    """Keep the entries of ``mapping`` whose key (a base58 PeerID) is on the allow-list.

    Args:
        mapping: ``{PeerID b58: value}`` (commits, presence records, votes). Not modified.
        allowed: The allow-list, or None for an open swarm (everything is kept).

    Returns:
        A new dict with the allowed entries, in the order of ``mapping``.
    """
    if allowed is None:
        return dict(mapping)
    return {peer: value for peer, value in mapping.items() if peer in allowed}
