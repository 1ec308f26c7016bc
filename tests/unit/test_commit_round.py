"""Unit tests for the round a peer that fell behind commits into (``swarm.peer.choose_commit_round``)."""

from __future__ import annotations

import asyncio

import pytest

from p2p_guard.swarm.peer import choose_commit_round


def _choose(round_: int, presence: list[int], closed_rounds: set[int]) -> tuple[int, list[int]]:
    asked: list[int] = []

    async def closed(target: int) -> bool:
        asked.append(target)
        return target in closed_rounds

    return asyncio.run(choose_commit_round(round_, presence, closed)), asked


@pytest.mark.parametrize(("round_", "presence", "closed", "expected"), [
    (3, [], set(), (3, [])),                        # alone
    (3, [3, 3, 3], set(), (3, [])),                 # level with the swarm
    (3, [2, 3, 9], set(), (3, [])),                 # the median, not the largest claim
    (1, [2, 2, 1], set(), (1, [1])),                # they committed 1 and wait for ours: join 1, not 2
    (1, [2, 2, 1], {1}, (2, [1, 2])),               # 1 is closed: the swarm's round 2
    (1, [2, 2, 1], {1, 2}, (3, [1, 2])),            # both closed: the next one
    (5, [20, 20, 20], {19}, (20, [19, 20])),        # far behind: the oldest open round of {s - 1, s}
    (5, [6, 6, 6], set(), (5, [5])),                # s - 1 is our own round, still open
    (6, [8, 8, 8], set(), (7, [7])),
])
def test_choose_commit_round(round_: int, presence: list[int], closed: set[int],
                             expected: tuple[int, list[int]]) -> None:
    assert _choose(round_, presence, closed) == expected
