"""Whom to fetch: a private random sample of k senders, and the staleness weight of a stale update.

Version 2 of the round (``docs/protocol.md`` §4): a peer fetches at most ``k`` payloads per round, drawn with
its own private randomness (``secrets``: nobody can predict, or steer, whom an honest peer will sample), so
download and upload per peer are O(k), not O(n). Every present sender is equally likely to be drawn; in a swarm
of at most k + 1 peers everyone is fetched.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection

__all__ = ["DEFAULT_FANOUT", "sample_senders", "staleness_weight"]

#: Default fan-out k: payloads fetched per round (DESIGN: "about 8"; REFERENCE: a random group of 8 has a
#: Byzantine majority with probability 0.056 at 20% Byzantine, against 0.18 for a group of 4).
DEFAULT_FANOUT = 8


def sample_senders(candidates: Collection[str], k: int, rng: random.Random | None = None) -> list[str]:
    """Draw ``min(k, len(candidates))`` distinct senders uniformly without replacement.

    Args:
        candidates: PeerIDs (base58) whose commits are candidates this round (our own excluded by the caller).
        k: the fan-out, ≥ 1.
        rng: source of randomness; None uses ``random.SystemRandom`` (the OS's CSPRNG), so the sample is
            private to this peer. Tests pass a seeded ``random.Random``.

    Returns:
        The sample, sorted (so logs and verdict order do not reveal the draw order).

    Raises:
        ValueError: if ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1; got k={k}")
    pool = sorted(set(candidates))
    if len(pool) <= k:
        return pool
    chooser = rng if rng is not None else random.SystemRandom()
    return sorted(chooser.sample(pool, k))


def staleness_weight(staleness: int) -> float:
    """Weight of an update computed ``staleness`` rounds before the round it is applied in: 1/√(1 + s).

    The sender's declared base round is self-reported, so the weight can only *lower* an update's influence
    (a fresh update has weight 1, the most any sender gets): lying about staleness gains nothing. The square
    root decays more gently than 1/(1 + s) because a stale DiLoCo pseudo-gradient is still a descent direction
    for a slowly moving model (Decoupled DiLoCo, arXiv:2604.21428, merges stale contributions instead of
    dropping them).

    Args:
        staleness: round − base_round, ≥ 0.

    Returns:
        A weight in (0, 1].

    Raises:
        ValueError: if ``staleness < 0``.
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0; got {staleness}")
    return 1.0 / math.sqrt(1.0 + staleness)
