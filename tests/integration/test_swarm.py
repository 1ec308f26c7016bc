"""Live swarms on 127.0.0.1 started exactly as the README says: rounds, consensus, a dead bootstrap node,
and every integrity rejection reason sent by a real adversarial peer process."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch

from p2p_guard.simulation.events import read_events
from p2p_guard.simulation.orchestrator import run_env
from p2p_guard.simulation.processes import ManagedProcess, find_marked_processes, launch, stop_processes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0


def _entry() -> list[str]:
    script = Path(sys.executable).parent / "p2p-guard"
    return [str(script)] if script.exists() else [sys.executable, "-m", "p2p_guard.cli.main"]


class Swarm:
    """A bootstrap node and peers launched with the README's commands, each in its own session."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env = run_env(workdir)
        self.procs: dict[str, ManagedProcess] = {}

    def start_bootstrap(self) -> str:
        addr = self.workdir / "bootstrap.addr"
        command = [*_entry(), "bootstrap", "--config", str(REPO / "bootstrap/bootstrap.toml"),
                   "--identity", str(self.workdir / "bootstrap.key"), "--host", "127.0.0.1", "--port", "0",
                   "--address-file", str(addr)]
        self.procs["bootstrap"] = launch("bootstrap", command, log_path=self.workdir / "bootstrap.log",
                                         env=self.env, cwd=REPO)
        _wait(lambda: addr.exists(), READY_TIMEOUT_S, "bootstrap address file")
        return addr.read_text().split()[0]

    def start_peer(self, index: int, maddr: str, extra: Sequence[str] = (), *, set_index: bool = True) -> None:
        """Start ``peer{index}``; ``set_index=False`` leaves out ``--peer-index`` (the volunteer file's default)."""
        name = f"peer{index}"
        command = [*_entry(), "peer", "--config", str(REPO / "peers/volunteer.toml"), "--initial-peers", maddr,
                   *(["--peer-index", str(index)] if set_index else []),
                   "--identity", str(self.workdir / f"{name}.key"),
                   "--host", "127.0.0.1", "--no-progress", "--events", str(self.events_path(index)),
                   "--state-out", str(self.workdir / f"{name}.pt"),
                   "--no-nat-port-map", "--no-use-auto-relay", *extra]  # loopback: no router, nobody behind NAT
        self.procs[name] = launch(name, command, log_path=self.workdir / f"{name}.log", env=self.env, cwd=REPO)

    def events_path(self, index: int) -> Path:
        return self.workdir / f"peer{index}.jsonl"

    def events(self, index: int, kind: str) -> list[dict]:
        return [e for e in read_events(self.events_path(index)) if e.get("event") == kind]

    def log(self, index: int) -> str:
        return (self.workdir / f"peer{index}.log").read_text(errors="replace")

    def wait_exit(self, names: Sequence[str], timeout_s: float) -> dict[str, int]:
        _wait(lambda: all(self.procs[n].returncode() is not None for n in names), timeout_s,
              f"{names} to exit", self)
        return {n: self.procs[n].returncode() for n in names}

    def stop(self) -> None:
        stop_processes(list(self.procs.values()))
        leftovers = find_marked_processes(str(self.workdir))
        for proc in leftovers:
            proc.kill()
        assert not leftovers, f"processes left behind: {leftovers}"


def _wait(predicate, timeout_s: float, what: str, swarm: Swarm | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    tails = ""
    if swarm is not None:
        tails = "\n".join(f"--- {p.log_path.name}\n" + p.log_path.read_text(errors="replace")[-1500:]
                          for p in swarm.procs.values())
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Swarm]:
    swarm = Swarm(tmp_path)
    try:
        yield swarm
    finally:
        swarm.stop()


def _consensus_distance(paths: Sequence[Path]) -> float:
    thetas = [torch.load(p, weights_only=True)["theta"] for p in paths]
    return max(float((a - b).norm() / a.norm()) for a in thetas for b in thetas)


