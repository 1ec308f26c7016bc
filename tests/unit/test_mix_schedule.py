"""The mixing schedule (``swarm.mix_schedule``) and a non-mixing peer's answer to gossip steps."""

from __future__ import annotations

import pytest

from p2p_guard.swarm.mix_schedule import CONSENSUS_BOUND, MAX_ADAPTIVE_EVERY, MixSchedule
from p2p_guard.swarm.transport import MAX_KEPT_ROUNDS, NOT_FOUND, NOT_READY, OK, PayloadServer


def test_fixed_schedule_mixes_every_n_rounds_and_when_behind() -> None:
    schedule = MixSchedule(every=3)
    assert [r for r in range(10) if schedule.due(r)] == [0, 3, 6, 9]
    assert schedule.due(4, behind=True)
    assert schedule.observe(3, 0.0) == 3  # the fixed schedule ignores the distance
    assert [r for r in range(10) if schedule.due(r)] == [0, 3, 6, 9]


def test_every_zero_never_mixes_even_when_behind() -> None:
    schedule = MixSchedule(every=0, adaptive=True)
    assert not any(schedule.due(r) or schedule.due(r, behind=True) for r in range(5))


def test_adaptive_doubles_while_calm_up_to_the_cap_and_returns_to_every_round() -> None:
    schedule = MixSchedule(adaptive=True)
    calm, unsure, far = CONSENSUS_BOUND / 4, CONSENSUS_BOUND * 0.3, CONSENSUS_BOUND / 2 + 1e-9
    mixed, intervals = [], []
    for r in range(40):
        if schedule.due(r):
            mixed.append(r)
            intervals.append(schedule.observe(r, calm))
    assert MAX_ADAPTIVE_EVERY == 4
    assert mixed == [0, 2, 6, 10, 14, 18, 22, 26, 30, 34, 38]
    assert intervals == [2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]
    assert schedule.observe(38, unsure) == 4 and schedule.next_round == 42  # in between: kept
    assert schedule.observe(42, far) == 1 and schedule.next_round == 43
    assert schedule.due(43) and not schedule.due(42)
    assert MixSchedule(adaptive=True, max_every=8).observe(0, calm) == 2


@pytest.mark.parametrize("distance", [None, float("nan")])
def test_adaptive_measures_again_next_round_without_a_distance(distance: float | None) -> None:
    schedule = MixSchedule(adaptive=True)
    assert [schedule.observe(r, 0.0) for r in (0, 2, 6)] == [2, 4, 4]
    assert schedule.observe(10, distance) == 1
    assert schedule.due(11)


def test_adaptive_mixes_when_behind_before_its_next_round() -> None:
    schedule = MixSchedule(adaptive=True)
    schedule.observe(0, 0.0)
    assert not schedule.due(1) and schedule.due(1, behind=True)


@pytest.mark.parametrize(("field", "value"), [("every", -1), ("bound", 0.0), ("max_every", 0)])
def test_bad_settings_are_refused_with_the_field_named(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be"):
        MixSchedule(**{field: value})  # type: ignore[arg-type]


def test_a_peer_that_does_not_mix_answers_every_gossip_step_with_its_theta() -> None:
    server = PayloadServer("run")
    theta = b"\x00\x00\x80\x3f" * 4
    assert server._answer(["mixed", [5, 1]]) == (NOT_FOUND, None)
    server.publish_unmixed(5, theta)
    for step in (1, 2, 8):
        status, body = server._answer(["mixed", [5, step]])
        assert status == OK and body is not None and body[0] is theta  # the same bytes, not a copy
    assert server._answer(["mixed", [5, 0]]) == (NOT_FOUND, None)
    assert server._answer(["mixed", [6, 1]]) == (NOT_FOUND, None)


def test_a_round_with_a_late_or_missing_honest_row_is_mixed_by_the_adaptive_schedule() -> None:
    from p2p_guard.protocol.reasons import RejectReason

    for reasons in (["late_commit"], [RejectReason.TIMEOUT, None], ["outlier", "stale_base"]):
        verdicts = [(f"s{i}", reason is None, reason) for i, reason in enumerate(reasons)]
        assert MixSchedule(adaptive=True).disturbed(verdicts)
        assert not MixSchedule(every=2).disturbed(verdicts)
    # what an update held, or a sender our reputation excludes (every round once it is): not a disturbance
    calm = [("a", False, "outlier"), ("b", False, RejectReason.EXCLUDED), ("c", True, None), ("d", False, "equivocation")]
    assert not MixSchedule(adaptive=True).disturbed(calm)
    assert not MixSchedule(every=0, adaptive=True).disturbed([("a", False, "late_commit")])


def test_a_sender_whose_verdict_flips_between_rounds_disturbs_the_round() -> None:
    schedule = MixSchedule(adaptive=True)
    assert not schedule.disturbed([("h", True, None), ("b", False, "outlier")])
    assert not schedule.disturbed([("h", True, None), ("b", False, "outlier"), ("new", False, "outlier")])
    assert schedule.disturbed([("h", False, "outlier"), ("b", False, "outlier")])  # h: accepted, now rejected
    assert schedule.disturbed([("h", True, None)])  # and back
    assert not schedule.disturbed([("other", True, None)])  # h not judged this round: nothing to compare


def test_a_sender_newly_excluded_by_our_reputation_disturbs_the_round_once() -> None:
    from p2p_guard.protocol.reasons import RejectReason

    schedule = MixSchedule(adaptive=True)
    assert not schedule.disturbed([("b", False, "outlier")])
    assert schedule.disturbed([("b", False, RejectReason.EXCLUDED)])  # our guard's input lost a row
    assert not schedule.disturbed([("b", False, "excluded")])


def test_our_update_rejected_by_others_votes_disturbs_the_round() -> None:
    assert MixSchedule(adaptive=True).disturbed([], rejected_us=1)
    assert not MixSchedule(adaptive=True).disturbed([], rejected_us=0)
    assert not MixSchedule(every=1).disturbed([], rejected_us=3)


def test_a_restarted_server_says_at_once_that_earlier_payloads_are_gone() -> None:
    """Payloads of rounds before ``serve_from`` are NOT_FOUND (receivers stop), later ones NOT_READY until revealed."""
    server = PayloadServer("run")
    assert server._answer(["payload", 3]) == (NOT_READY, None)  # a fresh server: any round may still come
    server.serve_from(4)
    assert server._answer(["payload", 3]) == (NOT_FOUND, None)
    assert server._answer(["payload", 4]) == (NOT_READY, None)
    server.reveal(4, b"abc")
    status, body = server._answer(["payload", 4])
    assert status == OK
    assert body is not None


def test_a_payload_dropped_after_later_reveals_is_not_found() -> None:
    """A round pruned from the kept ones is gone: NOT_FOUND, not NOT_READY (a woken frozen peer polled 30 s)."""
    server = PayloadServer("run")
    for round_ in range(5, 5 + MAX_KEPT_ROUNDS + 2):  # rounds 5 and 6 are dropped
        server.reveal(round_, bytes([round_]))
    assert [server._answer(["payload", r])[0] for r in range(3, 5 + MAX_KEPT_ROUNDS + 3)] == \
        [NOT_FOUND] * 4 + [OK] * MAX_KEPT_ROUNDS + [NOT_READY]
