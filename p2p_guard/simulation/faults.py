"""Fault plans for ``simulate --faults PLAN.toml``: parse and check a plan, then fire it round by round.

In the style of torchft's ``EventInjector`` (``fail_at(rank, step)``): a plan is a list of faults, each bound to a
round of its target peer; nothing is random, so a chaos run is reproduced from the plan file and the run seed.

A plan file (TOML)::

    [[fault]]
    round = 5          # fires once peer 3 is in round 5 (it has reported round 4)
    peer = 3           # honest peer index, in [0, honest)
    kind = "slow"      # 3x slower inner phase for 10 rounds
    factor = 3.0
    rounds = 10

    [[fault]]
    round = 10
    kind = "kill_bootstrap"   # no peer: fires once the honest median is in round 10

Kinds and their fields (every field is required, no other field is allowed):

- ``slow`` {1 < factor <= 100 (``MAX_SLOW_FACTOR``), rounds >= 1}: the peer's control file says
  ``{"slowdown": factor}`` until the peer is in round ``round + rounds``, then it is removed.
- ``stop`` {0 < seconds <= 86400 (``MAX_STOP_S``), and at most the run's ``timeout_s``}: SIGSTOP to the peer's
  process group, SIGCONT ``seconds`` later.
- ``kill_restart`` {}: SIGKILL to the peer's process group, then the identical command line again (same identity
  file and checkpoint folder).
- ``clock_shift`` {seconds, non-zero, |seconds| <= 3600}: stop the peer (SIGTERM), start it again under Debian's
  ``faketime -f "+Cs"`` (its clock C seconds ahead, behind when negative).
- ``kill_bootstrap`` {} (no ``peer``): SIGKILL to the bootstrap node.

A peer's position is the round it is working on: 1 + the highest round of its ``round`` events (0 before any).
Each fault fires once, at the first look at which its target's position (the honest median for ``kill_bootstrap``)
is at least ``round``. :class:`FaultInjector` keeps a :class:`FaultRecord` of each one for the report.
"""

from __future__ import annotations

import logging
import math
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "FaultActions",
    "FaultInjector",
    "FaultPlan",
    "FaultRecord",
    "MAX_SLOW_FACTOR",
    "MAX_STOP_S",
    "check_plan_for_run",
    "check_plan_rounds",
    "check_plan_timeout",
    "check_plan_tools",
    "faketime_prefix",
    "load_plan",
    "parse_plan",
]

logger = logging.getLogger(__name__)

# kind -> the fields it needs besides ``kind``, ``round`` and ``peer``
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "slow": ("factor", "rounds"),
    "stop": ("seconds",),
    "kill_restart": (),
    "clock_shift": ("seconds",),
    "kill_bootstrap": (),
}
_PEERLESS = frozenset({"kill_bootstrap"})
MAX_CLOCK_SHIFT_S = 3600.0
#: Longest ``stop`` (one day, in seconds); a run's ``timeout_s`` bounds it further (:func:`check_plan_timeout`).
MAX_STOP_S = 86400.0
#: Largest ``slow`` factor: a volunteer 100 times slower than its own hardware. The peer sleeps (factor − 1) × its
#: inner phase's time in one go, so a larger factor (1e9 was accepted) would hold it in one round for good.
MAX_SLOW_FACTOR = 100.0


