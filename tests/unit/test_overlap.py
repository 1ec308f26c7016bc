"""Unit tests for the overlapped round (``--overlap``) and its neighbours.

Head and tail of an inner phase, the head's length, the background reports, the skipped round's step, and the
simulation's thread share.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from p2p_guard.simulation.orchestrator import peer_threads, run_env
from p2p_guard.swarm.peer import (
    Peer,
    RoundOutcome,
    _apply_skipped,
    _communication,
    _emit_round,
    _PeerLog,
    _Reports,
    head_steps,
)
from p2p_guard.swarm.transport import WireCounter
from p2p_guard.tasks import load_task
from p2p_guard.tasks.base import Metrics
from p2p_guard.training.inner import InnerPhaseStopped
from p2p_guard.training.local import LocalModel, round_generator
from p2p_guard.training.streams import PeerStream


@dataclass
class _Config:
    run_id: str = "t"
    seed: int = 0
    peer_index: int = 0
    control_file: str | None = None


def _peer(steps: int = 6) -> Peer:
    """A ``Peer`` with only what the inner phase uses: a digits model, H, the config, no attack."""
    peer = object.__new__(Peer)
    peer.local = LocalModel(load_task("digits"), seed=0, num_shards=2, shard_index=0, partition="iid")
    peer.inner_steps = steps
    peer.config = _Config()  # type: ignore[assignment]
    peer.stream = PeerStream(0, 0, derived=False)
    peer.attack = None
    peer._continue = None
    peer.halt = threading.Event()
    return peer


def test_head_and_tail_measure_delta_from_the_stepped_theta_and_keep_the_heads_progress() -> None:
    peer, twin = _peer(), _peer()
    head = asyncio.run(peer.inner_head(3, 2))
    assert head.steps == 2 and torch.equal(head.start, peer.local.theta)
    stepped = peer.local.theta - 0.01  # the previous round's step, applied between head and tail
    peer.local.adopt(stepped)
    result = asyncio.run(peer.inner_tail(head))
    # The same on a twin by hand: 2 steps from θ, the progress moved onto the stepped θ, 4 more steps.
    gen = round_generator("t", 0, 0, 3, 1)
    end2, _ = twin.local.train_from(twin.local.theta, 2, gen)
    rebased = stepped + (end2 - twin.local.theta)
    end6, _ = twin.local.train_from(rebased, 4, gen)
    assert torch.allclose(result.delta, stepped - end6, atol=1e-6)
    assert result.base_round == 3
    # θ unchanged since the tail: the next head continues from where the tail ended ...
    nxt = asyncio.run(peer.inner_head(4, 1))
    assert torch.allclose(nxt.start, stepped - result.delta, atol=1e-6)
    assert not torch.allclose(nxt.start, stepped, atol=1e-6)
    # ... and starts from θ once θ was replaced (a catch-up).
    peer.local.adopt(stepped + 1.0)
    assert torch.equal(asyncio.run(peer.inner_head(5, 1)).start, peer.local.theta)


def test_a_stop_request_ends_every_inner_part_without_an_update() -> None:
    peer = _peer(steps=1_000_000)
    theta = peer.local.theta

    async def stop_soon() -> None:  # as _relay_stop does on Ctrl+C, from the event loop while the thread trains
        await asyncio.sleep(0.5)
        peer.halt.set()

    async def inner_with_stop() -> None:
        stopper = asyncio.create_task(stop_soon())
        try:
            await peer.inner(0)
        finally:
            await stopper

    with pytest.raises(InnerPhaseStopped) as stopped:
        asyncio.run(inner_with_stop())
    assert 0 < stopped.value.steps_done < 1_000_000
    assert peer.local.theta is theta and peer._continue is None
    with pytest.raises(InnerPhaseStopped):
        asyncio.run(peer.inner_head(1, 3))


def test_a_head_is_clamped_to_the_phase_and_a_full_head_leaves_an_empty_tail() -> None:
    peer = _peer(steps=4)
    head = asyncio.run(peer.inner_head(0, 99))
    assert head.steps == 4
    result = asyncio.run(peer.inner_tail(head))
    assert torch.equal(result.delta, head.start - head.end)  # θ did not move: Δ is the head's own progress
    assert result.loss == head.loss


@pytest.mark.parametrize(("comm_s", "step_s", "h", "expected"), [
    (None, 0.2, 50, 12),   # nothing measured yet: H/4
    (2.0, 0.0, 50, 12),    # no step time yet: H/4
    (2.0, 0.2, 50, 13),    # ceil(1.25 · 2 / 0.2)
    (100.0, 0.2, 50, 25),  # at most half the phase
    (0.0, 0.2, 50, 1),     # at least one step
    (1.0, 0.5, 1, 1),
    (float("inf"), 0.2, 50, 12),
])
def test_head_steps(comm_s: float | None, step_s: float, h: int, expected: int) -> None:
    assert head_steps(comm_s, step_s, h) == expected


def test_reports_run_one_at_a_time_and_survive_a_failed_or_stuck_report(caplog: pytest.LogCaptureFixture) -> None:
    done: list[int] = []

    async def ok(i: int) -> None:
        await asyncio.sleep(0.01)
        done.append(i)

    async def boom() -> None:
        raise OSError("disk full")

    async def stuck() -> None:
        await asyncio.sleep(60)

    async def scenario() -> None:
        reports = _Reports()
        await reports.wait()  # none pending
        reports.start(ok(1))
        await reports.wait()
        reports.start(boom())
        await reports.wait()  # logged, not raised
        reports.start(stuck())
        await reports.wait(timeout_s=0.05)  # dropped
        assert reports.task is None

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert done == [1]
    assert "disk full" in caplog.text and "did not finish within 0 s" in caplog.text


class _Events:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, object]]] = []

    def emit(self, kind: str, **fields: object) -> None:
        self.emitted.append((kind, fields))


def test_a_skipped_rounds_aggregate_is_applied_and_reported() -> None:
    peer = _peer()
    peer.events = _Events()  # type: ignore[assignment]
    peer.log = logging.getLogger("test")  # type: ignore[assignment]
    before = peer.local.theta
    agg = torch.full_like(before, 0.1)
    _apply_skipped(peer, RoundOutcome(round=7, aggregate=agg, fetched=3, rows={"a": agg, "b": agg}))
    twin = _peer()
    twin.local.apply(agg)
    assert torch.equal(peer.local.theta, twin.local.theta)
    assert peer.events.emitted == [("skipped_round", {"round": 7, "fetched": 3, "applied": True})]  # type: ignore[attr-defined]
    _apply_skipped(peer, RoundOutcome(round=8))  # nothing arrived: θ unchanged
    assert torch.equal(peer.local.theta, twin.local.theta)
    _apply_skipped(peer, None)


def test_simulated_peers_share_the_cores() -> None:
    assert peer_threads(4, cores=2) == 1
    assert peer_threads(3, cores=16) == 5
    assert peer_threads(1, cores=16) == 16
    assert peer_threads(0, cores=4) == 4


def test_run_env_sets_the_thread_share_unless_the_user_did(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert "OMP_NUM_THREADS" not in run_env(tmp_path)
    assert run_env(tmp_path, peers=10_000)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert run_env(tmp_path, peers=10_000)["OMP_NUM_THREADS"] == "3"


class _DHT:
    def __init__(self, stored: dict[str, bytes]) -> None:
        self.stored = stored
        self.keys: list[str] = []

    async def read(self, key: str) -> dict[str, bytes]:
        self.keys.append(key)
        return dict(self.stored)


def test_a_peer_refuses_to_sign_a_second_commit_left_by_an_earlier_session() -> None:
    from p2p_guard.swarm.peer import EarlierSessionCommit
    from p2p_guard.swarm.records import commit_key

    peer = object.__new__(Peer)
    peer.me = "12D3KooWme"
    peer.config = _Config()  # type: ignore[assignment]
    peer.stream = PeerStream(0, 0, derived=False)
    peer.dht = _DHT({"12D3KooWother": b"theirs"})  # type: ignore[assignment]
    asyncio.run(peer._refuse_equivocation(0, b"ours"))  # nobody else's commit matters
    assert peer.dht.keys == [commit_key("t", 0)]  # type: ignore[attr-defined]
    peer.dht = _DHT({"12D3KooWme": b"ours"})  # type: ignore[assignment]
    asyncio.run(peer._refuse_equivocation(0, b"ours"))  # the same bytes (a deterministic re-run): no conflict
    peer.dht = _DHT({"12D3KooWme": b"earlier"})  # type: ignore[assignment]
    with pytest.raises(EarlierSessionCommit, match=r"run 't' round 3 in another session of this identity \(running now or earlier"):
        asyncio.run(peer._refuse_equivocation(3, b"ours"))


@pytest.mark.parametrize(("comm_s", "step_s", "h", "expected"), [
    (None, 0.2, 50, False),   # nothing measured: sequential
    (2.0, 0.0, 50, False),
    (4.0, 0.2, 50, True),     # hides 4 s of a 14 s round
    (30.0, 0.2, 50, True),    # the head (25 steps, 5 s) hides 5 s of a 40 s round: 12.5 %
    (50.0, 0.2, 50, False),   # 5 s of a 60 s round: 8 %
    (4.0, 0.005, 20, False),  # digits: the head (10 steps, 0.05 s) hides 1 % of the round
    (0.1, 0.2, 50, False),    # a 0.1 s communication is 1 % of the round
    (float("nan"), 0.2, 50, False),
])
def test_the_automatic_overlap_runs_where_the_head_hides_a_tenth_of_the_round(
        comm_s: float | None, step_s: float, h: int, expected: bool) -> None:
    from p2p_guard.swarm.peer import overlap_pays

    assert overlap_pays(comm_s, step_s, h) is expected


def test_the_round_event_and_log_line_say_whether_the_round_was_overlapped(
        caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from p2p_guard.swarm.peer import _emit_round
    from p2p_guard.tasks.base import Metrics

    emitted: list[tuple[str, dict[str, object]]] = []
    events = SimpleNamespace(emit=lambda kind, **fields: emitted.append((kind, fields)))
    peer = SimpleNamespace(me="me", metrics=None, log=logging.getLogger("test-overlap-event"))
    with caplog.at_level(logging.INFO, logger="test-overlap-event"):
        for overlapped in (False, True):
            outcome = RoundOutcome(3, overlapped=overlapped)
            _emit_round(peer, events, outcome, Metrics(1.0, 0.5, None), 2.0, 0, 0, None, {}, "ab")  # type: ignore[arg-type]
    rounds = [fields for kind, fields in emitted if kind == "round"]
    assert [r["overlapped"] for r in rounds] == [False, True]
    lines = [r.getMessage() for r in caplog.records]
    assert [line.endswith("| overlapped") for line in lines] == [False, True]


def test_a_communication_cancelled_before_it_ran_is_timed_and_never_unawaited() -> None:
    """A stop request can cancel the round's communication task before it ran: no "never awaited" warning."""
    from types import SimpleNamespace

    from p2p_guard.swarm.peer import _RoundClock

    async def communication() -> RoundOutcome:
        return RoundOutcome(round=0)

    async def run() -> float | None:
        server = SimpleNamespace(bytes_sent=0, stats=SimpleNamespace(payloads_served=0))
        clock = _RoundClock(SimpleNamespace(server=server, wire_in=WireCounter()))  # type: ignore[arg-type]
        task = clock.time_communication(asyncio.create_task(communication()))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # done callbacks run at the loop's next turn
        return clock.comm_s

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm_s = asyncio.run(run())
        gc.collect()
    assert comm_s is not None
    assert comm_s >= 0.0
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]


