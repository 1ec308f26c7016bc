"""Settings of one local simulated swarm, checked once, before any process starts."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from p2p_guard.swarm.config import MIX_PRECISIONS, check_inner_steps, check_rounds, check_run_id, check_seed

__all__ = ["DEFAULT_TIMEOUT_S", "PEER_LOG_LEVELS", "SimulationConfig", "check_partition", "split_attack_mix"]

DEFAULT_TIMEOUT_S = 1200.0
#: The log levels a simulated peer takes (``p2p-guard --log-level``'s choices).
PEER_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
MIN_JOIN_TIMEOUT_S = 300.0
JOIN_TIMEOUT_PER_PEER_S = 20.0


_PEER_UPLOAD = re.compile(r"\s*([0-9]+)\s*:\s*(\S+)\s*")
_MIX_SEPARATOR = re.compile(r"\+(?=[A-Za-z_])")


def split_attack_mix(spec: str) -> tuple[str, ...]:
    """Split an attack mix ``SPEC+SPEC+...`` into its attack specs, in order.

    A ``+`` separates two specs only where a name follows it (a letter or ``_``), so a parameter value such as
    ``noise:std=1e+3`` stays whole. ``split_attack_mix("vote_smear+adaptive:margin=0.2")`` gives
    ``("vote_smear", "adaptive:margin=0.2")``; a spec without ``+`` gives a 1-tuple.

    Raises:
        ValueError: a part is empty (``"a++b"``, a leading or trailing ``+``).
    """
    parts = tuple(part.strip() for part in _MIX_SEPARATOR.split(spec))
    if any(not part or part.startswith("+") or part.endswith("+") for part in parts):
        raise ValueError(f"attack mix must be SPEC or SPEC+SPEC+..., with no empty part, got {spec!r}")
    return parts


def check_partition(spec: str) -> str:
    """Return ``spec`` if it is ``iid`` or ``dirichlet:ALPHA`` with a finite ALPHA > 0.

    Raises:
        ValueError: naming the bad value.
    """
    if not isinstance(spec, str):
        raise ValueError(f"partition must be 'iid' or 'dirichlet:ALPHA' with ALPHA > 0, got {spec!r}")
    if spec.strip().lower() == "iid":
        return spec
    name, _, alpha_text = spec.strip().lower().partition(":")
    if name == "dirichlet":
        try:
            alpha = float(alpha_text)
        except ValueError:
            alpha = math.nan
        if math.isfinite(alpha) and alpha > 0:
            return spec
    raise ValueError(f"partition must be 'iid' or 'dirichlet:ALPHA' with ALPHA > 0, got {spec!r}")


@dataclass(frozen=True)
class SimulationConfig:
    """A local swarm: ``honest`` peers (indices ``0..honest-1``) then ``byzantine`` attackers.

    Attributes:
        task: task spec passed to every peer: a built-in name (``digits``, ``fashion-mnist``, ``shakespeare``)
            or ``MODULE:CLASS``, with ``:key=value,...`` options (``shakespeare:n_layers=4``); see docs/tasks.md.
        honest: number of honest peers (at least 1).
        byzantine: number of simulated Byzantine peers.
        attack: attack spec of the Byzantine peers (``NAME:key=value,...`` or ``module:Class``), or a mix
            ``SPEC+SPEC+...`` (:func:`split_attack_mix`): the Byzantine peers are split into that many contiguous
            groups, as even as possible, the earlier specs taking one more (``byzantine=3``,
            ``adaptive+vote_smear``: two ``adaptive`` peers, then one ``vote_smear``); each group's peers are told
            their group's size as the number of colluders (``--byzantine-count``).
        rounds: outer rounds every peer runs.
        seed: run seed (the same for every peer: they start from the same θ_0).
        guard: aggregation rule of every peer (``semantic``, ``mean``, ...).
        inner_steps: H inner steps per round, 1 to 10^6 (``swarm.config.MAX_INNER_STEPS``; None: the task's default).
        partition: ``iid`` or ``dirichlet:ALPHA``.
        run_id: run name shared by the peers (None: derived from the task spec and seed, so reruns are
            comparable: ``sim-digits-seed0``, or for a spec with options or a ``MODULE:CLASS`` its name and 8 hex
            digits of the spec's hash, ``sim-shakespeare-1a2b3c4d-seed0``).
        timeout_s: the whole run must end within this many seconds.
        startup_timeout_s: how long the bootstrap node may take to publish its addresses, in seconds; also the
            least time the starting peers get for one of them to become ready (at least 30 s × start_concurrency).
        stop_grace_s: seconds a process group has after SIGTERM before SIGKILL.
        reputation: peers publish signed verdicts and keep a reputation.
        reputation_exclusion: peers drop senders their reputation excludes (on by default, as for a peer; see
            ``PeerConfig.reputation_exclusion``).
        start_concurrency: at most this many peers are starting at once (launched, not yet ``ready``); the next
            one is launched when one gets ready. 0: all at once. Bounds the CPU stampede of n imports on a small
            machine.
        start_retries: a peer whose process exits before its ``ready`` event (the DHT did not come up, say) is
            launched again up to this many times before the run fails.
        join_timeout_s: each peer's ``join_timeout_s`` (None: ``max(300, 20 s × num_peers)``: with staggered
            starts the first peer waits for the last).
        memory_sample_s: seconds between two samples of every peer's PSS (0: no samples).
        keep_snapshots: keep the peers' per-round θ snapshots after their consensus distance is computed
            (they take d × 4 bytes per peer and round, so they are deleted unless this is on).
        codec: wire codec of every peer's pseudo-gradients (``fp32``, ``fp16``, ``int8``, ``int4``,
            ``topk[:density=ρ]``, ``topk:density=ρ,dense=head``; ``PeerConfig.codec``).
        max_upload_mbit: upload cap of every peer, in Mbit/s (None: unlimited; ``PeerConfig.max_upload_mbit``):
            emulates home uplinks on loopback.
        peer_upload_mbit: per-peer upload caps, each ``PEER:MBIT`` (``3:2.4``: peer 3 sends at most 2.4 Mbit/s),
            in place of ``max_upload_mbit`` for that peer: a swarm of heterogeneous home uplinks. PEER is a peer
            index (honest ``0..honest-1``, then the Byzantine peers), each at most once; MBIT finite and > 0.
        overlap: every peer overlaps round r's communication with round r + 1's inner phase (on), never (off),
            or decides round by round (unset, the default; ``PeerConfig.overlap``).
        adaptive_mixing: every peer mixes less often while its measured disagreement is small
            (``PeerConfig.adaptive_mixing``, ``swarm.mix_schedule``; off by default).
        mix_precision: the precision every peer fetches its neighbours' states in for mixing: ``fp16`` (the
            default), ``int8`` or ``fp32`` (``PeerConfig.mix_precision``).
        peer_log_level: every peer's log level (``DEBUG``, ``INFO``, the default, ``WARNING`` or ``ERROR``, in
            any case), what ``p2p-guard --log-level`` sets for one peer; ``DEBUG`` puts, e.g., the traceback of a
            user task's failing method into ``peerN.log``.
    """

    task: str = "digits"
    honest: int = 6
    byzantine: int = 2
    attack: str | None = "sign_flip:scale=10"
    rounds: int = 10
    seed: int = 0
    guard: str = "semantic"
    inner_steps: int | None = None
    partition: str = "iid"
    run_id: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    startup_timeout_s: float = 120.0
    stop_grace_s: float = 10.0
    reputation: bool = True
    reputation_exclusion: bool = True
    start_concurrency: int = 8
    start_retries: int = 2
    join_timeout_s: float | None = None
    memory_sample_s: float = 10.0
    keep_snapshots: bool = False
    codec: str = "fp32"
    max_upload_mbit: float | None = None
    peer_upload_mbit: tuple[str, ...] = ()
    overlap: bool | None = None
    adaptive_mixing: bool = False
    mix_precision: str = "fp16"
    peer_log_level: str = "INFO"

    def __post_init__(self) -> None:
        """Check every setting.

        Raises:
            ValueError: naming the first bad setting and its value.
        """
        _at_least("honest", self.honest, 1)
        _at_least("byzantine", self.byzantine, 0)
        check_rounds(self.rounds, minimum=1)
        check_seed(self.seed)
        if self.inner_steps is not None:
            check_inner_steps(self.inner_steps)
        if self.byzantine > 0 and not self.attack:
            raise ValueError(f"byzantine={self.byzantine} needs an attack spec")
        if self.byzantine > 0 and self.attack and len(split_attack_mix(self.attack)) > self.byzantine:
            raise ValueError(f"attack mix {self.attack!r} names {len(split_attack_mix(self.attack))} attacks for "
                             f"byzantine={self.byzantine} peers: each attack needs at least one peer")
        if not self.task:
            raise ValueError("task must not be empty")
        if not self.guard:
            raise ValueError("guard must not be empty")
        if self.run_id is not None:
            check_run_id(self.run_id)  # the peers would refuse it one by one
        check_partition(self.partition)
        _at_least("start_concurrency", self.start_concurrency, 0)
        _at_least("start_retries", self.start_retries, 0)
        for flag in ("reputation", "reputation_exclusion", "keep_snapshots"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        for name in ("timeout_s", "startup_timeout_s", "stop_grace_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.join_timeout_s is not None and not (
            math.isfinite(self.join_timeout_s) and self.join_timeout_s > 0
        ):
            raise ValueError(
                f"join_timeout_s must be a positive number of seconds, got {self.join_timeout_s!r}"
            )
        if not isinstance(self.codec, str) or not self.codec:
            raise ValueError(f"codec must be a codec name (fp32, fp16, int8, int4, topk[:density=RHO][,dense=head]), "
                             f"got {self.codec!r}")  # the full check imports torch: simulate_cmd's preflight
        if self.mix_precision not in MIX_PRECISIONS:
            raise ValueError(f"mix_precision must be one of {', '.join(MIX_PRECISIONS)}; "
                             f"got mix_precision={self.mix_precision!r}")
        if isinstance(self.peer_log_level, str):  # as p2p-guard --log-level: debug is DEBUG
            object.__setattr__(self, "peer_log_level", self.peer_log_level.upper())
        if self.peer_log_level not in PEER_LOG_LEVELS:
            raise ValueError(f"peer_log_level must be one of {', '.join(PEER_LOG_LEVELS)}; "
                             f"got peer_log_level={self.peer_log_level!r}")
        if self.max_upload_mbit is not None and (
            isinstance(self.max_upload_mbit, bool) or not isinstance(self.max_upload_mbit, (int, float))
            or not 0 < self.max_upload_mbit < math.inf
        ):
            raise ValueError(f"max_upload_mbit must be finite and > 0 Mbit/s (omit it for no cap), "
                             f"got {self.max_upload_mbit!r}")
        self.peer_upload_caps()  # raises on a bad entry
        if not (math.isfinite(self.memory_sample_s) and self.memory_sample_s >= 0):
            raise ValueError(f"memory_sample_s must be >= 0 seconds, got {self.memory_sample_s!r}")

    @property
    def num_peers(self) -> int:
        """Total number of peers, honest and Byzantine."""
        return self.honest + self.byzantine

    @property
    def resolved_join_timeout_s(self) -> float:
        """The peers' ``join_timeout_s``: the setting, else ``max(300, 20 s × num_peers)``."""
        if self.join_timeout_s is not None:
            return self.join_timeout_s
        return max(MIN_JOIN_TIMEOUT_S, JOIN_TIMEOUT_PER_PEER_S * self.num_peers)

    @property
    def resolved_run_id(self) -> str:
        """The run id the peers use."""
        if self.run_id:
            return self.run_id
        from p2p_guard.tasks.registry import parse_task_spec  # torch-free

        try:
            part = parse_task_spec(self.task).run_id_part()
        except ValueError:  # reported by the task checks before any peer starts
            part = "task"
        return f"sim-{part}-seed{self.seed}"

    def peer_upload_caps(self) -> dict[int, float]:
        """The per-peer upload caps of ``peer_upload_mbit``, parsed: ``{peer index: Mbit/s}``.

        ``("3:2.4", "0:50")`` gives ``{3: 2.4, 0: 50.0}``.

        Raises:
            ValueError: one line naming ``peer_upload_mbit``, the bad entry and why: not ``PEER:MBIT``, a peer
                index outside ``0..num_peers-1`` or given twice, or MBIT not a finite number > 0.
        """
        entries = self.peer_upload_mbit
        if isinstance(entries, str) or not isinstance(entries, (tuple, list)):
            raise ValueError(f"peer_upload_mbit must be a list of PEER:MBIT entries, got {entries!r}")
        caps: dict[int, float] = {}
        for entry in entries:
            peer, mbit = _peer_upload_entry(entry, self.num_peers)
            if peer in caps:
                raise ValueError(f"peer_upload_mbit gives peer {peer} twice ({entry!r}); one cap per peer")
            caps[peer] = mbit
        return caps

    def upload_mbit_of(self, index: int) -> float | None:
        """Peer ``index``'s upload cap in Mbit/s: its ``peer_upload_mbit`` entry, else ``max_upload_mbit``.

        None: no cap.
        """
        return self.peer_upload_caps().get(index, self.max_upload_mbit)

    def is_byzantine(self, index: int) -> bool:
        """True for the peers after the honest ones."""
        return index >= self.honest

    def attack_of(self, index: int) -> tuple[str, int] | None:
        """The attack spec peer ``index`` runs and the size of its group (its colluders, itself included).

        Returns:
            ``(spec, group_size)`` for a Byzantine peer with an attack (one part of the mix, see ``attack``),
            None for an honest peer or without an attack.
        """
        if not self.is_byzantine(index) or not self.attack or index >= self.num_peers:
            return None
        specs = split_attack_mix(self.attack)
        base, extra = divmod(self.byzantine, len(specs))
        sizes = [base + (1 if g < extra else 0) for g in range(len(specs))]
        offset = index - self.honest
        for spec, size in zip(specs, sizes, strict=True):
            if offset < size:
                return spec, size
            offset -= size
        return None  # unreachable: the sizes add up to byzantine

    def to_dict(self) -> dict[str, Any]:
        """The resolved settings, as they go into the report."""
        out = dataclasses.asdict(self)
        out["run_id"] = self.resolved_run_id
        out["num_peers"] = self.num_peers
        out["join_timeout_s"] = self.resolved_join_timeout_s
        if self.byzantine == 0:
            out["attack"] = None
        return out