@dataclass(frozen=True)
class Fault:
    """One fault of a plan.

    Attributes:
        number: its position in the plan, from 1 (for messages and the report).
        kind: one of :data:`FAULT_KINDS`.
        round: the target's round at which it fires (>= 0).
        peer: the honest target peer (None for ``kill_bootstrap``).
        factor: ``slow``: the inner phase is this many times longer.
        rounds: ``slow``: for this many rounds.
        seconds: ``stop``: how long the peer stays stopped; ``clock_shift``: the clock offset (may be negative).
    """

    number: int
    kind: str
    round: int
    peer: int | None = None
    factor: float | None = None
    rounds: int | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fault as it was planned (fields that do not apply to its kind left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class FaultPlan:
    """A checked fault plan.

    Attributes:
        faults: the faults, in file order.
        source: where the plan came from (a path), for the report.
    """

    faults: tuple[Fault, ...] = ()
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan, for the report (enough to rerun it)."""
        return {"source": self.source, "faults": [f.to_dict() for f in self.faults]}


def _integer(where: str, name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum`` (not a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def _real(where: str, name: str, value: Any) -> float:
    """``value`` as a finite float (ints allowed, bools not), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {name} must be a finite number, got {value!r}")
    return float(value)


def _fault(number: int, entry: Any, honest: int, source: str) -> Fault:
    """Check one ``[[fault]]`` table and build its :class:`Fault`."""
    where = f"{source}: fault {number}"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a table ([[fault]]), got {entry!r}")
    kind = entry.get("kind")
    if kind not in FAULT_KINDS:
        raise ValueError(f"{where}: kind must be one of {sorted(FAULT_KINDS)}, got {kind!r}")
    needed = FAULT_KINDS[kind]
    allowed = {"kind", "round", *needed} | (set() if kind in _PEERLESS else {"peer"})
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"{where}: {kind} takes no {', '.join(unknown)} (its fields: {sorted(allowed)})")
    missing = sorted(({"round", *needed} | (set() if kind in _PEERLESS else {"peer"})) - set(entry))
    if missing:
        raise ValueError(f"{where}: {kind} needs {', '.join(missing)}")
    round_ = _integer(where, "round", entry["round"], 0)
    peer = None
    if kind not in _PEERLESS:
        peer = _integer(where, "peer", entry["peer"], 0)
        if peer >= honest:
            raise ValueError(f"{where}: peer must be an honest peer index in [0, {honest}), got {peer}")
    values: dict[str, Any] = {}
    if kind == "slow":
        values["factor"] = _real(where, "factor", entry["factor"])
        if not 1.0 < values["factor"] <= MAX_SLOW_FACTOR:
            raise ValueError(f"{where}: factor must be > 1 and at most {MAX_SLOW_FACTOR:.0f}, "
                             f"got {values['factor']!r}")
        values["rounds"] = _integer(where, "rounds", entry["rounds"], 1)
    elif kind == "stop":
        values["seconds"] = _real(where, "seconds", entry["seconds"])
        if not 0 < values["seconds"] <= MAX_STOP_S:
            raise ValueError(f"{where}: seconds must be > 0 and at most {MAX_STOP_S:.0f} (one day), "
                             f"got {values['seconds']!r}")
    elif kind == "clock_shift":
        values["seconds"] = _real(where, "seconds", entry["seconds"])
        if values["seconds"] == 0 or abs(values["seconds"]) > MAX_CLOCK_SHIFT_S:
            raise ValueError(
                f"{where}: seconds must be non-zero and within ±{MAX_CLOCK_SHIFT_S:.0f}, got {values['seconds']!r}"
            )
    return Fault(number=number, kind=kind, round=round_, peer=peer, **values)


def parse_plan(data: Mapping[str, Any], *, honest: int, source: str = "<plan>") -> FaultPlan:
    """Check a parsed plan (the TOML document as a mapping) against a swarm of ``honest`` honest peers.

    Args:
        data: ``{"fault": [table, ...]}``; no other top-level key.
        honest: number of honest peers (valid targets are ``0..honest-1``).
        source: the plan's name in messages.

    Returns:
        The plan (an empty plan is allowed).

    Raises:
        ValueError: one line naming the source, the fault number and the bad field.
    """
    unknown = sorted(set(data) - {"fault"})
    if unknown:
        raise ValueError(f"{source}: unknown top-level key(s) {unknown}; a plan holds only [[fault]] tables")
    entries = data.get("fault", [])
    if not isinstance(entries, list):
        raise ValueError(f"{source}: 'fault' must be an array of tables ([[fault]])")
    faults = tuple(_fault(k, entry, honest, source) for k, entry in enumerate(entries, start=1))
    if sum(f.kind == "kill_bootstrap" for f in faults) > 1:
        raise ValueError(f"{source}: kill_bootstrap is given more than once (there is one bootstrap node)")
    return FaultPlan(faults=faults, source=source)


