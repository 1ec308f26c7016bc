# ruff: noqa: S101 - a test: assert is how it checks
"""Partition and heal across real network links: 6 peers as separate hosts in Linux network namespaces.

Topology (created by the test, removed in its teardown even on failure): one namespace holding a bridge, and
one namespace per host (the bootstrap node, then peers 0..5), each joined to the bridge by a veth pair, with
addresses 10.77.0.x/24. No traffic leaves those namespaces. Each process is started with
``ip netns exec HOST p2p-guard ...``, listens on its host's address and is stopped (its process group, then
every process carrying the run marker) before the namespaces are deleted.

The scenario (issue 8's acceptance item): the swarm trains, then the bridge ports of two peers are taken down
(the cut) for 5 rounds of the majority, then brought up again (the heal). Rule 7 (``docs/protocol.md`` §7.1,
``Peer.wait_for_peers``): with ``min_peers = 3`` a cut pair sees too few others, pauses (one line, a ``pause``
event) and resumes when the others are back. Then the honest consensus distance, computed from the peers'
per-round snapshots (``--snapshot-dir``) with the simulation report's own function, must be back under 1e-2
within 3 rounds of the heal.

Needs the right to create network namespaces (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN); it is skipped, with
the reason, where that fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from p2p_guard.simulation.orchestrator import run_env
from p2p_guard.simulation.processes import ManagedProcess, find_marked_processes, launch, stop_processes
from p2p_guard.simulation.report import consensus_distance
from p2p_guard.simulation.snapshots import load_snapshot, snapshot_path

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.long]

N_PEERS = 6
CUT = (4, 5)  # the two peers cut off
MIN_PEERS = 3  # a cut pair (2 present, self included) is below it and pauses
CUT_ROUNDS = 5  # rounds of the majority while the pair is cut off
HEAL_WITHIN = 3  # rounds after the heal by which consensus must be back
STAY_ROUNDS = 2  # rounds after that in which it must stay back
CONSENSUS_BOUND = 1e-2
SUBNET = "10.77.0"
BOOT_HOST = 10  # 10.77.0.10: the bootstrap node; peers are .11 ... .16
PEER_ARGS = [
    "--task", "digits", "--run-id", "netns-partition", "--num-peers", str(N_PEERS), "--min-peers", str(MIN_PEERS),
    "--start-peers", str(N_PEERS), "--rounds", "0", "--inner-steps", "10", "--commit-timeout-s", "20",
    "--fetch-timeout-s", "15", "--join-timeout-s", "240", "--no-progress",
]  # fmt: skip
READY_TIMEOUT_S = 240.0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS`` (iproute2) and return its result; raise with its stderr if ``check`` and it failed."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)  # noqa: S603,S607
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def _netns_unavailable() -> str | None:
    """Why this machine cannot run the test (None: it can): probes by creating and deleting a namespace."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"p2pg-probe-{uuid.uuid4().hex[:8]}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"cannot create a network namespace (`ip netns add`: {done.stderr.strip() or done.returncode})"
    try:
        veth = _ip("-n", probe, "link", "add", "pv0", "type", "veth", "peer", "name", "pv1", check=False)
        if veth.returncode != 0:
            return f"cannot create a veth pair in a network namespace: {veth.stderr.strip()}"
        run = subprocess.run(["ip", "netns", "exec", probe, sys.executable, "-c", "pass"],  # noqa: S603,S607
                             capture_output=True, text=True, timeout=30, check=False)
        if run.returncode != 0:
            return f"cannot run a process in a network namespace (`ip netns exec`): {run.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Lab:
    """A bridge namespace and one namespace per host, joined by veth pairs; everything removed by :meth:`close`."""

    tag: str
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge_ns(self) -> str:
        """Namespace of the bridge."""
        return f"p2pg-{self.tag}-br"

    def host_ns(self, host: int) -> str:
        """Namespace of host ``host`` (its address is 10.77.0.``host``)."""
        return f"p2pg-{self.tag}-h{host}"

    def port(self, host: int) -> str:
        """The bridge-side end of host ``host``'s veth pair (taking it down cuts the host off)."""
        return f"b{self.tag}{host}"

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def create(self, hosts: Sequence[int]) -> None:
        """Create the bridge and, for each host, its namespace, veth pair and address."""
        self._add_ns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for host in hosts:
            ns = self.host_ns(host)
            self._add_ns(ns)
            # Created inside the bridge's namespace, the host end then moved: nothing touches the root namespace.
            _ip("-n", self.bridge_ns, "link", "add", self.port(host), "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", self.bridge_ns, "link", "set", self.port(host), "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{host}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def set_port(self, host: int, up: bool) -> None:
        """Bring host ``host``'s bridge port up or down (down: its packets go nowhere, both ways)."""
        _ip("-n", self.bridge_ns, "link", "set", self.port(host), "up" if up else "down")

    def close(self) -> list[str]:
        """Delete every namespace created (their veths and the bridge go with them); return those that failed."""
        failed = []
        for name in reversed(self.namespaces):
            done = _ip("netns", "del", name, check=False)
            if done.returncode != 0:
                failed.append(f"{name}: {done.stderr.strip()}")
        self.namespaces.clear()
        return failed


def _entry() -> list[str]:
    return [sys.executable, "-m", "p2p_guard.cli.main"]


class NetnsSwarm:
    """The bootstrap node and the peers, each run in its host namespace by ``ip netns exec``."""

    def __init__(self, workdir: Path, lab: Lab) -> None:
        self.workdir = workdir
        self.lab = lab
        self.env = run_env(workdir)
        self.procs: dict[str, ManagedProcess] = {}

    @staticmethod
    def peer_host(index: int) -> int:
        """Host number (last address byte) of peer ``index``."""
        return BOOT_HOST + 1 + index

    def start_bootstrap(self) -> str:
        """Start the bootstrap node on its own host; return its multiaddr."""
        addr = self.workdir / "bootstrap.addr"
        command = ["ip", "netns", "exec", self.lab.host_ns(BOOT_HOST), *_entry(), "bootstrap",
                   "--identity", str(self.workdir / "bootstrap.key"), "--host", f"{SUBNET}.{BOOT_HOST}",
                   "--port", "31337", "--address-file", str(addr)]
        self.procs["bootstrap"] = launch("bootstrap", command, log_path=self.workdir / "bootstrap.log", env=self.env)
        _wait(lambda: addr.exists() and addr.read_text().strip() != "", READY_TIMEOUT_S, "the bootstrap address", self)
        return addr.read_text().split()[0]

    def start_peer(self, index: int, maddr: str) -> None:
        """Start peer ``index`` on its own host, listening on that host's address."""
        name = f"peer{index}"
        command = ["ip", "netns", "exec", self.lab.host_ns(self.peer_host(index)), *_entry(), "peer",
                   "--initial-peers", maddr, "--peer-index", str(index), *PEER_ARGS,
                   "--identity", str(self.workdir / f"{name}.key"), "--host", f"{SUBNET}.{self.peer_host(index)}",
                   "--port", "31400", "--events", str(self.events_path(index)),
                   "--snapshot-dir", str(self.snapshot_dir(index))]
        self.procs[name] = launch(name, command, log_path=self.workdir / f"{name}.log", env=self.env)

    def events_path(self, index: int) -> Path:
        """Event file of peer ``index``."""
        return self.workdir / f"peer{index}.jsonl"

    def snapshot_dir(self, index: int) -> Path:
        """Snapshot folder of peer ``index``."""
        return self.workdir / f"peer{index}.snapshots"

    def events(self, index: int, kind: str) -> list[dict]:
        """Events of one kind written so far by peer ``index`` (a line still being written is skipped)."""
        path = self.events_path(index)
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == kind:
                out.append(event)
        return out

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

    def stop(self) -> list[int]:
        """Stop every process group started, then kill any process of the run left; return the leftovers' pids."""
        stop_processes(list(self.procs.values()))
        leftovers = find_marked_processes(str(self.workdir))
        for proc in leftovers:
            proc.kill()
        return [p.pid for p in leftovers]


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, swarm: NetnsSwarm) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        swarm.check_alive()
        time.sleep(0.5)
    tails = "\n".join(f"--- {name}\n{swarm.log(name)[-2000:]}" for name in swarm.procs)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")


