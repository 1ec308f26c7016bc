"""Fault plans: checked before any process starts, fired round by round, carried out on real processes.

The injector runs on a recording fake (no processes); the swarm's fault actions and start retries run on tiny
``python -c`` stand-ins for a peer (no torch, no network), each in its own session and stopped by the test.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from p2p_guard.cli.main import main as cli_main
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.faults import (
    Fault,
    FaultInjector,
    check_plan_rounds,
    check_plan_timeout,
    check_plan_tools,
    faketime_prefix,
    load_plan,
    parse_plan,
)
from p2p_guard.simulation.orchestrator import LocalSwarm, ProcessFailed, peer_paths

# -- the plan ------------------------------------------------------------------------------------------------

GOOD_PLAN = """
[[fault]]
round = 5
peer = 3
kind = "slow"
factor = 3.0
rounds = 10

[[fault]]
round = 7
peer = 1
kind = "stop"
seconds = 60

[[fault]]
round = 8
peer = 2
kind = "kill_restart"

[[fault]]
round = 9
peer = 0
kind = "clock_shift"
seconds = -30

[[fault]]
round = 10
kind = "kill_bootstrap"
"""


def test_a_good_plan_parses_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(GOOD_PLAN)
    plan = load_plan(path, honest=4)
    assert [f.kind for f in plan.faults] == ["slow", "stop", "kill_restart", "clock_shift", "kill_bootstrap"]
    assert plan.faults[0] == Fault(number=1, kind="slow", round=5, peer=3, factor=3.0, rounds=10)
    assert plan.faults[1].seconds == 60.0
    assert plan.faults[4].peer is None
    assert plan.to_dict()["faults"][2] == {"number": 3, "kind": "kill_restart", "round": 8, "peer": 2}
    assert plan.source == str(path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"round": 1, "peer": 0, "kind": "explode"}, "kind must be one of"),
        ({"round": 1, "peer": 0}, "kind must be one of"),
        ({"round": 1, "peer": 4, "kind": "kill_restart"}, r"honest peer index in \[0, 4\), got 4"),
        ({"round": 1, "peer": -1, "kind": "kill_restart"}, "peer must be an integer >= 0"),
        ({"round": 1, "kind": "kill_restart"}, "kill_restart needs peer"),
        ({"peer": 0, "kind": "kill_restart"}, "kill_restart needs round"),
        ({"round": -1, "peer": 0, "kind": "kill_restart"}, "round must be an integer >= 0"),
        ({"round": 1.5, "peer": 0, "kind": "kill_restart"}, "round must be an integer"),
        ({"round": True, "peer": 0, "kind": "kill_restart"}, "round must be an integer"),
        ({"round": 1, "peer": 0, "kind": "slow", "factor": 3.0}, "slow needs rounds"),
        ({"round": 1, "peer": 0, "kind": "slow", "factor": 1.0, "rounds": 2}, "factor must be > 1"),
        (
            {"round": 1, "peer": 0, "kind": "slow", "factor": 1e9, "rounds": 2},
            r"factor must be > 1 and at most 100, got 1000000000.0",
        ),
        ({"round": 1, "peer": 0, "kind": "slow", "factor": float("nan"), "rounds": 2}, "finite number"),
        (
            {"round": 1, "peer": 0, "kind": "slow", "factor": "3", "rounds": 2},
            "factor must be a finite number",
        ),
        (
            {"round": 1, "peer": 0, "kind": "slow", "factor": 3.0, "rounds": 0},
            "rounds must be an integer >= 1",
        ),
        ({"round": 1, "peer": 0, "kind": "stop"}, "stop needs seconds"),
        ({"round": 1, "peer": 0, "kind": "stop", "seconds": 0}, "seconds must be > 0"),
        ({"round": 1, "peer": 0, "kind": "stop", "seconds": float("inf")}, "finite number"),
        ({"round": 1, "peer": 0, "kind": "stop", "seconds": 5, "factor": 2.0}, "stop takes no factor"),
        ({"round": 1, "peer": 0, "kind": "clock_shift", "seconds": 0}, "non-zero"),
        ({"round": 1, "peer": 0, "kind": "clock_shift", "seconds": 7200}, "non-zero and within"),
        ({"round": 1, "peer": 0, "kind": "kill_bootstrap"}, "kill_bootstrap takes no peer"),
        ("not a table", "must be a table"),
    ],
)
def test_a_bad_fault_is_a_one_line_error_naming_the_fault(entry: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_plan({"fault": [{"round": 0, "kind": "kill_bootstrap"}, entry]}, honest=4, source="p.toml")
    assert str(caught.value).startswith("p.toml: fault 2")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("seconds", "shown"), [(1e9, "1000000000.0"), (86400.5, "86400.5"), (float("nan"), "nan"),
                                                (float("-inf"), "-inf")])
def test_a_stop_past_a_day_or_not_finite_is_refused_naming_the_entry(seconds: float, shown: str) -> None:
    entry = {"round": 1, "peer": 0, "kind": "stop", "seconds": seconds}
    with pytest.raises(ValueError) as caught:
        parse_plan({"fault": [{"round": 0, "kind": "kill_bootstrap"}, entry]}, honest=4, source="p.toml")
    if math.isfinite(seconds):
        assert str(caught.value) == f"p.toml: fault 2: seconds must be > 0 and at most 86400 (one day), got {shown}"
    else:
        assert str(caught.value) == f"p.toml: fault 2: seconds must be a finite number, got {shown}"
    day = parse_plan({"fault": [{**entry, "seconds": 86400}]}, honest=4)
    assert day.faults[0].seconds == 86400.0


def test_a_stop_longer_than_the_run_may_last_is_refused() -> None:
    plan = parse_plan({"fault": [{"round": 1, "peer": 0, "kind": "kill_restart"},
                                 {"round": 2, "peer": 1, "kind": "stop", "seconds": 1500}]}, honest=2, source="p.toml")
    with pytest.raises(ValueError) as caught:
        check_plan_timeout(plan, 1200.0)
    assert str(caught.value) == ("p.toml: fault 2 (stop): seconds 1500 is longer than the whole run may last "
                                 "(--timeout-s 1200); it would never end as planned")
    check_plan_timeout(plan, 1500.0)  # as long as the run: accepted


def test_simulate_refuses_a_stop_past_its_timeout_before_any_process_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('[[fault]]\nround = 2\npeer = 1\nkind = "stop"\nseconds = 600\n')
    workdir = tmp_path / "run"
    code = cli_main(["simulate", "--honest", "3", "--byzantine", "0", "--faults", str(plan), "--timeout-s", "300",
                     "--workdir", str(workdir), "--no-progress"])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err == (
        f"p2p-guard simulate: error: {plan}: fault 1 (stop): seconds 600 is longer than the whole run may last "
        f"(--timeout-s 300); it would never end as planned\n"
    )
    assert not workdir.exists()


def test_plan_level_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown top-level key\(s\) \['faults'\]"):
        parse_plan({"faults": []}, honest=2)
    with pytest.raises(ValueError, match="array of tables"):
        parse_plan({"fault": {"round": 1}}, honest=2)
    with pytest.raises(ValueError, match="more than once"):
        parse_plan({"fault": [{"round": 1, "kind": "kill_bootstrap"}] * 2}, honest=2)
    assert parse_plan({}, honest=2).faults == ()


def test_unreadable_and_non_toml_plans_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the fault plan"):
        load_plan(tmp_path / "missing.toml", honest=2)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[fault]\nround = ")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_plan(bad, honest=2)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe")  # was "'utf-8' codec can't decode byte 0xff in position 0: ...", no file named
    with pytest.raises(ValueError) as info:
        load_plan(binary, honest=2)
    assert str(info.value) == f"{binary}: the fault plan is not UTF-8 text: invalid start byte"


def test_clock_shift_needs_faketime_installed() -> None:
    plan = parse_plan({"fault": [{"round": 1, "peer": 0, "kind": "clock_shift", "seconds": 30}]}, honest=1)
    with pytest.raises(ValueError, match="apt-get install -y faketime"):
        check_plan_tools(plan, which=lambda _name: None)
    check_plan_tools(plan, which=lambda name: f"/usr/bin/{name}")
    check_plan_tools(parse_plan({}, honest=1), which=lambda _name: None)  # no clock shift: not needed
    assert faketime_prefix(30) == ["faketime", "-f", "+30s"]
    assert faketime_prefix(-12.5) == ["faketime", "-f", "-12.5s"]


def test_simulate_rejects_a_bad_plan_before_any_process_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('[[fault]]\nround = 2\npeer = 9\nkind = "kill_restart"\n')
    workdir = tmp_path / "run"
    code = cli_main(["simulate", "--honest", "3", "--byzantine", "0", "--faults", str(plan),
                     "--workdir", str(workdir), "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        f"p2p-guard simulate: error: {plan}: fault 1: peer must be an honest peer index in [0, 3), got 9"
    )
    assert not workdir.exists()


# -- the injector (no processes) -------------------------------------------------------------------------------


class _Recorder:
    """FaultActions that record each call; ``fail`` names actions that raise."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = fail

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.fail:
            raise RuntimeError(f"{call[0]} broke")

    def set_slowdown(self, peer: int, factor: float | None) -> None:
        self._record("set_slowdown", peer, factor)

    def signal_peer(self, peer: int, signum: int) -> None:
        self._record("signal_peer", peer, signum)

    def kill_restart(self, peer: int) -> None:
        self._record("kill_restart", peer)

    def restart_shifted(self, peer: int, seconds: float) -> None:
        self._record("restart_shifted", peer, seconds)

    def kill_bootstrap(self) -> None:
        self._record("kill_bootstrap")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _injector(plan_text: str, honest: int, actions: _Recorder) -> tuple[FaultInjector, _Clock]:
    import tomllib

    clock = _Clock()
    plan = parse_plan(tomllib.loads(plan_text), honest=honest)
    return FaultInjector(plan, actions, clock=clock, monotonic=clock), clock


