"""Peer.wait_for_peers: an unreachable suspect does not count as present (a killed partner pauses us)."""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from types import SimpleNamespace

import pytest

from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.peer import Peer
from p2p_guard.swarm.records import PRESENCE_TTL_S, presence_key
from p2p_guard.swarm.suspects import Suspects


def fake_peer(present: dict[str, int], suspects: Suspects, stored_at: dict[str, float] | None = None
              ) -> SimpleNamespace:
    """A peer whose presence key holds ``present``; ``stored_at``: the DHT time of each value's last store."""
    async def others_present() -> dict[str, int]:
        return dict(present)

    async def read_expirations(key: str) -> dict[str, float]:
        assert key == presence_key("run")
        return {p: t + PRESENCE_TTL_S for p, t in (stored_at or {}).items()}

    emitted: list[str] = []
    fake = SimpleNamespace(config=SimpleNamespace(min_peers=2, start_peers=None, run_id="run"),
                           others_present=others_present, dht=SimpleNamespace(read_expirations=read_expirations),
                           suspects=suspects, paused=False, resumed=False, round=7,
                           log=logging.getLogger("test-wait"), events=SimpleNamespace(
                               emit=lambda kind, **_: emitted.append(kind)), emitted=emitted)
    fake.unreachable_suspects = partial(Peer.unreachable_suspects, fake)
    return fake


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


def test_a_suspect_that_stores_its_presence_again_counts_and_we_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under CI load one failed state fetch paused a peer of a --min-peers-strict swarm for the suspicion's whole
    # 30 s, fetching nothing that could clear it. A presence store after the failure is proof of life.
    monkeypatch.setattr(peer_module, "WAIT_POLL_S", 0.01)
    suspects = Suspects()
    suspects.failed("other", time.monotonic())
    stored: dict[str, float] = {"other": peer_module.hivemind_time() - 1.0}  # stored before the failure
    fake = fake_peer({"other": 7}, suspects, stored)

    async def run() -> dict[str, int]:
        waiting = asyncio.ensure_future(
            Peer.wait_for_peers(fake, asyncio.Event(), timeout_s=None))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not waiting.done() and fake.paused and fake.emitted == ["pause"]
        stored["other"] = peer_module.hivemind_time() + 5.0  # a store well after the failure (> REFRESH_MARGIN_S)
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(run()) == {"other": 7}
    assert fake.emitted == ["pause", "resume"] and suspects.unreachable(time.monotonic()) == frozenset()


def test_a_join_timeout_below_a_second_is_named_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--join-timeout-s 0.05`` was reported as "joined within 0 s"."""
    monkeypatch.setattr(peer_module, "WAIT_POLL_S", 0.01)
    fake = fake_peer({}, Suspects())
    with pytest.raises(TimeoutError, match=r"^only 1 of 2 peers joined within 0\.05 s; check --initial-peers$"):
        asyncio.run(Peer.wait_for_peers(fake, asyncio.Event(), timeout_s=0.05))  # type: ignore[arg-type]
