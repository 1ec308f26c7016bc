"""A watchdog process that kills our leftover descendants when the process that started it dies.

A peer (or bootstrap) process runs ``p2pd`` as a child (``swarm.dht``). When the peer is killed with
SIGKILL, ``p2pd`` does not notice and runs forever. A peer (or bootstrap) process therefore calls
:func:`start_reaper` first thing, before it starts its DHT node. It launches this module
as a tiny separate program (standard library and psutil only; no torch, no hivemind, not even the
``p2p_guard`` package) that polls every ``poll_interval_s``:

1. it records the parent's descendants, recursively, as ``(pid, create_time)`` pairs, never itself (every
   ``poll_interval_s`` while they change, backing off to every :data:`MAX_RECORD_INTERVAL_S` when they do not);
2. as soon as the parent is gone (``os.getppid()`` changed: we were re-parented), it sends SIGTERM to every
   recorded descendant still alive whose create time matches (so a reused pid is never hit), waits up to
   ``grace_s``, sends SIGKILL to the rest, removes the Unix sockets a killed ``p2pd`` and its client leave in
   ``/tmp`` (:func:`daemon_sockets`), and exits.

The watchdog ignores SIGINT, SIGTERM and SIGHUP, so a signal sent to the whole process group (Ctrl+C in a
terminal, ``killpg`` by the simulator) cannot remove it before it has done its job; it never outlives its
parent by more than about ``poll_interval_s + grace_s``. :func:`stop_reaper` (SIGUSR1) ends it without a
sweep, for a parent that has shut its DHT node and ``p2pd`` down itself.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import psutil

__all__ = [
    "daemon_sockets",
    "remove_daemon_sockets",
    "start_reaper",
    "stop_reaper",
    "stop_reaper_if_clean",
    "sweep",
    "watch",
]

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.5
#: Longest wait between two listings of the parent's descendants once they stop changing (seconds).
MAX_RECORD_INTERVAL_S = 4.0
GRACE_S = 2.0
_IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def start_reaper(
    *, poll_interval_s: float = POLL_INTERVAL_S, grace_s: float = GRACE_S, log_level: int | None = None,
    own_session: bool = False,
) -> subprocess.Popen[bytes] | None:
    """Launch the watchdog for the current process; call it before starting ``p2pd`` (``swarm.dht.start_dht``).

    The watchdog shares our stderr (its few log lines land in our log) and, unless ``own_session``, our
    process group.

    Args:
        poll_interval_s: how often the watchdog looks at our descendants, in seconds.
        grace_s: time between SIGTERM and SIGKILL of leftovers, in seconds.
        log_level: the watchdog's log level (None: this module logger's effective level). At DEBUG it logs
            each descendant it starts watching; at INFO and above, only what it kills.
        own_session: start it in a session of its own, so that a SIGKILL to our whole process group spares
            it. For the simulator, whose peers lead sessions of their own: killed with its group, it left them
            running (and, once they were killed too, their ``p2pd`` sockets in ``/tmp``). A peer's watchdog
            stays in the peer's group, which the simulator stops as a whole.

    Returns:
        The watchdog process (pass it to :func:`stop_reaper` at clean shutdown), or None if it could not be
        started (logged as a warning: the peer still runs, only without this safety net).
    """
    command = [
        sys.executable,
        "-I",  # isolated: no user site, no script dir on sys.path, no PYTHON* variables
        os.path.abspath(__file__),
        "--parent-pid",
        str(os.getpid()),
        "--poll-interval-s",
        str(poll_interval_s),
        "--grace-s",
        str(grace_s),
        "--log-level",
        str(logger.getEffectiveLevel() if log_level is None else log_level),
    ]
    try:
        # our own interpreter running this file, arguments as a list, no shell
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, close_fds=True,  # noqa: S603
                                start_new_session=own_session)
    except OSError as e:
        logger.warning("could not start the process reaper: %s", e)
        return None
    logger.debug("process reaper started (pid %d)", proc.pid)
    return proc


def stop_reaper_if_clean(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop the watchdog if we have no other descendant left; otherwise leave it to sweep them after we exit.

    Call it as the last step of a clean shutdown: if ``p2pd`` (or another child) somehow survived, the
    watchdog (which outlives us by at most about two seconds) kills them.
    """
    if proc is None:
        return
    try:
        others = [p for p in psutil.Process().children(recursive=True) if p.pid != proc.pid]
    except psutil.Error:
        others = []
    if others:
        logger.warning("leaving the reaper to end %d leftover process(es): %s", len(others),
                       [p.pid for p in others])
        return
    stop_reaper(proc)


