"""Unit tests of what ``Peer.catch_up`` adopts: the robust centre of θ and of the outer momentum, with stand-ins."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import p2p_guard.swarm.peer as peer_module
from p2p_guard.swarm.peer import Peer


@dataclass
class _Config:
    catch_up_peers: int = 5
    run_id: str = "run"
    reveal_wait_s: float = 0.0
    grace_s: float = 0.0
    commit_timeout_s: float = 0.0


@dataclass
class _Local:
    theta: torch.Tensor = field(default_factory=lambda: torch.zeros(2))
    momentum: torch.Tensor = field(default_factory=lambda: torch.zeros(2))
    outer: Any = field(default_factory=lambda: SimpleNamespace(lr=0.7, momentum=0.9))
    adopted: list[tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=list)

    def adopt(self, theta: torch.Tensor, momentum: torch.Tensor | None = None) -> None:
        self.adopted.append((theta, momentum))


class _Events:
    def __init__(self) -> None:
        self.emitted: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append({"event": kind, **fields})


@dataclass
class _Peer:
    """What ``Peer.catch_up`` reads; ``served`` maps (kind, round key) to each source's vector."""

    served: dict[tuple[str, int], dict[str, torch.Tensor]]
    config: _Config = field(default_factory=_Config)
    local: _Local = field(default_factory=_Local)
    events: _Events = field(default_factory=_Events)
    rng: random.Random = field(default_factory=lambda: random.Random(0))  # noqa: S311 - a test
    dht: object = None
    me: str = "me"
    banned: dict[str, object] = field(default_factory=dict)
    round: int = 7
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("test"))
    asked: list[tuple[str, int]] = field(default_factory=list)
    asked_whom: list[str] = field(default_factory=list)  # the sources of every theta request, in order
    excluded: frozenset[str] = frozenset()  # what our reputation excludes (Peer._exclusions)

    def _exclusions(self) -> frozenset[str]:
        return self.excluded

    async def fetch_thetas(self, peers: list[str], stop: asyncio.Event, *, round_: int = -1, wait_s: float = 0.0,
                           kind: str = "theta", step: int = 0) -> dict[str, torch.Tensor]:
        self.asked.append((kind, round_))
        if kind == "theta":
            self.asked_whom += peers
        table = self.served.get((kind, round_), {})
        return {p: table[p] for p in peers if p in table}

    def serve_state(self, round_: int) -> None:
        pass

    _catch_up_momentum = Peer._catch_up_momentum
    _first_open_round = Peer._first_open_round


def _catch_up(peer: _Peer, others: dict[str, int], monkeypatch: Any, min_round: int = 0) -> int | None:
    async def no_closes(*args: object) -> set[str]:
        return set()

    monkeypatch.setattr(peer_module, "read_closes", no_closes)
    return asyncio.run(Peer.catch_up(peer, others, asyncio.Event(), min_round=min_round))  # type: ignore[arg-type]


SOURCES = {"a": 6, "b": 6, "c": 6}


def test_the_exact_round_adopts_the_median_of_served_momenta(monkeypatch: Any) -> None:
    served = {("theta", 6): {p: torch.tensor([1.0, 2.0]) for p in SOURCES},
              ("momentum", 6): {"a": torch.tensor([3.0, 3.0]), "b": torch.tensor([5.0, 5.0]),
                                "c": torch.tensor([4.0, 4.0])}}
    peer = _Peer(served)
    assert _catch_up(peer, SOURCES, monkeypatch) == 6
    (theta, momentum), = peer.local.adopted
    assert theta.tolist() == [1.0, 2.0]
    assert momentum is not None and momentum.tolist() == [3.0, 3.0]  # lower median of 0 (ours), 3, 4, 5
    assert peer.events.emitted[-1]["momentum_estimated"] is True


