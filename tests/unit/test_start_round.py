"""Where a (re)started peer goes on from (``peer._start_round``): its checkpoint, then its commit mark; a peer
restarted after its last round does not wait for peers.

The log prefix is the round the peer goes on from: helper-32 saw ``[… r0] resumed from our checkpoint at round 74``,
because the line was written before the peer's round was set.
"""

from __future__ import annotations

import asyncio
import logging
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from p2p_guard.swarm import peer
from p2p_guard.swarm.checkpoint import Checkpoint, mark_committed, save_checkpoint

D = 6


class _Events:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.emitted.append((kind, fields))


def _stub(folder: Path) -> Any:
    """The parts of a :class:`peer.Peer` that ``_start_round`` touches, with the real ``_set_round``."""
    resumed: list[int] = []
    stub = types.SimpleNamespace(
        round=0, events=_Events(), resumed_at=resumed,
        log=peer._PeerLog(logging.getLogger("p2p_guard.swarm.peer"), {"peer": "abcdefgh", "round": 0}),
        local=types.SimpleNamespace(numel=D, resume=lambda theta, momentum: resumed.append(int(theta[0]))),
        error_feedback=types.SimpleNamespace(load_state_dict=lambda state: None),
        server=types.SimpleNamespace(serve_from=lambda r: None), serve_state=lambda r: None)
    stub._set_round = types.MethodType(peer.Peer._set_round, stub)

    async def wait_for_peers(stop: asyncio.Event, timeout_s: float) -> dict[str, int]:
        return {}

    stub.wait_for_peers = wait_for_peers
    return stub


@pytest.mark.parametrize(("mark", "goes_on_from"), [(None, 74), (73, 74), (74, 75)])
def test_the_resume_line_carries_the_round_the_peer_goes_on_from(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch, mark: int | None,
                                                                 goes_on_from: int) -> None:
    save_checkpoint(tmp_path, Checkpoint("run", 74, torch.full((D,), 7.0), torch.zeros(D)))
    if mark is not None:
        mark_committed(tmp_path, mark)  # a commit of round 74 was signed: never sign a second one
    stub = _stub(tmp_path)

    async def no_catch_up(p: Any, round_: int, others: dict[str, int], stop: asyncio.Event, **kw: Any) -> int:
        return round_

    monkeypatch.setattr(peer, "_maybe_catch_up", no_catch_up)
    config = types.SimpleNamespace(checkpoint_dir=str(tmp_path), run_id="run", rounds=0, join_timeout_s=1.0)
    with caplog.at_level(logging.INFO, logger="p2p_guard.swarm.peer"):
        got = asyncio.run(peer._start_round(stub, config, asyncio.Event()))  # type: ignore[arg-type]
    assert got == goes_on_from
    assert stub.round == goes_on_from
    assert stub.resumed_at == [7]
    lines = [r.getMessage() for r in caplog.records if "resumed from our checkpoint" in r.getMessage()]
    assert lines == [f"[abcdefgh r{goes_on_from}] resumed from our checkpoint at round 74"]
    assert stub.events.emitted == [("resume_checkpoint", {"round": 74})]


def fake_peer(rounds: int, checkpoint_dir: Path) -> types.SimpleNamespace:
    """A peer of a 4-parameter model whose ``wait_for_peers`` counts its calls and finds nobody."""
    waits: list[float | None] = []

    async def wait_for_peers(stop: asyncio.Event, *, timeout_s: float | None) -> dict[str, int]:
        waits.append(timeout_s)
        raise TimeoutError("only 1 of 2 peers joined within 300 s; check --initial-peers")

    local = types.SimpleNamespace(numel=4, resume=lambda theta, momentum: None)
    return types.SimpleNamespace(
        config=types.SimpleNamespace(checkpoint_dir=str(checkpoint_dir), run_id="run", rounds=rounds, join_timeout_s=300.0),
        local=local, log=logging.getLogger("test-start-round"), events=types.SimpleNamespace(emit=lambda *a, **k: None),
        _set_round=lambda r: None, server=types.SimpleNamespace(serve_from=lambda r: None), serve_state=lambda r: None,
        wait_for_peers=wait_for_peers, waits=waits)


def test_a_peer_restarted_after_its_last_round_does_not_wait_for_peers(tmp_path: Path) -> None:
    """A finished peer restarted with the same --rounds and --checkpoint-dir waited 300 s for peers, then exited 1."""
    save_checkpoint(tmp_path, Checkpoint("run", 10, torch.zeros(4), torch.zeros(4)))
    fake = fake_peer(rounds=10, checkpoint_dir=tmp_path)
    assert asyncio.run(peer._start_round(fake, fake.config, asyncio.Event())) == 10  # type: ignore[arg-type]
    assert fake.waits == []


