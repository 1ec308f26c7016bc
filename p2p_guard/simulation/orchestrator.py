"""Run a whole swarm locally: a bootstrap node and every peer as its own OS process on 127.0.0.1.

Nothing is simulated in-process: each peer is ``python -m p2p_guard.cli.main peer ...`` with real hivemind
DHT and P2P. :class:`LocalSwarm` starts and stops the processes (the integration tests use it too);
:func:`run_simulation` drives one run to its end and builds the report from the peers' event files.

Process hygiene: every process leads its own session (``start_new_session=True``). It is stopped with
SIGTERM, and after ``stop_grace_s`` its whole process group, the DHT process and ``p2pd`` it forked included,
gets SIGKILL. Every process also carries ``P2P_GUARD_RUN_DIR=<workdir>`` in its environment, inherited by
everything below it; after stopping the groups, any process still carrying it is killed. A reaper watchdog
(:mod:`p2p_guard.swarm.reaper`) kills them all if the simulator itself is killed.

Scale (issue 8, rule 10): at most ``start_concurrency`` peers start at once, a peer that exits before its ``ready``
event is launched again (``start_retries``), the peers' join timeout grows with n, and every peer's PSS is sampled.
Faults (:mod:`.faults`) are fired from the watch loop; :class:`LocalSwarm` carries them out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import torch

from p2p_guard.simulation.asr import backdoor_asr
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.events import Event, EventReader
from p2p_guard.simulation.faults import FaultInjector, FaultPlan, faketime_prefix
from p2p_guard.simulation.processes import (
    RUN_DIR_ENV,
    ManagedProcess,
    find_marked_processes,
    kill_group,
    kill_processes,
    launch,
    stop_processes,
)
from p2p_guard.simulation.report import PeerLog, RunObservations, build_report, round_summaries
from p2p_guard.simulation.snapshots import ConsensusTracker
from p2p_guard.swarm.reaper import start_reaper, stop_reaper

__all__ = [
    "LocalSwarm",
    "ProcessFailed",
    "Progress",
    "SimulationError",
    "SimulationInterrupted",
    "SimulationTimeout",
    "bootstrap_command",
    "load_theta",
    "make_workdir",
    "peer_command",
    "peer_threads",
    "run_env",
    "run_simulation",
    "write_report",
]

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.5
# start-up allowance per peer starting at once (8 peers together took ~60 s each on the loaded 2-core machine)
STARTING_S_PER_PEER = 30.0
#: Seconds a peer may run on alone after every other peer exited before the simulator stops it (it would pause,
#: never training alone, until the run's timeout).
STRANDED_GRACE_S = 30.0
_PSUTIL_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)
LOG_TAIL_LINES = 20
DEFAULT_ENTRY = (sys.executable, "-m", "p2p_guard.cli.main")


class SimulationError(RuntimeError):
    """The simulation could not run to its end (a process failed, a wait ran out, bad outputs).

    Attributes:
        report: raised by :func:`run_simulation` once an honest peer had reported a round, the report of the
            rounds completed so far (same code as a finished run, plus ``failed``: ``rounds_completed``,
            ``rounds_planned`` and ``error``, this message), else None.
        path: where that report was written (``workdir/report.json``), or None.
    """

    report: dict[str, Any] | None = None
    path: Path | None = None


class SimulationTimeout(SimulationError):
    """A bounded wait of the simulation ran out."""


class SimulationInterrupted(KeyboardInterrupt):
    """The run was interrupted (Ctrl+C, or SIGTERM raised as a ``KeyboardInterrupt``); every process is stopped.

    Raised from the interrupt (``__cause__``) once the partial report is written.

    Attributes:
        report: the report of the rounds completed so far (same code as a finished run, plus ``interrupted``),
            or None if it could not be built.
        path: where it was written (``workdir/report.json``), or None.
    """

    def __init__(self, report: dict[str, Any] | None, path: Path | None) -> None:
        """Args: report: the partial report (None: not built); path: its file (None: not written)."""
        super().__init__("interrupted")
        self.report = report
        self.path = path


class ProcessFailed(SimulationError):
    """A process of the swarm exited with a non-zero status before the end of the run."""

    def __init__(self, name: str, returncode: int, log_path: Path) -> None:
        """Describe the failure; the message names the log file and quotes its last lines.

        Args:
            name: the process (``bootstrap``, ``peer3``).
            returncode: its exit status (negative: killed by that signal).
            log_path: its log file.
        """
        self.name = name
        self.returncode = returncode
        self.log_path = log_path
        status = f"code {returncode}"
        if returncode < 0:
            with contextlib.suppress(ValueError):
                status = f"signal {signal.Signals(-returncode).name}"
        tail = _log_tail(log_path, LOG_TAIL_LINES)
        message = f"{name} exited with {status} before the end of the run; its log: {log_path}"
        if tail:
            message += "\n--- last lines of its log ---\n" + tail
        super().__init__(message)


def _log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ("" if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Progress:
    """How far the honest peers are.

    Attributes:
        rounds_done: the fewest rounds completed by any honest peer.
        rounds_total: rounds of the run.
        accuracy, loss, perplexity: honest means of round ``rounds_done`` (None if not reported).
    """

    rounds_done: int
    rounds_total: int
    accuracy: float | None = None
    loss: float | None = None
    perplexity: float | None = None


ProgressCallback = Callable[[Progress], None]


def make_workdir(base: Path | None = None) -> Path:
    """Create a fresh run directory ``runs/<YYYYmmdd-HHMMSS>[-k]`` (or ``base``); return its absolute path."""
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
        return base.resolve()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for k in range(1000):
        candidate = Path("runs") / (stamp if k == 0 else f"{stamp}-{k}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        return candidate.resolve()
    raise SimulationError(f"could not create a fresh run directory under runs/{stamp}")


def run_env(workdir: Path, *, peers: int | None = None) -> dict[str, str]:
    """Environment of every process of the run: ours, plus the run marker and unbuffered output.

    With ``peers`` (the processes that train at once on this machine), each gets an equal share of the CPU cores
    as its torch thread count (``OMP_NUM_THREADS``, at least 1), unless the caller's environment sets it: left at
    torch's default, n peers would each start one thread per core, and n × cores spinning threads on this
    machine's cores made the peers' inner phases vary from 8 to 16 s in one 4-peer Shakespeare round (2 cores).
    """
    env = dict(os.environ)
    env[RUN_DIR_ENV] = str(workdir)
    env["PYTHONUNBUFFERED"] = "1"
    if peers is not None and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(peer_threads(peers))
    return env


def peer_threads(peers: int, cores: int | None = None) -> int:
    """Torch threads per peer when ``peers`` processes train at once on ``cores`` cores (None: this machine's).

    ``max(1, cores // peers)``.
    """
    available = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, available // max(1, peers))


def bootstrap_command(workdir: Path, *, entry: Sequence[str] = DEFAULT_ENTRY) -> list[str]:
    """Command line of the bootstrap node; it writes its multiaddrs to ``workdir/bootstrap.addr``.

    Args:
        workdir: the run directory.
        entry: the ``p2p-guard`` program (default: this Python running ``p2p_guard.cli.main``).
    """
    return [
        *entry, "bootstrap",
        "--identity", str(workdir / "bootstrap.key"),
        "--host", "127.0.0.1",
        "--port", "0",
        "--address-file", str(workdir / "bootstrap.addr"),
    ]  # fmt: skip


def peer_paths(workdir: Path, index: int) -> dict[str, Path]:
    """Files of peer ``index``: identity, events, state, log, snapshots, control, checkpoint."""
    return {
        "identity": workdir / f"peer{index}.key",
        "events": workdir / f"peer{index}.events.jsonl",
        "state": workdir / f"peer{index}.state.pt",
        "log": workdir / f"peer{index}.log",
        "snapshots": workdir / f"peer{index}.snapshots",
        "control": workdir / f"peer{index}.control.json",
        "checkpoint": workdir / f"peer{index}.checkpoint",
    }


def peer_command(
    config: SimulationConfig,
    index: int,
    initial_peers: Sequence[str],
    workdir: Path,
    *,
    entry: Sequence[str] = DEFAULT_ENTRY,
) -> list[str]:
    """Command line of peer ``index`` (honest peers first, then the Byzantine ones).

    Args:
        config: the swarm's settings.
        index: the peer's index.
        initial_peers: the bootstrap node's multiaddrs.
        workdir: the run directory.
        entry: the ``p2p-guard`` program (default: this Python running ``p2p_guard.cli.main``).
    """
    paths = peer_paths(workdir, index)
    log_level = [] if config.peer_log_level == "INFO" else ["--log-level", config.peer_log_level]
    command = [
        *entry, *log_level, "peer",
        "--initial-peers", *initial_peers,
        "--run-id", config.resolved_run_id,
        "--task", config.task,
        "--seed", str(config.seed),
        "--peer-index", str(index),
        "--num-peers", str(config.num_peers),
        "--partition", config.partition,
        "--rounds", str(config.rounds),
        "--guard", config.guard,
        "--codec", config.codec,
        "--start-peers", str(config.num_peers),
        "--identity", str(paths["identity"]),
        "--events", str(paths["events"]),
        "--state-out", str(paths["state"]),
        "--snapshot-dir", str(paths["snapshots"]),
        "--control-file", str(paths["control"]),
        "--checkpoint-dir", str(paths["checkpoint"]),
        "--join-timeout-s", f"{config.resolved_join_timeout_s:g}",
        "--host", "127.0.0.1",
        "--no-nat-port-map", "--no-use-auto-relay",  # loopback: no router to ask, nobody behind NAT
        "--no-progress",
    ]  # fmt: skip
    if config.inner_steps is not None:
        command += ["--inner-steps", str(config.inner_steps)]
    upload_mbit = config.upload_mbit_of(index)
    if upload_mbit is not None:
        command += ["--max-upload-mbit", repr(float(upload_mbit))]
    if not config.reputation:
        command += ["--no-reputation"]
    if config.overlap is not None:
        command += ["--overlap" if config.overlap else "--no-overlap"]
    if config.adaptive_mixing:
        command += ["--adaptive-mixing"]
    command += ["--mix-precision", config.mix_precision]
    command += ["--reputation-exclusion" if config.reputation_exclusion else "--no-reputation-exclusion"]
    chosen = config.attack_of(index)
    if chosen is not None:
        spec, colluders = chosen
        command += ["--attack", spec, "--byzantine-count", str(colluders)]
    return command


def load_theta(path: Path) -> torch.Tensor:
    """Read the flat model ``theta`` ``(d,)`` float32 from a peer's state file.

    Raises:
        SimulationError: if the file is missing or holds no ``theta`` tensor.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError) as e:
        raise SimulationError(f"cannot read the state file {path}: {e}") from e
    theta = state.get("theta") if isinstance(state, dict) else None
    if not isinstance(theta, torch.Tensor):
        raise SimulationError(f"state file {path} holds no 'theta' tensor")
    return theta.reshape(-1).to(torch.float32)


def _json_safe(value: Any) -> Any:
    """Replace non-finite floats (not valid JSON) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_report(report: dict[str, Any], path: Path) -> None:
    """Write the report as indented JSON (non-finite numbers become null), atomically.

    A symlink is written through (its target is replaced, not the link); the CLI refuses a path that exists and is
    not a regular file (a device, a FIFO) before the run starts (``cli.preflight.check_output_file``).
    """
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_json_safe(report), indent=2, allow_nan=False) + "\n")
    tmp.replace(path)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP meanwhile (main thread only), so cleanup is not cut short by a second one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class LocalSwarm:
    """A bootstrap node and ``config.num_peers`` peers on 127.0.0.1, each process in its own session.

    Use it as a context manager: leaving the block stops every process it started (also on errors), and
    kills whatever still carries this run's marker.
    """

    def __init__(
        self, config: SimulationConfig, workdir: Path, *, entry: Sequence[str] = DEFAULT_ENTRY
    ) -> None:
        """Prepare a swarm; nothing starts yet.

        Args:
            config: the swarm's settings.
            workdir: directory for keys, logs, event and state files (created if missing).
            entry: the ``p2p-guard`` program (default: this Python running ``p2p_guard.cli.main``).
        """
        self.config = config
        self.entry = tuple(entry)
        self.workdir = workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bootstrap: ManagedProcess | None = None
        self.initial_peers: list[str] = []
        self.peers: dict[int, ManagedProcess] = {}
        self.events: dict[int, list[Event]] = {i: [] for i in range(config.num_peers)}
        self._readers = {
            i: EventReader(peer_paths(self.workdir, i)["events"]) for i in range(config.num_peers)
        }
        self._finished_readers: set[int] = set()
        self._retired: list[ManagedProcess] = []  # earlier processes of restarted peers
        self._reaper: subprocess.Popen[bytes] | None = None
        self._bootstrap_exit_logged = False
        self.run_started: float | None = None  # unix time of the bootstrap node's launch
        self.launch_times: dict[int, float] = {}  # unix time of each peer's first launch
        self.start_retries: dict[int, int] = {}  # relaunches after failed starts, whole run
        self._retries_now: dict[int, int] = {}  # relaunches since the last intended start
        self._ready_mark: dict[int, int] = {}  # ready events already seen when the peer was last launched
        self._prefix: dict[int, list[str]] = {}  # command prefix of each peer (faketime after a clock shift)
        self.memory_samples: dict[int, list[int]] = {i: [] for i in range(config.num_peers)}
        self.injector: FaultInjector | None = None
        self.stranded: list[int] = []  # peers stopped because every other peer had finished (stop_stranded)
        self._alone_since: float | None = None

    # -- starting ---------------------------------------------------------------------------------------
    def __enter__(self) -> LocalSwarm:
        """Arm the reaper watchdog (it kills our processes if this one dies, also with its whole group)."""
        self._reaper = start_reaper(own_session=True)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop every process of the run."""
        self.stop()

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every process started so far."""
        return ([self.bootstrap] if self.bootstrap else []) + self._retired + list(self.peers.values())

    def start(self) -> None:
        """Start the bootstrap node, wait for its addresses, then start every peer."""
        self.start_bootstrap()
        self.start_peers()

    def start_bootstrap(self) -> list[str]:
        """Start the bootstrap node and return its multiaddrs, waiting at most ``startup_timeout_s``.

        Raises:
            ProcessFailed: if it exits first.
            SimulationTimeout: if it has not published its addresses in time.
        """
        address_file = self.workdir / "bootstrap.addr"
        address_file.unlink(missing_ok=True)
        self.run_started = time.time()
        self.bootstrap = launch(
            "bootstrap",
            bootstrap_command(self.workdir, entry=self.entry),
            log_path=self.workdir / "bootstrap.log",
            env=run_env(self.workdir),
        )
        deadline = time.monotonic() + self.config.startup_timeout_s
        while not address_file.exists():
            self._raise_if_exited(self.bootstrap)
            if time.monotonic() >= deadline:
                raise SimulationTimeout(
                    f"the bootstrap node published no address within {self.config.startup_timeout_s:g} s; "
                    f"its log: {self.bootstrap.log_path}"
                )
            time.sleep(0.1)
        maddrs = [line.strip() for line in address_file.read_text().splitlines() if line.strip()]
        if not maddrs:
            raise SimulationError(f"the bootstrap node wrote an empty address file {address_file}")
        self.initial_peers = maddrs
        logger.info("bootstrap node ready at %s", " ".join(maddrs))
        return maddrs

    def start_peers(self, indices: Sequence[int] | None = None) -> None:
        """Start peers (all by default) against the bootstrap node's addresses.

        A peer that has exited may be started again (a restart: same identity, events appended).

        Raises:
            SimulationError: if the bootstrap node is not up, or one of the peers still runs.
        """
        if not self.initial_peers:
            raise SimulationError("start the bootstrap node before the peers")
        chosen = list(range(self.config.num_peers)) if indices is None else list(indices)
        limit = self.config.start_concurrency
        pending = list(chosen)
        # K peers starting together share the CPU: allow each wave STARTING_S_PER_PEER per peer at least
        stall_s = max(self.config.startup_timeout_s, STARTING_S_PER_PEER * (limit or len(chosen)))
        stalled_at = time.monotonic() + stall_s
        while pending:
            if limit == 0 or len(self.starting()) < limit:
                self.start_peer(pending.pop(0))
                stalled_at = time.monotonic() + stall_s
                continue
            self.retry_failed_starts()
            self.check_processes()
            if time.monotonic() >= stalled_at:
                raise SimulationTimeout(
                    f"no starting peer got ready within {stall_s:g} s "
                    f"({len(pending)} peers not launched yet); logs in {self.workdir}"
                )
            time.sleep(0.2)
        logger.info("started %d peers (%d Byzantine in the swarm)", len(chosen), self.config.byzantine)

    def _ready_count(self, index: int) -> int:
        return sum(e.get("event") == "ready" for e in self.events[index])

    def starting(self) -> list[int]:
        """Peers launched and running that have not written a ``ready`` event since their launch."""
        return [
            i
            for i, p in self.peers.items()
            if p.returncode() is None and self._ready_count(i) <= self._ready_mark.get(i, 0)
        ]

    def start_peer(
        self, index: int, *, prefix: Sequence[str] | None = None, retry: bool = False
    ) -> ManagedProcess:
        """Start peer ``index`` (or restart it once it has exited) and return its process.

        Args:
            index: the peer.
            prefix: programs to run it under (``faketime ...``); None: the same as its last launch.
            retry: this launch retries a failed start (counted in :attr:`start_retries`).

        Raises:
            SimulationError: if ``index`` is out of range or that peer still runs.
        """
        if not 0 <= index < self.config.num_peers:
            raise SimulationError(f"peer index {index} is not in [0, {self.config.num_peers})")
        previous = self.peers.get(index)
        if previous is not None:
            if previous.returncode() is None:
                raise SimulationError(f"{previous.name} still runs (pid {previous.pid})")
            self.poll_events()  # read the old process's last events before marking the launch
            self._retired.append(previous)
            self._finished_readers.discard(index)
        if retry:
            self.start_retries[index] = self.start_retries.get(index, 0) + 1
            self._retries_now[index] = self._retries_now.get(index, 0) + 1
        else:
            self._retries_now[index] = 0
        if prefix is not None:
            self._prefix[index] = list(prefix)
        command = [
            *self._prefix.get(index, []),
            *peer_command(self.config, index, self.initial_peers, self.workdir, entry=self.entry),
        ]
        log_path = peer_paths(self.workdir, index)["log"]
        self._ready_mark[index] = self._ready_count(index)
        self.launch_times.setdefault(index, time.time())
        self.peers[index] = launch(f"peer{index}", command, log_path=log_path,
                                   env=run_env(self.workdir, peers=self.config.num_peers))
        return self.peers[index]

    def retry_failed_starts(self) -> list[int]:
        """Launch again each peer that exited non-zero before its ``ready`` event, up to ``start_retries`` times.

        A peer that fails after it got ready is not retried (:meth:`check_processes` reports it).

        Returns:
            The peers launched again.
        """
        self.poll_events()
        again = []
        for index, proc in sorted(self.peers.items()):
            if not self._retryable(index):
                continue
            code = proc.returncode()
            tail = _log_tail(proc.log_path, 1)
            logger.warning(
                "%s exited with %s before it got ready (%s); starting it again (retry %d of %d)",
                proc.name, code, tail or "no log", self._retries_now.get(index, 0) + 1, self.config.start_retries,
            )  # fmt: skip
            self.start_peer(index, retry=True)
            again.append(index)
        return again

    def _retryable(self, index: int) -> bool:
        """True if peer ``index`` exited non-zero before its ``ready`` event and has retries left."""
        code = self.peers[index].returncode()
        return (
            code not in (None, 0)
            and self._ready_count(index) <= self._ready_mark.get(index, 0)
            and self._retries_now.get(index, 0) < self.config.start_retries
        )

    # -- faults (the FaultActions of .faults) -------------------------------------------------------------
    def arm_faults(self, plan: FaultPlan) -> FaultInjector:
        """Fire ``plan`` from now on: every :meth:`wait_until` poll (and ``simulate``'s watch loop) steps it.

        Returns:
            The injector; its ``records`` (or ``finish()``) say what fired.
        """
        self.injector = FaultInjector(plan, self)
        return self.injector

    def _running(self, index: int) -> ManagedProcess:
        """The live process of peer ``index``.

        Raises:
            SimulationError: if it was never started or has exited.
        """
        proc = self.peers.get(index)
        if proc is None or proc.returncode() is not None:
            raise SimulationError(f"peer{index} is not running")
        return proc

    def set_slowdown(self, peer: int, factor: float | None) -> None:
        """Write ``{"slowdown": factor}`` to the peer's control file (atomically), or remove it (None)."""
        path = peer_paths(self.workdir, peer)["control"]
        if factor is None:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"slowdown": factor}) + "\n")
        tmp.replace(path)

    def signal_peer(self, peer: int, signum: int) -> None:
        """Send ``signum`` to the whole process group of the running peer (SIGSTOP, SIGCONT).

        Raises:
            SimulationError: if the peer is not running.
        """
        os.killpg(self._running(peer).pid, signum)

    def kill_restart(self, peer: int) -> None:
        """SIGKILL the peer's process group, then start it again with the identical command line.

        Raises:
            SimulationError: if the peer is not running.
        """
        proc = self._running(peer)
        kill_group(proc)
        proc.popen.wait(timeout=self.config.stop_grace_s)
        self.start_peer(peer)

    def restart_shifted(self, peer: int, seconds: float) -> None:
        """Stop the peer (SIGTERM, then SIGKILL after the grace) and start it under ``faketime`` ``seconds`` off.

        Raises:
            SimulationError: if the peer is not running.
        """
        proc = self._running(peer)
        self._terminate_wrapped([proc])
        stop_processes([proc], grace_s=self.config.stop_grace_s)
        self.start_peer(peer, prefix=faketime_prefix(seconds))

    def kill_bootstrap(self) -> None:
        """SIGKILL the bootstrap node's process group (the peers go on without it).

        Raises:
            SimulationError: if it is not running.
        """
        proc = self.bootstrap
        if proc is None or proc.returncode() is not None:
            raise SimulationError("the bootstrap node is not running")
        kill_group(proc)
        proc.popen.wait(timeout=self.config.stop_grace_s)

    def _terminate_wrapped(self, procs: Iterable[ManagedProcess]) -> None:
        """SIGTERM the direct children of peers started under a prefix (``faketime`` does not forward signals)."""
        wrapped = {self.peers[i].pid for i, prefix in self._prefix.items() if prefix and i in self.peers}
        for proc in procs:
            if proc.pid not in wrapped or proc.returncode() is not None:
                continue
            with contextlib.suppress(*_PSUTIL_GONE):
                for child in psutil.Process(proc.pid).children():
                    with contextlib.suppress(*_PSUTIL_GONE):
                        child.terminate()

    def stop_stranded(self, grace_s: float = STRANDED_GRACE_S) -> list[int]:
        """SIGTERM the peers left running alone once the others have exited (a peer never trains alone).

        A peer that fell behind (SIGSTOPped past the others' last round, say) pauses once fewer than 2 peers
        (``min_peers``, self included) are present, and would wait for the run's timeout. Once fewer than 2 peers
        are running and at least one has exited, the rest get ``grace_s`` seconds, then a SIGTERM (they leave
        cleanly, exit code 0); each is logged and listed in :attr:`stranded` (the report's ``stranded_peers``).

        Returns:
            The indices stopped by this call.
        """
        running = [i for i, p in self.peers.items() if p.returncode() is None]
        if not running or len(running) >= 2 or len(running) == len(self.peers):
            self._alone_since = None
            return []
        now = time.monotonic()
        if self._alone_since is None:
            self._alone_since = now
        if now - self._alone_since < grace_s:
            return []
        positions = self.positions()
        for index in running:
            logger.warning("peer%d is alone: every other peer has finished; stopping it at round %s of %d", index,
                           positions.get(index, "?"), self.config.rounds)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.peers[index].pid, signal.SIGCONT)
            self._terminate_wrapped([self.peers[index]])
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.peers[index].pid, signal.SIGTERM)
            self.stranded.append(index)
        self._alone_since = None
        return running

    # -- measuring ----------------------------------------------------------------------------------------
    def positions(self) -> dict[int, int]:
        """``honest index -> the round it is working on`` (1 + its highest reported round; 0 before any)."""
        out = {}
        for index in range(self.config.honest):
            rounds = [r for e in self.events[index] if e.get("event") == "round"
                      if isinstance(r := e.get("round"), int) and not isinstance(r, bool)]  # fmt: skip
            out[index] = max(rounds) + 1 if rounds else 0
        return out

    def sample_memory(self) -> None:
        """Append each running peer's PSS (its process and all its descendants, bytes) to :attr:`memory_samples`.

        Only peers that are ready since their launch are sampled: a peer still starting read about 3 MiB while its
        interpreter loaded, which pulled the reported mean of short runs far under what a running peer takes.
        """
        starting = set(self.starting())
        for index, proc in self.peers.items():
            if proc.returncode() is not None or index in starting:
                continue
            total = 0
            try:
                root = psutil.Process(proc.pid)
                members = [root, *root.children(recursive=True)]
            except _PSUTIL_GONE:
                continue
            for member in members:
                with contextlib.suppress(*_PSUTIL_GONE):
                    total += member.memory_full_info().pss
            if total:
                self.memory_samples[index].append(total)

    # -- watching ---------------------------------------------------------------------------------------
    @staticmethod
    def _raise_if_exited(proc: ManagedProcess) -> None:
        """Raise :class:`ProcessFailed` if ``proc`` has exited (whatever its status)."""
        code = proc.returncode()
        if code is not None:
            raise ProcessFailed(proc.name, code, proc.log_path)

    def check_processes(self, indices: Iterable[int] | None = None) -> None:
        """Raise :class:`ProcessFailed` for the first peer that exited non-zero (a bootstrap exit is logged).

        A peer whose start failed and that has retries left is skipped: :meth:`retry_failed_starts` launches it
        again (its exit may have been seen only now, after its last look).

        Args:
            indices: the peers to check (default: all started peers).
        """
        for index in sorted(self.peers) if indices is None else indices:
            peer = self.peers[index]
            code = peer.returncode()
            if code is not None and code != 0 and not self._retryable(index):
                raise ProcessFailed(peer.name, code, peer.log_path)
        bootstrap = self.bootstrap
        if bootstrap is not None and bootstrap.returncode() is not None and not self._bootstrap_exit_logged:
            self._bootstrap_exit_logged = True
            logger.warning(
                "the bootstrap node exited with %s (the peers go on without it); its log: %s",
                bootstrap.returncode(),
                bootstrap.log_path,
            )

    def poll_events(self) -> bool:
        """Read new events of every peer; True if there were any."""
        exited = {i for i, p in self.peers.items() if p.returncode() is not None}
        new = False
        for index, reader in self._readers.items():
            if index in self._finished_readers:
                continue
            final = index in exited
            events = reader.read_new(final=final)
            if final:
                self._finished_readers.add(index)
            self.events[index].extend(events)
            new = new or bool(events)
        return new

    def peer_logs(self) -> list[PeerLog]:
        """Every peer's events so far, with its role."""
        return [
            PeerLog(index=i, byzantine=self.config.is_byzantine(i), events=list(ev))
            for i, ev in self.events.items()
        ]

    def ready_events(self) -> dict[int, Event]:
        """The first ``ready`` event of each peer that has announced itself."""
        out = {}
        for index, events in self.events.items():
            ready = [e for e in events if e.get("event") == "ready"]
            if ready:
                out[index] = ready[0]
        return out

    def wait_until(
        self, done: Callable[[], bool], *, timeout_s: float, what: str, indices: Iterable[int] | None = None
    ) -> None:
        """Poll events until ``done()`` holds; every wait of a swarm goes through here, bounded.

        Each poll also launches again peers whose start failed (:meth:`retry_failed_starts`) and steps the armed
        fault plan (:meth:`arm_faults`).

        Args:
            done: the condition, evaluated after each read of the event files.
            timeout_s: give up after this many seconds.
            what: what we wait for, for the timeout message.
            indices: peers whose non-zero exit aborts the wait (default: all started peers).

        Raises:
            ProcessFailed: if one of those peers exits non-zero meanwhile.
            SimulationTimeout: if ``done()`` does not hold within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        watched = list(self.peers) if indices is None else list(indices)
        while True:
            self.retry_failed_starts()  # also reads the new events
            if self.injector is not None:
                self.injector.step(self.positions())
            if done():
                return
            self.check_processes(watched)
            if time.monotonic() >= deadline:
                raise SimulationTimeout(f"{what}: not within {timeout_s:g} s; logs in {self.workdir}")
            time.sleep(0.2)

    def wait_ready(self, timeout_s: float, indices: Iterable[int] | None = None) -> dict[int, Event]:
        """Wait until the peers (default: all started) have written their ``ready`` event; return the events.

        Raises:
            ProcessFailed: if one of them exits non-zero meanwhile.
            SimulationTimeout: if they are not all ready within ``timeout_s``.
        """
        wanted = set(self.peers) if indices is None else set(indices)
        self.wait_until(
            lambda: wanted <= set(self.ready_events()),
            timeout_s=timeout_s,
            what=f"peers {sorted(wanted)} ready",
            indices=wanted,
        )
        return {i: e for i, e in self.ready_events().items() if i in wanted}

    def rounds_done(self, index: int) -> int:
        """Number of distinct rounds peer ``index`` has reported."""
        return len({e.get("round") for e in self.events[index] if e.get("event") == "round"})

    def wait_rounds(self, count: int, timeout_s: float, indices: Iterable[int] | None = None) -> None:
        """Wait until each of the peers (default: the honest ones started) has reported ``count`` rounds.

        Raises:
            ProcessFailed: if one of them exits non-zero meanwhile.
            SimulationTimeout: if they do not get there within ``timeout_s``.
        """
        wanted = (
            [i for i in self.peers if not self.config.is_byzantine(i)] if indices is None else list(indices)
        )
        self.wait_until(
            lambda: all(self.rounds_done(i) >= count for i in wanted),
            timeout_s=timeout_s,
            what=f"peers {wanted} at {count} rounds",
            indices=wanted,
        )

    def wait_exited(self, timeout_s: float, indices: Iterable[int] | None = None) -> dict[int, int]:
        """Wait until the peers (default: all started) have exited; return their exit codes by index.

        Raises:
            SimulationTimeout: if they have not all exited within ``timeout_s``.
        """
        wanted = list(self.peers) if indices is None else list(indices)
        self.wait_until(
            lambda: all(self.peers[i].returncode() is not None for i in wanted),
            timeout_s=timeout_s,
            what=f"peers {wanted} exited",
            indices=[],
        )
        return {i: self.peers[i].popen.wait() for i in wanted}

    def peers_exited(self) -> bool:
        """True once every started peer has exited."""
        return bool(self.peers) and all(p.returncode() is not None for p in self.peers.values())

    def progress(self) -> Progress:
        """Rounds completed by the slowest honest peer, and the honest means of that round."""
        done = min(self.rounds_done(i) for i in range(self.config.honest))
        summaries = round_summaries(self.peer_logs())
        row = summaries[done - 1] if 0 < done <= len(summaries) else {}
        return Progress(
            rounds_done=done,
            rounds_total=self.config.rounds,
            accuracy=row.get("accuracy"),
            loss=row.get("loss"),
            perplexity=row.get("perplexity"),
        )

    # -- stopping ---------------------------------------------------------------------------------------
    def marked_processes(self) -> list[psutil.Process]:
        """Live processes (any parent) that carry this run's ``P2P_GUARD_RUN_DIR`` marker."""
        return find_marked_processes(str(self.workdir))

    def stop(self) -> None:
        """Stop every process group (SIGTERM, then SIGKILL), kill marked stragglers, disarm the reaper.

        Safe to call more than once. SIGINT and SIGTERM are ignored meanwhile, so it runs to its end.
        """
        with signals_deferred():
            if self.injector is not None:
                self.injector.finish(self.positions())  # lift slowdowns, continue stopped peers
            procs = self.processes
            running = [p.name for p in procs if p.returncode() is None]
            if running:
                logger.info("stopping %s (up to %.0f s)", ", ".join(running), self.config.stop_grace_s)
            for proc in procs:  # a SIGSTOPped peer (a fault) must run again to handle SIGTERM
                if proc.returncode() is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGCONT)
            self._terminate_wrapped(procs)
            stop_processes(procs, grace_s=self.config.stop_grace_s)
            stragglers = self.marked_processes()
            if stragglers:  # e.g. torch_shm_manager, which starts its own session
                logger.info(
                    "ending %d processes of this run outside its process groups: %s",
                    len(stragglers),
                    _describe(stragglers),
                )
                kill_processes(stragglers)
            stop_reaper(self._reaper)
            self._reaper = None