def load_plan(path: str | Path, *, honest: int) -> FaultPlan:
    """Read and check a plan file.

    Raises:
        ValueError: one line: the file cannot be read, is not TOML, or a fault is bad.
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ValueError(f"cannot read the fault plan {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:  # a ValueError: it was reported without the file's name
        raise ValueError(f"{path}: the fault plan is not UTF-8 text: {e.reason}") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from e
    return parse_plan(data, honest=honest, source=str(path))


def check_plan_rounds(plan: FaultPlan, rounds: int) -> None:
    """Fail before any process starts on a fault whose round the run never reaches.

    A peer's position goes up to ``rounds`` (once it has reported its last round, ``rounds - 1``), so a fault at
    a later round would only be reported as not fired at the end of the run.

    Raises:
        ValueError: one line naming the plan, the fault, its round and the run's rounds.
    """
    for fault in plan.faults:
        if fault.round > rounds:
            raise ValueError(f"{plan.source}: fault {fault.number} ({fault.kind}): round {fault.round} is past the "
                             f"run's last round (--rounds {rounds}); it would never fire")


def check_plan_timeout(plan: FaultPlan, timeout_s: float) -> None:
    """Fail before any process starts on a ``stop`` longer than the whole run may last.

    The run ends (or fails) within ``timeout_s`` seconds and every stopped peer is continued then, so a longer
    stop could never end as planned: it would only hold the peer until the run is over.

    Args:
        plan: the checked plan.
        timeout_s: the run's ``timeout_s`` (``SimulationConfig``, ``simulate --timeout-s``), in seconds.

    Raises:
        ValueError: one line naming the plan, the fault, its seconds and the run's timeout.
    """
    for fault in plan.faults:
        if fault.kind == "stop" and fault.seconds is not None and fault.seconds > timeout_s:
            raise ValueError(f"{plan.source}: fault {fault.number} (stop): seconds {fault.seconds:g} is longer than "
                             f"the whole run may last (--timeout-s {timeout_s:g}); it would never end as planned")


def check_plan_for_run(plan: FaultPlan, *, honest: int, rounds: int, timeout_s: float,
                       which: Callable[[str], str | None] = shutil.which) -> None:
    """Every check of a plan against the run it is for, before any process starts (CLI and Python API alike).

    :func:`check_plan_rounds`, :func:`check_plan_timeout`, :func:`check_plan_tools`, and that each fault's peer
    is one of the run's ``honest`` peers (a plan loaded for a larger swarm would otherwise only fail when it
    fires).

    Raises:
        ValueError: one line naming the plan, the fault and what is wrong with it.
    """
    for fault in plan.faults:
        if fault.peer is not None and fault.peer >= honest:
            raise ValueError(f"{plan.source}: fault {fault.number} ({fault.kind}): peer {fault.peer} is not an "
                             f"honest peer index in [0, {honest})")
    check_plan_rounds(plan, rounds)
    check_plan_timeout(plan, timeout_s)
    check_plan_tools(plan, which)


def check_plan_tools(plan: FaultPlan, which: Callable[[str], str | None] = shutil.which) -> None:
    """Fail before any process starts if the plan needs a program that is not installed.

    Raises:
        ValueError: a ``clock_shift`` fault and no ``faketime`` on the PATH (with the install hint).
    """
    if any(f.kind == "clock_shift" for f in plan.faults) and which("faketime") is None:
        raise ValueError(
            "the fault plan has a clock_shift fault but the faketime program is not installed "
            "(Debian/Ubuntu: apt-get install -y faketime)"
        )


def faketime_prefix(seconds: float) -> list[str]:
    """The command prefix that runs a program with its clock ``seconds`` ahead (behind if negative).

    ``faketime -f "+30s"`` (libfaketime's relative offset, ``s`` = seconds; fractions work). ``faketime`` forks
    the program as its child in the same process group.
    """
    return ["faketime", "-f", f"{seconds:+g}s"]


class FaultActions(Protocol):
    """What the injector does to the swarm (the orchestrator's :class:`LocalSwarm` implements it)."""

    def set_slowdown(self, peer: int, factor: float | None) -> None:
        """Make the peer's inner phase ``factor`` times longer (None: back to normal)."""

    def signal_peer(self, peer: int, signum: int) -> None:
        """Send ``signum`` to the peer's whole process group."""

    def kill_restart(self, peer: int) -> None:
        """SIGKILL the peer's process group and start it again with the identical command line."""

    def restart_shifted(self, peer: int, seconds: float) -> None:
        """Stop the peer and start it again with its clock shifted by ``seconds``."""

    def kill_bootstrap(self) -> None:
        """SIGKILL the bootstrap node."""


@dataclass
class FaultRecord:
    """What became of one fault.

    Attributes:
        fault: the planned fault.
        fired: whether its action ran without error.
        fired_round: the target's position (the median for ``kill_bootstrap``) when it fired.
        fired_time: unix time it fired, in seconds.
        fired_after_s: seconds since the injector started.
        ended_round, ended_time: for ``slow`` and ``stop``: the position and unix time it was undone.
        error: why its action failed (None if it did not).
    """

    fault: Fault
    fired: bool = False
    fired_round: int | None = None
    fired_time: float | None = None
    fired_after_s: float | None = None
    ended_round: int | None = None
    ended_time: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record for the JSON report: the planned fields, then what happened."""
        out = self.fault.to_dict()
        out.update(
            fired=self.fired,
            fired_round=self.fired_round,
            fired_time=self.fired_time,
            fired_after_s=self.fired_after_s,
            ended_round=self.ended_round,
            ended_time=self.ended_time,
            error=self.error,
        )
        return out


def _median(values: Sequence[int]) -> int:
    """The lower median of ``values`` (0 if empty)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else 0


class FaultInjector:
    """Fires a plan's faults as the peers' positions advance; call :meth:`step` from the watch loop."""

    def __init__(
        self,
        plan: FaultPlan,
        actions: FaultActions,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Prepare the plan; nothing fires yet.

        Args:
            plan: the checked plan.
            actions: what carries the faults out.
            clock: unix time, for the records.
            monotonic: seconds for ``stop`` durations.
        """
        self.plan = plan
        self.actions = actions
        self._clock = clock
        self._monotonic = monotonic
        self._started = clock()
        self.records = [FaultRecord(fault=f) for f in plan.faults]
        self._pending = list(range(len(self.records)))
        self._slowed: dict[int, int] = {}  # record index -> position at which it ends
        self._stopped: dict[int, float] = {}  # record index -> monotonic time of SIGCONT

    @property
    def active(self) -> bool:
        """True while some fault has not fired yet or has not been undone."""
        return bool(self._pending or self._slowed or self._stopped)

    def step(self, positions: Mapping[int, int]) -> None:
        """Undo what is due, then fire every fault whose round has come.

        Args:
            positions: the round each honest peer is working on (1 + its highest reported round).
        """
        self._undo_due(positions)
        median = _median(list(positions.values()))
        for k in list(self._pending):
            fault = self.records[k].fault
            position = median if fault.peer is None else positions.get(fault.peer, 0)
            if position >= fault.round:
                self._pending.remove(k)
                self._fire(k, position)

    def _fire(self, k: int, position: int) -> None:
        """Run the action of record ``k`` and note when (or why it failed)."""
        record = self.records[k]
        fault = record.fault
        record.fired_round = position
        record.fired_time = self._clock()
        record.fired_after_s = record.fired_time - self._started
        logger.info("fault %d fires at round %d: %s", fault.number, position, fault.to_dict())
        try:
            self._act(k, fault, position)
        except Exception as e:  # noqa: BLE001 - a failed fault is recorded; the run goes on
            record.error = f"{type(e).__name__}: {e}"
            logger.warning("fault %d (%s) failed: %s", fault.number, fault.kind, record.error)
            return
        record.fired = True

    def _act(self, k: int, fault: Fault, position: int) -> None:
        """Carry the fault out (and schedule its end for ``slow`` and ``stop``)."""
        if fault.kind == "kill_bootstrap":
            self.actions.kill_bootstrap()
            return
        peer = int(
            fault.peer or 0
        )  # parse_plan sets peer, factor, rounds, seconds for the kinds that use them
        if fault.kind == "slow":
            self.actions.set_slowdown(peer, float(fault.factor or 1.0))
            self._slowed[k] = fault.round + int(fault.rounds or 0)
        elif fault.kind == "stop":
            self.actions.signal_peer(peer, signal.SIGSTOP)
            self._stopped[k] = self._monotonic() + float(fault.seconds or 0.0)
        elif fault.kind == "kill_restart":
            self.actions.kill_restart(peer)
        elif fault.kind == "clock_shift":
            self.actions.restart_shifted(peer, float(fault.seconds or 0.0))

    def _undo_due(self, positions: Mapping[int, int]) -> None:
        """End the slowdowns and stops whose time has come."""
        now = self._monotonic()
        for k, until in list(self._stopped.items()):
            if now >= until:
                self._end(k, positions, lambda peer: self.actions.signal_peer(peer, signal.SIGCONT))
                del self._stopped[k]
        for k, end_round in list(self._slowed.items()):
            peer = self.records[k].fault.peer
            if peer is not None and positions.get(peer, 0) >= end_round:
                self._end(k, positions, lambda p: self.actions.set_slowdown(p, None))
                del self._slowed[k]

    def _end(self, k: int, positions: Mapping[int, int], undo: Callable[[int], None]) -> None:
        """Undo record ``k``'s fault and note when."""
        record = self.records[k]
        peer = record.fault.peer
        if peer is None:
            return
        try:
            undo(peer)
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            record.error = f"undo failed: {type(e).__name__}: {e}"
            logger.warning("fault %d: %s", record.fault.number, record.error)
        record.ended_round = positions.get(peer, 0)
        record.ended_time = self._clock()
        logger.info(
            "fault %d (%s on peer %d) ended at round %d",
            record.fault.number,
            record.fault.kind,
            peer,
            record.ended_round,
        )

    def finish(self, positions: Mapping[int, int] | None = None) -> list[dict[str, Any]]:
        """Undo whatever is still in force (continue stopped peers, lift slowdowns); return the records.

        Faults that never fired stay ``fired: false`` with no ``fired_round``.
        """
        positions = positions or {}
        for k in list(self._stopped):
            self._end(k, positions, lambda peer: self.actions.signal_peer(peer, signal.SIGCONT))
        for k in list(self._slowed):
            self._end(k, positions, lambda p: self.actions.set_slowdown(p, None))
        self._stopped.clear()
        self._slowed.clear()
        return [r.to_dict() for r in self.records]
