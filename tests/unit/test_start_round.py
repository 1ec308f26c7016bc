"""``swarm.peer._start_round``: where a (re)started peer begins, with a stand-in peer."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from p2p_guard.swarm.checkpoint import Checkpoint, save_checkpoint
from p2p_guard.swarm.peer import _start_round


def fake_peer(rounds: int, checkpoint_dir: Path) -> SimpleNamespace:
    """A peer of a 4-parameter model whose ``wait_for_peers`` counts its calls and finds nobody."""
    waits: list[float | None] = []

    async def wait_for_peers(stop: asyncio.Event, *, timeout_s: float | None) -> dict[str, int]:
        waits.append(timeout_s)
        raise TimeoutError("only 1 of 2 peers joined within 300 s; check --initial-peers")

    local = SimpleNamespace(numel=4, resume=lambda theta, momentum: None)
    return SimpleNamespace(
        config=SimpleNamespace(checkpoint_dir=str(checkpoint_dir), run_id="run", rounds=rounds, join_timeout_s=300.0),
        local=local, log=logging.getLogger("test-start-round"), events=SimpleNamespace(emit=lambda *a, **k: None),
        _set_round=lambda r: None, server=SimpleNamespace(serve_from=lambda r: None), serve_state=lambda r: None,
        wait_for_peers=wait_for_peers, waits=waits)


def test_a_peer_restarted_after_its_last_round_does_not_wait_for_peers(tmp_path: Path) -> None:
    """A finished peer restarted with the same --rounds and --checkpoint-dir waited 300 s for peers, then exited 1."""
    save_checkpoint(tmp_path, Checkpoint("run", 10, torch.zeros(4), torch.zeros(4)))
    fake = fake_peer(rounds=10, checkpoint_dir=tmp_path)
    assert asyncio.run(_start_round(fake, fake.config, asyncio.Event())) == 10  # type: ignore[arg-type]
    assert fake.waits == []


def test_a_peer_with_rounds_left_waits_for_peers(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, Checkpoint("run", 10, torch.zeros(4), torch.zeros(4)))
    for rounds in (11, 0):  # one round left; no limit
        fake = fake_peer(rounds=rounds, checkpoint_dir=tmp_path)
        with pytest.raises(TimeoutError, match="^only 1 of 2 peers joined"):
            asyncio.run(_start_round(fake, fake.config, asyncio.Event()))  # type: ignore[arg-type]
        assert fake.waits == [300.0]