def _describe(procs: Sequence[psutil.Process]) -> list[str]:
    """``name[pid]`` of each process, for log lines."""
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.name()}[{proc.pid}]")
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            out.append(f"?[{proc.pid}]")
    return out


def _honest_thetas(swarm: LocalSwarm, *, partial: bool = False) -> list[torch.Tensor]:
    """Final models of the honest peers (from the ``final`` event's ``state_path``, else the default path).

    With ``partial`` (an interrupted run), a peer whose state cannot be read is left out instead of failing.
    """
    thetas = []
    for log in swarm.peer_logs():
        if log.byzantine:
            continue
        finals = log.of_kind("final")
        path = Path(finals[-1].get("state_path") or "") if finals else Path()
        if not finals or not path.name:
            path = peer_paths(swarm.workdir, log.index)["state"]
        try:
            thetas.append(load_theta(path))
        except SimulationError:
            if not partial:
                raise
    return thetas


@dataclass
class _Watchers:
    """What the watch loop does besides reading events: fire faults, measure consensus, sample memory."""

    tracker: ConsensusTracker
    memory_sample_s: float
    next_sample: float = 0.0

    def step(self, swarm: LocalSwarm) -> None:
        positions = swarm.positions()
        if swarm.injector is not None:
            swarm.injector.step(positions)
        self.tracker.update(positions)
        if self.memory_sample_s > 0 and time.monotonic() >= self.next_sample:
            swarm.sample_memory()
            self.next_sample = time.monotonic() + self.memory_sample_s


