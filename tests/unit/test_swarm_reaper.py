"""The peer's watchdog (``swarm.reaper``): how often it lists the parent's descendants."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from p2p_guard.swarm.reaper import (
    MAX_RECORD_INTERVAL_S,
    _next_record_interval,
    _record,
    _remove_sockets,
    _Watch,
    daemon_sockets,
    sweep,
)


def test_the_reaper_backs_off_while_nothing_changes_and_returns_to_fast_polls_on_a_change() -> None:
    waits, current = [], 0.5
    for _ in range(6):
        current = _next_record_interval(current, 0.5, changed=False)
        waits.append(current)
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0] and MAX_RECORD_INTERVAL_S == 4.0
    assert _next_record_interval(4.0, 0.5, changed=True) == 0.5
    assert _next_record_interval(0.1, 10.0, changed=False) == 10.0  # never faster than the parent check


def test_the_sockets_of_a_hivemind_p2pd_command_line() -> None:
    cmd = ["/x/p2pd", "-b=false", "-listen=/unix/tmp/hivemind-p2pd-AbC_d-9.sock", "-id=/k"]
    assert daemon_sockets(cmd) == ["/tmp/hivemind-p2pd-AbC_d-9.sock", "/tmp/hivemind-p2pclient-AbC_d-9.sock"]
    assert daemon_sockets(["/x/p2pd", "-listen=/ip4/127.0.0.1/tcp/1"]) == []
    assert daemon_sockets(["python", "-listen=/unix/tmp/hivemind-p2pd-../x.sock"]) == []  # no path tricks
    assert daemon_sockets([]) == []


def _bound_sockets(folder: Path, uid: str) -> tuple[Path, Path, list[socket.socket]]:
    """A p2pd's and its client's Unix sockets (as hivemind names them) in ``folder``, bound; close the list after."""
    daemon, client = folder / f"hivemind-p2pd-{uid}.sock", folder / f"hivemind-p2pclient-{uid}.sock"
    listeners = []
    for path in (daemon, client):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        listeners.append(sock)
    return daemon, client, listeners


def test_a_sweep_removes_the_sockets_of_a_killed_daemon_and_nothing_else(tmp_path: Path) -> None:
    uid = "Tst_1"
    daemon, client, listeners = _bound_sockets(tmp_path, uid)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"-listen=/unix{daemon}"])
    try:
        _wait_for_cmdline(proc.pid, f"-listen=/unix{daemon}")  # until then the sweep cannot see it is a p2pd
        ps = psutil.Process(proc.pid)
        assert sweep({proc.pid: ps.create_time()}, grace_s=5.0, own_pid=os.getpid()) == [proc.pid]
        proc.wait(timeout=5)
        assert not daemon.exists()
        assert not client.exists()
    finally:
        proc.kill()
        for sock in listeners:
            sock.close()
    regular = tmp_path / f"hivemind-p2pd-{uid}.sock"
    regular.write_text("not a socket")
    _remove_sockets([str(regular), str(tmp_path / "absent.sock")])
    assert regular.read_text() == "not a socket"


def test_a_sweep_removes_the_recorded_sockets_of_a_daemon_that_already_exited(tmp_path: Path) -> None:
    """A p2pd that exits with its parent leaves its client's socket: nothing to signal, the sockets still go."""
    uid = "Gone_2"
    daemon, client, listeners = _bound_sockets(tmp_path, uid)
    proc = subprocess.Popen([sys.executable, "-c", "pass", f"-listen=/unix{daemon}"])
    created = psutil.Process(proc.pid).create_time()
    proc.wait(timeout=30)
    try:
        recorded = daemon_sockets([sys.executable, f"-listen=/unix{daemon}"])
        assert sweep({proc.pid: created}, grace_s=1.0, own_pid=os.getpid(), sockets=recorded) == []
        assert not daemon.exists()
        assert not client.exists()
    finally:
        for sock in listeners:
            sock.close()


def test_the_watch_records_the_sockets_of_each_new_daemon(tmp_path: Path) -> None:
    daemon = tmp_path / "hivemind-p2pd-Rec_3.sock"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"-listen=/unix{daemon}"])
    try:
        _wait_for_cmdline(proc.pid, f"-listen=/unix{daemon}")
        watch = _Watch(parent=psutil.Process(os.getpid()), own_pid=-1)
        _record(watch)
        assert proc.pid in watch.seen
        assert watch.sockets >= {str(daemon), str(tmp_path / "hivemind-p2pclient-Rec_3.sock")}
    finally:
        proc.kill()
        proc.wait(timeout=5)


def _wait_for_cmdline(pid: int, arg: str) -> None:
    """Until the child's command line is the interpreter's (a just-forked child still shows ours)."""
    deadline = time.monotonic() + 10
    while arg not in psutil.Process(pid).cmdline():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_killing_a_peers_group_removes_its_p2pds_sockets(tmp_path: Path) -> None:
    """The simulator's ``kill_restart`` SIGKILLs a peer's whole group, its watchdog too: the sockets go all the same."""
    from p2p_guard.simulation.processes import RUN_DIR_ENV, kill_group, launch

    daemon, client, listeners = _bound_sockets(tmp_path, "Grp_4")
    fake_p2pd = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', " \
                f"'-listen=/unix{daemon}']); time.sleep(60)"
    proc = launch("peer0", [sys.executable, "-c", fake_p2pd], log_path=tmp_path / "peer0.log",
                  env={**os.environ, RUN_DIR_ENV: str(tmp_path)})
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(proc.pid).children():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        child = psutil.Process(proc.pid).children()[0]
        _wait_for_cmdline(child.pid, f"-listen=/unix{daemon}")
        kill_group(proc)
        assert proc.popen.wait(timeout=5) == -9
        assert not daemon.exists()
        assert not client.exists()
    finally:
        proc.popen.kill()
        for sock in listeners:
            sock.close()


def test_a_reaper_stopped_right_after_its_start_exits_cleanly() -> None:
    """`make test` on a loaded 2-core machine: test_stop_reaper_ends_it_without_touching_children failed with the
    reaper's status -10: SIGUSR1 reached it before its handler was installed (interpreter still starting), and the
    signal's default action killed it. A node that stops within its first second (a failed start) did the same."""
    from p2p_guard.swarm.reaper import start_reaper, stop_reaper

    reaper = start_reaper(poll_interval_s=0.1)
    assert reaper is not None
    stop_reaper(reaper, timeout_s=30)  # at once: the reaper's interpreter is still starting
    assert reaper.returncode == 0
