"""``Peer._unwelcome``: the one rule for whose updates a peer no longer takes (banned, excluded, left).

helper-48: ``_take_late`` had its own copy of the rule that ``communicate`` and ``receive`` spelled out inline; all
three now call this method, and the late-row tests (``test_late.py``) pass unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.peer import BANNED_DETAIL, EXCLUDED_DETAIL, LEFT_DETAIL, Peer


def fake_peer(*, banned: tuple[str, ...] = (), left: tuple[str, ...] = ()) -> Any:
    peer = Peer.__new__(Peer)
    peer.banned = dict.fromkeys(banned)  # type: ignore[arg-type]
    peer.departures = SimpleNamespace(left=set(left))  # type: ignore[assignment]
    peer.log = logging.LoggerAdapter(logging.getLogger("test_unwelcome"), {})  # type: ignore[assignment]
    return peer


def test_the_reasons_are_the_verdict_details() -> None:
    assert (BANNED_DETAIL, EXCLUDED_DETAIL, LEFT_DETAIL) == (
        "banned: equivocation proof", "excluded by our reputation", "left the swarm")


@pytest.mark.parametrize(("sender", "departed", "why"), [
    ("b", True, "banned: equivocation proof"),
    ("bx", True, "banned: equivocation proof"),  # banned and excluded: the proof comes first
    ("x", True, "excluded by our reputation"),
    ("xl", True, "excluded by our reputation"),
    ("l", True, "left the swarm"),
    ("l", False, None),  # communicate keeps a departed sender until its close gate
    ("bl", False, "banned: equivocation proof"),
    ("ok", True, None),
])
def test_precedence_and_the_departed_switch(sender: str, departed: bool, why: str | None) -> None:
    peer = fake_peer(banned=("b", "bx", "bl"), left=("l", "xl", "bl"))
    assert peer._unwelcome(sender, frozenset({"x", "bx", "xl"}), departed=departed) == why


def test_without_exclusions_only_bans_and_departures_count() -> None:
    peer = fake_peer(banned=("b",), left=("l",))
    assert [peer._unwelcome(s) for s in ("b", "l", "x")] == [BANNED_DETAIL, LEFT_DETAIL, None]


@pytest.mark.parametrize(("enforced", "taken"), [(True, ["ok"]), (False, ["ok", "x"])])
def test_receive_drops_the_senders_our_reputation_excludes(monkeypatch: pytest.MonkeyPatch, enforced: bool,
                                                           taken: list[str]) -> None:
    """``receive`` (the aggregate of a round we skipped) judged an excluded sender's update; ``communicate`` never
    did. It now reads the same exclusions (``Peer._exclusions``), and only when exclusion is enforced."""
    peer = fake_peer()
    peer.me = "me"
    peer.allowed = None
    peer.config = SimpleNamespace(run_id="r", commit_phase=1.0, reputation_exclusion=enforced)
    peer.votes = SimpleNamespace(excluded={"x"})

    async def read(_key: Any) -> dict[str, bytes]:
        return {"ok": b"1", "x": b"2", "me": b"3"}

    peer.dht = SimpleNamespace(read=read)
    peer._watch_commits = lambda _raw: None  # type: ignore[method-assign]
    opened: list[list[str]] = []

    def open_commits(commits: dict[str, bytes], _phase: float) -> tuple[dict[str, Any], list[Any]]:
        opened.append(sorted(commits))
        return {}, []

    async def fetch_sample(*_args: Any) -> tuple[dict[str, Any], list[Any]]:
        return {}, []

    monkeypatch.setattr(peer_module, "open_commits", open_commits)
    peer._fetch_sample = fetch_sample  # type: ignore[method-assign]
    peer._record_rejections = lambda *_a: None  # type: ignore[method-assign]
    outcome = asyncio.run(peer.receive(3, None, asyncio.Event()))  # type: ignore[arg-type]
    assert opened == [taken]
    assert outcome.aggregate is None


def test_no_exclusions_without_votes_or_when_exclusion_is_off() -> None:
    peer = fake_peer()
    peer.votes = None
    peer.config = SimpleNamespace(reputation_exclusion=True)
    assert peer._exclusions() == frozenset()
    peer.votes = SimpleNamespace(excluded={"x", "y"})
    assert peer._exclusions() == frozenset({"x", "y"})
    peer.config = SimpleNamespace(reputation_exclusion=False)
    assert peer._exclusions() == frozenset()
