"""``swarm.stragglers.gather_unless_straggling``: a straggler is cut once more than half are in, never sooner
than the floor, and at most twice the quorum's time."""

from __future__ import annotations

import asyncio
import time

import pytest

from p2p_guard.swarm.stragglers import gather_unless_straggling


async def _after(seconds: float, value: str) -> str:
    await asyncio.sleep(seconds)
    return value


def _run(delays: list[float], floor_s: float) -> tuple[list[str | None], float]:
    started = time.monotonic()
    out = asyncio.run(gather_unless_straggling([_after(s, f"v{i}") for i, s in enumerate(delays)], floor_s=floor_s))
    return out, time.monotonic() - started


def test_a_straggler_is_cut_at_twice_the_quorums_time_past_the_floor() -> None:
    out, took = _run([0.2, 0.25, 0.3, 30.0], floor_s=0.05)  # quorum 3 of 4 at 0.3 s: the last gets until 0.6 s
    assert out == ["v0", "v1", "v2", None]
    assert 0.55 < took < 2.0


def test_nothing_is_cut_before_the_floor() -> None:
    out, took = _run([0.05, 0.06, 0.07, 0.5], floor_s=1.0)  # twice the quorum is 0.14 s, the floor 1 s
    assert out == ["v0", "v1", "v2", "v3"]
    assert took < 0.9


def test_all_are_waited_for_until_more_than_half_are_in() -> None:
    out, _ = _run([0.3, 0.05], floor_s=0.01)  # two: the quorum is both
    assert out == ["v0", "v1"]
    assert asyncio.run(gather_unless_straggling([], floor_s=1.0)) == []


def test_an_exception_propagates_and_the_rest_are_cancelled() -> None:
    cancelled: list[bool] = []

    async def fail() -> str:
        await asyncio.sleep(0.01)
        raise RuntimeError("boom")

    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(gather_unless_straggling([fail(), slow(), slow()], floor_s=0.02))
    assert cancelled == [True, True]


@pytest.mark.parametrize(("floor_s", "factor"), [(0.0, 2.0), (float("nan"), 2.0), (1.0, 0.5)])
def test_refuses_bad_limits(floor_s: float, factor: float) -> None:
    with pytest.raises(ValueError, match="floor_s"):
        asyncio.run(gather_unless_straggling([], floor_s=floor_s, factor=factor))
