"""Unit tests for ``swarm.peer.ahead_and_alone``: a peer whose commit phase closed with only its own commit while
the swarm (the median of the others' presence rounds) is still in an earlier round waits once more.

Measured case (docs/networking.md, one slow uplink in a swarm): the peer with the slow uplink finished its round 0
in 8.5 s while the others took 94 s, then committed rounds 1-5 alone, 60 s each, and applied nothing.
"""

from __future__ import annotations

import pytest

from p2p_guard.swarm.peer import ahead_and_alone

ME = "me"


def test_alone_while_the_swarm_is_a_round_behind() -> None:
    assert ahead_and_alone(1, ME, {ME}, [0, 0, 0]) is True
    assert ahead_and_alone(5, ME, [ME], [3, 4, 4]) is True


@pytest.mark.parametrize(
    ("commits", "presence"),
    [
        ({ME, "b"}, [0, 0, 0]),  # another commit is in: the phase did its job
        ({"b"}, [0, 0, 0]),  # another commit, ours not there yet
        ({ME}, [1, 1, 0]),  # the swarm is in our round: its peers are late or gone, not behind
        ({ME}, [2, 2, 2]),  # the swarm is ahead (choose_commit_round's case)
        ({ME}, []),  # nobody else present
        ({ME}, [0, 1, 1]),  # a minority behind does not make the swarm behind
    ],
)
def test_not_ahead_and_alone(commits: set[str], presence: list[int]) -> None:
    assert ahead_and_alone(1, ME, commits, presence) is False


def test_a_minority_cannot_move_the_swarm_round() -> None:
    # three honest peers in our round, two others claiming round 0: the median (lower) is still 1
    assert ahead_and_alone(1, ME, {ME}, [0, 0, 1, 1, 1]) is False
    assert ahead_and_alone(1, ME, {ME}, [0, 0, 0, 1, 1]) is True