def _drive(
    swarm: LocalSwarm,
    deadline: float,
    on_progress: ProgressCallback | None,
    poll_interval_s: float,
    watchers: _Watchers,
) -> None:
    """Watch the peers until all have exited successfully; raise on a failure or at the deadline."""
    last: Progress | None = None
    while True:
        swarm.retry_failed_starts()  # also reads the new events
        swarm.check_processes()
        swarm.stop_stranded()
        watchers.step(swarm)
        current = swarm.progress()
        if on_progress is not None and current != last:
            on_progress(current)
            last = current
        if swarm.peers_exited():
            swarm.check_processes()
            return
        if time.monotonic() >= deadline:
            raise SimulationTimeout(
                f"the run did not finish within {swarm.config.timeout_s:g} s "
                f"({current.rounds_done}/{current.rounds_total} rounds done); logs in {swarm.workdir}"
            )
        time.sleep(poll_interval_s)


def run_simulation(
    config: SimulationConfig,
    workdir: Path,
    *,
    on_progress: ProgressCallback | None = None,
    poll_interval_s: float = POLL_INTERVAL_S,
    entry: Sequence[str] = DEFAULT_ENTRY,
    faults: FaultPlan | None = None,
) -> dict[str, Any]:
    """Run a local swarm to its end and return the report (see :func:`.report.build_report`).

    Every process is stopped before this returns or raises, whatever happens (KeyboardInterrupt included).
    Interrupted (KeyboardInterrupt), it still writes the report of the rounds completed so far to
    ``workdir/report.json`` (built by the same code, with ``interrupted`` added) and raises
    :class:`SimulationInterrupted` carrying it. A run that fails once an honest peer has reported a round (a peer
    exited non-zero, the run's timeout ran out) writes it too, with ``failed`` added, and raises the
    :class:`SimulationError` with the report in its ``report`` and ``path``.

    Args:
        config: the swarm's settings.
        workdir: directory for keys, logs, events and states (created if missing; kept afterwards).
        on_progress: called whenever the honest peers' progress changes.
        poll_interval_s: seconds between two looks at the processes and event files.
        entry: the ``p2p-guard`` program (default: this Python running ``p2p_guard.cli.main``).
        faults: a checked fault plan (:func:`.faults.load_plan`) fired as the peers advance; None: no faults.

    Returns:
        The report dict; also written to ``workdir/report.json``.

    Raises:
        ProcessFailed: a peer (or the bootstrap node at start) exited non-zero; the message names its log.
        SimulationTimeout: the run, or the bootstrap node's start, took too long.
        SimulationError: the peers' outputs cannot be read. Each of these three carries the partial report
            (``report``, ``path``) once an honest peer had reported a round.
        SimulationInterrupted: KeyboardInterrupt (Ctrl+C) arrived; the partial report is written.
    """
    deadline = time.monotonic() + config.timeout_s
    interrupted: KeyboardInterrupt | None = None
    failed: SimulationError | None = None
    with LocalSwarm(config, workdir, entry=entry) as swarm:
        logger.info(
            "simulation in %s: %d honest + %d Byzantine peers", swarm.workdir, config.honest, config.byzantine
        )
        injector = swarm.arm_faults(faults) if faults is not None and faults.faults else None
        snapshot_dirs = {i: peer_paths(swarm.workdir, i)["snapshots"] for i in range(config.honest)}
        tracker = ConsensusTracker(snapshot_dirs, keep=config.keep_snapshots)
        watchers = _Watchers(tracker, config.memory_sample_s)
        try:
            swarm.start()
            _drive(swarm, deadline, on_progress, poll_interval_s, watchers)
        except KeyboardInterrupt as e:
            interrupted = e
        except SimulationError as e:  # a failed peer, a timeout: the rounds done are reported all the same
            failed = e
        finally:
            fault_records = injector.finish(swarm.positions()) if injector is not None else []
            for record in fault_records:
                logger.info("fault %s (%s): fired=%s at round %s", record["number"], record["kind"],
                            record["fired"], record["fired_round"])  # fmt: skip
    if interrupted is not None:
        with signals_deferred():  # a second Ctrl+C does not cut the report short
            report, path = _partial_report(swarm, watchers, faults, fault_records, config, "interrupted", {})
        raise SimulationInterrupted(report, path) from interrupted
    if failed is not None:
        if _any_round_done(swarm):  # else (a start that failed) a report of nothing would only be noise
            with signals_deferred():
                failed.report, failed.path = _partial_report(swarm, watchers, faults, fault_records, config,
                                                             "failed", {"error": str(failed)})
        raise failed
    swarm.poll_events()
    watchers.tracker.update(swarm.positions(), final=True)
    observations = _observations(swarm, watchers, faults, fault_records)
    report_config = {**config.to_dict(), "workdir": str(swarm.workdir)}
    thetas = _honest_thetas(swarm)
    report = build_report(report_config, swarm.peer_logs(), thetas, observations)
    _add_asr(report, config, thetas)
    write_report(report, swarm.workdir / "report.json")
    return report