def test_when_the_exact_round_times_out_the_latest_momenta_go_with_the_latest_states(monkeypatch: Any) -> None:
    """Stop 16's chaos soak: without the momentum a restarted peer stood 0.2 away from the swarm for 7 rounds."""
    served = {("theta", -1): {p: torch.tensor([1.0, 1.0]) for p in SOURCES},
              ("momentum", -1): {p: torch.tensor([2.0, 2.0]) for p in SOURCES}}
    peer = _Peer(served)
    assert _catch_up(peer, SOURCES, monkeypatch) == 6
    (_, momentum), = peer.local.adopted
    assert momentum is not None and momentum.tolist() == [2.0, 2.0]
    assert ("momentum", -1) in peer.asked


def test_without_served_momenta_it_restarts_at_zero_rather_than_trust_one_source(monkeypatch: Any) -> None:
    served = {("theta", -1): {p: torch.tensor([1.0, 1.0]) for p in SOURCES},
              ("momentum", -1): {"a": torch.tensor([9.0, 9.0])}}
    peer = _Peer(served)
    _catch_up(peer, SOURCES, monkeypatch)
    (_, momentum), = peer.local.adopted
    assert momentum is None


def test_a_restarted_peer_that_committed_round_6_takes_the_states_of_round_7(monkeypatch: Any) -> None:
    """Stop 16's chaos soak: adopting round 6's states and continuing in 7 skipped one outer step (0.115)."""
    served = {("theta", 6): {p: torch.tensor([1.0, 1.0]) for p in SOURCES},
              ("theta", 7): {p: torch.tensor([2.0, 2.0]) for p in SOURCES},
              ("momentum", 7): {p: torch.tensor([3.0, 3.0]) for p in SOURCES}}
    peer = _Peer(served)
    assert _catch_up(peer, SOURCES, monkeypatch, min_round=7) == 7
    (theta, _), = peer.local.adopted
    assert theta.tolist() == [2.0, 2.0]
    assert ("theta", 6) not in peer.asked


def test_states_older_than_our_round_are_not_adopted(monkeypatch: Any) -> None:
    served = {("theta", -1): {p: torch.tensor([1.0, 1.0]) for p in SOURCES}}
    peer = _Peer(served)
    assert _catch_up(peer, SOURCES, monkeypatch, min_round=7) is None
    assert peer.local.adopted == []


def test_without_outer_momentum_no_momentum_is_fetched_nor_adopted(monkeypatch: Any) -> None:
    """μ = 0 (the topk codecs' default) keeps no b: asking each source for 4·d bytes of momentum would be waste."""
    served = {("theta", 6): {p: torch.tensor([1.0, 2.0]) for p in SOURCES},
              ("theta", 5): {p: torch.tensor([0.0, 0.0]) for p in SOURCES},
              ("momentum", 6): {p: torch.tensor([3.0, 3.0]) for p in SOURCES}}
    peer = _Peer(served, local=_Local(outer=SimpleNamespace(lr=3.0, momentum=0.0)))
    assert _catch_up(peer, SOURCES, monkeypatch) == 6
    (theta, momentum), = peer.local.adopted
    assert theta.tolist() == [1.0, 2.0] and momentum is None
    assert [kind for kind, _ in peer.asked] == ["theta", "theta"]  # the near and the far sources' states only
    assert peer.events.emitted[-1]["momentum_estimated"] is False


def test_the_close_records_carry_the_target_past_lagging_presence_rounds(monkeypatch: Any) -> None:
    """Presence said round 3 while the swarm ran round 8 (1 s rounds): round 4's states were gone, 14 s waited."""
    async def closes(dht: object, run_id: str, round_: int) -> set[str]:
        return {"a", "b"} if round_ < 8 else set()

    served = {("theta", 8): {p: torch.tensor([1.0, 2.0]) for p in SOURCES},
              ("momentum", 8): {p: torch.tensor([3.0, 3.0]) for p in SOURCES}}
    peer = _Peer(served)
    monkeypatch.setattr(peer_module, "read_closes", closes)
    lagging = {p: 3 for p in SOURCES}
    assert asyncio.run(Peer.catch_up(peer, lagging, asyncio.Event())) == 8  # type: ignore[arg-type]
    assert peer.asked[0] == ("theta", 8) and ("theta", -1) not in peer.asked
    assert sorted(peer.asked_whom) == sorted(SOURCES)  # each source asked once (near and far do not overlap)


