"""The peer's watchdog (``swarm.reaper``): how often it lists the parent's descendants."""

from __future__ import annotations

from p2p_guard.swarm.reaper import MAX_RECORD_INTERVAL_S, _next_record_interval


def test_the_reaper_backs_off_while_nothing_changes_and_returns_to_fast_polls_on_a_change() -> None:
    waits, current = [], 0.5
    for _ in range(6):
        current = _next_record_interval(current, 0.5, changed=False)
        waits.append(current)
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0] and MAX_RECORD_INTERVAL_S == 4.0
    assert _next_record_interval(4.0, 0.5, changed=True) == 0.5
    assert _next_record_interval(0.1, 10.0, changed=False) == 10.0  # never faster than the parent check
