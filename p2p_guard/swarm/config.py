"""Settings of one volunteer peer: what it trains, how it talks to the swarm, and its limits.

The same dataclass is filled from a TOML file (``peers/*.toml``) and from command-line flags; flags win.
Every field carries its unit in its name (``_s`` seconds, ``_bytes`` bytes).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MAX_INNER_STEPS", "MAX_MIX_STEPS", "MAX_SEED", "MIX_PRECISIONS", "REACHABILITY", "CommitPhase",
           "FetchLimits", "PeerConfig", "check_inner_steps", "check_run_id", "check_seed", "config_from_mapping"]

#: Values of ``reachability``: ``auto`` lets libp2p's AutoNAT decide; ``public`` / ``private`` force it.
REACHABILITY = ("auto", "public", "private")
#: Most gossip steps one mixing may run (``early_mix_steps`` plus the swarm-size extra of
#: ``mixing.gossip_steps``); each costs a fetch of ``mix_peers`` states.
MAX_MIX_STEPS = 8
#: Values of ``mix_precision``: the precisions a mixing may ask its neighbours' states in
#: (``protocol.states.STATE_PRECISIONS``, repeated here: this module imports no torch).
MIX_PRECISIONS = ("fp32", "fp16", "int8")
#: Most inner steps H one round may run (10^6): 2,000 times DiLoCo's H = 500. Far beyond any useful round, it
#: catches a typo (``--inner-steps 100000000``) before the peer trains for days without ever committing.
MAX_INNER_STEPS = 1_000_000


@dataclass(frozen=True)
class PeerConfig:
    """Resolved settings of a volunteer (or simulated adversarial) peer.

    Attributes:
        initial_peers: multiaddrs of one or more bootstrap peers (``/ip4/HOST/tcp/PORT/p2p/PEERID``).
        run_id: name of the training run; peers of different runs ignore each other's updates.
        task: task spec: a built-in name (``digits``, ``fashion-mnist``, ``shakespeare``) or ``MODULE:CLASS``,
            with ``:key=value,...`` options (``fashion-mnist:data_dir=/data/fm``); see docs/tasks.md. Every peer
            of a run must give the same spec: a different model shape is rejected (``SHAPE_MISMATCH``), but the
            same shapes on other data would mix, so put the task in ``run_id`` when in doubt.
        seed: run seed; the initial model θ_0 is built from it, so every peer starts identical.
        peer_index: this peer's data shard in ``[0, num_peers)``, which also keys its private per-round
            generators (inner batches, the guard's held-out batch). Unset (the default): the generators are keyed
            by the PeerID (``training.streams``), so volunteers on defaults never draw the same batches, and the
            shard is picked at start among those no present peer claims, else derived from the PeerID
            (``swarm.shard_claims.choose_shard``; the log says which).
        num_peers: number of data shards (the intended swarm size).
        partition: ``iid`` or ``dirichlet:ALPHA`` (``by_work`` is implied for text).
        rounds: the run's round at which to leave: the peer takes part in rounds up to ``rounds`` − 1 of the run,
            counted from the run's start (round 0), not from its own join, so a late joiner or a restarted peer
            runs fewer; 0 means run until stopped.
        inner_steps: H, the number of inner AdamW steps per outer round, at most 10^6 (``MAX_INNER_STEPS``)
            (None: the task's default).
        guard: robust aggregation rule applied to received pseudo-gradients.
        assumed_byzantine: f̂, how many Byzantine senders the guard is configured to tolerate (None: guard default).
        attack: attack spec for a simulated adversarial peer (``NAME:key=value,...`` or ``module:Class``).
        byzantine_count: how many Byzantine peers the attack may assume collude (omniscient attacks use it).
        codec: wire codec of pseudo-gradients (``fp32``, ``fp16``, ``int8``, ``int4``, ``topk[:density=ρ]``,
            ``topk:density=ρ,dense=head``: the 1-D tensors and the output layer as float16, ``protocol.sparse``).
        outer_lr: outer learning rate α, finite and > 0 (None: from the codec, 0.7 as in DiLoCo for fp32, fp16,
            int8 and int4, ``training.outer.TOPK_OUTER_LR`` for topk, measured with SparseLoCo's step without
            momentum in docs/wire.md; ``training.outer.outer_defaults``).
        outer_momentum: outer Nesterov momentum, in [0, 1) (None: from the codec, 0.9 as in DiLoCo for fp32,
            fp16, int8 and int4, 0 for topk as in SparseLoCo, whose decayed error feedback ``ef_decay`` takes
            the momentum's place; ``training.outer.outer_defaults``).
        ef_decay: decay β of the error feedback of a lossy codec, in [0, 1]: e ← β·e + Δ before encoding
            (None: from the codec, 0.95 for topk as in SparseLoCo, 1 (plain error feedback) for fp16, int8 and
            int4; fp32 keeps no residual; ``training.error_feedback.default_ef_decay``).
        min_peers: the first round starts once this many peers (self included) are present.
        quorum_fraction: a round closes after a grace window once this fraction of present peers committed.
        grace_s: grace window after the quorum is reached, in seconds; less than ``commit_timeout_s``.
        commit_timeout_s: deadline of the commit phase, in seconds.
        reveal_wait_s: after our commit phase closed, the longest we wait for the ``close`` records of the
            other senders of our closed set before revealing our payload anyway, in seconds; less than
            ``fetch_timeout_s``, else the receivers may give up on us before we reveal.
        fetch_timeout_s: floor of each sender's payload deadline, in seconds; a large payload gets more, from its
            declared size and the sender's measured rate (``swarm.pacing``).
        join_timeout_s: how long to wait for ``min_peers`` before giving up, in seconds.
        max_parameters: P, the largest model accepted, in parameters; each codec's hard cap on a payload is its
            exact size for P parameters (``protocol.codecs.payload_cap_bytes``: fp32 4·P bytes, int8 ≈ P, ...).
        max_envelope_bytes: largest signed envelope accepted, in bytes.
        max_inbound_streams: concurrent inbound payload/state streams, all peers together (streams).
        max_inbound_streams_per_peer: concurrent inbound streams of one peer (streams); more get ``BUSY``.
        max_requests_per_peer_per_s: sustained payload/state requests per second of one peer (token bucket
            refill rate); more get ``BUSY``.
        request_burst: token-bucket depth: requests one peer may send at once (requests).
        serve_timeout_s: floor of the time allowed for writing one answer to a reader, in seconds; an answer
            of b bytes may take ``max(serve_timeout_s, b / min_serve_bytes_per_s)`` before it is cut off.
        min_serve_bytes_per_s: slowest reader the serve limit allows for, in bytes per second.
        request_timeout_s: time a caller's complete request has to arrive after its stream opens, in seconds.
        fetch_idle_timeout_s: longest a payload or state fetch waits for the next bytes of the answer, in
            seconds; a sender that stalls longer is cut off (``TIMEOUT``).
        min_fetch_bytes_per_s: slowest average rate a fetch accepts once ``fetch_idle_timeout_s`` has passed,
            in bytes per second: an answer of b bytes must be complete ``fetch_idle_timeout_s + b /
            min_fetch_bytes_per_s`` seconds after the request, else the sender is cut off (``TIMEOUT``).
        max_upload_mbit: upload cap, in Mbit/s (10^6 bits per second): the most this peer's payload/state server
            sends per second over all its streams together, like a BitTorrent client's upload limit (None:
            unlimited). Receivers keep up when it is at least about k · max(min_fetch_bytes_per_s, b /
            fetch_timeout_s) for b-byte answers to k receivers at once (exact bound: ``swarm.upload``,
            ``docs/networking.md``); the peer warns at start-up when it is below that for its own payloads.
        allow_peers: allow-list file, one base58 PeerID per line (None: open swarm; a file with none is an error).
            Peers outside it are ignored (commits, presence, votes) and their streams refused.
        identity: path of the Ed25519 identity file. A missing one is created (mode 0600, a new PeerID, logged)
            once the peer has started, only in an existing directory: a mistyped directory is an error (unlike an
            output file's, a key file's missing folder is not created: a new key is a new PeerID).
        host: address to listen on.
        port: TCP port (0 = any free port).
        announce_host: public address to announce to other peers (None: the listen address).
        use_relay: libp2p circuit relay: reach peers that are only reachable through a relay, and, once AutoNAT
            finds this peer publicly reachable, relay for others behind NAT (their traffic then costs this
            peer bandwidth, bounded by p2pd: 16 circuits per peer, 4 GiB per direction and 30 min per relayed
            connection). On by default, as in hivemind: a swarm with volunteers behind NAT needs public relays.
        use_auto_relay: when AutoNAT finds this peer unreachable (behind NAT, no port forward), reserve a slot on a
            public peer acting as relay and announce the relayed ``/p2p-circuit`` address, so others can open
            streams to it; does nothing on a reachable peer. On by default (hivemind: off), so a volunteer at
            home joins with no flags; needs ``use_relay``.
        nat_port_map: ask the home router to forward our port by UPnP / NAT-PMP (direct connections, no relay).
            On by default, as in hivemind; a router without UPnP just ignores it.
        reachability: ``auto`` (AutoNAT decides from the others' dial-backs), ``public`` (this peer is reachable:
            serve as relay at once) or ``private`` (behind NAT: use a relay at once, without waiting for AutoNAT).
        relays: multiaddrs (``/ip4/HOST/tcp/PORT/p2p/PEERID``) of the relays to use with ``use_auto_relay``, and
            only those: the reservation is made as soon as we are found private. Empty: public peers found through
            the libp2p DHT, the bootstrap node among them (libp2p then waits for 4 candidates or 3 minutes).
        device: ``auto`` (CUDA if available, else CPU), ``cpu`` or ``cuda``.
        bf16_autocast: on a CUDA device, run the inner phase's forward passes under bf16 autocast (parameters,
            gradients and optimiser state stay float32); no effect on CPU. ``--no-bf16-autocast`` keeps CUDA in
            float32.
        events: path of the JSON-lines event file; missing folders are created (None: no events).
        state_out: where to write the final model state; missing folders are created (None: not written).
        proof_dir: where equivocation proofs are written; missing folders are created (None: ``proofs/`` beside
            the event file, else beside the identity file).
        reputation: publish signed verdicts every round and fold everyone's into a per-sender reputation
            (``swarm.standing``); False: neither.
        reputation_exclusion: also drop, before aggregation, senders the reputation excludes (our own guard struck
            them in 3 of their last 4 rounds and rejected them at least once, and the votes we weigh agree:
            ``guard.reputation``), and leave them out of the mixing and catch-up samples. On by default since
            protocol version 2: each peer owns its model, so an exclusion by one honest peer never needs the
            others to agree, and neither small model differences nor Byzantine votes can exclude an honest sender
            (docs/threat-model.md §3.7a).
        start_peers: the first round waits until this many peers (self included) are present (None: ``min_peers``;
            at least ``min_peers``, else the first round would start where every later one pauses);
            later rounds pause only below ``min_peers``. ``simulate`` starts the swarm together with it.
        fanout: k, the most payloads fetched per round, drawn with private randomness among the round's commits
            (all of them in a swarm of at most k + 1 peers).
        max_staleness: largest round − base_round of an update that is still applied (with weight
            1/sqrt(1 + staleness)); a slower peer commits into the swarm's open round instead of being dropped.
        overlap: run the communication of round r (close, reveal, fetch, guard) beside the head of round r + 1's
            inner phase: its first τ steps (sized to outlast the last round's communication, at most H/2) continue
            from where round r's phase ended; when round r's step is applied, the head's progress is moved onto
            the new θ and the other H − τ steps run from there, so Δ is measured from the stepped θ (Streaming
            DiLoCo's overlap, arXiv:2501.18512). Checkpoint, evaluation and events run in the background. Unset
            (the default): automatic, round by round: overlap when the head would hide at least a tenth of a
            sequential round (``peer.overlap_pays``), else run the round sequentially (on digits, where
            communication is 30x the inner phase, overlap cost 0.8 points of accuracy and hid almost nothing).
            docs/protocol.md §7.8 has the measurements.
        overlap_warmup_rounds: with ``overlap``, rounds 0 .. overlap_warmup_rounds − 1 still run sequentially.
        mix_every: every this many rounds, after the outer step, move toward the post-step states of
            ``mix_peers`` sampled peers by clipped differences (ClippedGossip); 0 turns mixing off.
        adaptive_mixing: mix less often while the measured disagreement is small (every round again once it
            grows; at most every 4 rounds; ``swarm.mix_schedule``), to save the dense state
            traffic of a large model. Off by default.
        mix_precision: the precision the states a mixing needs are fetched in (the serving peer converts each
            state once): ``fp16`` (the default) 2·d bytes each, round to nearest, only while our θ and momentum
            stay within ±32768, else float32; ``int8`` 4·⌈d/1024⌉ + d bytes (the ``int8`` codec: one float32 scale
            per 1024 values), about a quarter of float32; ``fp32`` 4·d bytes. The states of mixing are most of a
            round's traffic; docs/protocol.md §7.8 measures bytes, accuracy and consensus distance of each.
            Catch-up and restarts always fetch float32 states. (Was ``mix_fp16``: on is ``fp16``, off ``fp32``.)
        mix_peers: how many peers' states one mixing step fetches (8: with 4, three sign-flip attackers of 10
            often held the median distance of a sample and spread the honest models to 0.08-0.13; with 8 the
            median stays honest; docs/protocol.md §7.8).
        mix_radius: cap on the clipping radius of a mixing step, relative to the norm of our θ.
        early_mix_rounds: in rounds 0 .. early_mix_rounds − 1 the mixing runs ``early_mix_steps`` gossip steps
            instead of one (the pseudo-gradients, and so the honest disagreement a round adds, are largest then).
        early_mix_steps: gossip steps of a mixing in the early rounds at up to 2(m + 1) peers, 1 to 8
            (``MAX_MIX_STEPS``; larger swarms run more, ``mixing.gossip_steps``); step s > 1 mixes toward the
            sampled peers' states after their step s − 1 (served as ``["mixed", [r, s − 1]]``).
            With 3 steps in rounds 0-4 the worst consensus distance of 12 rounds on digits fell from 0.032 to
            0.006 at 12 peers and from 0.064 to 0.010 at 16, in one process (docs/protocol.md §7.8).
        catch_up_peers: how many sampled peers' states a late joiner (or a peer ``catch_up_behind`` rounds
            behind) takes the coordinate-wise median of, together with its own.
        catch_up_behind: catch up when the swarm's median round is at least this many rounds ahead of ours (a
            peer that was frozen, cut off or very slow has missed that many outer steps; capped mixing alone
            closes such a gap slowly). 2 tolerates a presence record that lags its peer by one round.
        checkpoint_dir: folder of this peer's own checkpoint, written atomically every round and resumed from on
            restart (None: no checkpoint).
        snapshot_dir: folder where θ is written after every round as ``rNNNNN.npy`` (simulation reports compute
            the consensus distance from them; None: not written).
        control_file: JSON file read before every inner phase (fault injection in simulations):
            ``{"slowdown": F}`` makes the inner phase F times longer. None: not read.
        metrics_port: TCP port of a Prometheus endpoint, ``http://HOST:PORT/metrics`` on the listen address
            ``host`` (None or 0: off). Metric names: ``docs/metrics.md``.
    """

    initial_peers: tuple[str, ...] = ()
    run_id: str = "p2p-guard"
    task: str = "digits"
    seed: int = 0
    peer_index: int | None = None
    num_peers: int = 1
    partition: str = "iid"
    rounds: int = 10
    inner_steps: int | None = None
    guard: str = "semantic"
    assumed_byzantine: int | None = None
    attack: str | None = None
    byzantine_count: int = 0
    codec: str = "fp32"
    outer_lr: float | None = None
    outer_momentum: float | None = None
    ef_decay: float | None = None
    min_peers: int = 2
    quorum_fraction: float = 2.0 / 3.0
    grace_s: float = 2.0
    commit_timeout_s: float = 60.0
    reveal_wait_s: float = 10.0
    fetch_timeout_s: float = 30.0
    join_timeout_s: float = 300.0
    max_parameters: int = 1 << 28  # protocol.codecs.MAX_PARAMETERS, written out: this module does not import torch
    max_envelope_bytes: int = 64 * 1024
    max_inbound_streams: int = 64
    max_inbound_streams_per_peer: int = 4
    max_requests_per_peer_per_s: float = 5.0
    request_burst: int = 10
    serve_timeout_s: float = 10.0
    min_serve_bytes_per_s: int = 1024 * 1024
    request_timeout_s: float = 10.0
    fetch_idle_timeout_s: float = 5.0
    min_fetch_bytes_per_s: int = 64 * 1024
    max_upload_mbit: float | None = None
    allow_peers: str | None = None
    identity: str = "peer_identity.key"
    host: str = "0.0.0.0"
    port: int = 0
    announce_host: str | None = None
    use_relay: bool = True
    use_auto_relay: bool = True
    nat_port_map: bool = True
    reachability: str = "auto"
    relays: tuple[str, ...] = ()
    device: str = "auto"
    bf16_autocast: bool = True
    events: str | None = None
    state_out: str | None = None
    proof_dir: str | None = None
    reputation: bool = True
    reputation_exclusion: bool = True
    start_peers: int | None = None
    fanout: int = 8
    max_staleness: int = 4
    overlap: bool | None = None
    overlap_warmup_rounds: int = 1
    mix_every: int = 1
    adaptive_mixing: bool = False
    mix_precision: str = "fp16"
    mix_peers: int = 8
    mix_radius: float = 0.05
    early_mix_rounds: int = 5
    early_mix_steps: int = 3
    catch_up_peers: int = 5
    catch_up_behind: int = 2
    checkpoint_dir: str | None = None
    snapshot_dir: str | None = None
    control_file: str | None = None
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        _check_types(self)
        check_run_id(self.run_id)
        for name in ("byzantine_count", "assumed_byzantine"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0; got {name}={value}")
        _check_positive("num_peers", self.num_peers)
        _check_positive("min_peers", self.min_peers)
        if self.peer_index is not None and not 0 <= self.peer_index < self.num_peers:
            raise ValueError(f"peer_index must be in [0, num_peers); got peer_index={self.peer_index}, "
                             f"num_peers={self.num_peers}")
        check_rounds(self.rounds)
        check_seed(self.seed)
        if self.inner_steps is not None:
            check_inner_steps(self.inner_steps)
        if self.metrics_port is not None and self.metrics_port != 0 and self.metrics_port == self.port:
            raise ValueError(f"metrics_port must differ from port; got both {self.port}")
        if not 0.0 < self.quorum_fraction <= 1.0:
            raise ValueError(f"quorum_fraction must be in (0, 1]; got quorum_fraction={self.quorum_fraction}")
        for name in ("grace_s", "commit_timeout_s", "reveal_wait_s", "fetch_timeout_s", "join_timeout_s",
                     "max_requests_per_peer_per_s", "serve_timeout_s", "request_timeout_s",
                     "fetch_idle_timeout_s"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be finite and > 0; got {name}={getattr(self, name)}")
        _check_round_timing(self)
        if self.max_upload_mbit is not None and not 0 < self.max_upload_mbit < math.inf:
            raise ValueError(f"max_upload_mbit must be finite and > 0 (omit it for no cap); "
                             f"got max_upload_mbit={self.max_upload_mbit}")
        if self.outer_lr is not None and not (math.isfinite(self.outer_lr) and self.outer_lr > 0):
            raise ValueError(f"outer_lr must be finite and > 0; got outer_lr={self.outer_lr}")
        if self.outer_momentum is not None and not 0.0 <= self.outer_momentum < 1.0:
            raise ValueError(f"outer_momentum must be in [0, 1); got outer_momentum={self.outer_momentum}")
        if self.ef_decay is not None and not 0.0 <= self.ef_decay <= 1.0:
            raise ValueError(f"ef_decay must be in [0, 1]; got ef_decay={self.ef_decay}")
        _check_positive("max_parameters", self.max_parameters)
        _check_positive("max_envelope_bytes", self.max_envelope_bytes)
        for name in ("max_inbound_streams", "max_inbound_streams_per_peer", "request_burst",
                     "min_serve_bytes_per_s", "min_fetch_bytes_per_s"):
            _check_positive(name, getattr(self, name))
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda; got device={self.device!r}")
        if self.start_peers is not None:
            _check_positive("start_peers", self.start_peers)
            if self.start_peers < self.min_peers:  # the first round would start where the second pauses
                raise ValueError(f"start_peers must be >= min_peers; got start_peers={self.start_peers}, "
                                 f"min_peers={self.min_peers}")
        for name in ("fanout", "mix_peers", "catch_up_peers", "catch_up_behind"):
            _check_positive(name, getattr(self, name))
        for name in ("max_staleness", "mix_every", "overlap_warmup_rounds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {name}={getattr(self, name)}")
        if self.early_mix_rounds < 0:
            raise ValueError(f"early_mix_rounds must be >= 0; got early_mix_rounds={self.early_mix_rounds}")
        if not 1 <= self.early_mix_steps <= MAX_MIX_STEPS:
            raise ValueError(f"early_mix_steps must be in [1, {MAX_MIX_STEPS}]; got early_mix_steps="
                             f"{self.early_mix_steps}")
        if not math.isfinite(self.mix_radius) or self.mix_radius <= 0:
            raise ValueError(f"mix_radius must be finite and > 0; got mix_radius={self.mix_radius}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535]; got port={self.port}")
        if self.mix_precision not in MIX_PRECISIONS:
            raise ValueError(f"mix_precision must be one of {', '.join(MIX_PRECISIONS)}; "
                             f"got mix_precision={self.mix_precision!r}")
        if self.reachability not in REACHABILITY:
            raise ValueError(f"reachability must be one of {', '.join(REACHABILITY)}; "
                             f"got reachability={self.reachability!r}")
        if self.use_auto_relay and not self.use_relay:
            raise ValueError("use_auto_relay needs use_relay (pass --no-use-auto-relay with --no-use-relay)")
        if self.relays and not self.use_auto_relay:
            raise ValueError("relays are only used with use_auto_relay")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in [0, 65535]; got metrics_port={self.metrics_port}")
        _check_codec(self.codec)  # last: it imports torch (through the codecs), the checks above do not

    def resolved_proof_dir(self) -> Path:
        """The folder equivocation proofs go to (see ``proof_dir``)."""
        if self.proof_dir is not None:
            return Path(self.proof_dir)
        return Path(self.events if self.events is not None else self.identity).resolve().parent / "proofs"

    @property
    def resolved_outer_lr(self) -> float:
        """``outer_lr``, or the codec's default when None (0.7; ``TOPK_OUTER_LR`` for topk)."""
        if self.outer_lr is not None:
            return self.outer_lr
        from p2p_guard.training.outer import outer_defaults  # torch: only once a peer is built

        return outer_defaults(self.codec)[0]

    @property
    def resolved_outer_momentum(self) -> float:
        """``outer_momentum``, or the codec's default when None (0.9; 0 for topk: SparseLoCo, arXiv:2508.15706)."""
        if self.outer_momentum is not None:
            return self.outer_momentum
        from p2p_guard.training.outer import outer_defaults  # torch: only once a peer is built

        return outer_defaults(self.codec)[1]

    @property
    def resolved_ef_decay(self) -> float:
        """``ef_decay``, or the codec's default when None (0.95 for topk as in SparseLoCo, else 1)."""
        if self.ef_decay is not None:
            return self.ef_decay
        from p2p_guard.training.error_feedback import default_ef_decay  # torch: only once a peer is built

        return default_ef_decay(self.codec)

    @property
    def commit_phase(self) -> CommitPhase:
        """The settings the commit and close phases use (``swarm.rounds``)."""
        return CommitPhase(run_id=self.run_id, quorum_fraction=self.quorum_fraction, grace_s=self.grace_s,
                           commit_timeout_s=self.commit_timeout_s, reveal_wait_s=self.reveal_wait_s,
                           max_envelope_bytes=self.max_envelope_bytes)

    @property
    def fetch_limits(self) -> FetchLimits:
        """The settings the payload fetches use (``swarm.rounds``)."""
        return FetchLimits(run_id=self.run_id, max_parameters=self.max_parameters,
                           fetch_timeout_s=self.fetch_timeout_s, fetch_idle_timeout_s=self.fetch_idle_timeout_s,
                           min_fetch_bytes_per_s=self.min_fetch_bytes_per_s)

    def replace(self, **changes: Any) -> PeerConfig:
        """Return a copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as plain JSON-serialisable values."""
        data = dataclasses.asdict(self)
        data["initial_peers"] = list(self.initial_peers)
        data["relays"] = list(self.relays)
        return data