def stop_reaper(proc: subprocess.Popen[bytes] | None, *, timeout_s: float = 5.0) -> None:
    """End the watchdog without a sweep; call it once we have shut our DHT and ``p2pd`` down ourselves.

    Args:
        proc: what :func:`start_reaper` returned (None is accepted and ignored).
        timeout_s: how long to wait for it to exit before killing it, in seconds.
    """
    if proc is None or proc.poll() is not None:
        return
    deadline = time.monotonic() + timeout_s
    # SIGUSR1 before the watchdog's handler is in place (its interpreter still starting: a loaded machine, or a
    # node that stops within a second) killed it by the signal's default action (status -SIGUSR1, not 0)
    while not _catches(proc.pid, signal.SIGUSR1) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        proc.send_signal(signal.SIGUSR1)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        logger.warning("process reaper %d did not stop in %.1f s; killing it", proc.pid, timeout_s)
        proc.kill()
        proc.wait(timeout=timeout_s)
    except ProcessLookupError:
        proc.wait(timeout=timeout_s)


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (the ``SigCgt`` mask of ``/proc/PID/status``).

    True where ``/proc`` cannot tell (another system, the process gone): the caller then signals at once.
    """
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True


@dataclass
class _Watch:
    """What the watchdog knows: the parent and the descendants it has seen (pid -> create time)."""

    parent: psutil.Process
    own_pid: int
    seen: dict[int, float] = field(default_factory=dict)
    sockets: set[str] = field(default_factory=set)  # of every p2pd seen, removed by the sweep


def _descendants(proc: psutil.Process, exclude_pid: int) -> dict[int, float]:
    """Return ``{pid: create_time}`` of every live (non-zombie) descendant of ``proc`` except ``exclude_pid``.

    Returns {} if ``proc`` itself is gone (its pid may have been reused: its create time is checked).
    """
    try:
        if not proc.is_running():
            return {}
        children = proc.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}
    found: dict[int, float] = {}
    for child in children:
        if child.pid == exclude_pid:
            continue
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found[child.pid] = child.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _alive(pid: int, create_time: float) -> psutil.Process | None:
    """Return the process ``pid`` if it still runs and was created at ``create_time``; else None."""
    try:
        proc = psutil.Process(pid)
        if proc.create_time() != create_time or proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return proc


def _record(watch: _Watch) -> None:
    """Add the parent's current descendants to ``watch.seen`` and forget the ones that are gone."""
    still_alive = {pid: ct for pid, ct in watch.seen.items() if _alive(pid, ct) is not None}
    current = _descendants(watch.parent, watch.own_pid)
    new = sorted(set(current) - set(still_alive))
    if new:
        logger.debug("watching descendants of %d: new %s", watch.parent.pid, new)
    for pid in new:
        if (proc := _alive(pid, current[pid])) is not None:
            watch.sockets.update(daemon_sockets(_cmdline(proc)))
    still_alive.update(current)
    watch.seen = still_alive


def _parent_gone(watch: _Watch) -> bool:
    """True once our parent has exited (we were re-parented to init or a subreaper)."""
    return bool(os.getppid() != watch.parent.pid)


def _signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    """Send ``sig`` to each process, ignoring the ones that are already gone."""
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def sweep(seen: dict[int, float], *, grace_s: float, own_pid: int, sockets: Iterable[str] = ()) -> list[int]:
    """SIGTERM, then after ``grace_s`` SIGKILL, every recorded process still alive (and its descendants).

    Descendants of recorded processes are added before signalling: a grandchild started between two polls
    is still found through its parent. Then the Unix sockets of every ``p2pd`` among them, and ``sockets``,
    are removed (:func:`daemon_sockets`), also when nothing was left to signal: a ``p2pd`` that exits with its
    parent leaves its client's socket (and its own, after SIGKILL) behind.

    Args:
        seen: ``{pid: create_time}`` recorded earlier; a pid whose create time differs is left alone.
        grace_s: seconds to wait between SIGTERM and SIGKILL.
        own_pid: our own pid, never signalled.
        sockets: socket paths recorded earlier from the ``p2pd`` command lines seen (the daemon may be gone).

    Returns:
        The pids that were still alive and were signalled.
    """
    targets: dict[int, float] = dict(seen)
    for pid, create_time in list(seen.items()):
        if (proc := _alive(pid, create_time)) is not None:
            targets.update(_descendants(proc, own_pid))
    procs = [p for pid, ct in targets.items() if pid != own_pid and (p := _alive(pid, ct)) is not None]
    sockets = [*sockets, *(path for p in procs for path in daemon_sockets(_cmdline(p)))]
    if not procs:
        _remove_sockets(sockets)
        return []
    logger.warning("parent gone: terminating leftover processes %s", sorted(p.pid for p in procs))
    _signal_all(procs, signal.SIGTERM)
    _, remaining = psutil.wait_procs(procs, timeout=grace_s)
    remaining = [p for p in remaining if _alive(p.pid, p.create_time()) is not None]
    if remaining:
        logger.warning("killing leftover processes %s", sorted(p.pid for p in remaining))
        _signal_all(remaining, signal.SIGKILL)
        psutil.wait_procs(remaining, timeout=grace_s)
    _remove_sockets(sockets)
    return sorted(p.pid for p in procs)


