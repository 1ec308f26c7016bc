# ruff: noqa: S101 - a test: assert is how it checks
"""NAT traversal through a libp2p circuit relay, between real hosts in Linux network namespaces.

Topology (``netns_lab``; created by the test, removed in its teardown even on failure): a bridge with the
bootstrap node (7.77.0.10) and two public peers (7.77.0.11, .12), and a NAT router (7.77.0.20 on the bridge,
192.168.77.1 inside) in front of one volunteer (192.168.77.2). The router forwards and masquerades (``iptables -t
nat -A POSTROUTING -o eth0 -j MASQUERADE``); the volunteer's only route is through it, and no public host has a
route to 192.168.77.0/24, so nobody can dial the volunteer: it can only dial out.

The volunteer runs with the defaults a volunteer at home gets (``--use-relay --use-auto-relay``) plus
``--reachability private`` (AutoNAT would need more public peers to observe and dial back the router's address
than the lab has); the public hosts run with ``--reachability public`` so that their relay service starts
at once. What is asserted:

1. the volunteer's ``p2pd`` announces a relayed ``/p2p-circuit`` address on a public host (its ``network`` event);
2. every public peer fetched, verified and accepted the volunteer's updates (``verdict`` events with its PeerID and
   ``accepted``), and the volunteer applied theirs (``round`` events with ``accepted >= 1``);
3. then the router drops every packet from the volunteer except those to one relay (the bootstrap node or a public
   peer holding its reservation), which kills its direct connections to the others: from then on they can only
   reach it through the relay, and the exchange must go on in rounds begun after the cut (the public peers accept
   its updates, it applies theirs in ``ROUNDS_AFTER_CUT`` rounds), with ``/p2p-circuit`` connections in the
   ``network`` events of a public peer and of the volunteer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_lab import NatSite, NetnsSwarm, in_ns, iptables_unavailable, lab_and_swarm, netns_unavailable

from p2p_guard.swarm.dht import relay_of

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.long]

N_PUBLIC = 2  # public peers 0 and 1; the NATed volunteer is peer 2
NATED = N_PUBLIC
BOOT_HOST = 10
#: The bridge's addresses. Not a private range: libp2p builds relayed addresses only from a relay's public
#: addresses (autorelay drops private ones), so with 10.x relays the volunteer would announce none. Nothing leaves
#: the namespaces, so the range is never routed anywhere.
SUBNET = "7.77.0"
ROUTER_HOST = 20
PEER_ARGS = [
    "--task", "digits", "--run-id", "netns-nat", "--num-peers", str(N_PUBLIC + 1), "--min-peers", str(N_PUBLIC + 1),
    "--start-peers", str(N_PUBLIC + 1), "--rounds", "0", "--inner-steps", "10", "--commit-timeout-s", "30",
    "--fetch-timeout-s", "20", "--join-timeout-s", "240", "--no-progress", "--no-nat-port-map",
]  # fmt: skip
PUBLIC_ARGS = ["--reachability", "public"]
NATED_ARGS = ["--reachability", "private", "--use-relay", "--use-auto-relay"]
PHASE_TIMEOUT_S = 360.0  # libp2p reserves a discovered relay 3 min after it starts looking (bootDelay)
ROUNDS_AFTER_CUT = 2


@pytest.fixture
def nat_swarm(tmp_path: Path) -> Iterator[tuple[NetnsSwarm, NatSite]]:
    """The lab (bridge, bootstrap, public peers, router, NATed host) and a swarm in it; all removed at the end."""
    reason = netns_unavailable() or iptables_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with lab_and_swarm(tmp_path, PEER_ARGS, boot_host=BOOT_HOST, subnet=SUBNET) as swarm:
        swarm.lab.create([BOOT_HOST, *(swarm.peer_host(i) for i in range(N_PUBLIC))])
        site = swarm.lab.add_nat(ROUTER_HOST)
        yield swarm, site


def _peer_id(swarm: NetnsSwarm, index: int) -> str | None:
    ready = swarm.events(index, "ready")
    return ready[0]["peer_id"] if ready else None


def _accepted_from(swarm: NetnsSwarm, index: int, sender: str, after_round: int = -1) -> list[dict]:
    return [v for v in swarm.events(index, "verdict") if v["sender"] == sender and v["accepted"]
            and v["round"] > after_round]


def _relay_addresses(swarm: NetnsSwarm, index: int) -> list[str]:
    return sorted({m for e in swarm.events(index, "network") for m in e["maddrs"] if relay_of(m)})


@pytest.mark.timeout(900)
def test_nated_volunteer_trains_with_the_swarm_through_a_relay(nat_swarm: tuple[NetnsSwarm, NatSite]) -> None:
    """A volunteer behind NAT gets a relayed address, and it and the public peers apply each other's updates."""
    swarm, site = nat_swarm
    started = time.monotonic()
    maddr = swarm.start_bootstrap(PUBLIC_ARGS)
    assert maddr.startswith(f"/ip4/{SUBNET}.{BOOT_HOST}/tcp/"), maddr
    # Nobody on the bridge can reach the volunteer's address (the probe is the property the test relies on).
    unreachable = in_ns(swarm.lab.host_ns(BOOT_HOST), "ping", "-c", "1", "-W", "1", site.inner_address, check=False)
    assert unreachable.returncode != 0, "the NATed host is reachable from the bridge: the lab is wrong"
    for i in range(N_PUBLIC):
        swarm.start_peer(i, maddr, extra=PUBLIC_ARGS)
    swarm.start_peer(NATED, maddr, ns=site.inner_ns, address=site.inner_address, extra=NATED_ARGS)
    public = list(range(N_PUBLIC))

    swarm.wait(lambda: all(_peer_id(swarm, i) for i in [*public, NATED]), PHASE_TIMEOUT_S, "every peer ready")
    nated_id = _peer_id(swarm, NATED)
    assert nated_id is not None
    ids = {i: _peer_id(swarm, i) for i in public}

    def exchanged(after_round: int = -1, rounds: int = 1) -> bool:
        nated_rounds = [e for e in swarm.events(NATED, "round") if e["accepted"] >= 1 and e["round"] > after_round]
        return len(nated_rounds) >= rounds and all(_accepted_from(swarm, i, nated_id, after_round) for i in public)

    swarm.wait(lambda: bool(_relay_addresses(swarm, NATED)), PHASE_TIMEOUT_S, "a relayed address of the volunteer")
    swarm.wait(lambda: exchanged(rounds=2), PHASE_TIMEOUT_S, "the volunteer's and the others' updates applied")
    phase1_s = time.monotonic() - started

    # The cut: from now on the volunteer can only talk to the relay directly; the others must come through it.
    relay_ids = sorted({relay_of(m) for m in _relay_addresses(swarm, NATED)} - {None})
    relay_hosts = [h for h, pid in [(BOOT_HOST, _bootstrap_id(swarm)), *((swarm.peer_host(i), ids[i]) for i in public)]
                   if pid in relay_ids]
    assert relay_hosts, f"the relay {relay_ids} is not one of the public hosts"
    relay_ip = f"{SUBNET}.{relay_hosts[0]}"
    for rule in (["-A", "FORWARD", "-i", "eth1", "-d", relay_ip, "-j", "ACCEPT"],
                 ["-A", "FORWARD", "-i", "eth1", "-j", "DROP"]):
        in_ns(site.router_ns, "iptables", *rule)
    cut_at = time.time()
    # Rounds begun after the cut: the one under way may still have used the direct connections.
    cut_round = max(max(swarm.rounds(i), default=0) for i in [*public, NATED]) + 1
    swarm.wait(lambda: exchanged(after_round=cut_round, rounds=ROUNDS_AFTER_CUT), PHASE_TIMEOUT_S,
               "the exchange to go on through the relay only")
    # A peer writes its connections in a network event every few seconds, so the relayed one shows a moment
    # after the updates that came through it.
    swarm.wait(lambda: any(c for i in public for e in swarm.events(i, "network") for c in e["relayed"]),
               PHASE_TIMEOUT_S, "a public peer's network event showing its relayed connection")
    swarm.check_alive()

    figures = {
        "nated_peer": nated_id,
        "public_peers": ids,
        "bootstrap": _bootstrap_id(swarm),
        "nated_relay_addresses": _relay_addresses(swarm, NATED),
        "relays": relay_ids,
        "relay_ip": relay_ip,
        "nated_network_events": swarm.events(NATED, "network"),
        "public_relayed_connections": {i: [c for e in swarm.events(i, "network") for c in e["relayed"]]
                                       for i in public},
        "nated_rounds": [{k: e[k] for k in ("round", "accepted", "rejected", "fetched", "time")}
                         for e in swarm.events(NATED, "round")],
        "accepted_from_nated": {i: [v["round"] for v in _accepted_from(swarm, i, nated_id)] for i in public},
        "accepted_from_nated_after_cut": {i: [v["round"] for v in _accepted_from(swarm, i, nated_id, cut_round)]
                                          for i in public},
        "cut_at": cut_at,
        "cut_round": cut_round,
        "phase1_s": phase1_s,
        "wall_s": time.monotonic() - started,
    }
    (swarm.workdir / "figures.json").write_text(json.dumps(figures, indent=2, default=str))
    print(json.dumps(figures, indent=2, default=str))  # noqa: T201 - the measured figures, shown with -s
    detail = json.dumps(figures, default=str)
    assert all(relay_of(m) in relay_ids for m in figures["nated_relay_addresses"]), detail
    # After the cut, the public peers reached the volunteer through a relay (a /p2p-circuit connection).
    assert any(figures["public_relayed_connections"].values()), detail
    assert any(e["relayed"] for e in swarm.events(NATED, "network") if e["time"] > cut_at), detail


def _bootstrap_id(swarm: NetnsSwarm) -> str:
    return (swarm.workdir / "bootstrap.addr").read_text().split()[0].rsplit("/p2p/", 1)[1]