#: Version 2 of the round: every peer owns its model; in a clean swarm the honest models stay within this
#: consensus distance (rule 1 of issue 8, measured per round in the simulation report).
CONSENSUS_BOUND = 1e-2
#: With attackers in a small swarm and only 2-3 rounds from θ_0, a live test checks that the honest models did not
#: fork (the first rounds of even a clean swarm measure 0.02-0.06; CI measured 0.0175 and 0.021 for two honest
#: peers among four attackers). A fork (peers training alone) grows by the step size every round.
FORK_BOUND = 5e-2


def assert_consensus(swarm: Swarm, indices: Sequence[int], bound: float = CONSENSUS_BOUND) -> None:
    """The honest peers' final models (their ``--state-out`` files) are within ``bound`` of each other."""
    distance = _consensus_distance([swarm.workdir / f"peer{i}.pt" for i in indices])
    assert distance <= bound, f"honest consensus distance {distance:.3g} > {bound}"


@pytest.mark.timeout(300)
def test_readme_swarm_completes_rounds_in_consensus(live: Swarm) -> None:
    maddr = live.start_bootstrap()
    for i in range(3):
        live.start_peer(i, maddr, ["--rounds", "3"])
    codes = live.wait_exit(["peer0", "peer1", "peer2"], 240)
    assert codes == {"peer0": 0, "peer1": 0, "peer2": 0}
    for i in range(3):
        assert [e["round"] for e in live.events(i, "round")] == [0, 1, 2]
        assert all(e["accepted"] == 2 and e["rejected"] == 0 for e in live.events(i, "round"))
    assert_consensus(live, range(3))
    accuracy = live.events(0, "round")[-1]["accuracy"]
    assert accuracy > live.events(0, "round")[0]["accuracy"]


@pytest.mark.live
@pytest.mark.timeout(300)
def test_volunteers_on_the_default_peer_index_accept_each_other_and_reject_a_sign_flip(live: Swarm) -> None:
    """Two volunteers without --peer-index and a sign-flip attacker (helper-69).

    When every volunteer had peer_index 0 the two sent bit-identical updates and rejected each other as
    ``duplicate``, so each applied the attacker's update alone: 4 rounds on digits ended at loss 119, accuracy
    0.097. Now each one's batches come from its PeerID, and its shard is one no present peer claims.
    """
    maddr = live.start_bootstrap()
    common = ["--rounds", "3", "--min-peers", "3"]
    for i in range(2):
        live.start_peer(i, maddr, common, set_index=False)
    live.start_peer(2, maddr, [*common, "--attack", "sign_flip:scale=10", "--byzantine-count", "1"])
    assert live.wait_exit(["peer0", "peer1", "peer2"], 240) == {"peer0": 0, "peer1": 0, "peer2": 0}
    ids = [live.events(i, "ready")[0]["peer_id"] for i in range(3)]
    for i, j in ((0, 1), (1, 0)):
        verdicts = live.events(i, "verdict")
        assert [v["accepted"] for v in verdicts if v["sender"] == ids[j]] == [True, True, True]
        assert [v["accepted"] for v in verdicts if v["sender"] == ids[2]] == [False, False, False]
        assert all(v["reason"] != "duplicate" for v in verdicts)
        # no index: the shard is one no present peer claimed, or the PeerID's (the batches are the PeerID's anyway)
        assert re.search(r"data shard \d of 3 \((chosen at start among the shards no present peer trains|derived "
                         r"from our PeerID)", live.log(i)), live.log(i)
    assert_consensus(live, range(2))


@pytest.mark.live
@pytest.mark.timeout(300)
def test_rounds_go_on_after_the_bootstrap_node_is_killed(live: Swarm) -> None:
    maddr = live.start_bootstrap()
    for i in range(3):
        live.start_peer(i, maddr, ["--rounds", "5"])
    _wait(lambda: all(live.events(i, "round") for i in range(3)), 180, "round 0 on every peer", live)
    bootstrap = live.procs["bootstrap"]
    os.killpg(bootstrap.pid, signal.SIGKILL)
    bootstrap.popen.wait(10)
    killed_at = time.time()
    codes = live.wait_exit(["peer0", "peer1", "peer2"], 200)
    assert codes == {"peer0": 0, "peer1": 0, "peer2": 0}
    for i in range(3):
        after = [e for e in live.events(i, "round") if e["time"] > killed_at]
        assert len(after) >= 3, f"peer{i} completed only {len(after)} rounds after the bootstrap node died"
        assert all(e["accepted"] == 2 for e in after)
    assert_consensus(live, range(3))


