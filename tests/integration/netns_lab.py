# ruff: noqa: S101 - test helpers: assert is how they check
"""Hosts in Linux network namespaces for integration tests: a bridge, hosts on it, a NAT router, and processes.

Used by ``test_partition_netns.py`` (6 peers on one bridge, ports cut and healed) and ``test_nat_relay.py`` (a
volunteer behind a NAT router). Everything a :class:`Lab` creates lives in namespaces named ``p2pg-<tag>-...``;
:meth:`Lab.close` deletes them (their veths, the bridge and the router's iptables rules go with them). No traffic
leaves those namespaces: the root namespace gets no interface, route or rule.

Public hosts are ``<subnet>.<host>/24`` on the bridge (``10.77.0`` unless a test picks another /24). A NAT router (:meth:`Lab.add_nat`) is a host on the bridge
too, with a second interface to a private subnet ``192.168.<n>.0/24`` where the NATed host sits (``.2``, default
route through the router at ``.1``); the router forwards and masquerades (``iptables -t nat -A POSTROUTING -o eth0
-j MASQUERADE``), and no public host has a route to the private subnet, so nobody can dial the NATed host.

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN): :func:`netns_unavailable` and :func:`iptables_unavailable` probe
by trying and say why not, for ``pytest.skip``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from p2p_guard.simulation.events import read_events
from p2p_guard.simulation.orchestrator import run_env
from p2p_guard.simulation.processes import ManagedProcess, find_marked_processes, launch, stop_processes

SUBNET = "10.77.0"
READY_TIMEOUT_S = 240.0


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS`` (iproute2) and return its result; raise with its stderr if ``check`` and it failed."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)  # noqa: S603,S607
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def in_ns(ns: str, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in namespace ``ns`` (``ip netns exec``); raise with its stderr if ``check`` and it failed."""
    done = subprocess.run(["ip", "netns", "exec", ns, *command],  # noqa: S603,S607
                          capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"[{ns}] {' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


@contextmanager
def _probe_ns() -> Iterator[str]:
    name = f"p2pg-probe-{uuid.uuid4().hex[:8]}"
    ip("netns", "add", name)
    try:
        yield name
    finally:
        ip("netns", "del", name, check=False)


def netns_unavailable() -> str | None:
    """Why this machine cannot run namespace tests (None: it can): probes by creating and deleting a namespace."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    try:
        with _probe_ns() as probe:
            veth = ip("-n", probe, "link", "add", "pv0", "type", "veth", "peer", "name", "pv1", check=False)
            if veth.returncode != 0:
                return f"cannot create a veth pair in a network namespace: {veth.stderr.strip()}"
            run = in_ns(probe, sys.executable, "-c", "pass", check=False)
            if run.returncode != 0:
                return f"cannot run a process in a network namespace (`ip netns exec`): {run.stderr.strip()}"
    except RuntimeError as e:
        return f"cannot create a network namespace ({e})"
    return None


def iptables_unavailable() -> str | None:
    """Why a NAT router cannot be built here (None: it can): tries a MASQUERADE rule in a scratch namespace."""
    if shutil.which("iptables") is None:
        return "iptables is not installed (Debian: apt-get install iptables)"
    with _probe_ns() as probe:
        done = in_ns(probe, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "lo", "-j", "MASQUERADE", check=False)
        if done.returncode != 0:
            return f"cannot add an iptables MASQUERADE rule in a namespace: {done.stderr.strip()}"
        fwd = in_ns(probe, "sysctl", "-qw", "net.ipv4.ip_forward=1", check=False)
        if fwd.returncode != 0:
            return f"cannot enable IPv4 forwarding in a namespace: {fwd.stderr.strip()}"
    return None


@dataclass
class NatSite:
    """A NAT router on the bridge and the private host behind it (see :meth:`Lab.add_nat`)."""

    router_ns: str
    router_public: str  # the router's address on the bridge, what the others see as the NATed host's address
    inner_ns: str
    inner_address: str  # the NATed host's own (private) address


@dataclass
class Lab:
    """A bridge namespace and one namespace per host, joined by veth pairs; everything removed by :meth:`close`."""

    tag: str
    subnet: str = SUBNET  # the bridge's /24, as "a.b.c"
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge_ns(self) -> str:
        """Namespace of the bridge."""
        return f"p2pg-{self.tag}-br"

    def host_ns(self, host: int) -> str:
        """Namespace of host ``host`` (its address is ``subnet``.``host``)."""
        return f"p2pg-{self.tag}-h{host}"

    def port(self, host: int) -> str:
        """The bridge-side end of host ``host``'s veth pair (taking it down cuts the host off)."""
        return f"b{self.tag}{host}"

    def _add_ns(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def create(self, hosts: Sequence[int]) -> None:
        """Create the bridge and, for each host, its namespace, veth pair and address."""
        self._add_ns(self.bridge_ns)
        ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for host in hosts:
            self.add_host(host)

    def add_host(self, host: int) -> str:
        """Add host ``host`` on the bridge (namespace, veth pair, address ``subnet``.``host``); return its namespace."""
        ns = self.host_ns(host)
        self._add_ns(ns)
        # Created inside the bridge's namespace, the host end then moved: nothing touches the root namespace.
        ip("-n", self.bridge_ns, "link", "add", self.port(host), "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("-n", self.bridge_ns, "link", "set", self.port(host), "master", "br0", "up")
        ip("-n", ns, "addr", "add", f"{self.subnet}.{host}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        return ns

    def add_nat(self, router_host: int, private_net: int = 77) -> NatSite:
        """Add a NAT router (host ``router_host`` on the bridge) and a host behind it, on 192.168.``private_net``.0/24.

        The router has ``eth0`` on the bridge and ``eth1`` to the private host, forwards IPv4 and masquerades what
        leaves ``eth0``. The private host's only route is its default route through the router.
        """
        router = self.add_host(router_host)
        inner = f"p2pg-{self.tag}-nat{router_host}"
        self._add_ns(inner)
        private = f"192.168.{private_net}"
        ip("-n", router, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", inner)
        ip("-n", router, "addr", "add", f"{private}.1/24", "dev", "eth1")
        ip("-n", router, "link", "set", "eth1", "up")
        ip("-n", inner, "addr", "add", f"{private}.2/24", "dev", "eth0")
        ip("-n", inner, "link", "set", "eth0", "up")
        ip("-n", inner, "route", "add", "default", "via", f"{private}.1")
        in_ns(router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        in_ns(router, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "eth0", "-j", "MASQUERADE")
        return NatSite(router_ns=router, router_public=f"{self.subnet}.{router_host}", inner_ns=inner,
                       inner_address=f"{private}.2")

    def set_port(self, host: int, up: bool) -> None:
        """Bring host ``host``'s bridge port up or down (down: its packets go nowhere, both ways)."""
        ip("-n", self.bridge_ns, "link", "set", self.port(host), "up" if up else "down")

    def close(self) -> list[str]:
        """Delete every namespace created (their veths and the bridge go with them); return those that failed."""
        failed = []
        for name in reversed(self.namespaces):
            done = ip("netns", "del", name, check=False)
            if done.returncode != 0:
                failed.append(f"{name}: {done.stderr.strip()}")
        self.namespaces.clear()
        return failed

    def remaining(self) -> list[str]:
        """Namespaces of this lab that still exist."""
        return [n for n in ip("netns", "list", check=False).stdout.split() if n.startswith(f"p2pg-{self.tag}")]


def entry() -> list[str]:
    """The ``p2p-guard`` program: this Python running ``p2p_guard.cli.main``."""
    return [sys.executable, "-m", "p2p_guard.cli.main"]


class NetnsSwarm:
    """The bootstrap node and the peers, each run in its namespace by ``ip netns exec``.

    Args:
        workdir: where keys, logs, event files and snapshots go (also the run marker of every process).
        lab: the namespaces.
        peer_args: arguments every peer gets (task, run id, timing).
        boot_host: the bootstrap node's host number on the bridge.
    """

    def __init__(self, workdir: Path, lab: Lab, peer_args: Sequence[str], *, boot_host: int = 10) -> None:
        self.workdir = workdir
        self.lab = lab
        self.peer_args = list(peer_args)
        self.boot_host = boot_host
        self.env = run_env(workdir)
        self.procs: dict[str, ManagedProcess] = {}

    def peer_host(self, index: int) -> int:
        """Host number (last address byte) of peer ``index`` on the bridge: right after the bootstrap node."""
        return self.boot_host + 1 + index

    def start_bootstrap(self, extra: Sequence[str] = ()) -> str:
        """Start the bootstrap node on its own host; return its multiaddr."""
        addr = self.workdir / "bootstrap.addr"
        command = ["ip", "netns", "exec", self.lab.host_ns(self.boot_host), *entry(), "bootstrap",
                   "--identity", str(self.workdir / "bootstrap.key"), "--host", f"{self.lab.subnet}.{self.boot_host}",
                   "--port", "31337", "--address-file", str(addr), *extra]
        self.procs["bootstrap"] = launch("bootstrap", command, log_path=self.workdir / "bootstrap.log", env=self.env)
        self.wait(lambda: addr.exists() and addr.read_text().strip() != "", READY_TIMEOUT_S, "the bootstrap address")
        return addr.read_text().split()[0]

    def start_peer(self, index: int, maddr: str, *, ns: str | None = None, address: str | None = None,
                   extra: Sequence[str] = ()) -> None:
        """Start peer ``index`` listening on port 31400 of its host (default: its own host on the bridge)."""
        name = f"peer{index}"
        ns = ns if ns is not None else self.lab.host_ns(self.peer_host(index))
        address = address if address is not None else f"{self.lab.subnet}.{self.peer_host(index)}"
        command = ["ip", "netns", "exec", ns, *entry(), "peer",
                   "--initial-peers", maddr, "--peer-index", str(index), *self.peer_args,
                   "--identity", str(self.workdir / f"{name}.key"), "--host", address,
                   "--port", "31400", "--events", str(self.events_path(index)),
                   "--snapshot-dir", str(self.snapshot_dir(index)), *extra]
        self.procs[name] = launch(name, command, log_path=self.workdir / f"{name}.log", env=self.env)

    def events_path(self, index: int) -> Path:
        """Event file of peer ``index``."""
        return self.workdir / f"peer{index}.jsonl"

    def snapshot_dir(self, index: int) -> Path:
        """Snapshot folder of peer ``index``."""
        return self.workdir / f"peer{index}.snapshots"

    def events(self, index: int, kind: str) -> list[dict]:
        """Events of one kind written so far by peer ``index`` (a line still being written is skipped)."""
        return [e for e in read_events(self.events_path(index)) if e.get("event") == kind]

    def rounds(self, index: int) -> list[int]:
        """Rounds peer ``index`` has completed, in order."""
        return [e["round"] for e in self.events(index, "round")]

    def log(self, name: str) -> str:
        """The log file of process ``name``."""
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def check_alive(self) -> None:
        """Fail at once (with its log) if some process of the swarm has exited."""
        for name, proc in self.procs.items():
            if proc.returncode() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode()}:\n{self.log(name)[-3000:]}")

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll ``predicate`` every 0.5 s until true; fail (with every log's tail) at ``timeout_s`` or an exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            self.check_alive()
            time.sleep(0.5)
        tails = "\n".join(f"--- {name}\n{self.log(name)[-2000:]}" for name in self.procs)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")

    def stop(self) -> list[int]:
        """Stop every process group started, then kill any process of the run left; return the leftovers' pids."""
        stop_processes(list(self.procs.values()))
        leftovers = find_marked_processes(str(self.workdir))
        for proc in leftovers:
            proc.kill()
        return [p.pid for p in leftovers]


@contextmanager
def lab_and_swarm(workdir: Path, peer_args: Sequence[str], *, boot_host: int = 10,
                  subnet: str = SUBNET) -> Iterator[NetnsSwarm]:
    """A fresh :class:`Lab` (nothing created yet) and a :class:`NetnsSwarm` in it, torn down whatever happens.

    Teardown: every process stopped (process groups, then anything carrying the run marker), then every namespace
    deleted; it fails if a process or a namespace is left.
    """
    lab = Lab(uuid.uuid4().hex[:6], subnet)
    swarm = NetnsSwarm(workdir, lab, peer_args, boot_host=boot_host)
    try:
        yield swarm
    finally:
        leftovers = swarm.stop()
        failed = lab.close()
        remaining = lab.remaining()
        assert not leftovers, f"processes left behind: {leftovers}"
        assert not failed, f"namespaces not removed: {failed}"
        assert not remaining, f"namespaces left: {remaining}"
