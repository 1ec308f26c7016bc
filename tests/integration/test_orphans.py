"""No orphans: whatever way a peer or a simulation ends, none of our processes remains.

"Our processes" include each peer's ``p2pd`` and its watchdog. A run's processes are found by the
``P2P_GUARD_RUN_DIR`` marker in their environment (inherited by everything below the processes the simulator
starts), so a process that lost its parent or started its own session is still found.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
import pytest

from p2p_guard.simulation.processes import find_marked_processes

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runs the real CLI; SIGINT is given back its default Python handler first, because a process started from a
# non-interactive shell's background job inherits SIGINT ignored and would never see Ctrl+C.
CLI_SNIPPET = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv = ['p2p-guard', *sys.argv[1:]]; runpy.run_module('p2p_guard.cli.main', run_name='__main__')"
)
#: As a background job of a non-interactive shell: SIGINT ignored (inherited), then ``main()`` as the program.
CLI_SNIPPET_SIGINT_IGNORED = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "sys.argv = ['p2p-guard', *sys.argv[1:]]; from p2p_guard.cli.main import main; sys.exit(main())"
)

# A process that arms the reaper, then forks a grandchild with subprocess and one with multiprocessing.
REAPER_CHILD = textwrap.dedent(
    """
    import json, logging, multiprocessing, subprocess, sys, time
    from p2p_guard.swarm.reaper import start_reaper

    reaper = start_reaper(log_level=logging.DEBUG)
    sleeper = subprocess.Popen(["sleep", "300"])
    forked = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,), daemon=True)
    forked.start()
    print(json.dumps({"reaper": reaper.pid, "children": [sleeper.pid, forked.pid]}), flush=True)
    time.sleep(float(sys.argv[1]))
    """
)


def _wait_for(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; return its last value."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return condition()
        time.sleep(poll_s)
    return True


def _running(pids_ctimes: dict[int, float]) -> list[int]:
    """The pids of ``{pid: create_time}`` that still run (same create time, not a zombie)."""
    alive = []
    for pid, ctime in pids_ctimes.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == ctime and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return alive


def _descendants(pid: int) -> dict[int, float]:
    """``{pid: create_time}`` of the live descendants of ``pid``."""
    out = {}
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            out[proc.pid] = proc.create_time()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return out


def _names(pids: Iterable[int]) -> list[str]:
    """Process names of the pids that still exist (for assertion messages)."""
    names = []
    for pid in pids:
        try:
            names.append(psutil.Process(pid).name())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return names


def _start_reaper_child(tmp_path: Path, lifetime_s: float) -> tuple[subprocess.Popen[str], dict, Path]:
    """Start :data:`REAPER_CHILD` in its own session; return it, the pids it reports and its log."""
    log_path = tmp_path / "child.log"
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", REAPER_CHILD, str(lifetime_s)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            cwd=REPO_ROOT,
        )
    assert child.stdout is not None
    line = child.stdout.readline()
    child.stdout.close()
    assert line, f"the child reported nothing; its log:\n{log_path.read_text()}"
    info = json.loads(line)
    # The reaper logs the pids it starts watching: wait until both grandchildren are recorded.
    recorded = _wait_for(lambda: all(str(p) in log_path.read_text() for p in info["children"]), timeout_s=15)
    assert recorded, f"the reaper did not record {info['children']}; log:\n{log_path.read_text()}"
    return child, info, log_path


# -- the reaper on its own (no network) ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_reaper_kills_descendants_of_a_sigkilled_process(tmp_path: Path) -> None:
    child, info, log_path = _start_reaper_child(tmp_path, lifetime_s=300)
    watched = _descendants(child.pid)
    assert set(info["children"]) | {info["reaper"]} <= set(watched)

    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)

    gone = _wait_for(lambda: not _running(watched), timeout_s=5)
    assert gone, f"left after 5 s: {_names(_running(watched))}; log:\n{log_path.read_text()}"


@pytest.mark.timeout(60)
def test_reaper_exits_with_its_parent_and_kills_leftovers(tmp_path: Path) -> None:
    child, info, log_path = _start_reaper_child(tmp_path, lifetime_s=1)
    watched = _descendants(child.pid)

    # The child exits normally without stopping its `sleep`: the reaper removes it, then exits itself.
    assert child.wait(timeout=20) == 0
    gone = _wait_for(lambda: not _running(watched), timeout_s=8)
    assert gone, f"left: {_running(watched)}; log:\n{log_path.read_text()}"


@pytest.mark.timeout(60)
def test_stop_reaper_ends_it_without_touching_children() -> None:
    from p2p_guard.swarm.reaper import start_reaper, stop_reaper

    sleeper = subprocess.Popen(["sleep", "60"])
    reaper = start_reaper(poll_interval_s=0.1)
    try:
        assert reaper is not None
        time.sleep(0.5)
        stop_reaper(reaper, timeout_s=5)
        assert reaper.returncode == 0
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait(timeout=5)


# -- simulate, end to end (real peers) -------------------------------------------------------------------


def _simulate(workdir: Path, *args: str, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    """Start ``p2p-guard simulate`` with its work directory in its own session, output to a log file.

    ``sigint_ignored``: start it as a shell starts a background job (``simulate ... &`` in a script), SIGINT
    ignored, and through the installed entry point's code path (``main()`` with no arguments).
    """
    with open(workdir.parent / f"{workdir.name}.simulate.log", "w") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLI_SNIPPET_SIGINT_IGNORED if sigint_ignored else CLI_SNIPPET,
                "simulate",
                "--workdir",
                str(workdir),
                "--no-progress",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            cwd=REPO_ROOT,
        )


def _simulate_output(workdir: Path) -> str:
    """What ``simulate`` printed."""
    return (workdir.parent / f"{workdir.name}.simulate.log").read_text()


def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill a simulate process group that a failed test left behind."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _assert_nothing_left(workdir: Path) -> None:
    """No live process carries this run's marker (zombies waiting for init are not processes we run)."""
    left = find_marked_processes(str(workdir.resolve()))
    assert not left, f"processes left: {[(p.pid, p.name()) for p in left]}"