# Reasons a peer's own round logic gives after fetching the payload (verdict events and a WARNING line).
PEER_CHECKED = {
    "stale_base": "stale_base",
    "digest_mismatch": "digest_mismatch",
    "wrong_shape": "shape_mismatch",
    "nan": "non_finite",
    # Protocol 3: a server sends the chunk digests of what it serves before the payload, so the payload plus 4 MiB
    # does not hash to the committed root: refused before a byte of the payload is read. A correct digest list
    # followed by extra bytes (OVERSIZE) is tests/integration/test_transport_stream.py's.
    "oversized": "digest_mismatch",
}
# Reasons the DHT record validator (run by every node, the honest peers' own included) gives when the
# commit is stored: the record never reaches any peer's round logic at all.
DHT_REFUSED = {
    "unsigned": "unsigned",
    "bad_signature": "bad_signature",
    "wrong_run": "wrong_run",
    "wrong_round": "wrong_round",
}


def _assert_round_1_seen(live: Swarm, i: int, j: int, sender: str, attack: str, mine: list[dict],
                         reason: str) -> None:
    """Round 1's verdict on attacker ``j`` is ``reason`` unless a loaded machine made it miss our commit phase.

    With ``--min-peers`` equal to the swarm, one peer not counted present for a moment (a presence read or a
    state fetch that failed under load) pauses the attacker until it is back: measured, an attacker paused 28 s
    after round 0 and committed round 1 as our 20 s phase closed, so it had no round-1 verdict at all. A peer
    slowed in round 0 may also see an attacker's round-1 commit land after its phase closed (``late_commit``,
    never fetched), or the attacker finish its last round and leave first (its commit is dropped with a
    ``departed`` event). Each way its update is never applied, which is the property under test.
    """
    departed = any(sender in e["senders"] for e in live.events(i, "departed") if e["round"] == 1)
    paused = bool(live.events(j, "pause"))
    outcomes = [(v["round"], v["accepted"], v["reason"]) for v in mine]
    assert outcomes in ([(1, False, reason)], [(1, False, "late_commit")]) or \
        ((departed or paused) and not outcomes), \
        f"peer{i}: round-1 verdicts on the {attack} attacker: {mine} (departed: {departed}, paused: {paused})"


