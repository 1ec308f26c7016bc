"""The NAT-traversal settings: PeerConfig / BootstrapConfig fields, NetworkOptions and the p2pd flags they give."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_guard.cli.bootstrap_cmd import BootstrapConfig
from p2p_guard.swarm.config import PeerConfig, config_from_mapping

dht = pytest.importorskip("p2p_guard.swarm.dht")

RELAY = "/ip4/7.77.0.10/tcp/31337/p2p/12D3KooWCxMrFcRpfcE1M5AikWrqFtzycJDfGTtedpMfv758q1nQ"


def test_volunteer_defaults_reach_through_relays() -> None:
    config = PeerConfig()
    assert (config.use_relay, config.use_auto_relay, config.nat_port_map, config.reachability) == (
        True, True, True, "auto")
    assert config.relays == ()
    assert BootstrapConfig().use_relay and BootstrapConfig().reachability == "auto"


@pytest.mark.parametrize("changes", [{"reachability": "nat"}, {"use_relay": False},
                                     {"use_auto_relay": False, "relays": (RELAY,)}])
def test_bad_network_settings_are_refused(changes: dict) -> None:
    with pytest.raises(ValueError):
        PeerConfig(**changes)
    with pytest.raises(ValueError):
        BootstrapConfig(reachability="nat")


def test_relays_from_toml_string_or_list() -> None:
    assert config_from_mapping({"relays": RELAY}).relays == (RELAY,)
    assert config_from_mapping({"relays": [RELAY]}).to_dict()["relays"] == [RELAY]


def test_relay_of_reads_the_relay_peer_id() -> None:
    relayed = f"{RELAY}/p2p-circuit/p2p/12D3KooWGJs7jVuKgSvK9Pks8vn1itG2shAGiDSiuWqtRZueLAiN"
    assert dht.relay_of(relayed) == RELAY.rsplit("/", 1)[1]
    assert dht.is_relayed(relayed) and not dht.is_relayed(RELAY)
    assert dht.relay_of(RELAY) is None
    assert dht.relay_of("/p2p-circuit") is None


def test_network_options_become_p2pd_flags() -> None:
    kwargs = dht._p2p_network_kwargs(dht.NetworkOptions(use_auto_relay=True, reachability="private",
                                                         relays=(RELAY,)))
    assert kwargs == {"use_relay": True, "use_auto_relay": True, "nat_port_map": False,
                      "force_reachability": "private", "trusted_relays": [RELAY]}
    assert dht._p2p_network_kwargs(dht.NetworkOptions())["force_reachability"] is None
    assert dht._p2p_class(dht.NetworkOptions()) is dht.P2P
    static = dht._p2p_class(dht.NetworkOptions(use_auto_relay=True, relays=(RELAY,)))
    args = static._make_process_args("p2pd", autoRelay=True, trustedRelays=RELAY)
    assert "-relayDiscovery=0" in args and f"-trustedRelays={RELAY}" in args
    with pytest.raises(ValueError):
        dht.NetworkOptions(use_auto_relay=True, relays=("/ip4/1.2.3.4/tcp/1",))  # no /p2p/PEERID
    with pytest.raises(ValueError):
        dht.NetworkOptions(reachability="maybe")


def test_a_loopback_peer_asks_no_router_for_a_port_and_seeks_no_relay() -> None:
    from p2p_guard.swarm.config import PeerConfig
    from p2p_guard.swarm.peer import network_options

    local = network_options(PeerConfig(host="127.0.0.1"))
    assert (local.nat_port_map, local.use_auto_relay, local.use_relay) == (False, False, True)
    public = network_options(PeerConfig(host="0.0.0.0"))
    assert (public.nat_port_map, public.use_auto_relay) == (True, True)
    relayed = network_options(PeerConfig(host="127.0.0.1", relays=(RELAY,)))
    assert (relayed.nat_port_map, relayed.use_auto_relay, relayed.relays) == (False, True, (RELAY,))


class _FakeP2P:
    """Stands in for hivemind's P2P: ``create`` builds ``cls()`` (as hivemind does), then fails or returns it."""

    fail = True
    shutdowns: list[_FakeP2P] = []

    @classmethod
    async def create(cls, **_kwargs: object) -> _FakeP2P:
        self = cls()
        if cls.fail:
            raise dht.P2PDaemonError("Daemon failed to start: failed to connect to bootstrap peers")
        return self

    async def shutdown(self) -> None:
        _FakeP2P.shutdowns.append(self)


def test_a_daemon_that_fails_at_start_is_shut_down_in_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # otherwise asyncio reaps p2pd after asyncio.run closed the loop: "Loop <...> that handles pid N is closed"
    import asyncio

    monkeypatch.setattr(dht, "_p2p_class", lambda _network: _FakeP2P)
    monkeypatch.setattr(_FakeP2P, "shutdowns", [])
    with pytest.raises(dht.P2PDaemonError, match=r"^cannot reach any of the --initial-peers"):
        asyncio.run(dht.start_dht(identity_path=None, initial_peers=[RELAY], host="127.0.0.1"))
    assert len(_FakeP2P.shutdowns) == 1
    assert isinstance(_FakeP2P.shutdowns[0], _FakeP2P)

    monkeypatch.setattr(_FakeP2P, "fail", False)
    monkeypatch.setattr(_FakeP2P, "shutdowns", [])
    p2p = asyncio.run(dht._create_p2p(_FakeP2P))
    assert isinstance(p2p, _FakeP2P)
    assert _FakeP2P.shutdowns == []


def test_a_damaged_known_peers_file_gives_its_readable_lines(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 in known_peers.txt stopped the peer at start (peer stopped: 'utf-8' codec ...)."""
    from p2p_guard.swarm.peer import KNOWN_PEERS_FILE, _known_peers

    (tmp_path / KNOWN_PEERS_FILE).write_bytes(b"\xff\xfe\x00garbage\n/ip4/garbage\n" + RELAY.encode() + b"\n")
    assert _known_peers(str(tmp_path), ()) == [RELAY]
    assert _known_peers(str(tmp_path), (RELAY,)) == []
    assert _known_peers(str(tmp_path / "none"), ()) == []
