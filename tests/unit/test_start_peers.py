"""``start_peers`` below ``min_peers`` is refused (helper-41: ``peer --start-peers 1 --min-peers 3`` was accepted,
so the first round started alone and every later one paused below 3)."""

from __future__ import annotations

import pytest

from p2p_guard.cli.main import main
from p2p_guard.swarm.config import PeerConfig

MADDR = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def test_start_peers_below_min_peers_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^start_peers must be >= min_peers; got start_peers=1, min_peers=3$"):
        PeerConfig(start_peers=1, min_peers=3)
    assert PeerConfig(start_peers=3, min_peers=3).start_peers == 3
    assert PeerConfig(start_peers=None, min_peers=3).start_peers is None


def test_on_the_command_line_it_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["peer", "--initial-peers", MADDR, "--start-peers", "1", "--min-peers", "3"]) == 2
    assert capsys.readouterr().err == ("p2p-guard peer: error: command line: start_peers must be >= min_peers; "
                                       "got start_peers=1, min_peers=3\n")
