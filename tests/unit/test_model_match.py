"""swarm.model_match: a peer whose --task differs from the swarm's is told so, then stopped."""

from __future__ import annotations

from p2p_guard.protocol import RejectReason
from p2p_guard.swarm.model_match import MISMATCH_ROUNDS, ShapeWatch
from p2p_guard.swarm.verdicts import SenderVerdict

ME = "me"
DETAIL = "tensor 0 has shape (64, 64), expected (32, 64)"


def mismatch(sender: str) -> SenderVerdict:
    return SenderVerdict.rejected(sender, 0, RejectReason.SHAPE_MISMATCH, DETAIL)


def judged(sender: str) -> SenderVerdict:
    return SenderVerdict.judged(sender, 0, True, "accepted", "", 1.0, 0.5, 1.0, 0)


def test_a_streak_from_two_senders_warns_once_then_stops_after_mismatch_rounds() -> None:
    watch = ShapeWatch()
    said = [watch.observe([mismatch("a"), mismatch("b"), judged(ME)], ME) for _ in range(MISMATCH_ROUNDS)]
    assert said[0] is not None and said[0][0] is False and DETAIL in said[0][1]
    assert said[1:-1] == [None] * (MISMATCH_ROUNDS - 2)
    assert said[-1] is not None and said[-1][0] is True
    assert "--task differs from the swarm's" in said[-1][1] and "2 sender(s)" in said[-1][1]


def test_one_row_of_our_shapes_resets_the_streak() -> None:
    watch = ShapeWatch()
    for _ in range(MISMATCH_ROUNDS - 1):
        watch.observe([mismatch("a"), mismatch("b")], ME)
    assert watch.observe([mismatch("a"), judged("c")], ME) is None  # an honest peer of our model arrived
    assert watch.streak == 0
    said = [watch.observe([mismatch("a"), mismatch("b")], ME) for _ in range(MISMATCH_ROUNDS)]
    assert said[-1] is not None and said[-1][0] is True


def test_a_single_sender_needs_twice_as_many_rounds() -> None:
    watch = ShapeWatch()
    said = [watch.observe([mismatch("a")], ME) for _ in range(2 * MISMATCH_ROUNDS)]
    assert all(s is None or s[0] is False for s in said[:-1])
    assert said[-1] is not None and said[-1][0] is True and "1 sender(s)" in said[-1][1]


def test_rounds_without_shape_rejections_neither_count_nor_reset() -> None:
    watch = ShapeWatch()
    watch.observe([mismatch("a"), mismatch("b")], ME)
    timeout = SenderVerdict.rejected("c", 0, RejectReason.TIMEOUT, "too slow")
    assert watch.observe([timeout], ME) is None and watch.streak == 1
    assert watch.observe([mismatch(ME)], ME) is None and watch.streak == 1  # our own verdicts are ignored