def _all_ready(workdir: Path, peers: int) -> bool:
    """True once each peer's event file holds its ``ready`` event."""
    for i in range(peers):
        path = workdir / f"peer{i}.events.jsonl"
        if not path.exists() or '"ready"' not in path.read_text():
            return False
    return True


def _peer_pid(workdir: Path, index: int) -> int | None:
    """Pid of peer ``index`` of a run (the session leader whose command line names that index)."""
    for proc in find_marked_processes(str(workdir.resolve())):
        try:
            cmdline = proc.cmdline()
            if proc.pid == os.getsid(proc.pid) and "peer" in cmdline and "--peer-index" in cmdline:
                i = cmdline.index("--peer-index")
                if cmdline[i + 1] == str(index):
                    return proc.pid
        except (psutil.NoSuchProcess, ProcessLookupError, ValueError, IndexError):
            continue
    return None


SMALL_RUN = ("--task", "digits", "--honest", "2", "--byzantine", "1", "--attack", "sign_flip:scale=10",
             "--inner-steps", "2", "--seed", "0")  # fmt: skip


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(420)
def test_simulate_that_ends_normally_leaves_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    proc = _simulate(workdir, *SMALL_RUN, "--rounds", "2", "--report", str(tmp_path / "out.json"))
    try:
        assert proc.wait(timeout=360) == 0, _simulate_output(workdir)
    finally:
        _stop(proc)
    _assert_nothing_left(workdir)
    report = json.loads((tmp_path / "out.json").read_text())
    assert len(report["rounds"]) == 2
    assert {"config", "final", "guard", "consensus_distance", "bytes_sent_per_peer_per_round"} <= set(report)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("sig", "code", "sigint_ignored"),
                         [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
                         ids=["sigterm", "sigint-background-job"])
def test_simulate_interrupted_leaves_nothing(tmp_path: Path, sig: signal.Signals, code: int,
                                            sigint_ignored: bool) -> None:
    """Interrupted in its first round. SIGINT after two rounds is the partial-report test below (same checks).

    ``sigint-background-job``: started with SIGINT ignored, as ``p2p-guard simulate ... &`` in a script is; it
    ran on after ``kill -INT`` until the test's timeout.
    """
    workdir = tmp_path / "run"
    proc = _simulate(workdir, *SMALL_RUN, "--rounds", "200", sigint_ignored=sigint_ignored)
    try:
        assert _wait_for(lambda: _all_ready(workdir, 3) or proc.poll() is not None, timeout_s=240)
        assert proc.poll() is None, _simulate_output(workdir)
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code, _simulate_output(workdir)
    finally:
        _stop(proc)
    _assert_nothing_left(workdir)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(420)
def test_simulate_killed_with_its_whole_group_leaves_nothing(tmp_path: Path) -> None:
    """SIGKILL to simulate's process group: its reaper (a session of its own) stops the peers, removes their sockets.

    In simulate's group, the reaper died with it: the peers (each in its own session) ran on, and their ``p2pd``
    sockets stayed in ``/tmp`` once they were killed.
    """
    from p2p_guard.swarm.reaper import daemon_sockets

    workdir = tmp_path / "run"
    proc = _simulate(workdir, *SMALL_RUN, "--rounds", "200")
    try:
        assert _wait_for(lambda: _all_ready(workdir, 3) or proc.poll() is not None, timeout_s=240)
        assert proc.poll() is None, _simulate_output(workdir)
        sockets = [path for p in find_marked_processes(str(workdir.resolve())) for path in daemon_sockets(p.cmdline())]
        assert sockets
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_for(lambda: not find_marked_processes(str(workdir.resolve())), timeout_s=30)
    finally:
        _stop(proc)
    _assert_nothing_left(workdir)
    assert _wait_for(lambda: not [path for path in sockets if os.path.exists(path)], timeout_s=10), sockets


