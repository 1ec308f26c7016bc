"""Timing options of the round that contradict each other are refused in ``PeerConfig`` (helper-48:
``peer --grace-s 1000 --commit-timeout-s 1`` was accepted, so the commit phase could never close on quorum +
grace; a close gate as long as the fetch deadline let receivers give up on a sender before it revealed)."""

from __future__ import annotations

import pytest

from p2p_guard.cli.main import main
from p2p_guard.swarm.config import PeerConfig

MADDR = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def test_a_grace_window_as_long_as_the_commit_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^grace_s must be < commit_timeout_s \(a grace window that long never ends "
                                         r"before the commit deadline\); got grace_s=1000, commit_timeout_s=1$"):
        PeerConfig(grace_s=1000, commit_timeout_s=1)
    with pytest.raises(ValueError, match=r"got grace_s=5.0, commit_timeout_s=5.0$"):
        PeerConfig(grace_s=5.0, commit_timeout_s=5.0)
    assert PeerConfig(grace_s=4.9, commit_timeout_s=5.0).grace_s == 4.9


def test_a_close_gate_as_long_as_the_fetch_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^reveal_wait_s must be < fetch_timeout_s \(a sender that waits its whole "
                                         r"close gate would reveal after its receivers' fetch deadline\); "
                                         r"got reveal_wait_s=30.0, fetch_timeout_s=30.0$"):
        PeerConfig(reveal_wait_s=30.0)
    with pytest.raises(ValueError, match=r"got reveal_wait_s=10.0, fetch_timeout_s=2.0$"):
        PeerConfig(fetch_timeout_s=2.0)
    assert PeerConfig(reveal_wait_s=29.5).reveal_wait_s == 29.5


def test_the_defaults_are_consistent() -> None:
    config = PeerConfig()
    assert (config.grace_s, config.commit_timeout_s, config.reveal_wait_s, config.fetch_timeout_s) == \
        (2.0, 60.0, 10.0, 30.0)


def test_replace_checks_the_relation_again() -> None:
    with pytest.raises(ValueError, match=r"^grace_s must be < commit_timeout_s"):
        PeerConfig().replace(commit_timeout_s=2.0)


@pytest.mark.parametrize(("flags", "message"), [
    (["--grace-s", "1000", "--commit-timeout-s", "1"],
     "grace_s must be < commit_timeout_s (a grace window that long never ends before the commit deadline); "
     "got grace_s=1000.0, commit_timeout_s=1.0"),
    (["--fetch-timeout-s", "5"],
     "reveal_wait_s must be < fetch_timeout_s (a sender that waits its whole close gate would reveal after its "
     "receivers' fetch deadline); got reveal_wait_s=10.0, fetch_timeout_s=5.0"),
])
def test_on_the_command_line_it_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], flags: list[str],
                                                       message: str) -> None:
    assert main(["peer", "--initial-peers", MADDR, *flags]) == 2
    assert capsys.readouterr().err == f"p2p-guard peer: error: command line: {message}\n"