def _tagged_peer(round_: int) -> SimpleNamespace:
    """What the round's log lines read from a peer: its short PeerID, its current round's log tag, no metrics."""
    return SimpleNamespace(me="12D3KooWpeerabcd", metrics=None, round=round_,
                           log=_PeerLog(logging.getLogger("p2p_guard.swarm.peer"), {"peer": "peerabcd",
                                                                                    "round": round_}))


def test_an_overlapped_rounds_summary_line_is_tagged_with_its_own_round(caplog: pytest.LogCaptureFixture) -> None:
    """In an overlapped round the loop is at r + 1 when round r's report logs: the line read `[… r37] round 36`."""
    peer = _tagged_peer(37)
    events = SimpleNamespace(emit=lambda *a, **kw: None)
    with caplog.at_level(logging.INFO, logger="p2p_guard.swarm.peer"):
        _emit_round(peer, events, RoundOutcome(round=36, overlapped=True),  # type: ignore[arg-type]
                    Metrics(loss=0.5, accuracy=0.75, perplexity=None), 2.0, 0, 0, None, {}, "00")
        peer.log.info("inner phase")
    assert [r.getMessage() for r in caplog.records] == [
        "[peerabcd r36] round 36: loss 0.500 acc 0.750 | fetched 0 | accepted 0 | rejected 0 | compute 0.0 of "
        "2.0 s | overlapped",
        "[peerabcd r37] inner phase",  # the loop's own lines keep the round it is at
    ]


def test_a_rounds_communication_logs_under_its_own_round(caplog: pytest.LogCaptureFixture) -> None:
    """Round r's communication runs in the background while the loop is at r + 1 (its rejections were tagged r+1)."""
    peer = _tagged_peer(37)

    async def communicate(round_: int, *args: object, **kw: object) -> RoundOutcome:
        await asyncio.sleep(0)
        peer.log.warning("rejected abcd: duplicate")
        return RoundOutcome(round=round_)

    async def both() -> RoundOutcome:
        task = asyncio.create_task(_communication(peer, 36, torch.zeros(1), b"", b"", asyncio.Event(),  # type: ignore[arg-type]
                                                  mix=False, own_reference=torch.zeros(1), skipped=None))
        peer.log.info("head of round 37")
        return await task

    peer.communicate = communicate
    with caplog.at_level(logging.INFO, logger="p2p_guard.swarm.peer"):
        assert asyncio.run(both()).round == 36
    assert [r.getMessage() for r in caplog.records] == ["[peerabcd r37] head of round 37",
                                                        "[peerabcd r36] rejected abcd: duplicate"]
