"""OS processes of a local swarm: each in its own session, marked by the run directory, stopped by group.

Every process the simulator starts gets ``P2P_GUARD_RUN_DIR=<absolute workdir>`` in its environment. Children
inherit it, and so do hivemind's forked DHT process and its ``p2pd`` (hivemind copies ``os.environ`` for the
daemon), so :func:`find_marked_processes` finds *all* processes of a run by reading ``/proc/<pid>/environ``,
whoever their parent is now. That is the last sweep after stopping a run, and the orphan check of the tests.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = [
    "RUN_DIR_ENV",
    "ManagedProcess",
    "find_marked_processes",
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
    """

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

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
        popen = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    logger.debug("started %s (pid %d): %s", name, popen.pid, " ".join(command))
    return ManagedProcess(name=name, popen=popen, log_path=log_path)


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, PermissionError, *_UNREADABLE):
            continue
    return members


def _signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``, if it still exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return


def _reap(procs: Iterable[ManagedProcess]) -> None:
    """Collect the exit status of those of our direct children that have exited (no zombies left)."""
    for proc in procs:
        proc.popen.poll()


def _wait_groups_empty(procs: Sequence[ManagedProcess], timeout_s: float) -> list[ManagedProcess]:
    """Wait until no live process remains in any of the groups; return the ones still populated."""
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(procs)
        busy = [p for p in procs if _group_members(p.pid)]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(_POLL_S)


def stop_processes(procs: Sequence[ManagedProcess], *, grace_s: float = 10.0, kill_wait_s: float = 5.0) -> None:
    """SIGTERM each process group, wait up to ``grace_s``, then SIGKILL the groups that are not empty.

    Safe to call twice and on processes that have already exited. Only the groups of ``procs`` are touched.

    Args:
        procs: processes started by :func:`launch` (each leads its own group).
        grace_s: seconds a group has to exit after SIGTERM.
        kill_wait_s: seconds to wait for the groups to vanish after SIGKILL.
    """
    _reap(procs)
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    busy = _wait_groups_empty(procs, grace_s)
    for proc in busy:
        logger.warning("%s (pid %d) did not stop within %.0f s of SIGTERM; killing its group", proc.name,
                       proc.pid, grace_s)
        _signal_group(proc.pid, signal.SIGKILL)
    busy = _wait_groups_empty(busy, kill_wait_s)
    for proc in busy:
        logger.error("process group %d of %s survived SIGKILL", proc.pid, proc.name)
    for proc in procs:
        try:
            proc.popen.wait(timeout=kill_wait_s)
        except subprocess.TimeoutExpired:
            logger.error("%s (pid %d) did not exit", proc.name, proc.pid)


def _marked(proc: psutil.Process, key: str, value: str) -> bool:
    """True if ``proc`` is alive (not a zombie) and has ``key=value`` in its environment."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(key) == value
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