_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _check_types(config: PeerConfig) -> None:
    """Reject values of the wrong type (a TOML string where a number belongs, a bool for an int...)."""
    hints = typing.get_type_hints(PeerConfig)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        allowed = _allowed_types(hints[f.name])
        if isinstance(value, bool) and bool not in allowed:
            raise ValueError(f"{f.name} must be {_type_names(allowed)}; got {value!r}")
        if not isinstance(value, allowed):
            raise ValueError(f"{f.name} must be {_type_names(allowed)}; got {value!r}")
    for name in ("initial_peers", "relays"):
        if not all(isinstance(p, str) for p in getattr(config, name)):
            raise ValueError(f"{name} must be a list of multiaddr strings; got {getattr(config, name)!r}")


def _allowed_types(hint: Any) -> tuple[type, ...]:
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for a in args for t in _allowed_types(a))
    if origin is not None:
        return (origin,)
    if hint is float:
        return (float, int)
    return (type(None),) if hint is None else (hint,)


def _type_names(allowed: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in allowed)


def _check_codec(codec: str) -> None:
    # torch: imported only once every cheap check has passed
    from p2p_guard.protocol.codecs import check_local_codec

    check_local_codec(codec)  # names what is wrong: an unknown name (and the known ones) or a bad ρ


def _check_round_timing(config: PeerConfig) -> None:
    """Reject timing options of the round that contradict each other (each is already finite and > 0).

    - ``grace_s < commit_timeout_s``: the quorum is seen no earlier than the commit phase starts, so a grace
      window as long as the deadline never ends first and the phase could never close on quorum + grace
      (``swarm.rounds.await_commits``).
    - ``reveal_wait_s < fetch_timeout_s``: a sender that waits its whole close gate reveals ``reveal_wait_s``
      after its close, while a receiver that closed at the same time gives up on it ``fetch_timeout_s`` after
      it starts fetching; with the gate as long as the deadline, an honest sender held up by one sender that
      never closes is dropped as ``TIMEOUT`` by its receivers (docs/threat-model.md §3.3 counts on it).

    Raises:
        ValueError: one line naming both options and their values.
    """
    if config.grace_s >= config.commit_timeout_s:
        raise ValueError(f"grace_s must be < commit_timeout_s (a grace window that long never ends before the "
                         f"commit deadline); got grace_s={config.grace_s}, commit_timeout_s={config.commit_timeout_s}")
    if config.reveal_wait_s >= config.fetch_timeout_s:
        raise ValueError(f"reveal_wait_s must be < fetch_timeout_s (a sender that waits its whole close gate would "
                         f"reveal after its receivers' fetch deadline); got reveal_wait_s={config.reveal_wait_s}, "
                         f"fetch_timeout_s={config.fetch_timeout_s}")


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be > 0; got {name}={value}")


