"""A slow-peer fault's slowdown (``--control-file`` ``{"slowdown": F}``) gives way to a stop request.

It was one ``asyncio.sleep`` of (F − 1) × the inner phase's compute time: a peer with ``{"slowdown": 1000}`` said
"SIGINT received: finishing cleanly" and was still asleep a minute later (simulate's stop then kills it after 10 s,
without a leave record).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from p2p_guard.swarm import peer
from p2p_guard.training.inner import InnerPhaseStopped

COMPUTE_S = 0.05


def _stub(control: Path) -> Any:
    def train_from(start: torch.Tensor, steps: int, generator: object, attack: object, *,
                   halt: threading.Event) -> tuple[torch.Tensor, float]:
        time.sleep(COMPUTE_S)
        return start + 1.0, 0.5

    return types.SimpleNamespace(attack=None, attack_kind=None, halt=threading.Event(),
                                 local=types.SimpleNamespace(train_from=train_from),
                                 config=types.SimpleNamespace(control_file=str(control)))


@pytest.mark.timeout(30)  # without the fix it sleeps for hours
def test_a_stop_request_ends_the_slowdown(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    control.write_text(json.dumps({"slowdown": 1e6}))  # about 14 hours of sleep after a 0.05 s phase
    stub = _stub(control)

    async def scenario() -> float:
        asyncio.get_running_loop().call_later(0.5, stub.halt.set)  # what _relay_stop does on SIGINT
        started = time.monotonic()
        with pytest.raises(InnerPhaseStopped) as info:
            await peer.Peer._train(stub, torch.zeros(3), 5, torch.Generator())
        assert info.value.steps_done == 5
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 2.0


def test_the_slowdown_still_takes_its_time_without_a_stop(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    control.write_text(json.dumps({"slowdown": 5}))  # 4 x the compute time more
    stub = _stub(control)
    started = time.monotonic()
    end, loss = asyncio.run(peer.Peer._train(stub, torch.zeros(3), 5, torch.Generator()))
    took = time.monotonic() - started
    assert torch.equal(end, torch.ones(3)) and loss == 0.5
    assert 5 * COMPUTE_S <= took < 5 * COMPUTE_S + 1.5