def _any_round_done(swarm: LocalSwarm) -> bool:
    """Whether some honest peer has reported a round (the events read to the end first; unreadable: False)."""
    try:
        swarm.poll_events()
    except (SimulationError, OSError, ValueError):
        return False
    return any(swarm.rounds_done(i) for i in swarm.peers if not swarm.config.is_byzantine(i))


def _add_asr(report: dict[str, Any], config: SimulationConfig, thetas: Sequence[torch.Tensor]) -> None:
    """Add the backdoor's attack success rate to ``report``.

    ``asr`` holds it per honest peer, their mean and max; ``final.asr`` is the mean and ``final.asr_max`` the
    honest peer it fooled most.

    The figure is optional: a failure to measure it is logged and leaves ``report`` without it, never loses it.
    """
    try:
        asr = backdoor_asr(config.task, config.attack if config.byzantine else None, config.seed, thetas)
    except Exception as e:  # noqa: BLE001 - any failure of this optional figure must not lose the report
        logger.warning("no attack success rate in the report: %s: %s", type(e).__name__, e)
        return
    if asr is not None:
        report["asr"] = asr
        report["final"]["asr"] = asr["mean"]
        report["final"]["asr_max"] = asr["max"]


def _observations(swarm: LocalSwarm, watchers: _Watchers, faults: FaultPlan | None,
                  fault_records: list[dict[str, Any]]) -> RunObservations:
    """What the orchestrator saw of the run (distances, launches, retries, memory, faults), for the report."""
    return RunObservations(
        round_distances=watchers.tracker.distances,
        run_started=swarm.run_started,
        launch_times=swarm.launch_times,
        start_attempts={i: 1 + n for i, n in swarm.start_retries.items()},
        memory_samples=swarm.memory_samples,
        fault_plan=faults.to_dict() if faults is not None else None,
        faults=fault_records,
        stranded=tuple(swarm.stranded),
    )