_P2PD_LISTEN = re.compile(r"^-listen=/unix(/.*/)hivemind-p2pd-([A-Za-z0-9_-]+)\.sock$")


def daemon_sockets(cmdline: Sequence[str]) -> list[str]:
    """The Unix sockets a hivemind ``p2pd`` with this command line and its client leave behind when killed.

    hivemind starts ``p2pd`` with ``-listen=/unix/tmp/hivemind-p2pd-UID.sock`` and its own client listens on
    ``/tmp/hivemind-p2pclient-UID.sock`` (same UID); both are removed only by a clean shutdown, so a peer killed
    with SIGKILL left them in ``/tmp`` for good.

    Args:
        cmdline: a process's arguments (``psutil.Process.cmdline()``).

    Returns:
        The two paths when ``cmdline`` is such a ``p2pd``'s, else ``[]``.
    """
    for arg in cmdline:
        if (m := _P2PD_LISTEN.match(arg)) is not None:
            folder, uid = m.groups()
            return [f"{folder}hivemind-p2pd-{uid}.sock", f"{folder}hivemind-p2pclient-{uid}.sock"]
    return []


def remove_daemon_sockets(cmdlines: Iterable[Sequence[str]]) -> None:
    """Remove the Unix sockets of the ``p2pd`` processes with these command lines (killed: see :func:`daemon_sockets`).

    For a caller that SIGKILLs a whole process group, this watchdog included (the simulator's ``kill_restart``
    fault); read the command lines before the kill, a dead process has none.
    """
    _remove_sockets(path for cmdline in cmdlines for path in daemon_sockets(cmdline))


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _remove_sockets(paths: Iterable[str]) -> None:
    """Remove each path that is still a socket (never a regular file or a folder); absent ones are skipped."""
    for path in paths:
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
                logger.info("removed leftover socket %s", path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("could not remove leftover socket %s: %s", path, exc)


def _next_record_interval(current_s: float, poll_interval_s: float, *, changed: bool) -> float:
    """Seconds until the next look at the descendants.

    ``poll_interval_s`` after a change, else twice the last wait, at most :data:`MAX_RECORD_INTERVAL_S`. Listing
    the descendants scans every process of the machine (``psutil`` reads all of ``/proc``): twice a second, each
    reaper of an idle 4-peer swarm used about 1% of a core, and a simulation runs one per peer. Whether the parent
    is gone is still checked every ``poll_interval_s`` (one ``getppid``); a child started while the reaper looks
    rarely is recorded within :data:`MAX_RECORD_INTERVAL_S`.
    """
    if changed:
        return poll_interval_s
    return min(max(current_s, poll_interval_s) * 2, max(MAX_RECORD_INTERVAL_S, poll_interval_s))


def watch(parent_pid: int, *, poll_interval_s: float, grace_s: float) -> int:
    """Watch ``parent_pid`` until it exits (then sweep its leftovers) or until SIGUSR1 (no sweep).

    Args:
        parent_pid: the process whose descendants we protect the system from; must be our parent.
        poll_interval_s: seconds between two looks at the descendants.
        grace_s: seconds between SIGTERM and SIGKILL of leftovers.

    Returns:
        The exit code of the watchdog: 0.
    """
    stop_requested: list[bool] = []
    for sig in _IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: stop_requested.append(True))
    try:
        parent = psutil.Process(parent_pid)
        parent.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        parent = None
    if parent is None or os.getppid() != parent_pid:  # it died before we started: nothing was recorded
        logger.warning("parent %d exited before the reaper started", parent_pid)
        return 0
    state = _Watch(parent=parent, own_pid=os.getpid())
    record_every_s, next_record = poll_interval_s, 0.0
    while not stop_requested:
        now = time.monotonic()
        if now >= next_record:
            before = set(state.seen)
            _record(state)
            record_every_s = _next_record_interval(record_every_s, poll_interval_s, changed=set(state.seen) != before)
            next_record = now + record_every_s
        if _parent_gone(state):
            sweep(state.seen, grace_s=grace_s, own_pid=state.own_pid, sockets=state.sockets)
            return 0
        time.sleep(poll_interval_s)
    logger.debug("reaper of %d stopped on request", parent_pid)
    return 0


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the watchdog's command line (it is only started by :func:`start_reaper`)."""
    parser = argparse.ArgumentParser(description="Kill a process's leftover descendants once it dies.")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--poll-interval-s", type=float, default=POLL_INTERVAL_S)
    parser.add_argument("--grace-s", type=float, default=GRACE_S)
    parser.add_argument("--log-level", type=int, default=logging.INFO, help="numeric logging level")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the watchdog program (a separate process; it installs its own log handler)."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format=f"%(asctime)s reaper[{os.getpid()}] %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    return watch(args.parent_pid, poll_interval_s=args.poll_interval_s, grace_s=args.grace_s)


if __name__ == "__main__":
    sys.exit(main())