@pytest.fixture
def netns_swarm(tmp_path: Path) -> Iterator[NetnsSwarm]:
    """A lab of namespaces and a swarm in it; processes stopped, then namespaces deleted, whatever happens."""
    reason = _netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    lab = Lab(uuid.uuid4().hex[:6])
    swarm = NetnsSwarm(tmp_path, lab)
    try:
        lab.create([BOOT_HOST, *(NetnsSwarm.peer_host(i) for i in range(N_PEERS))])
        yield swarm
    finally:
        leftovers = swarm.stop()
        failed = lab.close()
        remaining = [n for n in _ip("netns", "list", check=False).stdout.split() if n.startswith(f"p2pg-{lab.tag}")]
        assert not leftovers, f"processes left behind: {leftovers}"
        assert not failed, f"namespaces not removed: {failed}"
        assert not remaining, f"namespaces left: {remaining}"


def _distance(swarm: NetnsSwarm, round_: int, indices: Sequence[int]) -> tuple[float | None, int]:
    """Consensus distance of round ``round_`` over the snapshots of ``indices`` that exist, and how many."""
    thetas = [t for i in indices if (t := load_snapshot(snapshot_path(swarm.snapshot_dir(i), round_))) is not None]
    return consensus_distance(thetas), len(thetas)


