"""Checks for the guard state a peer reads back from its checkpoint (``swarm.checkpoint``, key ``guard_state``).

The state is the peer's own file, but it is treated like network input: every field is checked before anything
is replaced, and a bad one raises :class:`GuardStateError` (a ``ValueError``) naming the field, never an
``AssertionError`` and never a half-loaded state. The stages' ``load_state_dict`` methods use these helpers:
``guard.verdict.DirectionRecord``, ``guard.collusion.ResidualHistory``, ``guard.semantic.SemanticGuard`` and
``guard.guard.Guard``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_KEY_CHARS", "GuardStateError", "entries_of", "key_of", "real_of", "round_of", "version_of"]

MAX_KEY_CHARS = 128
"""Longest receiver or sender name accepted in a saved state (a base58 Ed25519 PeerID has 52 characters)."""


class GuardStateError(ValueError):
    """A saved guard state is malformed: wrong type, shape or version, a non-finite value, too many senders."""


def version_of(state: object) -> int | None:
    """The ``version`` of a saved state: an int (not a bool), or None (not a mapping, or no such int).

    Compares nothing itself: a hostile ``version`` such as a tensor of several values made ``!=`` raise a
    ``RuntimeError`` ("Boolean value of Tensor ... is ambiguous") instead of a :class:`GuardStateError`.
    """
    version = state.get("version") if isinstance(state, Mapping) else None
    return None if isinstance(version, bool) or not isinstance(version, int) else version


def entries_of(state: object, *, kind: str, version: int, limit: int) -> list[Any]:
    """The ``entries`` list of ``state`` after checking its ``version`` and that it holds at most ``limit`` entries.

    Raises:
        GuardStateError: ``state`` is not a mapping of that version (an int) with a list of at most ``limit`` entries.
    """
    if not isinstance(state, Mapping) or version_of(state) != version:
        got = state.get("version") if isinstance(state, Mapping) else type(state).__name__
        raise GuardStateError(f"{kind}: not a state of version {version} (got {got!r:.80})")
    entries = state.get("entries")
    if not isinstance(entries, (list, tuple)):
        raise GuardStateError(f"{kind}: entries must be a list, got {type(entries).__name__}")
    if len(entries) > limit:
        raise GuardStateError(f"{kind}: {len(entries)} entries, more than the {limit} kept")
    return list(entries)


def key_of(kind: str, value: object, *, empty: bool = False) -> str:
    """A receiver or sender name: a str of at most :data:`MAX_KEY_CHARS` characters (``""`` only if ``empty``).

    Raises:
        GuardStateError: otherwise.
    """
    if not isinstance(value, str) or len(value) > MAX_KEY_CHARS or (not value and not empty):
        raise GuardStateError(f"{kind}: a name must be a str of 1..{MAX_KEY_CHARS} characters, got {value!r:.80}")
    return value


def round_of(kind: str, value: object) -> int:
    """A round number: an int (not a bool) ``>= 0``.

    Raises:
        GuardStateError: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GuardStateError(f"{kind}: a round must be an int >= 0, got {value!r:.80}")
    return value


def real_of(kind: str, value: object, *, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite real number in ``[low, high]`` (an int or float, not a bool), as a float.

    Raises:
        GuardStateError: otherwise (NaN and infinities included).
    """
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not low <= value <= high):
        raise GuardStateError(f"{kind}: expected a finite number in [{low:g}, {high:g}], got {value!r:.80}")
    return float(value)
