"""Peers we could not reach lately, or that we just cut as too slow: not sampled for mixing for a while.

A peer killed with SIGKILL cannot withdraw: its presence record outlives it by up to ``PRESENCE_TTL_S``
(30 s), and until then the others counted it. Each round's commit phase then waited for its commit until the
quorum and grace window, the late-commit re-read waited ``grace_s`` more, and every mixing step sampled it
and waited 2·``grace_s`` for its θ: a 4-peer swarm's rounds went from about 1.6 s to 8.3 s for 30 s after one
peer was killed (measured by a user-test helper in stop 15).

A peer becomes an *unreachable* suspect when a fetch from it fails at the transport (refused, dial failed,
reset, no answer at all), not when it answers "not ready" or "busy". It stops being one when a fetch from it
gets any answer, or ``SUSPECT_S`` after the last failure. Unreachable suspects are not waited for in the commit
phase and not sampled for mixing.

A peer becomes a *slow* suspect when we cut a fetch from it while reading (``transport.TOO_SLOW`` with a status
byte: it answered, then stalled or trickled below the rate floor; a slowloris). That is our own measurement,
not anyone's claim. Without it a slowloris was sampled again at every gossip step of every mixing, and each
time cost one ``fetch_idle_timeout_s`` (a 7-peer round went from about 5 s to 25 s). It stops being one when a
fetch from it delivers a whole answer, or ``SUSPECT_S`` after the last cut, so an honest but slow volunteer is
sampled again once it keeps up (or at the latest 30 s after). Slow suspects are only left out of mixing
samples: the commit phase still waits for them (a slow link still commits in time).

A peer waiting for others (``wait_for_peers``: too few present, self included, to train) does not count an
unreachable suspect either, and while it waits it fetches nothing that could clear the suspicion: under CI load
one failed state fetch paused a peer of a ``--min-peers``-strict swarm for 28 s, the suspicion's whole life. So
a suspect whose presence record was stored again after we failed to reach it (the DHT value's expiration moved
on: :meth:`Suspects.clear_refreshed`) is a suspect no more: a killed or frozen peer stores nothing, a live one
stores every 5 s. That time is the storer's unsigned claim (a replayed record carries a new one); a wrong one
only makes us wait for that peer again, as before it was suspected.

A suspect is only ever waited for less or sampled less; its commits are still read, fetched and judged like any
other, and suspicion is never evidence for reputation or exclusion, so a wrong suspicion costs at most that
peer's update in one round (it may land after our commit phase closed) and its θ in our mixing for a while.
"""

from __future__ import annotations

from collections.abc import Mapping

from p2p_guard.swarm.records import PRESENCE_TTL_S

__all__ = ["REFRESH_MARGIN_S", "SUSPECT_S", "Suspects"]

#: How long a transport failure or a too-slow cut keeps a peer a suspect, in seconds: the presence record's
#: lifetime, after which a dead peer is gone from the presence key anyway.
SUSPECT_S = PRESENCE_TTL_S
#: A presence store must follow a transport failure by this many seconds to clear the suspicion (peers' clocks
#: differ a little; a frozen peer's last store came before we failed to reach it).
REFRESH_MARGIN_S = 2.0


def _current(since: dict[str, float], now: float) -> frozenset[str]:
    """The keys of ``since`` stamped within :data:`SUSPECT_S` of ``now``; older entries are dropped."""
    for peer in [p for p, t in since.items() if now - t > SUSPECT_S]:
        del since[peer]
    return frozenset(since)


class Suspects:
    """The peers (PeerID base58) whose last fetch failed at the transport or was cut as too slow, with its time.

    Times are monotonic seconds, given by the caller.
    """

    def __init__(self) -> None:
        """An empty set."""
        self._since: dict[str, float] = {}  # unreachable: last transport failure
        self._slow: dict[str, float] = {}  # too slow: last fetch we cut while reading

    def failed(self, peer: str, now: float) -> None:
        """Record a transport failure of ``peer`` at ``now`` (monotonic seconds)."""
        self._since[peer] = now

    def too_slow(self, peer: str, now: float) -> None:
        """Record that we cut a fetch from ``peer`` at ``now`` because it stalled or trickled (monotonic seconds)."""
        self._slow[peer] = now

    def answered(self, peer: str) -> None:
        """``peer`` answered a fetch (any status byte): it is no unreachable suspect (it may still be a slow one)."""
        self._since.pop(peer, None)

    def delivered(self, peer: str) -> None:
        """``peer`` delivered a whole answer: it is no suspect of either kind."""
        self._since.pop(peer, None)
        self._slow.pop(peer, None)

    def failed_at(self, peer: str) -> float | None:
        """Monotonic time (seconds) of ``peer``'s last transport failure while it is an unreachable suspect."""
        return self._since.get(peer)

    def clear_refreshed(self, stored_at: Mapping[str, float], now: float, dht_now: float,
                        margin_s: float = REFRESH_MARGIN_S) -> list[str]:
        """Clear the unreachable suspects whose presence was stored again after their last failure.

        Args:
            stored_at: ``{PeerID: DHT time of its presence record's last store}`` (``records.presence_stored_at``).
            now: ``time.monotonic()`` now.
            dht_now: the DHT time now (``hivemind.utils.get_dht_time()``), to place each failure in DHT time.
            margin_s: a store must come this many seconds after the failure (clock skew between peers).

        Returns:
            The PeerIDs cleared, sorted.
        """
        cleared = sorted(p for p, failed in self._since.items()
                         if p in stored_at and stored_at[p] > dht_now - (now - failed) + margin_s)
        for peer in cleared:
            del self._since[peer]
        return cleared

    def unreachable(self, now: float) -> frozenset[str]:
        """The unreachable suspects at ``now``: failed within :data:`SUSPECT_S` seconds and not answered since."""
        return _current(self._since, now)

    def current(self, now: float) -> frozenset[str]:
        """Every suspect at ``now``: the unreachable ones and those cut as too slow within :data:`SUSPECT_S`."""
        return self.unreachable(now) | _current(self._slow, now)