@pytest.mark.timeout(900)
def test_cut_pair_pauses_and_rejoins_in_consensus_after_heal(netns_swarm: NetnsSwarm) -> None:
    """Cut 2 of 6 peers off for 5 majority rounds: they pause, resume, and consensus is back within 3 rounds."""
    swarm = netns_swarm
    majority = [i for i in range(N_PEERS) if i not in CUT]
    everyone = list(range(N_PEERS))
    maddr = swarm.start_bootstrap()
    assert maddr.startswith(f"/ip4/{SUBNET}.{BOOT_HOST}/tcp/"), maddr
    for i in everyone:
        swarm.start_peer(i, maddr)
    _wait(lambda: all(len(swarm.rounds(i)) >= 2 for i in everyone), READY_TIMEOUT_S, "2 rounds on every peer", swarm)

    # The cut.
    cut_at = time.time()
    majority_start = {i: max(swarm.rounds(i)) for i in majority}
    for i in CUT:
        swarm.lab.set_port(swarm.peer_host(i), up=False)

    def majority_rounds_since_cut() -> int:
        return min(sum(1 for e in swarm.events(i, "round") if e["time"] > cut_at) for i in majority)

    _wait(lambda: majority_rounds_since_cut() >= CUT_ROUNDS, 300, f"{CUT_ROUNDS} majority rounds during the cut", swarm)
    # The cut peers may still be finishing a round with stale presence records when the majority is done: give
    # them until the presence TTL has certainly passed to show their pause (the assertion is below).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(swarm.events(i, "pause") for i in CUT):
        time.sleep(0.5)
    paused_before_heal = {i: len(swarm.events(i, "pause")) for i in CUT}
    cut_rounds = {i: [e["round"] for e in swarm.events(i, "round") if e["time"] > cut_at] for i in everyone}

    # The heal.
    for i in CUT:
        swarm.lab.set_port(swarm.peer_host(i), up=True)
    healed_at = time.time()
    heal_round = max(max(swarm.rounds(i)) for i in majority)  # the last round the majority completed, cut
    target = heal_round + HEAL_WITHIN

    def past_target() -> bool:
        return all(swarm.rounds(i) and max(swarm.rounds(i)) >= target + STAY_ROUNDS for i in everyone)

    try:
        _wait(past_target, 300, f"every peer at round {target + STAY_ROUNDS}", swarm)
        caught_up = True
    except AssertionError:
        caught_up = False
    swarm.check_alive()

    pause_lines = {i: [ln for ln in swarm.log(f"peer{i}").splitlines() if "paused:" in ln or "resuming" in ln]
                   for i in CUT}
    distances = {r: _distance(swarm, r, everyone) for r in range(heal_round + 1, target + STAY_ROUNDS + 1)}
    during_cut = {r: _distance(swarm, r, majority) for r in range(min(majority_start.values()) + 1, heal_round + 1)}
    figures = {
        "cut_at": cut_at,
        "healed_at": healed_at,
        "heal_round": heal_round,
        "rounds_completed_during_cut": cut_rounds,
        "pause_events": {i: swarm.events(i, "pause") for i in CUT},
        "resume_events": {i: swarm.events(i, "resume") for i in CUT},
        "pause_lines": pause_lines,
        "majority_distance_during_cut": during_cut,
        "distance_after_heal": distances,
        "rounds_after_heal": {i: [r for r in swarm.rounds(i) if r > heal_round] for i in everyone},
    }
    (swarm.workdir / "figures.json").write_text(json.dumps(figures, indent=2, default=str))
    print(json.dumps(figures, indent=2, default=str))  # noqa: T201 - the measured figures, shown with -s
    detail = json.dumps(figures, default=str)

    # The majority kept training during the cut, in consensus among itself.
    assert all(len(cut_rounds[i]) >= CUT_ROUNDS for i in majority), detail
    # (The round under way when the cut came may differ between them: some got the cut pair's update of it.)
    last_cut_round = during_cut[heal_round][0]
    assert last_cut_round is not None, detail
    assert last_cut_round <= CONSENSUS_BOUND, detail
    # Rule 7: the cut pair paused (a line and an event) while cut off, and resumed after the heal.
    for i in CUT:
        assert paused_before_heal[i] >= 1, f"peer{i} did not pause while cut off: {detail}"
        assert any("paused:" in ln for ln in pause_lines[i]), detail
        resumes = [e for e in swarm.events(i, "resume") if e["time"] > healed_at - 1]
        assert resumes, f"peer{i} did not resume after the heal: {detail}"
        assert any("resuming" in ln for ln in pause_lines[i]), detail
    assert caught_up, f"not every peer got past round {target} within 300 s of the heal: {detail}"
    # Consensus over all six is back under the bound within HEAL_WITHIN rounds of the heal, and stays there.
    complete = {r: d for r, (d, n) in distances.items() if n == N_PEERS}
    back = [r for r, d in sorted(complete.items()) if d is not None and d <= CONSENSUS_BOUND]
    assert back, f"consensus never under {CONSENSUS_BOUND} after the heal: {detail}"
    assert back[0] <= target, f"consensus not under {CONSENSUS_BOUND} by round {target}: {detail}"
    assert all(d is not None and d <= CONSENSUS_BOUND for r, d in complete.items() if r >= back[0]), detail
