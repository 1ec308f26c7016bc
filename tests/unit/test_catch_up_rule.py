"""Unit tests for when a peer catches up (``swarm.peer._maybe_catch_up``), with a stand-in peer."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from p2p_guard.swarm.peer import _catch_up_after_jump, _maybe_catch_up


@dataclass
class _Config:
    catch_up_behind: int = 2


@dataclass
class _Peer:
    """What ``_maybe_catch_up`` reads: the resumed flag, the threshold, a log, and ``catch_up``."""

    resumed: bool = False
    jumped: bool = False
    catch_up_retries: int = 0
    config: _Config = field(default_factory=_Config)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("test"))
    asked: int = 0
    present: dict[str, int] = field(default_factory=dict)
    serves: int | None = -1  # the round the sources' states are of (-1: the median presence round; None: failure)
    min_rounds: list[int] = field(default_factory=list)

    async def catch_up(self, others: dict[str, int], stop: asyncio.Event, *, min_round: int = 0) -> int | None:
        self.asked += 1
        self.min_rounds.append(min_round)
        if self.serves is None or self.serves >= 0:
            return self.serves
        return sorted(others.values())[(len(others) - 1) // 2]

    async def others_present(self) -> dict[str, int]:
        return self.present


def _decide(round_: int, swarm: int, **kwargs: object) -> tuple[int, int]:
    peer = _Peer(resumed=bool(kwargs.pop("resumed", False)), jumped=bool(kwargs.pop("jumped", False)))
    others = {"a": swarm, "b": swarm, "c": swarm}
    got = asyncio.run(_maybe_catch_up(peer, round_, others, asyncio.Event(), **kwargs))  # type: ignore[arg-type]
    return got, peer.asked


@pytest.mark.parametrize(("round_", "swarm", "kwargs", "expected"), [
    (5, 5, {}, (5, 0)),                          # level with the swarm: nothing to do
    (5, 6, {}, (5, 0)),                          # one round behind: mixing closes it
    (5, 7, {}, (7, 1)),                          # catch_up_behind rounds behind
    (0, 1, {}, (1, 1)),                          # a fresh model joining a swarm past round 0
    (5, 6, {"resumed": True}, (6, 1)),           # back from a pause, the swarm went on
    (8, 8, {"jumped": True}, (8, 1)),            # frozen mid-inner: our update jumped rounds, our state is stale
    (9, 9, {"checkpoint_round": 8}, (9, 1)),     # restarted: our θ is of round 8, we continue in 9 (committed 8)
    (8, 8, {"checkpoint_round": 8}, (8, 1)),     # restarted level with the swarm: its robust centre anyway
    (8, 7, {"checkpoint_round": 8}, (8, 0)),     # restarted ahead of the swarm's median: keep our θ
    (4, 2, {"checkpoint_round": 3}, (4, 1)),     # committed 3 before the crash, θ of 3: 3's step is missing
    (44, 44, {"fresh": True}, (44, 1)),          # no usable checkpoint, the commit mark put us level: initial θ
    (44, 45, {"fresh": True}, (45, 1)),          # ... one round behind
    (0, 0, {"fresh": True}, (0, 0)),             # a fresh swarm: everyone starts from θ_0
    (44, 44, {"fresh": False}, (44, 0)),         # a trained model level with the swarm
])
def test_when_a_peer_catches_up(round_: int, swarm: int, kwargs: dict[str, object], expected: tuple[int, int]) -> None:
    assert _decide(round_, swarm, **kwargs) == expected


def test_alone_never_catches_up() -> None:
    peer = _Peer()
    assert asyncio.run(_maybe_catch_up(peer, 3, {}, asyncio.Event(), checkpoint_round=3)) == 3  # type: ignore[arg-type]
    assert peer.asked == 0


@pytest.mark.parametrize(("present", "serves", "expected"), [
    ({"a": 7, "b": 7, "c": 8}, 7, (8, True, False)),   # states of the start of round 7: apply 7's step, go on to 8
    ({"a": 8, "b": 8, "c": 8}, 8, (8, False, False)),  # states of round 8 already hold 7's step: skip it, stay at 8
    ({"a": 7, "b": 7}, None, (8, True, True)),         # the catch-up failed: keep our θ, try again at the next start
    ({}, 7, (8, True, True)),                          # nobody present: nothing to catch up to
])
def test_a_jumped_update_catches_up_before_its_round_is_applied(
        present: dict[str, int], serves: int | None, expected: tuple[int, bool, bool]) -> None:
    """Frozen mid-inner, we committed base round 5 into round 7: catch up now, from round 7's states on."""
    peer = _Peer(jumped=True, present=present, serves=serves)
    next_round, apply_step = asyncio.run(_catch_up_after_jump(peer, 7, asyncio.Event()))  # type: ignore[arg-type]
    assert (next_round, apply_step, peer.jumped) == expected
    assert peer.min_rounds == ([7] if present else [])


def test_a_finished_peer_lingers_two_of_its_last_rounds_within_bounds() -> None:
    from p2p_guard.swarm.peer import MAX_LINGER_S, linger_seconds

    assert linger_seconds(30.0, 2.5) == 30.0  # short rounds: the fetch timeout
    assert linger_seconds(30.0, 75.6) == 151.2  # a loaded machine's 75.6 s rounds: two of them
    assert linger_seconds(30.0, 1e6) == MAX_LINGER_S == 600.0
    assert linger_seconds(30.0, -1.0) == 30.0


def test_a_failed_catch_up_of_a_known_stale_state_is_tried_again_at_the_next_starts() -> None:
    """Restarted right after committing round 3 while the others still finish it: their states are older than ours
    (the catch-up finds none to adopt); the next two round starts try again, then mixing is left to close it."""
    peer = _Peer(serves=None)
    others = {"a": 4, "b": 4, "c": 4}
    assert asyncio.run(_maybe_catch_up(peer, 4, others, asyncio.Event(), checkpoint_round=3)) == 4  # type: ignore[arg-type]
    assert (peer.asked, peer.jumped, peer.catch_up_retries) == (1, True, 1)
    # (round, the others' round, catch-ups asked so far, jumped after it, retries): round 5 waits while the others
    # are behind it (no newer state to take), then retries (2nd), round 6 retries and gives up
    # (MAX_CATCH_UP_RETRIES = 2), round 7 asks nothing (level, nothing known to be stale) and clears the count
    for round_, swarm, asked, jumped, retries in ((5, 4, 1, True, 1), (5, 5, 2, True, 2), (6, 6, 3, False, 2),
                                                  (7, 7, 3, False, 0)):
        asyncio.run(_maybe_catch_up(peer, round_, {k: swarm for k in others}, asyncio.Event()))  # type: ignore[arg-type]
        assert (peer.asked, peer.jumped, peer.catch_up_retries) == (asked, jumped, retries)
    peer.serves, peer.jumped, peer.catch_up_retries = 8, True, 1
    assert asyncio.run(_maybe_catch_up(peer, 8, {"a": 8}, asyncio.Event())) == 8  # type: ignore[arg-type]
    assert peer.catch_up_retries == 0  # a successful catch-up resets the count


def test_a_failed_catch_up_of_a_peer_merely_behind_is_not_retried() -> None:
    peer = _Peer(serves=None)
    asyncio.run(_maybe_catch_up(peer, 5, {"a": 7, "b": 7, "c": 7}, asyncio.Event()))  # type: ignore[arg-type]
    assert (peer.asked, peer.jumped, peer.catch_up_retries) == (1, False, 0)