def test_close_records_move_the_target_at_most_closed_rounds_read_on(monkeypatch: Any) -> None:
    async def closes(dht: object, run_id: str, round_: int) -> set[str]:
        return {"a"}  # a hostile peer closes every round

    peer = _Peer({})
    monkeypatch.setattr(peer_module, "read_closes", closes)
    assert asyncio.run(Peer.catch_up(peer, dict(SOURCES), asyncio.Event())) is None  # type: ignore[arg-type]
    assert peer.asked[0] == ("theta", 6 + peer_module.CLOSED_ROUNDS_READ)


def test_peers_our_reputation_excludes_are_no_catch_up_source(monkeypatch: Any) -> None:
    """A peer restarted from its checkpoint keeps its exclusions; it used to adopt their states' median all the same.

    Live (simulate-free swarm of 3 honest + 1 ``sign_flip:scale=1``, one honest peer SIGKILLed and restarted with
    its ``--checkpoint-dir``): the restarted peer still excluded the attacker and caught up on "median of 3 peers'
    states and ours", the attacker's among them. Here three excluded sources serve 100: the median of them, the one
    trusted source and ours was 100 (adopted); now only the trusted source is left, too few, and the model is kept.
    """
    rounds = {"a": 6, "c": 6, "d": 6, "e": 6}
    served = {("theta", 6): {"a": torch.tensor([1.0, 1.0]), **{p: torch.tensor([100.0, 100.0]) for p in "cde"}},
              ("theta", -1): {"a": torch.tensor([1.0, 1.0]), **{p: torch.tensor([100.0, 100.0]) for p in "cde"}}}
    peer = _Peer(served, excluded=frozenset("cde"))
    assert _catch_up(peer, rounds, monkeypatch) is None
    assert peer.local.adopted == []
    assert peer.asked == []  # one trusted source cannot make a catch-up: nobody is asked for a state


def test_with_two_trusted_sources_the_excluded_ones_are_left_out_of_the_median(monkeypatch: Any) -> None:
    rounds = {"a": 6, "b": 6, "c": 6, "d": 6}
    served = {("theta", 6): {"a": torch.tensor([1.0, 1.0]), "b": torch.tensor([3.0, 3.0]),
                             "c": torch.tensor([100.0, 100.0]), "d": torch.tensor([100.0, 100.0])}}
    peer = _Peer(served, local=_Local(outer=SimpleNamespace(lr=0.7, momentum=0.0)), excluded=frozenset("cd"))
    assert _catch_up(peer, rounds, monkeypatch) == 6
    (theta, _), = peer.local.adopted
    assert theta.tolist() == [1.0, 1.0]  # lower median of 0 (ours), 1, 3; with c and d it was 3
    assert sorted(peer.asked_whom) == ["a", "b"]
    assert peer.events.emitted[-1]["sources"] == 2


def test_a_catch_up_stopped_by_ctrl_c_says_no_peer_failed_and_asks_no_more(monkeypatch: Any,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Live: Ctrl+C during a restarted peer's catch-up logged 'only 0 peer state(s) could be fetched' as a warning."""
    async def no_closes(*args: object) -> set[str]:
        return set()

    monkeypatch.setattr(peer_module, "read_closes", no_closes)
    peer = _Peer({})
    stop = asyncio.Event()
    stop.set()
    with caplog.at_level(logging.WARNING, logger="test"):
        assert asyncio.run(Peer.catch_up(peer, dict(SOURCES), stop)) is None  # type: ignore[arg-type]
    assert caplog.records == []
    assert peer.asked == [("theta", 6), ("theta", 6)]  # the near and far fetches only, not the fallback's latest
    assert peer.local.adopted == []