def _peer_upload_entry(entry: object, num_peers: int) -> tuple[int, float]:
    """One ``PEER:MBIT`` entry of ``peer_upload_mbit`` as ``(peer index, Mbit/s)``.

    Raises:
        ValueError: one line naming the entry: not ``PEER:MBIT``, PEER not an index in ``0..num_peers-1``, or
            MBIT not a finite number > 0.
    """
    if not isinstance(entry, str):
        raise ValueError(f"peer_upload_mbit entries must be PEER:MBIT strings (3:2.4), got {entry!r}")
    match = _PEER_UPLOAD.fullmatch(entry)
    if match is None:
        raise ValueError(f"peer_upload_mbit entry {entry!r} must be PEER:MBIT, a peer index and Mbit/s (3:2.4)")
    peer, mbit_text = int(match.group(1)), match.group(2)
    if peer >= num_peers:
        raise ValueError(f"peer_upload_mbit entry {entry!r}: there is no peer {peer} "
                         f"(the peers are 0..{num_peers - 1}: honest first, then Byzantine)")
    try:
        mbit = float(mbit_text)
    except ValueError:
        mbit = math.nan
    if not 0 < mbit < math.inf:
        raise ValueError(f"peer_upload_mbit entry {entry!r}: the cap must be a finite number of Mbit/s > 0, "
                         f"got {mbit_text.strip()!r}")
    return peer, mbit


def _at_least(name: str, value: int, minimum: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
