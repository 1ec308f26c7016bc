"""Concurrent fetches that do not wait for a straggler once most of them are in.

A mixing step fetches the states of up to ``mix_peers`` neighbours at once, and each fetch's deadline grows with
the state's size and the neighbour's measured rate (``swarm.pacing``): up to ``fetch_idle_timeout_s + b /
min_fetch_bytes_per_s`` seconds, 783 s for a 25M-parameter model's float16 θ. One neighbour that answers just
above the rate floor, slow or Byzantine, would then hold the whole mixing (and the round) that long. Here, once
more than half of the fetches have finished, at t_q seconds, the rest get until

    T = max(floor_s, factor · t_q)

seconds from the start, and are cancelled then: a neighbour on an uplink like the others' finishes with them,
while one many times slower than the median is left out of this mixing (its state is not used, as if it had not
answered). The floor keeps every small state's old deadline (``fetch_timeout_s``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["STRAGGLER_FACTOR", "gather_unless_straggling"]

T = TypeVar("T")

STRAGGLER_FACTOR = 2.0
"""How many times the quorum's time a straggler still gets (dimensionless)."""


async def gather_unless_straggling(aws: Sequence[Awaitable[T]], *, floor_s: float,
                                   factor: float = STRAGGLER_FACTOR,
                                   clock: Callable[[], float] = time.monotonic) -> list[T | None]:
    """Await ``aws`` concurrently; those still running at T (module docstring) are cancelled and give None.

    Args:
        aws: the awaitables (coroutines or futures), in order.
        floor_s: the least time every one of them gets, in seconds (> 0).
        factor: the straggler's allowance as a multiple of the quorum's time (≥ 1).
        clock: a monotonic clock in seconds (a test's fake).

    Returns:
        Their results in order; None for each one cancelled as a straggler. An exception raised by one of them
        propagates (as ``asyncio.gather`` does), after the others are cancelled.

    Raises:
        ValueError: ``floor_s`` not > 0 or ``factor`` < 1.
    """
    if not floor_s > 0 or not factor >= 1:
        raise ValueError(f"floor_s must be > 0 and factor >= 1; got {floor_s!r}, {factor!r}")
    tasks = [asyncio.ensure_future(a) for a in aws]
    if not tasks:
        return []
    start = clock()
    quorum = len(tasks) // 2 + 1
    pending = set(tasks)
    deadline: float | None = None
    try:
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - clock())
            done, pending = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if any(not task.cancelled() and task.exception() is not None for task in done):
                break  # it propagates below, the rest cancelled
            if deadline is None and len(tasks) - len(pending) >= quorum:
                deadline = start + max(floor_s, factor * (clock() - start))
            if deadline is not None and pending and clock() >= deadline:
                break
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return [None if task.cancelled() else task.result() for task in tasks]
