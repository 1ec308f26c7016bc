"""``Peer._unwelcome``: the one rule for whose updates a peer no longer takes (banned, excluded, left).

helper-48: ``_take_late`` had its own copy of the rule that ``communicate`` and ``receive`` spelled out inline; all
three now call this method, and the late-row tests (``test_late.py``) pass unchanged.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

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