@dataclass(frozen=True)
class CommitPhase:
    """What the commit and close phases of a round read (``swarm.rounds``): a narrow view of :class:`PeerConfig`.

    Attributes:
        run_id: the run; commits and close records of other runs are not ours.
        quorum_fraction: the phase closes ``grace_s`` after this fraction of present peers committed.
        grace_s: grace window after the quorum, seconds.
        commit_timeout_s: deadline of the commit phase, seconds.
        reveal_wait_s: longest wait for the others' close records before we serve, seconds.
        max_envelope_bytes: largest signed envelope opened, bytes.
    """

    run_id: str
    quorum_fraction: float
    grace_s: float
    commit_timeout_s: float
    reveal_wait_s: float
    max_envelope_bytes: int


@dataclass(frozen=True)
class FetchLimits:
    """What the payload fetches of a round read (``swarm.rounds``): a narrow view of :class:`PeerConfig`.

    Attributes:
        run_id: the run (part of every request).
        max_parameters: P of the per-codec payload caps (``protocol.codecs.payload_cap_bytes``), parameters.
        fetch_timeout_s: floor of each sender's payload deadline, seconds (``swarm.pacing``).
        fetch_idle_timeout_s: longest wait for the next bytes of an answer, seconds.
        min_fetch_bytes_per_s: slowest average rate accepted after ``fetch_idle_timeout_s``, bytes per second.
    """

    run_id: str
    max_parameters: int
    fetch_timeout_s: float
    fetch_idle_timeout_s: float
    min_fetch_bytes_per_s: int