def _rounds_done(workdir: Path, index: int) -> int:
    path = workdir / f"peer{index}.events.jsonl"
    return path.read_text().count('"event": "round"') if path.exists() else 0


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(420)
def test_simulate_interrupted_writes_the_partial_report(tmp_path: Path) -> None:
    """Ctrl+C after a couple of rounds (issue 11): the report of the completed rounds is written, and said where."""
    workdir, out = tmp_path / "run", tmp_path / "partial.json"
    proc = _simulate(workdir, *SMALL_RUN, "--rounds", "200", "--report", str(out))
    try:
        assert _wait_for(lambda: min(_rounds_done(workdir, i) for i in range(2)) >= 2 or proc.poll() is not None,
                         timeout_s=300)
        assert proc.poll() is None, _simulate_output(workdir)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        assert proc.wait(timeout=60) == 130, _simulate_output(workdir)
        print(f"simulate exited {time.monotonic() - sent:.1f} s after SIGINT")
    finally:
        _stop(proc)
    _assert_nothing_left(workdir)
    report = json.loads(out.read_text())
    assert json.loads((workdir / "report.json").read_text()) == report
    done = report["interrupted"]["rounds_completed"]
    assert done >= 2 and report["interrupted"]["rounds_planned"] == 200
    assert [row["round"] for row in report["rounds"][:done]] == list(range(done))
    assert {"config", "final", "guard", "consensus_distance", "bytes_sent_per_peer_per_round"} <= set(report)
    assert f"partial report: {out}" in _simulate_output(workdir)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_simulate_with_a_bad_attack_fails_fast_and_leaves_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    proc = _simulate(
        workdir, "--honest", "2", "--byzantine", "1", "--attack", "no_such_attack", "--rounds", "2"
    )
    try:
        assert proc.wait(timeout=90) != 0
    finally:
        _stop(proc)
    assert "no_such_attack" in _simulate_output(workdir)
    _assert_nothing_left(workdir)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.live
@pytest.mark.timeout(420)
def test_simulate_stops_everything_when_a_peer_dies(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    proc = _simulate(workdir, *SMALL_RUN, "--rounds", "200")
    try:
        assert _wait_for(lambda: _all_ready(workdir, 3) or proc.poll() is not None, timeout_s=240)
        pid = _peer_pid(workdir, 1)
        assert pid is not None, _simulate_output(workdir)
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == 1, _simulate_output(workdir)
    finally:
        _stop(proc)
    output = _simulate_output(workdir)
    assert str(workdir / "peer1.log") in output
    _assert_nothing_left(workdir)


# -- one peer of a live swarm ----------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(360)
def test_peer_exits_cleanly_on_sigterm(swarm: Callable[..., object]) -> None:
    local = swarm(2, rounds=200, inner_steps=2)
    peer = local.peers[0]
    watched = _descendants(peer.pid)
    assert any("p2pd" in name for name in _names(watched)), _names(watched)

    os.kill(peer.pid, signal.SIGTERM)
    code = peer.popen.wait(timeout=60)
    assert code in (0, 128 + signal.SIGTERM), f"exit code {code}; log: {peer.log_path}"
    gone = _wait_for(lambda: not _running(watched), timeout_s=5)
    assert gone, f"left after the peer exited: {_names(_running(watched))}"


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(360)
def test_sigkilled_peer_leaves_no_dht_process_or_p2pd(swarm: Callable[..., object]) -> None:
    local = swarm(2, rounds=200, inner_steps=2)
    peer = local.peers[0]
    watched = _descendants(peer.pid)
    assert any("p2pd" in name for name in _names(watched)), _names(watched)

    os.kill(peer.pid, signal.SIGKILL)
    peer.popen.wait(timeout=10)
    gone = _wait_for(lambda: not _running(watched), timeout_s=5)
    assert gone, f"left 5 s after SIGKILL: {_names(_running(watched))}"


# -- stopping process groups (no network) ----------------------------------------------------------------

STUBBORN = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the child inherits this: it ignores SIGTERM too
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    subprocess.Popen(["setsid", "sleep", "300"])  # escapes the group: only the run marker finds it
    print("up", flush=True)
    time.sleep(300)
    """
)


@pytest.mark.timeout(60)
def test_stop_processes_kills_groups_that_ignore_sigterm_and_marked_escapees(tmp_path: Path) -> None:
    from p2p_guard.simulation.processes import RUN_DIR_ENV, kill_processes, launch, stop_processes

    marker = str(tmp_path)
    env = dict(os.environ, **{RUN_DIR_ENV: marker})
    proc = launch("stubborn", [sys.executable, "-c", STUBBORN], log_path=tmp_path / "s.log", env=env)
    assert _wait_for(lambda: "up" in (tmp_path / "s.log").read_text(), timeout_s=20)
    assert _wait_for(lambda: len(find_marked_processes(marker)) == 3, timeout_s=10)

    started = time.monotonic()
    stop_processes([proc], grace_s=1.0)
    assert time.monotonic() - started < 8
    assert proc.returncode() == -signal.SIGKILL
    escaped = find_marked_processes(marker)
    assert [p.name() for p in escaped] == ["sleep"]  # its own session: not in the group
    kill_processes(escaped)
    assert not find_marked_processes(marker)