def test_slow_fires_at_its_round_and_ends_rounds_later() -> None:
    actions = _Recorder()
    injector, clock = _injector(
        '[[fault]]\nround = 5\npeer = 1\nkind = "slow"\nfactor = 3.0\nrounds = 2\n', 2, actions
    )
    injector.step({0: 9, 1: 4})  # another peer's round does not count
    assert actions.calls == []
    clock.now = 1012.0
    injector.step({0: 9, 1: 5})
    assert actions.calls == [("set_slowdown", 1, 3.0)]
    injector.step({0: 9, 1: 6})
    assert len(actions.calls) == 1
    clock.now = 1020.0
    injector.step({0: 9, 1: 7})
    assert actions.calls[-1] == ("set_slowdown", 1, None)
    assert not injector.active
    (record,) = injector.finish()
    assert record["fired"] is True
    assert (record["fired_round"], record["fired_time"], record["fired_after_s"]) == (5, 1012.0, 12.0)
    assert (record["ended_round"], record["ended_time"], record["error"]) == (7, 1020.0, None)


def test_stop_sends_sigstop_then_sigcont_after_its_seconds() -> None:
    actions = _Recorder()
    injector, clock = _injector('[[fault]]\nround = 0\npeer = 0\nkind = "stop"\nseconds = 60\n', 1, actions)
    injector.step({0: 0})
    assert actions.calls == [("signal_peer", 0, signal.SIGSTOP)]
    clock.now += 59.0
    injector.step({0: 0})
    assert len(actions.calls) == 1
    clock.now += 1.0
    injector.step({0: 1})
    assert actions.calls[-1] == ("signal_peer", 0, signal.SIGCONT)
    assert injector.finish()[0]["ended_round"] == 1


