"""Unit tests: a peer cut as too slow while we fetch its θ is not sampled again for mixing (``Peer.mixing``).

One slowloris used to be sampled at every gossip step of every mixing, and each time cost one
``fetch_idle_timeout_s``: 3 idle timeouts per early round. Stand-ins replace the network; ``transport.fetch`` is
monkeypatched in ``swarm.peer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import p2p_guard.swarm.peer as peer_module
from p2p_guard.swarm.pacing import RateBook, fetch_deadline_s
from p2p_guard.swarm.peer import Peer
from p2p_guard.swarm.rounds import Departures
from p2p_guard.swarm.suspects import Suspects
from p2p_guard.swarm.transport import NOT_FOUND, OK, TOO_SLOW, FetchResult, WireCounter

D = 4
SLOW = "12D3KooW" + "S" * 44
FAST = ["12D3KooW" + c * 44 for c in "bcd"]


@dataclass
class _Config:
    run_id: str = "run"
    mix_peers: int = 8
    early_mix_rounds: int = 5
    early_mix_steps: int = 3
    grace_s: float = 0.0
    mix_radius: float = 0.05
    fetch_timeout_s: float = 30.0
    fetch_idle_timeout_s: float = 5.0
    min_fetch_bytes_per_s: float = 65536.0
    mix_precision: str = "fp32"


@dataclass
class _Local:
    theta: torch.Tensor = field(default_factory=lambda: torch.ones(D))
    momentum: torch.Tensor = field(default_factory=lambda: torch.zeros(D))
    numel: int = D


class _Server:
    def publish_mixed(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Events:
    def emit(self, kind: str, **fields: Any) -> None:
        pass


class _Departures:
    def watching(self, stop: asyncio.Event) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    def event(self, peer: str) -> asyncio.Event:
        return asyncio.Event()


@dataclass
class _Peer:
    """What ``Peer.mixing`` and ``Peer.fetch_thetas`` read."""

    config: _Config = field(default_factory=_Config)
    local: _Local = field(default_factory=_Local)
    server: _Server = field(default_factory=_Server)
    events: _Events = field(default_factory=_Events)
    departures: Departures = field(default_factory=_Departures)  # type: ignore[assignment]
    suspects: Suspects = field(default_factory=Suspects)
    rng: random.Random = field(default_factory=lambda: random.Random(0))  # noqa: S311 - a test
    p2p: object = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("test"))
    wire_in: WireCounter = field(default_factory=WireCounter)
    rates: RateBook = field(default_factory=RateBook)
    excluded: frozenset[str] = frozenset()  # what our reputation excludes (Peer._exclusions)

    def _exclusions(self) -> frozenset[str]:
        return self.excluded

    async def others_present(self) -> dict[str, int]:
        return dict.fromkeys([SLOW, *FAST], 1)

    fetch_thetas = Peer.fetch_thetas
    _fetch_vector = Peer._fetch_vector
    _mixable = Peer._mixable
    _momentum_correction = Peer._momentum_correction
    _mix_precision = Peer._mix_precision


def _fake_fetch(asked: list[tuple[str, object]]) -> Any:
    """A ``transport.fetch`` under which SLOW answers OK, then trickles (cut: TOO_SLOW), and the others answer."""
    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        name = peer.to_base58()
        asked.append((name, request[1]))
        kwargs["wire"].add(1)  # every state fetch is given the peer's wire counter (Peer.wire_in)
        if name == SLOW:
            return FetchResult(TOO_SLOW, detail="10 of 16 bytes in 5.0 s, below the rate floor")
        return FetchResult(OK, data=torch.full((D,), 1.01).numpy().tobytes())
    return fetch


def test_a_slowloris_cut_in_the_first_gossip_step_is_not_asked_in_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, object]] = []
    monkeypatch.setattr(peer_module, "fetch", _fake_fetch(asked))
    peer = _Peer()
    result = asyncio.run(Peer.mixing(peer, 0, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None and result.mixed_from == len(FAST)
    assert [key for name, key in asked if name == SLOW] == [1]  # step 0's θ only: not the steps 1, 2 nor momentum
    assert [key for name, key in asked if name == FAST[0]] == [1, [1, 1], [1, 2]]  # θ, steps 1 and 2 (b = 0)
    assert peer.suspects.current(time.monotonic()) == {SLOW}
    assert peer.suspects.unreachable(time.monotonic()) == frozenset()  # not counted as gone
    assert peer.wire_in.received == len(asked)


def test_a_slow_suspect_is_not_sampled_in_the_next_mixing_until_it_delivers(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, object]] = []
    monkeypatch.setattr(peer_module, "fetch", _fake_fetch(asked))
    peer = _Peer()
    asyncio.run(Peer.mixing(peer, 0, asyncio.Event()))  # type: ignore[arg-type]
    asked.clear()
    asyncio.run(Peer.mixing(peer, 6, asyncio.Event()))  # type: ignore[arg-type]
    assert SLOW not in {name for name, _ in asked}
    peer.suspects.delivered(SLOW)  # e.g. its payload came whole in a later round
    asked.clear()
    asyncio.run(Peer.mixing(peer, 7, asyncio.Event()))  # type: ignore[arg-type]
    assert SLOW in {name for name, _ in asked}


def test_a_lagging_neighbour_is_waited_for_once_per_mixing_not_once_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, object]] = []

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        name = peer.to_base58()
        asked.append((name, request[1]))
        if name == SLOW:  # a round behind: "not found" (it answers at once, so it is no suspect)
            return FetchResult(NOT_FOUND)
        return FetchResult(OK, data=torch.full((D,), 1.01).numpy().tobytes())

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer()
    result = asyncio.run(Peer.mixing(peer, 0, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None and result.mixed_from == len(FAST)
    assert {key for name, key in asked if name == SLOW} == {1}  # asked for its θ in step 0 only
    assert peer.suspects.current(time.monotonic()) == frozenset()  # lagging is no suspicion


def test_the_outer_momentum_is_fetched_only_when_ours_is_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero b (μ = 0, the topk codecs' default) asks no neighbour for its momentum: 4·d bytes each, unused."""
    asked: list[tuple[str, object]] = []
    monkeypatch.setattr(peer_module, "fetch", _fake_fetch(asked))
    still = _Peer()
    result = asyncio.run(Peer.mixing(still, 0, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None and result.momentum is None
    assert [key for name, key in asked if name == FAST[0]] == [1, [1, 1], [1, 2]]
    assert result.bytes_received == 4 * D * (len(FAST) * 3)  # θ in three gossip steps, no momentum
    asked.clear()
    moving = _Peer(local=_Local(momentum=torch.full((D,), 0.5)))
    result = asyncio.run(Peer.mixing(moving, 0, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None and result.momentum is not None
    assert [key for name, key in asked if name == FAST[0]] == [1, 1, [1, 1], [1, 2]]  # θ, b, steps 1 and 2
    assert result.bytes_received == 4 * D * (len(FAST) * 4)
    # each difference (0.51 per coordinate, norm 1.02) is clipped at MOMENTUM_MIX_RADIUS · ‖b‖ = 1.0: 0.5 per
    # coordinate, and the 3 neighbours' sum is divided by 3 + 1
    assert torch.allclose(result.momentum, torch.full((D,), 0.375))


def test_a_peer_our_reputation_excludes_is_not_sampled_for_mixing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, object]] = []
    monkeypatch.setattr(peer_module, "fetch", _fake_fetch(asked))
    peer = _Peer(excluded=frozenset({FAST[0]}))
    result = asyncio.run(Peer.mixing(peer, 6, asyncio.Event()))  # type: ignore[arg-type]
    assert result is not None
    assert FAST[0] not in {name for name, _ in asked}
    assert {name for name, _ in asked} == {SLOW, *FAST[1:]}


def test_a_state_deadline_grows_with_its_size_and_the_measured_rate_of_its_sender(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A large state gets time in proportion to its size from an unmeasured sender (one ``fetch_timeout_s`` cut a
    25M model's θ from any home uplink), and its delivery measures the sender's rate for the next deadline."""
    timeouts: list[float] = []
    numel = 1_000_000

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        timeouts.append(kwargs["timeout_s"])
        await asyncio.sleep(0.05)
        return FetchResult(OK, data=bytes(4 * numel))

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer(config=_Config(fetch_timeout_s=1.0), local=_Local(numel=numel))
    for _ in range(2):
        answer = asyncio.run(Peer._fetch_vector(peer, "theta", FAST[0], 1, 0.0, asyncio.Event()))  # type: ignore[arg-type]
        assert answer is not None and len(answer[0]) == 4 * numel
    unmeasured = fetch_deadline_s(4 * numel, None, fetch_timeout_s=1.0, idle_timeout_s=5.0, min_bytes_per_s=65536.0)
    assert unmeasured == 2 * 4 * numel / 2**20  # 7.63 s at the assumed 1 MiB/s, where the floor is 1 s
    assert timeouts[0] == unmeasured
    rate = peer.rates.rate(FAST[0])
    assert rate is not None and 4 * numel / 1.0 < rate < 4 * numel / 0.05  # 4 MB in a bit over 0.05 s
    assert timeouts[1] == 1.0  # measured fast: the floor


def test_a_straggling_neighbours_state_is_not_waited_for_once_most_are_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three neighbours answer at once; the fourth streams for 10 s: fetch_thetas returns after about the floor."""

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        if peer.to_base58() == SLOW:
            await asyncio.sleep(10)
        return FetchResult(OK, data=torch.full((D,), 1.01).numpy().tobytes())

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer(config=_Config(fetch_timeout_s=0.2))
    started = time.monotonic()
    states = asyncio.run(Peer.fetch_thetas(peer, [*FAST, SLOW], asyncio.Event(), round_=1))  # type: ignore[arg-type]
    assert sorted(states) == sorted(FAST)
    assert time.monotonic() - started < 2.0  # the floor, 0.2 s, not the straggler's 10 s


def test_a_state_cut_at_its_deadline_gets_more_time_at_the_next_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state still streaming (faster than the floor, or the pace would have cut it as TOO_SLOW) when its deadline
    passed teaches a bound on its sender's rate: before, nothing was recorded, so a large state from a sender never
    measured (not in our payload sample) was cut at the same deadline in every mixing, and never arrived."""
    timeouts: list[float] = []
    numel = 1_000_000

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        timeouts.append(kwargs["timeout_s"])
        if len(timeouts) == 1:
            return FetchResult(-1, detail=f"no complete answer within {kwargs['timeout_s']:.1f} s")
        return FetchResult(OK, data=bytes(4 * numel))

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer(config=_Config(fetch_timeout_s=1.0), local=_Local(numel=numel))
    first = asyncio.run(Peer._fetch_vector(peer, "theta", FAST[0], 1, 0.0, asyncio.Event()))  # type: ignore[arg-type]
    assert first is None  # cut, and no time left in this mixing's wait
    second = asyncio.run(Peer._fetch_vector(peer, "theta", FAST[0], 1, 0.0, asyncio.Event()))  # type: ignore[arg-type]
    assert second is not None
    ceiling = 5.0 + 4 * numel / 65536.0
    assert timeouts[1] == min(2 * timeouts[0], ceiling)  # the recorded bound: 4 MB in at least timeouts[0] s


def test_a_state_cut_at_its_deadline_while_streaming_is_no_unreachable_suspect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A neighbour whose state was still streaming at its deadline answered: before, it was marked as a transport
    failure (``Suspects.failed``), the mark of a killed or frozen peer. It is asked at most twice per wait."""
    asked: list[float] = []

    async def fetch(p2p: object, peer: Any, run_id: str, request: list[Any], **kwargs: Any) -> FetchResult:
        asked.append(kwargs["timeout_s"])
        return FetchResult(-1, detail=f"no complete answer within {kwargs['timeout_s']:.1f} s")

    monkeypatch.setattr(peer_module, "fetch", fetch)
    peer = _Peer(config=_Config(fetch_timeout_s=1.0), local=_Local(numel=1_000_000))
    answer = asyncio.run(Peer._fetch_vector(peer, "theta", FAST[0], 1, 60.0, asyncio.Event()))  # type: ignore[arg-type]
    assert answer is None
    assert len(asked) == 2
    assert peer.suspects.failed_at(FAST[0]) is None
    assert peer.suspects.current(time.monotonic()) == frozenset()
