"""Unit tests for the overlap's deferred mixing (``swarm.peer._DeferredMix``), with a stand-in peer."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from p2p_guard.swarm.peer import MixCorrection, RoundOutcome, _DeferredMix


@dataclass
class _Local:
    theta: torch.Tensor


@dataclass
class _Config:
    snapshot_dir: str | None = None


@dataclass
class _Peer:
    """What ``_DeferredMix`` uses: ``mixing``, ``apply_mix``, ``local.theta``, ``config.snapshot_dir`` and a log."""

    correction: MixCorrection | None
    fail: bool = False
    local: _Local = field(default_factory=lambda: _Local(torch.tensor([1.0, 2.0])))
    config: _Config = field(default_factory=_Config)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("test"))
    applied: list[tuple[MixCorrection, int]] = field(default_factory=list)

    async def mixing(self, round_: int, stop: asyncio.Event) -> MixCorrection | None:
        await asyncio.sleep(0)
        if self.fail:
            raise RuntimeError("boom")
        return self.correction

    def apply_mix(self, correction: MixCorrection, outcome: RoundOutcome) -> None:
        self.local.theta = self.local.theta + correction.theta
        self.applied.append((correction, outcome.round))


def _correction() -> MixCorrection:
    return MixCorrection(round=4, theta=torch.tensor([0.5, -0.5]), mixed_from=3, distance=0.01, bytes_received=24)


def _run(peer: _Peer, *, replace_theta: bool = False) -> None:
    async def scenario() -> None:
        deferred = _DeferredMix()
        await deferred.apply(peer, RoundOutcome(round=4))  # nothing pending: a no-op
        deferred.start(peer, 4, asyncio.Event())  # type: ignore[arg-type]
        await asyncio.sleep(0.01)  # the mixing finishes beside the next inner phase
        if replace_theta:
            peer.local.theta = torch.tensor([9.0, 9.0])  # a catch-up adopted other states
        await deferred.apply(peer, RoundOutcome(round=5))  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_the_correction_is_applied_at_the_next_round_end_and_the_snapshot_is_the_mixed_theta(tmp_path: Path) -> None:
    peer = _Peer(_correction(), config=_Config(snapshot_dir=str(tmp_path)))
    _run(peer)
    assert [(c.round, r) for c, r in peer.applied] == [(4, 5)]
    assert peer.local.theta.tolist() == [1.5, 1.5]
    assert np.load(tmp_path / "r00004.npy").tolist() == [1.5, 1.5]


def test_a_correction_is_dropped_when_theta_was_replaced_meanwhile() -> None:
    peer = _Peer(_correction())
    _run(peer, replace_theta=True)
    assert peer.applied == []
    assert peer.local.theta.tolist() == [9.0, 9.0]


@pytest.mark.parametrize("fail", [True, False])
def test_a_failed_or_empty_mixing_leaves_theta_alone(fail: bool, tmp_path: Path) -> None:
    peer = _Peer(None, fail=fail, config=_Config(snapshot_dir=str(tmp_path)))
    _run(peer)
    assert peer.applied == []
    assert peer.local.theta.tolist() == [1.0, 2.0]
    assert (tmp_path / "r00004.npy").exists() is not fail  # an empty mixing still snapshots the unmixed θ


def test_cancel_stops_a_pending_mixing() -> None:
    async def scenario() -> bool:
        started = asyncio.Event()

        class Slow(_Peer):
            async def mixing(self, round_: int, stop: asyncio.Event) -> MixCorrection | None:
                started.set()
                await asyncio.sleep(60)
                return _correction()

        peer = Slow(None)
        deferred = _DeferredMix()
        deferred.start(peer, 1, asyncio.Event())  # type: ignore[arg-type]
        await started.wait()
        await deferred.cancel()
        await deferred.apply(peer, RoundOutcome(round=2))  # type: ignore[arg-type]
        return not peer.applied and deferred.task is None

    assert asyncio.run(scenario()) is True
