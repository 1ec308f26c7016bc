"""swarm.clock: the offset rule on hand-made samples, the process-wide correction and its undo, the message."""

from __future__ import annotations

import time

import pytest

from p2p_guard.swarm.clock import ClockSample, ClockSkewError, install_offset, offset_from_samples, skew_message


class TestOffsetFromSamples:
    def test_one_exchange_is_ntp_offset(self) -> None:
        # sent at 100, peer says 131, received at 102: the peer is 30 s ahead of our midpoint 101.
        assert offset_from_samples([ClockSample("a", 100.0, 131.0, 102.0)]) == 30.0

    def test_shortest_round_trip_sample_wins_per_peer(self) -> None:
        samples = [ClockSample("a", 0.0, 50.0, 10.0), ClockSample("a", 20.0, 50.5, 21.0)]
        assert offset_from_samples(samples) == 30.0  # 50.5 − 20.5, not 50 − 5

    def test_median_over_peers_ignores_one_liar(self) -> None:
        samples = [ClockSample("a", 0.0, 10.0, 0.0), ClockSample("b", 0.0, 11.0, 0.0),
                   ClockSample("liar", 0.0, 1e6, 0.0)]
        assert offset_from_samples(samples) == 11.0

    def test_unusable_samples_are_ignored(self) -> None:
        samples = [ClockSample("a", 0.0, float("nan"), 1.0), ClockSample("b", 5.0, 7.0, 4.0),
                   ClockSample("c", 0.0, float("inf"), 1.0)]
        assert offset_from_samples(samples) is None
        assert offset_from_samples([]) is None


class TestInstallOffset:
    def test_every_hivemind_clock_user_is_corrected_then_restored(self) -> None:
        import hivemind.dht.node as node
        import hivemind.dht.protocol as protocol
        import hivemind.utils as utils
        import hivemind.utils.timed_storage as timed_storage

        import p2p_guard.swarm.validator as validator

        modules = (node, protocol, utils, timed_storage, validator)
        original = timed_storage.get_dht_time
        assert all(m.get_dht_time is original for m in modules)
        undo = install_offset(-45.0)
        try:
            for module in modules:
                shift = module.get_dht_time() - time.time()
                assert -45.5 < shift < -44.5, (module.__name__, shift)
        finally:
            undo()
        assert all(m.get_dht_time is original for m in modules)

    def test_undo_twice_is_harmless(self) -> None:
        import hivemind.utils.timed_storage as timed_storage

        original = timed_storage.get_dht_time
        undo = install_offset(5.0)
        undo()
        undo()
        assert timed_storage.get_dht_time is original


def test_skew_message_is_one_line_with_the_offset_and_the_fix() -> None:
    ahead, behind = skew_message(-900.4, 3), skew_message(1234.0, 1)
    assert "\n" not in ahead and "900 s ahead of the swarm's" in ahead and "3 initial peer(s)" in ahead
    assert "1234 s behind the swarm's" in behind and "NTP" in behind
    assert issubclass(ClockSkewError, OSError)  # reported as one line wherever start-up OSErrors are


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_times_give_no_offset(value: float) -> None:
    assert offset_from_samples([ClockSample("a", value, 1.0, 2.0)]) is None