@pytest.mark.live
@pytest.mark.timeout(420)
def test_every_integrity_rejection_reason_from_live_attackers(live: Swarm) -> None:
    n_honest = 2
    attacks = [*PEER_CHECKED, *DHT_REFUSED]
    n = n_honest + len(attacks)
    maddr = live.start_bootstrap()
    # --max-staleness 0: the stale_base attacker claims round 0's state, stale from round 1 on.
    common = ["--num-peers", str(n), "--min-peers", str(n), "--rounds", "2", "--run-id", "wire-test",
              "--commit-timeout-s", "20", "--max-staleness", "0"]
    for i in range(n):
        extra = list(common)
        if i >= n_honest:
            extra += ["--attack", attacks[i - n_honest], "--byzantine-count", str(len(attacks))]
        live.start_peer(i, maddr, extra)
    codes = live.wait_exit([f"peer{i}" for i in range(n_honest)], 360)
    assert codes == {"peer0": 0, "peer1": 0}, "honest peers must keep running and finish"
    attacker_ids = {live.events(i, "ready")[0]["peer_id"]: attacks[i - n_honest] for i in range(n_honest, n)}
    index_of = {live.events(i, "ready")[0]["peer_id"]: i for i in range(n)}
    honest_ids = {live.events(i, "ready")[0]["peer_id"] for i in range(n_honest)}
    stale_base = next(s for s, a in attacker_ids.items() if a == "stale_base")
    for i in range(n_honest):
        verdicts = live.events(i, "verdict")
        log = live.log(i)
        for sender, attack in attacker_ids.items():
            mine = [v for v in verdicts if v["sender"] == sender]
            if attack == "stale_base":  # its payload is honest: in round 0 it is not stale yet
                mine = [v for v in mine if v["round"] >= 1]
                _assert_round_1_seen(live, i, index_of[sender], sender, attack, mine, "stale_base")
            elif attack in PEER_CHECKED:
                reason = PEER_CHECKED[attack]
                # Every peer starts round 0 together: round 0's verdict is always the integrity check's.
                assert [(v["round"], v["accepted"], v["reason"]) for v in mine if v["round"] == 0] == \
                    [(0, False, reason)], f"peer{i}: verdicts on the {attack} attacker: {mine}"
                _assert_round_1_seen(live, i, index_of[sender], sender, attack,
                                     [v for v in mine if v["round"] == 1], reason)
                assert f"rejected {sender[-8:]}: {reason}" in log, f"{attack} not logged by peer{i}"
            else:
                assert not mine, f"peer{i} saw the {attack} attacker's commit, which the DHT must refuse"
                refusal = f"refused (commit under {sender[-8:]}, {DHT_REFUSED[attack]})"
                assert refusal in log, f"{attack} refusal not logged by peer{i}"
        accepted = [v for v in verdicts if v["accepted"] and v["sender"] not in honest_ids]
        assert all(v["sender"] == stale_base and v["round"] == 0 for v in accepted), \
            f"peer{i} applied an attacker's update: {accepted}"
        other = [v for v in verdicts if v["sender"] in honest_ids - {live.events(i, "ready")[0]["peer_id"]}]
        assert any(v["accepted"] for v in other), f"peer{i} never applied the other honest peer: {other}"
        for event in live.events(i, "round"):
            expected = n_honest - 1 + (1 if event["round"] == 0 else 0)  # + the not yet stale stale_base
            assert event["accepted"] <= expected, "only the other honest peer's update may be applied"
            assert event["loss"] == event["loss"], "model must stay finite"
    # Two honest peers among many attackers, after 2 rounds from θ_0: even a clean swarm is not within 1e-2 in its
    # first rounds (one outer step is large against ‖θ_0‖; protocol.md §7.8 and the stop-13 figures: 0.03 to 0.06
    # in rounds 0-2), and each honest peer mixes toward 4 of 9 sampled peers, mostly attackers that serve no
    # state. Measured on a fresh clone: 0.021. The bound here checks that no fork opens, not rule 1.
    assert_consensus(live, range(n_honest), bound=FORK_BOUND)


@pytest.mark.timeout(300)
def test_permissioned_swarm_ignores_peers_outside_the_allow_list(live: Swarm) -> None:
    from p2p_guard.identity import Identity

    members = [Identity.load_or_create(live.workdir / f"peer{i}.key").peer_id_b58 for i in range(2)]
    allow = live.workdir / "allow.txt"
    allow.write_text("# the two members of this swarm\n" + "\n".join(members) + "\n")
    maddr = live.start_bootstrap()
    common = ["--num-peers", "3", "--rounds", "2", "--run-id", "closed", "--commit-timeout-s", "20"]
    for i in range(2):
        live.start_peer(i, maddr, [*common, "--min-peers", "2", "--allow-peers", str(allow)])
    live.start_peer(2, maddr, [*common, "--min-peers", "3", "--attack", "sign_flip:scale=10"])
    codes = live.wait_exit(["peer0", "peer1"], 240)
    assert codes == {"peer0": 0, "peer1": 0}
    outsider = live.events(2, "ready")[0]["peer_id"]
    for i in range(2):
        assert not [v for v in live.events(i, "verdict") if v["sender"] == outsider]
        assert [e["accepted"] for e in live.events(i, "round")] == [1, 1]
    assert_consensus(live, range(2))


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_and_cpu_peers_hold_the_same_model(live: Swarm) -> None:
    """Volunteers on CUDA and on CPU train together: inner steps run on each peer's device, the guard and the
    outer step on the CPU, so every peer still computes the same aggregate bit for bit."""
    maddr = live.start_bootstrap()
    devices = ["cuda", "cuda", "cpu"]
    for i, device in enumerate(devices):
        live.start_peer(i, maddr, ["--rounds", "3", "--device", device])
    codes = live.wait_exit(["peer0", "peer1", "peer2"], 240)
    assert codes == {"peer0": 0, "peer1": 0, "peer2": 0}
    for i, device in enumerate(devices):
        assert _startup_device(live.log(i)) == (device, device == "cuda")  # bf16 autocast is on by default on CUDA
        assert all(e["accepted"] == 2 and e["rejected"] == 0 for e in live.events(i, "round"))
    assert_consensus(live, range(3))
    assert live.events(0, "round")[-1]["accuracy"] > live.events(0, "round")[0]["accuracy"]


