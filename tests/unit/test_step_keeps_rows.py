"""``Peer.step``: only a simulated attacker keeps the round's received rows for its next attack."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from p2p_guard.swarm.peer import Peer, RoundOutcome


@dataclass
class _Local:
    applied: list[torch.Tensor] = field(default_factory=list)

    def apply(self, aggregate: torch.Tensor) -> None:
        self.applied.append(aggregate)


@dataclass
class _Peer:
    attack_kind: str | None = None
    me: str = "me"
    local: _Local = field(default_factory=_Local)
    known_previous: list[torch.Tensor] = field(default_factory=list)
    served: list[int] = field(default_factory=list)

    def serve_state(self, round_: int, *, mixing: bool = True) -> None:
        self.served.append(round_)


def _outcome() -> RoundOutcome:
    outcome = RoundOutcome(round=3)
    outcome.aggregate = torch.ones(2)
    outcome.rows = {"me": torch.zeros(2), "b": torch.full((2,), 2.0), "a": torch.full((2,), 1.0)}
    return outcome


def test_an_honest_peer_keeps_no_rows() -> None:
    peer = _Peer()
    Peer.step(peer, _outcome())  # type: ignore[arg-type]
    assert peer.known_previous == []
    assert len(peer.local.applied) == 1 and peer.served == [4]


def test_a_data_attacker_keeps_no_rows_either() -> None:
    peer = _Peer(attack_kind="data")
    Peer.step(peer, _outcome())  # type: ignore[arg-type]
    assert peer.known_previous == []


def test_an_update_attacker_keeps_the_others_rows_in_sender_order() -> None:
    peer = _Peer(attack_kind="update")
    Peer.step(peer, _outcome())  # type: ignore[arg-type]
    assert [float(r[0]) for r in peer.known_previous] == [1.0, 2.0]  # a, b; not our own


def test_stack_rows_and_judge_stacked_equal_judge_rows() -> None:
    from p2p_guard.guard.apply import judge_rows, judge_stacked, stack_rows
    from p2p_guard.guard.registry import build_guard

    g = torch.Generator().manual_seed(0)
    rows = {f"p{i}": torch.randn(50, generator=g) for i in (3, 1, 0, 2, 4)}
    before = {s: r.clone() for s, r in rows.items()}
    senders, stacked = stack_rows(rows)
    assert senders == ("p0", "p1", "p2", "p3", "p4")
    assert all(torch.equal(stacked[i], rows[s]) for i, s in enumerate(senders))
    assert all(torch.equal(rows[s], before[s]) for s in rows)  # not changed
    kwargs: dict[str, Any] = {"me": "p2", "round_": 0, "previous_aggregate": None, "f": None}
    a = judge_rows(build_guard("semantic"), rows, generator=torch.Generator().manual_seed(1), **kwargs)
    b = judge_stacked(build_guard("semantic"), senders, stacked, generator=torch.Generator().manual_seed(1), **kwargs)
    assert torch.equal(a.aggregate, b.aggregate) and a.verdicts == b.verdicts
    import pytest

    with pytest.raises(ValueError, match="senders"):
        judge_stacked(build_guard("semantic"), senders[:4], stacked, generator=g, **kwargs)
    with pytest.raises(ValueError, match="at least one"):
        stack_rows({})


def test_aggregate_judges_one_stack_and_leaves_views_of_it_in_the_callers_rows() -> None:
    """The peer's separate rows are replaced by views of the stack the guard reads, so only one copy stays."""
    import asyncio

    from p2p_guard.swarm.peer import Peer

    seen: list[tuple[tuple[str, ...], torch.Tensor]] = []

    class _Wire:
        leaves_own_row_out = False

    class _Log:
        def warning(self, *args: Any) -> None:
            raise AssertionError("not alone")

    class _Stub:
        me = "m"
        wire = _Wire()
        log = _Log()
        attack_kind: str | None = "update"

        def _judge(self, senders: tuple[str, ...], stacked: torch.Tensor, *args: Any) -> None:
            seen.append((senders, stacked))

    rows = {"b": torch.full((3,), 2.0), "a": torch.full((3,), 1.0)}
    outcome = RoundOutcome(round=1)
    asyncio.run(Peer._aggregate(_Stub(), rows, {"a": 0, "b": 1}, torch.zeros(3), None, outcome))  # type: ignore[arg-type]
    senders, stacked = seen[0]
    assert senders == ("a", "b", "m")
    assert stacked.tolist()[0] == [1.0] * 3 and stacked.tolist()[2] == [0.0] * 3
    assert 0 < stacked[1, 0] < 2.0  # b is one round stale: weighted below 1
    assert all(rows[s].data_ptr() == stacked[i].data_ptr() for i, s in enumerate(senders))  # views, in place
    assert outcome.rows is rows and outcome.judged == 3  # kept for an update attack only
    honest = _Stub()
    honest.attack_kind = None
    outcome = RoundOutcome(round=1)
    asyncio.run(Peer._aggregate(honest, {"a": torch.ones(3)}, {"a": 0}, torch.zeros(3), None, outcome))  # type: ignore[arg-type]
    assert outcome.rows == {} and outcome.judged == 2  # the stack is not kept past the round