def test_kill_bootstrap_follows_the_honest_median_and_restarts_their_peer() -> None:
    actions = _Recorder()
    plan = '[[fault]]\nround = 3\nkind = "kill_bootstrap"\n\n[[fault]]\nround = 2\npeer = 2\nkind = "kill_restart"\n'
    plan += '\n[[fault]]\nround = 2\npeer = 0\nkind = "clock_shift"\nseconds = 30\n'
    injector, _ = _injector(plan, 3, actions)
    injector.step({0: 1, 1: 3, 2: 3})  # median 3: the bootstrap goes; peer 2 is past round 2, peer 0 not yet
    assert actions.calls == [("kill_bootstrap",), ("kill_restart", 2)]
    injector.step({0: 2, 1: 3, 2: 3})
    assert actions.calls[-1] == ("restart_shifted", 0, 30.0)
    injector.step({0: 9, 1: 9, 2: 9})
    assert len(actions.calls) == 3  # each fault fires once


def test_a_failing_action_is_recorded_and_the_others_still_fire() -> None:
    actions = _Recorder(fail=frozenset({"kill_restart"}))
    plan = '[[fault]]\nround = 1\npeer = 0\nkind = "kill_restart"\n\n[[fault]]\nround = 1\nkind = "kill_bootstrap"\n'
    plan += '\n[[fault]]\nround = 50\npeer = 0\nkind = "kill_restart"\n'
    injector, _ = _injector(plan, 1, actions)
    injector.step({0: 1})
    records = injector.finish({0: 1})
    assert records[0]["fired"] is False
    assert records[0]["error"] == "RuntimeError: kill_restart broke"
    assert records[0]["fired_round"] == 1
    assert records[1]["fired"] is True
    assert (records[2]["fired"], records[2]["fired_round"]) == (False, None)  # its round never came


