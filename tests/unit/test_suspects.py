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


def test_a_sender_cut_as_too_slow_is_left_out_of_mixing_but_still_waited_for() -> None:
    s = Suspects()
    s.too_slow("slow", 1.0)
    assert s.current(2.0) == {"slow"}  # not sampled for mixing
    assert s.unreachable(2.0) == frozenset()  # the commit phase still waits for it
    s.answered("slow")  # a status byte is not enough: a slowloris answers OK, then trickles
    assert s.current(2.0) == {"slow"}
    s.delivered("slow")  # a whole answer is
    assert s.current(2.0) == frozenset()


def test_a_too_slow_suspicion_lapses_so_an_honest_slow_volunteer_is_sampled_again() -> None:
    s = Suspects()
    s.too_slow("slow", 0.0)
    s.failed("dead", 0.0)
    assert s.current(SUSPECT_S) == {"slow", "dead"}
    assert s.current(SUSPECT_S + 0.001) == frozenset()
    s.failed("both", 5.0)
    s.too_slow("both", 5.0)
    s.answered("both")  # reachable again, but still cut as too slow
    assert s.current(6.0) == {"both"}
    assert s.unreachable(6.0) == frozenset()


def test_a_suspect_that_stored_its_presence_since_the_failure_is_cleared() -> None:
    # Monotonic 100 s is DHT time 5000 s here: a failure at monotonic 90 s happened at DHT time 4990 s.
    s = Suspects()
    s.failed("alive", 90.0)
    s.failed("frozen", 90.0)
    s.failed("skewed", 90.0)
    s.too_slow("slow", 90.0)
    assert s.failed_at("alive") == 90.0 and s.failed_at("slow") is None
    stored = {"alive": 4995.0, "frozen": 4989.0, "skewed": 4991.5, "slow": 4999.0}
    assert s.clear_refreshed(stored, now=100.0, dht_now=5000.0) == ["alive"]
    assert s.unreachable(100.0) == {"frozen", "skewed"}  # a store within REFRESH_MARGIN_S clears nothing
    assert s.current(100.0) == {"frozen", "skewed", "slow"}  # a too-slow cut is our own measurement: kept
    assert s.failed_at("alive") is None
    assert s.clear_refreshed({}, now=100.0, dht_now=5000.0) == []  # no presence value at all: a suspect still
    assert s.clear_refreshed(stored, now=100.0, dht_now=5000.0, margin_s=0.5) == ["skewed"]