#: A peer's start-up line (``swarm/peer.py``): "peer ID up on MADDRS (task T, device D[, bf16 autocast], N parameters)".
_UP_LINE = re.compile(r" up on .* \(task \S+, device (?P<device>[^,)]+)(?P<bf16>, bf16 autocast)?, \d+ parameters\)$",
                      re.MULTILINE)


def _startup_device(log: str) -> tuple[str, bool]:
    """``(device, bf16 autocast on)`` as a peer's start-up line in its log reports them."""
    match = _UP_LINE.search(log)
    assert match is not None, f"no start-up line '... up on ... (task T, device D, ...)' in the log:\n{log}"
    return match["device"], match["bf16"] is not None


def _seconds_after(swarm: Swarm, index: int, t: float) -> list[float]:
    return [e["seconds"] for e in swarm.events(index, "round") if e["time"] > t]


@pytest.mark.live
@pytest.mark.timeout(420)
def test_a_peer_stopped_with_ctrl_c_leaves_and_nobody_waits_for_it(live: Swarm) -> None:
    """Clean leave (issue 11): SIGINT right after a peer's commit; the others drop it at once (its leave record)
    instead of waiting for its close record (``reveal_wait_s``) and its payload (``fetch_timeout_s``)."""
    maddr = live.start_bootstrap()
    common = ["--num-peers", "4", "--min-peers", "3", "--rounds", "6", "--run-id", "leave-test"]
    for i in range(4):
        live.start_peer(i, maddr, common)
    leaver = live.procs["peer3"]
    _wait(lambda: any(e["round"] >= 2 for e in live.events(3, "commit")), 300, "peer3's commit of round 2", live)
    os.killpg(leaver.pid, signal.SIGINT)
    sent = time.time()
    left_round = max(e["round"] for e in live.events(3, "commit"))
    codes = live.wait_exit(["peer3"], 30)
    exit_s = time.time() - sent
    print(f"peer3 exited {exit_s:.1f} s after SIGINT")
    assert codes == {"peer3": 0}
    assert exit_s < 10, f"peer3 took {exit_s:.1f} s to exit after SIGINT"
    assert "left the swarm" in live.log(3)
    leaver_id = live.events(3, "ready")[0]["peer_id"]
    codes = live.wait_exit(["peer0", "peer1", "peer2"], 300)
    assert codes == {"peer0": 0, "peer1": 0, "peer2": 0}
    for i in range(3):
        rounds = {e["round"]: e for e in live.events(i, "round")}
        assert sorted(rounds) == list(range(6))
        before = sorted(rounds[r]["seconds"] for r in range(1, left_round))  # round 0 includes the join
        typical = before[len(before) // 2]
        after = [rounds[r]["seconds"] for r in range(left_round, 6)]
        waited = max(after) - typical
        print(f"peer{i}: typical round {typical:.1f} s, rounds from the leave on {after}")
        assert waited < 6, f"peer{i} waited {waited:.1f} s longer for the peer that left: rounds {after}"
        timeouts = [v for v in live.events(i, "verdict") if v["sender"] == leaver_id and v["reason"] == "timeout"]
        assert not timeouts, f"peer{i} timed out fetching the peer that left: {timeouts}"
    assert_consensus(live, range(3))