def test_finish_undoes_a_stop_and_a_slowdown_still_in_force() -> None:
    actions = _Recorder()
    plan = '[[fault]]\nround = 0\npeer = 0\nkind = "stop"\nseconds = 600\n'
    plan += '\n[[fault]]\nround = 0\npeer = 1\nkind = "slow"\nfactor = 2\nrounds = 100\n'
    injector, _ = _injector(plan, 2, actions)
    injector.step({0: 0, 1: 0})
    records = injector.finish({0: 3, 1: 4})
    assert ("signal_peer", 0, signal.SIGCONT) in actions.calls
    assert ("set_slowdown", 1, None) in actions.calls
    assert [r["ended_round"] for r in records] == [3, 4]
    assert not injector.active


# -- the swarm's fault actions and start retries, on stand-in peers ---------------------------------------------

_SLEEPER = "import time; time.sleep(60)"
_READY_THEN_FAIL = (
    "import json, sys; a = sys.argv; p = a[a.index('--events') + 1]; "
    "open(p, 'a').write(json.dumps({'event': 'ready', 'peer_id': 'X'}) + '\\n'); sys.exit(1)"
)
_CLOCK = (
    "import json, sys, time; a = sys.argv; p = a[a.index('--events') + 1]; "
    "open(p, 'a').write(json.dumps({'event': 'ready', 'peer_id': 'X', 'clock': time.time()}) + '\\n'); "
    "time.sleep(60)"
)


@pytest.fixture
def make_swarm(tmp_path: Path) -> Iterator[Any]:
    """A LocalSwarm whose 'peers' run a given ``python -c`` program; all stopped at the end."""
    swarms: list[LocalSwarm] = []

    def make(program: str, **settings: Any) -> LocalSwarm:
        config = SimulationConfig(honest=1, byzantine=0, stop_grace_s=2.0, **settings)
        swarm = LocalSwarm(config, tmp_path / f"run{len(swarms)}", entry=(sys.executable, "-c", program))
        swarm.initial_peers = ["/ip4/127.0.0.1/tcp/1/p2p/QmFake"]  # no bootstrap node needed
        swarms.append(swarm)
        return swarm

    yield make
    for swarm in swarms:
        swarm.stop()


