"""``swarm.peer.staleness_outcome``: an update too stale to commit is dropped, and our state then catches up."""

from __future__ import annotations

import pytest

from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.peer import staleness_outcome


@pytest.mark.parametrize(("base", "target", "max_staleness", "expected"), [
    (5, 5, 4, (False, False)),   # on time
    (5, 6, 4, (False, False)),   # one round late: applied with a staleness weight, no catch-up
    (5, 7, 4, (False, True)),    # two rounds: catch_up_behind (2) reached
    (5, 9, 4, (False, True)),    # at max_staleness: still committed
    (5, 10, 4, (True, True)),    # dropped: and our state missed 5 outer steps, so we catch up
    (5, 6, 0, (True, False)),    # --max-staleness 0: dropped one round late, within catch_up_behind
])
def test_a_dropped_update_also_jumped(base: int, target: int, max_staleness: int,
                                      expected: tuple[bool, bool]) -> None:
    config = PeerConfig(max_staleness=max_staleness)
    assert config.catch_up_behind == 2
    assert staleness_outcome(base, target, config) == expected
