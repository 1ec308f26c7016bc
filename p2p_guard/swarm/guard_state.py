"""What a peer's guard and reputation learned about each sender, carried across a restart in its checkpoint.

The semantic guard keeps per-sender state across rounds (its direction record, stage 4c, and its collusion
history, stage 4b), and so does the reputation (scores, own-verdict windows, exclusions) with our verdicts of the
last round not yet folded. Without it in the checkpoint a restarted peer forgot all of it, and a Byzantine sender
got a clean slate whenever a volunteer restarted. The checkpoint's ``guard_state`` entry
(``swarm.checkpoint``) is::

    {"guard": Guard.state_dict(), "votes": VoteBook.state_dict() or None}

captured by :func:`capture` when a round's step is done (with θ), and given back by :func:`restore` on resume.
Bounds: the direction record keeps at most 4096 (receiver, sender) pairs, the collusion history 1024 pairs and
1 GiB (one float64 vector of min(d, 2^18) entries a pair: a count sketch past 2^18, ``guard.sketch``), the
reputation 4096 senders, the pending verdicts 256; a saved state over a bound is refused, not cut. What is
written each round holds at most :data:`MAX_SAVED_HISTORY_BYTES` of collusion history (the most recent pairs).

A saved state is checked before anything is replaced (``guard.state``): a malformed or hostile one (a wrong
shape, NaN, too many senders, a wrong type) is refused with one warning naming the part and why, and that part
starts empty; the peer goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from p2p_guard.guard.guard import Guard
from p2p_guard.swarm.standing import VoteBook

__all__ = ["MAX_SAVED_HISTORY_BYTES", "capture", "restore"]

MAX_SAVED_HISTORY_BYTES = 64 * 2**20
"""Most bytes of collusion history written to the checkpoint each round (64 MiB): the most recently updated
pairs that fit. One pair is a float64 vector of min(d, 2^18) entries (a count sketch past 2^18 coordinates,
``guard.sketch``), at most 2 MiB: on digits (d = 4,810) every pair fits, at any d the 32 most recent. (Before
the sketch a pair was 8·d bytes, 200 MB at d = 25M, and none was saved.) Pairs left out start empty after a
restart (stage 4b then needs its ``collusion_rounds`` again); the direction record and the reputation, a few
numbers per sender, are always kept."""


def capture(guard: Guard, votes: VoteBook | None, *,
            max_history_bytes: int = MAX_SAVED_HISTORY_BYTES) -> dict[str, Any]:
    """The guard state to checkpoint now: ``{"guard": ..., "votes": ...}`` (module docstring).

    Cheap: tensors are referenced, not copied (the collusion histories are replaced, never changed in place).

    Args:
        guard: our guard.
        votes: our vote book (None: reputation off).
        max_history_bytes: most bytes of collusion history kept (:data:`MAX_SAVED_HISTORY_BYTES`): the most
            recently updated pairs whose vectors fit, in bytes.
    """
    return {"guard": _trim_history(guard.state_dict(), max_history_bytes),
            "votes": None if votes is None else votes.state_dict()}


def _trim_history(state: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """``Guard.state_dict()`` with its collusion history cut to the most recent pairs within ``max_bytes``."""
    rule = state.get("state")
    if not isinstance(rule, dict) or not isinstance(rule.get("collusion"), dict):
        return state
    history: dict[str, Any] = rule["collusion"]
    kept: list[Any] = []
    total = 0
    for entry in reversed(history["entries"]):  # most recently updated last
        size = entry[3].numel() * entry[3].element_size()
        if total + size > max_bytes:
            break
        kept.append(entry)
        total += size
    if len(kept) == len(history["entries"]):
        return state
    return {**state, "state": {**rule, "collusion": {**history, "entries": kept[::-1]}}}


def restore(state: Mapping[str, Any], guard: Guard, votes: VoteBook | None, *, numel: int,
            log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> list[str]:
    """Give a checkpoint's guard state back to ``guard`` and ``votes``; each refused part is logged and starts empty.

    Args:
        state: the checkpoint's ``guard_state`` (``Checkpoint.state``).
        guard: our guard.
        votes: our vote book (None: reputation off; a saved reputation is then ignored).
        numel: d of our model (saved histories must be ``(numel,)``).
        log: where to warn.

    Returns:
        The parts restored (``"guard"``, ``"reputation"``), for the resume line.
    """
    restored: list[str] = []
    try:
        if guard.load_state_dict(state.get("guard"), numel=numel):  # type: ignore[arg-type]  # it checks the type
            restored.append("guard")
    except ValueError as e:
        log.warning("guard state of the checkpoint not used (%s): the guard's per-sender records start empty", e)
    saved = state.get("votes")
    if votes is not None and saved is not None:
        try:
            votes.load_state_dict(saved)
            restored.append("reputation")
        except ValueError as e:
            log.warning("reputation of the checkpoint not used (%s): it starts empty", e)
    return restored