def _wait(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_failed_start_is_retried_then_fatal(make_swarm: Any) -> None:
    swarm = make_swarm("import sys; sys.exit(3)", start_retries=2)
    swarm.start_peer(0)
    for _ in range(2):
        _wait(lambda: swarm.peers[0].returncode() is not None)
        assert swarm.retry_failed_starts() == [0]
    _wait(lambda: swarm.peers[0].returncode() is not None)
    assert swarm.retry_failed_starts() == []  # retries spent
    assert swarm.start_retries == {0: 2}
    with pytest.raises(ProcessFailed, match="peer0 exited with code 3"):
        swarm.check_processes()


def test_a_peer_that_failed_after_ready_is_not_retried(make_swarm: Any) -> None:
    swarm = make_swarm(_READY_THEN_FAIL, start_retries=2)
    swarm.start_peer(0)
    _wait(lambda: swarm.peers[0].returncode() is not None)
    assert swarm.retry_failed_starts() == []
    assert swarm.ready_events()[0]["peer_id"] == "X"


def test_start_concurrency_launches_the_next_peer_only_when_one_is_ready(make_swarm: Any) -> None:
    swarm = make_swarm(_SLEEPER, start_concurrency=1)
    swarm.start_peer(0)
    assert swarm.starting() == [0]
    with open(peer_paths(swarm.workdir, 0)["events"], "a") as f:
        f.write(json.dumps({"event": "ready", "peer_id": "X"}) + "\n")
    swarm.poll_events()
    assert swarm.starting() == []


def test_stop_kill_restart_and_slowdown_act_on_the_peer(make_swarm: Any) -> None:
    swarm = make_swarm(_SLEEPER)
    first = swarm.start_peer(0)
    swarm.signal_peer(0, signal.SIGSTOP)
    _wait(lambda: psutil.Process(first.pid).status() == psutil.STATUS_STOPPED)
    swarm.signal_peer(0, signal.SIGCONT)
    _wait(lambda: psutil.Process(first.pid).status() != psutil.STATUS_STOPPED)
    swarm.kill_restart(0)
    second = swarm.peers[0]
    assert first.returncode() == -signal.SIGKILL
    assert second.pid != first.pid and second.returncode() is None
    assert second.popen.args == first.popen.args  # the identical command line
    assert swarm.start_retries == {}  # a planned restart is not a failed start
    control = peer_paths(swarm.workdir, 0)["control"]
    swarm.set_slowdown(0, 3.0)
    assert json.loads(control.read_text()) == {"slowdown": 3.0}
    swarm.set_slowdown(0, None)
    assert not control.exists()
    swarm.signal_peer(0, signal.SIGSTOP)
    swarm.stop()  # a stopped peer is continued, then stopped for good
    assert second.returncode() is not None


def test_actions_on_a_peer_that_is_not_running_raise(make_swarm: Any) -> None:
    from p2p_guard.simulation.orchestrator import SimulationError

    swarm = make_swarm(_SLEEPER)
    with pytest.raises(SimulationError, match="peer0 is not running"):
        swarm.kill_restart(0)
    with pytest.raises(SimulationError, match="bootstrap node is not running"):
        swarm.kill_bootstrap()


@pytest.mark.skipif(
    shutil.which("faketime") is None, reason="needs Debian's faketime (apt-get install faketime)"
)
def test_clock_shift_restarts_the_peer_under_faketime(make_swarm: Any) -> None:
    swarm = make_swarm(_CLOCK)
    first = swarm.start_peer(0)
    _wait(lambda: swarm.poll_events() or 0 in swarm.ready_events())
    swarm.restart_shifted(0, 120.0)
    assert swarm.peers[0].popen.args[:3] == ["faketime", "-f", "+120s"]
    assert swarm.peers[0].popen.args[3:] == first.popen.args
    _wait(lambda: swarm.poll_events() or len([e for e in swarm.events[0] if e["event"] == "ready"]) == 2)
    ready = [e for e in swarm.events[0] if e["event"] == "ready"]
    assert ready[1]["clock"] - time.time() > 100  # its clock runs two minutes ahead
    wrapped = swarm.peers[0]
    swarm.stop()  # faketime does not forward SIGTERM: the child is ended too
    assert wrapped.returncode() is not None
    assert swarm.marked_processes() == []


def _stand_in_swarm(config: SimulationConfig, tmp_path: Path, script: str) -> LocalSwarm:
    """A swarm whose peers run ``python -c script`` (stand-ins that write events), behind a fake bootstrap node."""
    swarm = LocalSwarm(config, tmp_path / "run", entry=(sys.executable, "-c", script))
    swarm.initial_peers = ["/ip4/127.0.0.1/tcp/1/p2p/QmFake"]
    return swarm


_READY_THEN_SLEEP = (
    "import json, sys, time; a = sys.argv; p = a[a.index('--events') + 1]; "
    "open(p, 'a').write(json.dumps({'event': 'ready', 'peer_id': p, 'time': time.time()}) + '\\n'); time.sleep(60)"
)
_FAIL_ONCE = (
    "import json, os, sys, time; a = sys.argv; p = a[a.index('--events') + 1]; flag = p + '.tried'\n"
    "if not os.path.exists(flag):\n    open(flag, 'w').close(); sys.exit(5)\n"
    "open(p, 'a').write(json.dumps({'event': 'ready', 'peer_id': p}) + '\\n'); time.sleep(60)"
)


def test_start_peers_with_concurrency_one_launches_each_peer_after_the_previous_is_ready(
    tmp_path: Path,
) -> None:
    config = SimulationConfig(honest=3, byzantine=0, stop_grace_s=2.0, start_concurrency=1)
    swarm = _stand_in_swarm(config, tmp_path, _READY_THEN_SLEEP)
    try:
        swarm.start_peers()
        swarm.wait_ready(20.0)
        ready = swarm.ready_events()
        assert swarm.launch_times[1] >= ready[0]["time"]
        assert swarm.launch_times[2] >= ready[1]["time"]
    finally:
        swarm.stop()


_READY_ON_GO = (
    "import json, os, sys, time; a = sys.argv; p = a[a.index('--events') + 1]\n"
    "while not os.path.exists(p + '.go'):\n    time.sleep(0.05)\n"
    "open(p, 'a').write(json.dumps({'event': 'ready', 'peer_id': p}) + '\\n'); time.sleep(60)"
)


def test_memory_is_sampled_only_once_a_peer_is_ready(tmp_path: Path) -> None:
    """A starting peer's few MiB (the interpreter loading) pulled the mean PSS of short runs down to 3 MiB."""
    config = SimulationConfig(honest=1, byzantine=0, stop_grace_s=2.0)
    swarm = _stand_in_swarm(config, tmp_path, _READY_ON_GO)
    try:
        swarm.start_peer(0)
        time.sleep(0.5)
        swarm.poll_events()
        swarm.sample_memory()
        assert swarm.memory_samples[0] == []
        (tmp_path / "run" / "peer0.events.jsonl.go").touch()
        swarm.wait_ready(20.0)
        swarm.sample_memory()
        assert len(swarm.memory_samples[0]) == 1 and swarm.memory_samples[0][0] > 1_000_000
    finally:
        swarm.stop()


def test_start_peers_retries_a_failed_start_and_goes_on(tmp_path: Path) -> None:
    config = SimulationConfig(honest=2, byzantine=0, stop_grace_s=2.0, start_concurrency=1, start_retries=1)
    swarm = _stand_in_swarm(config, tmp_path, _FAIL_ONCE)
    try:
        swarm.start_peers()
        swarm.wait_ready(20.0)
        assert swarm.start_retries == {0: 1, 1: 1}
        swarm.check_processes()  # both run now
        swarm.sample_memory()
        assert all(
            len(swarm.memory_samples[i]) == 1 and swarm.memory_samples[i][0] > 1_000_000 for i in (0, 1)
        )
    finally:
        swarm.stop()


# -- a whole run on stand-in version-2 peers (the lead's event interface), with a plan ------------------------

_FAKE_PEER = r"""
import json, os, sys, time
from pathlib import Path

args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1]
if args[0] == "bootstrap":
    Path(opt("--address-file")).write_text("/ip4/127.0.0.1/tcp/1/p2p/QmFake\n")
    time.sleep(600)
    sys.exit(0)
import numpy as np
index, n, rounds = int(opt("--peer-index")), int(opt("--num-peers")), int(opt("--rounds"))
events = open(opt("--events"), "a")
def emit(kind, **fields):
    events.write(json.dumps({"event": kind, "time": time.time(), **fields}) + "\n")
    events.flush()
checkpoint = Path(opt("--checkpoint-dir")) / "last_round"
snapshots = Path(opt("--snapshot-dir"))
snapshots.mkdir(parents=True, exist_ok=True)
control = Path(opt("--control-file"))
start = int(checkpoint.read_text()) + 1 if checkpoint.exists() else 0
emit("ready", peer_id=f"P{index}", byzantine=False, attack=None, maddrs=[], numel=2, startup_s=0.1)
theta = np.asarray([1.0, 1.0 + 0.001 * index], dtype=np.float32)
for r in range(start, rounds):
    slowdown = json.loads(control.read_text())["slowdown"] if control.exists() else 1.0
    time.sleep(0.5 * slowdown)
    emit("commit", round=r, base_round=r, payload_bytes=8)
    for j in range(n):
        if j != index:
            emit("verdict", round=r, sender=f"P{j}", commit_round=r, accepted=True, reason=None, detail="",
                 norm=1.0, cosine=1.0, weight=1.0)
    np.save(snapshots / f"r{r:05d}.npy", theta)
    emit("round", round=r, loss=1.0, accuracy=0.5, perplexity=None, accepted=n - 1, rejected=0,
         seconds=0.5 * slowdown, compute_s=0.5, bytes_sent=8 * (n - 1), bytes_received=8 * (n - 1),
         fetched=n - 1, served=n - 1, state_hash="h", train_loss=1.0, snapshot=None, slowdown=slowdown)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_text(str(r))
import torch
torch.save({"theta": torch.from_numpy(theta)}, opt("--state-out"))
emit("final", rounds_completed=rounds, state_path=opt("--state-out"), state_hash="h")
"""


@pytest.mark.timeout(300)
def test_a_whole_run_on_stand_in_peers_fires_the_plan_and_reports_every_figure(tmp_path: Path) -> None:
    from p2p_guard.simulation.orchestrator import run_simulation

    fake = tmp_path / "fake_peer.py"
    fake.write_text(_FAKE_PEER)
    plan = parse_plan(
        {
            "fault": [
                {"round": 1, "peer": 0, "kind": "slow", "factor": 2.0, "rounds": 4},
                {"round": 2, "peer": 1, "kind": "kill_restart"},
                {"round": 3, "kind": "kill_bootstrap"},
                {"round": 1, "peer": 2, "kind": "stop", "seconds": 1.0},
            ]
        },
        honest=3,
        source="plan.toml",
    )
    config = SimulationConfig(honest=3, byzantine=0, rounds=12, stop_grace_s=2.0, memory_sample_s=0.2)
    report = run_simulation(config, tmp_path / "run", entry=(sys.executable, str(fake)), faults=plan,
                            poll_interval_s=0.1)  # fmt: skip
    assert [r["round"] for r in report["rounds"]] == list(range(12))
    expected = 0.002 / (2**0.5)  # θ_i = (1, 1 + 0.001 i): the farthest pair is peers 0 and 2
    assert all(r["consensus_distance"] == pytest.approx(expected, rel=1e-4) for r in report["rounds"])
    assert all(r["consensus_peers"] == 3 for r in report["rounds"])
    assert report["consensus"]["source"] == "snapshots"
    assert list((tmp_path / "run" / "peer0.snapshots").iterdir()) == []  # deleted once measured
    assert report["updates_applied"]["fraction"] == 1.0
    assert report["trained_alone"]["any"] is False
    assert [f["fired"] for f in report["faults"]] == [True, True, True, True]
    slow, restart, bootstrap, stop = report["faults"]
    assert slow["fired_round"] >= 1 and slow["ended_round"] >= 5
    assert stop["ended_time"] - stop["fired_time"] >= 1.0
    assert all(f["recovery_rounds"] == 0 for f in report["faults"])
    events = [json.loads(line) for line in (tmp_path / "run" / "peer1.events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "ready" for e in events) == 2  # restarted once ...
    assert sorted({e["round"] for e in events if e["event"] == "round"}) == list(range(12))  # ... and resumed
    peer0 = [json.loads(line) for line in (tmp_path / "run" / "peer0.events.jsonl").read_text().splitlines()]
    assert {e["slowdown"] for e in peer0 if e["event"] == "round"} == {1.0, 2.0}  # the control file was read
    assert report["start_retries"] == {}
    assert report["memory"]["by_peer"]["0"]["samples"] >= 1
    assert report["fault_plan"]["source"] == "plan.toml"
    assert report["startup"]["swarm_s"] is not None


def test_a_fault_past_the_last_round_is_refused_before_any_process_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A position reaches ``rounds`` (the last round reported), never more: a later fault would never fire."""
    plan = parse_plan({"fault": [{"round": 10, "kind": "kill_bootstrap"},
                                 {"round": 11, "peer": 0, "kind": "kill_restart"}]}, honest=1, source="p.toml")
    check_plan_rounds(plan, 11)
    with pytest.raises(ValueError) as caught:
        check_plan_rounds(plan, 10)
    assert str(caught.value) == ("p.toml: fault 2 (kill_restart): round 11 is past the run's last round "
                                 "(--rounds 10); it would never fire")
    path = tmp_path / "plan.toml"
    path.write_text('[[fault]]\nround = 6\npeer = 1\nkind = "stop"\nseconds = 5\n')
    workdir = tmp_path / "run"
    code = cli_main(["simulate", "--honest", "3", "--byzantine", "0", "--rounds", "5", "--faults", str(path),
                     "--workdir", str(workdir), "--no-progress"])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"p2p-guard simulate: error: {path}: fault 1 (stop): round 6 is past the run's last round (--rounds 5); "
        "it would never fire"
    )
    assert not workdir.exists()


def test_the_documented_chaos_soak_plan_is_valid() -> None:
    plan = load_plan(Path(__file__).resolve().parents[2] / "docs" / "chaos-soak.toml", honest=10)
    assert [f.kind for f in plan.faults] == [
        "slow",
        "slow",
        "stop",
        "kill_restart",
        "clock_shift",
        "kill_bootstrap",
    ]


def test_timeouts_below_a_second_are_printed_as_given(tmp_path: Path) -> None:
    """``--timeout-s 0.001`` was reported as "within 0 s"."""
    from p2p_guard.simulation.orchestrator import SimulationTimeout, _drive, _Watchers
    from p2p_guard.simulation.snapshots import ConsensusTracker

    swarm = LocalSwarm(SimulationConfig(honest=1, byzantine=0, rounds=3, timeout_s=0.001), tmp_path / "run")
    with pytest.raises(SimulationTimeout, match=r"^the run did not finish within 0\.001 s \(0/3 rounds done\); "):
        _drive(swarm, time.monotonic(), None, 0.01, _Watchers(ConsensusTracker({0: tmp_path / "snapshots"}), 0.0))
    with pytest.raises(SimulationTimeout, match=r"^the first round: not within 0\.25 s; logs in "):
        swarm.wait_until(lambda: False, timeout_s=0.25, what="the first round")


_INDEX_1_EXITS = (
    "import json, sys, time; a = sys.argv; p = a[a.index('--events') + 1]; "
    "open(p, 'a').write(json.dumps({'event': 'ready', 'peer_id': p, 'time': time.time()}) + '\\n'); "
    "time.sleep(0 if a[a.index('--peer-index') + 1] == '1' else 60)"
)


def test_stop_stranded_ends_a_peer_left_alone_after_the_grace_only(tmp_path: Path) -> None:
    config = SimulationConfig(honest=2, byzantine=0, stop_grace_s=2.0)
    swarm = _stand_in_swarm(config, tmp_path, _INDEX_1_EXITS)
    try:
        swarm.start_peers()
        swarm.wait_ready(20.0)
        _wait(lambda: swarm.peers[1].returncode() is not None)
        assert swarm.stop_stranded(grace_s=0.5) == []  # the grace starts now
        assert swarm.peers[0].returncode() is None
        time.sleep(0.6)
        assert swarm.stop_stranded(grace_s=0.5) == [0]
        _wait(lambda: swarm.peers[0].returncode() is not None)
        assert swarm.stranded == [0]
        assert swarm.stop_stranded(grace_s=0.5) == []  # nobody left running
    finally:
        swarm.stop()