def _partial_report(swarm: LocalSwarm, watchers: _Watchers, faults: FaultPlan | None,
                    fault_records: list[dict[str, Any]], config: SimulationConfig, why: str, details: dict[str, Any]
                    ) -> tuple[dict[str, Any] | None, Path | None]:
    """The report of a run cut short (its processes already stopped), written to ``workdir/report.json``.

    ``report[why]`` (``"interrupted"`` or ``"failed"``) holds ``rounds_completed`` (by the slowest honest peer),
    ``rounds_planned`` and ``details``.
    """
    try:
        swarm.poll_events()
        watchers.tracker.update(swarm.positions(), final=True)
        observations = _observations(swarm, watchers, faults, fault_records)
        report_config = {**config.to_dict(), "workdir": str(swarm.workdir)}
        thetas = _honest_thetas(swarm, partial=True)
        report = build_report(report_config, swarm.peer_logs(), thetas, observations)
        _add_asr(report, config, thetas)
        done = min((swarm.rounds_done(i) for i in range(config.honest)), default=0)
        report[why] = {"rounds_completed": done, "rounds_planned": config.rounds, **details}
        path = swarm.workdir / "report.json"
        write_report(report, path)
    except (SimulationError, OSError, ValueError, RuntimeError) as e:
        logger.warning("no partial report: %s", e)
        return None, None
    return report, path