#: Largest run seed: torch's generators take a signed 64-bit seed.
MAX_SEED = 2**63 - 1
#: Most outer rounds a peer or a simulation may be asked to run (0 for a peer: until stopped). A billion rounds
#: is forever at any round time; the bound turns a mistyped huge number into a clear error.
MAX_ROUNDS = 10**9


def check_rounds(rounds: int, minimum: int = 0) -> None:
    """Check a number of outer rounds: an integer in ``[minimum, MAX_ROUNDS]``.

    Raises:
        ValueError: naming ``rounds`` and its value.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not minimum <= rounds <= MAX_ROUNDS:
        raise ValueError(f"rounds must be an integer in [{minimum}, {MAX_ROUNDS:,}]; got rounds={rounds!r}")


def check_inner_steps(steps: int) -> None:
    """Check H, the inner steps per round: an integer in ``[1, MAX_INNER_STEPS]``.

    Raises:
        ValueError: naming the value and the bound.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_INNER_STEPS:
        raise ValueError(f"inner_steps must be an integer in [1, {MAX_INNER_STEPS}] (10^6); got inner_steps={steps}")


def check_run_id(run_id: str) -> None:
    """A run id must be 1-64 characters of ``[A-Za-z0-9._-]`` (it is part of every DHT key of the run).

    Raises:
        ValueError: naming the value.
    """
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"run_id must be 1-64 characters of [A-Za-z0-9._-]; got run_id={run_id!r}")


def check_seed(seed: int) -> None:
    """A run seed must be an int in ``[0, MAX_SEED]`` (θ_0, the shards and every generator derive from it).

    Raises:
        ValueError: naming the value.
    """
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**63 - 1]; got seed={seed}")


def config_from_mapping(values: dict[str, Any], *, source: str | Path = "<mapping>") -> PeerConfig:
    """Build a :class:`PeerConfig` from a mapping (a parsed TOML table), rejecting unknown keys.

    Args:
        values: keys are :class:`PeerConfig` field names.
        source: where the mapping came from, for error messages.

    Returns:
        The validated config.

    Raises:
        ValueError: on an unknown key or an invalid value (the message names the key and the source).
    """
    known = {f.name for f in dataclasses.fields(PeerConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{source}: unknown setting(s) {unknown}; known settings: {sorted(known)}")
    values = dict(values)
    for name in ("initial_peers", "relays"):
        if name in values:
            peers = values[name]
            values[name] = (peers,) if isinstance(peers, str) else tuple(peers)
    try:
        return PeerConfig(**values)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: {e}") from e
