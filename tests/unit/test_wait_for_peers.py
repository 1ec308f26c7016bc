"""Peer.wait_for_peers: an unreachable suspect does not count as present (a killed partner pauses us)."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest

from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.peer import Peer
from p2p_guard.swarm.suspects import Suspects


def fake_peer(present: dict[str, int], suspects: Suspects) -> SimpleNamespace:
    async def others_present() -> dict[str, int]:
        return dict(present)

    emitted: list[str] = []
    return SimpleNamespace(config=SimpleNamespace(min_peers=2, start_peers=None), others_present=others_present,
                           suspects=suspects, paused=False, resumed=False, round=7,
                           log=logging.getLogger("test-wait"), events=SimpleNamespace(
                               emit=lambda kind, **_: emitted.append(kind)), emitted=emitted)


def test_a_reachable_partner_counts() -> None:
    fake = fake_peer({"other": 7}, Suspects())
    others = asyncio.run(Peer.wait_for_peers(fake, asyncio.Event(), timeout_s=None))  # type: ignore[arg-type]
    assert others == {"other": 7} and not fake.paused and fake.emitted == []


def test_an_unreachable_partner_does_not_count_and_we_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer_module, "WAIT_POLL_S", 0.01)
    suspects = Suspects()
    suspects.failed("other", time.monotonic())
    fake = fake_peer({"other": 7}, suspects)

    async def run() -> dict[str, int]:
        stop = asyncio.Event()
        waiting = asyncio.ensure_future(Peer.wait_for_peers(fake, stop, timeout_s=None))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not waiting.done() and fake.paused and fake.emitted == ["pause"]
        suspects.answered("other")  # it answered again: present
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(run()) == {"other": 7}
    assert fake.emitted == ["pause", "resume"] and not fake.paused