def test_a_peer_with_rounds_left_waits_for_peers(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, Checkpoint("run", 10, torch.zeros(4), torch.zeros(4)))
    for rounds in (11, 0):  # one round left; no limit
        fake = fake_peer(rounds=rounds, checkpoint_dir=tmp_path)
        with pytest.raises(TimeoutError, match="^only 1 of 2 peers joined"):
            asyncio.run(peer._start_round(fake, fake.config, asyncio.Event()))  # type: ignore[arg-type]
        assert fake.waits == [300.0]


def test_a_checkpoint_of_another_model_stops_the_peer_before_any_round(tmp_path: Path) -> None:
    """It was skipped (fresh start), and the next two rounds overwrote both files with the mistyped task's model."""
    from p2p_guard.swarm.checkpoint import OtherModelCheckpoint

    save_checkpoint(tmp_path, Checkpoint("run", 74, torch.full((D + 1,), 7.0), torch.zeros(D + 1)))
    before = (tmp_path / "checkpoint.pt").read_bytes()
    stub = _stub(tmp_path)
    config = types.SimpleNamespace(checkpoint_dir=str(tmp_path), run_id="run", rounds=0, join_timeout_s=1.0)
    with pytest.raises(OtherModelCheckpoint, match=f"checkpoint of a model with {D + 1} parameters, ours has {D}:"):
        asyncio.run(peer._start_round(stub, config, asyncio.Event()))  # type: ignore[arg-type]
    assert stub.resumed_at == [] and stub.round == 0
    assert (tmp_path / "checkpoint.pt").read_bytes() == before


def _resume(tmp_path: Path, stub: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    async def no_catch_up(p: Any, round_: int, others: dict[str, int], stop: asyncio.Event, **kw: Any) -> int:
        return round_

    monkeypatch.setattr(peer, "_maybe_catch_up", no_catch_up)
    config = types.SimpleNamespace(checkpoint_dir=str(tmp_path), run_id="run", rounds=0, join_timeout_s=1.0)
    return asyncio.run(peer._start_round(stub, config, asyncio.Event()))  # type: ignore[arg-type]


def test_a_checkpoint_of_the_previous_version_resumes_with_an_empty_guard_state(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, Checkpoint("run", 74, torch.full((D,), 7.0), torch.zeros(D)))  # no guard_state key
    stub = _stub(tmp_path)
    with caplog.at_level(logging.INFO, logger="p2p_guard.swarm.peer"):
        assert _resume(tmp_path, stub, monkeypatch) == 74
    assert stub.resumed_at == [7]
    lines = [r.getMessage() for r in caplog.records if "guard state" in r.getMessage()]
    assert lines == ["[abcdefgh r74] the checkpoint holds no guard state (written by an earlier version): the guard's "
                     "per-sender records and the reputation start empty"]


def test_the_guard_state_of_the_checkpoint_is_given_back_to_the_guard(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2p_guard.guard.base import AggregationContext
    from p2p_guard.guard.registry import build_guard
    from p2p_guard.swarm.guard_state import capture

    senders = tuple(f"p{i}" for i in range(5))
    rows = torch.randn(5, D, generator=torch.Generator().manual_seed(0))
    before = build_guard("semantic")
    before(rows, AggregationContext(senders=senders, round=0, generator=torch.Generator(), own_index=0))
    save_checkpoint(tmp_path, Checkpoint("run", 1, torch.full((D,), 7.0), torch.zeros(D),
                                         state=capture(before, None)))
    stub = _stub(tmp_path)
    stub.guard, stub.votes = build_guard("semantic"), None
    with caplog.at_level(logging.INFO, logger="p2p_guard.swarm.peer"):
        assert _resume(tmp_path, stub, monkeypatch) == 1
    assert [r.getMessage() for r in caplog.records if "restored" in r.getMessage()] == [
        "[abcdefgh r1] restored from the checkpoint: guard"]
    saved, now = before.state_dict()["state"], stub.guard.state_dict()["state"]
    assert now["direction_record"] == saved["direction_record"]
    assert [e[:3] + e[4:] for e in now["collusion"]["entries"]] == [
        e[:3] + e[4:] for e in saved["collusion"]["entries"]]
    assert all(torch.equal(a[3], b[3]) for a, b in zip(now["collusion"]["entries"], saved["collusion"]["entries"],
                                                       strict=True))
