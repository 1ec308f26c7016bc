"""The Python API for researchers: start a local swarm, run one peer, run one benchmark cell.

Three typed entry points over the same code the ``p2p-guard`` commands run (``docs/python-api.md``)::

    import p2p_guard

    report = p2p_guard.run_local_swarm(p2p_guard.SimulationConfig(honest=3, byzantine=0, attack=None, rounds=2),
                                       workdir="runs/tiny")
    print(report["final"]["accuracy"], report["consensus_distance"])

- :func:`run_local_swarm` (``p2p-guard simulate``): a bootstrap node and one OS process per peer on 127.0.0.1,
  run to the end; returns the JSON report. :func:`local_swarm` gives the :class:`LocalSwarm` itself, for a test or
  an experiment that drives the swarm step by step (faults, restarts).
- :func:`run_peer` (``p2p-guard peer``): one volunteer peer in this process, until its rounds are done or
  SIGINT/SIGTERM.
- :func:`run_bench_cell` (one cell of ``p2p-guard bench robustness``): n peers in this process, no network, the
  same guard, outer step and mixing step; returns the cell's result.

Importing this module loads no torch and no hivemind: each function imports what it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.swarm.config import PeerConfig

if TYPE_CHECKING:
    from p2p_guard.bench.cell import CellSpec
    from p2p_guard.simulation.faults import FaultPlan
    from p2p_guard.simulation.orchestrator import LocalSwarm, Progress

__all__ = ["CellSpec", "PeerConfig", "SimulationConfig", "local_swarm", "run_bench_cell", "run_local_swarm",
           "run_peer"]


def run_local_swarm(config: SimulationConfig, workdir: str | Path | None = None, *,
                    faults: FaultPlan | None = None,
                    on_progress: Callable[[Progress], None] | None = None) -> dict[str, Any]:
    """Run a whole local swarm to its end (what ``p2p-guard simulate`` runs) and return its report.

    Every peer is its own OS process with a real hivemind DHT on 127.0.0.1; every process is stopped before this
    returns or raises.

    Args:
        config: the swarm's settings (:class:`SimulationConfig`: ``honest``, ``byzantine``, ``attack``,
            ``rounds``, ``task``, ``guard``, ``seed``, ``timeout_s`` in seconds, ...); checked when built.
        workdir: directory for keys, logs, event files, states and ``report.json`` (created; kept afterwards).
            None: a fresh ``runs/<YYYYmmdd-HHMMSS>`` under the current directory.
        faults: a checked fault plan (``p2p_guard.simulation.faults.load_plan``), fired as the peers advance.
        on_progress: called with a ``Progress`` (rounds done by the slowest honest peer, honest means) whenever
            it changes.

    Returns:
        The report (``p2p_guard.simulation.report.build_report``): ``config``, ``rounds`` (one dict per round:
        ``accuracy``, ``loss``, accepted/rejected counts, ``consensus_distance``, ...), ``final``, ``guard`` (the
        confusion matrix), ``consensus_distance`` (max ‖θ_i − θ_j‖ / ‖θ_i‖ over honest peers),
        ``bytes_sent_per_peer_per_round``, ``round_seconds``, ``memory``, ... Also written to
        ``workdir/report.json``.

    Raises:
        ProcessFailed: a peer (or the bootstrap node at start) exited non-zero; the message names its log.
        SimulationTimeout: the run took longer than ``config.timeout_s`` seconds (or a start stalled).
        SimulationError: the peers' outputs cannot be read (the base class of the two above). Once an honest peer
            had reported a round, each of the three carries the partial report of the rounds completed in ``report`` and
            ``path``, already written (``report["failed"]``: ``rounds_completed``, ``rounds_planned``, ``error``).
        SimulationInterrupted: Ctrl+C (a ``KeyboardInterrupt``); its ``report`` and ``path`` hold the partial
            report of the rounds completed, already written.
        ValueError: a fault plan that does not fit ``config`` (a round past its last, a ``stop`` longer than its
            ``timeout_s``, a peer index it has no honest peer for, ``clock_shift`` without ``faketime``), raised
            before anything starts, as ``p2p-guard simulate --faults`` does.
        OSError: ``workdir`` cannot be created; ``FileExistsError`` when it is a directory that is not empty (an
            earlier run's peers would resume from its keys and checkpoints at their last round, train nothing,
            and that run's rounds would be reported as this one's; ``p2p-guard simulate --workdir`` refuses it
            too).
    """
    from p2p_guard.simulation.faults import check_plan_for_run
    from p2p_guard.simulation.orchestrator import make_workdir, run_simulation

    if faults is not None:
        check_plan_for_run(faults, honest=config.honest, rounds=config.rounds, timeout_s=config.timeout_s)
    if workdir is not None and Path(workdir).is_dir() and any(Path(workdir).iterdir()):
        raise FileExistsError(f"workdir {workdir} is not empty (an earlier run's keys and checkpoints would be "
                              f"resumed and its rounds reported again); remove it or name a new directory")
    folder = make_workdir(Path(workdir) if workdir is not None else None)
    return run_simulation(config, folder, on_progress=on_progress, faults=faults)


def local_swarm(config: SimulationConfig, workdir: str | Path) -> LocalSwarm:
    """A :class:`~p2p_guard.simulation.orchestrator.LocalSwarm` to drive yourself; nothing is started yet.

    Use it as a context manager (leaving the block stops every process)::

        with p2p_guard.local_swarm(config, "runs/x") as swarm:
            swarm.start()
            swarm.wait_rounds(2, timeout_s=300)
            swarm.kill_restart(1)

    Args:
        config: the swarm's settings.
        workdir: directory for keys, logs, event and state files (created if missing).

    Returns:
        The swarm (``start``, ``wait_ready``, ``wait_rounds``, ``wait_exited``, ``signal_peer``,
        ``kill_restart``, ``set_slowdown``, ``stop``; ``events`` holds every peer's events read so far).
    """
    from p2p_guard.simulation.orchestrator import LocalSwarm

    return LocalSwarm(config, Path(workdir))


def run_peer(config: PeerConfig, *, progress: bool = False) -> int:
    """Run one peer in this process (what ``p2p-guard peer`` runs) until its rounds are done or it is stopped.

    It installs SIGINT/SIGTERM handlers for its run (call it from the main thread): the first signal makes it
    leave cleanly (an inner phase in progress stops at its next step, then signed leave record, serve withdrawn,
    DHT and ``p2pd`` shut down), a second ends the process at once (``os._exit(130)``).

    Args:
        config: the peer's settings (:class:`PeerConfig`: ``initial_peers`` (multiaddrs of a bootstrap node),
            ``run_id``, ``task``, ``peer_index``, ``num_peers``, ``rounds`` (0: until stopped), ``identity``
            (key file, created if missing), ``events`` (JSON-lines event file), timeouts in seconds, ...).
        progress: draw a progress bar on stderr.

    Returns:
        The exit code: 0 after its rounds or a requested stop, 1 on a local error (logged: a failed join within
        ``join_timeout_s``, a DHT or ``p2pd`` failure, an unusable file).

    Raises:
        ValueError: an unknown task, guard or attack name (raised before the DHT starts).
    """
    from p2p_guard.swarm.peer import run_peer as _run_peer

    return _run_peer(config, progress=progress)


def run_bench_cell(spec: CellSpec) -> dict[str, Any]:
    """Run one benchmark cell in this process: n peers, no network, the peer's guard, outer step and mixing.

    Args:
        spec: the cell (:class:`CellSpec`: ``task``, ``guard``, ``attack`` (None: clean), ``n`` peers, ``f``
            Byzantine, ``partition``, ``seed``, ``rounds``, ``inner_steps``, ``mixing``, ``every_receiver``, ...).

    Returns:
        ``{"spec", "arm", "attack", "numel", "rounds", "final", "verdicts", "shared_theta", "state_hash",
        "seconds", "cpu_seconds"}`` (``p2p_guard.bench.cell.run_cell``): per-round ``accuracy``, ``loss`` and the
        guard's ``tp``/``fp``/``tn``/``fn``; ``final`` the last round's; ``seconds`` wall time.

    Raises:
        ValueError: an unknown task, guard or attack, or a wire attack (out of scope in-process).
    """
    from p2p_guard.bench.cell import run_cell

    return run_cell(spec)


def __getattr__(name: str) -> Any:
    if name == "CellSpec":  # lazily: p2p_guard.bench.cell imports torch
        from p2p_guard.bench.cell import CellSpec

        return CellSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
