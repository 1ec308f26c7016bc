"""Peers we could not reach at all lately: not waited for, not sampled for mixing, until they answer again.

A peer killed with SIGKILL cannot withdraw: its presence record outlives it by up to ``PRESENCE_TTL_S``
(30 s), and until then the others counted it. Each round's commit phase then waited for its commit until the
quorum and grace window, the late-commit re-read waited ``grace_s`` more, and every mixing step sampled it
and waited 2·``grace_s`` for its θ: a 4-peer swarm's rounds went from about 1.6 s to 8.3 s for 30 s after one
peer was killed (measured by a user-test helper in stop 15).

A peer becomes a suspect when a fetch from it fails at the transport (refused, dial failed, reset, no
answer at all), not when it answers "not ready" or "busy". It stops being one when a fetch from it succeeds,
or ``SUSPECT_S`` after the last failure. A suspect is only ever waited for less or sampled less; its commits
are still read, fetched and judged like any other, so a wrong suspicion costs at most that peer's update in
one round (it may land after our commit phase closed).
"""

from __future__ import annotations

from p2p_guard.swarm.records import PRESENCE_TTL_S

__all__ = ["SUSPECT_S", "Suspects"]

#: How long a transport failure keeps a peer a suspect, in seconds: the presence record's lifetime, after which a
#: dead peer is gone from the presence key anyway.
SUSPECT_S = PRESENCE_TTL_S


class Suspects:
    """The peers (PeerID base58) whose last fetch failed at the transport, with the time of that failure."""

    def __init__(self) -> None:
        """An empty set."""
        self._since: dict[str, float] = {}

    def failed(self, peer: str, now: float) -> None:
        """Record a transport failure of ``peer`` at ``now`` (monotonic seconds)."""
        self._since[peer] = now

    def answered(self, peer: str) -> None:
        """``peer`` answered a fetch: it is no suspect."""
        self._since.pop(peer, None)

    def current(self, now: float) -> frozenset[str]:
        """The suspects at ``now``: failed within the last :data:`SUSPECT_S` seconds and not answered since."""
        for peer in [p for p, t in self._since.items() if now - t > SUSPECT_S]:
            del self._since[peer]
        return frozenset(self._since)
