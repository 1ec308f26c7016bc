"""The guard state a peer keeps across a restart: saved in its checkpoint, checked and restored on resume.

The semantic guard's direction record and collusion history, and the vote book (reputation and our verdicts not
yet folded), go through a real checkpoint file; the restored guard's next verdicts and aggregates equal, bit for
bit, those of a guard that never stopped. A checkpoint without the state (an earlier version) loads with none;
a hostile state is refused with a reason and the state starts empty.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from p2p_guard.guard.base import AggregationContext, GuardResult
from p2p_guard.guard.guard import Guard
from p2p_guard.guard.registry import build_guard
from p2p_guard.guard.state import GuardStateError
from p2p_guard.swarm.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from p2p_guard.swarm.guard_state import capture, restore
from p2p_guard.swarm.standing import VoteBook
from p2p_guard.swarm.verdicts import SenderVerdict
from tests.unit.test_standing import MemoryDHT, _ids

N, D = 10, 300
SENDERS = tuple(f"peer{i:02d}" for i in range(N))
RUN = "run-g"


def _rows(round_: int) -> torch.Tensor:
    """Round ``round_``'s ``(N, D)`` rows.

    Peers 7-9 share a push (the collusion stage rejects them from round 2 on, with 3 rounds of history); peer 4
    points against the centre from round 3 on (its record, along the centre before, spares it the ramp).
    """
    mean = torch.randn(D, generator=torch.Generator().manual_seed(7))
    push = torch.randn(D, generator=torch.Generator().manual_seed(8))
    g = torch.Generator().manual_seed(100 + round_)
    x = mean + 0.6 * torch.randn(N, D, generator=g)
    x[7:] += 0.5 * push
    if round_ >= 3:
        x[4] = -0.2 * mean + 0.6 * torch.randn(D, generator=g)
    return x


def _ctx(round_: int) -> AggregationContext:
    return AggregationContext(senders=SENDERS, round=round_, generator=torch.Generator().manual_seed(round_),
                              own_index=0)


def _same(a: GuardResult, b: GuardResult) -> bool:
    return torch.equal(a.aggregate, b.aggregate) and a.verdicts == b.verdicts


def _through_a_file(folder: Path, guard: Guard, votes: VoteBook | None = None) -> Checkpoint:
    save_checkpoint(folder, Checkpoint(RUN, 3, torch.zeros(D), torch.zeros(D), state=capture(guard, votes)))
    ckpt = load_checkpoint(folder, run_id=RUN, numel=D)
    assert ckpt is not None
    return ckpt


def test_a_restored_guard_judges_as_one_that_never_stopped(tmp_path: Path) -> None:
    steady, stopped, fresh = build_guard("semantic"), build_guard("semantic"), build_guard("semantic")
    for r in range(3):
        steady(_rows(r), _ctx(r))
        stopped(_rows(r), _ctx(r))
    ckpt = _through_a_file(tmp_path, stopped)
    assert ckpt.state_problem is None
    resumed = build_guard("semantic")
    assert restore(ckpt.state or {}, resumed, None, numel=D, log=logging.getLogger("t")) == ["guard"]
    for r in (3, 4):
        expected = steady(_rows(r), _ctx(r))
        got = resumed(_rows(r), _ctx(r))
        assert _same(got, expected)
        assert [(v.sender, v.reason) for v in got.verdicts if not v.accepted] == [
            ("peer07", "colluding"), ("peer08", "colluding"), ("peer09", "colluding")]
    # what the state was worth: a guard that forgot it accepts the trio and weighs peer 4 by its cosine alone
    blank = fresh(_rows(3), _ctx(3))
    assert all(v.accepted for v in blank.verdicts)
    assert not torch.equal(blank.aggregate, expected.aggregate)


def test_the_state_is_bounded_and_names_its_senders() -> None:
    guard = build_guard("semantic")
    for r in range(2):
        guard(_rows(r), _ctx(r))
    state = guard.state_dict()
    assert (state["version"], state["rule"]) == (1, "semantic")
    record, history = state["state"]["direction_record"], state["state"]["collusion"]
    assert [e[:3] for e in record["entries"]] == [["peer00", s, 1] for s in SENDERS[1:]]  # never the own row
    assert [e[:3] for e in history["entries"]] == [["peer00", s, 1] for s in SENDERS]
    assert {(e[3].dtype, tuple(e[3].shape), e[4]) for e in history["entries"]} == {(torch.float64, (D,), 2)}
    sem = guard.aggregator
    assert (sem._record.max_entries, sem._collusion.history.max_entries) == (4096, 1024)  # type: ignore[attr-defined]


def test_the_saved_history_keeps_the_most_recent_pairs_that_fit_its_byte_bound() -> None:
    guard = build_guard("semantic")
    for r in range(2):
        guard(_rows(r), _ctx(r))
    full = capture(guard, None)["guard"]["state"]["collusion"]["entries"]
    assert len(full) == N  # D = 300: 2400 bytes a pair, far under the default 64 MiB
    cut = capture(guard, None, max_history_bytes=3 * 8 * D + 1)["guard"]["state"]["collusion"]["entries"]
    assert [e[1] for e in cut] == [e[1] for e in full[-3:]]  # the 3 most recently updated, in the same order
    resumed = build_guard("semantic")  # a cut history loads: the pairs left out start empty
    assert restore(capture(guard, None, max_history_bytes=3 * 8 * D + 1), resumed, None, numel=D,
                   log=logging.getLogger("t")) == ["guard"]
    assert len(resumed.state_dict()["state"]["collusion"]["entries"]) == 3
    assert capture(guard, None, max_history_bytes=8 * D - 1)["guard"]["state"]["collusion"]["entries"] == []
    # the guard's own history is not touched, and the direction record is never cut
    assert len(guard.state_dict()["state"]["collusion"]["entries"]) == N
    assert capture(guard, None, max_history_bytes=0)["guard"]["state"]["direction_record"] == \
        guard.state_dict()["state"]["direction_record"]


def test_a_rule_without_state_saves_none_and_takes_none(tmp_path: Path) -> None:
    median = build_guard("median")
    assert median.state_dict() == {"version": 1, "rule": "median", "state": None}
    semantic = build_guard("semantic")
    semantic(_rows(0), _ctx(0))
    assert median.load_state_dict(semantic.state_dict()) is False  # another --guard: nothing to take


def test_a_checkpoint_without_guard_state_loads_with_none(tmp_path: Path) -> None:
    """The previous version wrote exactly this: no ``guard_state`` key."""
    save_checkpoint(tmp_path, Checkpoint(RUN, 5, torch.ones(D), torch.zeros(D)))
    raw = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert "guard_state" not in raw
    ckpt = load_checkpoint(tmp_path, run_id=RUN, numel=D)
    assert ckpt is not None
    assert (ckpt.round, ckpt.state, ckpt.state_problem) == (5, None, None)
    assert torch.equal(ckpt.theta, torch.ones(D))


def _edit_file(folder: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    raw = torch.load(folder / "checkpoint.pt", weights_only=True)
    edit(raw)
    torch.save(raw, folder / "checkpoint.pt")


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda raw: raw["guard_state"]["guard"].update(rule="x"), "guard state digest mismatch (corrupt or edited)"),
    (lambda raw: raw.update(guard_state={"guard": {1: 2}}), "guard state holds a mapping with a key that is not a str"),
    (lambda raw: raw.update(guard_state=[1]), "guard state is a list, not a mapping"),
])
def test_an_edited_guard_state_costs_the_state_not_theta(tmp_path: Path, edit: Callable[[dict[str, Any]], None],
                                                         problem: str) -> None:
    guard = build_guard("semantic")
    guard(_rows(0), _ctx(0))
    save_checkpoint(tmp_path, Checkpoint(RUN, 1, torch.ones(D), torch.zeros(D), state=capture(guard, None)))
    _edit_file(tmp_path, edit)
    ckpt = load_checkpoint(tmp_path, run_id=RUN, numel=D)
    assert ckpt is not None
    assert (ckpt.state, ckpt.state_problem) == (None, problem)
    assert torch.equal(ckpt.theta, torch.ones(D))


def _record(state: dict[str, Any]) -> list[Any]:
    entries: list[Any] = state["guard"]["state"]["direction_record"]["entries"]
    return entries


def _history(state: dict[str, Any]) -> list[Any]:
    entries: list[Any] = state["guard"]["state"]["collusion"]["entries"]
    return entries


def _set(entries: Callable[[dict[str, Any]], list[Any]], index: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        entries(state)[0][index] = value
    return edit


HOSTILE: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("record NaN total", _set(_record, 3, math.nan), r"direction record: expected a finite number"),
    ("record cosine > 1", _set(_record, 5, 1.5), r"direction record: expected a finite number in \[-1, 1\]"),
    ("record total > terms", _set(_record, 3, 5.0), r"\|total\| 5 > terms 0 for sender .peer01."),
    ("record sender not a str", _set(_record, 1, 7), r"direction record: a name must be a str"),
    ("record round negative", _set(_record, 2, -1), r"direction record: a round must be an int >= 0"),
    ("record entry short", lambda s: _record(s).__setitem__(0, ["peer00"]), r"an entry must be \[receiver"),
    ("record pair twice", lambda s: _record(s).append(list(_record(s)[0])), r"appears twice"),
    ("record too many", lambda s: _record(s).extend([["peer00", f"x{i}", 0, 0.0, 0.0, None] for i in range(4096)]),
     r"direction record: 4105 entries, more than the 4096 kept"),
    ("history float32", _set(_history, 3, torch.zeros(D)), r"must be a 1-D float64 tensor, got torch.float32"),
    ("history 2-D", _set(_history, 3, torch.zeros(2, D, dtype=torch.float64)), r"must be a 1-D float64 tensor"),
    ("history wrong d", _set(_history, 3, torch.zeros(D + 1, dtype=torch.float64)),
     rf"has {D + 1} entries, expected {D}"),
    ("history NaN", _set(_history, 3, torch.full((D,), math.nan, dtype=torch.float64)), r"has norm nan"),
    ("history too long", _set(_history, 3, torch.full((D,), 1.0, dtype=torch.float64)), r"norm 17.3205, not a finite"),
    ("history terms 0", _set(_history, 4, 0), r"terms must be an int >= 1"),
    ("history terms str", _set(_history, 4, "1"), r"terms must be an int >= 1"),
    ("history too many", lambda s: _history(s).extend(
        [["peer00", f"x{i}", 0, torch.zeros(D, dtype=torch.float64), 1] for i in range(1024)]),
     r"collusion history: 1034 entries, more than the 1024 kept"),
    ("semantic version", lambda s: s["guard"]["state"].update(version=9), r"semantic guard: not a state of version 1"),
    ("semantic version tensor", lambda s: s["guard"]["state"].update(version=torch.tensor([1, 1])),
     r"semantic guard: not a state of version 1"),
    ("guard version tensor", lambda s: s["guard"].update(version=torch.tensor([1, 1])),
     r"guard: not a state of version 1"),
    ("record version tensor", lambda s: s["guard"]["state"]["direction_record"].update(version=torch.tensor([1, 2])),
     r"direction record: not a state of version"),
    ("history width tensor", lambda s: s["guard"]["state"]["collusion"].update(width=torch.tensor([1, 2])),
     r"collusion history: sketch width"),
    ("guard not a mapping", lambda s: s.update(guard=[]), r"guard: not a state of version 1 \(got 'list'\)"),
]


@pytest.mark.parametrize(("edit", "message"), [(e, m) for _, e, m in HOSTILE], ids=[name for name, _, _ in HOSTILE])
def test_a_hostile_guard_state_is_refused_and_changes_nothing(edit: Callable[[dict[str, Any]], None],
                                                              message: str) -> None:
    guard = build_guard("semantic")
    guard(_rows(0), _ctx(0))
    state = capture(guard, None)
    edit(state)
    target = build_guard("semantic")
    with pytest.raises(GuardStateError, match=message):
        target.load_state_dict(state["guard"], numel=D)
    empty = target.state_dict()["state"]
    assert (empty["direction_record"]["entries"], empty["collusion"]["entries"]) == ([], [])


def test_restore_logs_a_refused_state_and_the_guard_starts_empty(caplog: pytest.LogCaptureFixture) -> None:
    guard = build_guard("semantic")
    guard(_rows(0), _ctx(0))
    state = capture(guard, None)
    _set(_record, 3, math.nan)(state)
    target = build_guard("semantic")
    with caplog.at_level(logging.WARNING, logger="t"):
        assert restore(state, target, None, numel=D, log=logging.getLogger("t")) == []
    assert [r.getMessage() for r in caplog.records] == [
        "guard state of the checkpoint not used (direction record: expected a finite number in [-inf, inf], got nan):"
        " the guard's per-sender records start empty"]
    fresh = build_guard("semantic")
    assert _same(target(_rows(1), _ctx(1)), fresh(_rows(1), _ctx(1)))


def test_a_restored_vote_book_folds_the_pending_round_as_one_that_never_stopped(tmp_path: Path) -> None:
    me, voter, attacker = _ids(3)
    dht = MemoryDHT()
    steady = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    other = VoteBook(dht, RUN, voter)  # type: ignore[arg-type]
    verdicts = [SenderVerdict(voter.peer_id_b58, 0, True, "accepted"),
                SenderVerdict(attacker.peer_id_b58, 0, False, "outlier")]
    for r in range(3):
        asyncio.run(other.publish(r, verdicts))
        asyncio.run(steady.publish(r, verdicts))
        if r < 2:
            asyncio.run(steady.fold(r))
    # the checkpoint of round 2: rounds 0 and 1 folded, round 2's verdicts remembered and not yet folded
    ckpt = _through_a_file(tmp_path, build_guard("median"), steady)
    resumed = VoteBook(dht, RUN, me)  # type: ignore[arg-type]
    assert restore(ckpt.state or {}, build_guard("median"), resumed, numel=D,
                   log=logging.getLogger("t")) == ["reputation"]
    expected, got = asyncio.run(steady.fold(2)), asyncio.run(resumed.fold(2))
    assert got == expected
    assert got is not None
    assert got.standings[attacker.peer_id_b58].score == 0.0625  # 0.5 → 0.25 → 0.125 → 0.0625
    assert resumed.reputation.state_dict() == steady.reputation.state_dict()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: s["reputation"]["senders"][next(iter(s["reputation"]["senders"]))].update(score=math.nan),
     "score must be a finite number"),
    (lambda s: s["pending"]["judged"].update(x="yes"), "pending verdicts must map"),
    (lambda s: s["pending"]["judged"].update({f"x{i}": True for i in range(256)}), "at most 256"),
    (lambda s: s["pending"].update(edge=["nobody"]), "edge rows must be a list of senders we accepted"),
    (lambda s: s.update(version=3), "not a state of version 1"),
    (lambda s: s.update(version=torch.tensor([1, 1])), "not a state of version 1"),
    (lambda s: s["reputation"].update(version=torch.tensor([2, 2])), "not a Reputation state of version 2"),
    (lambda s: s["pending"].update(round=-1), "votes: pending: a round must be an int >= 0, got -1"),
    (lambda s: s["pending"].update(round=True), "votes: pending: a round must be an int >= 0, got True"),
])
def test_a_hostile_vote_book_state_is_refused_and_changes_nothing(edit: Callable[[dict[str, Any]], None],
                                                                  message: str) -> None:
    me, a = _ids(2)
    book = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    asyncio.run(book.publish(0, [SenderVerdict(a.peer_id_b58, 0, False, "outlier")]))
    asyncio.run(book.fold(0))
    book.remember(1, [SenderVerdict(a.peer_id_b58, 1, True, "accepted")])
    state = book.state_dict()
    edit(state)
    target = VoteBook(MemoryDHT(), RUN, me)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(state)
    assert target.state_dict() == {"version": 1, "reputation": {"version": 2, "last_round": None, "senders": {}},
                                   "pending": None}
