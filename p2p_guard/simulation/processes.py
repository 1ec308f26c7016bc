"""OS processes of a local swarm: each in its own session, marked by the run directory, stopped by group.

Every process the simulator starts gets ``P2P_GUARD_RUN_DIR=<absolute workdir>`` in its environment. Children
inherit it, and so do hivemind's forked DHT process and its ``p2pd`` (hivemind copies ``os.environ`` for the
daemon), so :func:`find_marked_processes` finds *all* processes of a run by reading ``/proc/<pid>/environ``,
whoever their parent is now. That is the last sweep after stopping a run, and the orphan check of the tests.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from p2p_guard.swarm.reaper import remove_daemon_sockets

__all__ = [
    "RUN_DIR_ENV",
    "ManagedProcess",
    "find_marked_processes",
    "kill_group",
    "kill_processes",
    "launch",
    "stop_processes",
]

logger = logging.getLogger(__name__)

RUN_DIR_ENV = "P2P_GUARD_RUN_DIR"
_POLL_S = 0.1
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)
_UNREADABLE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


@dataclass
class ManagedProcess:
    """One process we started, leader of its own session and process group (pgid == pid).

    Attributes:
        name: short name used in messages (``bootstrap``, ``peer3``).
        popen: the process.
        log_path: file that receives its stdout and stderr.
        run_dir: the value of :data:`RUN_DIR_ENV` it was started with (None: unmarked).
    """

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    run_dir: str | None = None

    @property
    def pid(self) -> int:
        """The process id (also its process-group id)."""
        return self.popen.pid

    def returncode(self) -> int | None:
        """Exit status if it has exited (negative: killed by that signal), else None."""
        return self.popen.poll()


def launch(
    name: str, command: Sequence[str], *, log_path: Path, env: Mapping[str, str], cwd: Path | None = None
) -> ManagedProcess:
    """Start ``command`` in a new session with stdout and stderr appended to ``log_path``.

    Args:
        name: short name for messages.
        command: program and arguments.
        log_path: log file (created or appended to).
        env: the complete environment of the process (include :data:`RUN_DIR_ENV`).
        cwd: working directory (None: ours).

    Returns:
        The started process.
    """
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        popen = subprocess.Popen(  # noqa: S603 - our own program, arguments as a list, no shell
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    logger.debug("started %s (pid %d): %s", name, popen.pid, " ".join(command))
    return ManagedProcess(name=name, popen=popen, log_path=log_path, run_dir=env.get(RUN_DIR_ENV))


def _members(procs: Sequence[ManagedProcess]) -> dict[int, list[psutil.Process]]:
    """``pid -> live members of its process group`` for each of ``procs``, in one scan of the process table.

    A member must carry the process's run marker (when it has one): once a group is empty its id may be reused
    by an unrelated session, which must never be mistaken for ours.
    """
    wanted = {p.pid: p.run_dir for p in procs}
    found: dict[int, list[psutil.Process]] = {pid: [] for pid in wanted}
    for proc in psutil.process_iter():
        try:
            pgid = os.getpgid(proc.pid)
            if pgid not in wanted or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            marker = wanted[pgid]
            if marker is None or proc.environ().get(RUN_DIR_ENV) == marker:
                found[pgid].append(proc)
        except (ProcessLookupError, PermissionError, *_UNREADABLE):
            continue
    return found


def kill_group(proc: ManagedProcess) -> None:
    """SIGKILL the process group of ``proc`` at once (a fault, no grace); see :func:`_kill_group`."""
    _kill_group(proc, _members([proc])[proc.pid])


def _kill_group(proc: ManagedProcess, members: Sequence[psutil.Process]) -> None:
    """SIGKILL the group of ``proc``: with ``killpg`` while its leader is unreaped, else member by member.

    While the leader has not been waited for, its pid, and so the group id, cannot be reused; after that,
    only the members we identified (psutil checks their create time) are signalled. Then the Unix sockets that
    the group's ``p2pd`` leaves in ``/tmp`` are removed: the peer's watchdog (``swarm.reaper``), which removes
    them when a peer alone is killed, dies in the same group.
    """
    cmdlines = [_cmdline(member) for member in members]
    if proc.popen.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for member in members:
        try:
            member.kill()
        except _GONE:
            continue
    remove_daemon_sockets(cmdlines)


def _cmdline(proc: psutil.Process) -> list[str]:
    """The command line of ``proc``; empty when it cannot be read (gone, or not ours)."""
    try:
        return proc.cmdline()
    except _UNREADABLE:
        return []


def _reap(procs: Iterable[ManagedProcess]) -> None:
    """Collect the exit status of those of our direct children that have exited (no zombies left)."""
    for proc in procs:
        proc.popen.poll()


def _wait_groups_empty(
    procs: Sequence[ManagedProcess], timeout_s: float
) -> list[tuple[ManagedProcess, list[psutil.Process]]]:
    """Wait until no live process remains in any of the groups; return those still populated, with members."""
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(procs)
        members = _members(procs)
        busy = [(p, members[p.pid]) for p in procs if members[p.pid]]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(_POLL_S)


def stop_processes(
    procs: Sequence[ManagedProcess], *, grace_s: float = 10.0, kill_wait_s: float = 5.0
) -> None:
    """SIGTERM each process, wait up to ``grace_s`` for its whole group to exit, then SIGKILL the group.

    SIGTERM goes to the leader only, not to the group: a peer shuts its hivemind DHT process and ``p2pd`` down
    itself, and a DHT process that received SIGTERM on its own would die under it and stall that shutdown.
    Whatever is still in the group after ``grace_s`` is killed together. Safe to call twice and on processes
    that have already exited. Only the groups of ``procs`` are touched.

    Args:
        procs: processes started by :func:`launch` (each leads its own group).
        grace_s: seconds a group has to empty after SIGTERM.
        kill_wait_s: seconds to wait for the groups to vanish after SIGKILL.
    """
    _reap(procs)
    for proc in procs:
        if proc.returncode() is None:
            proc.popen.send_signal(signal.SIGTERM)  # Popen never signals a pid it has already reaped
    busy = _wait_groups_empty(procs, grace_s)
    for proc, members in busy:
        logger.warning(
            "%s (pid %d) or its children still run %.0f s after SIGTERM; killing its process group",
            proc.name,
            proc.pid,
            grace_s,
        )
        _kill_group(proc, members)
    busy = _wait_groups_empty([proc for proc, _ in busy], kill_wait_s)
    for proc, members in busy:
        logger.error(
            "process group %d of %s survived SIGKILL: %s", proc.pid, proc.name, [m.pid for m in members]
        )
    for proc in procs:
        try:
            proc.popen.wait(timeout=kill_wait_s)
        except subprocess.TimeoutExpired:
            logger.error("%s (pid %d) did not exit", proc.name, proc.pid)


def _marked(proc: psutil.Process, key: str, value: str) -> bool:
    """True if ``proc`` is alive (not a zombie) and has ``key=value`` in its environment."""
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(key) == value)
    except _UNREADABLE:
        return False


def find_marked_processes(value: str, *, key: str = RUN_DIR_ENV) -> list[psutil.Process]:
    """Return every live process (except this one) whose environment holds ``key=value``.

    Args:
        value: the marker value, e.g. the absolute run directory.
        key: the environment variable (default :data:`RUN_DIR_ENV`).

    Returns:
        The matching processes; zombies and processes we may not read are left out.
    """
    own = os.getpid()
    return [p for p in psutil.process_iter() if p.pid != own and _marked(p, key, value)]


def kill_processes(procs: Sequence[psutil.Process], *, grace_s: float = 2.0) -> None:
    """SIGTERM the processes, wait up to ``grace_s``, then SIGKILL the survivors (each by pid, checked).

    Args:
        procs: processes to end (psutil checks each one's create time, so a reused pid is not hit).
        grace_s: seconds between SIGTERM and SIGKILL.
    """
    for proc in procs:
        try:
            proc.terminate()
        except _GONE:
            continue
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except _GONE:
            continue
    psutil.wait_procs(alive, timeout=grace_s)
