"""Unit tests for ``swarm.suspects``: who is not waited for after a transport failure, and for how long."""

from __future__ import annotations

from p2p_guard.swarm.suspects import SUSPECT_S, Suspects


def test_a_failure_makes_a_suspect_until_it_answers() -> None:
    s = Suspects()
    assert s.current(0.0) == frozenset()
    s.failed("a", 1.0)
    s.failed("b", 2.0)
    assert s.current(3.0) == {"a", "b"}
    s.answered("a")
    assert s.current(3.0) == {"b"}
    s.answered("nobody")  # never failed: nothing to clear
    assert s.current(3.0) == {"b"}


def test_a_suspicion_lapses_after_suspect_s_from_the_last_failure() -> None:
    s = Suspects()
    s.failed("a", 0.0)
    s.failed("a", 10.0)  # a later failure renews it
    assert s.current(10.0 + SUSPECT_S) == {"a"}
    assert s.current(10.0 + SUSPECT_S + 0.001) == frozenset()
    assert SUSPECT_S == 30.0
